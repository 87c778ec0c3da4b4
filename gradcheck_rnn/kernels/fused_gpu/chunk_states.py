"""The Triton chunk hand-off of the fused GPU matrix-memory kernels (``gla``, ``gdn``, ``mlstm``).

The chunkwise kernels of :mod:`gradcheck_rnn.kernels.gla_cpu`, :mod:`~gradcheck_rnn.kernels.gdn_cpu`
and :mod:`~gradcheck_rnn.kernels.mlstm_cpu` compute everything inside a chunk for all chunks at
once; their only sequential stage hands a per-head state across the chunk boundaries, forward
(the state) and backward (its gradient). Both directions are one recurrence,

    X_out(n) = Φ_n X_in(n) + W_n,   n = 0 .. NC−1 (in reverse for the backward),

with X a K×W tile per (batch, head), Φ_n a K×K matrix (gdn; its transpose in the backward, read
through strides without a copy) or a diagonal, one value per key unit (gla's exp(Λ_last), mlstm's
backward g); :func:`chunk_carry` runs it in one launch. mLSTM's forward hand-off is not linear
(the stabiliser m_out = F_end + max(m_in, own_max) rescales C and n), so it has a kernel of its
own, :func:`stabilised_carry`.

Each program owns one (batch, head) and a block of the W columns, keeps its state tile in
registers and loops over the chunks, storing what enters each hand-off. K and the W block are
padded to powers of two ≥ 16 (``tl.dot``'s smallest tile on a GPU) and masked; the padding is
zero and stays zero. The matrix product is ``tl.dot`` with ``input_precision="ieee"`` (no TF32);
arithmetic is in the data's dtype, float64 for f64 cases and float32 for f32 (the only ones the
family kernels run).

A mutant reads the wrong chunk's coefficient: ``READ_SHIFT`` (compile-time) is the offset from
n of the chunk whose Φ (or stabiliser terms) the hand-off out of chunk n reads, clamped into
[0, NC); 0 in a correct kernel (:class:`.hand_off.TritonHandOff`).

The kernels use triton.language's builtins only (see :mod:`.scan`: pytest may import triton
before ``TRITON_INTERPRET`` is set). :data:`INTERPRETED` records whether ``triton.jit`` chose
the interpreter when this module was first imported.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
MIN_TILE = 16     # tl.dot's smallest tile side on a GPU
MAX_COLUMNS = 32  # the widest block of W columns a program owns
TILE = 4096       # the most values a program's state (or Φ) tile holds, over the heads it owns


@triton.jit
def _read_chunk(n, NC, READ_SHIFT: tl.constexpr):
    # the chunk whose coefficient the hand-off out of chunk n reads: n itself unless a mutant shifts it
    if READ_SHIFT != 0:
        n = tl.minimum(tl.maximum(n + READ_SHIFT, 0), NC - 1)
    return n


@triton.jit
def _offsets(heads, NH, rows, cols, s_b, s_h, s_r, s_c):
    # (BH, BK, BW) offsets of a (batch·head, row, column) tile, from the flat (batch, head) indices
    at = (heads // NH) * s_b + (heads % NH) * s_h
    return at[:, None, None] + rows[None, :, None] * s_r + cols[None, None, :] * s_c


@triton.jit
def _chunk_carry(coef, written, start, out, BNH, NH, NC, K, W,
                 c_b, c_h, c_n, c_r, c_c, w_b, w_h, w_n, w_r, w_c, s_b, s_h, s_r, s_c,
                 REVERSE: tl.constexpr, DIAGONAL: tl.constexpr, READ_SHIFT: tl.constexpr,
                 BH: tl.constexpr, BK: tl.constexpr, BW: tl.constexpr):
    heads = tl.program_id(0) * BH + tl.arange(0, BH)  # flat (batch, head) indices
    rows = tl.arange(0, BK)
    cols = tl.program_id(1) * BW + tl.arange(0, BW)
    tile = (heads < BNH)[:, None, None] & (rows < K)[None, :, None] & (cols < W)[None, None, :]
    state = tl.load(start + _offsets(heads, NH, rows, cols, s_b, s_h, s_r, s_c), mask=tile, other=0.0)
    # out: contiguous (B·NH, NC + 1, K, W)
    slots = out + _offsets(heads, 1, rows, cols, (NC + 1) * K * W, 0, W, 1)
    written = written + _offsets(heads, NH, rows, cols, w_b, w_h, w_r, w_c)
    if DIAGONAL:
        coef = coef + _offsets(heads, NH, rows, tl.arange(0, 1), c_b, c_h, c_r, 0)
        coef_tile = (heads < BNH)[:, None, None] & (rows < K)[None, :, None]
    else:
        keys = tl.arange(0, BK)
        coef = coef + _offsets(heads, NH, rows, keys, c_b, c_h, c_r, c_c)
        coef_tile = (heads < BNH)[:, None, None] & (rows < K)[None, :, None] & (keys < K)[None, None, :]
    for i in range(NC):
        if REVERSE:
            n = NC - 1 - i
        else:
            n = i
        tl.store(slots + n * K * W, state, mask=tile)
        phi = tl.load(coef + _read_chunk(n, NC, READ_SHIFT) * c_n, mask=coef_tile, other=0.0)
        w = tl.load(written + n * w_n, mask=tile, other=0.0)
        if DIAGONAL:
            state = phi * state + w  # phi: (BH, BK, 1), one value per key unit
        else:
            state = tl.dot(phi, state, input_precision="ieee") + w
    tl.store(slots + NC * K * W, state, mask=tile)


@triton.jit
def _stabilised_carry(own_max, f_end, written, start, m_start, out, m_out, BNH, NH, NC, K, W,
                      o_b, o_h, o_n, f_b, f_h, f_n, w_b, w_h, w_n, w_r, w_c, s_b, s_h, s_r, s_c, m_b, m_h,
                      READ_SHIFT: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, BW: tl.constexpr):
    heads = tl.program_id(0) * BH + tl.arange(0, BH)  # flat (batch, head) indices
    live = heads < BNH
    rows = tl.arange(0, BK)
    cols = tl.program_id(1) * BW + tl.arange(0, BW)
    tile = live[:, None, None] & (rows < K)[None, :, None] & (cols < W)[None, None, :]
    b, h = heads // NH, heads % NH
    stores_m = heads < tl.where(tl.program_id(1) == 0, BNH, 0)  # every column block carries m; the first stores it
    state = tl.load(start + _offsets(heads, NH, rows, cols, s_b, s_h, s_r, s_c), mask=tile, other=0.0)
    m = tl.load(m_start + b * m_b + h * m_h, mask=live, other=0.0)
    slots = out + _offsets(heads, 1, rows, cols, (NC + 1) * K * W, 0, W, 1)  # out: contiguous (B·NH, NC + 1, K, W)
    m_slots = m_out + heads * (NC + 1)                                       # m_out: contiguous (B·NH, NC + 1)
    own_max = own_max + b * o_b + h * o_h
    f_end = f_end + b * f_b + h * f_h
    written = written + _offsets(heads, NH, rows, cols, w_b, w_h, w_r, w_c)
    for n in range(NC):
        tl.store(slots + n * K * W, state, mask=tile)
        tl.store(m_slots + n, m, mask=stores_m)
        read = _read_chunk(n, NC, READ_SHIFT)
        own = tl.load(own_max + read * o_n, mask=live, other=0.0)
        top = tl.maximum(m, own, propagate_nan=tl.PropagateNan.ALL)  # a NaN wins, as in torch.maximum
        # both exponents ≤ 0, as on CPU: the start's weight and the chunk's own
        state = (tl.exp(m - top)[:, None, None] * state
                 + tl.exp(own - top)[:, None, None] * tl.load(written + n * w_n, mask=tile, other=0.0))
        m = tl.load(f_end + read * f_n, mask=live, other=0.0) + top
    tl.store(slots + NC * K * W, state, mask=tile)
    tl.store(m_slots + NC, m, mask=stores_m)


def _tiles(BNH: int, K: int, W: int) -> tuple[int, int, int]:
    """A program's (batch·head, key, column) block sides: K and the columns padded to powers of
    two ≥ 16, as many heads as fit in :data:`TILE` values (the interpreter pays per program, a
    GPU per register)."""
    bk, bw = max(MIN_TILE, triton.next_power_of_2(K)), max(MIN_TILE, min(triton.next_power_of_2(W), MAX_COLUMNS))
    return max(1, min(triton.next_power_of_2(BNH), TILE // (bk * max(bk, bw)))), bk, bw


def chunk_carry(coefficient: Tensor, written: Tensor, start: Tensor, diagonal: bool, reverse: bool = False,
                read_shift: int = 0) -> Tensor:
    """X (B, NH, NC + 1, K, W), one launch: slot n holds what enters chunk n's hand-off
    X_out = Φ_n X_in + W_n (in time order, or reversed with ``reverse``), slot NC what leaves the
    last one; X enters the first one as ``start`` (B, NH, K, W).

    ``coefficient`` is Φ: (B, NH, NC, K, K), any strides (a transposed view is read as it is), or
    with ``diagonal`` (B, NH, NC, K), its diagonal (a stride of 0 broadcasts one value per head);
    ``written`` is (B, NH, NC, K, W)."""
    B, NH, NC, K, W = written.shape
    out = written.new_empty(B, NH, NC + 1, K, W)
    if out.numel() == 0:
        return out
    if diagonal:
        coefficient = coefficient[..., None]  # one stride for the missing column
    bh, bk, bw = _tiles(B * NH, K, W)
    _chunk_carry[(triton.cdiv(B * NH, bh), triton.cdiv(W, bw))](
        coefficient, written, start, out, B * NH, NH, NC, K, W, *coefficient.stride(), *written.stride(),
        *start.stride(), REVERSE=reverse, DIAGONAL=diagonal, READ_SHIFT=read_shift, BH=bh, BK=bk, BW=bw)
    return out


def stabilised_carry(own_max: Tensor, f_end: Tensor, written: Tensor, start: Tensor, m_start: Tensor,
                     read_shift: int = 0) -> tuple[Tensor, Tensor]:
    """mLSTM's forward hand-off, one launch: the states X (B, NH, NC + 1, K, W) and stabilisers m
    (B, NH, NC + 1) at every chunk boundary, from X = ``start``, m = ``m_start`` (B, NH), with
    top = max(m, own_max_n), X ← exp(m − top) X + exp(own_max_n − top) W_n, m ← F_end_n + top.

    ``own_max`` and ``f_end`` are (B, NH, NC), ``written`` (B, NH, NC, K, W), any strides."""
    B, NH, NC, K, W = written.shape
    out = written.new_empty(B, NH, NC + 1, K, W)
    m_out = m_start.new_empty(B, NH, NC + 1)
    if out.numel() == 0:
        return out, m_out
    bh, bk, bw = _tiles(B * NH, K, W)
    _stabilised_carry[(triton.cdiv(B * NH, bh), triton.cdiv(W, bw))](
        own_max, f_end, written, start, m_start, out, m_out, B * NH, NH, NC, K, W, *own_max.stride(),
        *f_end.stride(), *written.stride(), *start.stride(), *m_start.stride(),
        READ_SHIFT=read_shift, BH=bh, BK=bk, BW=bw)
    return out, m_out
