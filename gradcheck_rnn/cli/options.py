"""The command line's shared options, and how their values become a run request
(:class:`~gradcheck_rnn.run.plan.RunRequest`), which :func:`~gradcheck_rnn.run.plan.plan` turns
into the run: the command line builds no spec or execution itself.

Heavy imports (torch, jax) happen only when a command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable

import click

from ..judging.checks import check_names
from ..model.profiles import profile_names
from ..model.rnn_config import DTYPES, HEADS, WANTS_GROUPS
from ..errors import UsageError, unknown_name
from ..model.narrowing import KNOBS, SHAPE_KNOBS, Knob, Narrowing
from ..run import EXECUTORS
from ..runtime import IN_PROCESS_ENV

if TYPE_CHECKING:
    from ..run.plan import Plan, RunRequest


def options(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply several click options as one decorator, in the order written."""
    def apply(func: Any) -> Any:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def _load_families(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> tuple[str, ...]:
    """--family's callback: load each family at once (an eager option), so that --mode and case ids
    that name it are read after it; a family that cannot be loaded is a usage error."""
    from ..families import load_all

    try:
        load_all(specs)
    except UsageError as exc:  # the sentence names --family's value already
        raise click.UsageError(str(exc), ctx) from None
    return tuple(specs)


class ModeType(click.ParamType):
    """A mode token, checked when it is read against every family known then (built-in, installed,
    or loaded by an earlier --family), so that a user family's token is a valid --mode."""

    name = "mode"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from ..families import modes

        if value not in modes():
            raise click.UsageError(str(unknown_name("mode", value, modes(), "a family's token, built in or loaded "
                                                                             "with --family")), ctx)
        return value


family = click.option(
    "--family", "families", multiple=True, metavar="MODULE:NAME", is_eager=True, callback=_load_families,
    help="Load a cell family defined outside the package (repeatable), e.g. my_cells:MINGRU, so that "
         "--mode and case ids can name its token; installed entry points of gradcheck_rnn.families "
         "need no flag.")
target = click.option(
    "--target", "-t", "targets", multiple=True, metavar="NAME",
    help="Target to check (repeatable): fused-cpu, torch-native, mutant:<name>, an entry point of "
         "gradcheck_rnn.targets, package.module:callable, or any of them @PYTHON. Default: every "
         "built-in target this machine runs.")
tolerances = options(
    click.option("--rtol", type=click.FloatRange(min=0), default=None,
                 help="Override the relative tolerance for every tensor (default: per dtype and tensor kind)."),
    click.option("--atol", type=click.FloatRange(min=0), default=None,
                 help="Override the absolute tolerance for every tensor (default: per dtype and tensor kind)."),
    click.option("--strict-contracts", is_flag=True, default=None,
                 help="Fail the run on out-of-contract results: what a target does on a case outside a "
                      "precondition its library documents (default: shown and counted, exit 0; the profile's "
                      "[checks] strict_contracts)."),
)
check = click.option(
    "--check", "checks", multiple=True, type=click.Choice([*check_names(), "all"]), default=("reference",),
    show_default=True,
    help="What to run (repeatable): the comparison with the float64 references, or a reference-free check.")
only_checks = click.option(
    "--check", "checks", multiple=True, type=click.Choice(check_names()),
    help="Only these checks (repeatable; default: the profile's), e.g. to see what the reference "
         "comparison alone catches or to soak one check.")
fmt = click.option(
    "--format", "fmt", type=click.Choice(["auto", "console", "github"]), default="auto", show_default=True,
    help="github: also print an ::error annotation per failing case (worst 10) and append a markdown "
         "summary to $GITHUB_STEP_SUMMARY; auto: github when GITHUB_ACTIONS=true.")
config = click.option("--config", "-c", "config", default=None, metavar="PROFILE",
                      help=f"Sweep profile: a TOML file, or a name in configs/ ({', '.join(profile_names())}). "
                           f"Default: ci.")
tolerance_profile = click.option(
    "--config", "-c", "config", default=None, metavar="PROFILE",
    help=f"Profile whose tolerances apply, as in the sweep that found the case: a TOML file, or a name in configs/ "
         f"({', '.join(profile_names())}). Default: ci.")
report_dir = click.option(
    "--report-dir", type=click.Path(file_okay=False), default="reports", show_default=True,
    help="Folder that receives <run>/results.json, junit.xml, report.md and report.html; "
         "<dir>/latest names the newest run.")
cases_and_seed = options(
    click.option("--cases", "-n", type=click.IntRange(min=1), default=None,
                 help="Number of cases (default: the profile's)."),
    click.option("--seed", "-s", type=click.IntRange(min=0), default=None, help="Sweep seed (default: the profile's)."),
)
detection_cases_and_seed = options(
    click.option("--cases", "-n", type=click.IntRange(min=1), default=None,
                 help="Number of cases of each profile: without --config, the first N cases of each mutant's "
                      "home profile (ci for cuDNN's cells, families for s6, slstm and conv1d, matrix for the matrix-memory "
                      "families), N of each; "
                      "with --config, N of that profile (default: each profile's own count)."),
    click.option("--seed", "-s", type=click.IntRange(min=0), default=None,
                 help="Sweep seed of every profile drawn (default: each profile's own)."),
)
class SizeRange(click.ParamType):
    """A size or a range of sizes, ``4`` or ``2..5``, as (min, max)."""

    name = "MIN..MAX"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        from ..model.narrowing import parse_range

        if isinstance(value, tuple):
            return value
        try:
            return parse_range(value, "")
        except UsageError as exc:
            self.fail(str(exc).lstrip(), param, ctx)


def knob_option(knob: Knob) -> Callable[[Any], Any]:
    """The click option of one narrowing knob (gradcheck_rnn/model/narrowing.py's table), its value under
    the knob's field name: what :func:`narrowing_of` reads back."""
    if knob.kind == "switch":
        return click.option(f"--{knob.flag}/--{knob.negative}", knob.field, default=None, help=knob.help)
    if knob.kind == "count":
        return click.option(f"--{knob.flag}", knob.field, type=click.IntRange(min=1), default=None, help=knob.help)
    if knob.kind == "range":
        return click.option(f"--{knob.flag}", knob.field, type=SizeRange(), default=None, help=knob.help)
    names = {"modes": ModeType(), "names": click.Choice(knob.choices)}.get(knob.kind)  # None: NAME=VALUE text
    return click.option(f"--{knob.flag}", knob.field, multiple=True, type=names,
                        metavar="NAME=VALUE" if knob.kind in ("options", "configs") else None, help=knob.help)


# The shape of the draw (sweep and mutants), and what a target takes (sweep): each intersects the profile.
draw = options(family, *(knob_option(knob) for knob in SHAPE_KNOBS))
narrowing = options(*(knob_option(knob) for knob in KNOBS if knob not in SHAPE_KNOBS))
isolation = options(
    click.option("--workers", "-j", type=click.IntRange(min=1), default=None, envvar="GRADCHECK_RNN_WORKERS",
                 help="Worker processes that judge, each on one torch/BLAS thread (default: one per idle core, "
                      "at most one per 100 cases; $GRADCHECK_RNN_WORKERS)."),
    click.option("--case-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
                 help="Stop a target still running one check of one case after SECONDS; that row is an error."),
    click.option("--in-process", is_flag=True, envvar=IN_PROCESS_ENV,
                 help="Judge in this process, for a debugger or profiler ($GRADCHECK_RNN_IN_PROCESS=1). Not "
                      "isolated: a target that exits or crashes ends the command."),
)
distribution = options(
    click.option("--shard", default=None, metavar="K/N",
                 help="Judge only the K-th of N interleaved parts of the cases; join the N runs with "
                      "gradcheck-rnn merge."),
    # the executors and the options each owns, from their entries (gradcheck_rnn/run: EXECUTORS)
    click.option("--executor", type=click.Choice(list(EXECUTORS)), default="local", show_default=True,
                 help="; ".join(f"{entry.name}: {entry.help}" for entry in EXECUTORS.values()) + "."),
    *(click.option(f"--{option.name}", default=None, metavar=option.metavar, help=option.help)
      for entry in EXECUTORS.values() for option in entry.options),
)

# The options of `check` that describe a case (case_from_options' keywords, then its two others);
# --case-id replaces them all.
CASE_FLAGS = ("mode", "layers", "bidirectional", "input_size", "hidden_size", "lengths", "max_len", "dtype", "seed",
              "wants", "heads", "family_options", "no_initial_state")
case_flags = options(
    family,
    click.option("--case-id", default=None, help="Build the case from its id instead of the flags below."),
    click.option("--mode", type=ModeType(), default="lstm", show_default=True),
    click.option("--layers", type=click.IntRange(min=1), default=1, show_default=True),
    click.option("--bidirectional/--unidirectional", default=False, show_default=True),
    click.option("--input-size", type=click.IntRange(min=1), default=3, show_default=True),
    click.option("--hidden-size", type=click.IntRange(min=1), default=4, show_default=True),
    click.option("--lengths", default="5,3,1", show_default=True,
                 help="Sequence lengths, comma-separated; batch size = their count, T = their max unless --max-len."),
    click.option("--max-len", type=click.IntRange(min=1), default=None,
                 help="T, the padded length (default: max of --lengths)."),
    click.option("--dtype", type=click.Choice(DTYPES), default="f64", show_default=True),
    click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Data seed."),
    click.option("--wants", type=click.Choice(WANTS_GROUPS), default="all", show_default=True,
                 help="Which gradients are requested: all, inputs (frozen weights), x, params (frozen inputs)."),
    click.option("--heads", type=click.Choice(HEADS), default="all", show_default=True,
                 help="Which head gradients are non-zero: all, y, states, last."),
    click.option("--no-initial-state", is_flag=True, help="Omit h0/c0: the target takes its own zero-state path."),
    click.option("--family-option", "family_options", multiple=True, metavar="NAME=VALUE",
                 help="A cell family's own option for the case (repeatable), written as sweep takes it, e.g. "
                      "--mode gla --family-option heads=2 --family-option key_width=3; a required option left "
                      "out takes its example value (gla: key_width=2, decay_rank=1; s6: state_dim=2, dt_rank=1)."),
)


def case_of(values: dict[str, Any]) -> str:
    """The case id that ``check``'s flags describe (:data:`CASE_FLAGS`); a --family-option given as a
    range is a UsageError, since one case has one value."""
    from ..model.case import case_from_options
    from ..model.narrowing import parse_family_options

    options = dict(parse_family_options(values["family_options"]))
    for name, value in options.items():
        if isinstance(value, tuple) and value[0] != value[1]:
            raise UsageError(f"--family-option {name}={value[0]}..{value[1]} is a range, and check builds one case; "
                             f"give one value, e.g. {name}={value[0]}")
    options = {name: value if isinstance(value, bool) else value[0] for name, value in options.items()}
    return case_from_options(**{name: values[name] for name in CASE_FLAGS[:-2]}, options=options,
                             initial_state=not values["no_initial_state"]).id
against_runs = options(
    click.option("--baseline", default=None, metavar="RUN_DIR",
                 help="Compare each passing row with this stored run's (a run folder, <report dir>/latest or a "
                      "report dir): a ratio that grew past --drift-factor makes the row 'drifted'."),
    click.option("--drift-factor", type=click.FloatRange(min=1, min_open=True), default=None,
                 help="Growth of a tensor's ratio since the baseline that counts as drift (default: 4); ratios "
                      "ending at or below 0.01 never drift."),
    click.option("--fail-on-drift", is_flag=True, help="Exit 1 on a drifted row (default: the verdict line warns)."),
    click.option("--last-failed", is_flag=True,
                 help="Judge again exactly the rows that did not pass in the latest run of --report-dir (with its "
                      "profile and seed; with --target, on those targets instead); the run is named a rerun of it. "
                      "Exit 5 when nothing failed there."),
)
# sweep options that choose what is judged, which --last-failed takes from the stored run instead
# (not --target: with it, the stored run's failing rows are judged on those targets)
LAST_FAILED_CONFLICTS = {"config": "--config", "cases": "--cases", "seed": "--seed",
                         **{knob.field: knob.usage for knob in KNOBS}, "rtol": "--rtol", "atol": "--atol",
                         "shard": "--shard", "checks": "--check"}


def narrowing_of(values: dict[str, Any]) -> Narrowing:
    """The :class:`~gradcheck_rnn.model.narrowing.Narrowing` of a command's option values (a knob the
    command does not have keeps the profile's draw)."""
    return Narrowing.build(**{knob.field: values.get(knob.field) for knob in KNOBS})


def judging_of(values: dict[str, Any], checks: tuple[str, ...] | None = None) -> Any:
    """How a command judges: ``checks`` (None: the profile's) with its --rtol, --atol and
    --strict-contracts (absent: the profile's)."""
    from ..run import Judging

    return Judging(checks, values.get("rtol"), values.get("atol"), values.get("strict_contracts") or None)


def one_case(case_id: str) -> Any:
    """The selection of a command on one named case (check, repro, shrink)."""
    from ..run import Selection

    return Selection(case_ids=(case_id,))


def selection_of(values: dict[str, Any]) -> Any:
    """The cases a drawing command's option values choose: --cases, --seed, the narrowing flags, --shard."""
    from ..run import Selection, parse_shard

    return Selection(cases=values.get("cases"), seed=values.get("seed"), narrowing=narrowing_of(values),
                     shard=parse_shard(values.get("shard")))


def load_baseline(values: dict[str, Any]) -> Any:
    """The sweep's :class:`~gradcheck_rnn.workflows.baseline.Baseline`, or None without ``--baseline``."""
    from ..workflows.baseline import DRIFT_FACTOR, Baseline

    if values["baseline"] is None:
        given = [flag for flag, value in (("--drift-factor", values["drift_factor"]),
                                          ("--fail-on-drift", values["fail_on_drift"])) if value]
        if given:
            raise UsageError(f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} a baseline to compare "
                             f"with; add --baseline RUN_DIR")
        return None
    return Baseline.load(values["baseline"], values["drift_factor"] or DRIFT_FACTOR, values["fail_on_drift"])


def compare_baseline(baseline: Any, spec: Any) -> None:
    """Refuse a baseline whose ratios this run cannot be compared with (UsageError); print the
    note of one judged with another profile (:meth:`~gradcheck_rnn.workflows.baseline.Baseline.refuse_incomparable`)."""
    from .commands import err, say

    if note := baseline.refuse_incomparable(spec):
        say(err, note)


def build_sweep(values: dict[str, Any], baseline: Any = None) -> Plan:
    """:func:`build_run` for ``sweep``; with ``--last-failed`` a run of the named cases that did
    not pass in the report folder's latest run (exit 5 with a note when there are none). A
    ``baseline`` that cannot be compared with the run is refused before its header is printed."""
    def refuse(spec: Any) -> None:
        if baseline is not None:
            compare_baseline(baseline, spec)

    if not values["last_failed"]:
        return build_run(values, judging=judging_of(values, values.get("checks") or None), before_header=refuse)
    from .commands import err, say
    from ..workflows.rerun import last_failed
    from ..run import Judging, Selection

    given = [flag for name, flag in LAST_FAILED_CONFLICTS.items() if values.get(name) not in (None, ())]
    if given:
        flags = ", ".join(given)
        raise UsageError(f"--last-failed judges what the latest run judged and did not pass, so {flags} cannot "
                         f"be given with it; drop them or drop --last-failed")
    failed = last_failed(values["report_dir"], values["targets"])
    if not failed.case_ids:
        say(err, f"nothing to rerun: every row of {failed.run_dir} passed or was skipped")
        sys.exit(5)
    where = f" (there: {', '.join(failed.failed_on)})" if failed.targets != failed.failed_on else ""
    say(err, f"rerunning the {len(failed.rows)} rows that did not pass in {failed.run_dir}: {len(failed.case_ids)} "
             f"cases on {', '.join(failed.targets)}{where} ({', '.join(failed.checks)}), seed {failed.spec.seed}")
    selection = Selection(seed=failed.spec.seed, case_ids=failed.case_ids, only=failed.rows,
                          rerun_of=failed.run_dir.name)
    return build_run({**values, "config": failed.spec.config}, selection,
                     Judging(failed.checks, failed.spec.rtol, failed.spec.atol, failed.spec.strict_contracts),
                     failed.targets, failed.spec.families, before_header=refuse)


def expand_checks(checks: tuple[str, ...]) -> tuple[str, ...]:
    """``--check all`` is every check; otherwise the checks named, once each, in order."""
    return check_names() if "all" in checks else tuple(dict.fromkeys(checks))


def request_of(values: dict[str, Any], selection: Any = None, judging: Any = None, targets: Any = None,
               families: Any = None, per_case: int = 1, verdict: Any = None) -> RunRequest:
    """The run request of a judging command's option values (``values``: click's keyword
    arguments): what the command sets itself replaces what the values say: ``selection``
    (default: the draw of --cases, --seed, the narrowing flags and --shard), ``judging`` (default:
    the profile's checks, --rtol and --atol), ``targets`` and ``families`` (default: --target and
    --family); ``per_case`` and ``verdict``: see :class:`~gradcheck_rnn.run.plan.RunRequest`."""
    from ..families import load_all
    from ..run.plan import RunRequest

    families = tuple(values.get("families", ()) if families is None else families)
    load_all(families)  # before the narrowing names their tokens (--last-failed's stored families)
    return RunRequest(config=values.get("config"),
                      targets=tuple(values.get("targets", ()) if targets is None else targets),
                      selection=selection_of(values) if selection is None else selection,
                      judging=judging_of(values) if judging is None else judging, families=families,
                      workers=values.get("workers"), executor=values.get("executor", "local"),
                      executor_options=tuple((option.name, values.get(option.name)) for entry in EXECUTORS.values()
                                             for option in entry.options if values.get(option.name) is not None),
                      case_timeout=values.get("case_timeout"),
                      fail_fast=values.get("fail_fast", False), in_process=values.get("in_process", False),
                      per_case=per_case, command_line=True, verdict=verdict)


def build_run(values: dict[str, Any], selection: Any = None, judging: Any = None, targets: Any = None,
              families: Any = None, header: bool = False, before_header: Callable[[Any], None] | None = None,
              per_case: int = 1, verdict: Any = None) -> Plan:
    """The plan of a judging command (:func:`~gradcheck_rnn.run.plan.plan` of :func:`request_of`),
    and its header line on stderr: a drawn run's always, a run of named cases' only with
    ``header``, after ``before_header`` had the spec to refuse (so that a refusal comes before
    any "judging …")."""
    from ..run.plan import plan

    planned = plan(request_of(values, selection, judging, targets, families, per_case, verdict))
    if before_header is not None:
        before_header(planned.spec)
    if header or not planned.spec.case_ids:  # a sweep's header line; a command on one named case needs none
        announce(planned)
    return planned


def build_detection_run(values: dict[str, Any], mutants: tuple[str, ...]) -> Plan:
    """``mutants``: the plan of a detection run, its verdict the detection rule's
    (:class:`~gradcheck_rnn.workflows.detection.DetectionRule`). Without --config every mutant is
    judged on the cases of its home profile (:func:`~gradcheck_rnn.workflows.detection.home_cases`), all in
    one run of named cases under the ci profile's checks and tolerances; with --config, every
    mutant on that profile's cases, narrowed as a sweep's by --mode, --layers, --bidirectional and
    --dtype. Unknown mutant names are a UsageError before any case runs."""
    from ..targets.mutant_names import check_mutant_name

    for name in mutants:  # a typo is refused before the kernels' imports (torch)
        check_mutant_name(name)
    narrowed = [knob.usage for knob in SHAPE_KNOBS if values.get(knob.field) not in (None, ())]
    if narrowed and values.get("config") is None:
        raise UsageError(f"{' and '.join(narrowed)} {'narrows' if len(narrowed) == 1 else 'narrow'} one profile's "
                         f"draw: name it, e.g. -c families --mode s6")
    from ..workflows.detection import DetectionRule, detection_targets, home_cases, left_out
    from ..run import Selection

    mutant_names, correct_names = detection_targets(mutants)
    not_judged = left_out(mutants)
    targets = tuple(mutant_names + correct_names)
    judging = judging_of(values, values["checks"] or None)
    # the correct kernels make a sweep's case, and each mutant one more: a second worker pays at far
    # fewer cases than a sweep's (without this, the default run of 120 cases × 42 targets took one)
    per_case = 1 + len(mutant_names)
    if values.get("config") is not None:
        rule = DetectionRule(tuple(mutant_names), tuple(correct_names), bool(mutants), left_out=tuple(not_judged))
        return build_run(values, judging=judging, targets=targets, per_case=per_case, verdict=rule)
    case_ids, drawn = home_cases(mutant_names, values.get("cases"), values.get("seed"))
    rule = DetectionRule(tuple(mutant_names), tuple(correct_names), True, tuple(drawn), tuple(not_judged))
    return build_run(values, Selection(seed=values.get("seed"), case_ids=case_ids), judging, targets, header=True,
                     per_case=per_case, verdict=rule)


def announce(planned: Plan) -> None:
    """The run's header on stderr (:meth:`~gradcheck_rnn.run.plan.Plan.header`), wrapped at 80 columns."""
    from .commands import err
    from ..reports.console import print_lines, wrapped

    print_lines(err, wrapped(planned.header(), indent="", hanging="  "))  # no case id in it


def usage_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UsageError anywhere below a command into one sentence and exit 2."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .commands import print_error

        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            print_error(str(exc))
            sys.exit(2)

    return wrapper
