"""The JAX reference's shape buckets, without importing jax.

One compiled program of :mod:`.jax_cudnn` serves every case whose config falls in the same
bucket. The bucket is a handful of padded sizes only — mode, direction count, projection and
bias are runtime data of the program, not part of the key (how that stays exact is in
:mod:`.jax_cudnn`'s docstring):

- ``num_layers``: layers pad to ``max(4, next power of two)``; a padded layer is skipped at run
  time (``lax.cond``), so padding layers costs no sequential steps;
- ``hidden_size``: the padded width of both the hidden units (H) and the state (S = P or H),
  ``max(8, next power of two of H)``;
- ``input_width``: the padded width of every layer's input, ``max(bucket(I), 2·hidden_size)``,
  so layer 0 (x) and deeper layers ([fwd | bwd]) share one stacked weight shape;
- ``max_len``, ``batch_size``: ``max(8, next power of two)``.

So the whole ci profile (I, H <= 5, T <= 8, B <= 4, L <= 3, every mode, uni and bi, P, no-bias)
is one bucket and one compiled program; the nightly profile (H <= 16, T <= 24) six.

The families' program (:mod:`.jax_family`) is keyed by a padded config instead
(:func:`family_program`). This module is what the worker pool imports to group cases by program
(:func:`program_key`: a worker that keeps to one program compiles or loads it once) without paying
jax's start-up (seconds) in the supervisor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..model.case import RNNConfig

MIN_BUCKET = 8
MIN_LAYERS = 4
# The families' program (jax_family.py) pads steps to at least this: a masked step costs a few
# microseconds a call, a program of its own a compile or a load (benchmarks/RESULTS.md,
# "Families' programs").
MIN_STEPS = 32


def bucket(n: int, minimum: int = MIN_BUCKET) -> int:
    """The padded size of a dimension of size ``n``: the next power of two, at least ``minimum``."""
    return max(minimum, 1 << (int(n) - 1).bit_length())


class BucketKey(NamedTuple):
    """What one compiled program is specialised on (every other config field is runtime data)."""

    num_layers: int
    hidden_size: int   # padded H and S (S = P with projections)
    input_width: int   # padded width of every layer's input: max(I bucket, 2 * hidden_size)
    max_len: int
    batch_size: int


def bucket_key(config: "RNNConfig", bucketed: bool = True) -> BucketKey:
    """The program key of a config; ``bucketed=False`` gives the smallest exact key (tests).

    Without bucketing the program still has two directions, a projection matrix and every
    mode's cell (those are runtime data), but no padded layer, unit, step or row beyond them.
    """
    if bucketed:
        hidden = bucket(config.hidden_size)
        return BucketKey(bucket(config.num_layers, MIN_LAYERS), hidden,
                         max(bucket(config.input_size), 2 * hidden), bucket(config.max_len),
                         bucket(config.batch_size))
    hidden = config.hidden_size
    return BucketKey(config.num_layers, hidden, max(config.input_size, 2 * hidden), config.max_len,
                     config.batch_size)


def family_program(config: "RNNConfig", bucketed: bool = True) -> "RNNConfig":
    """The padded config whose program of :mod:`.jax_family` serves ``config``: the family's own
    bucket (:meth:`~gradcheck_rnn.families.Family.bucket`: sizes and switches), steps padded to at
    least :data:`MIN_STEPS`, rows to a power of two and, where a skipped layer can pass its input
    on (:func:`layers_padded`), layers to at least :data:`MIN_LAYERS`; float64.
    ``bucketed=False``: the config itself in float64 (tests)."""
    program = dataclasses.replace(config, dtype="f64")
    if not bucketed:
        return program
    program = dataclasses.replace(config.family.bucket(config) or config, dtype="f64",
                                  max_len=bucket(config.max_len, MIN_STEPS), batch_size=bucket(config.batch_size))
    if layers_padded(program):
        program = dataclasses.replace(program, num_layers=bucket(config.num_layers, MIN_LAYERS))
    return program


def layers_padded(config: "RNNConfig") -> bool:
    """Whether a program of ``config`` may run fewer layers than it has: a deeper layer's input is
    as wide as its output (true of every built-in family), so a skipped layer passes its input on."""
    family = config.family
    return family.layer_input_size(config, 1) == config.num_directions * family.output_size(config)


def program_key(config: "RNNConfig") -> Hashable:
    """What names the compiled JAX program that serves ``config``: the cuDNN cells' bucket
    (:func:`bucket_key`) or the families' padded config (:func:`family_program`). The worker pool
    groups cases by it, so a worker loads or compiles each program once."""
    if config.family.jax_program == "bucketed":
        return bucket_key(config)
    return family_program(config)
