"""The Triton pointwise cells of the fused GPU sLSTM kernel: one launch per step and direction for
the forward and one for the backward.

The forward launch reads the step's input projection and recurrent product, adds them, and does
the whole stabilised cell (gates, the max, c, n, m, h), the length mask's hold and the output;
it writes what the backward reads into the step's planes of one saved buffer. The backward
launch does the formulas of :mod:`gradcheck_rnn.kernels.slstm_cpu`'s docstring, the true
derivative through the max included, and writes the step's gate gradients (0 at a held step) and
the state gradients handed to the step before it. The recurrent products stay torch ops
(:mod:`.slstm`).

Every (B, H) operand of a step is contiguous except the input projection's rows and the output
gradient, whose row strides are arguments. The arithmetic is in the data's dtype, float64 or
float32 (the only ones family kernels run), with nothing widened or narrowed: each cast is an op
the interpreter pays for at every launch.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

from .cells import BLOCK, _sigmoid, _tanh

# The saved buffer's planes, in the order of slstm_cpu.Unit's fields (what the backward reads).
SAVED = ("h_prev", "c_prev", "n_prev", "f_pre", "i_s", "f_s", "z_t", "o_g", "c", "n", "h")
# Where the Triton backward sends δm = dL/dm_t (its ROUTE flag): to the max's winner (the true
# derivative), nowhere (each step's m held constant), or always to the forget branch (a mutant).
ROUTES = {"winner": 0, "held": 1, "forget": 2}


@triton.jit
def _log_sigmoid(x):
    # min(x, 0) − log(1 + e^−|x|): no overflow at either end
    return tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def _forward(pre_x, px_stride, rec, valid_t, h, cnm, y, saved, plane, won, n, H, EXPF: tl.constexpr,
             BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = offs // H, offs % H
    px = pre_x + row * px_stride + col
    rc = rec + row * 4 * H + col
    i = tl.load(px, mask=mask) + tl.load(rc, mask=mask)
    f = tl.load(px + H, mask=mask) + tl.load(rc + H, mask=mask)
    z = tl.load(px + 2 * H, mask=mask) + tl.load(rc + 2 * H, mask=mask)
    o = tl.load(px + 3 * H, mask=mask) + tl.load(rc + 3 * H, mask=mask)
    state = cnm + row * 3 * H + col
    h_prev = tl.load(h + offs, mask=mask)
    c_prev = tl.load(state, mask=mask)
    n_prev = tl.load(state + H, mask=mask)
    m_prev = tl.load(state + 2 * H, mask=mask)
    if EXPF:
        decayed = f + m_prev
    else:
        decayed = _log_sigmoid(f) + m_prev
    i_won = (i >= decayed) | (n_prev == 0.0)  # n_{t−1} = 0 (a zero state): m_t = ĩ
    m_new = tl.where(i_won, i, decayed)
    i_s = tl.exp(i - m_new)
    f_s = tl.exp(decayed - m_new)
    z_t = _tanh(z)
    o_g = _sigmoid(o)
    c_new = f_s * c_prev + i_s * z_t
    n_new = f_s * n_prev + i_s
    h_new = o_g * c_new / n_new
    out = saved + offs  # the planes in SAVED's order
    tl.store(out, h_prev, mask=mask)
    tl.store(out + plane, c_prev, mask=mask)
    tl.store(out + 2 * plane, n_prev, mask=mask)
    tl.store(out + 3 * plane, f, mask=mask)
    tl.store(out + 4 * plane, i_s, mask=mask)
    tl.store(out + 5 * plane, f_s, mask=mask)
    tl.store(out + 6 * plane, z_t, mask=mask)
    tl.store(out + 7 * plane, o_g, mask=mask)
    tl.store(out + 8 * plane, c_new, mask=mask)
    tl.store(out + 9 * plane, n_new, mask=mask)
    tl.store(out + 10 * plane, h_new, mask=mask)
    tl.store(won + offs, i_won.to(tl.int8), mask=mask)
    # past a sequence's length: output 0, every state (h, c, n, m) held
    valid = tl.load(valid_t + row, mask=mask) != 0
    tl.store(y + offs, tl.where(valid, h_new, 0.0), mask=mask)
    tl.store(h + offs, tl.where(valid, h_new, h_prev), mask=mask)
    tl.store(state, tl.where(valid, c_new, c_prev), mask=mask)
    tl.store(state + H, tl.where(valid, n_new, n_prev), mask=mask)
    tl.store(state + 2 * H, tl.where(valid, m_new, m_prev), mask=mask)


@triton.jit
def _backward(saved, plane, won, valid_t, dy, dy_stride, dh_carry, dh_rec, dcnm, dgates, n, H,
              EXPF: tl.constexpr, ROUTE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = offs // H, offs % H
    s = saved + offs  # the planes in SAVED's order
    c_prev = tl.load(s + plane, mask=mask)
    n_prev = tl.load(s + 2 * plane, mask=mask)
    f_pre = tl.load(s + 3 * plane, mask=mask)
    i_s = tl.load(s + 4 * plane, mask=mask)
    f_s = tl.load(s + 5 * plane, mask=mask)
    z_t = tl.load(s + 6 * plane, mask=mask)
    o_g = tl.load(s + 7 * plane, mask=mask)
    c = tl.load(s + 8 * plane, mask=mask)
    nn = tl.load(s + 9 * plane, mask=mask, other=1.0)  # no 0/0 in the lanes past n
    h = tl.load(s + 10 * plane, mask=mask)
    # dL/dh of the state after the step: carried through held steps, or R_blockᵀ dG of the step after
    d_h = tl.load(dh_carry + offs, mask=mask) + tl.load(dh_rec + offs, mask=mask)
    g_h = d_h + tl.load(dy + row * dy_stride + col, mask=mask)
    state = dcnm + row * 3 * H + col
    dc = tl.load(state, mask=mask)
    dn = tl.load(state + H, mask=mask)
    dm = tl.load(state + 2 * H, mask=mask)
    d_o = g_h * (c / nn) * o_g * (1.0 - o_g)
    d_c = dc + g_h * o_g / nn
    d_n = dn - g_h * h / nn
    d_z = d_c * i_s * (1.0 - z_t * z_t)
    d_i_s = (d_c * z_t + d_n) * i_s
    d_f_s = (d_c * c_prev + d_n * n_prev) * f_s
    dm_free = dm - d_i_s - d_f_s  # δm: dL/dm_t with m_t free
    if ROUTE == 0:  # "winner": to ĩ or to log f + m_{t−1}, whichever the max took
        i_won = tl.load(won + offs, mask=mask) != 0
        d_i = d_i_s + tl.where(i_won, dm_free, 0.0)
        d_decayed = d_f_s + tl.where(i_won, 0.0, dm_free)
    elif ROUTE == 1:  # "held": m a constant
        d_i = d_i_s
        d_decayed = d_f_s
    else:  # "forget": always to the forget branch
        d_i = d_i_s
        d_decayed = d_f_s + dm_free
    if EXPF:
        d_f = d_decayed
    else:
        d_f = d_decayed * _sigmoid(-f_pre)
    valid = tl.load(valid_t + row, mask=mask) != 0
    out = dgates + row * 4 * H + col
    tl.store(out, tl.where(valid, d_i, 0.0), mask=mask)
    tl.store(out + H, tl.where(valid, d_f, 0.0), mask=mask)
    tl.store(out + 2 * H, tl.where(valid, d_z, 0.0), mask=mask)
    tl.store(out + 3 * H, tl.where(valid, d_o, 0.0), mask=mask)
    # to the step before: at a held step every state gradient passes unchanged
    tl.store(dh_carry + offs, tl.where(valid, 0.0, d_h), mask=mask)
    tl.store(state, tl.where(valid, d_c * f_s, dc), mask=mask)
    tl.store(state + H, tl.where(valid, d_n * f_s, dn), mask=mask)
    tl.store(state + 2 * H, tl.where(valid, d_decayed, dm), mask=mask)


def _meta(h: Tensor, expf: bool) -> tuple[tuple[int], int, int, dict]:
    """Grid, element count, H and the compile-time arguments of one step's launch over (B, H)."""
    n = h.numel()
    return (triton.cdiv(n, BLOCK),), n, h.shape[-1], {"EXPF": expf, "BLOCK": BLOCK}


def forward_step(pre_x: Tensor, rec: Tensor, valid: Tensor, h: Tensor, cnm: Tensor, y: Tensor, saved: Tensor,
                 won: Tensor, expf: bool) -> None:
    """One step: ``pre_x`` (B, 4H) rows and ``rec`` (B, 4H) summed into the gates; the states ``h``
    (B, H) and ``cnm`` (B, 3H) advanced (held where ``valid`` (B,) is 0) in place; ``y`` (B, H);
    ``saved`` (len(SAVED), B, H planes) and ``won`` (B, H, int8) for the backward."""
    grid, n, H, meta = _meta(h, expf)
    rec = rec.contiguous()  # einsum may hand back a permuted layout
    assert pre_x.stride(-1) == 1 and h.is_contiguous() and cnm.is_contiguous()
    assert y.is_contiguous() and saved[0].is_contiguous() and won.is_contiguous()
    _forward[grid](pre_x, pre_x.stride(0), rec, valid, h, cnm, y, saved, saved.stride(0), won, n, H, **meta)


def backward_step(saved: Tensor, won: Tensor, valid: Tensor, dy: Tensor, dh_carry: Tensor, dh_rec: Tensor,
                  dcnm: Tensor, dgates: Tensor, expf: bool, route: str) -> None:
    """One step back: ``dgates`` (B, 4H) written (0 where ``valid`` is 0); ``dh_carry`` (the part
    of dL/dh held steps pass on) and ``dcnm`` (B, 3H) updated in place for the step before; the
    rest of that step's dL/dh is R_blockᵀ ``dgates``, the caller's product."""
    grid, n, H, meta = _meta(dh_carry, expf)
    dh_rec = dh_rec.contiguous()  # einsum may hand back a permuted layout
    if dy.stride(-1) != 1:  # a strided incoming gradient (-dyS): the kernel reads unit columns
        dy = dy.contiguous()
    assert dh_carry.is_contiguous() and dcnm.is_contiguous()
    assert dgates.is_contiguous() and saved[0].is_contiguous() and won.is_contiguous()
    _backward[grid](saved, saved.stride(0), won, valid, dy, dy.stride(0), dh_carry, dh_rec, dcnm, dgates, n, H,
                    ROUTE=ROUTES[route], **meta)
