"""The public Python API (docs/contracts.md, "Public API"): ``check`` one case, ``sweep`` many.

    import gradcheck_rnn as gr

    results = gr.check("fused-cpu", "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx", checks=["reference", "future"])
    run = gr.sweep([my_target], cases=50, modes=["lstm"])
    assert run.exit_code == 0, run.reason

Both judge through the same pipeline as the command line: one plan
(:func:`gradcheck_rnn.run.plan.plan`), judged by :func:`gradcheck_rnn.run.judge_run` through an executor (worker processes by default), with the
command line's threads and JAX cache for the duration of the call only
(:func:`gradcheck_rnn.runtime.judging`: the caller's process is left as it was).
"""

from __future__ import annotations

from typing import Any, Iterable

from .model.case import Case
from .errors import UsageError
from .rows.result import CaseResult
from .rows.store import Run


def _target_items(targets: Any) -> tuple:
    """One target or a list of them (specs or objects), as a tuple."""
    return tuple(targets) if isinstance(targets, (list, tuple)) else (targets,)


def _config_name(config: Any) -> str | None:
    """The profile as a repro command names it: None for the default ci profile."""
    text = None if config is None else str(config)
    return None if text == "ci" else text


def valid_checks(checks: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """The checks asked for, or None for the profile's; UsageError naming the allowed ones."""
    from .judging.checks import check_names

    if checks is None:
        return None
    chosen = [checks] if isinstance(checks, str) else list(checks)
    unknown = [c for c in chosen if c not in check_names()]
    if unknown or not chosen:
        raise UsageError(f"checks={chosen!r} is not allowed; give one or more of {', '.join(check_names())}")
    return tuple(dict.fromkeys(chosen))


def _user_families(modes: Iterable[str]) -> tuple[tuple[str, ...], list[str]]:
    """Of the user families registered in this process that a run's ``modes`` name: the
    ``module:NAME`` of each (the run spec's ``families``, which worker processes load), and the
    tokens of those no other process can import."""
    from .families import user_families

    wanted = set(modes)
    known = {token: spec for token, spec in user_families().items() if token in wanted}
    return tuple(spec for spec in known.values() if spec), [token for token, spec in known.items() if not spec]


def _in_process(in_process: bool | None) -> bool:
    """``in_process`` as asked; None: $GRADCHECK_RNN_IN_PROCESS, read as the command line's
    ``--in-process`` reads it (click's boolean words)."""
    import os

    import click

    from .runtime import IN_PROCESS_ENV

    if in_process is not None:
        return in_process
    raw = os.environ.get(IN_PROCESS_ENV, "")
    try:
        return bool(raw) and click.BOOL.convert(raw, None, None)
    except click.BadParameter:
        raise UsageError(f"{IN_PROCESS_ENV}={raw!r} is not allowed; give 1 or 0") from None


def _judge(request: Any) -> Run:
    """Plan and judge a request (:func:`gradcheck_rnn.run.plan.plan`: worker processes, isolated,
    unless a target or user family is an object no other process can import, which this process
    judges) with the command line's threads and JAX cache for the call only."""
    from .run import judge_run
    from .run.plan import plan
    from .runtime import judging

    planned = plan(request)
    with judging():  # the caller's threads and environment back afterwards
        return judge_run(planned.spec, planned.execution, targets=planned.targets, jobs=planned.jobs,
                         rule=planned.verdict)


def check(target: Any, case: Case | str, *, checks: Iterable[str] | None = None, rtol: float | None = None,
          atol: float | None = None, config: str = "ci", in_process: bool | None = None) -> list[CaseResult]:
    """Judge ``target`` (a target spec such as ``"fused-cpu"``, or a target object) on one case (a
    :class:`Case` or a case id) with the named checks (default: the profile's); one row per check.

    The case is judged in a worker process (a run of one case), so a target that exits or crashes
    is an ``error`` row; ``in_process=True`` judges in this process instead (for a debugger; not
    isolated), as does a target object that is not importable as ``module:qualname``.
    """
    return check_run(target, case, checks=checks, rtol=rtol, atol=atol, config=config, in_process=in_process).results


def check_run(target: Any, case: Case | str, *, checks: Iterable[str] | None = None, rtol: float | None = None,
              atol: float | None = None, config: str = "ci", in_process: bool | None = None,
              strict_contracts: bool | None = None) -> Run:
    """:func:`check` as the judged :class:`Run`, with its one verdict (what the pytest fixture reads)."""
    from .run import Judging, Selection
    from .run.plan import RunRequest

    case = Case.from_id(case) if isinstance(case, str) else case
    families, lost_families = _user_families([case.config.mode])
    # the case travels whole: its data may be the caller's own, not what its id draws
    return _judge(RunRequest(_config_name(config), _target_items(target), Selection(case_ids=(case.id,)),
                             Judging(valid_checks(checks), rtol, atol, strict_contracts), families, workers=1,
                             in_process=_in_process(in_process), cases=(case,),
                             unshipped_families=tuple(lost_families)))


def sweep(targets: Any, *, cases: int | None = None, seed: int | None = None, config: str = "ci",
          checks: Iterable[str] | None = None, workers: int = 1, rtol: float | None = None,
          atol: float | None = None, in_process: bool | None = None, strict_contracts: bool | None = None,
          **narrowing: Any) -> Run:
    """Judge ``targets`` on ``cases`` cases drawn from a profile; a :class:`Run` with its verdict.

    ``narrowing`` narrows the draw, keyword for flag as ``gradcheck-rnn sweep`` does (the table
    :data:`gradcheck_rnn.model.narrowing.KNOBS`, listed in docs/contracts.md): ``modes``, ``layers``,
    ``bidirectional`` and ``dtypes`` (``--mode``, ``--layers``, ``--[uni|bi]directional``,
    ``--dtype``); ``projections``, ``bias``, ``initial_state``, ``zero_length``, ``long_memory``,
    ``packed_tail`` (True: every case has it, False: none); ``wants``, ``heads`` and ``lengths``
    (gradient requests, head-gradient variants and length patterns kept); ``input_size``,
    ``hidden_size``, ``max_len`` and ``batch_size`` (a size, ``(min, max)`` or ``"min..max"``);
    ``family_options``, a family's own options kept at these values, e.g. ``{"gated": True,
    "heads": (1, 2)}`` (``--family-option``); ``kernel_config``, the kernel configurations every case
    names, e.g. ``{"chunk": (4, 8)}`` (``--kernel-config``). An unknown keyword is a UsageError naming the known ones.

    ``strict_contracts`` (None: the profile's ``[checks] strict_contracts``) makes out-of-contract
    rows fail the run (docs/contracts.md, "Target contracts").

    Judged in ``workers`` worker processes (isolated, as ``check``; ``in_process=True`` for a
    debugger). Each worker process resolves the targets by name, so a target object judged there
    must be importable as ``module:qualname`` (defined at module level); one that is not is judged
    in this process with ``workers=1``.
    """
    from .model.profiles import load_profile
    from .model.narrowing import Narrowing
    from .run import Judging, Selection
    from .run.plan import RunRequest

    drawn = Narrowing.build(**narrowing)
    profile = load_profile(_config_name(config))
    families, lost_families = _user_families(drawn.modes or profile.modes)
    return _judge(RunRequest(_config_name(config), _target_items(targets),
                             Selection(cases=cases, seed=seed, narrowing=drawn),
                             Judging(valid_checks(checks), rtol, atol, strict_contracts), families, workers=workers,
                             in_process=_in_process(in_process), unshipped_families=tuple(lost_families),
                             profile=profile))
