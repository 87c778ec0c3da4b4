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
from typing import Any

from .case import CaseRef
from .config import CHECK_NAMES, profile_names


def next_step(spec: Any, results: list) -> str | None:
    """The "next:" sentence of a run judged green or vacuous (exit 0 or 5), or None for a run of named cases."""
    if spec.case_ids:
        return None
    steps = _narrowing_steps(results) + _check_steps(spec) + _family_steps(spec)
    if not steps:
        steps = ["judge more and larger cases: -n " + str(max(spec.cases * 10, 100)) + " or -c nightly"]
    return "next: " + "; ".join(steps)


def _refused(results: list) -> dict[str, tuple[list[CaseRef], list[CaseRef]]]:
    """Per target: the cases it refused (its reference row is a skip) and the cases it was judged on."""
    seen: dict[str, tuple[dict[str, CaseRef], dict[str, CaseRef]]] = {}
    for row in results:
        if row.check != "reference":
            continue
        refused, judged = seen.setdefault(row.target, ({}, {}))
        (refused if row.status == "skip" else judged)[row.case_id] = CaseRef.from_id(row.case_id)
    return {t: (list(r.values()), list(j.values())) for t, (r, j) in seen.items() if r}


# What separates the cases a target refused from those it took: (flag, holds for a refused case).
_SEPARATORS = (
    ("--no-projections", lambda c: c.config.proj_size > 0),
    ("--bias", lambda c: not c.config.bias),
    ("--no-zero-length", lambda c: 0 in _lengths(c)),
    ("--initial-state", lambda c: c.id.endswith("-z")),
    ("--unidirectional", lambda c: c.config.bidirectional),
    ("--layers 1", lambda c: c.config.num_layers > 1),
)


def _lengths(case: CaseRef) -> list[int]:
    return [int(v) for v in case.id.split("-len", 1)[1].split("-", 1)[0].split(".")]


def _narrowing_steps(results: list) -> list[str]:
    steps = []
    for target, (refused, judged) in _refused(results).items():
        modes = sorted({c.config.mode for c in judged})
        flags = [f"--mode {m}" for m in modes if len(modes) < len({c.config.mode for c in refused + judged})]
        rest = [c for c in refused if c.config.mode in modes] if modes else refused
        flags += [flag for flag, holds in _SEPARATORS
                  if rest and all(holds(c) for c in rest) and not any(holds(c) for c in judged)]
        what = " ".join(flags) if flags else "the narrowing flags of `gradcheck-rnn sweep --help`"
        steps.append(f"{target} refused {len(refused)} of {len(refused) + len(judged)} cases: draw only what it "
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
