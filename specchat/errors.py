"""The one exception type that reaches the user as a single line (what, where, what to do), and the line
for any other exception.

``specchat.cli.main`` prints ``specchat: error: <message>`` on stderr and exits with code 2, no traceback.
The engine raises subclasses for bad models so the TUI can show the same sentence.
"""


class UserError(Exception):
    """Bad input from the user: a path, a flag, a config value, an incompatible model pair."""

    exit_code = 2


class ModelFileError(UserError):
    """A model file is missing, unreadable, not GGUF, or truncated."""


class IncompatibleDraftError(UserError):
    """The draft cannot serve this target (one of llama.cpp's five vocab rules failed)."""


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` (or the type name alone): an unexpected exception as one line for a notice."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
