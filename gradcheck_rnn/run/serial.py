"""The in-process executor (``--in-process``): judge the cases one by one in this process."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ..model.case import Case
from ..judging.judge import judge
from ..rows.result import CaseResult
from ..targets import Target
from ..judging.tolerances import Tolerances


def judge_serially(jobs: Iterable[tuple[int, Case]], targets: list[Target], tolerances: Tolerances,
                   checks: Iterable[str], stopping: Callable[[], bool] = lambda: False) -> Iterator[tuple[int, CaseResult]]:
    """Every enabled check of every target on each ``(sweep index, case)``, with its index, as it
    is judged; nothing more once ``stopping()`` says so (asked after each row)."""
    checks = list(checks)
    for index, case in jobs:
        for result in judge(case, targets, tolerances, checks):
            yield index, result
            if stopping():
                return
