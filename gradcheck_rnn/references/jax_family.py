"""The generic ``jax`` reference: what :attr:`gradcheck_rnn.families.Family.jax_program` "step" runs
unless a family offers its own program (the cuDNN cells offer the bucketed one of :mod:`.jax_cudnn`).

The whole padded batch in float64: per layer and direction one ``lax.scan`` over time of the
family's own step (:meth:`gradcheck_rnn.families.Family.step` on jax arrays), sequence b updated
only where ``t < len_b`` — elsewhere every state is held and the output is 0, the padding
semantics of docs/contracts.md — and gradients by ``jax.vjp`` with the head gradients as
cotangents. The reverse direction (for a family that has one) runs on the time-flipped batch,
so it starts each sequence at its own last step. Layers are unrolled in Python: a family's
layer 0 and deeper layers differ in input width.

Programs go through the same :class:`~gradcheck_rnn.references.programs.ProgramStore` as the cuDNN
program: kept for the process (the :data:`MAX_PROGRAMS` most recently used) and, for a built-in
family, written to disk and loaded by the next process without a trace or a compile; a user
family's programs go through JAX's persistent compilation cache only (programs.py says why). A
sweep of random shapes would compile one per config (seconds each), so T and B are padded to
buckets (:func:`gradcheck_rnn.references.buckets.bucket`; extra steps are masked, extra rows have
length 0 and zero head gradients, both exact) and, for a family that knows which zero padding is
exact in its own math (:meth:`gradcheck_rnn.families.Family.bucket`: s6, slstm, the matrix
families), every size and switch too: the family places the case's parameters and states (h, and
the cell state of a family that has one) into the bucket's shapes (with its switches as data) and
takes the real gradients back out. The bucketed result equals the
exact-shape one to float64 rounding (tests/test_s6.py, tests/test_slstm.py).
"""

from __future__ import annotations

import hashlib
import json
from functools import partial
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..model.case import Case, Outputs, RNNConfig
from ..families.ops import jax_ops
from ..model.layout import directions, param_key
from .buckets import family_program, layers_padded
from .jax_cudnn import x64
from .programs import ProgramStore, is_package_code, maths_sources

# The compiled programs this process keeps, least recently used first. Each holds ~200 memory
# mappings of XLA's code, and a process may have 65,530 (Linux's vm.max_map_count): one that kept
# every program of a long sweep of the matrix families (~300 buckets) failed in LLVM ("Cannot
# allocate memory", then a segfault). So each of the three stores below keeps at most MAX_PROGRAMS
# (together 192 programs, ~38,000 mappings); an evicted one is loaded or compiled again when its
# bucket returns.
MAX_PROGRAMS = 64
PROGRAMS = ProgramStore(maths_sources(__file__), capacity=MAX_PROGRAMS)
# The forward-mode programs (the ``jvp`` check's): their own store, artifacts named ``<name>-jvp``
JVP_PROGRAMS = ProgramStore(maths_sources(__file__), capacity=MAX_PROGRAMS)
# ... and the second-order ones (the ``gradgrad`` check's), artifacts named ``<name>-hvp``
HVP_PROGRAMS = ProgramStore(maths_sources(__file__), capacity=MAX_PROGRAMS)


def _forward(cfg: RNNConfig, layers: jax.Array, lengths: jax.Array, x: jax.Array, h0: jax.Array,
             c0: jax.Array | None, params: dict[str, dict[str, jax.Array]]) -> tuple:
    """y (T, B, D·S), hy (L·D, B, h_size), cy (L·D, B, c_size) or None, over the padded batch;
    ``params`` holds each unit's arrays (and any data its step reads) under ``l<layer>.<direction>``.

    Where a skipped layer can pass its input on (:func:`~.buckets.layers_padded`), the layers past
    the first are one ``lax.scan`` over their stacked parameters, each run by ``lax.cond`` only
    while it is below ``layers`` (data: the case's own layer count), so y is the last real layer's
    output, a padded layer costs no sequential step, and the program holds two layers' code
    whatever its depth (its size is what a new process pays to load it)."""
    family, ops = cfg.family, jax_ops()
    D = cfg.num_directions
    valid = (jnp.arange(x.shape[0])[:, None] < lengths[None, :])[..., None]  # (T, B, 1)

    def run_layer(units: list, inp: jax.Array, h0s: list, c0s: list) -> tuple:
        """One layer, every direction: its output (T, B, D·S) and its final states per direction."""
        outputs, finals_h, finals_c = [], [], []
        for d, direction in enumerate(directions(cfg)):
            reverse = direction == "bwd"

            def step(carry, inputs, unit=units[d]):
                h, c = carry
                x_t, m = inputs
                y, h_new, c_new = family.step(ops, unit, x_t, h, c, cfg)
                c_kept = None if c is None else jnp.where(m, c_new, c)
                return (jnp.where(m, h_new, h), c_kept), jnp.where(m, y, 0.0)

            xs, masks = (inp[::-1], valid[::-1]) if reverse else (inp, valid)
            (h, c), ys = lax.scan(step, (h0s[d], c0s[d]), (xs, masks))
            outputs.append(ys[::-1] if reverse else ys)
            finals_h.append(h)
            finals_c.append(c)
        return jnp.concatenate(outputs, axis=-1), finals_h, finals_c

    def layer_args(layer: int) -> tuple:
        units = [params[_unit_key(layer, direction)] for direction in directions(cfg)]
        return (units, [h0[layer * D + d] for d in range(D)],
                [None if c0 is None else c0[layer * D + d] for d in range(D)])

    if not layers_padded(cfg):
        inp, finals_h, finals_c = x, [], []
        for layer in range(cfg.num_layers):
            units, h0s, c0s = layer_args(layer)
            inp, hs, cs = run_layer(units, inp, h0s, c0s)
            finals_h += hs
            finals_c += cs
        return inp, jnp.stack(finals_h), None if c0 is None else jnp.stack(finals_c)

    units, h0s, c0s = layer_args(0)
    inp, finals_h, finals_c = run_layer(units, x, h0s, c0s)
    hy, cy = jnp.stack(finals_h), None if c0 is None else jnp.stack(finals_c)
    if cfg.num_layers > 1:
        deeper = [layer_args(layer) for layer in range(1, cfg.num_layers)]
        stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *deeper)  # (units, h0s, c0s), layer-major

        def body(inp: jax.Array, xs: tuple) -> tuple:
            layer, (units, h0s, c0s) = xs
            out, hs, cs = lax.cond(layer < layers, run_layer, lambda u, i, h, c: (i, h, c), units, inp, h0s, c0s)
            return out, (jnp.stack(hs), None if c0 is None else jnp.stack(cs))

        inp, (hs, cs) = lax.scan(body, inp, (jnp.arange(1, cfg.num_layers), stacked))
        hy = jnp.concatenate([hy, hs.reshape((-1,) + hs.shape[2:])])
        cy = None if c0 is None else jnp.concatenate([cy, cs.reshape((-1,) + cs.shape[2:])])
    return inp, hy, cy


def _forward_backward(cfg: RNNConfig, layers, lengths, x, h0, c0, params, dy, dhy, dcy):
    (y, hy, cy), vjp = jax.vjp(partial(_forward, cfg, layers, lengths), x, h0, c0, params)
    gx, gh0, gc0, gparams = vjp((dy, dhy, dcy))
    return y, hy, cy, gx, gh0, gc0, gparams


def _parameter_tangents(params, tparams):
    """``tparams`` where JAX can take them: a parameter leaf that is not a float (a family's switch
    as data) has no tangent (float0)."""
    def tangent_of(p, t):
        return t if jnp.issubdtype(p.dtype, jnp.inexact) else np.zeros(p.shape, jax.dtypes.float0)

    return jax.tree_util.tree_map(tangent_of, params, tparams)


def _forward_jvp(cfg: RNNConfig, layers, lengths, x, h0, c0, params, tx, th0, tc0, tparams):
    """The output tangents of the forward."""
    return jax.jvp(partial(_forward, cfg, layers, lengths), (x, h0, c0, params),
                   (tx, th0, tc0, _parameter_tangents(params, tparams)))[1]


def _forward_hvp(cfg: RNNConfig, layers, lengths, x, h0, c0, params, dy, dhy, dcy, tx, th0, tc0, tparams):
    """The tangents of every gradient (cotangents dy, dhy, dcy) along the tangents."""
    def gradients(*inputs):
        return jax.vjp(partial(_forward, cfg, layers, lengths), *inputs)[1]((dy, dhy, dcy))

    return jax.jvp(gradients, (x, h0, c0, params), (tx, th0, tc0, _parameter_tangents(params, tparams)))[1]


def program_name(cfg: RNNConfig) -> str | None:
    """The artifact file name of the program of padded config ``cfg`` (before its fingerprint):
    its family's token and a hash of the whole config; None for a family defined outside this
    package, whose maths no fingerprint covers (its programs are never written to a file)."""
    if not is_package_code(cfg.family):
        return None
    wire = json.dumps(cfg.to_wire(), sort_keys=True)
    return f"{cfg.mode}-{hashlib.sha256(wire.encode()).hexdigest()[:20]}"


def program_count() -> int:
    """Programs this process traced, lowered and compiled (evicted ones and their recompiles included)."""
    return PROGRAMS.counts["compiled"]


def load_count() -> int:
    """Programs this process loaded from an artifact (no trace, no lowering, no compile)."""
    return PROGRAMS.counts["loaded"]


def _unit_key(layer: int, direction: str) -> str:
    return f"l{layer}.{direction}"


class _Placement:
    """How one case sits in its program's shapes (see the module docstring): the inputs placed in,
    the results taken back out."""

    def __init__(self, case: Case, bucketed: bool) -> None:
        cfg = case.config
        self.case, self.cfg, self.family = case, cfg, cfg.family
        self.sized = self.family.bucket(cfg) if bucketed else None  # the family pads sizes and switches too
        self.program = family_program(cfg, bucketed)

    @staticmethod
    def _pad(a: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
        out = np.zeros(shape)
        if a is not None:
            out[tuple(slice(0, n) for n in a.shape)] = a
        return out

    def state_in(self, a: np.ndarray | None) -> np.ndarray:
        return self._states_in(a, self.cfg.h_size, self.program.h_size, self.family.pad_state)

    def state_out(self, a: np.ndarray) -> np.ndarray:
        return self._states_out(a, self.family.unpad_state)

    def cell_in(self, a: np.ndarray | None) -> np.ndarray | None:
        if not self.cfg.has_cell_state:
            return None
        return self._states_in(a, self.cfg.c_size, self.program.c_size, self.family.pad_cell_state)

    def cell_out(self, a: np.ndarray) -> np.ndarray:
        return self._states_out(a, self.family.unpad_cell_state)

    def _states_in(self, a: np.ndarray | None, size: int, padded_size: int,
                   pad: Callable[..., np.ndarray]) -> np.ndarray:
        """(L·D, B, size) states (zeros when None) in the program's (Lp·D, Bp, padded_size), each
        placed by the family's ``pad`` where it buckets its sizes."""
        cfg, program = self.cfg, self.program
        a = np.zeros((cfg.num_layers * cfg.num_directions, cfg.batch_size, size)) if a is None \
            else np.asarray(a, dtype=np.float64)
        a = pad(cfg, program, a) if self.sized else a
        return self._pad(a, (program.num_layers * cfg.num_directions, program.batch_size, padded_size))

    def _states_out(self, a: np.ndarray, unpad: Callable[..., np.ndarray]) -> np.ndarray:
        """The real (L·D, B, ...) states out of the program's, through the family's ``unpad``."""
        cfg = self.cfg
        a = np.asarray(a[:cfg.num_layers * cfg.num_directions, :cfg.batch_size], dtype=np.float64)
        return unpad(cfg, self.program, a) if self.sized else a

    def units(self, params: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Every unit's parameters (a missing key as zeros) in the program's shapes; a padded layer
        has zero parameters (and is skipped)."""
        cfg, program = self.cfg, self.program
        units = {}
        for layer in range(program.num_layers):
            for direction in directions(cfg):
                unit = {k: np.asarray(params[param_key(layer, direction, k)], dtype=np.float64)
                        if layer < cfg.num_layers and param_key(layer, direction, k) in params else np.zeros(shape)
                        for k, shape in self.family.unit_shapes(cfg, layer).items()}
                units[_unit_key(layer, direction)] = (self.family.pad_unit(cfg, program, layer, unit) if self.sized
                                                      else unit)
        return units

    def inputs(self, x: np.ndarray, h0: np.ndarray | None, c0: np.ndarray | None,
               params: dict[str, np.ndarray]) -> tuple:
        """x, h0, c0 and the units in the program's shapes."""
        shape = (self.program.max_len, self.program.batch_size, self.program.input_size)
        return self._pad(x, shape), self.state_in(h0), self.cell_in(c0), self.units(params)

    def columns(self) -> np.ndarray:
        """Where each of a direction's S real output columns sits among the program's Sp."""
        return self.family.output_columns(self.cfg, self.program) if self.sized else np.arange(self.cfg.state_size)

    def y_out(self, y: np.ndarray) -> np.ndarray:
        cfg, Sp, columns = self.cfg, self.program.state_size, self.columns()
        y = np.concatenate([y[:cfg.max_len, :cfg.batch_size, d * Sp + columns] for d in range(cfg.num_directions)],
                           axis=-1)
        return np.array(y, dtype=np.float64)

    def dy(self) -> np.ndarray:
        """The case's dy in the program's shapes: each direction's part of y starts at d·Sp."""
        cfg, program, columns = self.cfg, self.program, self.columns()
        S, Sp = cfg.state_size, program.state_size
        dy = np.zeros((program.max_len, program.batch_size, cfg.num_directions * Sp))
        for d in range(cfg.num_directions):
            dy[:cfg.max_len, :cfg.batch_size, d * Sp + columns] = np.asarray(self.case.dy)[:, :, d * S:(d + 1) * S]
        return dy

    def grads_out(self, gx: np.ndarray, gh0: np.ndarray, gc0: np.ndarray, gunits: dict) -> dict[str, np.ndarray]:
        """The real gradients (or their tangents) out of the program's."""
        cfg, family, program = self.cfg, self.family, self.program
        grads = {"x": np.array(gx[:cfg.max_len, :cfg.batch_size, :cfg.input_size], dtype=np.float64)}
        if self.case.h0 is not None:
            grads["h0"] = self.state_out(gh0)
            if cfg.has_cell_state:
                grads["c0"] = self.cell_out(gc0)
        for layer in range(cfg.num_layers):
            for direction in directions(cfg):
                g = {k: np.asarray(v, dtype=np.float64) for k, v in gunits[_unit_key(layer, direction)].items()}
                g = family.unpad_unit(cfg, program, layer, g) if self.sized else g
                grads.update({param_key(layer, direction, k): np.array(g[k]) for k in family.unit_shapes(cfg, layer)})
        return grads

    def lengths(self) -> np.ndarray:
        lengths = np.zeros(self.program.batch_size, dtype=np.int32)
        lengths[:self.cfg.batch_size] = self.case.seq_lengths
        return lengths


def run_jax_family_reference(case: Case, bucketed: bool = True) -> Outputs:
    """Outputs and every gradient of ``case`` in float64, the padded batch at once (see the module
    docstring); ``bucketed=False`` compiles for the exact shapes (tests)."""
    cfg = case.config
    place = _Placement(case, bucketed)
    program = place.program
    dy = place.dy()
    args = (np.int32(cfg.num_layers), place.lengths(), *place.inputs(case.x, case.h0, case.c0, case.params),
            dy, place.state_in(case.dhy), place.cell_in(case.dcy))
    with x64():
        y, hy, cy, gx, gh0, gc0, gunits = PROGRAMS.call(program, program_name(program),
                                                        partial(_forward_backward, program), args)
    return Outputs(y=place.y_out(y), hy=place.state_out(hy),
                   cy=place.cell_out(cy) if cfg.has_cell_state else None,
                   grads=place.grads_out(gx, gh0, gc0, gunits))


def _with_tangents(place: "_Placement", tangents: Mapping[str, np.ndarray]) -> tuple[tuple, tuple]:
    """The case's inputs and ``tangents`` in the program's shapes. A tangent is placed as
    place(t) − place(0): the family's placement is affine (zero fill, plus constants such as its
    switches, which get tangent 0)."""
    case = place.case
    primals = place.inputs(case.x, case.h0, case.c0, case.params)
    zero_params = {k: np.zeros_like(v) for k, v in case.params.items()}
    zeros = place.inputs(np.zeros_like(case.x), None, None, zero_params)
    moved = place.inputs(tangents.get("x", np.zeros_like(case.x)), tangents.get("h0"), tangents.get("c0"),
                         {**zero_params, **{k: v for k, v in tangents.items() if k in case.params}})
    tangent = jax.tree_util.tree_map(
        lambda a, b: a - b if np.issubdtype(np.asarray(a).dtype, np.number) else np.zeros_like(a), moved, zeros)
    return primals, tangent


def run_jax_family_jvp(case: Case, tangents: Mapping[str, np.ndarray], bucketed: bool = True) -> Outputs:
    """The output tangents (y, hy, cy) of ``case`` along ``tangents`` (by gradient name; a name left
    out has a zero tangent) in float64: ``jax.jvp`` of the same forward, its own program per
    bucket (:data:`JVP_PROGRAMS`)."""
    cfg = case.config
    place = _Placement(case, bucketed)
    primals, tangent = _with_tangents(place, tangents)
    args = (np.int32(cfg.num_layers), place.lengths(), *primals, *tangent)
    program = place.program
    name = program_name(program)
    with x64():
        ty, thy, tcy = JVP_PROGRAMS.call(program, None if name is None else name + "-jvp",
                                         partial(_forward_jvp, program), args)
    return Outputs(y=place.y_out(ty), hy=place.state_out(thy),
                   cy=place.cell_out(tcy) if cfg.has_cell_state else None)


def run_jax_family_hvp(case: Case, tangents: Mapping[str, np.ndarray], bucketed: bool = True) -> Outputs:
    """The Hessian-vector product of the loss along ``tangents`` (``grads``: every gradient's
    derivative along them) in float64: ``jax.jvp`` of the ``jax.vjp`` of the same forward, its own
    program per bucket (:data:`HVP_PROGRAMS`)."""
    cfg = case.config
    place = _Placement(case, bucketed)
    primals, tangent = _with_tangents(place, tangents)
    args = (np.int32(cfg.num_layers), place.lengths(), *primals, place.dy(), place.state_in(case.dhy),
            place.cell_in(case.dcy), *tangent)
    program = place.program
    name = program_name(program)
    with x64():
        tgx, tgh0, tgc0, tgunits = HVP_PROGRAMS.call(program, None if name is None else name + "-hvp",
                                                     partial(_forward_hvp, program), args)
    return Outputs(y=None, hy=None, grads=place.grads_out(tgx, tgh0, tgc0, tgunits))
