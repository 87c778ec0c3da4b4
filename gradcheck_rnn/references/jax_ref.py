"""The ``jax`` reference: the whole padded batch in float64, ``lax.scan`` with length masks.

Only this module imports jax; callers import it lazily. Importing it turns on ``jax_enable_x64``
for the process.

How it computes
---------------
All sequences run together over the padded batch. Each layer is one ``lax.scan`` over time
that carries both directions at once: the reverse direction's inputs are flipped in time
beforehand, so scan step ``s`` is time ``s`` for ``fwd`` and time ``T-1-s`` for ``bwd``.
Sequence b is updated only where ``t < len_b``; elsewhere its state is held and its output is
0. So the forward direction's final carry is the state after step ``len_b - 1``, and the
reverse direction starts from h0 at its own last step ``len_b - 1`` (it is held through the
padded steps ``T-1 … len_b``) and ends after step 0. The input projections of all steps are one
einsum outside the scan. Gradients come from ``jax.vjp`` with the head gradients
``(dy, dhy, dcy)`` as cotangents, which is the gradient of
``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)``. Forward and backward are one jitted function.

Shape buckets (the sweep is compile-bound)
------------------------------------------
One compiled function serves every case whose config has the same mode, layers and
directions and the same *bucket* of input size, hidden size, length and batch:
``bucket(n) = max(8, next power of two >= n)`` for each of I, H, T and B. Padding is exact:

- extra input/hidden units have zero weights, biases, x and initial states, and stay 0 in every
  mode (relu 0 = tanh 0 = 0; LSTM c = σ(0)·0 + σ(0)·tanh(0) = 0, h = σ(0)·tanh(0) = 0; GRU
  n = tanh(0 + σ(0)·0) = 0, h = 0.5·0 + 0.5·0 = 0), and no weight joins them to the real units;
  gate blocks are placed at rows ``g·Hp … g·Hp+H``, and the layer > 0 input columns, which are
  the ``[fwd | bwd]`` concatenation, at ``[0:H]`` and ``[Hp:Hp+H]``;
- extra time steps lie past every sequence's length, so they are masked;
- extra batch rows get length 0 (state held, output 0) and zero head gradients;
- results are sliced back.
Why 8 and powers of two: compile time hardly depends on these sizes (it depends on mode, layers
and directions: ~1 s per new bucket here), while a cached call grows only slowly with the padded
size at the sizes a sweep draws (measured, 2-layer bi LSTM: H bucket 8 ~2.7 ms, 16 ~4 ms, 64
~14 ms; H 4 vs 8 makes no measurable difference). So a minimum of 8 folds all the tiny shapes into
one bucket per dimension, and powers of two above it bound the wasted work to < 2x per dimension
(< 4x for the recurrent GEMM) while keeping the number of buckets logarithmic. T is the one
dimension whose padding costs time linearly (sequential steps), which the 2x bound keeps small.
Sequences of length 0 (allowed by the zero-length case variant) need nothing special: never updated,
y = 0 and hy = h0.

Projections (LSTM ``proj_size`` P) and ``bias=False`` ride on the same padding: the state width
S = P gets its own bucket (the hidden width H keeps its own, so ``w_hh`` is (G·Hp, Pp), ``w_hr``
(Pp, Hp), zero outside the real block, and the extra projected units stay 0 too), and a config
without bias runs with zero biases whose gradients are simply not reported.

Compile options: the CPU backend is asked for LLVM -O0 (``COMPILER_OPTIONS``). That halves the
compile of a new bucket and costs ~1-2 ms more per cached call, so it pays until a bucket serves
several hundred cases, which a sweep of random shapes never reaches.

Measured on this 2-core machine (``python -m gradcheck_rnn.references.jax_ref`` prints them;
2-layer bidirectional LSTM, lstm-L2-bi-I3-H5-T7-B3 -> bucket I8-H8-T8-B8, and H12 -> H16;
three runs each; "first call" = trace + lower + compile + run, after jax's start-up):

=====================================  ============  ======================
                                       first call    cached call (per case)
=====================================  ============  ======================
-O0 (default here)                     0.9-1.3 s     2.5-4.5 ms
XLA default (-O2)                      1.7-2.2 s     1.7-2.4 ms
-O0, persistent cache warm (2nd run)   0.3 s         2.4-4.3 ms
=====================================  ============  ======================

The cached call includes padding the data in numpy, the transfers, forward + vjp and slicing
back (~1 ms of it is fetching the ~20 result arrays). Trace + lower alone is ~0.25 s of each
first call, the part the persistent cache cannot save.

Persistent compilation cache: set ``GRADCHECK_RNN_JAX_CACHE`` to a directory and compiled
buckets are kept there across processes (JAX's ``jax_compilation_cache_dir``, with the minimum
compile time to be cached lowered to 0 so these sub-second compiles are kept).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..case import Case, Outputs, RNNConfig
from ..layout import GATES, directions, param_key

jax.config.update("jax_enable_x64", True)

_CACHE_ENV = "GRADCHECK_RNN_JAX_CACHE"
if os.environ.get(_CACHE_ENV):
    jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

MIN_BUCKET = 8
# LLVM -O0 for the CPU backend: halves compile time (~1.8 s -> ~0.9 s for a 2-layer bi LSTM)
# for ~1-2 ms more per cached call; a sweep makes far fewer than ~500 calls per bucket.
COMPILER_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The padded size of a dimension of size ``n``: the next power of two, at least ``minimum``."""
    return max(minimum, 1 << (int(n) - 1).bit_length())


class BucketKey(NamedTuple):
    """What one compiled function is specialised on."""

    mode: str
    num_layers: int
    num_directions: int
    input_size: int
    hidden_size: int
    max_len: int
    batch_size: int
    proj_size: int = 0  # 0: no projection


def bucket_key(config: RNNConfig, bucketed: bool = True) -> BucketKey:
    """The compile-cache key of a config (its exact sizes when ``bucketed`` is False)."""
    pad = bucket if bucketed else int
    return BucketKey(config.mode, config.num_layers, config.num_directions, pad(config.input_size),
                     pad(config.hidden_size), pad(config.max_len), pad(config.batch_size),
                     pad(config.proj_size) if config.proj_size else 0)


# --------------------------------------------------------------------------- the jax model


def _cell(mode: str, gi: jax.Array, gh: jax.Array, h: jax.Array, c: jax.Array | None):
    """One step for all directions and rows at once: gate pre-activations (..., G·H) -> (h', c')."""
    if mode == "rnn_tanh":
        return jnp.tanh(gi + gh), None
    if mode == "rnn_relu":
        return jax.nn.relu(gi + gh), None  # relu'(0) = 0, as torch
    if mode == "lstm":
        i, f, g, o = jnp.split(gi + gh, 4, axis=-1)
        c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c_new), c_new
    ir, iz, in_ = jnp.split(gi, 3, axis=-1)
    hr, hz, hn = jnp.split(gh, 3, axis=-1)
    r = jax.nn.sigmoid(ir + hr)
    z = jax.nn.sigmoid(iz + hz)
    n = jnp.tanh(in_ + r * hn)
    return (1.0 - z) * n + z * h, None


def _forward(mode: str, num_layers: int, num_dirs: int, lengths: jax.Array, x: jax.Array,
             h0: jax.Array, c0: jax.Array | None, params: list[dict[str, jax.Array]]):
    """Padded forward pass.

    x (T, B, I); lengths (B,) int; h0 (L·D, B, S), c0 (L·D, B, H); params[layer][kind] stacked
    over directions: w_ih (D, G·H, I_l), w_hh (D, G·H, S), b_ih and b_hh (D, G·H), and w_hr
    (D, P, H) with projections (S = P), whose presence switches them on.
    Returns y (T, B, D·S), hy (L·D, B, S), cy (L·D, B, H) or None.
    """
    D = num_dirs
    steps = jnp.arange(x.shape[0])
    valid = steps[:, None] < lengths[None, :]                      # (T, B)
    masks = jnp.stack([valid, valid[::-1]], axis=1)[:, :D, :, None]  # (T, D, B, 1), scan-step order
    layer_input = x
    hy, cy = [], []
    for layer in range(num_layers):
        p = params[layer]
        xs = jnp.stack([layer_input, layer_input[::-1]], axis=1)[:, :D]  # (T, D, B, I_l)
        gi_all = jnp.einsum("tdbi,dgi->tdbg", xs, p["w_ih"]) + p["b_ih"][None, :, None, :]
        w_hh, b_hh, w_hr = p["w_hh"], p["b_hh"][:, None, :], p.get("w_hr")
        states = slice(layer * D, (layer + 1) * D)
        carry0 = (h0[states], None if c0 is None else c0[states])

        def step(carry, inputs, w_hh=w_hh, b_hh=b_hh, w_hr=w_hr):
            h, c = carry
            gi, m = inputs
            gh = jnp.einsum("dbh,dgh->dbg", h, w_hh) + b_hh
            h_new, c_new = _cell(mode, gi, gh, h, c)
            if w_hr is not None:
                h_new = jnp.einsum("dbh,dph->dbp", h_new, w_hr)
            h_next = jnp.where(m, h_new, h)
            c_next = None if c is None else jnp.where(m, c_new, c)
            return (h_next, c_next), jnp.where(m, h_new, 0.0)

        (h_last, c_last), ys = lax.scan(step, carry0, (gi_all, masks))  # ys (T, D, B, H)
        outs = [ys[:, 0]] + ([ys[::-1, 1]] if D == 2 else [])
        layer_input = jnp.concatenate(outs, axis=-1)
        hy.append(h_last)
        if c_last is not None:
            cy.append(c_last)
    return layer_input, jnp.concatenate(hy, 0), (jnp.concatenate(cy, 0) if cy else None)


def _forward_backward(mode: str, num_layers: int, num_dirs: int, lengths, x, h0, c0, params,
                      dy, dhy, dcy):
    """Outputs and the vjp of all inputs with cotangents (dy, dhy, dcy)."""
    fwd = partial(_forward, mode, num_layers, num_dirs, lengths)
    (y, hy, cy), vjp = jax.vjp(fwd, x, h0, c0, params)
    gx, gh0, gc0, gparams = vjp((dy, dhy, dcy))
    return y, hy, cy, gx, gh0, gc0, gparams


_LOCK = threading.Lock()
_COMPILED: dict[BucketKey, Any] = {}
_COMPILE_COUNT = 0


def compile_count() -> int:
    """How many functions this process has compiled (one per new bucket key)."""
    return _COMPILE_COUNT


def cached_buckets() -> list[BucketKey]:
    """The bucket keys compiled so far."""
    with _LOCK:
        return list(_COMPILED)


def _compiled(key: BucketKey, args: tuple) -> Any:
    global _COMPILE_COUNT
    with _LOCK:
        fn = _COMPILED.get(key)
        if fn is None:
            jitted = jax.jit(partial(_forward_backward, key.mode, key.num_layers, key.num_directions))
            fn = jitted.lower(*args).compile(compiler_options=COMPILER_OPTIONS or None)
            _COMPILED[key] = fn
            _COMPILE_COUNT += 1
    return fn


# --------------------------------------------------------------------------- padding


def _pad_weight(w: np.ndarray, G: int, H: int, Hp: int, blocks: int, cols: int, cols_p: int) -> np.ndarray:
    """(G·H, blocks·cols) -> (G·Hp, blocks·cols_p): gate rows at g·Hp, column block k at k·cols_p."""
    out = np.zeros((G, Hp, blocks, cols_p))
    out[:, :H, :, :cols] = w.reshape(G, H, blocks, cols)
    return out.reshape(G * Hp, blocks * cols_p)


def _unpad_weight(w: np.ndarray, G: int, H: int, Hp: int, blocks: int, cols: int, cols_p: int) -> np.ndarray:
    return w.reshape(G, Hp, blocks, cols_p)[:, :H, :, :cols].reshape(G * H, blocks * cols)


def _pad_bias(b: np.ndarray, G: int, H: int, Hp: int) -> np.ndarray:
    out = np.zeros((G, Hp))
    out[:, :H] = b.reshape(G, H)
    return out.reshape(G * Hp)


def _unpad_bias(b: np.ndarray, G: int, H: int, Hp: int) -> np.ndarray:
    return b.reshape(G, Hp)[:, :H].reshape(G * H)


def _state_width(key: BucketKey) -> int:
    """The padded state width: the projection's bucket, else the hidden one."""
    return key.proj_size or key.hidden_size


def _input_blocks(config: RNNConfig, key: BucketKey, layer: int) -> tuple[int, int, int]:
    """Column layout of w_ih: (blocks, real width, padded width) — [fwd | bwd] blocks for layer > 0."""
    if layer == 0:
        return 1, config.input_size, key.input_size
    return config.num_directions, config.state_size, _state_width(key)


def _pad_array(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(shape)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def run_padded(case: Case, bucketed: bool = True) -> Outputs:
    """Like :func:`run_jax_reference`; ``bucketed=False`` compiles for the exact shapes (tests)."""
    cfg = case.config
    key = bucket_key(cfg, bucketed)
    G, H, Hp = GATES[cfg.mode], cfg.hidden_size, key.hidden_size
    S, Sp, P = cfg.state_size, _state_width(key), cfg.proj_size
    T, B, D, L = cfg.max_len, cfg.batch_size, cfg.num_directions, cfg.num_layers
    Tp, Bp = key.max_len, key.batch_size
    lstm = cfg.has_cell_state
    states, cells = (L * D, Bp, Sp), (L * D, Bp, Hp)

    lengths = np.zeros(Bp, dtype=np.int32)
    lengths[:B] = np.asarray(case.seq_lengths, dtype=np.int32)
    x = _pad_array(np.asarray(case.x, dtype=np.float64), (Tp, Bp, key.input_size))
    h0 = np.zeros(states) if case.h0 is None else _pad_array(np.asarray(case.h0, dtype=np.float64), states)
    c0 = None
    if lstm:
        c0 = np.zeros(cells) if case.c0 is None else _pad_array(np.asarray(case.c0, dtype=np.float64), cells)
    dy = np.zeros((Tp, Bp, D, Sp))
    dy[:T, :B, :, :S] = np.asarray(case.dy, dtype=np.float64).reshape(T, B, D, S)
    dy = dy.reshape(Tp, Bp, D * Sp)
    dhy = _pad_array(np.asarray(case.dhy, dtype=np.float64), states)
    dcy = _pad_array(np.asarray(case.dcy, dtype=np.float64), cells) if lstm else None

    dirs = directions(cfg)
    no_bias = np.zeros(G * H)  # bias=False runs with zero biases; their gradients are not reported
    params = []
    for layer in range(L):
        blocks, cols, cols_p = _input_blocks(cfg, key, layer)

        def get(kind: str, d: str, layer: int = layer) -> np.ndarray:
            value = case.params.get(param_key(layer, d, kind))
            return no_bias if value is None else np.asarray(value, dtype=np.float64)

        unit = {
            "w_ih": np.stack([_pad_weight(get("w_ih", d), G, H, Hp, blocks, cols, cols_p) for d in dirs]),
            "w_hh": np.stack([_pad_weight(get("w_hh", d), G, H, Hp, 1, S, Sp) for d in dirs]),
            "b_ih": np.stack([_pad_bias(get("b_ih", d), G, H, Hp) for d in dirs]),
            "b_hh": np.stack([_pad_bias(get("b_hh", d), G, H, Hp) for d in dirs]),
        }
        if P:
            unit["w_hr"] = np.stack([_pad_array(get("w_hr", d), (Sp, Hp)) for d in dirs])
        params.append(unit)

    args = (lengths, x, h0, c0, params, dy, dhy, dcy)
    fn = _compiled(key, args)
    y, hy, cy, gx, gh0, gc0, gparams = jax.device_get(fn(*args))

    def back(a: np.ndarray, width: int) -> np.ndarray:  # (L·D, Bp, padded) -> (L·D, B, width)
        return np.array(a[:, :B, :width], dtype=np.float64)

    grads: dict[str, np.ndarray] = {"x": np.array(gx[:T, :B, :cfg.input_size], dtype=np.float64)}
    if case.h0 is not None:
        grads["h0"] = back(gh0, S)
        if lstm:
            grads["c0"] = back(gc0, H)
    for layer in range(L):
        blocks, cols, cols_p = _input_blocks(cfg, key, layer)
        g = gparams[layer]
        for i, d in enumerate(dirs):
            grads[param_key(layer, d, "w_ih")] = _unpad_weight(np.asarray(g["w_ih"][i]), G, H, Hp, blocks, cols, cols_p)
            grads[param_key(layer, d, "w_hh")] = _unpad_weight(np.asarray(g["w_hh"][i]), G, H, Hp, 1, S, Sp)
            if P:
                grads[param_key(layer, d, "w_hr")] = np.asarray(g["w_hr"][i])[:P, :H]
            if cfg.bias:
                grads[param_key(layer, d, "b_ih")] = _unpad_bias(np.asarray(g["b_ih"][i]), G, H, Hp)
                grads[param_key(layer, d, "b_hh")] = _unpad_bias(np.asarray(g["b_hh"][i]), G, H, Hp)
    grads = {k: np.array(v, dtype=np.float64) for k, v in grads.items()}
    y_out = np.array(np.asarray(y).reshape(Tp, Bp, D, Sp)[:T, :B, :, :S].reshape(T, B, D * S), dtype=np.float64)
    return Outputs(y=y_out, hy=back(hy, S), cy=back(cy, H) if lstm else None, grads=grads)


def run_jax_reference(case: Case) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, the whole padded batch at once.

    y (T, B, D·S) is 0 at padded steps; hy (L·D, B, S); cy for LSTM, else None; grads holds
    ``x`` (0 at padded steps), ``h0`` and ``c0`` (LSTM) when the case passes initial states, and
    every parameter key. All gradients are computed; the caller selects the requested ones.
    """
    return run_padded(case, bucketed=True)


def _measure() -> None:  # pragma: no cover - prints the numbers quoted in the module docstring
    import time

    from ..case import make_case

    jax.block_until_ready(jnp.ones(3) + 1)  # backend start-up is not a compile
    for cfg, lengths in [(RNNConfig("lstm", 2, True, 3, 5, 7, 3), [7, 4, 1]),
                         (RNNConfig("lstm", 2, True, 3, 12, 7, 3), [7, 4, 1])]:
        case = make_case(cfg, lengths, seed=1)
        t0 = time.perf_counter()
        run_jax_reference(case)
        first = time.perf_counter() - t0
        other = make_case(dataclasses.replace(cfg, input_size=cfg.input_size + 1, max_len=8, batch_size=2),
                          [8, 3], seed=2)  # same bucket, other shapes
        n = 200
        t0 = time.perf_counter()
        for i in range(n):
            run_jax_reference(case if i % 2 else other)
        cached = (time.perf_counter() - t0) / n
        print(f"{cfg.prefix} -> bucket I{bucket(cfg.input_size)}-H{bucket(cfg.hidden_size)}-T{bucket(cfg.max_len)}"
              f"-B{bucket(cfg.batch_size)}: first call {first:.3f} s, cached call {cached * 1e3:.2f} ms, "
              f"compiles so far {compile_count()}")


if __name__ == "__main__":  # pragma: no cover
    _measure()
