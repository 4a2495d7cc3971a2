"""The one exception type the CLI turns into a clear message and a non-zero exit."""


class LayerbenchError(Exception):
    """Bad input or a failed deployment: shown to the user as one message, exit code 2."""
