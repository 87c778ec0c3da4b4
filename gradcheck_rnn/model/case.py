"""The case model: one fully described RNN problem, named by a case id that rebuilds it bit for bit.

    lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273[-w<group>][-g<heads>][-z][-tail<n>][-dy<T|S|E>][-xS][-kc.<name>.<value>...]
    lstm-L2-bi-I3-H5-P3-nobias-T7-B3-len7.4.0-f32-s9      (projection, no biases, a length 0)

The API-surface tokens sit right after ``H<hidden>`` and are absent at their defaults, so every
id written before they existed keeps its meaning: ``-P<proj>`` (LSTM projections, 1 <= P < H;
h has P units) and ``-nobias`` (no bias vectors). Lengths are in 0..T: a sequence of length 0
is never run (y = 0 there, hy = h0, dh0 = dhy); sweeps draw them only where the profile says so.

A :class:`Case` holds an :class:`RNNConfig` and float64 numpy master data. All data is drawn
from a numpy PCG64 generator seeded with the data seed, in this fixed order (changing it is a
breaking change; tests pin known values). S is the state width: P with projections, else H.

1. parameters, key by key in canonical order (layer, direction, w_ih, w_hh, w_hr, b_ih, b_hh;
   w_hr only with projections, the biases only with bias), each uniform in
   [-1/sqrt(H), 1/sqrt(H)] like torch.nn's initialisation;
2. x (T, B, I) standard normal — padded steps too, so padding leaks show;
3. h0 (L·D, B, S) standard normal;
4. c0 (L·D, B, c_size) standard normal, for a family with a cell state (LSTM: H wide), mapped
   to a valid state by the family (sLSTM's [c | n | m]: n0 ≥ 1; the identity for LSTM);
5. dy (T, B, D·S) standard normal — non-zero at padded steps too;
6. dhy (L·D, B, S) standard normal;
7. dcy (L·D, B, c_size) standard normal, for a family with a cell state.

Everything is always drawn, so the variants (``-w``, ``-g``, ``-z``, ``-tail<n>``, the layouts and
kernel configurations of :mod:`gradcheck_rnn.model.layouts`) change nothing else (``-dyE`` then
broadcasts each head gradient's first element of the last axis across it); the packed tail's rows (x and dy past the last sequence) come from a generator of their own
(:mod:`gradcheck_rnn.model.packed`).
Variants are then applied (zeroed heads, omitted states), and finally every array is rounded
to the case dtype, so a target computing in that dtype sees exactly the master values and the
float64 references differ from it only by the target's own arithmetic.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .rnn_config import DTYPES, HEADS, MAX_SEED, MODES, TORCH_DTYPE_NAMES, WANTS_GROUPS, RNNConfig
from ..families import family, known, modes
from ..errors import UsageError
from .layout import param_names, param_shapes
from .layouts import (GRAD_LAYOUTS, INPUT_LAYOUTS, KERNEL_CONFIG_TOKEN, broadcast_heads, config_value,
                      format_kernel_config, lay_out, normal_kernel_config)

__all__ = ["DTYPES", "HEADS", "MODES", "TORCH_DTYPE_NAMES", "WANTS_GROUPS", "Case", "Outputs", "RNNConfig",
           "make_case", "with_changes"]

# Size budget: a case id is input from anywhere (a CI log, a bug report), so one naming a huge
# case must be refused before anything is allocated. The references and kernels keep a few
# tens of copies of the case's tensors (gates and states of every step), so 20 million float64
# elements of case data (160 MB) is the most a 24 GiB machine judges comfortably; the largest
# nightly case has about 13 thousand.
DEFAULT_MAX_ELEMENTS = 20_000_000
MAX_TAIL = 64  # rows of a packed tail (-tail<n>): enough for any block overshoot, bounded like every size
MAX_ELEMENTS_ENV = "GRADCHECK_RNN_MAX_ELEMENTS"


def case_elements(config: RNNConfig) -> int:
    """Elements across x, parameters, initial states and head gradients, computed without allocating."""
    D, L, T, B = config.num_directions, config.num_layers, config.max_len, config.batch_size
    family = config.family
    # one layer's shapes at a time: a huge config must not build a dict of every key first
    params = D * sum(int(np.prod(s, dtype=object)) for s in family.unit_shapes(config, 0).values())
    if L > 1:
        params += (L - 1) * D * sum(int(np.prod(s, dtype=object)) for s in family.unit_shapes(config, 1).values())
    states = L * D * B * 2 * (config.h_size + config.c_size)  # h0, dhy (and c0, dcy)
    return params + T * B * config.input_size + T * B * D * config.state_size + states


def check_size_budget(config: RNNConfig) -> None:
    """Refuse a config whose case data would exceed the size budget (UsageError naming how to raise it)."""
    import os

    raw = os.environ.get(MAX_ELEMENTS_ENV, "")
    try:
        budget = int(raw) if raw else DEFAULT_MAX_ELEMENTS
    except ValueError:
        raise UsageError(f"{MAX_ELEMENTS_ENV}={raw!r} is not allowed; it must be an integer") from None
    elements = case_elements(config)
    if elements > budget:
        raise UsageError(f"{config.prefix} needs {elements:,} elements of case data, over the budget of "
                         f"{budget:,}; set {MAX_ELEMENTS_ENV} to raise it")


def validate_lengths(config: RNNConfig, seq_lengths: Sequence[int]) -> np.ndarray:
    """Check a length vector against a config; return it as int64 numpy."""
    lengths = [int(v) for v in seq_lengths]
    if len(lengths) != config.batch_size:
        raise UsageError(f"{len(lengths)} sequence lengths given for batch_size={config.batch_size}; "
                         f"give exactly one length per sequence")
    for b, length in enumerate(lengths):
        if not 0 <= length <= config.max_len:
            raise UsageError(f"sequence length {length} (sequence {b}) is not allowed; "
                             f"lengths must be in 0..T={config.max_len}")
    return np.asarray(lengths, dtype=np.int64)


def wanted_gradients(config: RNNConfig, group: str, initial_state: bool = True) -> frozenset[str]:
    """The gradient names a wants group requests (docs/contracts.md, "Gradient requests")."""
    if group not in WANTS_GROUPS:
        raise UsageError(f"unknown wants group {group!r}; allowed: {', '.join(WANTS_GROUPS)}")
    inputs = {"x"}
    if initial_state:
        inputs.add("h0")
        if config.has_cell_state:
            inputs.add("c0")
    params = set(param_names(config))
    return frozenset({"all": inputs | params, "inputs": inputs, "x": {"x"}, "params": params}[group])


def round_to_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to the nearest value of ``dtype``, returned as float64."""
    if dtype == "f64":
        return np.ascontiguousarray(array, dtype=np.float64)
    if dtype in ("f32", "f16"):
        return array.astype(np.float32 if dtype == "f32" else np.float16).astype(np.float64)
    import torch

    return torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16).to(torch.float64).numpy()


@dataclass(eq=False)
class Case:
    """One fully described problem: config, float64 master data and what is requested.

    ``wants`` may be given as a group name (``all``, ``inputs``, ``x``, ``params``) or as the
    frozenset of gradient names; it is stored as the frozenset. ``h0 is None`` means the
    target takes its own "no initial state" path (case id suffix ``-z``).
    """

    config: RNNConfig
    x: np.ndarray
    seq_lengths: np.ndarray
    h0: np.ndarray | None
    c0: np.ndarray | None
    params: dict[str, np.ndarray]
    dy: np.ndarray
    dhy: np.ndarray
    dcy: np.ndarray | None
    seed: int
    wants: Any = "all"
    heads: str = "all"
    # rows of padding after the last sequence in the packed form (case id ``-tail<n>``, see
    # :mod:`gradcheck_rnn.model.packed`); a padded target never sees them
    tail: int = 0
    # how dy/dhy/dcy and x are laid out in memory when handed to a target (case id -dy<T|S|E>, -xS)
    # and the kernel configuration it runs under (-kc.<name>.<value>): gradcheck_rnn/model/layouts.py
    grad_layout: str = ""
    input_layout: str = ""
    kernel_config: Any = ()
    wants_group: str = field(default="all", init=False)

    def __post_init__(self) -> None:
        self.seq_lengths = validate_lengths(self.config, self.seq_lengths)
        if self.heads not in HEADS:
            raise UsageError(f"unknown head-gradient variant {self.heads!r}; allowed: {', '.join(HEADS)}")
        if isinstance(self.tail, bool) or not isinstance(self.tail, (int, np.integer)) or not 0 <= self.tail <= MAX_TAIL:
            raise UsageError(f"tail={self.tail!r} is not allowed; a packed tail has 0..{MAX_TAIL} rows")
        self.tail = int(self.tail)
        if self.grad_layout not in ("", *GRAD_LAYOUTS) or self.input_layout not in ("", *INPUT_LAYOUTS):
            raise UsageError(f"layouts dy{self.grad_layout!r}, x{self.input_layout!r} are not allowed; head gradients "
                             f"take {', '.join(GRAD_LAYOUTS)}, x takes {', '.join(INPUT_LAYOUTS)}")
        self.kernel_config = normal_kernel_config(self.kernel_config)
        initial_state = self.h0 is not None
        if isinstance(self.wants, str):
            self.wants_group = self.wants
            self.wants = wanted_gradients(self.config, self.wants, initial_state)
        else:
            wants = frozenset(self.wants)
            matches = [g for g in WANTS_GROUPS if wanted_gradients(self.config, g, initial_state) == wants]
            if not matches:
                raise UsageError(f"wants={sorted(wants)} is not one of the groups {', '.join(WANTS_GROUPS)}")
            self.wants_group, self.wants = matches[0], wants

    @property
    def id(self) -> str:
        return format_case_id(self.config, self.seq_lengths, self.seed, self.wants_group, self.heads,
                              self.h0 is not None, self.tail, self.grad_layout, self.input_layout, self.kernel_config)

    @property
    def initial_state(self) -> bool:
        return self.h0 is not None

    @classmethod
    def from_id(cls, case_id: str) -> "Case":
        """Rebuild a case, bit for bit, from its id."""
        spec = parse_case_id(case_id)
        try:
            return make_case(**spec)
        except UsageError as exc:
            raise UsageError(f"case id {case_id!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"Case({self.id!r})"


@dataclass
class Outputs:
    """What a target returns: forward results and gradients (numpy or torch, any float dtype)."""

    y: Any
    hy: Any
    cy: Any = None
    grads: dict[str, Any] = field(default_factory=dict)
    # what a packed target returned past cu_seqlens[-1] for each gradient (``x``): every value
    # there must be exactly 0 (:func:`gradcheck_rnn.model.packed.packed_outputs` fills it)
    tails: dict[str, Any] = field(default_factory=dict)


_HEAD_PATTERNS: list[tuple[str, str, str]] = [
    ("num_layers", r"L(\d+)", "L<layers>, e.g. L2"),
    ("bidirectional", r"(uni|bi)", "uni or bi"),
    ("input_size", r"I(\d+)", "I<input size>, e.g. I3"),
    ("hidden_size", r"H(\d+)", "H<hidden size>, e.g. H5"),
]
_TAIL_PATTERNS: list[tuple[str, str, str]] = [
    ("max_len", r"T(\d+)", "T<max length>, e.g. T7"),
    ("batch_size", r"B(\d+)", "B<batch>, e.g. B3"),
    ("seq_lengths", r"len(\d+(?:\.\d+)*)", "len<l_0>.<l_1>..., e.g. len7.4.1"),
    ("dtype", rf"({'|'.join(DTYPES)})", f"one of {', '.join(DTYPES)}"),
    ("seed", r"s(\d+)", "s<data seed>, e.g. s918273"),
]
_VARIANT_PATTERNS: list[tuple[str, str]] = [
    ("wants", rf"w({'|'.join(WANTS_GROUPS[1:])})"),
    ("heads", rf"g({'|'.join(HEADS[1:])})"),
    ("initial_state", r"(z)"),
    ("tail", r"tail([1-9]\d*)"),
    ("grad_layout", rf"dy([{''.join(GRAD_LAYOUTS)}])"),
    ("input_layout", rf"x([{''.join(INPUT_LAYOUTS)}])"),
]
ID_FORMAT = ("<mode>-L<layers>-<uni|bi>-I<input>-H<hidden>[-P<proj>][-<family options>][-nobias][-longmem]"
             "-T<maxlen>-B<batch>"
             "-len<l_0>.<l_1>...-<dtype>-s<seed>[-w<group>][-g<heads>][-z][-tail<rows>][-dy<T|S|E>][-xS]"
             "[-kc.<name>.<value>...]")


# The mode, dtype and wants group of a case id, read by its fixed grammar alone (no family is
# asked, so a stored row of a user family reads without it): a compact row leaves them out.
_ID_FACTS = re.compile(rf"([^-]+)-.*-len[0-9.]+-({'|'.join(DTYPES)})-s[0-9]+(?:-w({'|'.join(WANTS_GROUPS[1:])}))?(?:-.*)?")


def id_facts(case_id: str) -> dict[str, str]:
    """``{"mode", "dtype", "wants"}`` as ``case_id`` says (wants ``all`` without ``-w``); {} when
    it does not read as a case id."""
    match = _ID_FACTS.fullmatch(case_id)
    return {} if match is None else {"mode": match[1], "dtype": match[2], "wants": match[3] or "all"}


def _surface(mode: str) -> list[tuple[str, str, str, bool]]:
    """The tokens allowed right after ``H<hidden>`` for a mode, in order: (name, pattern, allowed,
    required): ``-P<proj>`` (parsed for every family, so that the config names the family that has
    none), the family's options, ``-nobias``, ``-longmem``."""
    parts = [("proj_size", r"P(\d+)", "P<projection size>, e.g. P3 (optional)", False)]
    parts += [(o.name, o.pattern, o.describe, o.default is None) for o in family(mode).options]
    return parts + [("bias", r"(nobias)", "nobias (optional)", False),
                    ("long_memory", r"(longmem)", "longmem (optional)", False)]


def parse_case_id(case_id: str) -> dict[str, Any]:
    """Parse a case id into the keyword arguments of :func:`make_case`; UsageError names the bad part."""
    parts = case_id.strip().split("-")
    if len(parts) < 1 + len(_HEAD_PATTERNS) + len(_TAIL_PATTERNS):
        raise UsageError(f"case id {case_id!r} has {len(parts)} parts; expected {ID_FORMAT}")
    if not known(parts[0]):
        raise UsageError(f"case id {case_id!r}: {parts[0]!r} is not a built-in family (one of {', '.join(modes())}); "
                         f"pass --family MODULE:NAME to load the family of your own that it names")
    values: dict[str, Any] = {"mode": parts[0]}
    options: dict[str, Any] = {}
    position = 1
    grammar = [(n, p, a, True) for n, p, a in _HEAD_PATTERNS] + _surface(parts[0]) \
        + [(n, p, a, True) for n, p, a in _TAIL_PATTERNS]
    option_names = {o.name: o for o in family(parts[0]).options}
    for name, pattern, allowed, required in grammar:
        part = parts[position] if position < len(parts) else ""
        match = re.fullmatch(pattern, part)
        if not match:
            if not required:
                continue
            raise UsageError(f"case id {case_id!r}: part {part!r} should be {allowed}")
        if name in option_names:
            options[name] = option_names[name].parse(part)
        else:
            values[name] = match.group(1)
        position += 1
    variants: dict[str, str] = {}
    remaining = parts[position:]
    kernel_config = []
    while remaining and (token := KERNEL_CONFIG_TOKEN.fullmatch(remaining[-1])):  # the last tokens
        kernel_config.insert(0, (token[1], config_value(token[2])))
        remaining = remaining[:-1]
    if kernel_config != sorted(kernel_config):
        raise UsageError(f"case id {case_id!r}: the -kc.<name>.<value> tokens must come in name order")
    order = iter(_VARIANT_PATTERNS)
    for part in remaining:
        for name, pattern in order:
            match = re.fullmatch(pattern, part)
            if match:
                variants[name] = match.group(1)
                break
        else:
            raise UsageError(f"case id {case_id!r}: suffix {part!r} is not allowed; variant suffixes are "
                             f"-w{{{'|'.join(WANTS_GROUPS[1:])}}}, -g{{{'|'.join(HEADS[1:])}}}, -z, -tail<rows>, "
                             f"-dy{{{'|'.join(GRAD_LAYOUTS)}}}, -x{{{'|'.join(INPUT_LAYOUTS)}}}, in that order, "
                             f"then -kc.<name>.<value> tokens")
    if values.get("proj_size") is not None and int(values["proj_size"]) == 0:
        raise UsageError(f"case id {case_id!r}: part 'P0' is not allowed; leave -P<proj> out for no projection")
    seed = int(values["seed"])
    if seed > MAX_SEED:
        raise UsageError(f"case id {case_id!r}: seed {seed} is too large; seeds are in 0..{MAX_SEED}")
    try:
        config = _config_from_id(values, options)
    except UsageError as exc:
        raise UsageError(f"case id {case_id!r}: {exc}") from None
    return {
        "config": config,
        "seq_lengths": [int(v) for v in values["seq_lengths"].split(".")],
        "seed": seed,
        "wants": variants.get("wants", "all"),
        "heads": variants.get("heads", "all"),
        "initial_state": "initial_state" not in variants,
        "tail": int(variants.get("tail", 0)),
        "grad_layout": variants.get("grad_layout", ""),
        "input_layout": variants.get("input_layout", ""),
        "kernel_config": normal_kernel_config(kernel_config),
    }


def _config_from_id(values: dict[str, Any], options: dict[str, Any]) -> RNNConfig:
    return RNNConfig(
        mode=values["mode"], num_layers=int(values["num_layers"]), bidirectional=values["bidirectional"] == "bi",
        input_size=int(values["input_size"]), hidden_size=int(values["hidden_size"]),
        max_len=int(values["max_len"]), batch_size=int(values["batch_size"]), dtype=values["dtype"],
        proj_size=int(values.get("proj_size", 0)), bias="bias" not in values, options=options,
        long_memory="long_memory" in values)


def make_case(config: RNNConfig, seq_lengths: Sequence[int], seed: int, wants: Any = "all",
              heads: str = "all", initial_state: bool = True, tail: int = 0, grad_layout: str = "",
              input_layout: str = "", kernel_config: Any = ()) -> Case:
    """Draw a case's data from its seed in the fixed order documented in this module."""
    check_size_budget(config)
    lengths = validate_lengths(config, seq_lengths)
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"seed {seed!r} is not allowed; seeds are integers in 0..{MAX_SEED}")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    T, B = config.max_len, config.batch_size
    states = (config.num_layers * config.num_directions, B, config.h_size)
    cells = (config.num_layers * config.num_directions, B, config.c_size)
    bound = config.family.param_bound(config)
    params = {k: rng.uniform(-bound, bound, size=shape) for k, shape in param_shapes(config).items()}
    params = config.family.regime_params(config, params)  # fixed shifts: every later draw is unchanged
    x = rng.standard_normal((T, B, config.input_size))
    h0 = rng.standard_normal(states)
    c0 = config.family.initial_cell_state(config, rng.standard_normal(cells)) if config.has_cell_state else None
    dy = rng.standard_normal((T, B, config.num_directions * config.state_size))
    dhy = rng.standard_normal(states)
    dcy = rng.standard_normal(cells) if config.has_cell_state else None

    if heads == "y":
        dhy = np.zeros_like(dhy)
        dcy = None if dcy is None else np.zeros_like(dcy)
    elif heads == "states":
        dy = np.zeros_like(dy)
    elif heads == "last":
        last_step = np.zeros((T, B, 1))
        ran = lengths > 0  # a sequence of length 0 has no last step: its dy is all zero
        last_step[lengths[ran] - 1, np.arange(B)[ran]] = 1.0
        dy = dy * last_step
    if not initial_state:
        h0 = c0 = None
    if grad_layout == "E":  # equal along the last axis, so that a stride of 0 can hand them down
        dy, dhy, dcy = broadcast_heads(dy), broadcast_heads(dhy), broadcast_heads(dcy)

    def rounded(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else round_to_dtype(a, config.dtype)

    return Case(config=config, x=rounded(x), seq_lengths=lengths, h0=rounded(h0), c0=rounded(c0),
                params={k: rounded(v) for k, v in params.items()}, dy=rounded(dy), dhy=rounded(dhy),
                dcy=rounded(dcy), seed=int(seed), wants=wants, heads=heads, tail=tail, grad_layout=grad_layout,
                input_layout=input_layout, kernel_config=kernel_config)


def format_case_id(config: RNNConfig, seq_lengths: Sequence[int], seed: int, wants_group: str = "all",
                   heads: str = "all", initial_state: bool = True, tail: int = 0, grad_layout: str = "",
                   input_layout: str = "", kernel_config: Any = ()) -> str:
    """The case id of the case these values make (``Case.id``), without drawing its data."""
    lengths = ".".join(str(int(v)) for v in seq_lengths)
    suffix = "" if wants_group == "all" else f"-w{wants_group}"
    suffix += "" if heads == "all" else f"-g{heads}"
    suffix += "" if initial_state else "-z"
    suffix += f"-tail{tail}" if tail else ""
    suffix += f"-dy{grad_layout}" if grad_layout else ""
    suffix += f"-x{input_layout}" if input_layout else ""
    suffix += format_kernel_config(normal_kernel_config(kernel_config))
    return f"{config.prefix}-len{lengths}-{config.dtype}-s{seed}{suffix}"


@dataclass(frozen=True)
class CaseRef:
    """What a process that sends cases away keeps of each: its id (the receiver rebuilds the case
    from it), config and wants group, without the arrays (~3 kB a case a large run need not hold)."""

    id: str
    config: RNNConfig
    wants_group: str

    @classmethod
    def of(cls, case: Case) -> "CaseRef":
        return cls(case.id, case.config, case.wants_group)

    @classmethod
    def from_id(cls, case_id: str) -> "CaseRef":
        """The reference of the case ``case_id`` names, checked as ``Case.from_id`` would, no array drawn."""
        spec = parse_case_id(case_id)
        try:
            check_size_budget(spec["config"])
            validate_lengths(spec["config"], spec["seq_lengths"])
        except UsageError as exc:
            raise UsageError(f"case id {case_id!r}: {exc}") from None
        return cls(format_case_id(spec["config"], spec["seq_lengths"], spec["seed"], spec["wants"], spec["heads"],
                                  spec["initial_state"], spec["tail"], spec["grad_layout"], spec["input_layout"],
                                  spec["kernel_config"]), spec["config"], spec["wants"])


def private_copy(case: Case) -> Case:
    """A copy of ``case`` that shares no mutable data with it: every array is copied (the config
    is frozen, the rest immutable), so a target's in-place writes reach nobody else. Much
    cheaper than ``copy.deepcopy``, which the engine would otherwise pay on every target run.
    The copy is what a target is handed, so its head gradients and x come in the case's layouts
    (:func:`gradcheck_rnn.model.layouts.lay_out`): the same values, other strides."""
    copied = copy.copy(case)
    for name, value in vars(case).items():
        if isinstance(value, np.ndarray):
            setattr(copied, name, value.copy())
    copied.params = {key: value.copy() for key, value in case.params.items()}
    if case.grad_layout:
        copied.dy, copied.dhy, copied.dcy = (lay_out(a, case.grad_layout) for a in (case.dy, case.dhy, case.dcy))
    if case.input_layout:
        copied.x = lay_out(case.x, case.input_layout)
    return copied


def with_changes(case: Case, **changes: Any) -> Case:
    """A copy of ``case`` with some fields replaced (used by metamorphic checks and tests)."""
    fields = {f.name: getattr(case, f.name) for f in dataclasses.fields(case) if f.init}
    fields["wants"] = case.wants_group
    fields.update(changes)
    return Case(**fields)


def gradient_names(config: RNNConfig, initial_state: bool = True) -> list[str]:
    """Every gradient a case can request, in report order: x, h0, c0, then parameters."""
    return sorted(wanted_gradients(config, "all", initial_state), key=_gradient_order(config))


def _gradient_order(config: RNNConfig):
    order = {name: i for i, name in enumerate(["x", "h0", "c0", *param_names(config)])}
    return order.__getitem__


def as_mapping(outputs: Outputs) -> Mapping[str, Any]:
    """All tensors of an Outputs by report name: y, hy, cy, then gradients."""
    named = {"y": outputs.y, "hy": outputs.hy}
    if outputs.cy is not None:
        named["cy"] = outputs.cy
    named.update(outputs.grads)
    return named


def case_from_options(mode: str, layers: int, bidirectional: bool, input_size: int, hidden_size: int,
                      lengths: str, max_len: int | None, dtype: str, seed: int, wants: str = "all",
                      heads: str = "all", initial_state: bool = True, options: Mapping[str, Any] | None = None) -> Case:
    """The case that ``gradcheck-rnn check``'s flags describe: ``lengths`` is ``"7,4,1"`` (batch
    size = their count, T = their max unless ``max_len``); ``options`` the family's options
    (``--family-option``), where a required one left out takes its example value (gla's
    ``key_width=2``), so that ``check --mode gla`` builds a case."""
    try:
        seq = [int(v) for v in lengths.replace(".", ",").split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--lengths {lengths!r}: give comma-separated integers, e.g. 7,4,1") from None
    if not seq:
        raise UsageError(f"--lengths {lengths!r} is not allowed; give at least one sequence length, such as 7,4,1")
    given = dict(options or {})
    for option in family(mode).options:
        if option.default is None and option.name not in given:
            if option.example is None:
                raise UsageError(f"{mode} needs option {option.name} ({option.describe}); give it with "
                                 f"--family-option {option.name}=VALUE")
            given[option.name] = option.example
    config = RNNConfig(mode, layers, bidirectional, input_size, hidden_size, max_len or max(seq), len(seq), dtype,
                       options=given)
    return make_case(config, seq, seed, wants=wants, heads=heads, initial_state=initial_state)
