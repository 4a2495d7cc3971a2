"""No secret is written to results, logs or reports: which values are secrets (environment, kubeconfig, a GCP
key file), scrubbing them from files in place (text only, atomically), the environment a deployment gets,
and the whole `layerbench run` path with secrets planted where they would reach the results."""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import pytest
import yaml

from harness.redact import (
    REDACTED,
    deployment_env,
    kubeconfig_secrets,
    redact_text,
    redact_tree,
    secret_values,
)


def token() -> str:
    return "s3cr3t" + secrets.token_hex(12)


def kubeconfig(path: Path, **user: str) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                                    "users": [{"name": "me", "user": user}]}))
    return path


# --- which values are secrets --------------------------------------------------------------------------

def test_secret_variables_by_name_and_short_values_ignored(tmp_path):
    env = {"HF_TOKEN": "hf_" + "a" * 20, "AWS_SECRET_ACCESS_KEY": "b" * 40, "OPENAI_API_KEY": "sk-" + "c" * 20,
           "AZURE_STORAGE_KEY": "d" * 30, "DB_PASSWORD": "e" * 12, "HUGGING_FACE_HUB_TOKEN": "f" * 10,
           "GITHUB_TOKEN": "short",  # under 8 characters: would scrub ordinary words
           "PATH": "/usr/local/bin:/usr/bin", "VLLM_CACHE_ROOT": "/root/.cache/vllm-very-long",
           "HF_TOKEN_PATH": "/root/.cache/huggingface/token",  # a pointer, not the secret
           "TOKENIZERS_PARALLELISM": "false-but-long", "VLLM_MAX_TOKENS": "1234567890",  # not secrets at all
           "HOME": str(tmp_path)}
    found = secret_values(env)
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "AZURE_STORAGE_KEY", "DB_PASSWORD",
                 "HUGGING_FACE_HUB_TOKEN"):
        assert env[name] in found, name
    for name in ("GITHUB_TOKEN", "PATH", "VLLM_CACHE_ROOT", "HF_TOKEN_PATH", "TOKENIZERS_PARALLELISM",
                 "VLLM_MAX_TOKENS", "HOME"):
        assert env[name] not in found, name


def test_kubeconfig_credentials(tmp_path):
    tok, key, cert, pw = token(), token(), token(), token()
    a = kubeconfig(tmp_path / "a", token=tok, **{"client-key-data": key})
    b = kubeconfig(tmp_path / "b", **{"client-certificate-data": cert, "password": pw, "username": "admin-user"})
    c = tmp_path / "c"
    c.write_text(yaml.safe_dump({"users": [{"name": "x", "user": {"auth-provider": {
        "name": "oidc", "config": {"id-token": "idtok-123456789", "refresh-token": "ref-123456789"}}}}]}))
    broken = tmp_path / "broken"
    broken.write_text("users: [unclosed\n  - : :")
    unreadable = tmp_path / "unreadable"
    unreadable.write_text("users: []")
    unreadable.chmod(0)
    env = {"KUBECONFIG": os.pathsep.join(str(p) for p in (a, b, c, broken, unreadable, tmp_path / "missing"))}
    found = secret_values(env)
    assert {tok, key, cert, pw, "idtok-123456789", "ref-123456789"} <= found
    assert "admin-user" not in found and str(a) not in found  # a user name and the file's path are not secrets
    assert kubeconfig_secrets([broken, tmp_path / "missing", tmp_path]) == set()  # skipped, never raised


def test_default_kubeconfig_is_read_from_home(tmp_path):
    (tmp_path / ".kube").mkdir()
    tok = token()
    kubeconfig(tmp_path / ".kube" / "config", token=tok)
    assert tok in secret_values({"HOME": str(tmp_path)})


def test_gcp_key_file_private_key_in_every_form(tmp_path):
    pem = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n"
           "-----END PRIVATE KEY-----\n")
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({"type": "service_account", "private_key": pem, "client_email": "x@y.z"}))
    found = secret_values({"GOOGLE_APPLICATION_CREDENTIALS": str(key_file)})
    assert pem in found and json.dumps(pem)[1:-1] in found  # raw, and as it looks inside a JSON file
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" in found  # one line of it, as a log might print it
    assert str(key_file) not in found and "x@y.z" not in found


# --- scrubbing ------------------------------------------------------------------------------------------

def test_redact_text_longest_first():
    assert redact_text("a=abcdefgh b=abcdefghijkl", {"abcdefgh", "abcdefghijkl"}) == \
        f"a={REDACTED} b={REDACTED}"
    assert redact_text("nothing here", {"abc"}) == "nothing here"  # too short to be a secret: untouched


def test_redact_tree_text_files_only(tmp_path):
    s = token()
    (tmp_path / "logs" / "ray").mkdir(parents=True)
    files = {
        "run.json": json.dumps({"version": s}),
        "requests.jsonl": json.dumps({"x": s}) + "\n",
        "summary.md": f"| {s} |",
        "report.html": f"<td>{s}</td>",
        "logs/vllm-1.log": f"env HF_TOKEN={s}\n",
        "logs/ray/worker-1.out": f"{s}\n",
        "logs/ray/worker-1.err": f"{s}\n",
        "logs/ray/raylet": f"no suffix, still text: {s}\n",
        "notes.txt": "clean",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "logs" / "odd.log").write_bytes(b"\xff\xfe broken utf-8 " + s.encode() + b" \x00 nul\n")
    png = b"\x89PNG\r\n\x1a\n" + s.encode() + b"\x00" * 8
    (tmp_path / "plot.png").write_bytes(png)
    blob = b"\x00\x01binary" + s.encode()
    (tmp_path / "data.bin2").write_bytes(blob)  # unknown suffix with NUL bytes: binary, left alone
    (tmp_path / "logs" / "vllm-1.log").chmod(0o640)

    changed = redact_tree(tmp_path, {s})
    assert sorted(p.relative_to(tmp_path).as_posix() for p in changed) == sorted(
        [n for n in files if n != "notes.txt"] + ["logs/odd.log"])
    for name in files:
        assert s not in (tmp_path / name).read_text()
    assert json.loads((tmp_path / "run.json").read_text()) == {"version": REDACTED}
    assert (tmp_path / "logs" / "odd.log").read_bytes() == \
        b"\xff\xfe broken utf-8 " + REDACTED.encode() + b" \x00 nul\n"
    assert (tmp_path / "plot.png").read_bytes() == png and (tmp_path / "data.bin2").read_bytes() == blob
    assert stat.S_IMODE((tmp_path / "logs" / "vllm-1.log").stat().st_mode) == 0o640  # mode kept
    assert not list(tmp_path.rglob("*redact-tmp*"))
    assert redact_tree(tmp_path, {s}) == []  # nothing left to change
    assert redact_tree(tmp_path / "missing", {s}) == [] and redact_tree(tmp_path, set()) == []


def test_redact_tree_replaces_atomically(tmp_path, monkeypatch):
    s = token()
    path = tmp_path / "run.json"
    path.write_text(f'{{"v": "{s}"}}')
    with path.open() as before:  # a reader holding the old file never sees a half-written one
        redact_tree(tmp_path, {s})
        assert s in before.read()
    assert s not in path.read_text()

    path.write_text(f'{{"v": "{s}"}}')

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        redact_tree(tmp_path, {s})
    assert path.read_text() == f'{{"v": "{s}"}}'  # the original is intact
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # and no temporary file is left


def test_redact_tree_does_not_follow_symlinks(tmp_path):
    s = token()
    outside = tmp_path / "outside.txt"
    outside.write_text(s)
    root = tmp_path / "results"
    root.mkdir()
    (root / "link.txt").symlink_to(outside)
    assert redact_tree(root, {s}) == [] and outside.read_text() == s


# --- what a deployment process gets ---------------------------------------------------------------------

def test_deployment_env_drops_secrets_unless_asked():
    environ = {"PATH": "/usr/bin", "HOME": "/root", "HF_HOME": "/cache/hf", "HF_TOKEN": "hf_" + "x" * 20,
               "AWS_SECRET_ACCESS_KEY": "y" * 40, "AWS_ACCESS_KEY_ID": "AKIA" + "z" * 16, "KUBECONFIG": "/k",
               "GOOGLE_APPLICATION_CREDENTIALS": "/sa.json", "VLLM_API_KEY": "k" * 20, "RAY_AUTH_MODE": "disabled",
               "CUDA_VISIBLE_DEVICES": "0", "NETRC": "/root/.netrc", "TOKENIZERS_PARALLELISM": "false",
               "HF_TOKEN_PATH": "/root/.cache/huggingface/token"}
    env = deployment_env(environ)
    assert env == {"PATH": "/usr/bin", "HOME": "/root", "HF_HOME": "/cache/hf", "RAY_AUTH_MODE": "disabled",
                   "CUDA_VISIBLE_DEVICES": "0", "TOKENIZERS_PARALLELISM": "false"}
    assert deployment_env(environ, keep=["HF_TOKEN"])["HF_TOKEN"] == environ["HF_TOKEN"]


# --- Ray keeps its session logs scrubbed ----------------------------------------------------------------

def test_ray_teardown_scrubs_the_session_logs_it_keeps(tmp_path, monkeypatch):
    import shutil

    from stacks.base import DeploySettings
    from stacks.base.procs import ManagedProcess
    from stacks.ray import RayStack

    s = token()
    monkeypatch.setenv("HF_TOKEN", s)
    stack = RayStack(DeploySettings(log_dir=tmp_path / "logs"))
    session_logs = stack.temp_dir / "session_latest" / "logs"
    try:
        session_logs.mkdir(parents=True)
        (session_logs / "worker-1.out").write_text(f"runtime_env: {{'HF_TOKEN': '{s}'}}\n")
        (session_logs / "raylet.out").write_text("nothing secret\n")
        stack.proc = ManagedProcess("ray", ["true"], tmp_path / "driver.log")  # never started: nothing to stop
        stack.teardown()
    finally:
        shutil.rmtree(stack.temp_dir, ignore_errors=True)
    kept = stack.kept_logs / "worker-1.out"
    assert kept.read_text() == f"runtime_env: {{'HF_TOKEN': '{REDACTED}'}}\n"
    assert (stack.kept_logs / "raylet.out").read_text() == "nothing secret\n"
    assert not stack.temp_dir.exists()


# --- end to end: `layerbench run` with secrets planted where they reach the results -----------------------

def test_run_writes_no_planted_secret(tmp_path, write_profile, monkeypatch):
    """The reference engine reports a version made of two secrets, and the profile is named after a third:
    both end up in run.json, summary.json, summary.md and the engine's log unless they are scrubbed."""
    from harness.cli.main import main

    hf, aws, kube = token(), token(), token()
    monkeypatch.setenv("HF_TOKEN", hf)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kubeconfig", token=kube)))
    profile = write_profile(aws, concurrency=[1, 2], requests=20, requests_per_concurrency=0,
                            output_tokens=4, input_tokens=32, min_duration_s=0, warmup_sweep=False)
    results = tmp_path / "results"
    assert main(["run", "--stack", "sim", "--profile", str(profile), "--opt", "ttft_ms=2", "--opt", "itl_ms=1",
                 "--opt", f"version=v-{hf}-{kube}", "--results-dir", str(results)]) == 0
    files = [p for p in results.rglob("*") if p.is_file()]
    assert files
    leaks = {p.relative_to(results).as_posix(): [n for n, v in (("HF_TOKEN", hf), ("AWS_SECRET_ACCESS_KEY", aws),
                                                                 ("kubeconfig token", kube))
                                                   if v.encode() in p.read_bytes()] for p in files}
    assert not {k: v for k, v in leaks.items() if v}, "secrets written to results"
    run = next(results.iterdir())
    meta = (run / "run.json").read_text()
    assert f"v-{REDACTED}-{REDACTED}" in meta and REDACTED in json.loads(meta)["profile"]["name"]
