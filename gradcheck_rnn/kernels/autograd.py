"""The autograd entry over any :class:`~.algorithm.FusedKernel`: ``torch.autograd.Function``
whose backward is the kernel's hand-written BPTT (never autograd through a loop)."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..model.rnn_config import RNNConfig
from ..model.rnn_config import GATES
from ..model.layout import pack, param_key, unpack
from .algorithm import FusedKernel


def _lengths_list(seq_lengths: Any) -> list[int]:
    if isinstance(seq_lengths, Tensor):
        return [int(v) for v in seq_lengths.tolist()]
    return [int(v) for v in np.asarray(seq_lengths).reshape(-1)]


def _config_for(x: Tensor, flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                proj_size: int = 0, bias: bool = True) -> RNNConfig:
    """The config of a flat cudnn-style parameter vector; H is solved from its length."""
    G, D, I, n, P, L = GATES[mode], 2 if bidirectional else 1, x.shape[2], flat_params.numel(), proj_size, num_layers
    biases = 2 * G * int(bias)
    if P:
        # n = D·(G·H·I + G·H·P + P·H + 2G·H + (L−1)·(G·H·D·P + G·H·P + P·H + 2G·H)) = b·H
        a, b = 0, D * (G * I + G * P + P + biases + (L - 1) * (G * D * P + G * P + P + biases))
        H = n // b
    else:
        # n = D·G·(H·I + H² + 2H + (L−1)·(D·H² + H² + 2H)) = a·H² + b·H
        a, b = D * G * (1 + (L - 1) * (D + 1)), D * (G * I + biases * L)
        H = round((-b + math.sqrt(b * b + 4 * a * n)) / (2 * a))
    if H < 1 or a * H * H + b * H != n:
        raise ValueError(f"flat parameter vector of {n} values does not fit {mode} with {num_layers} layers, "
                         f"{'bi' if bidirectional else 'uni'}directional, input size {I}")
    return RNNConfig(mode, num_layers, bidirectional, I, H, x.shape[0], x.shape[1], proj_size=P, bias=bias)


class KernelFunction(torch.autograd.Function):
    """Autograd entry over any :class:`FusedKernel`: ``apply(x, seq_lengths, h0, c0,
    flat_params, mode, num_layers, bidirectional, kernel[, proj_size, bias]) -> (y, hy, cy)``;
    cy is None unless LSTM.

    ``flat_params`` is the cudnn-style flat vector (:func:`gradcheck_rnn.model.layout.pack`).
    The backward is the kernel's hand-written BPTT; it computes only what
    ``ctx.needs_input_grad`` asks for (no weight GEMMs when ``flat_params`` needs no gradient,
    no layer-0 dx GEMM when x needs none). Each kernel module makes its own with
    :func:`kernel_function`, where ``kernel`` is optional.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                kernel: FusedKernel, proj_size: int = 0, bias: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
        config = _config_for(x, flat_params, mode, num_layers, bidirectional, proj_size, bias)
        params = unpack(flat_params, config)
        y, hy, cy, state = kernel.forward(x, _lengths_list(seq_lengths), h0, c0, params, mode,
                                          num_layers, bidirectional)
        ctx.kernel, ctx.state, ctx.config = kernel, state, config
        ctx.save_for_backward(x, h0, c0, flat_params)
        return y, hy, cy

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: Tensor | None, dhy: Tensor | None, dcy: Tensor | None) -> tuple[Any, ...]:
        _, _, _, flat_params = ctx.saved_tensors  # raises if an input was modified in place
        need_x, _, need_h0, need_c0, need_params = ctx.needs_input_grad[:5]
        dx, dh0, dc0 = ctx.kernel.backward_data(ctx.state, dy, dhy, dcy, need_x)
        d_params = None
        if need_params:
            d_params = torch.empty_like(flat_params)
            ctx.kernel.backward_weights(ctx.state, unpack(d_params, ctx.config))
        # one None for each non-tensor input: mode, layers, directions, kernel (and proj_size, bias)
        return (dx, None, dh0 if need_h0 else None, dc0 if need_c0 else None, d_params,
                *[None] * (len(ctx.needs_input_grad) - 5))


def kernel_function(default_kernel: type[FusedKernel], name: str) -> type[KernelFunction]:
    """A :class:`KernelFunction` whose ``kernel`` argument is optional and defaults to a new
    ``default_kernel()``: ``apply(x, seq_lengths, h0, c0, flat_params, mode, num_layers,
    bidirectional, kernel=None, proj_size=0, bias=True) -> (y, hy, cy)``."""

    class DefaultKernelFunction(KernelFunction):
        @staticmethod
        def forward(ctx: Any, x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                    flat_params: Tensor, mode: str, num_layers: int, bidirectional: bool,
                    kernel: FusedKernel | None = None, proj_size: int = 0,
                    bias: bool = True) -> tuple[Tensor, Tensor, Tensor | None]:
            return KernelFunction.forward(ctx, x, seq_lengths, h0, c0, flat_params, mode, num_layers, bidirectional,
                                          kernel if kernel is not None else default_kernel(), proj_size, bias)

    DefaultKernelFunction.__name__ = DefaultKernelFunction.__qualname__ = name
    DefaultKernelFunction.__module__ = default_kernel.__module__
    DefaultKernelFunction.__doc__ = (f":class:`KernelFunction` with :class:`{default_kernel.__name__}` as the default "
                                     f"kernel.\n\n" + (kernel_function.__doc__ or ""))
    return DefaultKernelFunction


def apply_kernel(x: Tensor, seq_lengths: Any, h0: Tensor | None, c0: Tensor | None,
                 params: Mapping[str, Tensor], mode: str, num_layers: int, bidirectional: bool,
                 kernel: FusedKernel) -> tuple[Tensor, Tensor, Tensor | None]:
    """Differentiable fused RNN over a parameter dict (keys ``l{layer}.{fwd|bwd}.{kind}``)."""
    T, B, I = x.shape
    w_hh, w_hr = params[param_key(0, "fwd", "w_hh")], params.get(param_key(0, "fwd", "w_hr"))
    H = w_hh.shape[0] // GATES[mode]
    P, bias = (0 if w_hr is None else w_hr.shape[0]), param_key(0, "fwd", "b_ih") in params
    config = RNNConfig(mode, num_layers, bidirectional, I, H, T, B, proj_size=P, bias=bias)
    return KernelFunction.apply(x, seq_lengths, h0, c0, pack(params, config), mode, num_layers,
                                bidirectional, kernel, P, bias)
