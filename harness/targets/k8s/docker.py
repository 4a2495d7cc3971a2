"""The docker target, for a single GPU host without Kubernetes: `docker run` command lines of the official
images (bare vLLM, Triton, Ray Serve LLM, KServe's runtimes), one side after the other, rendered as a shell
script (results/<run>/docker/commands.sh) with the files it mounts.

Each server runs in its own network namespace with no published port, bound to loopback where it can be; the
load client (the harness image) joins that namespace (`--network container:<server>`, never the host's
network) and drives the server on 127.0.0.1."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import LayerbenchError
from harness.host import gpus as host_info
from harness.profile.schema import LoadProfile
from harness.targets.k8s.common import (
    Deployed,
    check_stack,
    object_name,
    served_name,
)
from harness.targets.k8s.driver_check import check_host, script_check
from harness.targets.k8s.images import PROBE_MARKER, VERSION_PROBE
from harness.targets.k8s.plan import ClusterSettings, settle
from harness.targets.k8s.render import side_labels
from harness.targets.k8s.render_load import LOAD_HF_HOME, LoadCommand, load_command, profile_text, tokenizer_dir
from stacks.base import Stack, target_form

PROFILE = "/etc/layerbench/profile.yaml"
# docker options that would give a measured server or its client privileges or open it beyond its namespace
PRIVILEGED = {"--privileged", "--cap-add", "-p", "--publish", "-P", "--publish-all", "--device"}
NAMESPACES = {"--network", "--net", "--pid", "--ipc", "--uts", "--userns", "--cgroupns"}


@dataclass
class DockerSide:
    label: str
    stack: str
    server: str  # the server container's name
    image: str  # the server's image: what follows it in `run` is the container's own command line
    run: list[str]  # docker run ... of the server
    ready: tuple[str, str]  # (URL, JSON body or "") that answers 2xx once the server serves
    load: list[str]  # docker run ... of the load client
    engine_image: str = ""  # the image that runs the side's engine (its vLLM is checked first)


@dataclass
class DockerPlan:
    run_id: str
    sides: list[DockerSide]
    files: dict[str, str] = field(default_factory=dict)  # path under the docker folder -> content
    settings: ClusterSettings | None = None  # as settled for this run
    aliases: tuple[str, ...] = ()  # the stack's renamings of vllm:*, for its audit


def _side(stack: Stack, cs: ClusterSettings, run_id: str, label: str, plan: DockerPlan) -> tuple[DockerSide, Deployed]:
    """One side's server as its adapter's docker form renders it (the baseline: bare vLLM's)."""
    kind = "vllm" if label == "baseline" else stack.kind
    name = object_name(run_id, label, kind)
    form = target_form(kind, "docker")(stack, cs, name, label, plan.files)
    deployed = Deployed(objects=[], ready=[], url=form.url, engine_selector=name, metrics=form.metrics,
                        aliases=form.aliases, protocol=form.protocol, model=served_name(cs))
    return DockerSide(label=label, stack=kind, server=name, image=form.image, run=form.run,
                      ready=(form.ready, form.ready_body), load=[], engine_image=form.image), deployed


def render_docker(stack: Stack, profile: LoadProfile, cs: ClusterSettings, run_id: str, command: str = "run",
                  repeats: int | None = None) -> DockerPlan:
    """The sides of `command` (run: the stack; compare, audit: its bare vLLM baseline first) as docker runs."""
    check_stack(stack.kind, "docker")
    if cs.load_parallelism > 1 or cs.replicas > 1:
        raise LayerbenchError("the docker target runs one engine and one load client per side: load_parallelism and "
                              "replicas above 1 need --target k8s")
    cs, _ = settle(cs, stack.kind, getattr(stack.options, "mode", None), profile.engine)
    plan = DockerPlan(run_id=run_id, sides=[], files={"profile.yaml": profile_text(profile)}, settings=cs)
    for label in side_labels(command):
        side, deployed = _side(stack, cs, run_id, label, plan)
        plan.aliases = deployed.aliases
        side.load = ["docker", "run", "--rm", "--name", f"{side.server}-load", "--network", f"container:{side.server}",
                     "--user", "$LOAD_USER", "--read-only", "--tmpfs", "/tmp", "-e", "HOME=/tmp",
                     "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
                     "-v", f"$RUN_DIR/profile.yaml:{PROFILE}:ro", "-v", f"$RESULTS/{label}:/results",
                     "-v", f"$HF_CACHE:{LOAD_HF_HOME}:ro", cs.load_image,  # the served model's tokenizer.json
                     "layerbench", *load_command(LoadCommand(command, repeats), deployed, PROFILE, "/results",
                                                 tokenizer=tokenizer_dir(cs))]
        plan.sides.append(side)
    if cs.check_driver:  # on the GPU host itself: its driver against every engine image, before any pull
        check_host(host_info.host_gpus(), [s.engine_image for s in plan.sides])
    return plan


def _option_problems(options: list[str], own_netns: str | None) -> list[str]:
    """Problems of docker options (what comes before the image). own_netns: the load client's only allowed
    network, `container:<server>`; a server may not set one."""
    problems = []
    for i, arg in enumerate(options):
        key, eq, inline = arg.partition("=")
        value = inline if eq else (options[i + 1] if i + 1 < len(options) else "")
        if key in PRIVILEGED:
            problems.append(f"{key} is not allowed")
        elif key in NAMESPACES and value == "host":
            problems.append(f"{key} host is not allowed")
        elif key in ("--network", "--net") and value != own_netns:
            problems.append(f"{key} {value} is not allowed" + (f" (only {own_netns})" if own_netns else ""))
    if own_netns and not any(a in ("--network", "--net") for a in options):
        problems.append(f"it must join the server's network namespace (--network {own_netns})")
    return problems


def command_problems(plan: DockerPlan, cs: ClusterSettings) -> list[str]:
    """Docker options no rendered command may carry (host namespaces, privileges, published ports), and a load
    client that does not join its server's network namespace; [] when the commands may run."""
    problems = []
    for side in plan.sides:
        who = f"{side.label} ({side.stack})"
        server_options = side.run[:side.run.index(side.image)]
        load_options = side.load[:side.load.index(cs.load_image)] if cs.load_image in side.load else side.load
        problems += [f"{who} server: {p}" for p in _option_problems(server_options, None)]
        problems += [f"{who} load client: {p}" for p in _option_problems(load_options, f"container:{side.server}")]
    return problems


def _sh(arg: str) -> str:
    """One word of the script: the script's own variables expand, everything else is quoted."""
    if "$" in arg and re.fullmatch(r"[A-Za-z0-9_./:=@${}-]+", arg):
        return f'"{arg}"'
    return shlex.quote(arg)


def _line(argv: list[str]) -> str:
    return " ".join(_sh(a) for a in argv)


PROBE = ("import sys, urllib.request as u; body = sys.argv[2].encode() or None; "
         "u.urlopen(u.Request(sys.argv[1], data=body, headers={'Content-Type': 'application/json'}), timeout=30)")


def version_check(plan: DockerPlan) -> list[str]:
    """The script's first step after the driver check: every engine image's vLLM, read by running it once (and so
    pulled); a set whose releases differ (NVIDIA's 0.11.1+9114fd76.nv25.12 is 0.11.1) stops the script with the
    table, before any engine is started, unless ALLOW_VERSION_MISMATCH=1."""
    images = list(dict.fromkeys(side.engine_image for side in plan.sides))
    probe = shlex.quote(VERSION_PROBE[2])
    out = ["", "# --- engine versions, before any engine starts ---", "declare -A VLLM"]
    for image in images:
        out.append(f"VLLM[{shlex.quote(image)}]=\"$(docker run --rm --network none --entrypoint python3 "
                   f"{shlex.quote(image)} -c {probe} | sed -n 's/^{PROBE_MARKER} //p')\"")
    out += ['if [ "$(printf \'%s\\n\' "${VLLM[@]%%+*}" | sort -u | wc -l)" != 1 ] && '
            '[ "${ALLOW_VERSION_MISMATCH:-0}" != 1 ]; then',
            '  echo "the images run different vLLM versions (image -> vLLM):" >&2',
            '  for i in "${!VLLM[@]}"; do echo "  $i -> ${VLLM[$i]:-no vLLM}" >&2; done',
            '  echo "choose images of one vLLM, or ALLOW_VERSION_MISMATCH=1 to compare anyway" >&2; exit 3',
            "fi"]
    return out


def script(plan: DockerPlan, cs: ClusterSettings, title: str) -> str:
    """commands.sh: the engine versions checked, then each side in turn (server, wait until it serves, load, its
    log and what ran kept under $RESULTS/<side>/, server removed)."""
    cs = plan.settings or cs
    servers = " ".join(side.server for side in plan.sides)
    out = [
        "#!/usr/bin/env bash",
        f"# layerbench {title} on the docker target (run {plan.run_id}), rendered by layerbench.",
        "# One side after the other on this GPU host. Each server runs in its own network namespace with no",
        "# published port; the load client joins it (--network container:<server>) and drives it on 127.0.0.1.",
        f"# HF_CACHE (default ~/.cache/huggingface) must hold {cs.model} at revision {cs.model_revision}: the",
        "# engines read it offline. RESULTS (default: the run folder above this script) receives each side's load",
        "# results, server log and docker-side.json; then `make report RUN=<run>` writes the compare's report.",
        "set -euo pipefail",
        'RUN_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'HF_CACHE="${HF_CACHE:-$HOME/.cache/huggingface}"',
        'RESULTS="${RESULTS:-$(dirname "$RUN_DIR")}"',
        f"READY_TIMEOUT_S={int(cs.ready_timeout_s)}",
        f"PROBE={shlex.quote(PROBE)}",
        'mkdir -p "$RESULTS"',
        '# the load client runs as the invoking user; as root, as an unprivileged uid that owns the results',
        'LOAD_USER="$(id -u):$(id -g)"',
        'if [ "$(id -u)" = 0 ]; then LOAD_USER=10001:10001; chown 10001:10001 "$RESULTS"; fi',
        f"trap 'docker rm -f {servers} >/dev/null 2>&1 || true' EXIT",
        "",
        "wait_ready() {  # container url [json body]: until the url answers 2xx, while the container runs",
        "  local deadline=$((SECONDS + READY_TIMEOUT_S))",
        '  until docker exec "$1" python3 -c "$PROBE" "$2" "${3:-}" >/dev/null 2>&1; do',
        "    if [ \"$(docker inspect -f '{{.State.Running}}' \"$1\")\" != true ]; then",
        '      docker logs --tail 40 "$1" >&2; echo "$1 exited during startup" >&2; exit 1',
        "    fi",
        '    if [ "$SECONDS" -ge "$deadline" ]; then echo "$1 not ready after ${READY_TIMEOUT_S}s" >&2; exit 1; fi',
        "    sleep 5",
        "  done",
        "}",
        *(script_check([s.engine_image for s in plan.sides]) if cs.check_driver else []),
        *version_check(plan),
    ]
    for side in plan.sides:
        url, body = side.ready
        mine = f'"$RESULTS/{side.label}"'
        record = (f'printf \'{{"stack": "{side.stack}", "images": ["{side.engine_image}"], "engine_version": "%s", '
                  f'"status": "%s"}}\\n\' "${{VLLM[{shlex.quote(side.engine_image)}]}}" '
                  f'"$([ "$rc" = 0 ] && echo complete || echo failed)" > {mine}/docker-side.json')
        out += ["", f"# --- {side.label}: {side.stack} ({side.image}) ---",
                f'mkdir -p {mine}/logs; if [ "$(id -u)" = 0 ]; then chown 10001:10001 {mine}; fi', _line(side.run),
                _line(["wait_ready", side.server, url, *([body] if body else [])]),
                f"rc=0; {_line(side.load)} || rc=$?",
                f'docker logs {side.server} > {mine}/logs/{side.server}.log 2>&1',
                f"docker rm -f {side.server} >/dev/null", record,
                f'[ "$rc" = 0 ] || {{ echo "{side.label}: the load failed (exit $rc)" >&2; exit "$rc"; }}']
    return "\n".join(out) + "\n"


def docker_answers() -> bool:
    """Whether a docker daemon answers here (`docker info`)."""
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run_commands(path: Path, console) -> int:
    """Runs commands.sh, its output streamed; LayerbenchError naming its exit status when it fails."""
    import subprocess

    console.print(f"running {path} (docker)", highlight=False)
    rc = subprocess.run(["bash", str(path)], check=False).returncode
    if rc != 0:
        raise LayerbenchError(f"{path} failed (exit {rc}); what it measured is kept beside it")
    return 0


def write_docker(plan: DockerPlan, cs: ClusterSettings, title: str, out_dir: Path) -> list[Path]:
    """results/<run>/docker/commands.sh and the files it mounts; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rel, text in plan.files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    path = out_dir / "commands.sh"
    path.write_text(script(plan, cs, title))
    path.chmod(0o755)
    return [path, *paths]
