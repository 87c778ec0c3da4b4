"""The one error type for bad user input.

Anything the user typed or wrote that cannot be used (a malformed case id, a config with
hidden_size=0, an unknown target, an unimportable plugin, a bad TOML profile) raises
:class:`UsageError` with one sentence that names the value and what is allowed. The CLI turns
it into exit code 2 with no traceback, before anything is run or written; an unknown name
(:func:`unknown_name`) says which known one was meant.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UsageError(ValueError):
    """Bad input from the user: one clear sentence, exit code 2 at the CLI."""


def unknown_name(kind: str, name: str, known: Iterable[str], listed_by: str) -> UsageError:
    """The error for a name that is not one of ``known``: the closest known name (difflib) when
    one is close, else where the list is (``listed_by``, e.g. "'gradcheck-rnn targets' lists
    them"), never the whole list, so that the sentence fits one terminal line."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return UsageError(f"unknown {kind} {name!r}; " + (f"did you mean {close[0]!r}?" if close else listed_by))


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
