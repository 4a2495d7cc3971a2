"""Loading a profile: a built-in name or a YAML file, every problem one LayerbenchError naming the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from harness.errors import LayerbenchError
from harness.profile.schema import PROFILE_DIR, LoadProfile, problems


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> LoadProfile:
    """A built-in profile name or a YAML file; any problem becomes one LayerbenchError naming the field."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise LayerbenchError(
                f"unknown profile {name_or_path!r}: built-in profiles are {', '.join(builtin_profiles())}, "
                "or give a path to a YAML file"
            )
    if not path.exists():
        raise LayerbenchError(f"profile file not found: {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise LayerbenchError(f"profile {path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LayerbenchError(f"profile {path} is not UTF-8 text: {e}") from None
    try:
        data = yaml.safe_load(text)
    # the file is untrusted and PyYAML raises more than YAMLError on it: ValueError (`2001-13-01`), IndexError
    # (`!!int` with no value), RecursionError (deep nesting); any of them means "not a usable YAML document"
    except Exception as e:
        why = str(e) if isinstance(e, yaml.YAMLError) else f"{type(e).__name__}: {e}"
        raise LayerbenchError(f"profile {path} is not valid YAML: {why[:300]}") from None
    if not isinstance(data, dict):
        raise LayerbenchError(f"profile {path} must be a YAML mapping of fields")
    data.setdefault("name", path.stem)
    try:
        return LoadProfile.model_validate(data)
    except ValidationError as e:
        raise LayerbenchError(f"profile {path} is malformed: {problems(e)}") from None
