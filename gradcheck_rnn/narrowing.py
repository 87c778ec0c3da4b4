"""Narrowing a profile's draw to what one target takes: projections, biases, initial states,
head gradients, input and hidden sizes, length patterns and zero-length sequences.

A plugin target that supports a part of the API surface (an LSTM without projections, a kernel
that cannot take length 0) would otherwise be skipped on most cases of a sweep; a profile file
per target was the only way to say so. A :class:`Narrowing` is the command line's
(``sweep --no-projections --hidden-size 2..4``), ``gr.sweep``'s and the pytest fixture's way: it
*intersects* the profile — a switch on means every case has it, off means none, a list keeps the
profile's weights of the names given, a range is cut to the profile's — so a narrowed run never
draws what the profile would not. A narrowing that leaves nothing to draw is a UsageError naming
the conflicting values.

A narrowed run draws other cases than the profile's own (a switch of the API surface — projections,
bias, zero lengths — leaves the rest of each case as it was: gradcheck_rnn/generate.py), so the
run spec records the narrowing: shards and merges rebuild the same cases from it, and
``--last-failed`` from the case ids. An empty narrowing is the profile itself, bit for bit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .config import HEADS, LENGTH_PATTERNS
from .errors import UsageError

SWITCHES = {  # field: (Profile probability, the flag pair, what "on" means in a sentence)
    "projections": ("proj", "projections", "a projection"),
    "bias": ("bias", "bias", "biases"),
    "initial_state": ("initial_state", "initial-state", "an initial state"),
    "zero_length": ("zero_length", "zero-length", "a zero-length sequence"),
}
_RANGE = re.compile(r"^\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?$")


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


def _switch(value: Any, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"{name}={value!r} is not allowed; give True, False or None (the profile's draw)")
    return value


@dataclass(frozen=True)
class Narrowing:
    """What a run narrows the profile's draw to; every field left at its default keeps the profile's."""

    projections: bool | None = None  # True: every case has a projection (LSTM, H >= 2); False: none
    bias: bool | None = None
    initial_state: bool | None = None
    heads: tuple[str, ...] = ()  # head-gradient variants (case id -g<heads>)
    input_size: tuple[int, int] | None = None  # (min, max)
    hidden_size: tuple[int, int] | None = None
    lengths: tuple[str, ...] = ()  # length patterns
    zero_length: bool | None = None

    @classmethod
    def build(cls, projections: bool | None = None, bias: bool | None = None, initial_state: bool | None = None,
              heads: Iterable[str] | str | None = None, input_size: Any = None, hidden_size: Any = None,
              lengths: Iterable[str] | str | None = None, zero_length: bool | None = None) -> Narrowing:
        """A narrowing from loosely typed values (API keywords, command-line strings), validated."""
        return cls(projections=_switch(projections, "projections"), bias=_switch(bias, "bias"),
                   initial_state=_switch(initial_state, "initial_state"), heads=_names(heads, "heads", HEADS),
                   input_size=parse_range(input_size, "input_size"),
                   hidden_size=parse_range(hidden_size, "hidden_size"),
                   lengths=_names(lengths, "length pattern", LENGTH_PATTERNS),
                   zero_length=_switch(zero_length, "zero_length"))

    def __bool__(self) -> bool:
        return self != NO_NARROWING

    def flags(self) -> list[str]:
        """The command-line flags that give this narrowing, e.g. ``["--no-projections", "--hidden-size 2..4"]``."""
        flags = []
        for name, (_, flag, _) in SWITCHES.items():
            if getattr(self, name) is not None:
                flags.append(f"--{'' if getattr(self, name) else 'no-'}{flag}")
        flags += [f"--heads {h}" for h in self.heads] + [f"--length-pattern {p}" for p in self.lengths]
        for name in ("input_size", "hidden_size"):
            bounds = getattr(self, name)
            if bounds is not None:
                shown = str(bounds[0]) if bounds[0] == bounds[1] else f"{bounds[0]}..{bounds[1]}"
                flags.append(f"--{name.replace('_', '-')} {shown}")
        return flags

    def apply(self, profile: Any) -> Any:
        """``profile`` with its draw intersected with this narrowing; UsageError when nothing is left."""
        if not self:
            return profile
        where = f"profile {profile.name}"
        changes: dict[str, Any] = {}
        for name in ("input_size", "hidden_size"):
            if (bounds := getattr(self, name)) is not None:
                low, high = max(bounds[0], getattr(profile, name)[0]), min(bounds[1], getattr(profile, name)[1])
                if low > high:
                    raise UsageError(f"--{name.replace('_', '-')} {bounds[0]}..{bounds[1]} leaves nothing to draw: "
                                     f"{where} draws {name} {getattr(profile, name)[0]}..{getattr(profile, name)[1]}")
                changes[name] = (low, high)
        for name, flag, table in (("heads", "--heads", "heads"), ("lengths", "--length-pattern", "lengths")):
            if chosen := getattr(self, name):
                drawn = {k: w for k, w in getattr(profile, table).items() if w > 0}
                kept = {k: w for k, w in drawn.items() if k in chosen}
                if not kept:
                    raise UsageError(f"{flag} {', '.join(chosen)} leaves nothing to draw: {where} draws "
                                     f"{table} {', '.join(drawn)} only")
                changes[table] = kept
        for name, (knob, flag, what) in SWITCHES.items():
            if (on := getattr(self, name)) is not None:
                if getattr(profile, knob) == (0.0 if on else 1.0) and (on or name != "projections"):
                    raise UsageError(f"--{'' if on else 'no-'}{flag} leaves nothing to draw: {where} draws "
                                     f"{'no case with' if on else 'every case with'} {what} "
                                     f"(draw.{knob} = {getattr(profile, knob):g})")
                changes[knob] = 1.0 if on else 0.0
        if self.projections:
            changes.update(self._projected(profile, changes.get("hidden_size", profile.hidden_size), where))
        return dataclasses.replace(profile, **changes)

    @staticmethod
    def _projected(profile: Any, hidden: tuple[int, int], where: str) -> dict[str, Any]:
        """Only modes with projections, and H >= 2 (a projection has 1 <= P < H units)."""
        from .families import family

        drawn = [m for m, w in profile.modes.items() if w > 0]
        modes = {m: w for m, w in profile.modes.items() if w > 0 and family(m).projections}
        if not modes:
            raise UsageError(f"--projections leaves nothing to draw: projections are LSTM only, and {where} "
                             f"draws {', '.join(drawn)}")
        if hidden[1] < 2:
            raise UsageError(f"--projections leaves nothing to draw: a projection needs hidden_size >= 2, and "
                             f"{where} draws hidden_size {hidden[0]}..{hidden[1]}")
        return {"modes": modes, "hidden_size": (max(2, hidden[0]), hidden[1])}

    # ------------------------------------------------------------------ results.json

    def to_json(self) -> dict[str, Any]:
        """The narrowing as a JSON object (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Narrowing:
        """Inverse of :meth:`to_json`; None (a run written before narrowing) is no narrowing."""
        if not data:
            return cls()
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


NO_NARROWING = Narrowing()  # the profile's own draw


def draw_flags(draw: Mapping[str, Any] | None) -> list[str]:
    """The flags of a run's whole draw narrowing, from the ``"draw"`` object of results.json
    (``--mode``, ``--layers``, ``--[uni|bi]directional``, ``--dtype`` and this module's): what the
    run's header and report.md show. Empty for a run of the profile's own draw."""
    draw = draw or {}
    flags = [f"--mode {m}" for m in draw.get("modes") or ()]
    if draw.get("layers") is not None:
        flags.append(f"--layers {draw['layers']}")
    if draw.get("bidirectional") is not None:
        flags.append("--bidirectional" if draw["bidirectional"] else "--unidirectional")
    flags += [f"--dtype {d}" for d in draw.get("dtypes") or ()]
    known = {f.name for f in dataclasses.fields(Narrowing)}
    try:
        narrowing = Narrowing.from_json({k: v for k, v in draw.items() if k in known})
    except (TypeError, ValueError):  # a hand-edited file: show what can be shown
        return flags
    return flags + narrowing.flags()
