"""The ``keras`` target: Keras 3's LSTM, GRU(reset_after=True) and SimpleRNN on the JAX backend.

Loaded by path in any interpreter with numpy, jax and keras (``keras@PYTHON``), or in-process
when keras imports here on the JAX backend; it imports nothing from gradcheck_rnn. A case runs as
a careful Keras user writes it: one recurrent layer per layer (``Bidirectional(...,
merge_mode="concat")`` for two directions: [fwd | bwd]), ``return_sequences=True``,
``return_state=True``, ``use_bias`` from the config, a boolean ``mask`` (t < length) passed to
every layer, ``initial_state`` from h0/c0 (omitted for ``-z``: Keras's zero state), and gradients
by ``jax.vjp`` of the layers' ``stateless_call`` over the requested inputs and parameters only.

Mapping (keras/src/layers/rnn/{lstm,gru,simple_rnn}.py), written once in :func:`to_keras`;
kernels are (in, units·gates) = our weights transposed, gate blocks side by side:
- LSTM: gates i, f, c, o (ours i, f, g, o), one bias = b_ih + b_hh;
- GRU with ``reset_after=True`` (the Keras 3 default, the cuDNN/torch form): gates **z, r, h**
  (ours r, z, n), bias (2, 3H) = [input biases; recurrent biases], the recurrent h bias inside
  r * (...), as in torch;
- SimpleRNN: one bias = b_ih + b_hh, ``activation="relu"`` for rnn_relu.
The gradients of our parameters are JAX's derivative through that linear map.

Semantics a user must know: under a mask Keras repeats the last valid output over masked steps
unless ``zero_output_for_mask=True``; this target sets it (it is what makes padded outputs 0).
``Bidirectional`` has a dtype policy of its own (floatx, float32) and casts inputs and states to it
before the wrapped float64 layers run; this target gives it the layers' dtype.
Masked steps keep the state, so hy is the state at each sequence's last valid step, and the
backward layer of Bidirectional (``go_backwards``) starts at each sequence's own last step.
Declined: projections (no Keras layer has them); float16/bfloat16 (not judged here); float64
for every mode with a tanh (LSTM, GRU, rnn_tanh): Keras 3.15's ``ops.tanh`` returns float32 for
a float64 tensor (its ``result_type(float64, float)`` is float32), so those layers compute in
float32 (a tanh SimpleRNN even fails its scan's carry dtype check) — docs/keras-3.15/float64_tanh.py
shows it; float64 rnn_relu while ``jax_enable_x64`` is off (set JAX_ENABLE_X64=1); any backend but JAX.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

# Loaded by file path in an interpreter that may not have gradcheck_rnn: so is the shared base.
_spec = importlib.util.spec_from_file_location("_gradcheck_foreign_jax_grad", Path(__file__).with_name("jax_grad.py"))
jax_grad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jax_grad)

_OUR_GATES = {"lstm": "ifgo", "gru": "rzn", "rnn_tanh": "h", "rnn_relu": "h"}
_KERAS_ORDER = {"lstm": "ifgo", "gru": "zrn", "rnn_tanh": "h", "rnn_relu": "h"}


def _reorder(a: Any, mode: str) -> Any:
    """Our gate blocks (first axis) in Keras's gate order."""
    import jax.numpy as jnp

    ours = _OUR_GATES[mode]
    H = a.shape[0] // len(ours)
    return jnp.concatenate([a[ours.index(g) * H:(ours.index(g) + 1) * H] for g in _KERAS_ORDER[mode]])


def to_keras(params: dict[str, Any], config: Any, layer: int, direction: str) -> dict[str, Any]:
    """One layer and direction of our parameters as Keras's kernel, recurrent_kernel and bias."""
    import jax.numpy as jnp

    p = lambda kind: params[f"l{layer}.{direction}.{kind}"]  # noqa: E731
    out = {"kernel": _reorder(p("w_ih"), config.mode).T, "recurrent_kernel": _reorder(p("w_hh"), config.mode).T}
    if config.bias:
        b_ih, b_hh = _reorder(p("b_ih"), config.mode), _reorder(p("b_hh"), config.mode)
        out["bias"] = jnp.stack([b_ih, b_hh]) if config.mode == "gru" else b_ih + b_hh
    return out


class KerasRNN(jax_grad.JaxGradTarget):
    """Keras 3 recurrent layers on JAX; see the module docstring for the mapping and the declines."""

    name = "keras"

    def __init__(self) -> None:
        os.environ.setdefault("KERAS_BACKEND", "jax")  # read when keras is first imported
        super().__init__()

    def supports(self, config: Any) -> bool | str:
        import jax
        import keras

        if keras.backend.backend() != "jax":
            return f"keras runs on the {keras.backend.backend()} backend here; the keras target needs KERAS_BACKEND=jax"
        if config.proj_size:
            return "Keras has no LSTM layer with projections"
        if config.dtype in ("f16", "bf16"):
            return "the keras target is judged in float32 and float64 only"
        if config.dtype == "f64" and config.mode != "rnn_relu":
            return ("Keras computes tanh of float64 tensors in float32 on JAX (keras.ops.tanh returns float32, "
                    "set_floatx or not; docs/keras-3.15/float64_tanh.py), so its float64 LSTM, GRU and tanh RNN "
                    "are not float64")
        if config.dtype == "f64" and not jax.config.jax_enable_x64:
            return "jax_enable_x64 is off in this process, so Keras would compute float64 cases in float32; set JAX_ENABLE_X64=1"
        return True

    def _layers(self, cfg: Any, dtype: str) -> list[Any]:
        import keras

        def layer() -> Any:
            common = dict(return_sequences=True, return_state=True, zero_output_for_mask=True, use_bias=cfg.bias,
                          dtype=dtype)
            if cfg.mode == "lstm":
                return keras.layers.LSTM(cfg.hidden_size, **common)
            if cfg.mode == "gru":
                return keras.layers.GRU(cfg.hidden_size, reset_after=True, **common)
            return keras.layers.SimpleRNN(cfg.hidden_size, activation=cfg.mode[4:], **common)

        layers = []
        for l in range(cfg.num_layers):
            # Bidirectional has its own dtype policy (floatx, float32, by default) and casts its inputs
            # and states to it before the wrapped layers see them: it needs the dtype as well.
            built = (keras.layers.Bidirectional(layer(), merge_mode="concat", dtype=dtype) if cfg.bidirectional
                     else layer())
            width = cfg.input_size if l == 0 else cfg.num_directions * cfg.hidden_size
            built.build((cfg.batch_size, cfg.max_len, width))
            layers.append(built)
        return layers

    def forward_fn(self, cfg: Any, params: tuple[str, ...]) -> Any:
        """The Keras layers, stateless, over our arrays: batch-major with a mask, zero outputs there."""
        import jax.numpy as jnp

        dtype = "float64" if cfg.dtype == "f64" else "float32"
        layers = self._layers(cfg, dtype)
        D = cfg.num_directions
        dirs = ("fwd", "bwd")[:D]
        lstm = cfg.mode == "lstm"

        def forward(leaves: dict[str, Any], constants: dict[str, Any], lengths: Any) -> tuple[Any, Any, Any]:
            a = {**constants, **leaves}
            ours = {k: a[k] for k in params}
            mask = jnp.arange(cfg.max_len)[None, :] < lengths[:, None]  # (B, T): Keras is batch-major
            x = jnp.swapaxes(a["x"], 0, 1)
            hy, cy = [], []
            for l, built in enumerate(layers):
                weights = {d: to_keras(ours, cfg, l, d) for d in dirs}
                trainable = [weights["bwd" if "/backward_" in v.path else "fwd"][v.path.rsplit("/", 1)[1]]
                             for v in built.trainable_variables]
                state = None
                if a.get("h0") is not None:
                    rows = [l * D + k for k in range(D)]
                    state = [s for r in rows for s in ([a["h0"][r], a["c0"][r]] if lstm else [a["h0"][r]])]
                result, _ = built.stateless_call(trainable, [v.value for v in built.non_trainable_variables], x,
                                                 mask=mask, initial_state=state)
                x, states = result[0], result[1:]
                per = 2 if lstm else 1
                for k in range(D):
                    hy.append(states[k * per])
                    if lstm:
                        cy.append(states[k * per + 1])
            return jnp.swapaxes(x, 0, 1), jnp.stack(hy), jnp.stack(cy) if lstm else None

        return forward


def make_target() -> KerasRNN:
    return KerasRNN()
