"""The pytest plugin (entry point ``pytest11``): gradient checks of RNN kernels inside a user's suite.

    def test_my_kernel(rnn_gradcheck):
        rnn_gradcheck.sweep("my_pkg.rnn:target", cases=50, config="ci", seed=0)

    def test_the_case_that_broke_it(rnn_gradcheck):
        rnn_gradcheck.check("my_pkg.rnn:target", "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx")

A result that is not ``pass`` or ``skip`` fails the test with the failure list of the console
(each failing case id, its failing tensors and its repro command) in the assertion message. A sweep or check where nothing was judged
(every result a skip, or no case) fails too, as ``gradcheck-rnn`` exits 5 for it: a vacuous
run is never a pass. ``--gradcheck-rnn-cases N`` makes every sweep judge N cases (nightly runs).

pytest loads this module in every session of an environment where gradcheck-rnn is installed,
so it imports nothing heavy at import time; torch and jax load when a check runs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest

CASES_OPTION = "--gradcheck-rnn-cases"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--gradcheck-rnn-cases``."""
    group = parser.getgroup("gradcheck-rnn", "gradient checks of RNN kernels")
    group.addoption(CASES_OPTION, type=int, default=None, metavar="N",
                    help="Every rnn_gradcheck.sweep judges N cases instead of the number the test asks for "
                         "(e.g. more in nightly runs).")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a case count below 1 before any test runs."""
    cases = config.getoption(CASES_OPTION, None)
    if cases is not None and cases < 1:
        raise pytest.UsageError(f"{CASES_OPTION} {cases} is not allowed; give a number of cases >= 1")


class GradcheckFailed(AssertionError):
    """A sweep or check found a case × target × check that did not pass (or judged nothing)."""


@contextlib.contextmanager
def _torch_threads() -> Iterator[None]:
    """One torch thread while judging (tiny cases; see cli.limit_torch_threads), then the user's setting back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("GRADCHECK_RNN_TORCH_THREADS", "1")))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class RNNGradcheck:
    """The ``rnn_gradcheck`` fixture: judge a target from inside a test; fail the test on any failure."""

    def __init__(self, cases_override: int | None = None) -> None:
        self.cases_override = cases_override

    def sweep(self, target: Any, cases: int = 50, config: str | os.PathLike[str] = "ci", seed: int = 0,
              checks: Iterable[str] | None = None, rtol: float | None = None, atol: float | None = None) -> list:
        """Judge ``target`` on ``cases`` cases of a profile drawn from ``seed``; return the results.

        ``target`` is a name as on the command line (``fused-cpu``, ``mutant:<name>``,
        ``package.module:callable``) or a target object/callable. ``checks`` defaults to the
        profile's enabled checks. Raises :class:`GradcheckFailed` on any failure or when nothing
        was judged.
        """
        from .generate import draw_cases, load_profile
        from .runner import run_sweep

        profile = load_profile(config)
        count = self.cases_override or cases
        chosen = profile.enabled_checks if checks is None else _valid_checks(checks)
        resolved = _target(target)
        with _torch_threads():
            results = run_sweep(draw_cases(profile, seed, count), [resolved], profile.tolerance_table(rtol, atol),
                                checks=chosen)
        _judge(results, _repro_options(config, rtol, atol), f"sweep of {count} cases (profile {profile.name}, "
                                                           f"seed {seed}) on {resolved.name}")
        return results

    def check(self, target: Any, case_id: str, checks: Iterable[str] = ("reference",),
              config: str | os.PathLike[str] = "ci", rtol: float | None = None, atol: float | None = None) -> list:
        """Judge ``target`` on the case named by ``case_id``; raises :class:`GradcheckFailed` as ``sweep`` does."""
        from .case import Case
        from .generate import load_profile
        from .runner import judge_case

        case = Case.from_id(case_id)
        resolved = _target(target)
        tolerances = load_profile(config).tolerance_table(rtol, atol)
        with _torch_threads():
            results = list(judge_case(case, [resolved], tolerances, _valid_checks(checks)))
        _judge(results, _repro_options(config, rtol, atol), f"{case_id} on {resolved.name}")
        return results


def _target(target: Any):
    from .targets import as_target, resolve_target

    return resolve_target(target) if isinstance(target, str) else as_target(target)


def _valid_checks(checks: Iterable[str]) -> list[str]:
    from .errors import UsageError
    from .metamorphic import ALL_CHECKS

    chosen = [checks] if isinstance(checks, str) else list(checks)
    unknown = [c for c in chosen if c not in ALL_CHECKS]
    if unknown or not chosen:
        raise UsageError(f"checks={chosen!r} is not allowed; give one or more of {', '.join(ALL_CHECKS)}")
    return chosen


def _repro_options(config: str | os.PathLike[str], rtol: float | None, atol: float | None) -> str:
    """The options a repro command needs to judge as this test did (the ci profile is the default)."""
    from .runner import repro_options

    return repro_options(None if str(config) == "ci" else str(Path(config)), rtol, atol)


def _judge(results: list, repro_options: str, what: str) -> None:
    """Raise GradcheckFailed with the failure table and repro commands, or when nothing was judged."""
    for result in results:
        result.repro_options = repro_options
    bad = [r for r in results if r.status not in ("pass", "skip")]
    if bad:
        from .render import failure_lines

        # The console's failure list: each failing case id with its tensors and its repro command.
        listing = "\n".join(line.plain for line in failure_lines(results))
        raise GradcheckFailed(f"{len(bad)} of {len(results)} results did not pass in the {what}\n{listing}")
    if not any(r.status == "pass" for r in results):
        reasons = list(dict.fromkeys(r.message for r in results if r.message))[:3]
        found = f"all {len(results)} results were skips" if results else "no case was drawn"
        why = f" ({'; '.join(reasons)})" if reasons else ""
        raise GradcheckFailed(f"nothing was judged in the {what}: {found}{why}")


@pytest.fixture
def rnn_gradcheck(request: pytest.FixtureRequest) -> RNNGradcheck:
    """Judge an RNN target inside a test: ``rnn_gradcheck.sweep(target, ...)``, ``rnn_gradcheck.check(target, id)``."""
    return RNNGradcheck(request.config.getoption(CASES_OPTION))
