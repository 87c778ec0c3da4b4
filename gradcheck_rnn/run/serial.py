"""The in-process executor (``--workers 1``): judge the cases one by one in this process."""

from __future__ import annotations

from typing import Callable, Iterable

from ..model.case import Case
from ..judging.judge import judge
from ..rows.result import BAD_STATUSES, CaseResult
from ..targets import Target
from ..judging.tolerances import Tolerances


def judge_serially(jobs: Iterable[tuple[int, Case]], targets: list[Target], tolerances: Tolerances,
                   checks: Iterable[str], fail_fast: bool = False,
                   on_result: Callable[[CaseResult], None] | None = None,
                   keep: Callable[[CaseResult], bool] | None = None) -> list[CaseResult]:
    """Every enabled check of every target on each ``(sweep index, case)``; stop at the first bad
    row when ``fail_fast``. The rows returned are those ``keep`` accepts (every row without it)."""
    checks = list(checks)
    results: list[CaseResult] = []
    for index, case in jobs:
        for result in judge(case, targets, tolerances, checks):
            result.case_index = index
            if keep is None or keep(result):
                results.append(result)
            if on_result:
                on_result(result)
            if fail_fast and result.status in BAD_STATUSES:
                return results
    return results
