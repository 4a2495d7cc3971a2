"""What every `layerbench` command shares: the consoles, how a command's outcome marks its run folder, the
deployment settings from a profile and `--opt key=value` pairs."""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from harness.errors import LayerbenchError
from harness.profile import LoadProfile
from harness.results import RunWriter

# Wide tables stay readable when output goes to a file or CI log instead of a terminal.
console = Console(width=None if sys.stdout.isatty() else 170)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 170)


class Outcome:
    """How a command's deployments ended; `recorded` fills it and always marks the run folder."""

    def __init__(self) -> None:
        self.status, self.reason = "failed", None

    def exit_code(self, writer: RunWriter) -> int:
        """130 after Ctrl-C; LayerbenchError (exit 2) when failed; 0 when complete."""
        if self.status == "interrupted":
            err_console.print(f"[yellow]{self.reason}[/]; measured so far is kept in {writer.dir}")
            return 130
        if self.status != "complete":
            raise LayerbenchError(f"{self.reason}\n(run marked {self.status}: {writer.dir}/run.json)")
        return 0


@contextmanager
def recorded(writer: RunWriter):
    """Runs the body; Ctrl-C/SIGTERM and LayerbenchError become the outcome (teardown has already run in the
    body's `with stack`); run.json is marked complete / failed / interrupted whatever happened."""
    out = Outcome()
    try:
        yield out
        if out.status == "failed" and out.reason is None:
            out.status = "complete"
    except KeyboardInterrupt:
        out.status, out.reason = "interrupted", "interrupted by the user (Ctrl-C / SIGTERM); deployments torn down"
    except LayerbenchError as e:
        out.status, out.reason = "failed", str(e)
    finally:
        writer.finish(out.status, out.reason)


def settings_for(args: argparse.Namespace, profile: LoadProfile, log_dir: Path):
    from stacks.base import DeploySettings
    from stacks.engine_model import check_target, model_dir

    options = parse_options(getattr(args, "opt", None))
    if getattr(args, "port", None):
        options["port"] = args.port
    target = getattr(args, "target", "local")
    check_target(profile.engine, target)
    return DeploySettings(target=target, engine=profile.engine, model_path=model_dir(profile.engine),
                          url=getattr(args, "url", None), log_dir=log_dir, options=options)


def parse_options(pairs: list[str] | None) -> dict[str, str | int | float | bool]:
    """--opt key=value (repeatable) -> stack options; numbers and booleans are typed."""
    out: dict[str, str | int | float | bool] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise LayerbenchError(f"--opt takes key=value, got {pair!r}")
        value: str | int | float | bool = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    continue
        out[key.replace("-", "_")] = value
    return out
