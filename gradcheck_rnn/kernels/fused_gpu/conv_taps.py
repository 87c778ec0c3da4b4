"""The Triton convolution of the fused GPU ``conv1d`` kernel: every output row of a packed batch
from its W taps, in one launch.

:meth:`~gradcheck_rnn.kernels.conv1d_cpu.Conv1dCPUKernel.convolve` gathers, for each stream row r,
the W rows ``taps[r]`` of the buffer C = [u_stream | h0 rows] and sums them weighted by w_conv,
adds b_conv and applies SiLU. :func:`convolve` does the same: each program owns a block of rows
and a block of channels, loads each tap's row index and the row's channels (the gather is the
index load, no copy of C), accumulates in the data's dtype (float64 for f64 cases, float32 for
f32: the only ones the family kernels run), and stores the pre-activation (the backward's) and
the output. W, the bias and SiLU are compile-time.

The kernel uses triton.language's builtins only, ``tl.full`` and not ``tl.zeros`` (see
:mod:`.scan`: pytest may import triton before ``TRITON_INTERPRET`` is set). :data:`INTERPRETED`
records whether ``triton.jit`` chose the interpreter when this module was first imported.
"""

from __future__ import annotations

import triton
import triton.language as tl
from torch import Tensor

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)
BLOCK_ROWS = 32
MAX_CHANNELS = 64  # the widest block of channels a program owns


@triton.jit
def _convolve(buffer, taps, weight, bias, pre, out, N, H, W: tl.constexpr, HAS_BIAS: tl.constexpr,
              SILU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    row_ok, col_ok = rows < N, cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    acc = tl.full((BLOCK_N, BLOCK_H), 0.0, pre.dtype.element_ty)  # tl.full, not tl.zeros: a builtin (scan.py)
    for j in tl.static_range(W):
        source = tl.load(taps + rows * W + j, mask=row_ok, other=0)
        tap = tl.load(weight + cols * W + j, mask=col_ok, other=0.0)
        acc += tl.load(buffer + source[:, None] * H + cols[None, :], mask=mask, other=0.0) * tap[None, :]
    if HAS_BIAS:
        acc += tl.load(bias + cols, mask=col_ok, other=0.0)[None, :]
    at = rows[:, None] * H + cols[None, :]
    tl.store(pre + at, acc, mask=mask)
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    tl.store(out + at, acc, mask=mask)


def convolve(buffer: Tensor, taps: Tensor, weight: Tensor, bias: Tensor | None, silu: bool) -> tuple[Tensor, Tensor]:
    """(pre, y), each (N, H), of every stream row (as the CPU kernel's ``convolve``) in one launch."""
    buffer, taps, weight = buffer.contiguous(), taps.contiguous(), weight.contiguous()
    N, H = taps.shape[0], buffer.shape[1]
    pre, out = buffer.new_empty(N, H), buffer.new_empty(N, H)
    if N == 0:
        return pre, out
    block_h = min(MAX_CHANNELS, triton.next_power_of_2(H))
    grid = (triton.cdiv(N, BLOCK_ROWS), triton.cdiv(H, block_h))
    _convolve[grid](buffer, taps, weight, weight if bias is None else bias.contiguous(), pre, out, N, H,
                    W=weight.shape[1], HAS_BIAS=bias is not None, SILU=silu, BLOCK_N=BLOCK_ROWS, BLOCK_H=block_h)
    return pre, out
