"""The Triton chunked scan of the fused GPU s6 kernel: h_t = a_t ⊙ h_{t−1} + b_t, one launch.

The same chunked structure as :meth:`S6CPUKernel.scan <gradcheck_rnn.kernels.s6_cpu.S6CPUKernel.scan>`:
time is cut into chunks of ``chunk`` steps, and every program owns a block of state elements
(the flattened batch × channel × state axes) for all chunks at once, a ``(chunks, elements)`` tile:

1. in-chunk scan, every chunk in parallel: each chunk composes its own affine maps into one,
   h -> Ā h + B̄ (Ā = Π a, B̄ the state the chunk reaches from 0);
2. carry, one sequential pass over the chunks: the start of chunk k+1 is chunk k's map applied to
   its start, by the kernel's carry rule (``CARRY``, a plain function jitted here, the same one
   the CPU kernel applies: :func:`~gradcheck_rnn.kernels.s6_cpu.decayed_carry`);
3. every chunk in parallel again: its steps from its start, h_t = a_t h_{t−1} + b_t, stored.

As in the CPU kernel, a chunk is composed step by step, all chunks of all elements side by side
(a and b are read twice, h written once); where the CPU kernel then forms each h from its
chunk's composed map, this one runs the steps again from the chunk's start: the two agree to
rounding. The reverse scan of the backward is this scan on time-reversed inputs, as
on CPU.

Arithmetic is in the data's dtype: float64 for f64 cases, float32 for f32 (the s6 kernels run
no other; ``FusedTarget.family_dtypes``). Needs Triton >= 3.2 (``tl.gather``). ``triton.jit``
reads ``TRITON_INTERPRET`` when this module is first imported (see :mod:`.cells`):
:data:`INTERPRETED` records which.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from functools import cache

import torch
import triton
import triton.language as tl
from torch import Tensor

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
# A program's tile holds (chunks rounded up to a power of two) × elements values; this bounds it
# (registers on a GPU), so a long sequence of small chunks gets narrower tiles and more programs.
TILE = 1024


# The kernels use triton.language's builtins and this module's own functions only, not the jitted
# helpers of its standard library (tl.sum, tl.zeros): those are jitted when triton is first
# imported, and in a process that imported triton before setting TRITON_INTERPRET (pytest's
# collection does) an interpreted kernel could not call them.
@triton.jit
def _row(tile, r, BLOCK: tl.constexpr):
    # row r of a (CHUNKS, BLOCK) tile, by tl.gather (Triton >= 3.2): a select-and-reduce would do
    # as well compiled, but the interpreter reduces element by element in Python, ~10x slower here
    return tl.reshape(tl.gather(tile, tl.full((1, BLOCK), r, tl.int32), 0), (BLOCK,))


@triton.jit
def _chunked_scan(a, b, h0, h, T, E, n_chunks, chunk, CARRY: tl.constexpr, CHUNKS: tl.constexpr,
                  BLOCK: tl.constexpr):
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    c = tl.arange(0, CHUNKS)
    first = c * chunk  # each chunk's first step
    at_first = first[:, None] * E + e[None, :]
    # steps of each chunk before T (0 for elements past E): step j of a chunk is real iff j < left
    left = tl.where((e < E)[None, :], (T - first)[:, None], 0)
    # 1. each chunk's composed map (Ā, B̄), all chunks at once; steps past T are the identity
    a_bar = tl.full((CHUNKS, BLOCK), 1.0, a.dtype.element_ty)
    b_bar = tl.full((CHUNKS, BLOCK), 0.0, b.dtype.element_ty)
    for j in range(chunk):
        real = j < left
        a_j = tl.load(a + at_first + j * E, mask=real, other=1.0)
        a_bar = a_j * a_bar
        b_bar = a_j * b_bar + tl.load(b + at_first + j * E, mask=real, other=0.0)
    # 2. the carry across each chunk boundary, in time order
    start = tl.load(h0 + e, mask=e < E, other=0.0)
    starts = tl.where((c == 0)[:, None], start[None, :], 0.0)
    for k in range(1, n_chunks):
        start = CARRY(_row(a_bar, k - 1, BLOCK), _row(b_bar, k - 1, BLOCK), start)
        starts = tl.where((c == k)[:, None], start[None, :], starts)
    # 3. every step from its chunk's start
    state = starts
    for j in range(chunk):
        real = j < left
        state = (tl.load(a + at_first + j * E, mask=real, other=1.0) * state
                 + tl.load(b + at_first + j * E, mask=real, other=0.0))
        tl.store(h + at_first + j * E, state, mask=real)


@cache
def _jitted(rule: Callable) -> Callable:
    """A carry rule (a plain function of three tensors) as a Triton function, once per rule.

    The rule lives in a module that does not import triton (the CPU kernel's, a mutant's); the
    interpreter wants triton.language among a jitted function's globals, so the rule is jitted
    as a copy that sees them (the compiler reads its source, the same either way)."""
    seeing_tl = types.FunctionType(rule.__code__, {**rule.__globals__, "tl": tl}, rule.__name__)
    seeing_tl.__module__, seeing_tl.__qualname__ = rule.__module__, rule.__qualname__
    return triton.jit(seeing_tl)


def chunked_scan(a: Tensor, b: Tensor, h0: Tensor, chunk: int, carry_rule: Callable) -> Tensor:
    """h (T, ...) with h_t = a_t ⊙ h_{t−1} + b_t from h0 (...), in chunks of ``chunk`` steps
    handed on by ``carry_rule``; one launch."""
    T = a.shape[0]
    h = torch.empty_like(a)
    if T == 0:
        return h
    a, b, h0 = a.contiguous(), b.contiguous(), h0.contiguous()
    E = h0.numel()
    n_chunks = triton.cdiv(T, chunk)
    chunks = triton.next_power_of_2(n_chunks)
    block = max(1, min(triton.next_power_of_2(E), TILE // chunks))
    _chunked_scan[(triton.cdiv(E, block),)](a, b, h0, h, T, E, n_chunks, chunk, CARRY=_jitted(carry_rule),
                                            CHUNKS=chunks, BLOCK=block)
    return h
