"""Objects named ``package.module:attribute`` by a user: plugin targets (``-t``) and cell families
(``--family``) are both loaded here, with the same one-sentence errors."""

from __future__ import annotations

import importlib
from typing import Any

from .errors import INTERRUPTS, UsageError


def import_object(spec: str, kind: str) -> Any:
    """The object ``spec`` (``package.module:attr``, ``attr`` may be dotted) names; UsageError
    naming the ``kind`` of thing and ``spec`` when its module cannot be imported (anything the
    import raises, ``SystemExit`` included, is the user's module, not our bug) or lacks ``attr``."""
    module_name, _, attr = spec.partition(":")
    check_module_found(spec, kind)
    try:
        module = importlib.import_module(module_name)
    except INTERRUPTS:
        raise
    except BaseException as exc:
        raise UsageError(f"{kind} {spec!r}: cannot import module {module_name!r} ({type(exc).__name__}: {exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{kind} {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def check_module_found(spec: str, kind: str) -> None:
    """UsageError when the top package of ``spec``'s module is nowhere on the import path, found
    without importing anything: a command refuses the typo before torch's import, and the import
    itself (later) says anything else that is wrong."""
    import importlib.util

    top = spec.partition(":")[0].partition(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # there, but odd: its import will say what is wrong
        found = True
    if not found:
        raise UsageError(f"{kind} {spec!r}: no module named {top!r} on PYTHONPATH")
