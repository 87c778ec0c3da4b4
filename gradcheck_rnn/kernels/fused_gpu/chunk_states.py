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

import torch
import triton
import triton.language as tl
from torch import Tensor

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
MIN_TILE = 16   # tl.dot's smallest tile side on a GPU
MAX_COLUMNS = 32  # the widest block of W columns a program owns (its tile is K × this)


@triton.jit
def _read_chunk(n, NC, READ_SHIFT: tl.constexpr):
    # the chunk whose coefficient the hand-off out of chunk n reads: n itself unless a mutant shifts it
    if READ_SHIFT != 0:
        n = tl.minimum(tl.maximum(n + READ_SHIFT, 0), NC - 1)
    return n


@triton.jit
def _chunk_carry(coef, written, start, out, NH, NC, K, W,
                 c_b, c_h, c_n, c_r, c_c, w_b, w_h, w_n, w_r, w_c, s_b, s_h, s_r, s_c,
                 REVERSE: tl.constexpr, DIAGONAL: tl.constexpr, READ_SHIFT: tl.constexpr,
                 BK: tl.constexpr, BW: tl.constexpr):
    bh = tl.program_id(0)
    b, h = bh // NH, bh % NH
    rows = tl.arange(0, BK)
    cols = tl.program_id(1) * BW + tl.arange(0, BW)
    tile = (rows < K)[:, None] & (cols < W)[None, :]
    state = tl.load(start + b * s_b + h * s_h + rows[:, None] * s_r + cols[None, :] * s_c, mask=tile, other=0.0)
    slots = out + bh * (NC + 1) * K * W + rows[:, None] * W + cols[None, :]  # out: contiguous (B·NH, NC + 1, K, W)
    coef = coef + b * c_b + h * c_h
    written = written + b * w_b + h * w_h + rows[:, None] * w_r + cols[None, :] * w_c
    for i in range(NC):
        if REVERSE:
            n = NC - 1 - i
        else:
            n = i
        tl.store(slots + n * K * W, state, mask=tile)
        read = _read_chunk(n, NC, READ_SHIFT)
        w = tl.load(written + n * w_n, mask=tile, other=0.0)
        if DIAGONAL:
            phi = tl.load(coef + read * c_n + rows * c_r, mask=rows < K, other=0.0)
            state = phi[:, None] * state + w
        else:
            keys = tl.arange(0, BK)
            phi = tl.load(coef + read * c_n + rows[:, None] * c_r + keys[None, :] * c_c,
                          mask=(rows < K)[:, None] & (keys < K)[None, :], other=0.0)
            state = tl.dot(phi, state, input_precision="ieee") + w
    tl.store(slots + NC * K * W, state, mask=tile)


@triton.jit
def _stabilised_carry(own_max, f_end, written, start, m_start, out, m_out, NH, NC, K, W,
                      o_b, o_h, o_n, f_b, f_h, f_n, w_b, w_h, w_n, w_r, w_c, s_b, s_h, s_r, s_c, m_b, m_h,
                      READ_SHIFT: tl.constexpr, BK: tl.constexpr, BW: tl.constexpr):
    bh = tl.program_id(0)
    b, h = bh // NH, bh % NH
    rows = tl.arange(0, BK)
    cols = tl.program_id(1) * BW + tl.arange(0, BW)
    tile = (rows < K)[:, None] & (cols < W)[None, :]
    first_block = tl.program_id(1) == 0  # every block carries m; the first one stores it
    state = tl.load(start + b * s_b + h * s_h + rows[:, None] * s_r + cols[None, :] * s_c, mask=tile, other=0.0)
    m = tl.load(m_start + b * m_b + h * m_h)
    slots = out + bh * (NC + 1) * K * W + rows[:, None] * W + cols[None, :]  # out: contiguous (B·NH, NC + 1, K, W)
    m_slots = m_out + bh * (NC + 1)                                          # m_out: contiguous (B·NH, NC + 1)
    own_max = own_max + b * o_b + h * o_h
    f_end = f_end + b * f_b + h * f_h
    written = written + b * w_b + h * w_h + rows[:, None] * w_r + cols[None, :] * w_c
    for n in range(NC):
        tl.store(slots + n * K * W, state, mask=tile)
        tl.store(m_slots + n, m, mask=first_block)
        read = _read_chunk(n, NC, READ_SHIFT)
        own = tl.load(own_max + read * o_n)
        top = tl.maximum(m, own)
        # both exponents ≤ 0, as on CPU: the start's weight and the chunk's own
        state = tl.exp(m - top) * state + tl.exp(own - top) * tl.load(written + n * w_n, mask=tile, other=0.0)
        m = tl.load(f_end + read * f_n) + top
    tl.store(slots + NC * K * W, state, mask=tile)
    tl.store(m_slots + NC, m, mask=first_block)


def _tiles(K: int, W: int) -> tuple[int, int]:
    """The padded key side and the column block of a program's tile."""
    return max(MIN_TILE, triton.next_power_of_2(K)), max(MIN_TILE, min(triton.next_power_of_2(W), MAX_COLUMNS))


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
    bk, bw = _tiles(K, W)
    _chunk_carry[(B * NH, triton.cdiv(W, bw))](coefficient, written, start, out, NH, NC, K, W,
                                               *coefficient.stride(), *written.stride(), *start.stride(),
                                               REVERSE=reverse, DIAGONAL=diagonal, READ_SHIFT=read_shift,
                                               BK=bk, BW=bw)
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
    bk, bw = _tiles(K, W)
    _stabilised_carry[(B * NH, triton.cdiv(W, bw))](own_max, f_end, written, start, m_start, out, m_out, NH, NC, K, W,
                                                   *own_max.stride(), *f_end.stride(), *written.stride(),
                                                   *start.stride(), *m_start.stride(),
                                                   READ_SHIFT=read_shift, BK=bk, BW=bw)
    return out, m_out
