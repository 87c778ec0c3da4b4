"""What the fused GPU kernels of the matrix-memory families share: their chunk hand-off runs in
Triton (:mod:`.chunk_states`), and which chunk it reads is a hook.

Importing this module does not import triton; the first hand-off does.
"""

from __future__ import annotations

from typing import Any


def chunk_states() -> Any:
    """The Triton hand-off kernels, imported on first use (importing triton takes about a second)."""
    from . import chunk_states as kernels

    return kernels


class TritonHandOff:
    """Mixed into each matrix family's GPU kernel (:mod:`.gla`, :mod:`.gdn`, :mod:`.mlstm`, :mod:`.deltaproduct`): the
    hook a mutant overrides."""

    def hand_off_read_shift(self, reverse: bool) -> int:
        """Which chunk's coefficient the hand-off out of chunk n reads, as an offset from n (0: its
        own), forward or (``reverse``) backward: a compile-time constant of the Triton kernel."""
        return 0
