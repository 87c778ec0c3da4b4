"""The GEMMs of the fused kernels: MKL through ``torch.mm``, or oneDNN for large float32 products.

Why two routes: torch's CPU ``mm``/``addmm`` call MKL, which on AMD CPUs runs its AVX2 code. On the
project's 2-core AMD EPYC (Zen 5) machines it reaches ~115 GFLOP/s on the T·B-row GEMMs, while
oneDNN (what torch.nn's own fused LSTM runs on) uses AVX-512 there: measured side by side, 2–4×
faster on the T·B-row products and ~1.7× on one step's (32×256)·(256×1024). Both compute in IEEE
float32 (no TF32 or bf16 down-conversion), so the routes differ only in summation order, i.e. by
rounding.

oneDNN is reached through ``torch.ops.mkldnn._linear_pointwise``, the op torch's inductor emits for
CPU linear layers. It is private, so it is looked up once and ``torch.mm`` stays the route when it
is missing, for other dtypes (oneDNN has no float64; the half path keeps its own float32
accumulation) and off the CPU. It costs more a call than MKL (benchmarks/RESULTS.md, "Costs the code is built around"), so products under
:data:`ONEDNN_MIN_MACS` multiply-adds (every GEMM of the sweeps' tiny cases) stay on MKL.
Being private, its signature may change in any torch release: a call that raises ``TypeError`` or
``RuntimeError`` is done by ``torch.mm`` instead, and the process stops using oneDNN (one
``RuntimeWarning`` says so), so a new torch slows the kernel under test down but never breaks it.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor


def _find_onednn_linear():
    try:
        return torch.ops.mkldnn._linear_pointwise if torch.backends.mkldnn.is_available() else None
    except (AttributeError, RuntimeError):  # a torch build without the op
        return None


_ONEDNN_LINEAR = _find_onednn_linear()

ONEDNN_MIN_MACS = 1 << 20
"""The smallest product (m·k·n multiply-adds) sent to oneDNN."""


def _onednn(a: Tensor, b: Tensor) -> bool:
    return (_ONEDNN_LINEAR is not None and a.dtype == torch.float32
            and a.shape[0] * a.shape[1] * b.shape[1] >= ONEDNN_MIN_MACS and a.is_cpu)


def _dense(t: Tensor) -> Tensor:
    """``t``, or where it has gaps a dense copy in its own major order (row by row, not a
    transposing copy, which costs as much as the GEMM)."""
    if t.is_contiguous() or t.t().is_contiguous():
        return t
    return t.t().contiguous().t() if t.stride(0) == 1 else t.contiguous()


def _onednn_linear(a: Tensor, b: Tensor, addend: Tensor | None, bias: Tensor | None) -> Tensor | None:
    """``a·b + bias (+ addend)`` on oneDNN; None when the private op refused the call (then oneDNN is
    off for the rest of the process and the caller takes ``torch.mm``)."""
    global _ONEDNN_LINEAR
    # oneDNN reads a row-major ``a`` with any row stride, and dense operands, at full speed; other
    # strides (a bidirectional layer's h columns, GRU's dgates blocks transposed in the weight
    # gradients) take a reference path, measured ~1000× slower: those are copied dense first
    if a.stride(1) != 1:
        a = _dense(a)
    b = _dense(b)
    try:
        # oneDNN's linear is a·wᵀ with w (n, k): b.t() is a view, which it reads without a copy
        if addend is not None:
            return _ONEDNN_LINEAR.binary(a, addend, b.t(), None, "add")
        return _ONEDNN_LINEAR(a, b.t(), bias, "none", [], "")
    except (TypeError, RuntimeError) as exc:  # a torch whose private op takes other arguments
        _ONEDNN_LINEAR = None
        warnings.warn(f"torch.ops.mkldnn._linear_pointwise failed ({type(exc).__name__}: {exc}); the fused "
                      f"kernels use torch.mm for the rest of this process", RuntimeWarning, stacklevel=3)
        return None


def matmul(a: Tensor, b: Tensor, out: Tensor | None = None, *, bias: Tensor | None = None,
           accumulate: bool = False) -> Tensor:
    """``a·b (+ bias)``, written into ``out`` when given, or added to it when ``accumulate``;
    returns the result. Any strides (views such as ``w.t()`` or column blocks are read in place)."""
    if _onednn(a, b):
        result = _onednn_linear(a, b, out if accumulate else None, bias)
        if result is not None:
            return result if out is None else out.copy_(result)
    if accumulate:
        return out.addmm_(a, b)
    if bias is not None:
        return torch.addmm(bias, a, b) if out is None else torch.addmm(bias, a, b, out=out)
    return torch.mm(a, b) if out is None else torch.mm(a, b, out=out)
