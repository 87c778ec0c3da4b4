"""The public Python API (docs/contracts.md, "Public API"): ``check`` one case, ``sweep`` many.

    import gradcheck_rnn as gr

    results = gr.check("fused-cpu", "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx", checks=["reference", "future"])
    run = gr.sweep([my_target], cases=50, modes=["lstm"])
    assert run.exit_code == 0, run.reason

Both judge through the same engine as the command line (:func:`gradcheck_rnn.judge.judge`, the
run spec and its executors) and set up the process the same way (:mod:`gradcheck_rnn.runtime`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .case import Case
from .errors import UsageError
from .result import CaseResult, Run, repro_options


def _targets(targets: Any) -> list:
    """One target or a list of them (specs or objects), resolved."""
    from .targets import resolve_targets

    return resolve_targets(targets if isinstance(targets, (list, tuple)) else [targets])


def _config_name(config: Any) -> str | None:
    """The profile as a repro command names it: None for the default ci profile."""
    text = None if config is None else str(config)
    return None if text == "ci" else text


def valid_checks(checks: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """The checks asked for, or None for the profile's; UsageError naming the allowed ones."""
    from .checks import ALL_CHECKS

    if checks is None:
        return None
    chosen = [checks] if isinstance(checks, str) else list(checks)
    unknown = [c for c in chosen if c not in ALL_CHECKS]
    if unknown or not chosen:
        raise UsageError(f"checks={chosen!r} is not allowed; give one or more of {', '.join(ALL_CHECKS)}")
    return tuple(dict.fromkeys(chosen))


def check(target: Any, case: Case | str, *, checks: Iterable[str] | None = None, rtol: float | None = None,
          atol: float | None = None, config: str = "ci") -> list[CaseResult]:
    """Judge ``target`` (a target spec such as ``"fused-cpu"``, or a target object) on one case (a
    :class:`Case` or a case id) with the named checks (default: the profile's); one row per check."""
    from .generate import load_profile
    from .judge import judge
    from .runtime import set_up_process

    set_up_process()
    case = Case.from_id(case) if isinstance(case, str) else case
    profile = load_profile(config)
    chosen = valid_checks(checks) or tuple(profile.enabled_checks)
    # per-kind overrides (emitted tests) have no command-line form: the repro line names the profile
    options = repro_options(_config_name(config), *(None if isinstance(v, dict) else v for v in (rtol, atol)))
    results = list(judge(case, _targets(target), profile.tolerance_table(rtol, atol), chosen))
    for result in results:
        result.repro_options = options
    return results


def sweep(targets: Any, *, cases: int | None = None, seed: int | None = None, config: str = "ci",
          modes: Sequence[str] | None = None, layers: int | None = None, bidirectional: bool | None = None,
          dtypes: Sequence[str] | None = None, checks: Iterable[str] | None = None, workers: int = 1,
          rtol: float | None = None, atol: float | None = None) -> Run:
    """Judge ``targets`` on ``cases`` cases drawn from a profile; a :class:`Run` with its verdict.

    With ``workers`` > 1 each worker process resolves the targets by name, so a target object
    must be importable as ``module:qualname`` (defined at module level).
    """
    from .run import Execution, RunSpec, judge_run
    from .runtime import set_up_process

    set_up_process()
    resolved = _targets(targets)
    if workers > 1:
        lost = [t.name for t in resolved if not t.importable]
        if lost:
            raise UsageError(f"workers={workers} judges in other processes, which import each target by name, "
                             f"and {', '.join(lost)} is not importable as module:qualname; define it at module "
                             f"level or use workers=1")
    spec = RunSpec.build(_config_name(config), cases, seed, tuple(resolved), checks=valid_checks(checks),
                         rtol=rtol, atol=atol, modes=tuple(modes or ()), layers=layers,
                         bidirectional=bidirectional, dtypes=tuple(dtypes or ()))
    return judge_run(spec, Execution(workers=workers), targets=resolved)
