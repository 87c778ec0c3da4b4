"""The Triton pointwise cells of the fused GPU kernel: forward and backward of every mode.

One launch per step and direction does the whole pointwise pass of a cell (LSTM: three
sigmoids, two tanhs, the cell update and the output; GRU: both gates, the candidate and the
interpolation; their backwards with every activation derivative), reading the gate buffer
that the recurrent GEMM just filled. Each kernel walks the ``bs × H`` elements of a step in
flat blocks, so the row strides of the views it is handed (a direction's column slice of a
bidirectional output buffer, a gate block) are arguments, never assumptions.

Arithmetic is in float32 for float32/float16/bfloat16 data (loads are widened, stores
narrowed: half-precision data, float32 accumulation) and in float64 for float64 data, which
is what the interpreter tests use to pin the algorithm to 1e-9.

``triton.jit`` reads ``TRITON_INTERPRET`` when this module is first imported: with it set the
kernels run on CPU tensors through Triton's interpreter (milliseconds a launch), without it they
compile for the GPU (about a second per kernel and dtype on first use) (benchmarks/RESULTS.md, "Costs the code is built around").
:data:`INTERPRETED` records which.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..packing import blocks
from ..algorithm import Step

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
BLOCK = 1024


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    # 2σ(2x) − 1: saturates to ±1 without inf/inf; absolute error ~eps near 0
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _rows(offs, H):
    return offs // H, offs % H


@triton.jit
def _act_forward(pre, pre_stride, h, h_stride, n, H, RELU: tl.constexpr, BLOCK: tl.constexpr,
                 ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    x = tl.load(pre + row * pre_stride + col, mask=mask).to(ACC)
    if RELU:
        out = tl.where(x < 0, 0.0, x)  # NaN < 0 is false: NaN propagates as in torch
    else:
        out = _tanh(x)
    tl.store(h + row * h_stride + col, out.to(h.dtype.element_ty), mask=mask)


@triton.jit
def _act_backward(dh, dh_stride, h, h_stride, dpre, dpre_stride, n, H, RELU: tl.constexpr,
                  BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    g = tl.load(dh + row * dh_stride + col, mask=mask).to(ACC)
    y = tl.load(h + row * h_stride + col, mask=mask).to(ACC)
    if RELU:
        out = tl.where(y > 0, g, 0.0)
    else:
        out = g * (1.0 - y * y)
    tl.store(dpre + row * dpre_stride + col, out.to(dpre.dtype.element_ty), mask=mask)


@triton.jit
def _lstm_forward(gates, g_stride, c_prev, cp_stride, c, c_stride, h, h_stride, tanh_c, tc_stride,
                  n, H, BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    base = gates + row * g_stride + col
    i = _sigmoid(tl.load(base, mask=mask).to(ACC))
    f = _sigmoid(tl.load(base + H, mask=mask).to(ACC))
    g = _tanh(tl.load(base + 2 * H, mask=mask).to(ACC))
    o = _sigmoid(tl.load(base + 3 * H, mask=mask).to(ACC))
    cp = tl.load(c_prev + row * cp_stride + col, mask=mask).to(ACC)
    c_new = f * cp + i * g
    # what the backward reads is what the next step reads: the stored (rounded) values
    c_new = c_new.to(c.dtype.element_ty)
    tc = _tanh(c_new.to(ACC))
    ty = gates.dtype.element_ty
    tl.store(base, i.to(ty), mask=mask)
    tl.store(base + H, f.to(ty), mask=mask)
    tl.store(base + 2 * H, g.to(ty), mask=mask)
    tl.store(base + 3 * H, o.to(ty), mask=mask)
    tl.store(c + row * c_stride + col, c_new, mask=mask)
    tl.store(tanh_c + row * tc_stride + col, tc.to(tanh_c.dtype.element_ty), mask=mask)
    tl.store(h + row * h_stride + col, (o * tc).to(h.dtype.element_ty), mask=mask)


@triton.jit
def _lstm_backward(gates, g_stride, tanh_c, tc_stride, c_prev, cp_stride, dh, dh_stride, dc, dc_stride,
                   dgates, dg_stride, dc_prev, dcp_stride, n, H, BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    base = gates + row * g_stride + col
    i = tl.load(base, mask=mask).to(ACC)
    f = tl.load(base + H, mask=mask).to(ACC)
    g = tl.load(base + 2 * H, mask=mask).to(ACC)
    o = tl.load(base + 3 * H, mask=mask).to(ACC)
    tc = tl.load(tanh_c + row * tc_stride + col, mask=mask).to(ACC)
    cp = tl.load(c_prev + row * cp_stride + col, mask=mask).to(ACC)
    d_h = tl.load(dh + row * dh_stride + col, mask=mask).to(ACC)
    dc_ptr = dc + row * dc_stride + col
    d_c = tl.load(dc_ptr, mask=mask).to(ACC) + d_h * o * (1.0 - tc * tc)
    tl.store(dc_ptr, d_c.to(dc.dtype.element_ty), mask=mask)
    out = dgates + row * dg_stride + col
    ty = dgates.dtype.element_ty
    tl.store(out, (d_c * g * i * (1.0 - i)).to(ty), mask=mask)
    tl.store(out + H, (d_c * cp * f * (1.0 - f)).to(ty), mask=mask)
    tl.store(out + 2 * H, (d_c * i * (1.0 - g * g)).to(ty), mask=mask)
    tl.store(out + 3 * H, (d_h * tc * o * (1.0 - o)).to(ty), mask=mask)
    tl.store(dc_prev + row * dcp_stride + col, (d_c * f).to(dc_prev.dtype.element_ty), mask=mask)


@triton.jit
def _gru_forward(gates, g_stride, hidden, hd_stride, h_prev, hp_stride, h, h_stride, n, H,
                 BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    base = gates + row * g_stride + col
    hid = hidden + row * hd_stride + col
    r = _sigmoid(tl.load(base, mask=mask).to(ACC) + tl.load(hid, mask=mask).to(ACC))
    z = _sigmoid(tl.load(base + H, mask=mask).to(ACC) + tl.load(hid + H, mask=mask).to(ACC))
    cand = _tanh(tl.load(base + 2 * H, mask=mask).to(ACC) + r * tl.load(hid + 2 * H, mask=mask).to(ACC))
    hp = tl.load(h_prev + row * hp_stride + col, mask=mask).to(ACC)
    ty = gates.dtype.element_ty
    tl.store(base, r.to(ty), mask=mask)
    tl.store(base + H, z.to(ty), mask=mask)
    tl.store(base + 2 * H, cand.to(ty), mask=mask)
    tl.store(h + row * h_stride + col, (cand + z * (hp - cand)).to(h.dtype.element_ty), mask=mask)


@triton.jit
def _gru_backward(gates, g_stride, hidden, hd_stride, h_prev, hp_stride, dh, dh_stride, dgates, dg_stride,
                  direct, dr_stride, n, H, BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = _rows(offs, H)
    base = gates + row * g_stride + col
    r = tl.load(base, mask=mask).to(ACC)
    z = tl.load(base + H, mask=mask).to(ACC)
    cand = tl.load(base + 2 * H, mask=mask).to(ACC)
    hidden_n = tl.load(hidden + row * hd_stride + col + 2 * H, mask=mask).to(ACC)
    hp = tl.load(h_prev + row * hp_stride + col, mask=mask).to(ACC)
    d_h = tl.load(dh + row * dh_stride + col, mask=mask).to(ACC)
    to_prev = d_h * z
    dn = (d_h - to_prev) * (1.0 - cand * cand)
    out = dgates + row * dg_stride + col  # [n_x | r | z | n_h]
    ty = dgates.dtype.element_ty
    tl.store(out, dn.to(ty), mask=mask)
    tl.store(out + H, (dn * hidden_n * r * (1.0 - r)).to(ty), mask=mask)
    tl.store(out + 2 * H, ((hp - cand) * d_h * z * (1.0 - z)).to(ty), mask=mask)
    tl.store(out + 3 * H, (dn * r).to(ty), mask=mask)
    tl.store(direct + row * dr_stride + col, to_prev.to(direct.dtype.element_ty), mask=mask)


def _meta(step: Step) -> tuple[tuple[int], int, int, dict]:
    """Grid, element count, H and the compile-time arguments of one step's launch."""
    H = step.unit.hidden_size
    n = step.rows.size * H
    acc = tl.float64 if step.gates.dtype == torch.float64 else tl.float32
    return (triton.cdiv(n, BLOCK),), n, H, {"BLOCK": BLOCK, "ACC": acc}


def _s(t: Tensor) -> tuple[Tensor, int]:
    """A row-strided view and its row stride (columns must be unit-stride)."""
    assert t.stride(-1) == 1 or t.shape[-1] == 1, "cell views must have unit column stride"
    return t, t.stride(0)


def activation_forward(step: Step, relu: bool) -> None:
    """h = relu(pre) or tanh(pre)."""
    grid, n, H, meta = _meta(step)
    _act_forward[grid](*_s(step.gates), *_s(step.h), n, H, RELU=relu, **meta)


def activation_backward(step: Step, relu: bool) -> None:
    """dpre = dh·[h > 0] or dh·(1 − h²)."""
    grid, n, H, meta = _meta(step)
    _act_backward[grid](*_s(step.dh), *_s(step.h), *_s(step.dgates), n, H, RELU=relu, **meta)


def lstm_forward(step: Step) -> None:
    """Gate activations in place, c, tanh(c) into aux, h."""
    grid, n, H, meta = _meta(step)
    _lstm_forward[grid](*_s(step.gates), *_s(step.c_prev), *_s(step.c), *_s(step.h), *_s(step.aux), n, H, **meta)


def lstm_backward(step: Step) -> None:
    """dc completed in place, dgates [i, f, g, o], and dc·f for the previous cell state."""
    grid, n, H, meta = _meta(step)
    dc_prev, _ = blocks(step.scratch, H)
    _lstm_backward[grid](*_s(step.gates), *_s(step.aux), *_s(step.c_prev), *_s(step.dh), *_s(step.dc),
                         *_s(step.dgates), *_s(dc_prev), n, H, **meta)
    step.dc_prev = dc_prev


def gru_forward(step: Step) -> None:
    """r, z, n in place of the gate pre-activations, and h."""
    grid, n, H, meta = _meta(step)
    _gru_forward[grid](*_s(step.gates), *_s(step.aux), *_s(step.h_prev), *_s(step.h), n, H, **meta)


def gru_backward(step: Step) -> None:
    """dgates [n_x | r | z | n_h] and dh·z for the previous state."""
    grid, n, H, meta = _meta(step)
    direct, _ = blocks(step.scratch, H)
    _gru_backward[grid](*_s(step.gates), *_s(step.aux), *_s(step.h_prev), *_s(step.dh), *_s(step.dgates),
                        *_s(direct), n, H, **meta)
    step.dh_direct = direct
