"""The `layerbench` command: one module per group of subcommands; `main` parses and dispatches."""

from harness.cli.main import main

__all__ = ["main"]
