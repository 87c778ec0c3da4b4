"""``results.json``: the results document itself, strict JSON (no NaN/Infinity tokens)."""

from __future__ import annotations

import json
from typing import Any

from ..compare import json_safe


def render(document: dict[str, Any]) -> bytes:
    """The document as indented strict JSON; non-finite numbers are already null / "inf"."""
    return (json.dumps(json_safe(document), indent=2, allow_nan=False, ensure_ascii=False) + "\n").encode("utf-8")
