"""Ray Serve's three request paths as one typed option: each path's switches reach Ray's environment locally and on
a cluster, a Ray that lacks a switch is refused before anything is deployed, and the two paths that bind on all
interfaces run the command in a private network namespace (locally only)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.errors import LayerbenchError
from harness.host import netns
from stacks.base import ENGINE_VENV, DeploySettings, get_stack
from stacks.ray import REQUEST_PATHS, SWITCH_SOURCE, missing_switches


def fake_ray(root: Path, *defined: str) -> Path:
    """A site-packages with a Ray whose sources define only `defined` of the switches."""
    (root / "ray").mkdir(parents=True)
    (root / "ray" / "__init__.py").write_text("")
    for var, src in SWITCH_SOURCE.items():
        (root / src).parent.mkdir(parents=True, exist_ok=True)
        with (root / src).open("a") as f:
            f.write(f"{var} = os.environ.get('{var}', '0') == '1'\n" if var in defined else "")
    return root


def test_a_ray_without_a_paths_switch_lacks_that_path(tmp_path):
    old = fake_ray(tmp_path / "old")  # a Ray from before HAProxy ingress and direct streaming
    assert missing_switches("proxy", [old]) == []
    assert [m.split(" ")[0] for m in missing_switches("haproxy", [old])] == ["RAY_SERVE_ENABLE_HA_PROXY"]
    assert [m.split(" ")[0] for m in missing_switches("direct", [old])] == ["RAY_SERVE_ENABLE_HA_PROXY",
                                                                         "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING"]
    halfway = fake_ray(tmp_path / "halfway", "RAY_SERVE_ENABLE_HA_PROXY")
    assert missing_switches("haproxy", [halfway]) == [] and len(missing_switches("direct", [halfway])) == 1
    assert missing_switches("direct", [tmp_path / "no-ray"]) == []  # no Ray at all: deploy() says `make setup-ray`
    installed = sorted(ENGINE_VENV.glob("lib/python3*/site-packages"))
    if any((sp / "ray").is_dir() for sp in installed):  # the locked Ray 2.60.0 has all three
        assert all(missing_switches(p, installed) == [] for p in REQUEST_PATHS)


def test_each_path_sets_its_switches_and_only_the_all_interface_ones_need_a_private_network(tmp_path):
    def ray(path: str, target: str = "local"):
        return get_stack("ray")(DeploySettings(options={"request_path": path}, target=target,
                                               log_dir=tmp_path / "logs"))

    for path, switches in REQUEST_PATHS.items():
        stack = ray(path)
        env = stack.driver_config()["env"]
        assert {k: env[k] for k in switches} == switches and stack.driver_config()["request_path"] == path
        assert not {k for k in ("RAY_SERVE_ENABLE_HA_PROXY", "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING")
                    if k in env} - set(switches)
        why = stack.private_network()
        assert (why is None) == (path == "proxy"), why
        assert ray(path, "k8s").private_network() is None  # a pod's network is its own
    assert "all interfaces" in ray("haproxy").private_network()


def test_a_cluster_gets_the_paths_switches_in_every_ray_container(tmp_path):
    from harness.targets.k8s.plan import ClusterSettings
    from harness.targets.k8s.render_ray import render_ray, serve_config

    cs = ClusterSettings(namespace="lb")
    for path, switches in REQUEST_PATHS.items():
        stack = get_stack("ray")(DeploySettings(options={"request_path": path}, target="k8s",
                                                log_dir=tmp_path / "logs"))
        svc = render_ray(stack, cs, "20261203-000000-x", "stack").objects[0]
        cluster = svc["spec"]["rayClusterConfig"]
        for group in (cluster["headGroupSpec"], cluster["workerGroupSpecs"][0]):
            env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
            assert {k: env.get(k) for k in switches} == switches, (path, group)
        app = yaml.safe_load(svc["spec"]["serveConfigV2"])["applications"][0]
        # direct streaming refuses an ingress_deployment_config: the LLMServer is the ingress
        assert ("ingress_deployment_config" in app["args"]) == (path != "direct")
        assert serve_config(stack, cs)["applications"][0]["args"] == app["args"]


def test_a_command_called_in_process_is_not_replaced_by_its_namespaced_self(monkeypatch):
    monkeypatch.setattr(netns, "AS_COMMAND", False)
    monkeypatch.delenv(netns.MARK, raising=False)
    with pytest.raises(LayerbenchError, match="runs only as a command"):
        netns.enter("binds on all interfaces")


HEAD = ("Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls\n")


def test_only_a_namespace_with_loopback_alone_is_private(tmp_path, monkeypatch):
    net = tmp_path / "dev"  # /proc/self/net/dev as Linux 6.1 writes it, in a new namespace and on a host
    net.write_text(HEAD + "    lo:       0       0    0    0    0     0          0         0        0       0\n")
    monkeypatch.setattr(netns, "NET", net)
    assert netns.loopback_only()
    net.write_text(net.read_text() + "  eth0: 161524904  503584    0    0    0     0          0         0 1615\n")
    assert not netns.loopback_only()
    # run again and still not private: an error, never a second run
    monkeypatch.setenv(netns.MARK, "1")
    with pytest.raises(LayerbenchError, match="besides loopback"):
        netns.enter("binds on all interfaces")

