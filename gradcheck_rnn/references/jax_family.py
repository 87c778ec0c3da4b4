"""The ``jax`` reference of the families that give a step function (s6, slstm, user families).

The whole padded batch in float64: per layer and direction one ``lax.scan`` over time of the
family's own step (:meth:`gradcheck_rnn.families.Family.step` on jax arrays), sequence b updated
only where ``t < len_b`` — elsewhere every state is held and the output is 0, the padding
semantics of docs/contracts.md — and gradients by ``jax.vjp`` with the head gradients as
cotangents. The reverse direction (for a family that has one) runs on the time-flipped batch,
so it starts each sequence at its own last step. Layers are unrolled in Python: a family's
layer 0 and deeper layers differ in input width.

Programs: one per config with T and B padded to powers of two (extra steps are masked, extra
rows have length 0 and zero head gradients, both exact), compiled with the options of the
cuDNN program (:data:`gradcheck_rnn.references.jax_ref.COMPILER_OPTIONS`) and kept for the
process. Unlike the cuDNN program this one is not bucketed over sizes: a family's math cannot be
padded in H without knowing what zero units do in it.
"""

from __future__ import annotations

import dataclasses
import threading
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..case import Case, Outputs, RNNConfig
from ..families.ops import jax_ops
from ..layout import directions, param_key
from .jax_ref import COMPILER_OPTIONS, x64

_LOCK = threading.Lock()
_PROGRAMS: dict[tuple, Any] = {}


def _power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _forward(cfg: RNNConfig, lengths: jax.Array, x: jax.Array, h0: jax.Array, c0: jax.Array | None,
             params: dict[str, jax.Array]) -> tuple:
    """y (T, B, D·S), hy (L·D, B, h_size), cy (L·D, B, c_size) or None, over the padded batch."""
    family, ops = cfg.family, jax_ops()
    valid = (jnp.arange(x.shape[0])[:, None] < lengths[None, :])[..., None]  # (T, B, 1)
    inp, finals_h, finals_c = x, [], []
    for layer in range(cfg.num_layers):
        outputs = []
        for d, direction in enumerate(directions(cfg)):
            state = layer * cfg.num_directions + d
            unit = {k: params[param_key(layer, direction, k)] for k in family.unit_shapes(cfg, layer)}
            reverse = direction == "bwd"

            def step(carry, inputs, unit=unit):
                h, c = carry
                x_t, m = inputs
                y, h_new, c_new = family.step(ops, unit, x_t, h, c, cfg)
                c_kept = None if c is None else jnp.where(m, c_new, c)
                return (jnp.where(m, h_new, h), c_kept), jnp.where(m, y, 0.0)

            xs, masks = (inp[::-1], valid[::-1]) if reverse else (inp, valid)
            (h, c), ys = lax.scan(step, (h0[state], None if c0 is None else c0[state]), (xs, masks))
            outputs.append(ys[::-1] if reverse else ys)
            finals_h.append(h)
            if c is not None:
                finals_c.append(c)
        inp = jnp.concatenate(outputs, axis=-1)
    return inp, jnp.stack(finals_h), jnp.stack(finals_c) if finals_c else None


def _forward_backward(cfg: RNNConfig, lengths, x, h0, c0, params, dy, dhy, dcy):
    (y, hy, cy), vjp = jax.vjp(partial(_forward, cfg, lengths), x, h0, c0, params)
    gx, gh0, gc0, gparams = vjp((dy, dhy, dcy))
    return y, hy, cy, gx, gh0, gc0, gparams


def _program(cfg: RNNConfig, args: tuple) -> Any:
    with _LOCK:
        fn = _PROGRAMS.get(cfg)
        if fn is None:
            fn = _PROGRAMS[cfg] = jax.jit(partial(_forward_backward, cfg)).lower(*args).compile(
                compiler_options=COMPILER_OPTIONS or None)
    return fn


def program_count() -> int:
    """Programs this process compiled."""
    return len(_PROGRAMS)


def run_jax_family_reference(case: Case) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, the padded batch at once (see the module docstring)."""
    cfg = case.config
    T, B, I, S = cfg.max_len, cfg.batch_size, cfg.input_size, cfg.num_directions * cfg.state_size
    Tp, Bp = _power_of_two(T), _power_of_two(B)
    padded = dataclasses.replace(cfg, dtype="f64", max_len=Tp, batch_size=Bp)
    states = cfg.num_layers * cfg.num_directions
    cell = cfg.has_cell_state

    def pad(a: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
        out = np.zeros(shape)
        if a is not None:
            out[tuple(slice(0, n) for n in a.shape)] = a
        return out

    lengths = np.zeros(Bp, dtype=np.int32)
    lengths[:B] = case.seq_lengths
    args = (lengths, pad(case.x, (Tp, Bp, I)), pad(case.h0, (states, Bp, cfg.h_size)),
            pad(case.c0, (states, Bp, cfg.c_size)) if cell else None,
            {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()},
            pad(case.dy, (Tp, Bp, S)), pad(case.dhy, (states, Bp, cfg.h_size)),
            pad(case.dcy, (states, Bp, cfg.c_size)) if cell else None)
    with x64():
        y, hy, cy, gx, gh0, gc0, gparams = jax.device_get(_program(padded, args)(*args))
    grads = {"x": np.array(gx[:T, :B], dtype=np.float64)}
    if case.h0 is not None:
        grads["h0"] = np.array(gh0[:, :B], dtype=np.float64)
        if cell:
            grads["c0"] = np.array(gc0[:, :B], dtype=np.float64)
    grads.update({k: np.array(v, dtype=np.float64) for k, v in gparams.items()})
    return Outputs(y=np.array(y[:T, :B], dtype=np.float64), hy=np.array(hy[:, :B], dtype=np.float64),
                   cy=np.array(cy[:, :B], dtype=np.float64) if cell else None, grads=grads)
