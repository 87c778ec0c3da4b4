"""What a user reads (issue 19): failure lines that explain, skip reasons and early stops in view,
honest summaries, the stored verdict in every report, literal target text, 80 columns, a truthful
report.html, calibrate proposals a correct kernel keeps, and the docs that describe them.

Every test builds its rows by hand (CaseResult, TensorError), so it pins the output alone."""

from __future__ import annotations

import io
import math
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from gradcheck_rnn.rows.store import Tally
from gradcheck_rnn import Case, CaseResult
from gradcheck_rnn.reports import StoredRun
from gradcheck_rnn.reports import console as render
from gradcheck_rnn.workflows.calibrate import calibrate, calibration_table
from gradcheck_rnn.model.compare import TensorError, compare_tensor
from gradcheck_rnn.reports import html as html_writer
from gradcheck_rnn.reports import markdown
from gradcheck_rnn.reports.document import failing_tensors, results_document, stored_verdict, tensor_line
from gradcheck_rnn.model.tolerances import Tolerance, Tolerances

if sys.version_info >= (3, 11):
    import tomllib
else:  # a dependency of the package on 3.10
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
# Sequence 1 has length 1 of T = 3: its steps 1 and 2 are padded.
CASE_ID = "lstm-L1-bi-I2-H2-T3-B2-len3.1-f32-s11"
# Sequence 1 is empty (length 0).
EMPTY_ID = "gru-L1-uni-I2-H3-T4-B3-len4.0.2-f32-s7"
VERDICT = {"exit_code": 1, "reason": "failures found: 1 fail"}
META = {"command": "sweep", "profile": "ci", "seed": 0, "cases": 1, "targets": [], "rtol": None, "atol": None,
        "verdict": VERDICT}


def tensor(name: str, ratio: float, a: float = 1.0, b: float = 2.0, location: dict | None = None) -> TensorError:
    """A compared tensor whose worst element is ``location`` with values a (target side), b."""
    return TensorError(name, "pass" if ratio <= 1 else "fail", abs(a - b), abs(a - b) / abs(b), ratio,
                       {"t": 0, "b": 0, "unit": 0} if location is None else location, a, b, 1e-4, 1e-5)


def row(tensors: list[TensorError] = (), status: str = "fail", check: str = "reference", message: str = "",
        case_id: str = CASE_ID, target: str = "fused-cpu") -> CaseResult:
    return CaseResult(case_id, target, status, case_id.split("-")[0], "f32", "all", message=message,
                      tensors=list(tensors), check=check)


def printed(*renderables, width: int = 80) -> list[str]:
    """What a terminal of ``width`` columns shows: tables as tables, lines unwrapped."""
    console = Console(file=io.StringIO(), width=width, color_system=None)
    for item in renderables:
        if isinstance(item, list):
            render.print_lines(console, item)
        else:
            console.print(item)
    return console.file.getvalue().splitlines()


def stored(results: list[CaseResult]) -> list[dict]:
    """The rows as results.json holds the rows that did not pass: what the console renders."""
    return [result.to_json() for result in results]


def failure_text(results: list[CaseResult]) -> str:
    return "\n".join(printed(render.failure_lines(stored(results))))


# --- failure lines ---------------------------------------------------------------------------------

def test_failure_line_gives_the_message_of_shape_and_non_finite_failures():
    config = Case.from_id(CASE_ID).config
    tol = Tolerance(1e-4, 1e-5)
    shape = compare_tensor("y", np.zeros((7, 2, 4)), np.zeros((3, 2, 4)), tol, config)
    nan = compare_tensor("x", np.full((3, 2, 2), np.nan), np.ones((3, 2, 2)), tol, config)
    text = failure_text([row([shape, nan])])
    assert "y: shape (7, 2, 4), expected (3, 2, 4)" in text
    assert "12 non-finite value(s)" in text
    assert "ratio -" not in text and "a=-" not in text


def test_failing_tensors_are_listed_worst_first():
    ratios = {"y": 2.0, "hy": 5.0, "x": 3.0, "h0": 7.0, "l1.fwd.w_hh": 3.4e8}
    result = row([tensor(name, ratio) for name, ratio in ratios.items()])
    lines = failure_text([result]).splitlines()
    assert lines[3].strip().startswith("l1.fwd.w_hh: ratio 3.4e+08")
    assert [line.split(":")[0].strip() for line in lines if ": ratio " in line] == ["l1.fwd.w_hh", "h0", "hy"]
    assert "… and 2 more tensors: x 3, y 2" in "\n".join(lines)
    result.message = "; ".join(f"{t.name}: error {t.ratio:g} exceeds tolerance" for t in result.tensors)
    document = results_document([result], META)
    assert [t["name"] for t in failing_tensors(document["results"][0]["tensors"])] == ["l1.fwd.w_hh", "h0", "hy", "x", "y"]
    page = markdown.render(StoredRun.of(document)).decode()
    assert page.index("- l1.fwd.w_hh: ratio 3.4e+08") < page.index("- h0: ratio 7") < page.index("- y: ratio 2")
    assert "exceeds tolerance" not in page  # the message in declaration order would repeat the lines


def test_a_and_b_show_enough_digits_to_differ_with_diff_and_rdiff():
    result = row([tensor("x", 11.5, a=-0.000809123, b=-0.000808456)])
    text = failure_text([result])
    a, b = re.search(r"a=(\S+) \(target\), b=(\S+) \(reference\)", text).groups()
    assert a != b and float(a) == pytest.approx(-0.000809123, rel=1e-4) and float(b) == pytest.approx(-0.000808456, rel=1e-4)
    assert "diff 6.67e-07" in text and "rdiff 0.000825" in text
    table = "\n".join(printed(*render.tensor_table(result.to_json())))
    assert a in table and b in table
    markdown_line = tensor_line(result.tensors[0].to_json())
    assert f"a={a}" in markdown_line and f"b={b}" in markdown_line and "rdiff 0.000825" in markdown_line
    # 17 significant digits each still fit 80 columns uncut (the table makes room).
    tight = row([tensor("l1.bwd.w_hh", 11.5, a=-0.12345678901234566, b=-0.12345678901234571,
                        location={"layer": 1, "dir": "bwd", "gate": "n", "row": 15, "col": 15})])
    lines = printed(*render.tensor_table(tight.to_json()))
    assert all(len(line) <= 80 for line in lines[1:])
    assert "-0.12345678901234566" in "\n".join(lines) and "-0.12345678901234571" in "\n".join(lines)


@pytest.mark.parametrize("check, words, legend", [
    ("future", "change of dx: a=-0.0076 (target), b=0.126 (reference)", "change of dx: a = target, b = reference"),
    ("padding", "a=-0.0076 (padded steps changed), b=0.126 (unchanged)", "a = padded steps changed, b = unchanged"),
    ("linearity", "a=-0.0076 (grad(dy1+dy2)), b=0.126 (grad(dy1)+grad(dy2))",
     "a = grad(dy1+dy2), b = grad(dy1)+grad(dy2)"),
])
def test_reference_free_rows_say_what_a_and_b_are(check, words, legend):
    result = row([tensor("x", 538, a=-0.0076, b=0.126, location={"t": 2, "b": 0, "unit": 1})], check=check)
    assert words in failure_text([result])
    assert words in tensor_line(result.tensors[0].to_json(), check)
    assert legend in "\n".join(printed(*render.tensor_table(result.to_json())))


def test_padded_steps_and_empty_sequences_are_marked():
    padded = row([tensor("x", 40, location={"t": 2, "b": 1, "unit": 0})])
    empty = row([tensor("hy", 40, location={"layer": 0, "dir": "fwd", "b": 1, "unit": 0})], case_id=EMPTY_ID)
    valid = row([tensor("x", 40, location={"t": 0, "b": 1, "unit": 0})])
    assert "x: ratio 40 at t2 b1 u0 (padded step)" in failure_text([padded])
    assert "hy: ratio 40 at l0 fwd b1 u0 (empty sequence)" in failure_text([empty])
    assert "padded" not in failure_text([valid]) and "empty" not in failure_text([valid])
    assert "(padded step)" in "\n".join(printed(*render.tensor_table(padded.to_json())))
    page = markdown.render(StoredRun.of(results_document([padded, empty], META))).decode()
    assert "(t=2,b=1,unit=0), padded step:" in page and "(layer=0,dir=fwd,b=1,unit=0), empty sequence:" in page


# --- summaries -------------------------------------------------------------------------------------

def test_worst_ratio_is_the_worst_over_every_check():
    results = [row([tensor("y", 0.000392)], status="pass"), row([tensor("x", 538)], check="future")]
    table = "\n".join(printed(*render.summary_tables(Tally.of_results(results))))
    assert "538" in table and "0.000392" not in table and "over every check" in table
    document = results_document(results, META)
    assert document["by_mode"][0]["worst_ratio"] == 538
    assert "| 538 |" in markdown.render(StoredRun.of(document)).decode()


def test_summary_says_1_case():
    assert printed(*render.summary_tables(Tally.of_results([row([tensor("y", 0.5)], status="pass")])))[0].strip() == "fused-cpu: 1 case"


def skipping_run() -> list[CaseResult]:
    judged = [row([tensor("y", 0.5)], status="pass", case_id=f"{CASE_ID[:-3]}s{i}") for i in range(3)]
    skipped = [row(status="skip", message="computes in float16 only", case_id=f"{CASE_ID[:-3]}s{i}", target="half")
               for i in range(2)]
    skipped.append(row(status="skip", message="needs CUDA", target="half"))
    return judged + skipped


def test_top_skip_reasons_per_target_with_counts_everywhere():
    results = skipping_run()
    console = "\n".join(printed(render.skipped_target_lines(Tally.of_results(results))))
    assert "half: 3 of 3 results skipped" in console
    assert "warning: half was judged on no case (every result skipped)" in console
    assert "2× computes in float16 only" in console and "1× needs CUDA" in console
    assert "fused-cpu" not in console  # it skipped nothing
    document = results_document(results, META)
    page = markdown.render(StoredRun.of(document)).decode()
    assert "`half`: 3 of 3 results skipped — computes in float16 only ×2; needs CUDA ×1" in page
    assert "computes in float16 only ×2; needs CUDA ×1" in html_writer.render(StoredRun.of(document)).decode()


def test_an_early_stop_says_how_far_the_run_got():
    [note] = render.stopped_early_lines(2, 20)
    assert note.plain == "note: the run stopped early (--fail-fast): 2 of 20 cases judged"
    document = results_document([row([tensor("x", 3.0)])], {**META, "cases": 20, "complete": False,
                                                            "cases_judged": 2})
    assert "**Stopped early:** the run stopped early (--fail-fast): 2 of 20 cases judged" in \
        markdown.render(StoredRun.of(document)).decode()
    page = html_writer.render(StoredRun.of(document)).decode()
    assert "cases 2 of 20 judged" in page and "2 of 20 cases judged" in page
    complete = results_document([row([tensor("x", 3.0)])], {**META, "complete": True})
    assert "stopped early" not in markdown.render(StoredRun.of(complete)).decode()


def test_github_annotations_say_the_run_stopped_early():
    from gradcheck_rnn.reports import github

    document = results_document([row([tensor("x", 3.0)])], {**META, "cases": 20, "complete": False, "cases_judged": 2})
    assert github.annotations(document)[-1] == ("::warning title=gradcheck-rnn stopped early::"
                                                "the run stopped early (--fail-fast): 2 of 20 cases judged")


def test_nondeterministic_rows_fail_in_every_writer():
    from junitparser import Failure, JUnitXml

    from gradcheck_rnn.reports import junit

    differing = TensorError("l0.fwd.w_ih", "fail", 1e-9, 1e-8, float("inf"), {"layer": 0, "dir": "fwd", "gate": "r",
                            "row": 0, "col": 1}, 0.5, 0.500000001, 0.0, 0.0,
                            message="l0.fwd.w_ih: non-deterministic — two runs of the same case differ by up to 1e-09")
    results = [row([differing], status="nondeterministic", check="determinism"), row([tensor("y", 0.1)], status="pass")]
    document = results_document(results, META)
    xml = JUnitXml.fromstring(junit.render(StoredRun.of(document)))
    assert xml.failures == 1
    [failure] = next(case for suite in xml for case in suite if case.result).result
    assert isinstance(failure, Failure) and failure.type == "nondeterministic"
    suite = next(iter(xml))
    assert {p.name: p.value for p in suite.properties()}["verdict"] == "failures found: 1 fail (exit code 1)"
    assert "| nondet |" in markdown.render(StoredRun.of(document)).decode()
    page = html_writer.render(StoredRun.of(document)).decode()
    assert "<th>nondet</th>" in page and '<span class="nondeterministic">nondeterministic</span>' in page
    assert "nondet." in failure_text(results)


# --- the stored verdict ----------------------------------------------------------------------------

def test_writers_show_the_stored_verdict_and_never_recompute_it():
    # The rows hold a fail, but the engine's stored verdict is what every writer shows.
    stored = {"exit_code": 5, "reason": "target half was judged on no case: every result was skipped"}
    document = results_document([row([tensor("x", 3.0)])], {**META, "verdict": stored})
    assert stored_verdict(document) == (5, stored["reason"])
    page = html_writer.render(StoredRun.of(document)).decode()
    assert '<span class="skip">nothing was checked</span>' in page and stored["reason"] in page
    assert f"**Verdict:** {stored['reason']} (exit code 5)" in markdown.render(StoredRun.of(document)).decode()
    old = {k: v for k, v in document.items() if k != "verdict"}
    assert stored_verdict(old) == (1, "unknown verdict")
    assert '<span class="fail">failed</span>' in html_writer.render(StoredRun.of(old)).decode()


# --- literal text, 80 columns ----------------------------------------------------------------------

def test_target_text_is_printed_literally_never_as_markup():
    message = 'ValueError("shape [/b] mismatch") in [bold]kernel[/bold]'
    broken = TensorError("y", "fail", message=f"y: {message}", rtol=1e-4, atol=1e-5)
    results = [row(status="error", message=message, target="pkg.mod:make[/b]"),
               row([broken], target="pkg.mod:make[/b]"),
               row(status="skip", message="needs [red]CUDA[/]", target="pkg.mod:make[/b]")]
    text = "\n".join(printed(*render.summary_tables(Tally.of_results(results)), render.skipped_target_lines(Tally.of_results(results)),
                             render.failure_lines(stored(results)), *render.tensor_table(results[1].to_json())))
    assert message in text and "pkg.mod:make[/b]: 1 case" in text and "needs [red]CUDA[/]" in text
    lines = printed(["target traceback: ValueError('[/b] in [bold]x')"])
    assert lines == ["target traceback: ValueError('[/b] in [bold]x')"]


def test_usage_errors_keep_their_brackets(tmp_path):
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    profile = tmp_path / "bad.toml"
    profile.write_text("[draw]\nlayers = [3, 1]\n")
    result = CliRunner().invoke(main, ["sweep", "-c", str(profile), "-n", "1", "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 2 and "give [min, max] integers" in result.output
    assert not (tmp_path / "r").exists()


def test_console_lines_fit_80_columns_and_ids_and_repro_commands_stay_whole():
    long_id = "gru-L2-bi-I12-H16-nobias-T18-B14-len6.2.0.8.7.7.7.7.7.7.7.7.7.7-f64-s353880307-wparams-glast-z"
    results = [row([tensor(f"l{i}.bwd.w_hh", 10.0 ** (i + 3), a=-0.000809123 * i, b=0.0123456789,
                           location={"layer": i, "dir": "bwd", "gate": "n", "row": 15, "col": 15}) for i in range(5)],
                   case_id=long_id, target="some_long_package.kernels.fused:bidirectional_gru_target"),
               row(status="error", case_id=long_id, message="RuntimeError: " + "the kernel gave up " * 12)]
    lines = printed(*render.summary_tables(Tally.of_results(results)), render.skipped_target_lines(Tally.of_results(results)),
                    render.failure_lines(stored(results)), render.mistrusted_lines(Tally.of_results(results)))
    repros = [r.repro for r in results]
    for line in lines:
        assert len(line) <= 80 or long_id in line, line
    assert sum(long_id in line for line in lines) >= 4  # never cut: printed whole, every time
    assert all(any(line.strip() == repro for line in lines) for repro in repros)


# --- report.html -----------------------------------------------------------------------------------

def test_html_legend_describes_the_colour_bar_and_ids_never_break():
    page = html_writer.render(StoredRun.of(results_document([row([tensor("x", 3.0)])], META))).decode()
    assert "white = the tolerance" not in page
    assert "ratio 1e-4 and below" in page and "blue turns red" in page
    assert "word-break:break-all" not in page and "td.id{text-align:left;white-space:nowrap}" in page
    assert f'<code class=id>{row().repro}</code>' in page


def test_an_all_zero_error_series_says_no_error():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gradcheck_rnn.reports import pictures

    axes = Figure().subplots()
    pictures._steps_panel(axes, [{"name": "y", "per_step": [0.0, 0.0, -0.0]}, {"name": "x", "per_step": [0, 0, 0]}])
    assert not axes.get_lines() and axes.get_legend() is None
    assert [t.get_text() for t in axes.texts] == ["no error: |a − b| = 0 at every step\n(y, x)"]
    mixed = Figure().subplots()
    pictures._steps_panel(mixed, [{"name": "y", "per_step": [0.0, 0.0]}, {"name": "x", "per_step": [1e-3, 2e-3]}])
    assert len(mixed.get_lines()) == 1 and any("no error: y" in t.get_text() for t in mixed.texts)


def test_an_all_zero_error_series_says_no_error_on_the_console():
    quiet = TensorError("y", "pass", 0.0, 0.0, 0.0, per_step=[0.0] * 8)
    assert printed(render.per_step_table(quiet.to_json())) == ["y: max |a − b| per time step: no error, 0 at all 8 steps"]
    loud = TensorError("x", "fail", 2e-3, 1.0, 9.0, per_step=[0.0, 1e-3, 2e-3])
    assert any("██████████████████████████████" in line for line in printed(render.per_step_table(loud.to_json())))


def test_a_one_unit_axis_has_one_tick():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gradcheck_rnn.reports import pictures

    axes = Figure().subplots()
    axes.imshow(np.zeros((4, 1)))  # gate blocks of H = 1: one unit column
    pictures._integer_ticks(axes, (4, 1))
    assert list(axes.get_xticks()) == [0] and list(axes.get_yticks()) == [0, 1, 2, 3]


# --- compare and calibrate -------------------------------------------------------------------------

def test_compare_leaks_no_numpy_warning_on_nan_and_inf():
    config = Case.from_id(CASE_ID).config
    target = np.array([[[np.inf, np.nan], [-np.inf, 1e308]]])
    reference = np.array([[[np.inf, 1.0], [-1e308, -1e308]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        error = compare_tensor("y", target, reference, Tolerance(1e-4, 1e-5), config)
    assert error.status == "fail" and "3 non-finite value(s)" in error.message


def test_calibrate_never_proposes_zero_and_its_table_fits_80_columns():
    exact = row([tensor(name, 0.0) for name in ("y", "x", "l0.fwd.w_ih")], status="pass")
    exact.dtype = "f64"
    rows = calibrate([exact], Tolerances())
    assert all(r.proposed.rtol > 0 and r.proposed.atol > 0 and r.floored for r in rows)
    text = "\n".join(printed(calibration_table(rows)))
    assert "…" not in text and "1e-15/1e-15*" in text and "floor applied" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    # Realistic f32 ratios with the f64 floor beside them: still no number cut.
    measured = row([tensor(name, ratio) for name, ratio in
                    (("y", 0.000612345), ("x", 0.00371), ("l0.fwd.w_ih", 0.00117), ("l1.bwd.w_hh", 0.000623))],
                   status="pass")
    rows = calibrate([exact, measured], Tolerances())
    text = "\n".join(printed(calibration_table(rows)))
    assert "…" not in text and "6.12e-4" in text and "weight_grad" in text and "1e-15/1e-15*" in text
    run = SimpleNamespace(spec=SimpleNamespace(targets=["pkg.mod:make[/b]"], cases=2, profile="ci", seed=0))
    assert printed(calibration_table(rows, run))[0].startswith("Calibration of pkg.mod:make[/b] on 2 cases")


def test_empty_lengths_say_that_no_length_was_given():
    from click.testing import CliRunner

    from gradcheck_rnn import RNNConfig, UsageError
    from gradcheck_rnn.cli import main

    with pytest.raises(UsageError, match=r"no sequence lengths were given \(batch_size=0\)"):
        RNNConfig("gru", 1, False, 2, 3, 4, 0)
    result = CliRunner().invoke(main, ["check", "--lengths", "", "--target", "torch-native"])
    assert result.exit_code == 2 and "length" in result.output and "batch_size=0 is not allowed" not in result.output


# --- docs ------------------------------------------------------------------------------------------

def test_docs_describe_case_wants_and_every_command():
    contracts = (ROOT / "docs" / "contracts.md").read_text()
    assert "`case.wants` is the frozenset" in contracts and "`case.wants_group`" in contracts
    # the command reference is generated from the click group itself (mkdocs-click), every command in it
    from gradcheck_rnn.cli import main

    cli_page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert ":module: gradcheck_rnn.cli" in cli_page and ":command: main" in cli_page and ":depth: 1" in cli_page
    assert {"sweep", "merge", "report", "check", "repro", "shrink", "mutants", "calibrate", "diff", "targets"} <= set(main.commands)
    readme = (ROOT / "README.md").read_text()
    setup = readme[:readme.index("## Example: a CI sweep")]
    # the number itself is read against the tool in tests/test_docs_match_tool.py
    assert "chromium" in setup and re.search(r'"\d+ skipped"', setup)


def test_readme_plugin_example_computes_only_the_requested_gradients():
    pytest.importorskip("torch")
    namespace: dict = {}
    exec(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)[0], namespace)
    for group in ("params", "x", "inputs"):
        case = Case.from_id(f"gru-L1-uni-I3-H4-T5-B2-len5.2-f32-s7-w{group}")
        assert set(namespace["my_gru"].run(case).grads) == set(case.wants), group


def test_licence_file_and_package_metadata():
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Copyright (c) 2026 the gradcheck-rnn developers" in licence
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]


def test_the_progress_bar_counts_every_row_though_it_takes_them_ten_times_a_second(monkeypatch):
    from rich.progress import Progress

    handed: list[int] = []
    original = Progress.update

    def update(self, task_id, **fields):
        handed.append(fields.get("advance") or 0)
        return original(self, task_id, **fields)

    monkeypatch.setattr(Progress, "update", update)
    row = CaseResult("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1", "fused-cpu", "pass", "gru", "f64", "all")
    with render.progress(Console(file=io.StringIO()), 3000) as bar:  # an observer of the run's rows
        for _ in range(3000):
            bar.on_row(row)
    assert sum(handed) == 3000  # every row is counted, the last ones when the bar closes
    assert len(handed) < 300  # not one update per row


# --- one spelling of NaN and infinity, one worst-first order ------------------------------------

def test_nan_and_infinity_are_spelled_alike_in_the_check_table_and_shrink_s_steps():
    """"nan", "inf", "-inf" everywhere (the check/repro table's a and b, shrink's ratios); "-" only
    where there is no number at all."""
    from gradcheck_rnn.workflows.shrink import Failure, ShrinkResult, Step, steps_lines

    result = row([tensor("y", math.nan, a=math.nan, b=math.inf), tensor("hy", 3.0, a=-math.inf, b=1.0)])
    cells = [line.split() for line in printed(*render.tensor_table(result.to_json()))]
    assert ["y", "fail", "nan"] == cells[3][:3] and cells[3][-2:] == ["nan", "inf"], cells
    assert cells[4][-2:] == ["-inf", "1"], cells
    steps = [Step(CASE_ID, "start", math.nan, result), Step(EMPTY_ID, "fewer layers", math.inf, result)]
    lines = steps_lines(ShrinkResult("fused-cpu", Failure("reference", "fail"), steps, 2, 10))
    assert lines[2].split()[2] == "nan" and lines[3].split()[3] == "inf", lines


def test_every_writer_orders_tensors_worst_first_alike():
    """A missing tensor, then NaN, then the largest ratio (an infinite one before a finite one):
    the row's worst tensor, the console's failure lines, the reports' tensor lines and the error
    picture's tensor with a time axis all agree."""
    tensors = [tensor("x", 2.0), tensor("y", math.nan), tensor("hy", math.inf),
               TensorError("h0", "missing", message="h0: missing"), tensor("cy", 50.0)]
    for t in tensors[1:3] + tensors[:1]:
        t.per_step = [0.0, 1.0, 2.0]
    result = row(tensors)
    expected = ["h0", "y", "hy", "cy", "x"]
    assert result.worst.name == "h0"
    assert [t["name"] for t in failing_tensors(result.to_json()["tensors"])] == expected
    text = failure_text([result])
    shown = [text.index(f"{name}: ") for name in expected[:3]]
    assert shown == sorted(shown) and "… and 2 more tensors: cy 50, x 2" in text, text
    assert render.worst_time_tensor(result.to_json())["name"] == "y"  # NaN is worse than any number, inf included


def check_output(result: CaseResult, monkeypatch) -> list[str]:
    """What ``check`` and ``repro`` print for one row, on an 80-column terminal."""
    from gradcheck_rnn.cli import commands as console

    recorder = Console(file=io.StringIO(), width=80, color_system=None)
    monkeypatch.setattr(console, "out", recorder)
    console.print_case_result(result.to_json(), per_step=True)
    return recorder.file.getvalue().splitlines()


def test_the_check_table_and_report_md_give_a_row_s_tensors_in_one_order_and_one_spelling(monkeypatch):
    """The check table listed a row's tensors in declaration order, report.md worst first: both list
    them worst first now, each failing tensor's ratio, a and b spelled the same ("nan", "inf",
    "-inf") in both, from the same stored row."""
    result = row([tensor("y", 0.5, a=1.0, b=1.0), tensor("hy", 3.0, a=2.5, b=1.0),
                  tensor("x", math.nan, a=math.nan, b=math.inf), tensor("h0", math.inf, a=-math.inf, b=0.25)])
    lines = check_output(result, monkeypatch)
    assert all(len(line) <= 80 or CASE_ID in line for line in lines), lines
    names = [t.name for t in result.tensors]
    cells = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in names}
    page = markdown.render(StoredRun.of(results_document([result], META))).decode()
    reported = re.findall(r"^- (\S+): ratio (\S+), .* a=(\S+) \(target\), b=(\S+) \(", page, re.MULTILINE)
    assert [name for name, *_ in reported] == ["x", "h0", "hy"], page
    assert [name for name in cells if cells[name][1] != "pass"] == ["x", "h0", "hy"], lines
    for name, ratio, a, b in reported:
        assert (cells[name][2], cells[name][-2], cells[name][-1]) == (ratio, a, b.rstrip(",")), (cells[name], page)
    assert {cells["x"][2], cells["h0"][2], cells["h0"][-2]} == {"nan", "inf", "-inf"}


def test_no_number_is_spelled_alike_on_the_console_and_in_the_reports():
    """A target that only errored has no worst ratio: the console's summary said "-", report.md
    and report.html an empty cell."""
    results = [row(status="error", message="RuntimeError: boom")]
    [table] = render.summary_tables(Tally.of_results(results))
    console_rows = [line.split("│") for line in printed(table) if line.startswith("│ lstm")]
    assert console_rows and all(cells[-2].strip() == "-" for cells in console_rows), console_rows
    document = results_document(results, META)
    [md_row] = [line for line in markdown.render(StoredRun.of(document)).decode().splitlines() if line.startswith("| fused-cpu |")]
    assert md_row.endswith("| - |"), md_row
    page = html_writer.render(StoredRun.of(document)).decode()
    assert re.search(r"<td class=l>fused-cpu</td>.*?<td>-</td></tr>", page), page


def test_report_re_renders_an_infinite_worst_ratio_as_the_files_spell_it():
    """``gradcheck-rnn report`` of a run whose worst ratio was infinite crashed: the console's
    summary compared results.json's "inf" with 1."""
    from gradcheck_rnn.reports.console import StoredTally

    document = results_document([row([tensor("x", math.inf, a=math.inf, b=1.0)])], META)
    [table] = render.summary_tables(StoredTally(document))
    console_rows = [line.split("│") for line in printed(table) if line.startswith("│ lstm")]
    assert console_rows and console_rows[0][-2].strip() == "inf", console_rows
    [md_row] = [line for line in markdown.render(StoredRun.of(document)).decode().splitlines() if line.startswith("| fused-cpu |")]
    assert md_row.endswith("| inf |"), md_row


def test_shrink_s_json_spells_an_infinite_ratio_as_results_json_does():
    """shrink --json wrote an infinite ratio as null, which results.json's readers read as NaN."""
    from gradcheck_rnn.workflows.shrink import Step

    assert Step(CASE_ID, "start", math.inf, row()).to_json()["ratio"] == "inf"
    assert Step(CASE_ID, "start", math.nan, row()).to_json()["ratio"] is None


def test_tensors_are_ordered_worst_first_in_one_place_only():
    """"Worst tensor first" was coded six times: no module but gradcheck_rnn/model/statuses.py sorts, or
    takes the largest or smallest of, anything by a key that reads a ratio."""
    import ast

    package = ROOT / "gradcheck_rnn"
    own_orders = []
    for path in package.rglob("*.py"):
        if path == package / "model" / "statuses.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node, "func", None)
            name = getattr(name, "id", None) or getattr(name, "attr", None)
            if isinstance(node, ast.Call) and name in ("sorted", "sort", "max", "min"):
                for keyword in (k for k in node.keywords if k.arg == "key"):
                    text = ast.unparse(keyword.value)
                    if re.search(r"\.ratio\b|\['ratio'\]|\.get\('ratio'\)|worst_first|_badness", text):
                        own_orders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    assert own_orders == [], own_orders
