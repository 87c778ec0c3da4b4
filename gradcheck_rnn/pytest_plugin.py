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
so it imports nothing heavy at import time; torch and jax load when a check runs. The fixture
judges through ``gr.check`` and ``gr.sweep``, which set the threads and the JAX cache for the
call only (:func:`gradcheck_rnn.runtime.judging`): the test process is left as it was, but for
the worker pool's fork server, kept from the first sweep to the end of the session so that each
sweep does not wait for its imports again (:mod:`gradcheck_rnn.run.fork_server`).
"""

from __future__ import annotations

import os
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


class RNNGradcheck:
    """The ``rnn_gradcheck`` fixture: judge a target from inside a test; fail the test on any failure."""

    def __init__(self, cases_override: int | None = None) -> None:
        self.cases_override = cases_override

    def sweep(self, target: Any, cases: int = 50, config: str | os.PathLike[str] = "ci", seed: int = 0,
              checks: Iterable[str] | None = None, rtol: float | None = None, atol: float | None = None,
              **narrowing: Any) -> list:
        """Judge ``target`` on ``cases`` cases of a profile drawn from ``seed``; return the results.

        ``target`` is a name as on the command line (``fused-cpu``, ``mutant:<name>``,
        ``package.module:callable``) or a target object/callable. ``checks`` defaults to the
        profile's enabled checks; ``narrowing`` takes ``gr.sweep``'s narrowing keywords, each the
        keyword of a ``gradcheck-rnn sweep`` flag (``modes=["gru"]``, ``layers=1``,
        ``bidirectional=False``, ``dtypes``, ``projections=False``, ``hidden_size=(2, 4)``,
        ``heads``, ``lengths``, ``bias``, ``initial_state``, ``input_size``, ``zero_length``,
        ``long_memory``, ``packed_tail``, ``wants``, ``max_len``, ``batch_size``, ``family_options``,
        ``kernel_config``):
        a one-mode target is judged on every case instead of a quarter of
        them. Raises :class:`GradcheckFailed` on any failure or when nothing was judged.
        """
        __tracebackhide__ = True
        import gradcheck_rnn as gr

        count = self.cases_override or cases
        run = gr.sweep(target, cases=count, seed=seed, config=str(config), checks=checks, rtol=rtol, atol=atol,
                       **narrowing)
        _judge(run.results, run.exit_code, run.reason, f"sweep of {count} cases (profile {run.spec.profile}, "
                                                       f"seed {run.spec.seed})")
        return run.results

    def check(self, target: Any, case_id: str, checks: Iterable[str] = ("reference",),
              config: str | os.PathLike[str] = "ci", rtol: float | None = None, atol: float | None = None) -> list:
        """Judge ``target`` on the case named by ``case_id``; raises :class:`GradcheckFailed` as ``sweep`` does."""
        __tracebackhide__ = True
        from gradcheck_rnn.api import check_run

        run = check_run(target, case_id, checks=checks, config=str(config), rtol=rtol, atol=atol)
        _judge(run.results, run.exit_code, run.reason, case_id)  # the run's own verdict, never a recount
        return run.results


def _judge(results: list, exit_code: int, reason: str, what: str) -> None:
    """Raise GradcheckFailed with the failure list and repro commands, or when nothing was judged."""
    __tracebackhide__ = True
    if exit_code == 0:
        return
    from gradcheck_rnn.reports.console import failure_lines
    from gradcheck_rnn.rows.result import document_row

    # The console's failure list, of the stored rows: each failing case id with its tensors and its repro command.
    listing = "\n".join(line.plain for line in failure_lines(map(document_row, results)))
    raise GradcheckFailed(f"{reason} in the {what}" + (f"\n{listing}" if listing else ""))


@pytest.fixture(scope="session")
def _gradcheck_rnn_fork_server() -> Iterator[None]:
    """The worker pool's fork server, once started, kept for the session: each sweep's workers then
    start at once instead of after its imports; it stops when the session ends."""
    from gradcheck_rnn.run import fork_server

    with fork_server.kept():
        yield


@pytest.fixture
def rnn_gradcheck(request: pytest.FixtureRequest, _gradcheck_rnn_fork_server: None) -> RNNGradcheck:
    """Judge an RNN target inside a test: ``rnn_gradcheck.sweep(target, ...)``, ``rnn_gradcheck.check(target, id)``."""
    return RNNGradcheck(request.config.getoption(CASES_OPTION))
