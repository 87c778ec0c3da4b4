"""The ``flax`` target: flax.linen's ``nn.RNN`` over its LSTM, GRU and simple cells.

Loaded by path in any interpreter with numpy, jax and flax (``flax@PYTHON``), or in-process
when flax imports here; it imports nothing from gradcheck_rnn. A case is run as a careful
flax user writes a stacked, possibly bidirectional RNN with variable lengths:
``nn.RNN(cell, time_major=True)`` per layer (``nn.Bidirectional`` of two, outputs concatenated
[fwd | bwd]), ``seq_lengths`` passed to every layer, ``initial_carry`` from h0/c0 (omitted for
``-z``: flax's zero carry), ``return_carry=True`` for hy/cy, and gradients by ``jax.vjp`` over
the requested inputs and parameters only.

Mapping (flax/linen/recurrent.py), written once in :func:`to_flax`: flax's kernels are Dense
kernels, (in, out) = our weight block transposed, one Dense per gate. Biases sit where flax puts
them; where flax has one bias for a sum of two of ours it gets their sum. The gradients of our
parameters are JAX's derivative through that linear map, so there is no second, inverse map:
- LSTMCell: ``ii, if, ig, io`` (no bias), ``hi, hf, hg, ho`` (bias = b_ih + b_hh), order i f g o;
- GRUCell: ``ir, iz`` (bias = b_ih + b_hh of r, z), ``in`` (bias = b_ih of n), ``hr, hz`` (no
  bias), ``hn`` (bias = b_hh of n, inside r * (...), as in torch and cuDNN), order r z n;
- SimpleCell: ``i`` (bias = b_ih + b_hh), ``h`` (no bias); ``activation_fn=nn.relu`` for rnn_relu.

Semantics a user must know: flax does NOT zero outputs at padded steps (nn.RNN's docstring says
so); its carry is the state at each sequence's last valid step. So this target masks y with the
lengths, as a careful user does before a loss; nothing else is changed. nn.RNN picks the final
carry at index ``seq_lengths - 1``, which for a length 0 is -1, the state after the last padded
step: zero-length sequences are declined with that reason. Also declined: projections
(no flax cell has them); float16/bfloat16 (not judged here); float64 while ``jax_enable_x64`` is
off in this process (JAX would silently compute in float32; set JAX_ENABLE_X64=1). No-bias
configs run with zero biases (flax's cells always have them) and return no bias gradients.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

# Loaded by file path in an interpreter that may not have gradcheck_rnn: so is the shared base.
_spec = importlib.util.spec_from_file_location("_gradcheck_foreign_jax_grad", Path(__file__).with_name("jax_grad.py"))
jax_grad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jax_grad)

_CELL_GATES = {"lstm": "ifgo", "gru": "rzn", "rnn_tanh": "", "rnn_relu": ""}


def _blocks(w: np.ndarray, gates: str) -> dict[str, np.ndarray]:
    H = w.shape[0] // max(len(gates), 1)
    return {g: w[k * H:(k + 1) * H] for k, g in enumerate(gates or "_")}


def to_flax(params: dict[str, Any], config: Any, layer: int, direction: str) -> dict[str, Any]:
    """One layer and direction of our parameters (numpy or JAX arrays) as a flax cell's tree."""
    p = {k: params.get(f"l{layer}.{direction}.{k}") for k in ("w_ih", "w_hh", "b_ih", "b_hh")}
    zeros = p["w_ih"][:, 0] * 0  # the weights' own dtype and array type: no float64 sneaks into a float32 scan
    b_ih = p["b_ih"] if config.bias else zeros
    b_hh = p["b_hh"] if config.bias else zeros
    gates = _CELL_GATES[config.mode]
    wi, wh, bi, bh = (_blocks(a, gates) for a in (p["w_ih"], p["w_hh"], b_ih, b_hh))
    if config.mode == "lstm":
        tree = {f"i{g}": {"kernel": wi[g].T} for g in gates}
        tree.update({f"h{g}": {"kernel": wh[g].T, "bias": bi[g] + bh[g]} for g in gates})
    elif config.mode == "gru":
        tree = {"ir": {"kernel": wi["r"].T, "bias": bi["r"] + bh["r"]}, "iz": {"kernel": wi["z"].T, "bias": bi["z"] + bh["z"]},
                "in": {"kernel": wi["n"].T, "bias": bi["n"]}, "hr": {"kernel": wh["r"].T}, "hz": {"kernel": wh["z"].T},
                "hn": {"kernel": wh["n"].T, "bias": bh["n"]}}
    else:
        tree = {"i": {"kernel": wi["_"].T, "bias": bi["_"] + bh["_"]}, "h": {"kernel": wh["_"].T}}
    return tree


class FlaxRNN(jax_grad.JaxGradTarget):
    """flax.linen nn.RNN stacks; see the module docstring for the mapping and the declines."""

    name = "flax"

    def supports(self, config: Any) -> bool | str:
        import jax

        if config.proj_size:
            return "flax.linen has no LSTM cell with projections"
        if config.dtype in ("f16", "bf16"):
            return "the flax target is judged in float32 and float64 only"
        if config.dtype == "f64" and not jax.config.jax_enable_x64:
            return "jax_enable_x64 is off in this process, so flax would compute float64 cases in float32; set JAX_ENABLE_X64=1"
        return True

    def supports_case(self, case: Any) -> bool | str:
        """nn.RNN returns the carry at index ``seq_lengths - 1`` (``_select_last_carry``): for a
        length 0 that is index -1, the state after the last padded step, not the initial one."""
        if (np.asarray(case.seq_lengths) == 0).any():
            return "flax's nn.RNN returns the carry at index seq_lengths - 1, the last padded step for a length 0"
        return True

    def _model(self, config: Any) -> Any:
        import flax.linen as nn
        import jax.numpy as jnp

        # param_dtype is also the dtype of the zero carry flax makes when no initial state is given
        kwargs = {"param_dtype": jnp.float64 if config.dtype == "f64" else jnp.float32}

        def cell(name: str) -> Any:
            if config.mode == "lstm":
                return nn.LSTMCell(config.hidden_size, name=name, **kwargs)
            if config.mode == "gru":
                return nn.GRUCell(config.hidden_size, name=name, **kwargs)
            activation = nn.relu if config.mode == "rnn_relu" else nn.tanh
            return nn.SimpleCell(config.hidden_size, activation_fn=activation, name=name, **kwargs)

        class Stack(nn.Module):
            @nn.compact
            def __call__(self, x, seq_lengths, carries):
                states = []
                for layer in range(config.num_layers):
                    rnn = lambda d: nn.RNN(cell(f"l{layer}_{d}"), time_major=True)  # noqa: E731
                    module = nn.Bidirectional(rnn("fwd"), rnn("bwd"), time_major=True) if config.bidirectional else rnn("fwd")
                    carry, x = module(x, seq_lengths=seq_lengths, initial_carry=carries[layer], return_carry=True)
                    states.extend(carry if config.bidirectional else [carry])
                return x, states

        return Stack()

    def forward_fn(self, cfg: Any, params: tuple[str, ...]) -> Any:
        """nn.RNN stacks over our arrays: y masked at padded steps, hy (and cy) stacked."""
        import jax.numpy as jnp

        L, D = cfg.num_layers, cfg.num_directions
        dirs = ("fwd", "bwd")[:D]
        model = self._model(cfg)

        def carries(h0: Any, c0: Any) -> list[Any]:
            if h0 is None:
                return [None] * L
            per = [(c0[i], h0[i]) if cfg.mode == "lstm" else h0[i] for i in range(L * D)]
            return [(per[D * l], per[D * l + 1]) if D == 2 else per[l] for l in range(L)]

        def forward(leaves: dict[str, Any], constants: dict[str, Any], lengths: Any) -> tuple[Any, Any, Any]:
            a = {**constants, **leaves}
            tree = {f"l{l}_{d}": to_flax({k: a[k] for k in params}, cfg, l, d) for l in range(L) for d in dirs}
            y, states = model.apply({"params": tree}, a["x"], lengths, carries(a.get("h0"), a.get("c0")))
            mask = (jnp.arange(cfg.max_len)[:, None] < lengths[None, :])[:, :, None]
            y = jnp.where(mask, y, 0)  # flax leaves outputs at padded steps; a careful user masks them
            if cfg.mode == "lstm":
                return y, jnp.stack([h for _, h in states]), jnp.stack([c for c, _ in states])
            return y, jnp.stack(states), None

        return forward


def make_target() -> FlaxRNN:
    return FlaxRNN()
