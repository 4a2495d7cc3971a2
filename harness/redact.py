"""Secrets never reach results, logs or reports, nor processes that do not need them.

This module owns three things: which environment variables and kubeconfig entries hold secrets
(`secret_values`), scrubbing those values from text and from every file of a folder in place
(`redact_text`, `redact_tree`), and the environment a deployment process is started with
(`deployment_env`, which drops secret variables a stack did not ask for). It only ever knows the values
it was given: a secret that is not in the environment or a kubeconfig cannot be recognised here."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter values ("1", "true", "us-east") would scrub ordinary words from results

# a variable is a secret if its name contains one of these (AWS_SECRET_ACCESS_KEY, HF_TOKEN, OPENAI_API_KEY...);
# TOKEN but not TOKENIZERS_PARALLELISM or VLLM_..._MAX_TOKENS, which engines need and which hold no secret
SECRET_NAME_RE = re.compile(r"TOKEN(?!IZER|S(?:_|$))|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_KEY|"
                            r"PRIVATE_KEY|SESSION_KEY|AUTH_KEY")
# named exactly (a few are covered by the parts above too; listed so the intent is explicit)
SECRET_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS", "KUBECONFIG"})
# pointers to credential files: not secret values themselves, but a deployment has no business with them
CREDENTIAL_POINTERS = frozenset({"KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS", "AWS_SHARED_CREDENTIALS_FILE",
                                 "AWS_CONFIG_FILE", "DOCKER_CONFIG", "NETRC"})
POINTER_SUFFIXES = ("_PATH", "_FILE", "_DIR")
KUBECONFIG_USER_FIELDS = ("token", "client-key-data", "client-certificate-data", "password")
AUTH_PROVIDER_FIELDS = ("access-token", "refresh-token", "id-token", "client-secret")
GCP_KEY_FIELDS = ("private_key", "private_key_id", "client_secret", "refresh_token")

# formats whose bytes must not be rewritten even if a secret happened to match inside them
BINARY_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf", ".gz", ".tgz", ".zip", ".xz",
                             ".bz2", ".zst", ".npy", ".npz", ".pkl", ".pickle", ".pt", ".safetensors", ".bin",
                             ".so", ".pyc", ".sqlite", ".db", ".parquet"})
TEXT_SUFFIXES = frozenset({".log", ".out", ".err", ".json", ".jsonl", ".md", ".html", ".txt", ".csv", ".yaml",
                           ".yml", ".tmp"})


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    if upper in SECRET_NAMES:
        return True
    if upper.startswith("AZURE_") and upper.endswith("_KEY"):  # AZURE_STORAGE_KEY, AZURE_OPENAI_KEY...
        return True
    return SECRET_NAME_RE.search(upper) is not None


def _variants(value: str) -> set[str]:
    """The value as it may appear in a file: verbatim, JSON-escaped (results are JSON), and line by line
    for multi-line values such as PEM keys (a log may print one line of it)."""
    out = {value, json.dumps(value)[1:-1]}
    if "\n" in value:
        out |= {line.strip() for line in value.splitlines()}
    return {v for v in out if len(v) >= MIN_SECRET_LEN}


def _kubeconfig_paths(env: Mapping[str, str]) -> list[Path]:
    if env.get("KUBECONFIG"):
        return [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
    home = env.get("HOME")
    return [Path(home) / ".kube" / "config"] if home else [Path.home() / ".kube" / "config"]


def kubeconfig_secrets(paths: Iterable[Path]) -> set[str]:
    """Credentials of every user entry; files that are missing, unreadable or not YAML are skipped."""
    found: set[str] = set()
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        users = doc.get("users") if isinstance(doc, dict) else None
        for entry in users if isinstance(users, list) else []:
            user = entry.get("user") if isinstance(entry, dict) else None
            if not isinstance(user, dict):
                continue
            found |= {str(user[k]) for k in KUBECONFIG_USER_FIELDS if user.get(k)}
            provider = user.get("auth-provider")
            config = provider.get("config") if isinstance(provider, dict) else None
            if isinstance(config, dict):
                found |= {str(config[k]) for k in AUTH_PROVIDER_FIELDS if config.get(k)}
    return found


def _gcp_key_secrets(path: str) -> set[str]:
    try:
        doc = json.loads(Path(path).expanduser().read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return set()
    return {str(doc[k]) for k in GCP_KEY_FIELDS if isinstance(doc, dict) and doc.get(k)}


def secret_values(env: Mapping[str, str]) -> set[str]:
    """Every secret value known from `env` (normally os.environ) and the kubeconfig files it names, in the
    forms it may take inside a file; values shorter than MIN_SECRET_LEN are ignored."""
    raw: set[str] = set()
    for name, value in env.items():
        if not is_secret_name(name) or not value:
            continue
        if name.upper() in CREDENTIAL_POINTERS or name.upper().endswith(POINTER_SUFFIXES):
            # a path (HF_TOKEN_PATH, the GCP key file): what it points at is the secret, not its name
            if name.upper() == "GOOGLE_APPLICATION_CREDENTIALS":
                raw |= _gcp_key_secrets(value)
            continue
        raw.add(value)
    raw |= kubeconfig_secrets(_kubeconfig_paths(env))
    return {v for value in raw for v in _variants(value)}


def _pattern(secrets: Iterable[str]) -> re.Pattern[bytes] | None:
    # longest first, so a secret containing another is replaced whole
    usable = sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
    if not usable:
        return None
    return re.compile(b"|".join(re.escape(s.encode()) for s in usable))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    pattern = _pattern(secrets)
    if pattern is None:
        return text
    return pattern.sub(REDACTED.encode(), text.encode(errors="surrogateescape")).decode(errors="surrogateescape")


def _is_text(path: Path, head: bytes) -> bool:
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return True
    if suffix in BINARY_SUFFIXES:
        return False
    return b"\0" not in head


def redact_tree(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Rewrites in place every text file under `root` that contains a secret; returns the files changed.
    Bytes are matched, so logs with stray invalid UTF-8 are handled; a file is replaced atomically (a
    temporary file beside it, then rename), so a reader never sees it half-written. Symlinks are not
    followed: what they point at is not ours."""
    pattern = _pattern(secrets)
    root = Path(root)
    if pattern is None or not root.is_dir():
        return []
    changed = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if not _is_text(path, data[:8192]) or not pattern.search(data):
                continue
            tmp = path.with_name(f".{name}.redact-tmp")
            try:
                tmp.write_bytes(pattern.sub(REDACTED.encode(), data))
                os.chmod(tmp, path.stat().st_mode & 0o7777)
                os.replace(tmp, path)
            except OSError:
                tmp.unlink(missing_ok=True)
                raise
            changed.append(path)
    return changed


def deployment_env(environ: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """`environ` without its secret variables and credential-file pointers, except those named in `keep`
    (a stack that must pull a gated model asks for HF_TOKEN). A local vLLM or Ray has no use for the
    user's cloud keys or kubeconfig, and whatever a deployment process holds can end up in its logs, in
    Ray's runtime environment or in a crash dump."""
    wanted = {k.upper() for k in keep}
    return {k: v for k, v in environ.items()
            if k.upper() in wanted or not (is_secret_name(k) or k.upper() in CREDENTIAL_POINTERS)}
