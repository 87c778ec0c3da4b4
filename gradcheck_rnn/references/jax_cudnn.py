"""The cuDNN cells' ``jax`` reference, the program their :attr:`~gradcheck_rnn.families.Family.jax_program`
names "bucketed":
the whole padded batch in float64, ``lax.scan`` with length masks, one program for all four cells.

Only this module imports jax; callers import it lazily. It computes under JAX's *scoped* x64
switch (``with jax.enable_x64():``) and never changes the process's ``jax_enable_x64``: a
JAX-based target (flax, Keras) judged in the same process sees the user's own setting — float32
by default — as in the user's program (docs/contracts.md, "Public API").

How it computes
---------------
All sequences run together over the padded batch, both directions at once. Each layer is one
``lax.scan`` over time: the reverse direction's inputs are flipped in time beforehand, so scan
step ``s`` is time ``s`` for ``fwd`` and time ``T-1-s`` for ``bwd``. Sequence b is updated only
where ``t < len_b``; elsewhere its state is held and its output is 0. So the forward direction's
final carry is the state after step ``len_b - 1``, and the reverse direction starts from h0 at
its own last step ``len_b - 1`` (held through the padded steps ``T-1 … len_b``) and ends after
step 0. Layers are a ``lax.scan`` over stacked weights. Gradients come from ``jax.vjp`` with the
head gradients ``(dy, dhy, dcy)`` as cotangents, the gradient of
``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)``. Forward and backward are one compiled program. The
``jvp`` check's output tangents come from ``jax.jvp`` of the same forward (:func:`run_jax_jvp`),
a second program per bucket, kept and written apart (:data:`JVP_PROGRAMS`).

Few programs: one per shape bucket, everything else is data
-----------------------------------------------------------
A sweep of random shapes is compile-bound (a new program's trace, lower and compile cost about
as much as hundreds of cached calls: benchmarks/RESULTS.md, "Costs the code is built around"), so
one program serves as many configs as exact padding allows. The key (:mod:`.buckets`) is only (layers, hidden width, input width,
steps, rows), each padded to a power of two; the whole ci profile is one program (it was 26
per-mode-and-shape programs for 200 ci cases before). What varies inside a bucket is data:

- mode: the cell is ``lax.switch`` on a mode index over the four families' own cells
  (:meth:`gradcheck_rnn.families.cudnn.CudnnFamily.cell`, what their step runs, the maths
  written once), so all four modes are one program; gate blocks are placed at rows ``g·Hp … g·Hp+H`` of a 4-block layout (RNN modes use block 0, GRU
  blocks 0-2, the others stay zero);
- hidden/input units: extra units have zero weights, biases, x and initial states, and stay 0
  in every mode (relu 0 = tanh 0 = 0; LSTM c = σ(0)·0 + σ(0)·tanh(0) = 0, h = σ(0)·tanh(0) = 0;
  GRU n = tanh(0 + σ(0)·0) = 0, h = 0.5·0 + 0.5·0 = 0), and no weight joins them to the real
  units. Every layer's input is one width W: x at columns ``[0:I]``, the ``[fwd | bwd]``
  concatenation of layer > 0 at ``[0:S]`` and ``[Hp:Hp+S]``;
- projections: every mode multiplies the cell output by ``w_hr``: the case's (P, H) block for an
  LSTM with ``proj_size``, else the identity, which is exact (x·1 + Σ 0·y = x); the state width
  S = P pads to the same Hp as H (P < H);
- no bias: zero biases whose gradients are not reported;
- directions: a unidirectional config runs with a reverse direction of zero weights, zero
  states and zero head gradients, whose outputs stay 0 (the same argument as padded units) and
  whose input columns in the next layer have zero weights;
- layers: layers past ``num_layers`` are skipped by ``lax.cond`` (their input passes through),
  so padded layers cost no sequential steps; y is the last real layer's output;
- time steps past every sequence's length are masked; extra batch rows get length 0 (state
  held, output 0) and zero head gradients; sequences of length 0 need nothing else.
Results are sliced back. None of this changes a number beyond float64 rounding: the
bucketed program agrees with the exact-shape one and with the loop reference to ~1e-15
(tests/test_jax_reference.py).

Why one program per bucket: a compile costs about a second and a call about a millisecond, so a
sweep of random shapes is compile-bound (benchmarks/RESULTS.md, "JAX reference: one program per
bucket"). ``python -m gradcheck_rnn.references.jax_cudnn`` prints the in-process numbers.

Warm runs load the program: no trace, no lowering, no compile
-------------------------------------------------------------
Each bucket's program is kept for the process and written to disk for the next one, where it is
loaded without being traced again (:class:`gradcheck_rnn.references.programs.ProgramStore`, shared
with the families' program of :mod:`.jax_family`); ``GRADCHECK_RNN_JAX_CACHE=""`` turns that off.
An artifact is named by its bucket and a fingerprint of jax, the CPU, the compile options and the
sources of this module, its buckets and the cells (the families, the config and the parameter layout).
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..model.case import Case, Outputs, RNNConfig
from ..model.rnn_config import GATES
from ..families import family
from ..families.ops import jax_ops
from ..model.layout import directions, param_key
from .programs import ProgramStore, maths_sources
from .buckets import MIN_BUCKET, BucketKey, bucket, bucket_key

__all__ = ["MIN_BUCKET", "BucketKey", "bucket", "bucket_key", "run_jax_reference", "run_padded",
           "run_jax_jvp", "run_jax_hvp",
           "compile_count", "load_count", "write_count", "cached_buckets", "x64"]

MAX_GATES = 4
MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")  # the order of the lax.switch branches
_MODE_INDEX = {mode: i for i, mode in enumerate(MODES)}


def x64() -> contextlib.AbstractContextManager:
    """JAX's scoped float64 switch: ``jax.enable_x64(True)`` (jax >= 0.8), else the experimental one.

    Thread-local and restored on exit, so the process's ``jax_enable_x64`` is never touched.
    """
    scoped = getattr(jax, "enable_x64", None)
    if scoped is not None:  # a config State, callable as a context manager
        return scoped(True)
    from jax.experimental import enable_x64  # jax < 0.8

    return enable_x64()


# --------------------------------------------------------------------------- the jax model


def _cells(gi: jax.Array, gh: jax.Array, h: jax.Array, c: jax.Array) -> list[Callable[[], tuple]]:
    """The four cells on gate pre-activations in the 4-block layout (..., 4·Hp), in MODES order:
    each family's own cell (:meth:`gradcheck_rnn.families.cudnn.CudnnFamily.cell`, what its step
    runs) on its first G blocks."""
    ops, Hp = jax_ops(), h.shape[-1]

    def branch(cell_family: Any) -> Callable[[], tuple]:
        width = cell_family.num_gates * Hp
        return lambda: cell_family.cell(ops, gi[..., :width], gh[..., :width], h, c)

    return [branch(family(mode)) for mode in MODES]


def _layer(mode: jax.Array, masks: jax.Array, inp: jax.Array, p: dict[str, jax.Array],
           h0: jax.Array, c0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One real layer, both directions: inp (T, B, W) -> out (T, B, W), h_last, c_last (2, B, Hp)."""
    xs = jnp.stack([inp, inp[::-1]], axis=1)                                 # (T, 2, B, W)
    gi_all = jnp.einsum("tdbi,dgi->tdbg", xs, p["w_ih"]) + p["b_ih"][None, :, None, :]
    w_hh, b_hh, w_hr = p["w_hh"], p["b_hh"][:, None, :], p["w_hr"]

    def step(carry, inputs):
        h, c = carry
        gi, m = inputs
        gh = jnp.einsum("dbs,dgs->dbg", h, w_hh) + b_hh
        h_cell, c_new = lax.switch(mode, _cells(gi, gh, h, c))
        h_new = jnp.einsum("dbh,dph->dbp", h_cell, w_hr)  # the projection, or the identity
        return (jnp.where(m, h_new, h), jnp.where(m, c_new, c)), jnp.where(m, h_new, 0.0)

    (h_last, c_last), ys = lax.scan(step, (h0, c0), (gi_all, masks))     # ys (T, 2, B, Hp)
    out = jnp.concatenate([ys[:, 0], ys[::-1, 1]], axis=-1)              # (T, B, 2·Hp)
    pad = inp.shape[-1] - out.shape[-1]
    if pad:
        out = jnp.pad(out, ((0, 0), (0, 0), (0, pad)))
    return out, h_last, c_last


def _forward(mode: jax.Array, num_layers: jax.Array, lengths: jax.Array, x: jax.Array,
             h0: jax.Array, c0: jax.Array, params: dict[str, jax.Array]):
    """Padded forward pass of the bucket's program.

    mode () int (index into MODES); num_layers () int; lengths (B,) int; x (T, B, W);
    h0, c0 (Lp, 2, B, Hp); params stacked over layers and directions: w_ih (Lp, 2, 4·Hp, W),
    w_hh (Lp, 2, 4·Hp, Hp), w_hr (Lp, 2, Hp, Hp), b_ih and b_hh (Lp, 2, 4·Hp).
    Returns y (T, B, W) (the last real layer's [fwd | bwd]), hy and cy (Lp, 2, B, Hp).
    """
    steps = jnp.arange(x.shape[0])
    valid = steps[:, None] < lengths[None, :]                               # (T, B)
    masks = jnp.stack([valid, valid[::-1]], axis=1)[..., None]              # (T, 2, B, 1), scan-step order

    def layer(inp, per_layer):
        index, p, h0_l, c0_l = per_layer
        out, h_last, c_last = lax.cond(index < num_layers, partial(_layer, mode, masks),
                                       lambda inp, p, h, c: (inp, h, c), inp, p, h0_l, c0_l)
        return out, (h_last, c_last)

    indices = jnp.arange(h0.shape[0])
    y, (hy, cy) = lax.scan(layer, x, (indices, params, h0, c0))
    return y, hy, cy


def _forward_backward(mode, num_layers, lengths, x, h0, c0, params, dy, dhy, dcy):
    """Outputs and the vjp of all inputs with cotangents (dy, dhy, dcy)."""
    fwd = partial(_forward, mode, num_layers, lengths)
    (y, hy, cy), vjp = jax.vjp(fwd, x, h0, c0, params)
    gx, gh0, gc0, gparams = vjp((dy, dhy, dcy))
    return y, hy, cy, gx, gh0, gc0, gparams


def _forward_jvp(mode, num_layers, lengths, x, h0, c0, params, tx, th0, tc0, tparams):
    """The output tangents (ty, thy, tcy) of the forward along (tx, th0, tc0, tparams)."""
    fwd = partial(_forward, mode, num_layers, lengths)
    return jax.jvp(fwd, (x, h0, c0, params), (tx, th0, tc0, tparams))[1]


def _forward_hvp(mode, num_layers, lengths, x, h0, c0, params, dy, dhy, dcy, tx, th0, tc0, tparams):
    """The tangents of every gradient (cotangents dy, dhy, dcy) along (tx, th0, tc0, tparams)."""
    fwd = partial(_forward, mode, num_layers, lengths)

    def gradients(*inputs):
        return jax.vjp(fwd, *inputs)[1]((dy, dhy, dcy))

    return jax.jvp(gradients, (x, h0, c0, params), (tx, th0, tc0, tparams))[1]


# --------------------------------------------------------------------------- compiled programs

PROGRAMS = ProgramStore(maths_sources(__file__))
# The forward-mode programs (the ``jvp`` check's), one per bucket too; their artifacts are named
# ``<bucket>-jvp``, so they never meet the gradient programs on disk.
JVP_PROGRAMS = ProgramStore(maths_sources(__file__))
# ... and the second-order ones (the ``gradgrad`` check's), artifacts named ``<bucket>-hvp``
HVP_PROGRAMS = ProgramStore(maths_sources(__file__))


def compile_count() -> int:
    """Programs this process traced, lowered and compiled (an XLA cache hit still counts)."""
    return PROGRAMS.counts["compiled"]


def load_count() -> int:
    """Programs this process loaded from an artifact (no trace, no lowering, no compile)."""
    return PROGRAMS.counts["loaded"]


def write_count() -> int:
    """Artifacts this process wrote."""
    return PROGRAMS.counts["written"]


def cached_buckets() -> list[BucketKey]:
    """The bucket keys ready in this process."""
    return PROGRAMS.keys()  # type: ignore[return-value]


def artifact_name(key: BucketKey) -> str:
    """The artifact file name of bucket ``key``'s program (before its fingerprint)."""
    return "-".join(f"{f}{v}" for f, v in zip("LHWTB", key))


def _call(key: BucketKey, args: tuple) -> tuple:
    """Run the bucket's program on ``args`` (under x64), from memory, an artifact or a compile."""
    return PROGRAMS.call(key, artifact_name(key), _forward_backward, args)


# --------------------------------------------------------------------------- padding


def _place_rows(w: np.ndarray, G: int, H: int, Hp: int) -> np.ndarray:
    """(G·H, ...) -> (4·Hp, ...): gate g's rows at g·Hp."""
    out = np.zeros((MAX_GATES, Hp) + w.shape[1:])
    out[:G, :H] = w.reshape((G, H) + w.shape[1:])
    return out.reshape((MAX_GATES * Hp,) + w.shape[1:])


def _take_rows(w: np.ndarray, G: int, H: int, Hp: int) -> np.ndarray:
    return w.reshape((MAX_GATES, Hp) + w.shape[1:])[:G, :H].reshape((G * H,) + w.shape[1:])


def _input_columns(config: RNNConfig, key: BucketKey, layer: int) -> list[tuple[int, int, int]]:
    """Where w_ih's columns go: (source start, target start, width) — [fwd | bwd] for layer > 0."""
    if layer == 0:
        return [(0, 0, config.input_size)]
    S = config.state_size
    return [(k * S, k * key.hidden_size, S) for k in range(config.num_directions)]


def _placed(case: Case, key: BucketKey, x: np.ndarray, h0: np.ndarray | None, c0: np.ndarray | None,
            params: dict[str, np.ndarray], identity: bool) -> tuple:
    """x, h0, c0 and the stacked parameters of ``case`` placed into bucket ``key``'s shapes (see the
    module docstring); ``identity``: the identity "projection" of a config without one (the
    primal values; a tangent's is 0). A parameter missing from ``params`` is placed as zeros."""
    cfg = case.config
    G, H, S, P = GATES[cfg.mode], cfg.hidden_size, cfg.state_size, cfg.proj_size
    T, B, D, L, I = cfg.max_len, cfg.batch_size, cfg.num_directions, cfg.num_layers, cfg.input_size
    Lp, Hp, W, Tp, Bp = key
    xp = np.zeros((Tp, Bp, W))
    xp[:T, :B, :I] = x
    h0p, c0p = np.zeros((Lp, 2, Bp, Hp)), np.zeros((Lp, 2, Bp, Hp))
    h0p[:L, :D, :B, :S] = 0.0 if h0 is None else np.asarray(h0).reshape(L, D, B, S)
    if cfg.has_cell_state:
        c0p[:L, :D, :B, :H] = 0.0 if c0 is None else np.asarray(c0).reshape(L, D, B, H)
    w_ih = np.zeros((Lp, 2, MAX_GATES * Hp, W))
    w_hh = np.zeros((Lp, 2, MAX_GATES * Hp, Hp))
    w_hr = np.zeros((Lp, 2, Hp, Hp))
    b_ih = np.zeros((Lp, 2, MAX_GATES * Hp))
    b_hh = np.zeros((Lp, 2, MAX_GATES * Hp))
    if not P and identity:
        w_hr[:, :] = np.eye(Hp)  # the identity "projection" of every other config: exact
    for layer in range(L):
        for d, name in enumerate(directions(cfg)):
            def get(kind: str) -> np.ndarray:
                value = params.get(param_key(layer, name, kind))
                return np.zeros(cfg.family.unit_shapes(cfg, layer)[kind]) if value is None else np.asarray(value)

            w = _place_rows(get("w_ih"), G, H, Hp)
            for src, dst, width in _input_columns(cfg, key, layer):
                w_ih[layer, d, :, dst:dst + width] = w[:, src:src + width]
            w_hh[layer, d, :, :S] = _place_rows(get("w_hh"), G, H, Hp)
            if P:
                w_hr[layer, d, :P, :H] = get("w_hr")
            if cfg.bias:  # without bias: zero biases, whose gradients are not reported
                b_ih[layer, d] = _place_rows(get("b_ih"), G, H, Hp)
                b_hh[layer, d] = _place_rows(get("b_hh"), G, H, Hp)
    return xp, h0p, c0p, {"w_ih": w_ih, "w_hh": w_hh, "w_hr": w_hr, "b_ih": b_ih, "b_hh": b_hh}


def _head(case: Case, key: BucketKey) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dy, dhy, dcy in the bucket's shapes: dy where the last real layer's output is ([fwd | bwd]
    at columns 0 and Hp)."""
    cfg = case.config
    T, B, D, L, S, H = cfg.max_len, cfg.batch_size, cfg.num_directions, cfg.num_layers, cfg.state_size, cfg.hidden_size
    Lp, Hp, W, Tp, Bp = key
    dhy, dcy = np.zeros((Lp, 2, Bp, Hp)), np.zeros((Lp, 2, Bp, Hp))
    dhy[:L, :D, :B, :S] = np.asarray(case.dhy).reshape(L, D, B, S)
    if cfg.has_cell_state:
        dcy[:L, :D, :B, :H] = np.asarray(case.dcy).reshape(L, D, B, H)
    dy = np.zeros((Tp, Bp, W))
    dy_real = np.asarray(case.dy).reshape(T, B, D, S)
    for d in range(D):
        dy[:T, :B, d * Hp:d * Hp + S] = dy_real[:, :, d]
    return dy, dhy, dcy


def _lengths(case: Case, key: BucketKey) -> np.ndarray:
    lengths = np.zeros(key.batch_size, dtype=np.int32)
    lengths[:case.config.batch_size] = np.asarray(case.seq_lengths, dtype=np.int32)
    return lengths


def _states(case: Case, a: np.ndarray, width: int) -> np.ndarray:
    """(Lp, 2, Bp, Hp) -> (L·D, B, width)."""
    cfg = case.config
    L, D, B = cfg.num_layers, cfg.num_directions, cfg.batch_size
    return np.ascontiguousarray(a[:L, :D, :B, :width], dtype=np.float64).reshape(L * D, B, width)


def _outputs(case: Case, key: BucketKey, y: np.ndarray, hy: np.ndarray, cy: np.ndarray,
             grads: dict[str, np.ndarray] | None = None) -> Outputs:
    """The real part of the bucket's y, hy, cy (primal values or tangents)."""
    cfg = case.config
    T, B, D, S, Hp = cfg.max_len, cfg.batch_size, cfg.num_directions, cfg.state_size, key.hidden_size
    y_out = np.concatenate([y[:T, :B, d * Hp:d * Hp + S] for d in range(D)], axis=-1)
    return Outputs(y=np.array(y_out, dtype=np.float64), hy=_states(case, hy, S),
                   cy=_states(case, cy, cfg.hidden_size) if cfg.has_cell_state else None, grads=grads or {})


def run_padded(case: Case, bucketed: bool = True) -> Outputs:
    """Like :func:`run_jax_reference`; ``bucketed=False`` compiles for the exact shapes (tests)."""
    cfg = case.config
    key = bucket_key(cfg, bucketed)
    L = cfg.num_layers
    x, h0, c0, params = _placed(case, key, case.x, case.h0, case.c0, case.params, identity=True)
    dy, dhy, dcy = _head(case, key)
    args = (np.int32(_MODE_INDEX[cfg.mode]), np.int32(L), _lengths(case, key), x, h0, c0, params, dy, dhy, dcy)
    with x64():
        y, hy, cy, gx, gh0, gc0, gparams = _call(key, args)
    return _outputs(case, key, y, hy, cy, _grads_out(case, key, gx, gh0, gc0, gparams))


def _grads_out(case: Case, key: BucketKey, gx: np.ndarray, gh0: np.ndarray, gc0: np.ndarray,
               gparams: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The real gradients (or their tangents) of the case out of the bucket's."""
    cfg = case.config
    G, H, S, P = GATES[cfg.mode], cfg.hidden_size, cfg.state_size, cfg.proj_size
    T, B, L, I, Hp = cfg.max_len, cfg.batch_size, cfg.num_layers, cfg.input_size, key.hidden_size
    grads: dict[str, np.ndarray] = {"x": np.array(gx[:T, :B, :I], dtype=np.float64)}
    if case.h0 is not None:
        grads["h0"] = _states(case, gh0, S)
        if cfg.has_cell_state:
            grads["c0"] = _states(case, gc0, H)
    for layer in range(L):
        for d, name in enumerate(directions(cfg)):
            g_ih = np.concatenate([gparams["w_ih"][layer, d, :, dst:dst + width]
                                   for _, dst, width in _input_columns(cfg, key, layer)], axis=1)
            grads[param_key(layer, name, "w_ih")] = _take_rows(g_ih, G, H, Hp)
            grads[param_key(layer, name, "w_hh")] = _take_rows(gparams["w_hh"][layer, d, :, :S], G, H, Hp)
            if P:
                grads[param_key(layer, name, "w_hr")] = gparams["w_hr"][layer, d, :P, :H]
            if cfg.bias:
                grads[param_key(layer, name, "b_ih")] = _take_rows(gparams["b_ih"][layer, d], G, H, Hp)
                grads[param_key(layer, name, "b_hh")] = _take_rows(gparams["b_hh"][layer, d], G, H, Hp)
    return {k: np.array(v, dtype=np.float64) for k, v in grads.items()}


def _primals_and_tangents(case: Case, key: BucketKey, tangents: Mapping[str, np.ndarray]) -> tuple:
    """The case's inputs and ``tangents`` (a name left out: zero) in the bucket's shapes."""
    primals = _placed(case, key, case.x, case.h0, case.c0, case.params, identity=True)
    tangent = _placed(case, key, tangents.get("x", np.zeros_like(case.x)), tangents.get("h0"), tangents.get("c0"),
                      {k: v for k, v in tangents.items() if k in case.params}, identity=False)
    return primals, tangent


def run_jax_jvp(case: Case, tangents: Mapping[str, np.ndarray], bucketed: bool = True) -> Outputs:
    """The output tangents (y, hy, cy) of ``case`` along ``tangents`` (by gradient name; a name left
    out has a zero tangent) in float64: ``jax.jvp`` of the same bucketed forward, one compiled
    program per bucket as for the gradients (kept apart from them: :data:`JVP_PROGRAMS`)."""
    cfg = case.config
    key = bucket_key(cfg, bucketed)
    primals, tangent = _primals_and_tangents(case, key, tangents)
    args = (np.int32(_MODE_INDEX[cfg.mode]), np.int32(cfg.num_layers), _lengths(case, key), *primals, *tangent)
    with x64():
        ty, thy, tcy = JVP_PROGRAMS.call(key, artifact_name(key) + "-jvp", _forward_jvp, args)
    return _outputs(case, key, ty, thy, tcy)


def run_jax_hvp(case: Case, tangents: Mapping[str, np.ndarray], bucketed: bool = True) -> Outputs:
    """The Hessian-vector product of the loss along ``tangents`` (``grads``: every gradient's
    derivative along them; the caller selects the requested ones) in float64: ``jax.jvp`` of the
    ``jax.vjp`` of the same bucketed forward, its own program per bucket (:data:`HVP_PROGRAMS`)."""
    cfg = case.config
    key = bucket_key(cfg, bucketed)
    primals, tangent = _primals_and_tangents(case, key, tangents)
    args = (np.int32(_MODE_INDEX[cfg.mode]), np.int32(cfg.num_layers), _lengths(case, key), *primals,
            *_head(case, key), *tangent)
    with x64():
        tgx, tgh0, tgc0, tgparams = HVP_PROGRAMS.call(key, artifact_name(key) + "-hvp", _forward_hvp, args)
    return Outputs(y=None, hy=None, grads=_grads_out(case, key, tgx, tgh0, tgc0, tgparams))


def run_jax_reference(case: Case) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, the whole padded batch at once.

    y (T, B, D·S) is 0 at padded steps; hy (L·D, B, S); cy for LSTM, else None; grads holds
    ``x`` (0 at padded steps), ``h0`` and ``c0`` (LSTM) when the case passes initial states, and
    every parameter key. All gradients are computed; the caller selects the requested ones.
    """
    return run_padded(case, bucketed=True)


def _measure() -> None:  # pragma: no cover - prints the numbers quoted in benchmarks/RESULTS.md
    import time

    from ..model.profiles import draw_cases, load_profile

    with x64():
        jax.block_until_ready(jnp.ones(3) + 1)  # backend start-up is not a compile
    cases = list(draw_cases(load_profile("ci"), 0, 200))
    t0 = time.perf_counter()
    run_jax_reference(cases[0])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for case in cases:
        run_jax_reference(case)
    per_case = (time.perf_counter() - t0) / len(cases)
    print(f"ci profile, 200 cases: first call {first:.3f} s (compiled {compile_count()}, loaded {load_count()}), then {per_case * 1e3:.2f} ms per case; buckets {cached_buckets()}")


if __name__ == "__main__":  # pragma: no cover
    _measure()
