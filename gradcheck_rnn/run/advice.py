"""The note a green run ends with (and a vacuous one): what to do next for more coverage, concretely
for this run.

A green run proves only what it judged. So it names, in one line, what it left out and the flag
or shipped profile that adds it (issue 29: every green run ended with "a kernel returning zeros
would pass them" and no next step):

- cases a target refused (``supports``): the narrowing flags that draw only cases it takes
  (``--mode lstm --no-projections``, ``--family-option gated=on``), read from the refused and the
  judged case ids;
- checks the run did not enable, and a shipped profile that runs them (``-c nightly``);
- cell families the profile never draws, and a shipped profile that does (``-c families``);
- otherwise, more and larger cases (``-c nightly``).

A profile is named only where it draws every family this run drew (issue 48: ``-c matrix --mode
gdn`` was sent to nightly, which draws only cuDNN's cells): a hint must hold for the run it ends.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from ..judging.checks import check_names, enabled
from ..model.profiles import profile_names


Coverage = dict[str, tuple[Counter[str], Counter[str]]]  # Tally.coverage: target -> (refused, judged) case shapes


def next_step(spec: Any, coverage: Coverage) -> str | None:
    """The "next:" sentence of a run judged green or vacuous (exit 0 or 5), or None for a run of
    named cases; ``coverage`` is what the run's tally gathered from its rows (:attr:`Tally.coverage
    <gradcheck_rnn.rows.store.Tally.coverage>`: the case shapes each target refused and was judged on)."""
    if spec.case_ids:
        return None
    steps = _narrowing_steps(coverage) + _check_steps(spec) + _family_steps(spec)
    if not steps:
        larger = _shipped(lambda p: p.name != spec.profile and _draws_all(p, spec) and p.cases > spec.cases
                          and set(spec.checks) <= set(enabled(p.checks, p.source)) and _at_least_as_large(p, spec.profile_data))
        steps = [f"judge more and larger cases: -n {max(spec.cases * 10, 100)}"
                 + (f" or -c {larger[0]}" if larger else "")]
    return "next: " + "; ".join(steps)


# What separates the cases a target refused from those it took: (flag, holds for a refused case),
# read from the case id's fixed grammar alone (docs/contracts.md, "Case id"): no family is asked,
# so the stored rows of a user family's run tally without it (gradcheck-rnn report, merge).
_ID = re.compile(r"[^-]+-L(?P<layers>\d+)-(?P<dir>uni|bi)-I\d+-H\d+(?P<surface>(?:-[^-]+)*?)-T\d+-B\d+"
                 r"-len(?P<lengths>[0-9.]+)-[^-]+-s\d+(?P<variants>(?:-[^-]+)*)")
_SEPARATORS = (
    ("--no-projections", lambda m: re.search(r"-P\d+(?:-|$)", m["surface"]) is not None),
    ("--bias", lambda m: "-nobias" in m["surface"].split("-longmem")[0]),
    ("--no-zero-length", lambda m: "0" in m["lengths"].split(".")),
    ("--initial-state", lambda m: m["variants"].endswith("-z")),
    ("--unidirectional", lambda m: m["dir"] == "bi"),
    ("--layers 1", lambda m: int(m["layers"]) > 1),
)


def _kind(case_id: str) -> tuple:
    """What the note tells cases apart by: the mode, then whether each separator holds (all False
    for a text that does not read as a case id), then, for a family known here that has options,
    every option's (name, value) (:func:`_option_values`)."""
    match = _ID.fullmatch(case_id)
    mode = case_id.split("-", 1)[0]
    kind = (mode, *(match is not None and holds(match) for _, holds in _SEPARATORS))
    options = _option_values(mode, match["surface"]) if match is not None else ()
    return (*kind, options) if options else kind


def _option_values(mode: str, surface: str) -> tuple[tuple[str, Any], ...]:
    """The family options of a case id's surface tokens, by the family's own Option objects; ()
    for a family this process does not know (a user family's stored rows) or one without options."""
    from ..errors import UsageError
    from ..families import family

    try:
        options = family(mode).options
    except (KeyError, UsageError):  # not known here: the note goes without its options
        return ()
    values = {option.name: option.default for option in options}
    for token in surface.split("-"):
        for option in options:
            if (value := option.parse(token)) is not None:
                values[option.name] = value
    return tuple(values.items())


_OPTIONS = len(_SEPARATORS) + 1  # where a kind holds its family's options, when it has them


def _options_of(kind: tuple) -> dict[str, Any]:
    return dict(kind[_OPTIONS]) if len(kind) > _OPTIONS else {}


def _option_flags(refused: list[tuple], judged: list[tuple]) -> list[str]:
    """``--family-option`` flags that together leave out every refused kind and no judged one: a
    flag option at the one value the judged cases have, an integer option in the range of their
    values; [] when they cannot leave out every refused kind."""
    taken: dict[str, set] = {}
    for kind in judged:
        for name, value in _options_of(kind).items():
            taken.setdefault(name, set()).add(value)
    candidates: dict[str, set] = {}  # the flag -> the values it keeps
    for name, seen in taken.items():
        if None in seen or (any(isinstance(v, bool) for v in seen) and len(seen) > 1):
            continue
        if any(isinstance(v, bool) for v in seen):
            candidates[f"--family-option {name}={'on' if next(iter(seen)) else 'off'}"] = seen
        else:
            low, high = min(seen), max(seen)
            candidates[f"--family-option {name}={low if low == high else f'{low}..{high}'}"] = set(range(low, high + 1))

    def leaves_out(flag: str, kind: tuple) -> bool:
        name = flag.split()[1].partition("=")[0]
        return name in _options_of(kind) and _options_of(kind)[name] not in candidates[flag]

    flags, left = [], list(refused)
    while left and candidates:  # greedy: the flag that leaves out most of what is left, first
        flag = max(candidates, key=lambda f: sum(leaves_out(f, kind) for kind in left))
        if not any(leaves_out(flag, kind) for kind in left):
            break
        flags.append(flag)
        left = [kind for kind in left if not leaves_out(flag, kind)]
        del candidates[flag]
    return flags if flags and not left else []


def kinds(shapes: Counter[str]) -> Counter[tuple]:
    """The cases of each kind (:func:`_kind`) among counted case shapes."""
    counted: Counter[tuple] = Counter()
    for shape, count in shapes.items():
        counted[_kind(shape)] += count
    return counted


def _narrowing_steps(coverage: Coverage) -> list[str]:
    steps = []
    for target, shapes in coverage.items():
        refused, judged = map(kinds, shapes)
        if not refused:
            continue
        modes = sorted({kind[0] for kind in judged})
        flags = [f"--mode {m}" for m in modes if len(modes) < len({kind[0] for kind in refused | judged})]
        rest = [kind for kind in refused if kind[0] in modes] if modes else list(refused)
        separators = [flag for i, (flag, _) in enumerate(_SEPARATORS, start=1)
                      if rest and all(kind[i] for kind in rest) and not any(kind[i] for kind in judged)]
        flags += separators or _option_flags(rest, list(judged))  # else the families' own options
        what = " ".join(flags) if flags else "the narrowing flags of `gradcheck-rnn sweep --help`"
        count = sum(refused.values())
        steps.append(f"{target} refused {count} of {count + sum(judged.values())} cases: draw only what it "
                     f"takes with {what}")
    return steps


@functools.cache
def load(name: str) -> Any:
    """A shipped profile, read once per process."""
    from ..model.profiles import load_profile

    return load_profile(name)


def _shipped(predicate: Any) -> list[str]:
    """The shipped profiles for which ``predicate(profile)`` holds, nightly first."""
    names = sorted(profile_names(), key=lambda n: (n != "nightly", n))
    return [name for name in names if predicate(load(name))]


def _drawn(profile: Any) -> set[str]:
    return {m for m, w in profile.modes.items() if w > 0}


def _draws_all(profile: Any, spec: Any) -> bool:
    """Whether ``profile`` draws every family the run ``spec`` drew (its narrowed profile's)."""
    return _drawn(spec.profile_data) <= _drawn(profile)


def _at_least_as_large(profile: Any, than: Any) -> bool:
    """Whether every size range of ``profile`` reaches as far as ``than``'s."""
    return all(getattr(profile, name)[1] >= getattr(than, name)[1]
               for name in ("layers", "input_size", "hidden_size", "max_len", "batch_size"))


def _check_steps(spec: Any) -> list[str]:
    missing = [c for c in check_names() if c not in spec.checks]
    if not missing:
        return []
    profiles = _shipped(lambda p: set(missing) <= set(enabled(p.checks, p.source)) and _draws_all(p, spec))
    where = f" (-c {profiles[0]} runs {'it' if len(missing) == 1 else 'them'})" if profiles else ""
    return [f"the {', '.join(missing)} check{'s were' if len(missing) > 1 else ' was'} not run{where}"]


def _family_steps(spec: Any) -> list[str]:
    from ..families import modes

    if spec.narrowing.modes:  # narrowed on purpose
        return []
    drawn = {m for m, w in spec.profile_data.modes.items() if w > 0}
    shipped = set().union(*({m for m, w in load(n).modes.items() if w > 0} for n in profile_names()))
    missing = [m for m in modes() if m in shipped and m not in drawn]  # built-in families a profile draws
    if not missing:
        return []
    how = ", ".join(f"-c {n}" for n in _covering_profiles(missing)) or " or ".join(f"--mode {m}" for m in missing)
    return [f"the {', '.join(missing)} famil{'ies were' if len(missing) > 1 else 'y was'} not drawn ({how})"]


def _covering_profiles(families: list[str]) -> list[str]:
    """Shipped profiles that together draw every one of ``families``, fewest first (greedy: the one
    that draws the most of those left, nightly first among equals); [] when none draws some."""
    draws = {n: {m for m, w in load(n).modes.items() if w > 0} for n in _shipped(lambda p: True)}
    left, cover = set(families), []
    while left:
        best = max(draws, key=lambda n: len(left & draws[n]))
        if not left & draws[best]:
            return []
        cover.append(best)
        left -= draws[best]
    return cover
