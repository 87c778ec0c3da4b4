"""One plan for every judging surface: what a caller asks for (a :class:`RunRequest`) becomes the
run spec, the execution and the resolved targets (a :class:`Plan`) in :func:`plan` alone.

The command line turns click's values into a request, ``gr.check``/``gr.sweep`` (and through them
the pytest fixture) turn their keywords into one; none of them builds a spec or an execution
itself, so a default (the worker count, the in-process fallback for objects no worker can import,
the fork server started early) is decided once, the same way for all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .spec import Job, Judging, RunSpec, Selection
from ..rows.store import VerdictRule

if TYPE_CHECKING:
    from ..model.profiles import Profile


@dataclass(frozen=True)
class RunRequest:
    """What a caller asks to judge and how, before anything is resolved.

    ``targets``: names or target objects (none: the default targets); ``selection``: which cases
    (None: the profile's draw); ``workers`` None: chosen from the number of cases, each worth
    ``per_case`` sweep cases (:func:`~gradcheck_rnn.run.default_workers`). ``command_line``: the
    process is the command's own, so it is set up for good (threads, the JAX cache folder) and the
    pool's fork server starts before the spec is built, importing beside it. ``cases``: cases given
    as objects, judged instead of what their ids draw (``gr.check``'s ``Case``). ``unshipped_families``:
    tokens of user families no other process can import, judged in this process as unimportable
    targets are. ``profile``: the profile already loaded from ``config``.
    """

    config: str | None = None
    targets: tuple[Any, ...] = ()
    selection: Selection | None = None
    judging: Judging = Judging()
    families: tuple[str, ...] = ()
    workers: int | None = None
    executor: str = "local"
    executor_options: tuple[tuple[str, Any], ...] = ()  # the executor's own options (name, value): --scheduler
    case_timeout: float | None = None
    fail_fast: bool = False
    in_process: bool = False
    per_case: float = 1.0
    command_line: bool = False
    cases: tuple[Any, ...] = ()
    unshipped_families: tuple[str, ...] = ()
    profile: Profile | None = field(default=None, compare=False)
    verdict: VerdictRule | None = None  # the run's own verdict (a detection run's); None: a sweep's


@dataclass(frozen=True)
class Plan:
    """A run ready to judge: its spec, its execution, its targets resolved in this process, the
    jobs given as objects (None: the spec's own draw), why that many workers, and the rule of its
    verdict when it is not a sweep's."""

    spec: RunSpec
    execution: Any  # gradcheck_rnn.run.Execution (run/__init__.py imports this module)
    targets: list
    workers_why: str = "--workers"
    jobs: tuple[Job, ...] | None = None
    verdict: VerdictRule | None = None

    def header(self) -> str:
        """The run's header line: what is judged, where, and why that many workers."""
        from ..model.narrowing import draw_flags

        spec = self.spec
        where = self.execution.where(len(spec.indices), self.workers_why)  # the executor's own words
        line = (f"judging {len(spec.indices)} case{'s' if len(spec.indices) != 1 else ''} × "
                f"{', '.join(spec.targets)} {where}")
        if flags := draw_flags(spec.draw_json()):  # the narrowing, as flags a user can copy
            line += f"; drawn from profile {spec.profile} narrowed by {' '.join(flags)}"
        if not spec.named_targets:  # the default targets: say which built-ins this machine leaves out, and why
            from ..targets import left_out_builtins

            if left := left_out_builtins():
                line += f"; left out: {left}"
        return line


def refuse_bad_names(targets: tuple[Any, ...], case_ids: tuple[str, ...]) -> None:
    """UsageError for an unknown target, a ``NAME@PYTHON`` without its interpreter or a bad case
    id, found without importing torch or JAX (RunSpec.build checks them again, after its heavy
    imports): a typo is refused before the seconds that torch, JAX and the pool take to start."""
    from ..model.case import CaseRef
    from ..targets import check_target_name

    for name in targets:
        if isinstance(name, str):
            check_target_name(name)
    for case_id in case_ids:
        CaseRef.from_id(case_id)


def _in_process_fallback(request: RunRequest, resolved: list, execution: Any) -> Any:
    """The execution, in this process when a target or user family is an object no worker process
    can import (UsageError when more than one worker was asked for)."""
    import dataclasses

    lost = [t.name for t in resolved if not getattr(t, "importable", True)]
    lost += [f"family {token}" for token in request.unshipped_families]
    if not lost or execution.in_process:
        return execution
    if execution.workers > 1:
        raise UsageError(f"workers={execution.workers} judges in other processes, which import each target by "
                         f"name, and {', '.join(lost)} is not importable as module:qualname; define it at "
                         f"module level or use workers=1")
    return dataclasses.replace(execution, in_process=True)


def _case_work(selection: Selection, profile: Profile) -> float:
    """What a case of this run costs to judge, in cases of cuDNN's cells
    (:func:`~gradcheck_rnn.run.mean_case_work`): of the named cases' families, or of the families
    the narrowed profile draws, in its proportions (the ids were checked: each names its family)."""
    from collections import Counter

    from ..model.case import id_facts
    from . import mean_case_work

    if selection.case_ids:
        return mean_case_work(Counter(id_facts(case_id.strip())["mode"] for case_id in selection.case_ids))
    return mean_case_work(selection.narrowing.apply(profile).modes)


def plan(request: RunRequest) -> Plan:
    """The plan of ``request``: its execution made (and validated) first; for a command line, the
    pool's fork server started and the process set up; then the spec built (profile, targets, cases
    checked, one UsageError sentence for anything wrong)."""
    from ..families import load_all
    from ..model.profiles import load_profile
    from . import Execution, default_workers, start_pool_early

    load_all(request.families)  # before the profile or the narrowing names their tokens
    selection = Selection() if request.selection is None else request.selection
    refuse_bad_names(request.targets, selection.case_ids)
    profile = request.profile or load_profile(request.config)
    workers, why = request.workers, "--workers"
    if workers is None:
        planned = len(selection.case_ids) or RunSpec.count_cases(cases=selection.cases, shard=selection.shard,
                                                                 profile=profile)
        workers, why = default_workers(planned, per_case=request.per_case * _case_work(selection, profile))
    execution = Execution(workers=workers, executor=request.executor, options=request.executor_options,
                          case_timeout=request.case_timeout, fail_fast=request.fail_fast,
                          in_process=request.in_process)
    if request.command_line:
        from ..runtime import set_up_process

        start_pool_early(execution)
        # after the fork server has started: this imports torch (~1 s), which the server imports too,
        # on the other core. The JAX cache folder it names is in the environment before any worker is made.
        set_up_process()  # threads and the JAX cache folder, kept (workers inherit it)
    spec, resolved = RunSpec.build(request.config, request.targets, selection, request.judging, request.families,
                                   profile)
    execution = _in_process_fallback(request, resolved, execution)
    jobs = tuple(enumerate(request.cases)) if request.cases else None
    return Plan(spec, execution, resolved, why, jobs, request.verdict)
