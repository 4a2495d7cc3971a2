"""Validation of command-line inputs: argparse `type=` functions that turn a bad value into one clear
message (argparse prints it with the usage and exits 2) before anything is deployed or written.

Each function raises only argparse.ArgumentTypeError: argparse reports a ValueError as a bare
"invalid <name> value", which says nothing about what is wrong."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

from harness.errors import LayerbenchError

_DIGITS = re.compile(r"[0-9]{1,20}")  # ASCII only: int() would also take "1_000", " 5" and "٣"
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def _shown(s: str) -> str:
    """The value as the message quotes it: a pasted blob must not flood the terminal."""
    r = repr(s)
    return r if len(r) <= 80 else f"{r[:76]}...{r[0]}"


def _integer(s: str, what: str) -> int:
    if not _DIGITS.fullmatch(s):
        raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {_shown(s)}")
    return int(s)


def port(s: str) -> int:
    """A TCP port, 1..65535."""
    n = _integer(s, "port")
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {s}")
    return n


def positive_int(s: str) -> int:
    """A count of at least 1."""
    n = _integer(s, "value")
    if n < 1:
        raise argparse.ArgumentTypeError(f"value must be at least 1, got {s}")
    return n


def pairs(s: str) -> int:
    """PAIRS=: exactly this many deployment pairs, at least 1."""
    n = _integer(s, "PAIRS")
    if n < 1:
        raise argparse.ArgumentTypeError(f"PAIRS must be at least 1 (PAIRS=1: one pair, no verdict possible; leave it "
                                         f"out for the sequential design), got {s}")
    return n


def client_procs(s: str) -> int | str:
    """`auto`, or a number of load client processes from 1 to CLIENT_PROCS_MAX."""
    from harness.profile.schema import CLIENT_PROCS_MAX

    if s == "auto":
        return s
    n = _integer(s, "client processes")
    if not 1 <= n <= CLIENT_PROCS_MAX:
        raise argparse.ArgumentTypeError(f"client processes must be from 1 to {CLIENT_PROCS_MAX}, or auto; got {s}")
    return n


def positive_float(s: str) -> float:
    """A finite number > 0 (seconds, dollars, GB/s)."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {_shown(s)}") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {_shown(s)}")
    return v


def positive_floats(s: str) -> list[float | int]:
    """Levels: "1,16,64" (concurrencies, kept whole) or "0.5,2" (rates)."""
    values = [positive_float(p.strip()) for p in s.split(",") if p.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected levels separated by commas (e.g. 1,16,64), got {_shown(s)}")
    return [int(v) if v.is_integer() else v for v in values]


def url(s: str) -> str:
    """An http(s) URL with a host and an optional port, returned unchanged. URLs are written to results, so a URL
    with credentials is refused, and not echoed in the message."""
    shown = _shown(s) if "@" not in s else "(not shown: it contains '@')"
    if any(c.isspace() or not c.isprintable() for c in s):
        # urlsplit silently drops tabs and newlines; a pasted URL with them is a mistake worth showing
        raise argparse.ArgumentTypeError(f"URL {shown} contains whitespace or control characters")
    try:
        parts = urlsplit(s)
    except ValueError as e:  # an unclosed "[" of an IPv6 address
        raise argparse.ArgumentTypeError(f"URL {shown} is malformed: {e}") from None
    if parts.scheme not in ("http", "https") or not s.lower().startswith(f"{parts.scheme}://"):
        raise argparse.ArgumentTypeError(f"URL {shown} must start with http:// or https://")
    netloc = parts.netloc
    if "@" in netloc:
        raise argparse.ArgumentTypeError(
            "URL must not contain credentials (user:pass@host): secrets must not be in URLs because URLs are "
            "written to results")
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise argparse.ArgumentTypeError(f"URL {shown} has an invalid IPv6 address {_shown(host)}") from None
        if rest and not rest.startswith(":"):
            raise argparse.ArgumentTypeError(f"URL {shown} has text after the IPv6 address: {_shown(rest)}")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text = netloc.partition(":")
        if not host:
            raise argparse.ArgumentTypeError(f"URL {shown} has no host")
        if not _HOSTNAME.fullmatch(host):
            raise argparse.ArgumentTypeError(
                f"URL {shown} has an invalid host {_shown(host)} (letters, digits, '.', '-', '_'; IDN hosts in their "
                "ASCII xn-- form)")
        port_text = port_text if colon else None
    if port_text is not None:
        try:
            port(port_text)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"URL {shown}: {e}") from None
    return s


def results_dir(s: str) -> str:
    """A directory results can be written to: it exists and is writable, or its nearest existing ancestor is a
    writable directory (it is created later). Returned unchanged."""
    if not s:
        raise argparse.ArgumentTypeError("results directory must not be empty")
    what = f"results directory {_shown(s)}"
    path = Path(s).absolute()  # not resolved: "/etc/passwd/../x" must fail as the OS would fail it
    for cand in (path, *path.parents):
        try:
            is_dir = stat.S_ISDIR(os.stat(cand).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            # NotADirectoryError: some ancestor is a file; walking up finds it and names it
            if cand.is_symlink():
                raise argparse.ArgumentTypeError(f"{what}: {cand} is a broken symbolic link") from None
            continue
        except OSError as e:  # a name too long, a parent we may not search
            raise argparse.ArgumentTypeError(f"{what} cannot be used: {e.strerror or e}") from None
        except ValueError:  # a NUL byte, or a string the file system encoding cannot hold
            raise argparse.ArgumentTypeError(f"{what} is not a valid path") from None
        if cand == path:
            if not is_dir:
                raise argparse.ArgumentTypeError(f"{what} exists and is not a directory")
            if not os.access(cand, os.W_OK | os.X_OK):
                raise argparse.ArgumentTypeError(f"{what} is not writable")
        elif not is_dir:
            raise argparse.ArgumentTypeError(f"{what} cannot be created: {cand} is a file")
        elif not os.access(cand, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{what} cannot be created: {cand} is not writable")
        return s
    # the walk ends at the root, which exists: only a path that cannot be stat'ed at all gets here
    raise argparse.ArgumentTypeError(f"{what}: no existing parent directory")


def output_file(s: str) -> str:
    """A file to (over)write: not a directory, and its folder is a usable results directory."""
    if not s:
        raise argparse.ArgumentTypeError("output file must not be empty")
    if Path(s).is_dir():
        raise argparse.ArgumentTypeError(f"output file {_shown(s)} is a directory")
    try:
        results_dir(str(Path(s).absolute().parent))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"output file {_shown(s)}: {e}") from None
    return s


def gpu_list(s: str) -> list[int]:
    """GPU indices as nvidia-smi numbers them: "0", "0,1", "2, 3". Whether they exist is checked against the
    host before anything is deployed (harness.host.gpus.devices_for)."""
    parts = [p.strip() for p in s.split(",")]
    if not parts or any(not _DIGITS.fullmatch(p) for p in parts):
        raise argparse.ArgumentTypeError(f"GPUs are indices separated by commas (e.g. 0,1), got {_shown(s)}")
    return [int(p) for p in parts]


_NUMBER = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?")


def mde(s: str) -> float:
    """A detectable effect as a share: `3%` (or `3`) is 0.03; a number below 1 without `%` is a share already."""
    text = s.strip()
    pct = text.endswith("%")
    body = text.removesuffix("%").strip()
    if not _NUMBER.fullmatch(body):
        raise argparse.ArgumentTypeError(f"MDE must be a percentage such as 3%, got {_shown(s)}")
    x = float(body)
    share = x / 100 if pct or x >= 1 else x
    if not 0 < share < 1:
        raise argparse.ArgumentTypeError(f"MDE must be above 0% and below 100%, got {_shown(s)}")
    return share


def budget(s: str) -> float:
    """A time budget in minutes: `15m`, `900s`, `1.5h`, or a number of minutes."""
    text = s.strip().lower()
    unit = text[-1] if text and text[-1] in "smh" else "m"
    body = text[:-1] if text and text[-1] in "smh" else text
    if not _NUMBER.fullmatch(body):
        raise argparse.ArgumentTypeError(f"BUDGET must be a time such as 15m, 900s or 1.5h, got {_shown(s)}")
    minutes = float(body) * {"s": 1 / 60, "m": 1.0, "h": 60.0}[unit]
    if minutes <= 0:
        raise argparse.ArgumentTypeError(f"BUDGET must be longer than 0, got {_shown(s)}")
    return minutes


def max_pairs(s: str) -> int:
    """The most deployment pairs a sequential compare may deploy: 2 to 64 (one pair gives no interval; 1 is taken
    here so that the command can say why it contradicts the minimum design, and with PAIRS=1 means one pair)."""
    n = _integer(s, "max_pairs")
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"max_pairs must be from 2 to 64 (a verdict's interval needs 2 pairs), "
                                         f"got {s}")
    return n


CPU_PROFILE_ENV = "LAYERBENCH_CPU_PROFILE"


def cpu_profiling(wanted: bool | None, deployments: str) -> tuple[bool, str | None]:
    """Whether a compare samples its processes (harness.measure.profiled), and why not where it does not:
    --cpu-profile on a host where py-spy cannot attach is an error before anything is deployed; by default
    the compare profiles where it can and says why it did not; LAYERBENCH_CPU_PROFILE=0 makes that default off
    (make test sets it: only the tests of the profiles pay for profiled windows)."""
    from harness.load.profiler import attach_refused, pyspy

    if wanted is False or (wanted is None and os.environ.get(CPU_PROFILE_ENV, "1").lower() in ("0", "no", "false")):
        return False, None
    why = ("py-spy is not installed beside this Python or on PATH (make setup installs it in the client's "
           "environment)" if pyspy() is None else attach_refused())
    if why is None and deployments == "interleaved":
        why = "deployments: interleaved has no profiled windows yet (deployments: sequential has)"
    if why and wanted:
        raise LayerbenchError(f"--cpu-profile: {why}")
    return why is None, why
