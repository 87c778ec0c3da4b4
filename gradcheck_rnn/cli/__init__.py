"""The ``gradcheck-rnn`` command line: a thin click layer over the library API.

Every judging command exits 0 when all pass (skips allowed), 1 on any fail, error or
reference disagreement, and 2 on bad usage (one sentence on stderr, nothing run, no report).
Heavy imports (torch, jax) happen only when a command runs, so ``--help`` is fast.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import click

from . import options as opt
from ..judging.checks import check_names
from .options import usage_errors
from ..errors import Terminated, UsageError


class OneLineErrors(click.Group):
    """click's usage errors in the project's one style: ``error: <one sentence>`` and exit 2
    (click's own is four lines: Usage, Try, blank, Error)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("standalone_mode", None)
        with _sigint_seen() as interrupted:
            try:
                return self._main(*args, **kwargs)
            except Exception:
                # Ctrl-C inside a C extension's import (torch's, at start-up) surfaces as another
                # exception, such as a TypeError from torch's init: still the user's Ctrl-C
                if not interrupted():
                    raise
                from .commands import print_error

                print_error("interrupted (SIGINT) before any case was judged")
                sys.exit(130)

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            from .commands import print_error

            command = exc.ctx.command_path if exc.ctx is not None else "gradcheck-rnn"
            message = exc.format_message().rstrip(".")
            pointed = (f"{message} See '{command} --help'." if message.endswith("?")
                       else f"{message}; see '{command} --help'")
            # the pointer to --help only where the line still fits an 80-column terminal
            print_error(pointed if len(f"error: {pointed}") <= 80 else message)
            sys.exit(2)
        except click.ClickException as exc:
            from .commands import print_error

            print_error(exc.format_message())
            sys.exit(exc.exit_code)
        except (click.Abort, KeyboardInterrupt):  # Ctrl-C before or after judging: nothing was judged
            from .commands import print_error

            print_error("interrupted (SIGINT) before any case was judged")
            sys.exit(130)
        except Terminated:
            from .commands import print_error

            print_error("interrupted (SIGTERM) before any case was judged")
            sys.exit(143)


@contextlib.contextmanager
def _sigint_seen() -> Iterator[Any]:
    """Whether SIGINT arrived while Python's default handler was the one to raise KeyboardInterrupt
    (the handler is wrapped to note it, then raise as before; left alone where someone else's is set)."""
    seen = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler or threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def noted(signum: int, frame: Any) -> None:
        seen.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, noted)
    try:
        yield seen.is_set
    finally:
        if signal.getsignal(signal.SIGINT) is noted:
            signal.signal(signal.SIGINT, previous)


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


@main.command()
@opt.config
@opt.cases_and_seed
@opt.target
@opt.draw
@opt.narrowing
@opt.only_checks
@opt.tolerances
@opt.report_dir
@click.option("--fail-fast", is_flag=True, help="Stop at the first case × target that does not pass.")
@opt.against_runs
@opt.isolation
@opt.distribution
@opt.fmt
@usage_errors
def sweep(**values: Any) -> None:
    """Draw random cases from a profile and judge every target on each.

    Prints a summary per target (by mode and by wants group), then the failures (failing cases
    first, each with its case id and repro command) and writes the reports. Exit 0 when all
    pass, 1 on any fail/error/disagreement, 2 on bad usage, 5 when nothing was checked (every
    result skipped, or a target named with --target judged on no case), 130/143 when SIGINT/SIGTERM
    stopped it (the reports then hold what was judged, marked interrupted). With --baseline, rows
    whose ratio grew past --drift-factor are 'drifted': a warning, exit 1 with --fail-on-drift.

    \b
    Examples:
      gradcheck-rnn sweep                                  # ci profile, every built-in target
      gradcheck-rnn sweep -c nightly -n 200 -s 7 -t fused-cpu
      gradcheck-rnn sweep -t my_pkg.rnn:target --mode gru --layers 1 --unidirectional
      gradcheck-rnn sweep -t my_pkg.rnn:lstm --mode lstm --no-projections --hidden-size 2..4
      gradcheck-rnn sweep -t my_pkg.rnn:target --rtol 1e-3 --fail-fast
      gradcheck-rnn sweep -c families --check segments -t fused-cpu -n 2000
      gradcheck-rnn sweep -c nightly --workers 8 --case-timeout 60
      gradcheck-rnn sweep -c nightly --shard 2/3 --report-dir shard-2
      gradcheck-rnn sweep --executor dask --scheduler tcp://10.0.0.5:8786
      gradcheck-rnn sweep -t fused-cpu --baseline reports/latest --fail-on-drift
      gradcheck-rnn sweep --last-failed
    """
    from .commands import ensure_writable, judge_and_report

    ensure_writable(values["report_dir"])
    baseline = opt.load_baseline(values)
    sys.exit(judge_and_report(opt.build_sweep(values, baseline), "sweep", values["report_dir"], values["fmt"],
                              baseline=baseline))


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, metavar="DIR...")
@opt.report_dir
@opt.fmt
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
    from .commands import report_merged

    sys.exit(report_merged(list(run_dirs), report_dir, fmt))


@main.command()
@opt.case_flags
@opt.target
@opt.check
@opt.tolerances
@opt.isolation
@usage_errors
@click.pass_context
def check(ctx: click.Context, **values: Any) -> None:
    """Build one case from flags (or --case-id) and print the full per-tensor table.

    \b
    Examples:
      gradcheck-rnn check --mode gru --layers 2 --bidirectional --lengths 7,4,1 --dtype f32
      gradcheck-rnn check --case-id gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx -t mutant:bptt-skipped-when-frozen
      gradcheck-rnn check --mode lstm --wants inputs --check all -t my_pkg.rnn:target
      gradcheck-rnn check --mode gla --family-option heads=2 --family-option strong_decay=on -t fused-cpu
    """
    from .commands import judge_case

    if values["case_id"] is not None:
        flags = {param.name: param.opts[0] for param in ctx.command.params}
        given = [flags[name] for name in opt.CASE_FLAGS
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise UsageError(f"--case-id names the whole case, so {', '.join(given)} cannot be given with it; "
                             f"drop {'it' if len(given) == 1 else 'them'} or drop --case-id")
        case_id = values["case_id"]
    else:
        case_id = opt.case_of(values)
    judging = opt.judging_of(values, opt.expand_checks(values["checks"]))
    sys.exit(judge_case(opt.build_run(values, opt.one_case(case_id), judging), per_step=False))


@main.command()
@click.argument("case_id")
@opt.family
@opt.target
@opt.check
@opt.tolerances
@opt.tolerance_profile
@click.option("--emit-test", "emit_test", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write a standalone pytest file that rebuilds this case and asserts the target "
                   "(exactly one --target) against the references, with these tolerances.")
@opt.isolation
@usage_errors
def repro(case_id: str, emit_test: str | None, **values: Any) -> None:
    """Re-run one case bit for bit from its id: per-tensor table and error per time step.

    A truncated-BPTT bug shows as errors that grow toward early time steps.

    \b
    Examples:
      gradcheck-rnn repro lstm-L1-uni-I1-H1-T2-B1-len2-f64-s918273 -t mutant:truncated-bptt
      gradcheck-rnn repro <case id> -t fused-cpu --emit-test tests/test_rnn_regression.py
    """
    from ..model.case import Case
    from .commands import err, judge_case, say
    from ..workflows.emit_test import emit_test as emitted, write_test

    judging = opt.judging_of(values, opt.expand_checks(values["checks"]))
    planned = opt.build_run(values, opt.one_case(case_id), judging)
    spec = planned.spec
    if emit_test is not None:
        if len(values["targets"]) != 1:
            raise UsageError(f"--emit-test needs exactly one --target, the target the test judges; "
                             f"got {len(values['targets'])}")
        source = emitted(Case.from_id(case_id), values["targets"][0], list(spec.checks), spec.tolerances(),
                         spec.repro_options)
        written = write_test(emit_test, source)
        say(err, f"regression test written to {written} (run it: python -m pytest {written})")
    sys.exit(judge_case(planned, per_step=True))


@main.command()
@click.argument("case_id")
@opt.family
@click.option("--target", "-t", "target", required=True, metavar="NAME", help="The target that fails on the case.")
@click.option("--check", "check", type=click.Choice(check_names()), default="reference", show_default=True,
              help="The check whose failure is kept while shrinking.")
@click.option("--any-tensor", is_flag=True,
              help="Accept any failing tensor (default: the worst failing tensor of the start case must keep failing).")
@click.option("--max-steps", type=click.IntRange(min=1), default=300, show_default=True,
              help="Budget: how many candidate cases may be judged.")
@click.option("--json", "as_json", is_flag=True, help="Print the shrink path as JSON instead of a table.")
@opt.tolerances
@opt.tolerance_profile
@opt.isolation
@usage_errors
def shrink(case_id: str, target: str, check: str, any_tensor: bool, max_steps: int, as_json: bool,
           **values: Any) -> None:
    """Shrink a failing case to the smallest case that fails the same way (same check, same tensor).

    Deterministic and greedy: fewer layers, unidirectional, fewer sequences, smaller T, shorter
    lengths, smaller I and H, then simpler variants and float64. Prints each accepted step and the
    minimal case's repro command. Exit 0 when shrunk, 1 when the case does not fail, 2 on bad usage.

    \b
    Examples:
      gradcheck-rnn shrink lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273 -t mutant:truncated-bptt
      gradcheck-rnn shrink <case id> -t my_pkg.rnn:target --check future --json
    """
    from .commands import shrink_case

    planned = opt.build_run({**values, "workers": values["workers"] or 1}, opt.one_case(case_id),
                            opt.judging_of(values, (check,)), targets=(target,))
    sys.exit(shrink_case(planned, any_tensor, max_steps, as_json))


@main.command()
@click.argument("case_id")
@opt.family
@click.option("--target", "-t", "target", required=True, metavar="NAME", help="The library target whose row is filed.")
@click.option("--check", "check", type=click.Choice(check_names()), default="reference", show_default=True,
              help="The check whose row is filed.")
@click.option("--shrink", "shrink_first", is_flag=True, help="Shrink the case first (as gradcheck-rnn shrink does).")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write the body to FILE instead of stdout.")
@opt.tolerances
@opt.tolerance_profile
@usage_errors
def issue(case_id: str, target: str, check: str, shrink_first: bool, output: str | None, **values: Any) -> None:
    """Write the body of an upstream issue (markdown) for one failing row of a library target.

    The case (shrunk with --shrink), the versions, what was expected and what came out, the
    convention it was judged under, the library's contract for an out-of-contract row, and a
    standalone script (torch and the library only; mlstm-* and fla-recurrent) that prints REPRODUCED.
    Judged in this process. Exit 0 when written, 1 when the row did not fail, 2 on bad usage.

    \b
    Examples:
      gradcheck-rnn issue mlstm-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f32-s3 -t mlstm-custbw -o issue.md
    """
    from pathlib import Path

    from .commands import err, say
    from ..workflows.issue import write_issue

    spec = opt.build_run({**values, "workers": 1, "in_process": True}, opt.one_case(case_id),
                         opt.judging_of(values, (check,)), targets=(target,)).spec
    code, text = write_issue(case_id, target, check, shrink_first, spec.tolerances(), spec.repro_options,
                             say=lambda step: say(err, f"shrink: {step.change}: {step.case_id}"))
    if code:
        say(err, text)
    elif output is None:
        click.echo(text)
    else:
        Path(output).write_text(text, encoding="utf-8")
        say(err, f"issue body written to {output}")
    sys.exit(code)


@main.command()
@opt.config
@opt.detection_cases_and_seed
@click.option("--mutant", "-m", "mutants", multiple=True, metavar="NAME",
              help="Only these mutants (repeatable; default: every mutant).")
@opt.draw
@opt.only_checks
@opt.tolerances
@opt.report_dir
@opt.isolation
@usage_errors
def mutants(mutants: tuple[str, ...], **values: Any) -> None:
    """Measure detection power: every mutant (a fused kernel with one historical bug) and the
    correct kernels on the same cases: without --config, each mutant on its home profile's cases
    (ci: cuDNN's cells; families: s6, slstm, conv1d; matrix: mlstm, gla, gdn, deltaproduct, rwkv7,
    kda) in one run, a skip on a case of another family.

    Prints, per mutant, the cases run, the cases that caught it, the first catching case id and
    the check and tensor that caught it; then the correct kernels' false alarms. Exit 1 if any
    mutant survives or any false alarm occurs.
    """
    from .commands import ensure_writable, judge_and_report

    ensure_writable(values["report_dir"])
    planned = opt.build_detection_run(values, mutants)  # unknown names: exit 2
    sys.exit(judge_and_report(planned, "mutants", values["report_dir"]))


@main.command()
@click.option("--target", "-t", "target", required=True, metavar="NAME", help="A target known to be correct.")
@opt.config
@opt.family
@opt.cases_and_seed
@click.option("--margin", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Safety factor between the worst error seen and the proposed tolerance.")
@opt.isolation
@usage_errors
def calibrate(target: str, margin: float, **values: Any) -> None:
    """Show how close a correct target comes to the references (error ratio under the current
    tolerances: median, p99, max, per dtype × tensor kind) and propose tolerances with a margin.
    Exits with the run's verdict, as sweep: 5 when the target was judged on no case."""
    from .commands import judge_calibration

    planned = opt.build_run(values, judging=opt.judging_of(values, ("reference",)), targets=(target,))
    sys.exit(judge_calibration(planned, margin))


@main.command()
@click.argument("run_dir", type=click.Path(exists=True))
@opt.fmt
@usage_errors
def report(run_dir: str, fmt: str) -> None:
    """Re-render a run's console tables, report.md, junit.xml and report.html from its
    results.json alone: nothing is re-run. RUN_DIR is a run folder, <report dir>/latest, or a
    report dir (its latest run). Exits with the run's stored exit code (1 for a failing run), 2 when
    RUN_DIR holds no results.json.

    \b
    Examples:
      gradcheck-rnn report reports/latest
      gradcheck-rnn report reports/20261202-190319-sweep-s0 --format github
    """
    from .commands import rerender_run

    sys.exit(rerender_run(run_dir, fmt))


@main.command()
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--drift-factor", type=click.FloatRange(min=1, min_open=True), default=4.0, show_default=True,
              help="Growth of a tensor's ratio from A to B that counts as drift; ratios ending at or below 0.01 never do.")
@usage_errors
def diff(run_a: str, run_b: str, drift_factor: float) -> None:
    """Compare two stored runs: rows of B that drifted since A (ratio then → now) and the rows in
    one run only. Each RUN is a run folder, <report dir>/latest or a report dir. Exit 1 when a row
    drifted, 0 when none did, 2 when a RUN holds no results.json."""
    from .commands import diff_stored_runs

    sys.exit(diff_stored_runs(run_a, run_b, drift_factor))


@main.command(name="targets")
def list_targets() -> None:
    """List the targets this installation knows, and why any is unavailable."""
    from rich.table import Table
    from rich.text import Text

    from .commands import out
    from ..targets import describe_targets

    table = Table(title="Targets")
    for column in ("name", "available", "note"):
        table.add_column(column)
    for name, available, note in describe_targets():
        table.add_row(Text(name), Text("yes", style="green") if available else Text("no", style="red"), Text(note))
    out.print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
