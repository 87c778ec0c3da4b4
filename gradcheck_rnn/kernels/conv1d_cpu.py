"""The project's own fused CPU kernel of the ``conv1d`` family: the whole causal convolution at once
over a packed batch, its state in and out, with a hand-written backward.

Semantics are :mod:`gradcheck_rnn.families.conv1d`. Nothing goes through autograd. Per layer, the
padded inputs are zeroed and RMS-normalised (the family's pre-norm) and u = x̂ W_inᵀ is one GEMM
over all T·B rows. Then, as causal-conv1d's and fla's varlen kernels take a batch, the valid rows
are packed back to back in the case's sequence order (:class:`Stream`: ``cu_seqlens`` = [0, L_0,
L_0 + L_1, …]; N = ΣL rows, no work on padding) and the initial states' W−1 rows per sequence are
put after them: one buffer C = [u_stream (N rows) | h0 rows (B·(W−1))], row N + b·(W−1) + i holding
sequence b's state slot i (oldest first). Every index the convolution reads is computed once per
batch from the lengths:

* ``taps`` (N, W): the row of C that output row r reads through tap j: its own sequence's input
  W−1−j steps back, or, before the sequence's start, the initial-state slot that stands there;
* ``finals`` (B, W−1): the rows of C holding each sequence's final state: its last W−1 inputs,
  and for a sequence shorter than W−1 the newest slots of h0, passed through (zero length: h0);
* ``readers`` (N, W): for the backward, the output row that reads stream row s through tap
  W−1−k, or a zero row where that output lies past the sequence's end (in the next sequence).

Forward: y = act((C[taps] ⊙ w_convᵀ).sum(taps) + b), one gather and one reduction for the whole
batch (:meth:`Conv1dCPUKernel.convolve`, the stage the Triton twin replaces), hy = C[finals].

Backward, by hand: dpre = dy ⊙ act'(pre); du of each stream row gathers the W outputs that read it
(``readers``); dh0 is the scatter of the taps that read initial-state rows plus the final-state
gradient of the slots a short sequence passed through; the final-state gradient dhy adds to the
inputs it came from; dw_conv sums C[taps] ⊙ dpre per sequence, then over sequences; db sums dpre;
dW_in and dx are one GEMM each (only when requested) back through the norm.

A step-by-step form has no parallel advantage here (a window of at most 4): the whole convolution
is one pass, so there are no chunks and no carry.

Each stage a mutant needs (:mod:`gradcheck_rnn.targets.kernel_bugs`) is a method: ``backward_readers``
(which outputs' gradients an input collects), ``state_tap_pre`` (where the initial state's taps
take the activation's derivative), ``final_state_backward`` (where dhy goes) and ``conv_weight_grad`` (the per-sequence
accumulation of dw_conv).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from ..families.conv1d import NORM_EPS
from ..model.case import RNNConfig
from .layer_stack import LayerStackKernel, pre_norm, stacked_maps_backward

MAPS = ("w_in",)


@dataclass(frozen=True)
class Stream:
    """Where every row of a packed batch reads and writes (module docstring), as index tensors."""

    lengths: tuple[int, ...]
    width: int
    rows: Tensor        # (N,) the padded (t·B + b) row of each stream row
    sequence: Tensor    # (N,) the sequence of each stream row
    ends: Tensor        # (N,) cu_seqlens[b + 1] of each stream row's sequence
    taps: Tensor        # (N, W) rows of C
    finals: Tensor      # (B, W − 1) rows of C

    @classmethod
    def of(cls, lengths: tuple[int, ...], width: int, device: torch.device | str) -> "Stream":
        """The tables of a batch with these sequence lengths and window W = ``width``."""
        B, S = len(lengths), width - 1
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        N = int(cu[-1])
        sequence = np.repeat(np.arange(B), lengths)
        position = np.arange(N) - cu[sequence]                       # t within its sequence
        rows = position * B + sequence
        back = position[:, None] - S + np.arange(width)              # the time each tap reads
        state_slot = N + sequence[:, None] * S + position[:, None] + np.arange(width)
        taps = np.where(back >= 0, cu[sequence][:, None] + back, state_slot)
        last = np.array(lengths)[:, None] - S + np.arange(S)         # the time of each final slot
        finals = np.where(last >= 0, cu[:-1, None] + last, N + np.arange(B)[:, None] * S + last + S)

        def tensor(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

        return cls(tuple(lengths), width, tensor(rows), tensor(sequence), tensor(cu[1:][sequence]), tensor(taps),
                   tensor(finals.reshape(B, S)))

    @property
    def tokens(self) -> int:
        """N = ΣL."""
        return int(self.rows.shape[0])


@dataclass
class Layer:
    """What the forward of one layer keeps for its backward."""

    x: Tensor       # (T, B, I_l), normalised, padded steps zeroed
    rms: Tensor     # (T, B, 1)
    stream: Stream
    buffer: Tensor  # C (N + B·(W−1), H)
    pre: Tensor     # (N, H) before the activation


def tap_sum(rows: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    """Σ_j weight[:, j] ⊙ rows[index[:, j]], (N, H) from rows (·, H), index (N, W) and weight (H, W):
    one row gather per tap, faster on a CPU than one gather of (N, W, H) (benchmarks/RESULTS.md, "conv1d")."""
    out = rows.index_select(0, index[:, 0]) * weight[:, 0]
    for j in range(1, index.shape[1]):
        out.addcmul_(rows.index_select(0, index[:, j]), weight[:, j])
    return out


def silu_grad(pre: Tensor) -> Tensor:
    """d silu(a)/da = σ(a)·(1 + a·(1 − σ(a)))."""
    sig = torch.sigmoid(pre)
    return sig * (1 + pre * (1 - sig))


class Conv1dCPUKernel(LayerStackKernel):
    """The fused conv1d kernel (see the module docstring); subclass and override one stage to mutate."""

    # ------------------------------------------------------------------ forward
    def convolve(self, buffer: Tensor, taps: Tensor, weight: Tensor, bias: Tensor | None,
                 silu: bool) -> tuple[Tensor, Tensor]:
        """The convolution of every stream row at once: (pre, y), each (N, H), from C, the taps
        (N, W), w_conv (H, W) and b_conv (H,) or None."""
        pre = tap_sum(buffer, taps, weight)
        if bias is not None:
            pre = pre + bias
        return pre, pre * torch.sigmoid(pre) if silu else pre

    def layer_forward(self, cfg: RNNConfig, p: Mapping[str, Tensor], x: Tensor, mask: Tensor, h0: Tensor,
                      index: int) -> tuple[Tensor, Tensor, Layer]:
        """One layer: (y (T, B, H) masked, the final state (B, H·(W−1)), what the backward keeps)."""
        T, B, H = x.shape[0], x.shape[1], cfg.hidden_size
        S = cfg.family.width(cfg) - 1
        stream = Stream.of(tuple(int(round(n)) for n in mask.sum(0).flatten().tolist()), S + 1, x.device)
        x, rms = pre_norm(x * mask, NORM_EPS)
        u = (x @ p["w_in"].T).reshape(T * B, H)
        buffer = torch.cat([u[stream.rows], h0.reshape(B, H, S).transpose(1, 2).reshape(B * S, H)])
        pre, y_stream = self.convolve(buffer, stream.taps, p["w_conv"], p.get("b_conv"), cfg.option("silu"))
        y = x.new_zeros(T * B, H).index_copy_(0, stream.rows, y_stream)
        final = buffer[stream.finals].transpose(1, 2).reshape(B, H * S)
        return y.reshape(T, B, H), final, Layer(x, rms, stream, buffer, pre)

    # ------------------------------------------------------------------ backward stages
    def backward_readers(self, stream: Stream) -> Tensor:
        """(N, W): the stream row whose output reads row s through tap W−1−k, at column k; N (a
        zero row of dpre) where that output is past s's sequence, i.e. in the next sequence."""
        s = torch.arange(stream.tokens, device=stream.ends.device)[:, None]
        reader = s + torch.arange(stream.width, device=s.device)
        return torch.where(reader < stream.ends[:, None], reader, stream.tokens)

    def state_tap_pre(self, pre: Tensor, bias: Tensor | None) -> Tensor:
        """The pre-activation (rows, H) at which the taps on the initial state take SiLU's derivative:
        the forward's, bias included (a separate dh0 pass that recomputes it must add the bias)."""
        return pre

    def final_state_backward(self, d_buffer: Tensor, stream: Stream, d_final: Tensor) -> None:
        """dhy (B, W−1, H) into the rows of C it came from: the last inputs of each sequence, and
        the initial-state slots a sequence shorter than W−1 passed through to its final state."""
        d_buffer.index_add_(0, stream.finals.flatten(), d_final.reshape(-1, d_final.shape[-1]))

    def conv_weight_grad(self, products: Tensor, stream: Stream) -> Tensor:
        """One tap's column of dw_conv (H,) from its products C[taps[:, j]] ⊙ dpre (N, H): summed
        within each sequence's rows (as a varlen kernel accumulates a block per sequence), then
        over the sequences."""
        per_sequence = products.new_zeros(len(stream.lengths), products.shape[1])
        return per_sequence.index_add_(0, stream.sequence, products).sum(0)

    def layer_backward(self, cfg: RNNConfig, p: Mapping[str, Tensor], layer: Layer, mask: Tensor, dy: Tensor,
                       dhy: Tensor, need_weights: bool, need_x: bool) -> tuple[Tensor | None, Tensor, dict[str, Tensor]]:
        """dx, dh0 and (when asked) the layer's parameter gradients from dy and dhy."""
        T, B, H = dy.shape[0], dy.shape[1], cfg.hidden_size
        stream, weight = layer.stream, p["w_conv"]
        N, W = stream.tokens, stream.width
        d_out = dy.reshape(T * B, H)[stream.rows]
        d_pre = d_out * silu_grad(layer.pre) if cfg.option("silu") else d_out
        # every stream row collects the W outputs that read it; the zero row N stands for none
        padded_d_pre = torch.cat([d_pre, d_pre.new_zeros(1, H)])
        d_stream = tap_sum(padded_d_pre, self.backward_readers(stream), weight.flip(1))
        d_buffer = torch.cat([d_stream, dy.new_zeros(B * (W - 1), H)])
        # the taps that read the initial state: the first W − 1 outputs of each sequence
        rows, taps = (stream.taps >= N).nonzero(as_tuple=True)
        if cfg.option("silu"):
            d_state = d_out[rows] * silu_grad(self.state_tap_pre(layer.pre[rows], p.get("b_conv")))
        else:
            d_state = d_pre[rows]
        d_buffer.index_add_(0, stream.taps[rows, taps], d_state * weight.T[taps])
        self.final_state_backward(d_buffer, stream, dhy.reshape(B, H, W - 1).transpose(1, 2))
        du = dy.new_zeros(T * B, H).index_copy_(0, stream.rows, d_buffer[:N]).reshape(T, B, H)
        dx, grads = stacked_maps_backward(layer.x, layer.rms, mask, du, p, MAPS, need_x, need_weights)
        if need_weights:
            grads["w_conv"] = torch.stack([self.conv_weight_grad(layer.buffer.index_select(0, stream.taps[:, j]) * d_pre,
                                                                 stream) for j in range(W)], 1)
            if "b_conv" in p:
                grads["b_conv"] = d_pre.sum(0)
        dh0 = d_buffer[N:].reshape(B, W - 1, H).transpose(1, 2).reshape(B, H * (W - 1))
        return dx, dh0, grads
