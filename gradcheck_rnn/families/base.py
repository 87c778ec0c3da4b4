"""What a cell family is: one object that every other module asks instead of testing mode names.

A family holds its case-id token, its gates, its parameter names and shapes (in the canonical
order that is also the draw order), the widths of its states, its case-id options and the
variants it supports (docs/contracts.md, "Cell families"); the default tolerances
(:mod:`gradcheck_rnn.model.tolerances`) hold for every family so far. The math lives with it: every
family gives :meth:`Family.step`, written once over an ops namespace (torch or jax.numpy), which
both references run; a family may name its own JAX program instead of the generic one
(:attr:`Family.jax_program`: the cuDNN families' bucketed program).

A leaf module: at import it imports nothing of the package but errors, so
:mod:`gradcheck_rnn.model.rnn_config` can build on it without import cycles; configs are passed in, never
imported.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Iterator, Mapping

from ..errors import UsageError

# gradcheck_rnn.model.rnn_config.RNNConfig, which builds on this package and so is not imported here.
RNNConfig = Any

DIRECTIONS = ("fwd", "bwd")


@dataclass(frozen=True)
class Option:
    """A family-specific config value named in the case id right after ``H<hidden>``.

    ``token`` is a regular expression with one group; an integer option prints as
    ``token_prefix + value``, a flag (``default`` True or False) prints ``flag_token`` only when
    it is not at its default. ``default`` None makes the token required.
    """

    name: str
    pattern: str
    default: Any
    describe: str
    divides: str = ""  # an integer option that must divide this config field (sLSTM's heads divide H)
    # a flag's simpler value, the one shrink tries (None: its default; s6's gate: off, no z at all)
    simpler: bool | None = None
    # a required option's value where a case is built from flags that leave it out (``check --mode gla``)
    example: int | None = None
    # an integer option's smallest valid value: shrink offers nothing below it (conv1d's window: 2)
    minimum: int = 1

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)

    @property
    def label(self) -> str:
        """An integer option's token without its number (``NH``), as shrink names it in a step."""
        return self.pattern.replace(r"(\d+)", "")

    def render(self, value: Any) -> str:
        if self.is_flag:
            return "" if value == self.default else "-" + self.pattern
        return "" if value == self.default else "-" + self.pattern.replace(r"(\d+)", str(value))

    def parse(self, part: str) -> Any:
        """The option's value if ``part`` is its token, else None."""
        match = re.fullmatch(self.pattern, part)
        if match is None:
            return None
        return (not self.default) if self.is_flag else int(match.group(1))


@dataclass(frozen=True)
class Convention:
    """A choice a target declares by an attribute (``stabilizer_gradient = "constant"``) that
    changes what its gradients mean; the judge judges it on the case with the option that
    makes the references follow it (docs/contracts.md, "Gradient conventions")."""

    attribute: str
    option: str  # a flag option of the family
    values: Mapping[str, bool]  # declared value -> the option's value; the first is the default
    # the head-gradient variant (model/case.py) of the case judged under the convention, when it
    # claims exact gradients only for losses through y (mLSTM's per-head norm: "y"); None: any
    heads: str | None = None


@dataclass(frozen=True)
class Family:
    """One cell family. Subclasses give the shapes; instances are registered in :mod:`gradcheck_rnn.families`."""

    token: str
    gates: tuple[str, ...]
    cell_state: bool = False
    projections: bool = False
    bidirectional: bool = True
    options: tuple[Option, ...] = ()
    # what -longmem needs, for the refusal's sentence (a family with a long-memory regime says when it has one)
    long_memory_needs: str = "the family has no long-memory regime"
    conventions: tuple[Convention, ...] = ()
    # what judging one case of this family costs, in cases of cuDNN's cells (roughly: the measured
    # ratio on the family's home profile, benchmarks/RESULTS.md): the default worker count weighs a
    # run's cases by it (gradcheck_rnn.run.default_workers)
    case_work: float = 1.0

    # ------------------------------------------------------------------ shapes
    @property
    def num_gates(self) -> int:
        return len(self.gates)

    def option_values(self, config: RNNConfig) -> dict[str, Any]:
        """Every option of this family with its value in ``config`` (defaults filled in)."""
        given = dict(config.options)
        return {o.name: given.get(o.name, o.default) for o in self.options}

    def validate(self, config: RNNConfig) -> None:
        """Raise UsageError for a config this family cannot be (one sentence naming the value)."""
        known = {o.name for o in self.options}
        for name, _ in config.options:
            if name not in known:
                raise UsageError(f"option {name!r} is not allowed for {self.token}; "
                                 f"allowed: {', '.join(sorted(known)) or 'none'}")
        for option in self.options:
            value = self.option_values(config)[option.name]
            if value is None:
                raise UsageError(f"{self.token} needs option {option.name} ({option.describe})")
            if not option.is_flag and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UsageError(f"{option.name}={value!r} is not allowed; it must be an integer >= 1")
            if option.divides and getattr(config, option.divides) % value:
                raise UsageError(f"{option.name}={value} is not allowed with {option.divides}="
                                 f"{getattr(config, option.divides)}; it must divide it")
        if config.proj_size and not self.projections:
            raise UsageError(f"proj_size={config.proj_size} is not allowed for {self.token}; "
                             f"projections are LSTM only")
        if not config.bias and not self.has_biases(config):
            raise UsageError(f"nobias is not allowed for {self.token}; it has no biases to leave out, so the case "
                             f"is the one without -nobias")
        if config.long_memory and not self.keeps_memory(config):
            raise UsageError(f"longmem is not allowed for this {self.token} config; "
                             f"{self.long_memory_needs}")
        if config.bidirectional and not self.bidirectional:
            raise UsageError(f"bidirectional is not allowed for {self.token}; it runs forward in time only")

    def has_biases(self, config: RNNConfig) -> bool:
        """Whether a config of this family has bias parameters that ``-nobias`` leaves out (layer 0's
        parameter kinds with and without biases differ). A family without any (a user's minGRU) never
        draws ``-nobias`` and refuses it in a case id: it would name the same case twice."""
        with_bias, without = copy.copy(config), copy.copy(config)
        object.__setattr__(with_bias, "bias", True)  # unvalidated copies: only their parameter kinds are read
        object.__setattr__(without, "bias", False)
        return set(self.unit_shapes(with_bias, 0)) != set(self.unit_shapes(without, 0))

    def output_size(self, config: RNNConfig) -> int:
        """S, the width of each direction's part of y (and of the next layer's input per direction)."""
        return config.proj_size or config.hidden_size

    def h_size(self, config: RNNConfig) -> int:
        """The width of h0 / hy / dhy."""
        return self.output_size(config)

    def c_size(self, config: RNNConfig) -> int:
        """The width of c0 / cy / dcy; 0: the family has no second state tensor."""
        return config.hidden_size if self.cell_state else 0

    def layer_input_size(self, config: RNNConfig, layer: int) -> int:
        """I_0 = input_size; deeper layers see the [fwd | bwd] concatenation of the layer below."""
        return config.input_size if layer == 0 else config.num_directions * self.output_size(config)

    def unit_shapes(self, config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
        """The parameter kinds of one layer and direction with their shapes, in canonical order."""
        raise NotImplementedError  # pragma: no cover - every family defines it

    def param_bound(self, config: RNNConfig) -> float:
        """Parameters are drawn uniform in [-bound, bound] (torch.nn's initialisation by default)."""
        return 1.0 / math.sqrt(config.hidden_size)

    def draw_options(self, rng: Any, hidden_size: int) -> dict[str, Any]:
        """The family's options for a drawn case of that H (a numpy Generator of their own, so
        drawing them shifts no other draw); none for a family without options."""
        return {}

    def simpler_options(self, config: RNNConfig) -> Iterator[tuple[str, dict[str, Any]]]:
        """Candidates for shrink (:mod:`gradcheck_rnn.workflows.shrink`), simplest first: ``(what changed,
        every option's value with the change)`` for each option not at its simplest. An integer
        option tries :func:`smaller` values (sLSTM's heads, s6's N and R); a flag its
        :attr:`Option.simpler` value. A candidate that is no valid config (NH that does not divide
        H) is skipped by shrink, so a family only overrides this to offer other candidates."""
        values = self.option_values(config)
        for option in self.options:
            value = values[option.name]
            if option.is_flag:
                simpler = option.default if option.simpler is None else option.simpler
                if value != simpler:  # its token leaves the case id (back to the default) or enters it
                    change = f"{'drop' if simpler == option.default else 'add'} -{option.pattern}"
                    yield change, {**values, option.name: simpler}
            elif value is not None:
                for n in smaller(value, option.minimum):
                    yield f"{option.label} {value}→{n}", {**values, option.name: n}

    def initial_cell_state(self, config: RNNConfig, drawn: Any) -> Any:
        """c0 from the standard normals drawn for it: a family whose cell state has constraints
        (sLSTM's n0 > 0) maps them to a valid state; by default c0 is the draw itself."""
        return drawn

    def reexpresses(self, config: RNNConfig) -> bool:
        """Whether the config's gradient convention differentiates the final cell state in another
        form than computed (:meth:`reexpressed_cell_state`); none does by default."""
        return False

    def reexpressed_cell_state(self, ops: Any, config: RNNConfig, cy: Any, base_cy: Any) -> Any:
        """The final cell state of one sequence (L·D, c_size) as the config's gradient convention
        differentiates it, given its value at the base point: the fd witness differences the loss
        through it where :meth:`reexpresses` says so."""
        raise NotImplementedError  # pragma: no cover - only for a family whose reexpresses() can be True

    def gated_kinds(self) -> frozenset[str]:
        """Parameter kinds whose rows are gate blocks of H rows (reports name the gate)."""
        return frozenset()

    def packed_order(self, config: RNNConfig, style: str) -> list[str]:
        """Parameter keys in the order of the flat vector: canonical unless a family follows a library's layout."""
        return list(param_shapes(self, config))

    # ------------------------------------------------------------------ long memory (optional)
    def keeps_memory(self, config: RNNConfig) -> bool:
        """Whether this config has a long-memory regime (case id ``-longmem``): parameters that make
        the state decay slowly, so that gradients at long lags stay large enough to judge."""
        return False

    def hold_memory(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        """The drawn float64 parameters moved into the long-memory regime (a fixed shift of the
        parameters that set the decay: no random draw, so the case's other data is unchanged)."""
        raise NotImplementedError  # pragma: no cover - only for a family whose keeps_memory() is True

    def regime_params(self, config: RNNConfig, params: Mapping[str, Any]) -> dict[str, Any]:
        """The drawn float64 parameters moved into every regime the config names (``-longmem``, and a
        family's own such as the matrix families' ``-strongdecay``): fixed shifts, no random draw."""
        return self.hold_memory(config, params) if config.long_memory else dict(params)

    # ------------------------------------------------------------------ math
    def step(self, ops: Any, p: Mapping[str, Any], x: Any, h: Any, c: Any, config: RNNConfig) -> tuple[Any, Any, Any]:
        """One step of one layer on a batch of rows: x (..., I_l), h (..., h_size), c (..., c_size)
        -> (y (..., S), h', c'); c is None for a family without a cell state. ``p`` holds one
        unit's parameters by kind (``w_ih``, ...; the kinds of :meth:`unit_shapes`). ``ops`` is
        the array namespace (:mod:`gradcheck_rnn.families.ops`)."""
        raise NotImplementedError  # pragma: no cover - every family defines it

    # The ``jax`` reference's program for this family, by name (gradcheck_rnn.references.JAX_PROGRAMS):
    # "step", the generic program of :meth:`step`; a family with a faster program of its own names
    # it (the cuDNN families' "bucketed" one). A name, not an import: the references build on the
    # families, not the other way round.
    jax_program = "step"
    # Why a correct kernel below float64 may miss this family's gradients by more than the fixed
    # tolerance on some cases, or "" when it may not: a non-empty reason makes the reference check
    # re-judge a failing non-float64 case with the rounding probe's allowance, and the gradgrad check
    # its Hessian-vector products with the probe's second-order form (gradcheck_rnn.references.drift,
    # "rounding probe"). Relu kinks have their own, exact allowance.
    rounding_sensitive = ""
    # Whether the cell has a kink, a point where its derivative jumps (relu at 0; tanh and σ are
    # smooth): a correct low-precision kernel may put a unit on either side of one, and the drift
    # allowance (gradcheck_rnn.references.drift) pins each such unit both ways.
    kinked = False
    # The shipped profile whose cases draw this family: the one a mutant of its kernels is judged on
    # by default (gradcheck-rnn mutants), and where its regimes are drawn.
    home_profile = "families"
    # The family's fused kernels, by the target that runs them ("fused-cpu", "fused-gpu"), each a
    # "package.module:Class" imported when that target is made (a name, not an import: kernels build
    # on families); a target with no kernel of the family declines its cases.
    kernels: ClassVar[Mapping[str, str]] = {}
    # The bugs of those kernels, ``mutant:NAME``: name -> (the target whose kernel the bug is
    # crossed with, "package.module:Bug"), judged on this family's cases (its home profile).
    mutants: ClassVar[Mapping[str, tuple[str, str]]] = {}

    # ------------------------------------------------------------------ one JAX program for many configs (optional)
    def bucket(self, config: RNNConfig) -> RNNConfig | None:
        """The config whose compiled JAX program also computes this one, by zero padding that is exact
        for the family (every dtype-independent size padded up, switches as data), or None: the JAX
        reference compiles for the config itself. A family that returns one gives the four
        placements below."""
        return None

    def pad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int, unit: Mapping[str, Any]) -> dict[str, Any]:
        """One unit's parameters in the bucket's shapes, plus any data its step reads."""
        raise NotImplementedError  # pragma: no cover - only for a family whose bucket() is not None

    def unpad_unit(self, config: RNNConfig, padded: RNNConfig, layer: int, grads: Mapping[str, Any]) -> dict[str, Any]:
        """The real parameters' gradients out of the bucket's."""
        raise NotImplementedError  # pragma: no cover

    def output_columns(self, config: RNNConfig, padded: RNNConfig) -> Any:
        """Where each of a direction's S real output columns sits among the bucket's (an index
        array); by default the first S (a family that pads inside its output, as the matrix
        families pad each head's value units, says where they went)."""
        import numpy as np

        return np.arange(self.output_size(config))

    def pad_state(self, config: RNNConfig, padded: RNNConfig, h: Any) -> Any:
        """h0 / dhy (..., h_size) in the bucket's (..., h_size)."""
        raise NotImplementedError  # pragma: no cover

    def unpad_state(self, config: RNNConfig, padded: RNNConfig, h: Any) -> Any:
        """The real part of a bucket state (..., h_size)."""
        raise NotImplementedError  # pragma: no cover

    def pad_cell_state(self, config: RNNConfig, padded: RNNConfig, c: Any) -> Any:
        """c0 / dcy (..., c_size) in the bucket's (..., c_size), for a family with a cell state."""
        raise NotImplementedError  # pragma: no cover

    def unpad_cell_state(self, config: RNNConfig, padded: RNNConfig, c: Any) -> Any:
        """The real part of a bucket cell state (..., c_size)."""
        raise NotImplementedError  # pragma: no cover

    def __str__(self) -> str:
        return self.token


def open_gate(params: Mapping[str, Any], bias_kinds: tuple[str, ...], gate: int, hidden_size: int,
              shift: float) -> dict[str, Any]:
    """``params`` with ``shift`` added to the rows of gate block ``gate`` (``hidden_size`` rows a
    block) of every bias of the ``bias_kinds``: how a gated family holds a gate open for -longmem."""
    held = dict(params)
    rows = slice(gate * hidden_size, (gate + 1) * hidden_size)
    for key in held:
        if key.rpartition(".")[2] in bias_kinds:
            held[key] = held[key].copy()
            held[key][rows] += shift
    return held


def smaller(n: int, minimum: int = 1) -> list[int]:
    """Values below n for shrink to try, smallest first: the minimum, n // 2, n - 1 (hypothesis's
    integer order), none below the minimum."""
    return sorted({v for v in (minimum, n // 2, n - 1) if minimum <= v < n})


def param_key(layer: int, direction: str, kind: str) -> str:
    return f"l{layer}.{direction}.{kind}"


def param_shapes(family: Family, config: RNNConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter key with its shape, in canonical order: layer, direction, then the unit's kinds."""
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(config.num_layers):
        for direction in DIRECTIONS[:config.num_directions]:
            for kind, shape in family.unit_shapes(config, layer).items():
                shapes[param_key(layer, direction, kind)] = shape
    return shapes
