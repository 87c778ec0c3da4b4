"""Narrowing a profile's draw to what one target takes: modes, layers, directions, dtypes,
projections, biases, initial states, head gradients, input and hidden sizes, length patterns,
zero-length sequences and the cell families' own options (sLSTM's heads and ``-expf``, s6's
``-nogate``, ...). One :class:`Narrowing` value holds all of it, whether the command line, the
API or the pytest fixture asked; :data:`KNOBS` is the one table of its flags and keywords.

A plugin target that supports a part of the API surface (an LSTM without projections, a kernel
that cannot take length 0) would otherwise be skipped on most cases of a sweep; a profile file
per target was the only way to say so. A :class:`Narrowing` is the command line's
(``sweep --mode lstm --no-projections --hidden-size 2..4``), ``gr.sweep``'s and the pytest
fixture's (``modes=["lstm"], projections=False, hidden_size="2..4"``) way: it
*intersects* the profile — a switch on means every case has it, off means none, a list keeps the
profile's weights of the names given, a range is cut to the profile's — so a narrowed run never
draws what the profile would not. A narrowing that leaves nothing to draw is a UsageError naming
the conflicting values. A switch that only some families can honour (projections; two directions)
keeps the modes whose family can, and is refused when none is left.

A family's own options are narrowed by name, from the family's :class:`~gradcheck_rnn.families.base.Option`
objects, never from mode names (``--family-option gated=on``, ``--family-option heads=1``): a flag
option is set on every case of a family that has it, an integer option is kept in a range (a value
drawn outside it is replaced by one inside, from the options' own generator). Families without
the option draw as before; an option no drawn family has is refused naming the flag. A narrowing
narrows what it needs to and no more (issue 48): a size a kept option cannot take (sLSTM's heads
divide H) is moved to one it can for that family's cases, and a variant the family refuses
beside a kept option (strong decay beside ``-nobias`` or ``-longmem``) is not drawn for that
family (the profile's ``held_variants``); only where no size is left, or a flag of the run asks
for the excluded variant, is it refused, in one sentence naming the flags that work.

A narrowed run draws other cases than the profile's own (a switch of the API surface — projections,
bias, zero lengths — leaves the rest of each case as it was: gradcheck_rnn/model/profiles.py), so the
run spec records the narrowing: shards and merges rebuild the same cases from it, and
``--last-failed`` from the case ids. An empty narrowing is the profile itself, bit for bit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .rnn_config import DTYPES, HEADS, LENGTH_PATTERNS, WANTS_GROUPS
from ..errors import UsageError
from ..families import BUILT_IN_MODES


@dataclass(frozen=True)
class Knob:
    """One way to narrow the draw, written once: its :class:`Narrowing` field (also the keyword of
    ``gr.sweep`` and of the pytest fixture), its flag and what it draws. The click options
    (gradcheck_rnn/cli/options.py), :meth:`Narrowing.flags` and every refusal that names a flag
    are made from this table, so a knob added here is on all three surfaces at once."""

    field: str  # the Narrowing field and the API keyword
    flag: str  # the long flag without "--": "hidden-size"
    kind: str  # "modes", "names" (repeatable), "count", "switch", "range", "options" or "configs" (NAME=VALUE)
    help: str
    choices: tuple[str, ...] = ()  # the names a "names" knob takes
    negative: str = ""  # a switch's "off" flag: "no-projections", "unidirectional"
    pair: str = ""  # how a refusal names a switch whose "off" flag is not --no-<flag>
    draws: str = ""  # the profile's draw setting it narrows, where not named as the field ("proj")

    @property
    def setting(self) -> str:
        """The key of a profile's ``[draw]`` table that this knob narrows: ``proj`` for --projections."""
        return self.draws or self.field

    @property
    def usage(self) -> str:
        """The flag as a refusal names it: ``--hidden-size``, ``--[no-]bias``, ``--[uni|bi]directional``."""
        if self.kind != "switch":
            return f"--{self.flag}"
        return self.pair or f"--[no-]{self.flag}"

    def read(self, value: Any) -> Any:
        """``value`` (an API keyword or a command-line value) as the Narrowing field holds it;
        UsageError in one sentence naming the keyword when it is not allowed."""
        if self.kind == "switch":
            return _switch(value, self.field)
        if self.kind == "range":
            return parse_range(value, self.field)
        if self.kind == "options":
            return parse_family_options(value)
        if self.kind == "configs":
            return parse_kernel_configs(value)
        if self.kind == "count":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UsageError(f"{self.field}={value!r} is not allowed; give a whole number >= 1 or None "
                                 f"(the profile's draw)")
            return value
        if self.kind == "modes":
            from ..families import modes

            return _names(value, "mode", modes())
        return _names(value, self.flag.replace("-", " "), self.choices)

    def shown(self, value: Any) -> list[str]:
        """The flags that give ``value`` of this knob (none for the profile's own draw)."""
        if value is None or value == ():
            return []
        if self.kind == "switch":
            return [f"--{self.flag if value else self.negative}"]
        if self.kind == "range":
            return [f"--{self.flag} {value[0]}" if value[0] == value[1] else f"--{self.flag} {value[0]}..{value[1]}"]
        if self.kind == "count":
            return [f"--{self.flag} {value}"]
        if self.kind == "options":
            return [f"--{self.flag} {_option_text(name, option)}" for name, option in value]
        if self.kind == "configs":
            return [f"--{self.flag} {name}={','.join(map(str, values))}" for name, values in value]
        return [f"--{self.flag} {name}" for name in value]


# Every knob, in the order the flags are shown (the header line, report.md) and listed in --help.
# The first four narrow the shape of a config (what `mutants` takes); the rest what a target's API takes.
KNOBS = (
    Knob("modes", "mode", "modes", f"Draw only these modes (repeatable; default: the profile's): "
                                   f"{', '.join(BUILT_IN_MODES)}, or a user family's token."),
    Knob("layers", "layers", "count", "Draw only this many layers."),
    Knob("bidirectional", "bidirectional", "switch", "Draw only bidirectional or only unidirectional configs.",
         negative="unidirectional", pair="--[uni|bi]directional"),
    Knob("dtypes", "dtype", "names", "Draw only these dtypes (repeatable; default: the profile's).", DTYPES),
    Knob("projections", "projections", "switch", "Draw only LSTMs with a projection (-P), or none, e.g. "
                                                 "--no-projections for a kernel without proj_size.",
         negative="no-projections", draws="proj"),
    Knob("bias", "bias", "switch", "Draw only cases with biases, or only without (-nobias), e.g. --no-bias for "
                                   "bias=False layers.", negative="no-bias"),
    Knob("initial_state", "initial-state", "switch", "Draw only cases with h0/c0 given, or only without (-z), "
                                                     "e.g. --initial-state.", negative="no-initial-state"),
    Knob("zero_length", "zero-length", "switch", "Draw only cases with a length-0 sequence, or none, e.g. "
                                                 "--no-zero-length.", negative="no-zero-length"),
    Knob("long_memory", "long-memory", "switch", "Draw the long-memory regime (-longmem) on every case that has "
                                                 "one (a gated family with biases), or on none, e.g. "
                                                 "--no-long-memory.",
         negative="no-long-memory"),
    Knob("packed_tail", "packed-tail", "switch", "Draw a packed tail (-tail<n>) on every case, or on none, e.g. "
                                                 "--no-packed-tail for a kernel without cu_seqlens.",
         negative="no-packed-tail"),
    Knob("wants", "wants", "names", "Draw only these gradient requests (repeatable), e.g. --wants all --wants "
                                    "inputs.", WANTS_GROUPS),
    Knob("heads", "heads", "names", "Draw only these head-gradient variants (repeatable), e.g. --heads all "
                                    "--heads y.", HEADS),
    Knob("lengths", "length-pattern", "names", "Draw only these sequence-length patterns (repeatable), e.g. "
                                               "--length-pattern all_full.", LENGTH_PATTERNS),
    Knob("input_size", "input-size", "range", "Draw input sizes I only in this range (or one size), e.g. "
                                              "--input-size 2..4."),
    Knob("hidden_size", "hidden-size", "range", "Draw hidden sizes H only in this range (or one size), e.g. "
                                                "--hidden-size 4."),
    Knob("max_len", "max-len", "range", "Draw padded lengths T only in this range (or one length), e.g. "
                                        "--max-len 1..4."),
    Knob("batch_size", "batch-size", "range", "Draw batch sizes B only in this range (or one size), e.g. "
                                              "--batch-size 1."),
    Knob("family_options", "family-option", "options",
         "Draw a cell family's own option only at these values (repeatable): a flag on or off, an integer one "
         "size or MIN..MAX, e.g. --family-option gated=on (no -nogate), --family-option heads=1 (no -NH<k>), "
         "--family-option exp_forget=off (no -expf). Families without the option draw as before; the option "
         "names are in docs/concepts/families.md; --family-option strong_decay=on or off is the flag of a "
         "profile's draw.strong_decay.", draws="strong_decay"),
    Knob("kernel_config", "kernel-config", "configs",
         "Run the targets that declare kernel configurations only under these values (repeatable): "
         "NAME=VALUE or NAME=V1,V2 (one drawn per case), e.g. --kernel-config chunk=8. Every case names its "
         "value (-kc.<name>.<value>); a target without that configuration name ignores it, one that does not "
         "offer the value declines the case (docs/concepts/checks.md, \"Kernel configurations\")."),
)
KNOB = {knob.field: knob for knob in KNOBS}
SHAPE_KNOBS = KNOBS[:4]  # --mode, --layers, --[uni|bi]directional, --dtype

# The draw settings of a profile that no knob narrows, and why: the size knobs draw the edge shapes
# alone (--batch-size 1, --max-len 1), and a kernel's chunk sizes are the profile's to choose.
# The layouts need none: a target that cannot take a non-contiguous view declines it (supports_case).
NOT_NARROWED = ("edge_shapes", "chunk_sizes", "noncontiguous_grads", "strided_input")
# The switches: what "on" means in a sentence (each sets its draw setting, a probability, to 1 or 0).
SWITCHES = {"projections": "a projection", "bias": "biases", "initial_state": "an initial state",
            "zero_length": "a zero-length sequence", "long_memory": "long memory (-longmem)",
            "packed_tail": "a packed tail (-tail<n>)"}
_RANGE = re.compile(r"^\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?$")
_FLAG_VALUES = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def parse_range(value: Any, name: str) -> tuple[int, int] | None:
    """``3`` / ``"3"`` -> (3, 3); ``"2..5"`` / ``(2, 5)`` -> (2, 5); None stays None. UsageError
    naming ``name`` for anything else (min > max, below 1, not integers)."""
    if value is None:
        return None
    bounds: Any = value
    if isinstance(value, str):
        match = _RANGE.match(value)
        bounds = None if match is None else (int(match.group(1)), int(match.group(2) or match.group(1)))
    elif isinstance(value, int) and not isinstance(value, bool):
        bounds = (value, value)
    if (not isinstance(bounds, (tuple, list)) or len(bounds) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds)
            or not 1 <= bounds[0] <= bounds[1]):
        raise UsageError(f"{name} {value!r} is not allowed; give a size or a range MIN..MAX with 1 <= MIN <= MAX, "
                         f"e.g. 4 or 2..5")
    return int(bounds[0]), int(bounds[1])


def _names(value: Iterable[str] | str | None, name: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    chosen = [value] if isinstance(value, str) else list(value or ())
    unknown = [v for v in chosen if v not in allowed]
    if unknown:
        raise UsageError(f"{name} {unknown[0]!r} is not allowed; allowed: {', '.join(allowed)}")
    return tuple(dict.fromkeys(chosen))


def parse_family_options(given: Mapping[str, Any] | Iterable[str] | None) -> tuple[tuple[str, Any], ...]:
    """``{"gated": True, "heads": (1, 2)}`` or ``["gated=on", "heads=1..2"]`` as sorted (name,
    value) pairs: a flag's value a bool, an integer option's a (min, max) range."""
    pairs: list[tuple[str, Any]] = []
    if isinstance(given, str):
        given = [given]
    items = given.items() if isinstance(given, Mapping) else (str(t).partition("=")[::2] for t in given or ())
    for name, value in items:
        text = f"{name}={value}" if value not in ("", None) else str(name)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name) or value in ("", None):
            raise UsageError(f"family option {text!r} is not allowed; give NAME=VALUE, e.g. gated=on or heads=1..2")
        if isinstance(value, str) and value.strip().lower() in _FLAG_VALUES:
            value = _FLAG_VALUES[value.strip().lower()]
        elif not isinstance(value, bool):
            value = parse_range(value, f"family option {name}")
        pairs.append((name, value))
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise UsageError(f"family option {next(n for n in names if names.count(n) > 1)!r} is given twice; give it once")
    return tuple(sorted(pairs))


def parse_kernel_configs(given: Mapping[str, Any] | Iterable[str] | None) -> tuple[tuple[str, tuple], ...]:
    """``{"chunk": (4, 8)}`` or ``["chunk=4,8"]`` as sorted (name, values) pairs, each value as a
    case id writes it (:mod:`gradcheck_rnn.model.layouts`); UsageError in one sentence otherwise."""
    from .layouts import normal_kernel_config

    if isinstance(given, str):
        given = [given]
    items = given.items() if isinstance(given, Mapping) else (str(t).partition("=")[::2] for t in given or ())
    pairs: list[tuple[str, tuple]] = []
    for name, values in items:
        listed = [v.strip() for v in values.split(",")] if isinstance(values, str) else \
            list(values) if isinstance(values, (list, tuple)) else [values]
        if not name or not listed or any(v in ("", None) for v in listed):
            given_text = f"{name}={values}" if values not in ("", None) else str(name)
            raise UsageError(f"--kernel-config {given_text} is not allowed; give NAME=VALUE or NAME=V1,V2, "
                             f"e.g. chunk=8")
        try:
            kept = tuple(dict.fromkeys(normal_kernel_config([(name, v)])[0][1] for v in listed))
        except UsageError as exc:
            raise UsageError(f"--kernel-config {name}={values}: {exc}") from None
        pairs.append((str(name), kept))
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise UsageError(f"--kernel-config {next(n for n in names if names.count(n) > 1)} is given twice; "
                         f"give its values once, comma-separated")
    return tuple(sorted(pairs))


def _option_text(name: str, value: Any) -> str:
    """``gated=on``, ``heads=2``, ``heads=1..2``: how the command line writes a family option."""
    if isinstance(value, bool):
        return f"{name}={'on' if value else 'off'}"
    return f"{name}={value[0]}" if value[0] == value[1] else f"{name}={value[0]}..{value[1]}"


def modes_able(profile: Any, capability: str, flag: str, why: Any) -> dict[str, float]:
    """The profile's drawn modes whose family has ``capability`` (a :class:`Family` attribute:
    ``projections``, ``bidirectional``), with their weights; UsageError naming ``flag`` when none
    has it, ``why(families without it)`` saying why."""
    from ..families import family

    drawn = [m for m, w in profile.modes.items() if w > 0]
    kept = {m: profile.modes[m] for m in drawn if getattr(family(m), capability)}
    if not kept:
        raise UsageError(f"{flag} leaves nothing to draw: {why(drawn)}, and profile {profile.name} draws "
                         f"{', '.join(drawn)}")
    return kept


def _switch(value: Any, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"{name}={value!r} is not allowed; give True, False or None (the profile's draw)")
    return value


@dataclass(frozen=True)
class Narrowing:
    """What a run narrows the profile's draw to (one field per :data:`KNOBS` entry, in its order);
    every field left at its default keeps the profile's."""

    modes: tuple[str, ...] = ()  # the modes drawn, each weighted 1
    layers: int | None = None  # every case has this many layers
    bidirectional: bool | None = None  # True: every case runs both ways (the modes that can); False: none
    dtypes: tuple[str, ...] = ()
    projections: bool | None = None  # True: every case has a projection (LSTM, H >= 2); False: none
    bias: bool | None = None
    initial_state: bool | None = None
    zero_length: bool | None = None
    long_memory: bool | None = None  # True: -longmem on every case whose family has the regime; False: none
    packed_tail: bool | None = None  # True: every case has a packed tail (-tail<n>); False: none
    wants: tuple[str, ...] = ()  # gradient requests (case id -w<group>)
    heads: tuple[str, ...] = ()  # head-gradient variants (case id -g<heads>)
    lengths: tuple[str, ...] = ()  # length patterns
    input_size: tuple[int, int] | None = None  # (min, max)
    hidden_size: tuple[int, int] | None = None
    max_len: tuple[int, int] | None = None
    batch_size: tuple[int, int] | None = None
    # the families' own options by name, sorted: (name, True/False) for a flag, (name, (min, max)) for an integer
    family_options: tuple[tuple[str, Any], ...] = ()
    # kernel configurations by name, sorted: (name, (value, ...)), one value named by every case
    kernel_config: tuple[tuple[str, tuple], ...] = ()

    @classmethod
    def build(cls, **keywords: Any) -> Narrowing:
        """A narrowing from loosely typed values by knob name (``gr.sweep``'s keywords, the fixture's,
        the command line's option values), validated; a keyword left out or None keeps the profile's.
        ``family_options`` as ``{"gated": True, "heads": (1, 2)}`` or ``["gated=on", "heads=1..2"]``."""
        unknown = [name for name in keywords if name not in KNOB]
        if unknown:
            raise UsageError(f"{unknown[0]!r} is not a way to narrow the draw; give one of {', '.join(KNOB)}")
        return cls(**{knob.field: knob.read(keywords.get(knob.field)) for knob in KNOBS})

    def __bool__(self) -> bool:
        return self != NO_NARROWING

    def flags(self) -> list[str]:
        """The command-line flags that give this narrowing, e.g. ``["--mode lstm", "--no-projections",
        "--hidden-size 2..4"]``."""
        return [flag for knob in KNOBS for flag in knob.shown(getattr(self, knob.field))]

    def apply(self, profile: Any) -> Any:
        """``profile`` with its draw intersected with this narrowing; UsageError when nothing is left."""
        if not self:
            return profile
        profile = self._shaped(profile)
        where = f"profile {profile.name}"
        changes: dict[str, Any] = {}
        for name in ("input_size", "hidden_size", "max_len", "batch_size"):
            if (bounds := getattr(self, name)) is not None:
                low, high = max(bounds[0], getattr(profile, name)[0]), min(bounds[1], getattr(profile, name)[1])
                if low > high:
                    raise UsageError(f"{KNOB[name].usage} {bounds[0]}..{bounds[1]} leaves nothing to draw: "
                                     f"{where} draws {name} {getattr(profile, name)[0]}..{getattr(profile, name)[1]}")
                changes[name] = (low, high)
        for name in ("wants", "heads", "lengths"):
            if chosen := getattr(self, name):
                drawn = {k: w for k, w in getattr(profile, name).items() if w > 0}
                kept = {k: w for k, w in drawn.items() if k in chosen}
                if not kept:
                    raise UsageError(f"{KNOB[name].usage} {', '.join(chosen)} leaves nothing to draw: {where} draws "
                                     f"{name} {', '.join(drawn)} only")
                changes[name] = kept
        for name, what in SWITCHES.items():
            if (on := getattr(self, name)) is not None:
                share = KNOB[name].setting
                if getattr(profile, share) == (0.0 if on else 1.0) and (on or name != "projections"):
                    raise UsageError(f"{KNOB[name].shown(on)[0]} leaves nothing to draw: {where} draws "
                                     f"{'no case with' if on else 'every case with'} {what} "
                                     f"(draw.{share} = {getattr(profile, share):g})")
                changes[share] = 1.0 if on else 0.0
        if self.projections:
            sizes = (f"{KNOB['hidden_size'].shown(self.hidden_size)[0]} draws hidden_size" if self.hidden_size
                     else f"{where} draws hidden_size")  # the user's own range is named as theirs
            changes.update(self._projected(profile, changes.get("hidden_size", profile.hidden_size), sizes))
        narrowed = dataclasses.replace(profile, **changes)
        if self.family_options:
            narrowed.family_options, narrowed.held_variants = self._options_drawn(narrowed)
        if self.kernel_config:
            narrowed.kernel_config = dict(self.kernel_config)
        return narrowed

    def _shaped(self, profile: Any) -> Any:
        """``profile`` with the shape knobs applied (``--mode gru --layers 1 --unidirectional --dtype
        f32``): ``--bidirectional`` keeps only the modes whose family runs both ways (UsageError when none does)."""
        changes: dict[str, Any] = {}
        if self.modes:
            changes["modes"] = dict.fromkeys(self.modes, 1.0)
        if self.dtypes:
            changes["dtypes"] = dict.fromkeys(self.dtypes, 1.0)
        if self.layers is not None:
            changes["layers"] = (self.layers, self.layers)
        if self.bidirectional is not None:
            changes["bidirectional"] = 1.0 if self.bidirectional else 0.0
        shaped = dataclasses.replace(profile, **changes)
        if self.bidirectional:
            shaped.modes = modes_able(shaped, "bidirectional", "--bidirectional",
                                      lambda drawn: f"{', '.join(drawn)} {'runs' if len(drawn) == 1 else 'run'} "
                                                    f"forward in time only")
        return shaped

    @staticmethod
    def _projected(profile: Any, hidden: tuple[int, int], sizes: str) -> dict[str, Any]:
        """Only modes with projections, and H >= 2 (a projection has 1 <= P < H units); ``sizes``
        says who draws the H range (``profile ci draws hidden_size``)."""
        modes = modes_able(profile, "projections", "--projections", lambda drawn: "projections are LSTM only")
        if hidden[1] < 2:
            raise UsageError(f"--projections leaves nothing to draw: a projection needs hidden_size >= 2, and "
                             f"{sizes} {hidden[0]}..{hidden[1]}")
        return {"modes": modes, "hidden_size": (max(2, hidden[0]), hidden[1])}

    def _options_drawn(self, profile: Any) -> tuple[dict[str, Any], dict[str, dict[str, bool]]]:
        """The family options of this narrowing, checked against the families ``profile`` draws
        (their :class:`~gradcheck_rnn.families.base.Option` objects): the profile's ``family_options``,
        and its ``held_variants``, the variants each family keeps because a kept option excludes
        the others (strong decay draws no -nobias and no -longmem for its families)."""
        from ..families import family

        families = [family(m) for m, w in profile.modes.items() if w > 0]
        for name, value in self.family_options:
            flag = f"--family-option {_option_text(name, value)}"
            options = [o for f in families for o in f.options if o.name == name]
            if not options:
                having = "; ".join(f"{f.token}: {', '.join(o.name for o in f.options) or 'none'}" for f in families)
                raise UsageError(f"{flag} leaves nothing to draw: no family that profile {profile.name} draws has "
                                 f"an option {name!r} (options by family: {having})")
            for option in options:
                if option.is_flag != isinstance(value, bool):
                    kind = "on or off" if option.is_flag else "a size or a range MIN..MAX"
                    raise UsageError(f"{flag} is not allowed; {name} takes {kind}")
                if option.divides:
                    self._divisible(option, flag, value, profile)
        held = {}
        for cell in families:
            if variants := self._held_variants(cell, profile):
                held[cell.token] = variants
        return dict(self.family_options), held

    def _divisible(self, option: Any, flag: str, value: tuple[int, int], profile: Any) -> None:
        """UsageError when no size the run draws leaves ``option`` (one that divides a size) a kept
        value: the draw moves every other size to one that does (gradcheck_rnn/model/profiles.py)."""
        low, high = getattr(profile, option.divides)
        if any(size % v == 0 for size in range(low, high + 1) for v in range(value[0], value[1] + 1)):
            return
        knob = KNOB[option.divides]
        where = (f"{knob.shown(getattr(self, option.divides))[0]} draws" if getattr(self, option.divides)
                 else f"profile {profile.name} draws {option.divides}")
        raise UsageError(f"{flag} leaves nothing to draw: {option.name} must divide {option.divides}, and {where} "
                         f"{low}..{high} only; give --{knob.flag} {value[1]} too")

    def _held_variants(self, cell: Any, profile: Any) -> dict[str, bool]:
        """The variants family ``cell`` is held to because the options this narrowing keeps exclude
        the others the profile draws for it (``{"bias": True, "long_memory": False}``); UsageError
        when a flag of this narrowing asks for every case to have an excluded one, or when the kept
        options cannot be together at all."""
        own = {option.name for option in cell.options}
        kept = {name: value for name, value in self.family_options if name in own}
        if not kept:
            return {}
        flags = " ".join(f"--family-option {text}" for text in self.flags_of(cell))
        try:
            conflicts = _variant_conflicts(cell, kept, profile)
        except UsageError as exc:
            raise UsageError(f"{flags} cannot hold on any {cell.token} case: {exc}") from None
        held: dict[str, bool] = {}
        for field, variant, why in conflicts:
            if getattr(self, field) is variant:  # every case asked for with it: nothing can be left out
                asked = KNOB[field].shown(variant)[0]
                raise UsageError(f"{flags} and {asked} cannot hold together on {cell.token} cases: {why}; give "
                                 f"{flags} without {asked}")
            held[field] = not variant
        return held

    def flags_of(self, cell: Any) -> list[str]:
        """The family options of this narrowing that ``cell`` has, as the command line writes them."""
        names = {option.name for option in cell.options}
        return [_option_text(name, value) for name, value in self.family_options if name in names]

    # ------------------------------------------------------------------ results.json

    def to_json(self) -> dict[str, Any]:
        """The narrowing as a JSON object (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Narrowing:
        """Inverse of :meth:`to_json`; None (a run written before narrowing) is no narrowing."""
        if not data:
            return cls()
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        values["family_options"] = tuple((name, tuple(value) if isinstance(value, list) else value)
                                         for name, value in data.get("family_options", ()))
        values["kernel_config"] = tuple((name, tuple(kept)) for name, kept in data.get("kernel_config", ()))
        return cls(**values)


NO_NARROWING = Narrowing()  # the profile's own draw

# The variants a profile may draw that a family's validation may refuse beside a kept option: (config
# field, its variant value, whether the profile draws it for that config: gradcheck_rnn/model/profiles.py).
_VARIANTS = (("bias", False, lambda profile, cell, config: profile.bias < 1),
             ("long_memory", True,
              lambda profile, cell, config: profile.long_memory > 0 and cell.keeps_memory(config)))


def _variant_conflicts(cell: Any, kept: Mapping[str, Any], profile: Any) -> list[tuple[str, bool, str]]:
    """The variants ``profile`` draws for family ``cell`` that the family's validation refuses beside
    the ``kept`` options (its own), as (field, variant, why), judged on one config with them (the
    largest H they divide); UsageError when the kept options cannot be together at all."""
    import numpy as np

    from .rnn_config import RNNConfig

    def values(name: str, size: int) -> list[Any]:  # a kept option's values that fit H = size
        value = kept[name]
        if isinstance(value, bool):
            return [value]
        option = next(o for o in cell.options if o.name == name)
        return [v for v in range(value[0], value[1] + 1) if option.divides != "hidden_size" or size % v == 0]

    low, high = profile.hidden_size
    hidden = max([n for n in range(low, high + 1) if all(values(name, n) for name in kept)] or [high])
    options = {**cell.draw_options(np.random.default_rng(0), hidden),
               **{name: (values(name, hidden) or [kept[name][1]])[-1] for name in kept}}
    config = RNNConfig(cell.token, 1, False, 1, hidden, 1, 1, options=options)
    conflicts = []
    for field, variant, drawn in _VARIANTS:
        if drawn(profile, cell, config):
            try:
                dataclasses.replace(config, **{field: variant})
            except UsageError as exc:
                conflicts.append((field, variant, str(exc)))
    return conflicts


def draw_flags(draw: Mapping[str, Any] | None) -> list[str]:
    """The flags of a run's draw narrowing, from the ``"draw"`` object of results.json: what the
    run's header and report.md show. Empty for a run of the profile's own draw."""
    known = {f.name for f in dataclasses.fields(Narrowing)}
    try:
        return Narrowing.from_json({k: v for k, v in (draw or {}).items() if k in known}).flags()
    except (TypeError, ValueError):  # a hand-edited file: show no flags rather than fail the report
        return []
