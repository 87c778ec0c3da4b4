"""Sweep profiles (TOML in configs/) and the deterministic drawing of cases from a sweep seed.

Case i of a sweep with seed S draws from its own PCG64 generator seeded with
``SeedSequence([S, i])``: its config, its length vector, its variants and its data seed, in
that order. The case itself is then rebuilt from its id alone, so a sweep's cases and the
cases ``gradcheck-rnn repro <id>`` builds are the same objects bit for bit.

Length vectors mix uniform random lengths with the shapes that broke real kernels, drawn on
purpose: all lengths = T, all = 1, one full and the rest short, unsorted, strictly
descending; B = 1 and T = 1 configs (the smallest B and T a profile draws) are drawn on purpose too.

The API surface beyond the four modes — ``proj`` (the probability that an LSTM with H >= 2
gets a projection, P uniform in 1..H-1), ``bias`` (the probability that biases are present) and
``zero_length`` (the probability that some sequences get length 0: usually one, sometimes
several or all) — is drawn from a second generator, ``SeedSequence([S, i, 1])``. So turning
these switches on leaves every other draw of case i as it was: the same mode, shapes, lengths,
variants and data seed, now with a projection, without biases or with empty sequences. A
family's own options (s6's state size, sLSTM's heads, …) come from a third generator,
``SeedSequence([S, i, 2])``, after H (heads divide it), and a variant a family does not support
(two directions for s6) is never drawn for it. A run narrowed to some values of a family's options
(``--family-option heads=1``: gradcheck_rnn/model/narrowing.py) replaces a value drawn outside them by one
inside, from that third generator after the family's own draw: the rest of the case is unchanged.
Where a kept option must divide H and the drawn H has no kept divisor, that family's H moves to
the nearest size in the range that has one; the variants a kept option excludes for a family
(``Profile.held_variants``) are held at their other value after their own generator's draw.

The layouts of :mod:`gradcheck_rnn.model.layouts` (``noncontiguous_grads``: the probability that the
head gradients are handed as a transposed, strided or expanded view, one of the three uniformly;
``strided_input``: that x is handed strided) come from ``SeedSequence([S, i, 6])``, and a run
narrowed to some kernel configurations (``--kernel-config chunk=4,8``) names one of them in every
case, drawn from ``SeedSequence([S, i, 7])``; neither shifts any other draw.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .case import (DTYPES, HEADS, MODES, WANTS_GROUPS, Case, CaseRef, RNNConfig, check_size_budget, format_case_id,
                   make_case)
from ..errors import UsageError, unknown_name
from .rnn_config import DEFAULT_LENGTH_PATTERNS, LENGTH_PATTERNS
from .layouts import GRAD_LAYOUTS, INPUT_LAYOUTS, draw_kernel_config
from ..families import family, modes as family_modes
from .tolerances import Tolerances

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# configs/ at the top level is the profiles' home; gradcheck_rnn/configs links to it and the wheel
# carries its files as package data, so an installed package finds them here too.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SEED_LIMIT = 2**31  # data seeds stay short in case ids


def profile_names() -> list[str]:
    """The names of the shipped profiles (``--config NAME``), the one list every message gives."""
    return [path.stem for path in sorted(CONFIG_DIR.glob("*.toml"))]


@dataclass
class Profile:
    """What a sweep draws and how it judges, read from a TOML file."""

    name: str
    sha256: str = ""  # of the file's bytes: the same name with other content is another profile
    cases: int = 40
    seed: int = 0
    modes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MODES, 1.0))
    layers: tuple[int, int] = (1, 3)
    bidirectional: float = 0.5
    input_size: tuple[int, int] = (1, 6)
    hidden_size: tuple[int, int] = (1, 6)
    max_len: tuple[int, int] = (1, 8)
    batch_size: tuple[int, int] = (1, 4)
    edge_shapes: float = 0.15
    dtypes: dict[str, float] = field(default_factory=lambda: {"f64": 1.0, "f32": 1.0})
    lengths: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DEFAULT_LENGTH_PATTERNS, 1.0))
    # the chunk sizes whose edges the ``chunk_edges`` length pattern draws (c−1, c, c+1, k·c+1)
    chunk_sizes: tuple[int, ...] = (4,)
    wants: dict[str, float] = field(default_factory=lambda: {"all": 1.0})
    heads: dict[str, float] = field(default_factory=lambda: {"all": 1.0})
    initial_state: float = 1.0
    proj: float = 0.0
    bias: float = 1.0
    zero_length: float = 0.0
    long_memory: float = 0.0
    strong_decay: float = 0.0
    packed_tail: float = 0.0
    # layouts (gradcheck_rnn/model/layouts.py): head gradients as a non-contiguous view (-dy<T|S|E>), x strided (-xS)
    noncontiguous_grads: float = 0.0
    strided_input: float = 0.0
    # the kernel configurations a narrowed run keeps (--kernel-config; set by narrowing.py, not by a
    # file): name -> the values one of which every case names (-kc.<name>.<value>)
    kernel_config: Mapping[str, tuple] = field(default_factory=dict)
    # [checks] strict_contracts: out-of-contract rows fail the run (gradcheck_rnn/targets/contracts.py)
    strict_contracts: bool = False
    # the families' options a narrowed run keeps (set by gradcheck_rnn/model/narrowing.py, not by a file):
    # option name -> True/False (a flag) or (min, max) (an integer)
    family_options: Mapping[str, Any] = field(default_factory=dict)
    # the variants a narrowed run holds per family because a kept option excludes the others (narrowing.py):
    # family token -> {"bias": True, "long_memory": False}
    held_variants: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    tolerances: Mapping[str, Any] = field(default_factory=dict)
    # [checks] as the file gives it (check name -> on): the checks' registry reads it
    # (gradcheck_rnn/judging/checks: enabled), which knows the checks; one not named is on
    checks: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the file it was read from, for messages

    def tolerance_table(self, rtol: float | None = None, atol: float | None = None) -> Tolerances:
        return Tolerances.from_profile(self.tolerances, rtol=rtol, atol=atol)


def resolve_profile_path(config: str | Path | None) -> Path:
    """``None`` -> configs/ci.toml; a bare name like ``nightly`` -> configs/nightly.toml; else a path."""
    if config is None:
        config = "ci"
    path = Path(config)
    if not path.suffix and not path.is_file():  # a folder named like a profile must not shadow it
        path = CONFIG_DIR / f"{config}.toml"
    if not path.is_file():
        raise unknown_name("profile", str(config), profile_names(),
                           "give a TOML file or a name in configs/")
    return path


def _weights(section: str, value: Any, allowed: tuple[str, ...]) -> dict[str, float]:
    if isinstance(value, list):
        value = dict.fromkeys(value, 1.0)
    if not isinstance(value, Mapping) or not value:
        raise UsageError(f"{section} must be a list of names or a table of name = weight; got {value!r}")
    for name, weight in value.items():
        if name not in allowed:
            raise UsageError(f"{section}: {name!r} is not allowed; allowed: {', '.join(allowed)}")
        if not isinstance(weight, (int, float)) or weight < 0:
            raise UsageError(f"{section}.{name} = {weight!r} is not allowed; weights are numbers >= 0")
    if sum(value.values()) <= 0:
        raise UsageError(f"{section}: at least one weight must be > 0")
    return {k: float(v) for k, v in value.items()}


def _range(section: str, value: Any, low: int) -> tuple[int, int]:
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, int) for v in value)
            or not low <= value[0] <= value[1]):
        raise UsageError(f"{section} = {value!r} is not allowed; give [min, max] integers with {low} <= min <= max")
    return value[0], value[1]


def _probability(section: str, value: Any) -> float:
    if not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"{section} = {value!r} is not allowed; give a probability in 0..1")
    return float(value)


def _chunk_sizes(section: str, value: Any) -> tuple[int, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 2 for v in value)):
        raise UsageError(f"{section} = {value!r} is not allowed; give a list of chunk sizes, integers >= 2")
    return tuple(value)


# The keys of a profile's [draw] table, each with its validator (section name, value) -> the Profile value.
_DRAW = {
    "modes": lambda k, v: _weights(k, v, family_modes()),
    "dtypes": lambda k, v: _weights(k, v, DTYPES),
    "lengths": lambda k, v: _weights(k, v, LENGTH_PATTERNS),
    "wants": lambda k, v: _weights(k, v, WANTS_GROUPS),
    "heads": lambda k, v: _weights(k, v, HEADS),
    "layers": lambda k, v: _range(k, v, 1),
    "input_size": lambda k, v: _range(k, v, 1),
    "hidden_size": lambda k, v: _range(k, v, 1),
    "max_len": lambda k, v: _range(k, v, 1),
    "batch_size": lambda k, v: _range(k, v, 1),
    "bidirectional": _probability,
    "edge_shapes": _probability,
    "initial_state": _probability,
    "proj": _probability,
    "bias": _probability,
    "zero_length": _probability,
    "long_memory": _probability,
    "strong_decay": _probability,
    "packed_tail": _probability,
    "noncontiguous_grads": _probability,
    "strided_input": _probability,
    "chunk_sizes": _chunk_sizes,
}
DRAW_SETTINGS = tuple(_DRAW)  # every draw setting; each has a narrowing flag or a reason not to (model/narrowing.py)


def load_profile(config: str | Path | None = None) -> Profile:
    """Read and validate a profile; every problem is one UsageError naming the key and value."""
    path = resolve_profile_path(config)
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"profile {str(path)!r} is not valid TOML: {exc}") from None
    known = {"sweep", "draw", "tolerances", "checks"}
    if set(data) - known:
        raise UsageError(f"profile {str(path)!r}: section {sorted(set(data) - known)[0]!r} is not allowed; "
                         f"sections are {', '.join(sorted(known))}")
    sweep, draw = data.get("sweep", {}), data.get("draw", {})
    profile = Profile(name=path.stem, tolerances=data.get("tolerances", {}), sha256=hashlib.sha256(raw).hexdigest(),
                      source=str(path))
    for key, value in draw.items():
        if key not in _DRAW:
            raise UsageError(f"draw.{key} is not allowed; keys are {', '.join(_DRAW)}")
        setattr(profile, key, _DRAW[key](f"draw.{key}", value))
    for key, value in sweep.items():
        low = {"cases": 1, "seed": 0}.get(key)
        if low is None:
            raise UsageError(f"sweep.{key} is not allowed; [sweep] takes cases (an integer >= 1) and seed "
                             f"(an integer >= 0)")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UsageError(f"sweep.{key} = {value!r} is not allowed; it must be an integer >= {low}")
        setattr(profile, key, value)
    for key, value in data.get("checks", {}).items():
        if key != "strict_contracts":
            profile.checks[key] = value
        elif isinstance(value, bool):
            profile.strict_contracts = value
        else:
            raise UsageError(f"checks.strict_contracts = {value!r} is not allowed; it is true or false")
    profile.tolerance_table()  # validate now, before anything runs
    return profile


def _choice(rng: np.random.Generator, weights: Mapping[str, float]) -> str:
    names = list(weights)
    p = np.array([weights[n] for n in names])
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def _between(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


def chunk_edge_lengths(chunk_sizes: Sequence[int], T: int) -> list[int]:
    """The lengths in 1..T at the edges of each chunk size c: c−1, c, c+1 and k·c+1 (k ≥ 2), where
    a chunkwise kernel's hand-off between chunks, or a last chunk of one step, goes wrong."""
    edges = {n for c in chunk_sizes for n in (c - 1, c, c + 1, *range(2 * c + 1, T + 1, c))}
    return sorted(n for n in edges if 1 <= n <= T)


def draw_lengths(rng: np.random.Generator, pattern: str, T: int, B: int, chunk_sizes: Sequence[int] = (4,)) -> list[int]:
    """A length vector of one of the patterns that broke real kernels (``chunk_edges``: every
    length at a chunk edge of :func:`chunk_edge_lengths`, or random where T has none)."""
    edges = chunk_edge_lengths(chunk_sizes, T) if pattern == "chunk_edges" else []
    if edges:
        return [int(v) for v in rng.choice(edges, size=B)]
    if pattern == "all_full":
        return [T] * B
    if pattern == "all_one":
        return [1] * B
    if pattern == "one_full_rest_short":
        lengths = [int(v) for v in rng.integers(1, max(T // 2, 1) + 1, size=B)]
        lengths[int(rng.integers(B))] = T
        return lengths
    if pattern == "descending" and B <= T:
        return sorted((int(v) for v in rng.choice(np.arange(1, T + 1), size=B, replace=False)), reverse=True)
    lengths = [int(v) for v in rng.integers(1, T + 1, size=B)]
    if pattern == "unsorted" and B >= 2 and len(set(lengths)) > 1 and lengths == sorted(lengths, reverse=True):
        lengths.reverse()  # ascending: guaranteed not in the descending order packers expect
    return lengths


def draw_case(profile: Profile, sweep_seed: int, index: int) -> Case:
    """Case ``index`` of the sweep with seed ``sweep_seed``: deterministic, independent of other cases."""
    config, lengths, seed, variants = _draw_description(profile, sweep_seed, index)
    return make_case(config, lengths, seed, **variants)


def draw_case_ref(profile: Profile, sweep_seed: int, index: int) -> CaseRef:
    """What :func:`draw_case` names, without its arrays: a process that sends cases away keeps this."""
    config, lengths, seed, variants = _draw_description(profile, sweep_seed, index)
    check_size_budget(config)  # as make_case would: refused here, not in a worker
    wants = variants.pop("wants")
    return CaseRef(format_case_id(config, lengths, seed, wants, **variants), config, wants)


def _draw_description(profile: Profile, sweep_seed: int,
                      index: int) -> tuple[RNNConfig, list[int], int, dict[str, Any]]:
    """Config, lengths, data seed and variants (the other keywords of :func:`make_case`: wants
    group, heads, initial-state switch, packed tail, layouts, kernel configuration) of case ``index``."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index])))
    mode = _choice(rng, profile.modes)
    T, B = _between(rng, profile.max_len), _between(rng, profile.batch_size)
    if rng.random() < profile.edge_shapes:  # the smallest B or T the profile (or --max-len) draws, 1 as a rule
        if rng.random() < 0.5:
            B = profile.batch_size[0]
        else:
            T = profile.max_len[0]
    layers = _between(rng, profile.layers)
    # drawn for every family, so a family that runs forward only shifts no other draw
    bidirectional = bool(rng.random() < profile.bidirectional) and family(mode).bidirectional
    I, H = _between(rng, profile.input_size), _between(rng, profile.hidden_size)
    H = _divisible_size(family(mode), profile.family_options, "hidden_size", H, profile.hidden_size)
    dtype = _choice(rng, profile.dtypes)
    options_rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 2])))
    options = _kept_options(family(mode), family(mode).draw_options(options_rng, H), profile.family_options,
                            options_rng, {"input_size": I, "hidden_size": H, "max_len": T, "batch_size": B,
                                                          "num_layers": layers})
    config = RNNConfig(mode=mode, num_layers=layers, bidirectional=bidirectional, input_size=I, hidden_size=H,
                       max_len=T, batch_size=B, dtype=dtype, options=options)
    lengths = draw_lengths(rng, _choice(rng, profile.lengths), T, B, profile.chunk_sizes)
    wants, heads = _choice(rng, profile.wants), _choice(rng, profile.heads)
    initial_state = bool(rng.random() < profile.initial_state)
    seed = int(rng.integers(SEED_LIMIT))
    config, lengths = _draw_surface(profile, sweep_seed, index, config, lengths)
    config = _draw_strong_decay(profile, sweep_seed, index, _draw_long_memory(profile, sweep_seed, index, config))
    variants = {"wants": wants, "heads": heads, "initial_state": initial_state,
                "tail": _draw_tail(profile, sweep_seed, index), **_draw_layouts(profile, sweep_seed, index)}
    return config, lengths, seed, variants


def _kept_options(cell: Any, drawn: Mapping[str, Any], kept: Mapping[str, Any], rng: np.random.Generator,
                  sizes: Mapping[str, int]) -> dict[str, Any]:
    """The family's ``drawn`` options within a narrowed run's ``kept`` values: a flag set to its
    kept value, an integer outside its kept range replaced by a value in it (one that divides its
    ``divides`` size, which the narrowing checked exists), drawn from ``rng``."""
    options = dict(drawn)
    for option in cell.options:
        if option.name not in kept:
            continue
        value = kept[option.name]
        if option.is_flag:
            options[option.name] = value
            continue
        allowed = [v for v in range(value[0], value[1] + 1) if not option.divides or sizes[option.divides] % v == 0]
        if options.get(option.name, option.default) not in allowed:
            options[option.name] = allowed[int(rng.integers(len(allowed)))]
    return options


def _divisible_size(cell: Any, kept: Mapping[str, Any], name: str, size: int, bounds: tuple[int, int]) -> int:
    """``size``, the drawn value of config field ``name``, or, where a kept integer option of the
    family must divide it and none of its kept values does, the nearest size in ``bounds`` that
    one divides (the larger of two as near): a run narrowed to ``heads=2`` draws no odd H for the
    families with heads, and the same H as before for the others. The narrowing checked that
    ``bounds`` holds such a size."""
    for option in cell.options:
        if option.divides != name or option.name not in kept or option.is_flag:
            continue
        low, high = kept[option.name]

        def fits(n: int) -> bool:
            return any(n % v == 0 for v in range(low, high + 1))

        if not fits(size):
            size = min((n for n in range(bounds[0], bounds[1] + 1) if fits(n)), key=lambda n: (abs(n - size), -n))
    return size


def _draw_surface(profile: Profile, sweep_seed: int, index: int, config: RNNConfig,
                  lengths: list[int]) -> tuple[RNNConfig, list[int]]:
    """Projection, bias and zero-length sequences of case ``index``, from their own generator so
    that the rest of the case is drawn as if these switches were off."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 1])))
    proj_size = 0
    if rng.random() < profile.proj and config.family.projections and config.hidden_size >= 2:
        proj_size = int(rng.integers(1, config.hidden_size))
    held = profile.held_variants.get(config.mode, {})
    # a family without biases (a user's minGRU) is never drawn -nobias: the same case twice
    bias = bool(rng.random() < profile.bias)
    bias = held.get("bias", bias) or not config.family.has_biases(config)
    if rng.random() < profile.zero_length:
        B = config.batch_size
        count = 1 if rng.random() < 0.75 else int(rng.integers(1, B + 1))
        lengths = list(lengths)
        for b in rng.choice(B, size=count, replace=False):
            lengths[int(b)] = 0
    return dataclasses.replace(config, proj_size=proj_size, bias=bias), lengths


def _draw_long_memory(profile: Profile, sweep_seed: int, index: int, config: RNNConfig) -> RNNConfig:
    """The long-memory regime (``-longmem``) for a share ``profile.long_memory`` of the configs
    whose family has one, from a generator of its own: a profile without it draws what it drew."""
    if not profile.long_memory or not config.family.keeps_memory(config):
        return config
    held = profile.held_variants.get(config.mode, {})
    if "long_memory" in held:  # a kept option excludes it (narrowing.py)
        return dataclasses.replace(config, long_memory=held["long_memory"])
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 3])))
    return dataclasses.replace(config, long_memory=bool(rng.random() < profile.long_memory))


def _draw_strong_decay(profile: Profile, sweep_seed: int, index: int, config: RNNConfig) -> RNNConfig:
    """``-strongdecay`` for a share ``profile.strong_decay`` of the configs whose family has that
    option and that can take it (a bias, no long memory), from a generator of its own."""
    if not profile.strong_decay or "strong_decay" not in config.family.option_values(config):
        return config
    if "strong_decay" in profile.family_options:  # a narrowed run keeps it where it asked (narrowing.py)
        return config
    if config.long_memory or not config.bias:
        return config
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 4])))
    if rng.random() >= profile.strong_decay:
        return config
    return dataclasses.replace(config, options={**dict(config.options), "strong_decay": True})


def _draw_tail(profile: Profile, sweep_seed: int, index: int) -> int:
    """A packed tail of 1..4 rows (``-tail<n>``) for a share ``profile.packed_tail`` of the cases,
    from a generator of its own."""
    if not profile.packed_tail:
        return 0
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 5])))
    return int(rng.integers(1, 5)) if rng.random() < profile.packed_tail else 0


def _draw_layouts(profile: Profile, sweep_seed: int, index: int) -> dict[str, Any]:
    """The layouts of case ``index`` (``-dy<T|S|E>`` for a share ``profile.noncontiguous_grads``,
    ``-xS`` for ``profile.strided_input``) and, in a run narrowed to kernel configurations, one of
    them, each from a generator of its own: a profile without them draws what it drew."""
    drawn: dict[str, Any] = {}
    if profile.noncontiguous_grads or profile.strided_input:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 6])))
        if rng.random() < profile.noncontiguous_grads:
            drawn["grad_layout"] = GRAD_LAYOUTS[int(rng.integers(len(GRAD_LAYOUTS)))]
        if rng.random() < profile.strided_input:
            drawn["input_layout"] = INPUT_LAYOUTS[int(rng.integers(len(INPUT_LAYOUTS)))]
    if profile.kernel_config:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([sweep_seed, index, 7])))
        drawn["kernel_config"] = draw_kernel_config(rng, profile.kernel_config, ())
    return drawn


def draw_cases(profile: Profile, sweep_seed: int | None = None, count: int | None = None) -> Iterator[Case]:
    """The cases of a sweep, in order."""
    seed = profile.seed if sweep_seed is None else sweep_seed
    for index in range(profile.cases if count is None else count):
        yield draw_case(profile, seed, index)
