"""The ``gradcheck-rnn`` command line: a thin click layer over the library API.

Every judging command exits 0 when all pass (skips allowed), 1 on any fail, error or
reference disagreement, and 2 on bad usage (one sentence on stderr, nothing run, no report).
Heavy imports (torch, jax) happen only when a command runs, so ``--help`` is fast.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from .config import DTYPES, HEADS, MODES, WANTS_GROUPS
from .config import CHECK_NAMES as ALL_CHECKS
from .errors import UsageError
from .result import repro_options


def usage_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Set up the process, then turn a UsageError anywhere below a command into one sentence and exit 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .console import print_error

        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            print_error(str(exc))
            sys.exit(2)

    return wrapper


def _resolve_targets(names: tuple[str, ...]):
    from .targets import default_targets, resolve_targets

    return resolve_targets(names) if names else default_targets()


target_option = click.option(
    "--target", "-t", "targets", multiple=True, metavar="NAME",
    help="Target to check (repeatable): fused-cpu, torch-native, mutant:<name>, an entry point of "
         "gradcheck_rnn.targets, or package.module:callable. Default: every built-in target this machine runs.")
tolerance_options = [
    click.option("--rtol", type=click.FloatRange(min=0), default=None,
                 help="Override the relative tolerance for every tensor (default: per dtype and tensor kind)."),
    click.option("--atol", type=click.FloatRange(min=0), default=None,
                 help="Override the absolute tolerance for every tensor (default: per dtype and tensor kind)."),
]
check_option = click.option(
    "--check", "checks", multiple=True, type=click.Choice([*ALL_CHECKS, "all"]),
    default=("reference",), show_default=True,
    help="What to run (repeatable): the comparison with the float64 references, or a reference-free check.")


def _expand_checks(checks: tuple[str, ...]) -> list[str]:
    return list(ALL_CHECKS) if "all" in checks else list(dict.fromkeys(checks))


format_option = click.option(
    "--format", "fmt", type=click.Choice(["auto", "console", "github"]), default="auto", show_default=True,
    help="github: also print an ::error annotation per failing case (worst 10) and append a markdown "
         "summary to $GITHUB_STEP_SUMMARY; auto: github when GITHUB_ACTIONS=true.")
config_option = click.option("--config", "-c", "config", default=None, metavar="PROFILE",
                             help="Sweep profile: a TOML file, or a name in configs/ (ci, nightly, soak, half, interp, gpu). Default: ci.")


case_timeout_option = click.option(
    "--case-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
    help="Judge in a worker process and stop a target still running one check after SECONDS "
         "(that row is an error), as the sweep that found the case did.")


def with_tolerances(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(tolerance_options):
        func = option(func)
    return func


class OneLineErrors(click.Group):
    """click's usage errors in the project's one style: ``error: <one sentence>`` and exit 2
    (click's own is four lines: Usage, Try, blank, Error)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            from .console import print_error

            command = exc.ctx.command_path if exc.ctx is not None else "gradcheck-rnn"
            message = exc.format_message().rstrip(".")
            print_error(f"{message} See '{command} --help'." if message.endswith("?")
                        else f"{message}; see '{command} --help'")
            sys.exit(2)
        except click.ClickException as exc:
            from .console import print_error

            print_error(exc.format_message())
            sys.exit(exc.exit_code)
        except click.Abort:
            from .console import print_error

            print_error("aborted")
            sys.exit(1)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gradcheck-rnn")
def main() -> None:
    """Prove or disprove that the gradients of fused RNN kernels are right.

    Every case (config, lengths, data, requested gradients) is named by a case id such as
    lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273 that rebuilds it bit for bit. Targets are
    compared, output by output and gradient by gradient, against two independent float64
    references (one sample at a time, and JAX autodiff over the padded batch).

    \b
    Start with:
      gradcheck-rnn sweep                      # the default CI sweep of every built-in target
      gradcheck-rnn repro <case id> -t <name>  # one failing case, error per time step
      gradcheck-rnn targets                    # what can be checked here
    """


draw_options = [
    click.option("--mode", "modes", multiple=True, type=click.Choice(MODES),
                 help="Draw only these modes (repeatable; default: the profile's)."),
    click.option("--layers", type=click.IntRange(min=1), default=None, help="Draw only this many layers."),
    click.option("--bidirectional/--unidirectional", "bidirectional", default=None,
                 help="Draw only bidirectional or only unidirectional configs."),
    click.option("--dtype", "dtypes", multiple=True, type=click.Choice(DTYPES),
                 help="Draw only these dtypes (repeatable; default: the profile's)."),
]


def with_draw_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(draw_options):
        func = option(func)
    return func


execution_options = [
    click.option("--workers", "-j", type=click.IntRange(min=1), default=None, envvar="GRADCHECK_RNN_WORKERS",
                 help="Worker processes, each on one torch/BLAS thread (default: the number of cores; "
                      "$GRADCHECK_RNN_WORKERS). 1 judges in this process."),
    click.option("--shard", default=None, metavar="K/N",
                 help="Judge only the K-th of N interleaved parts of the cases; join the N runs with "
                      "gradcheck-rnn merge."),
    click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
                 help="local: --workers processes here; dask: the cluster at --scheduler (extra: dask)."),
    click.option("--scheduler", default=None, metavar="ADDRESS", help="The Dask scheduler, e.g. tcp://10.0.0.5:8786."),
    click.option("--case-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
                 help="With worker processes: a target still running one check of one case after SECONDS "
                      "is stopped, and that row is an error."),
]


def with_execution_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(execution_options):
        func = option(func)
    return func


@main.command()
@config_option
@click.option("--cases", "-n", type=click.IntRange(min=1), default=None, help="Number of cases (default: the profile's).")
@click.option("--seed", "-s", type=click.IntRange(min=0), default=None, help="Sweep seed (default: the profile's).")
@target_option
@with_draw_options
@with_tolerances
@click.option("--report-dir", type=click.Path(file_okay=False), default="reports", show_default=True,
              help="Folder that receives <run>/results.json, junit.xml, report.md and report.html; "
                   "<dir>/latest names the newest run.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first case × target that does not pass.")
@with_execution_options
@format_option
@usage_errors
def sweep(config: str | None, cases: int | None, seed: int | None, targets: tuple[str, ...],
          modes: tuple[str, ...], layers: int | None, bidirectional: bool | None, dtypes: tuple[str, ...],
          rtol: float | None, atol: float | None, report_dir: str, fail_fast: bool, workers: int | None,
          shard: str | None, executor: str, scheduler: str | None, case_timeout: float | None, fmt: str) -> None:
    """Draw random cases from a profile and judge every target on each.

    Prints a summary per target (by mode and by wants group), then the failures (failing cases
    first, each with its case id and repro command) and writes the reports. Exit 0 when all
    pass, 1 on any fail/error/disagreement, 2 on bad usage, 5 when nothing was checked (every
    result skipped, or a target named with --target judged on no case).

    \b
    Examples:
      gradcheck-rnn sweep                                  # ci profile, every built-in target
      gradcheck-rnn sweep -c nightly -n 200 -s 7 -t fused-cpu
      gradcheck-rnn sweep -t my_pkg.rnn:target --mode gru --layers 1 --unidirectional
      gradcheck-rnn sweep -t my_pkg.rnn:target --rtol 1e-3 --fail-fast
      gradcheck-rnn sweep -c nightly --workers 8 --case-timeout 60
      gradcheck-rnn sweep -c nightly --shard 2/3 --report-dir shard-2
      gradcheck-rnn sweep --executor dask --scheduler tcp://10.0.0.5:8786
    """
    from .console import judge_and_report
    from .run import Execution, RunSpec, default_workers, parse_shard, start_pool_early

    shard_range = parse_shard(shard)
    planned = RunSpec.count_cases(config, cases, shard_range)
    execution = Execution(workers=workers or default_workers(planned, isolate=case_timeout is not None),
                          executor=executor, scheduler=scheduler,
                          case_timeout=case_timeout, fail_fast=fail_fast)
    execution.validate()
    start_pool_early(execution)
    spec = RunSpec.build(config, cases, seed, targets, rtol=rtol, atol=atol, modes=modes, layers=layers,
                         bidirectional=bidirectional, dtypes=dtypes, shard=shard_range)
    sys.exit(judge_and_report(spec, execution, "sweep", report_dir, fmt))


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, metavar="DIR...")
@click.option("--report-dir", type=click.Path(file_okay=False), default="reports", show_default=True,
              help="Folder that receives the merged <run>/results.json and reports; <dir>/latest names it.")
@format_option
@usage_errors
def merge(run_dirs: tuple[str, ...], report_dir: str, fmt: str) -> None:
    """Join the shards of one run (sweep --shard K/N) into the whole run: tables, reports, exit code.

    The merged run equals the unsharded run (same rows, same exit code). DIR is a shard's run
    folder or its report folder (its latest run). Refused with exit 2: a folder that is not a
    shard, shards of different runs (profile, seed, cases, targets, ...), a shard missing or given
    twice, a shard stopped by --fail-fast.

    \b
    Examples:
      gradcheck-rnn merge shard-1 shard-2 shard-3 --report-dir reports
    """
    from .console import report_merged

    sys.exit(report_merged(list(run_dirs), report_dir, fmt))


# The options of `check` that describe a case; --case-id replaces them all.
CASE_FLAGS = ("mode", "layers", "bidirectional", "input_size", "hidden_size", "lengths", "max_len", "dtype", "seed",
              "wants", "heads", "no_initial_state")


@main.command()
@click.option("--case-id", default=None, help="Build the case from its id instead of the flags below.")
@click.option("--mode", type=click.Choice(MODES), default="lstm", show_default=True)
@click.option("--layers", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--bidirectional/--unidirectional", default=False, show_default=True)
@click.option("--input-size", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--hidden-size", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--lengths", default="5,3,1", show_default=True,
              help="Sequence lengths, comma-separated; batch size = their count, T = their max unless --max-len.")
@click.option("--max-len", type=click.IntRange(min=1), default=None, help="T, the padded length (default: max of --lengths).")
@click.option("--dtype", type=click.Choice(DTYPES), default="f64", show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Data seed.")
@click.option("--wants", type=click.Choice(WANTS_GROUPS), default="all", show_default=True,
              help="Which gradients are requested: all, inputs (frozen weights), x, params (frozen inputs).")
@click.option("--heads", type=click.Choice(HEADS), default="all", show_default=True,
              help="Which head gradients are non-zero: all, y, states, last.")
@click.option("--no-initial-state", is_flag=True, help="Omit h0/c0: the target takes its own zero-state path.")
@target_option
@check_option
@with_tolerances
@case_timeout_option
@usage_errors
@click.pass_context
def check(ctx: click.Context, case_id: str | None, mode: str, layers: int, bidirectional: bool, input_size: int, hidden_size: int,
          lengths: str, max_len: int | None, dtype: str, seed: int, wants: str, heads: str,
          no_initial_state: bool, targets: tuple[str, ...], checks: tuple[str, ...], rtol: float | None, atol: float | None,
          case_timeout: float | None) -> None:
    """Build one case from flags (or --case-id) and print the full per-tensor table.

    \b
    Examples:
      gradcheck-rnn check --mode gru --layers 2 --bidirectional --lengths 7,4,1 --dtype f32
      gradcheck-rnn check --case-id gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx -t mutant:bptt-skipped-when-frozen
      gradcheck-rnn check --mode lstm --wants inputs --check all -t my_pkg.rnn:target
    """
    from .case import Case, case_from_options
    from .console import judge_case

    if case_id is not None:
        given = [f"--{name.replace('_', '-')}" for name in CASE_FLAGS
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise UsageError(f"--case-id names the whole case, so {', '.join(given)} cannot be given with it; "
                             f"drop {'it' if len(given) == 1 else 'them'} or drop --case-id")
        case = Case.from_id(case_id)
    else:
        case = case_from_options(mode, layers, bidirectional, input_size, hidden_size, lengths, max_len, dtype,
                                 seed, wants, heads, initial_state=not no_initial_state)
    sys.exit(judge_case(case, _resolve_targets(targets), _expand_checks(checks), None, rtol, atol, per_step=False,
                        named_targets=targets, case_timeout=case_timeout))


@main.command()
@click.argument("case_id")
@target_option
@check_option
@with_tolerances
@click.option("--config", "-c", "config", default=None, metavar="PROFILE",
              help="Profile whose tolerances apply (default: ci), as in the sweep that found the case.")
@click.option("--emit-test", "emit_test", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write a standalone pytest file that rebuilds this case and asserts the target "
                   "(exactly one --target) against the references, with these tolerances.")
@case_timeout_option
@usage_errors
def repro(case_id: str, targets: tuple[str, ...], checks: tuple[str, ...], rtol: float | None, atol: float | None,
          config: str | None, emit_test: str | None, case_timeout: float | None) -> None:
    """Re-run one case bit for bit from its id: per-tensor table and error per time step.

    A truncated-BPTT bug shows as errors that grow toward early time steps.

    \b
    Examples:
      gradcheck-rnn repro lstm-L1-uni-I1-H1-T2-B1-len2-f64-s918273 -t mutant:truncated-bptt
      gradcheck-rnn repro <case id> -t fused-cpu --emit-test tests/test_rnn_regression.py
    """
    from .case import Case
    from .console import judge_case

    case = Case.from_id(case_id)
    if emit_test is not None:
        _emit_test(case, targets, _expand_checks(checks), emit_test, config, rtol, atol)
    sys.exit(judge_case(case, _resolve_targets(targets), _expand_checks(checks), config, rtol, atol, per_step=True,
                        named_targets=targets, case_timeout=case_timeout))


def _emit_test(case, targets: tuple[str, ...], checks: list[str], path: str, config: str | None,
               rtol: float | None, atol: float | None) -> None:
    from .console import err, say
    from .generate import load_profile
    from .regression import emit_test, write_test

    if len(targets) != 1:
        raise UsageError(f"--emit-test needs exactly one --target, the target the test judges; got {len(targets)}")
    tolerances = load_profile(config).tolerance_table(rtol, atol)
    written = write_test(path, emit_test(case, targets[0], checks, tolerances, repro_options(config, rtol, atol)))
    say(err, f"regression test written to {written} (run it: python -m pytest {written})")


@main.command()
@click.argument("case_id")
@click.option("--target", "-t", "target", required=True, metavar="NAME", help="The target that fails on the case.")
@click.option("--check", "check", type=click.Choice(ALL_CHECKS), default="reference", show_default=True,
              help="The check whose failure is kept while shrinking.")
@click.option("--any-tensor", is_flag=True,
              help="Accept any failing tensor (default: the worst failing tensor of the start case must keep failing).")
@click.option("--max-steps", type=click.IntRange(min=1), default=300, show_default=True,
              help="Budget: how many candidate cases may be judged.")
@click.option("--json", "as_json", is_flag=True, help="Print the shrink path as JSON instead of a table.")
@with_tolerances
@click.option("--config", "-c", "config", default=None, metavar="PROFILE",
              help="Profile whose tolerances apply (default: ci), as in the sweep that found the case.")
@usage_errors
def shrink(case_id: str, target: str, check: str, any_tensor: bool, max_steps: int, as_json: bool,
           rtol: float | None, atol: float | None, config: str | None) -> None:
    """Shrink a failing case to the smallest case that fails the same way (same check, same tensor).

    Deterministic and greedy: fewer layers, unidirectional, fewer sequences, smaller T, shorter
    lengths, smaller I and H, then simpler variants and float64. Prints each accepted step and the
    minimal case's repro command. Exit 0 when shrunk, 1 when the case does not fail, 2 on bad usage.

    \b
    Examples:
      gradcheck-rnn shrink lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273 -t mutant:truncated-bptt
      gradcheck-rnn shrink <case id> -t my_pkg.rnn:target --check future --json
    """
    from .case import Case
    from .console import out, print_error, say
    from .generate import load_profile
    from .runtime import set_up_process
    from .shrink import DidNotReproduce, shrink as shrink_case, steps_lines
    from .targets import resolve_target

    case = Case.from_id(case_id)
    tolerances = load_profile(config).tolerance_table(rtol, atol)
    resolved = resolve_target(target)
    set_up_process()
    try:
        result = shrink_case(case, resolved, check, tolerances, any_tensor=any_tensor, max_steps=max_steps,
                             repro_options=repro_options(config, rtol, atol))
    except DidNotReproduce as exc:
        print_error(str(exc))
        sys.exit(1)
    if as_json:
        import json

        click.echo(json.dumps(result.to_json(), indent=2))
        return
    lines = steps_lines(result)
    if result.exhausted:
        lines.append(f"stopped after {result.tried} candidates (--max-steps {max_steps}); the case may shrink further")
    lines += [f"minimal case: {result.minimal.case_id} ({len(result.steps) - 1} steps, {result.tried} candidates "
              f"judged)", f"reproduce: {result.repro}"]
    for line in lines:  # unwrapped lines: a case id or a repro command is never cut
        say(out, line)


@main.command()
@config_option
@click.option("--cases", "-n", type=click.IntRange(min=1), default=None, help="Number of cases (default: the profile's).")
@click.option("--seed", "-s", type=click.IntRange(min=0), default=None, help="Sweep seed (default: the profile's).")
@click.option("--mutant", "-m", "mutants", multiple=True, metavar="NAME",
              help="Only these mutants (repeatable; default: every mutant).")
@click.option("--check", "checks", multiple=True,
              type=click.Choice(ALL_CHECKS),
              help="Only these checks (repeatable; default: the profile's), e.g. to see what the "
                   "reference comparison alone catches.")
@with_tolerances
@click.option("--report-dir", type=click.Path(file_okay=False), default="reports", show_default=True,
              help="Folder that receives <run>/results.json, junit.xml, report.md and report.html; "
                   "<dir>/latest names the newest run.")
@execution_options[0]
@usage_errors
def mutants(config: str | None, cases: int | None, seed: int | None, mutants: tuple[str, ...],
            checks: tuple[str, ...], rtol: float | None, atol: float | None, report_dir: str,
            workers: int | None) -> None:
    """Measure detection power: every mutant (a fused kernel with one historical bug) and the
    correct kernels on the same cases.

    Prints, per mutant, the cases run, the cases that caught it, the first catching case id and
    the check and tensor that caught it; then the correct kernels' false alarms. Exit 1 if any
    mutant survives or any false alarm occurs. Cases are judged in --workers processes, as in
    sweep.
    """
    from .console import judge_mutants
    from .detection import detection_targets
    from .run import Execution, RunSpec, default_workers, start_pool_early

    execution = Execution(workers=workers or default_workers())
    start_pool_early(execution)
    mutant_names, correct_names = detection_targets(mutants)  # unknown names: exit 2 before any case runs
    spec = RunSpec.build(config, cases, seed, tuple(mutant_names + correct_names), checks=checks or None,
                         rtol=rtol, atol=atol)
    sys.exit(judge_mutants(spec, execution, mutant_names, correct_names, report_dir))


@main.command()
@click.option("--target", "-t", "target", required=True, metavar="NAME", help="A target known to be correct.")
@config_option
@click.option("--cases", "-n", type=click.IntRange(min=1), default=None, help="Number of cases (default: the profile's).")
@click.option("--seed", "-s", type=click.IntRange(min=0), default=None, help="Sweep seed (default: the profile's).")
@click.option("--margin", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Safety factor between the worst error seen and the proposed tolerance.")
@usage_errors
def calibrate(target: str, config: str | None, cases: int | None, seed: int | None, margin: float) -> None:
    """Show how close a correct target comes to the references (error ratio under the current
    tolerances: median, p99, max, per dtype × tensor kind) and propose tolerances with a margin."""
    from .console import judge_calibration
    from .run import Execution, RunSpec, default_workers

    spec = RunSpec.build(config, cases, seed, (target,), checks=("reference",))
    sys.exit(judge_calibration(spec, Execution(workers=default_workers()), margin))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True))
@format_option
@usage_errors
def report(run_dir: str, fmt: str) -> None:
    """Re-render a run's console tables, report.md, junit.xml and report.html from its
    results.json alone: nothing is re-run. RUN_DIR is a run folder, <report dir>/latest, or a
    report dir (its latest run). Exit 0 once rendered, 2 when RUN_DIR holds no results.json.

    \b
    Examples:
      gradcheck-rnn report reports/latest
      gradcheck-rnn report reports/20261202-190319-sweep-s0 --format github
    """
    from .console import rerender_run

    sys.exit(rerender_run(run_dir, fmt))


@main.command(name="targets")
def list_targets() -> None:
    """List the targets this installation knows, and why any is unavailable."""
    from rich.table import Table
    from rich.text import Text

    from .console import out
    from .targets import describe_targets

    table = Table(title="Targets")
    for column in ("name", "available", "note"):
        table.add_column(column)
    for name, available, note in describe_targets():
        table.add_row(Text(name), Text("yes", style="green") if available else Text("no", style="red"), Text(note))
    out.print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
