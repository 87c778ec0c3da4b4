"""The one error type for bad user input.

Anything the user typed or wrote that cannot be used (a malformed case id, a config with
hidden_size=0, an unknown target, an unimportable plugin, a bad TOML profile) raises
:class:`UsageError` with one sentence that names the value and what is allowed. The CLI turns
it into exit code 2 with no traceback, before anything is run or written.
"""


class UsageError(ValueError):
    """Bad input from the user: one clear sentence, exit code 2 at the CLI."""


class TargetReported(Exception):
    """An error a target adapter raises already described in full (a foreign interpreter died, or
    its target raised there with its own location): the engine adds no frame or location of its own."""


class Terminated(BaseException):
    """SIGTERM arrived while a command judged (raised by its handler, like KeyboardInterrupt for SIGINT)."""


# What stops a run rather than being a target's error: the user's Ctrl-C and SIGTERM.
INTERRUPTS = (KeyboardInterrupt, Terminated)


def signal_name(interrupt: BaseException) -> str:
    """The signal an interrupt (one of :data:`INTERRUPTS`) stands for: ``SIGINT`` or ``SIGTERM``."""
    return "SIGINT" if isinstance(interrupt, KeyboardInterrupt) else "SIGTERM"
