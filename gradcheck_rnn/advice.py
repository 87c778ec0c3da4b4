"""The note a green run ends with (and a vacuous one): what to do next for more coverage, concretely
for this run.

A green run proves only what it judged. So it names, in one line, what it left out and the flag
or shipped profile that adds it (issue 29: every green run ended with "a kernel returning zeros
would pass them" and no next step):

- cases a target refused (``supports``): the narrowing flags that draw only cases it takes
  (``--mode lstm --no-projections``), read from the refused and the judged case ids;
- checks the run did not enable, and a shipped profile that runs them (``-c nightly``);
- cell families the profile never draws, and a shipped profile that does (``-c families``);
- otherwise, more and larger cases (``-c nightly``).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from .config import CHECK_NAMES, profile_names


def next_step(spec: Any, coverage: "Coverage") -> str | None:
    """The "next:" sentence of a run judged green or vacuous (exit 0 or 5), or None for a run of
    named cases; ``coverage`` is what the run's tally gathered from its rows."""
    if spec.case_ids:
        return None
    steps = _narrowing_steps(coverage) + _check_steps(spec) + _family_steps(spec)
    if not steps:
        steps = ["judge more and larger cases: -n " + str(max(spec.cases * 10, 100)) + " or -c nightly"]
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
    for a text that does not read as a case id)."""
    match = _ID.fullmatch(case_id)
    return (case_id.split("-", 1)[0], *(match is not None and holds(match) for _, holds in _SEPARATORS))


class Coverage:
    """Per target, the kinds of case it refused (its reference row is a skip) and was judged on,
    counted as rows arrive (the run's :class:`~gradcheck_rnn.tally.Tally` feeds it): one entry per
    kind of case, so it stays small whatever the run's size."""

    def __init__(self) -> None:
        self.kinds: dict[str, tuple[Counter[tuple], Counter[tuple]]] = {}  # target -> (refused, judged)

    def add(self, row: dict[str, Any]) -> None:
        """Count one stored row (only reference rows say whether the target took the case)."""
        if row.get("check", "reference") != "reference":
            return
        refused, judged = self.kinds.setdefault(row["target"], (Counter(), Counter()))
        (refused if row["status"] == "skip" else judged)[_kind(row["case_id"])] += 1


def _narrowing_steps(coverage: Coverage) -> list[str]:
    steps = []
    for target, (refused, judged) in coverage.kinds.items():
        if not refused:
            continue
        modes = sorted({kind[0] for kind in judged})
        flags = [f"--mode {m}" for m in modes if len(modes) < len({kind[0] for kind in refused | judged})]
        rest = [kind for kind in refused if kind[0] in modes] if modes else list(refused)
        flags += [flag for i, (flag, _) in enumerate(_SEPARATORS, start=1)
                  if rest and all(kind[i] for kind in rest) and not any(kind[i] for kind in judged)]
        what = " ".join(flags) if flags else "the narrowing flags of `gradcheck-rnn sweep --help`"
        count = sum(refused.values())
        steps.append(f"{target} refused {count} of {count + sum(judged.values())} cases: draw only what it "
                     f"takes with {what}")
    return steps


@functools.cache
def load(name: str) -> Any:
    """A shipped profile, read once per process."""
    from .generate import load_profile

    return load_profile(name)


def _shipped(predicate: Any) -> list[str]:
    """The shipped profiles for which ``predicate(profile)`` holds, nightly first."""
    names = sorted(profile_names(), key=lambda n: (n != "nightly", n))
    return [name for name in names if predicate(load(name))]


def _check_steps(spec: Any) -> list[str]:
    missing = [c for c in CHECK_NAMES if c not in spec.checks]
    if not missing:
        return []
    profiles = _shipped(lambda p: set(missing) <= set(p.enabled_checks))
    where = f" (-c {profiles[0]} runs {'it' if len(missing) == 1 else 'them'})" if profiles else ""
    return [f"the {', '.join(missing)} check{'s were' if len(missing) > 1 else ' was'} not run{where}"]


def _family_steps(spec: Any) -> list[str]:
    from .families import modes

    if spec.modes:  # narrowed on purpose
        return []
    drawn = {m for m, w in spec.profile_data.modes.items() if w > 0}
    shipped = set().union(*({m for m, w in load(n).modes.items() if w > 0} for n in profile_names()))
    missing = [m for m in modes() if m in shipped and m not in drawn]  # built-in families a profile draws
    if not missing:
        return []
    profiles = _shipped(lambda p: set(missing) <= {m for m, w in p.modes.items() if w > 0})
    how = f"-c {profiles[0]}" if profiles else " or ".join(f"--mode {m}" for m in missing)
    return [f"the {', '.join(missing)} famil{'ies were' if len(missing) > 1 else 'y was'} not drawn ({how})"]
