"""Report files people read: junit.xml for CI viewers, report.html with error pictures, GitHub
annotations, re-rendering from results.json, <report dir>/latest, and every writer safe for
NaN, ±Inf, -0.0, huge and denormal values."""

from __future__ import annotations

import base64
import copy
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from junitparser import Error, Failure, JUnitXml, Skipped
from rich.console import Console

from gradcheck_rnn.rows.store import Tally
from gradcheck_rnn import Case, Outputs
from gradcheck_rnn.reports import console as render
from gradcheck_rnn.cli import main
from gradcheck_rnn.reports import WRITERS, github, latest_run, write_reports
from gradcheck_rnn.reports import html as html_writer
from gradcheck_rnn.reports import StoredRun, findings
from gradcheck_rnn.reports.document import load_document, results_document
from gradcheck_rnn.reports.markdown import sparkline
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.rows.result import tally_verdict
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.model.tolerances import Tolerances

TESTS = Path(__file__).parent
META = {"command": "sweep", "profile": "ci", "seed": 0, "cases": 1, "targets": [], "rtol": None, "atol": None}


def meta(results) -> dict:
    """META with the verdict the engine stores for these rows."""
    code, reason = tally_verdict(Tally.of_results(results))
    return {**META, "verdict": {"exit_code": code, "reason": reason}}
# A bidirectional LSTM with padding: every kind of tensor (y, hy, cy, x, h0, c0, gate-blocked
# parameters) and padded steps to mark.
CASE_ID = "lstm-L1-bi-I2-H2-T3-B2-len3.1-f32-s11"


@pytest.fixture(autouse=True)
def plugins_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def invoke(*args, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """A real failing sweep (truncated BPTT, 2 cases, every check) with GitHub output on: its 4
    failing rows hold each kind the pages show (reference, segments, and a one-step future row
    that draws no picture) in 2 findings; 4 cases drew twice the pictures for no other kind."""
    report_dir = tmp_path_factory.mktemp("reports")
    summary = report_dir.parent / "step-summary.md"
    runner = CliRunner()
    sys.path.insert(0, str(TESTS))
    result = runner.invoke(main, ["sweep", "-t", "mutant:truncated-bptt", "-n", "2", "--report-dir", str(report_dir)],
                           env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)},
                           catch_exceptions=False)
    assert result.exit_code == 1, result.output
    return latest_run(report_dir), result.output, summary


@pytest.fixture(scope="module")
def references():
    return CaseContext(Case.from_id(CASE_ID))


# --- NaN, ±Inf, -0.0, huge and denormal values through every writer -------------------------------

SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 2.2e-308, 1e308, -1e308, 1.0]


@st.composite
def target_outputs(draw, references):
    """Either a passing target (the reference with zeros as -0.0, a denormal added and a relative
    wobble below 1e-9: all within tolerance) or, per tensor, the reference, the reference with special values poked in,
    arbitrary floats, or nothing."""
    values = {}
    passing = draw(st.sampled_from([True, False]))
    for name in references.tensor_names():
        expected = references.expected["loop"][name]
        if passing:
            wobble = draw(st.floats(-1e-9, 1e-9, allow_subnormal=True))  # far inside every tolerance
            values[name] = np.where(expected == 0, -0.0, expected * (1 + wobble) + 5e-324)
            continue
        kind = draw(st.sampled_from(["exact", "poked", "arbitrary", "missing"]))
        if kind == "missing":
            continue
        if kind == "arbitrary":
            values[name] = draw(arrays(np.float64, expected.shape, elements=st.floats(allow_subnormal=True)
                                       | st.sampled_from(SPECIAL)))
            continue
        array = expected.copy()
        if kind == "poked":
            for _ in range(draw(st.integers(1, 3))):
                index = draw(st.integers(0, array.size - 1))
                array.reshape(-1)[index] = draw(st.sampled_from(SPECIAL))
        values[name] = array
    return values, passing


def outputs_of(values):
    return Outputs(values.get("y"), values.get("hy"), values.get("cy"),
                   {k: v for k, v in values.items() if k not in ("y", "hy", "cy")})


def stub_picture(row, lengths, num_directions):
    """report.html's picture in the property test below: a real one costs ~0.5 s per example
    (25 examples: 22 s of the suite), and one real picture of every special value is drawn once,
    by test_one_picture_draws_every_special_value."""
    return b"\x89PNG" if any(t.get("ratio_map") or t.get("per_step") for t in row.get("tensors", [])) else None


def special_values_outputs(references):
    """A failing target whose every tensor holds each special value at least once."""
    values = {}
    for name in references.tensor_names():
        array = np.array(references.expected["loop"][name], dtype=np.float64)
        flat = array.reshape(-1)
        for i, value in enumerate(SPECIAL[:flat.size]):
            flat[i] = value
        values[name] = array
    return values


def test_one_picture_draws_every_special_value(references):
    pytest.importorskip("matplotlib")
    result = judge_one(references, lambda _: outputs_of(special_values_outputs(references)), Tolerances())
    assert result.status == "fail"
    page = WRITERS["report.html"].render(results_document([result], meta([result]))).decode()
    [png] = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert base64.b64decode(png).startswith(b"\x89PNG")


# No shrink phase: the failing example is printed whole anyway.
@settings(max_examples=25, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_special_values_flow_through_every_writer_and_table(references, data):
    from unittest import mock

    values, passing = data.draw(target_outputs(references))
    result = judge_one(references, lambda _: outputs_of(values), Tolerances())
    nan_tensors = {k for k, v in values.items() if np.isnan(v).any()}
    event(f"status {result.status}, NaN {bool(nan_tensors)}, passing {passing}")
    assert not (nan_tensors and result.status == "pass")
    assert result.status == "pass" or not passing, result.message
    assert all(t.status != "pass" for t in result.tensors if t.name in nan_tensors)
    document = results_document([result], meta([result]))
    text = WRITERS["results.json"].render(document).decode()
    json.loads(text, parse_constant=lambda token: pytest.fail(f"non-strict JSON token {token}"))
    JUnitXml.fromstring(WRITERS["junit.xml"].render(document))
    assert WRITERS["report.md"].render(document)
    with mock.patch.object(html_writer, "case_png", stub_picture):
        page = WRITERS["report.html"].render(document).decode()
    assert page.count("<img") == (result.status != "pass")
    github.annotations(document)
    console = Console(file=io.StringIO(), width=80)
    for rows in ([result.to_json()], json.loads(text)["results"]):
        for table in render.summary_tables(Tally.of(rows)):
            console.print(table)
        render.print_lines(console, render.failure_lines(rows) + render.mistrusted_lines(Tally.of(rows)))
        console.print(*render.tensor_table(rows[0]))
        if (timed := render.worst_time_tensor(rows[0])) is not None:
            console.print(render.per_step_table(timed))


def test_sparkline_survives_nan_inf_and_null():
    assert sparkline([1.0, math.nan, None, math.inf, 0.0, 1e-3, -0.0, 5e-324]) == "█!!! ▂ ▁"
    assert sparkline([]) == "" and sparkline([0.0, 0.0]) == "  "
    assert sparkline([1e308, 5e-324]) == "█▁"  # the ratio underflows; the difference of logs does not


# --- junit.xml ---------------------------------------------------------------------------------------

def test_junit_counts_texts_skips_errors_and_disagreements(tmp_path, references):
    case = Case.from_id(CASE_ID)
    truncated = resolve_target("mutant:truncated-bptt")
    disagreeing = CaseContext(case)
    disagreeing.expected["jax"]["x"] = disagreeing.expected["jax"]["x"] + 1e-3  # a broken reference
    results = [judge_one(references, truncated),
               judge_one(references, resolve_target("plugin_targets:raises")),
               judge_one(references, resolve_target("plugin_targets:only_f16")),
               judge_one(references, resolve_target("torch-native")),
               judge_one(disagreeing, resolve_target("torch-native"))]
    assert [r.status for r in results] == ["fail", "error", "skip", "pass", "reference-disagreement"]
    run = write_reports(results, tmp_path, meta(results))
    xml = JUnitXml.fromfile(str(run / "junit.xml"))
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (5, 1, 2, 1)
    testcases = [(suite.name, testcase) for suite in xml for testcase in suite]
    assert [(suite, t.classname) for suite, t in testcases] == [(r.target, r.target) for r in results[:3]] + \
        [("torch-native", "torch-native")] * 2
    assert all(t.name == f"{CASE_ID} [reference]" for _, t in testcases)
    (_, truncated_case), (_, raised), (_, skipped_case), (_, passed), (_, disagreed) = testcases
    [failure] = truncated_case.result
    assert isinstance(failure, Failure) and failure.type == "fail"
    for tensor in results[0].failing:
        assert re.search(rf"^{re.escape(tensor.name)}: ratio \S+, max abs \S+, max rel \S+ at \(.*\): a=", failure.text,
                         re.M), failure.text
    assert failure.text.endswith(f"reproduce: gradcheck-rnn repro {CASE_ID} --target mutant:truncated-bptt")
    [error] = raised.result
    assert isinstance(error, Error) and error.type == "error" and "kernel exploded" in error.message
    [skipped] = skipped_case.result
    assert isinstance(skipped, Skipped) and skipped.message == "only-f16 computes in float16 only"
    assert passed.result == []
    [disagreement] = disagreed.result
    assert isinstance(disagreement, Error) and disagreement.type == "reference-disagreement"
    assert disagreement.text.startswith("x: ratio") and "reproduce: gradcheck-rnn repro" in disagreement.text


# --- a real failing sweep: html, GitHub annotations, re-rendering, latest --------------------------

def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_failing_sweep_writes_a_self_contained_html_report_with_pictures(failing_run):
    run, _, _ = failing_run
    document = load_document(run)
    bad = [r for r in document["results"] if r["status"] not in ("pass", "skip")]
    page = (run / "report.html").read_text()
    assert "gradcheck-rnn sweep: <span class=\"fail\">failed</span>" in page
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    # A row draws when it has a ratio map or per-step errors (a future-check row compares one step).
    drawable = [f["row"] for f in findings(document["results"])[:html_writer.DETAIL_CAP]
                if any(t.get("ratio_map") or t.get("per_step") for t in f["row"]["tensors"])]
    assert len(images) == len(drawable) > 0
    assert all(min(png_size(base64.b64decode(data))) > 100 for data in images)
    # Nothing is fetched: every src/href is inline data or a link inside the page.
    assert all(ref.startswith(("data:", "#")) for ref in re.findall(r'(?:src|href)="([^"]*)"', page))
    assert "http://" not in page and "https://" not in page and "<script" not in page
    found = findings(bad)  # one finding per case × target × cause: its worst row's repro line, the others named
    assert sum(1 + len(f["others"]) for f in found) == len(bad)
    for finding in found[:html_writer.TABLE_CAP]:
        assert f"<code class=id>{finding['row']['repro']}</code>" in page
        assert all(f"{r['check']} {r['status']}" in page for r in finding["others"][:3])
    assert "padding" in page and "worst ratio" in page  # the targets × checks summary
    xml = JUnitXml.fromfile(str(run / "junit.xml"))
    counts = document["summary"]
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (
        counts["total"], counts["fail"], counts["error"] + counts["reference-disagreement"], counts["skip"])


def test_github_annotations_under_github_actions(failing_run):
    run, output, summary = failing_run
    document = load_document(run)
    annotations = [line for line in output.splitlines() if line.startswith("::")]
    bad = [r for r in document["results"] if r["status"] not in ("pass", "skip")]
    assert len(annotations) == min(len(bad), github.ANNOTATION_CAP)
    pattern = re.compile(r"::error title=gradcheck-rnn fail%3A mutant%3Atruncated-bptt \[(\w+)\]::"
                         r"([a-z_]+-L\d[^:%]*): (.*)%0Areproduce: (gradcheck-rnn repro \S+ --target "
                         r"mutant:truncated-bptt(?: --check \w+)?)$")
    for line in annotations:
        match = pattern.fullmatch(line)
        assert match, line
        check, case_id, _, repro = match.groups()
        assert "\n" not in line and repro == next(r["repro"] for r in bad if r["case_id"] == case_id
                                                   and r["check"] == check)
    if len(bad) > github.ANNOTATION_CAP:
        assert f"{len(bad) - github.ANNOTATION_CAP} more failing results are not annotated" in output
    text = summary.read_text()
    assert text.startswith("# gradcheck-rnn sweep report") and str(run) in text


def test_annotation_line_format_and_escaping():
    row = {"status": "error", "target": "pkg.mod:fn,v2", "check": "future", "case_id": "gru-L1-uni-I2-H3-T4-B1-len4-f32-s7",
           "message": "100% wrong\r\nsecond line", "tensors": [],
           "repro": "gradcheck-rnn repro gru-L1-uni-I2-H3-T4-B1-len4-f32-s7 --target pkg.mod:fn,v2 --check future"}
    assert github.annotation(row) == (
        "::error title=gradcheck-rnn error%3A pkg.mod%3Afn%2Cv2 [future]::gru-L1-uni-I2-H3-T4-B1-len4-f32-s7: "
        "100%25 wrong%0D%0Asecond line%0Areproduce: gradcheck-rnn repro gru-L1-uni-I2-H3-T4-B1-len4-f32-s7 "
        "--target pkg.mod:fn,v2 --check future")
    assert not github.wanted("auto", {}) and github.wanted("auto", {"GITHUB_ACTIONS": "true"})
    assert github.wanted("github", {}) and not github.wanted("console", {"GITHUB_ACTIONS": "true"})
    lines = []
    github.publish({"results": [dict(row, status="fail")], "summary": {}}, None, lines.append,
                   {"GITHUB_STEP_SUMMARY": "/nonexistent-folder/summary.md"})
    assert lines[0].startswith("::error title=gradcheck-rnn fail%3A") and lines[1].startswith("::warning ")


@pytest.mark.pictures  # compared with the pages the failing run drew, every picture in
def test_report_command_re_renders_the_same_files_from_results_json(failing_run, tmp_path):
    run, sweep_output, _ = failing_run
    copy_ = tmp_path / "copy"
    shutil.copytree(run, copy_)
    before = {name: (copy_ / name).read_bytes() for name in WRITERS}
    for name in ("junit.xml", "report.md", "report.html"):
        (copy_ / name).unlink()
    code, output = invoke("report", copy_, "--format", "console")
    assert code == 1, output  # report exits with the stored verdict: the mutant fails
    assert {name: (copy_ / name).read_bytes() for name in WRITERS} == before
    assert "::error" not in output
    first_failure = next(line for line in sweep_output.splitlines() if line.startswith("fail "))
    assert first_failure in output  # the console failure list is re-rendered too
    code, output = invoke("report", tmp_path / "nowhere")
    assert code == 2
    code, output = invoke("report", tmp_path)
    assert code == 2 and "results.json does not exist" in output


def test_junit_times_are_the_rows_judging_times_and_the_runs_wall_time(failing_run, tmp_path):
    """junit.xml said time="0.171" for a 31 s run and 0.002 s per testcase (the target's own
    runs only): a testcase's time is its row's stored judging time, a suite's the sum of its rows',
    the whole file's the run's wall time; a results.json kept before those times still renders."""
    run, _, _ = failing_run
    document = load_document(run)
    xml = JUnitXml.fromfile(str(run / "junit.xml"))
    stored = {(r["target"], f"{r['case_id']} [{r.get('check', 'reference')}]"): r.get("seconds", 0.0)
              for r in document["results"]}
    written = {(t.classname, t.name): float(t.time) for suite in xml for t in suite}
    assert written == pytest.approx(stored, abs=5e-4)
    reference_rows = [r for r in document["results"] if r.get("check", "reference") == "reference"]
    assert all(r.get("seconds", 0.0) > 0 for r in reference_rows)  # judged, so timed
    assert [float(suite.time) for suite in xml] == pytest.approx([sum(s for (target, _), s in stored.items()
                                                                      if target == suite.name) for suite in xml], abs=5e-3)
    assert float(xml.time) == pytest.approx(document["seconds"], abs=5e-4)
    assert document["seconds"] >= max(stored.values())
    old = tmp_path / "old"  # written before the times were kept: no run or row seconds
    shutil.copytree(run, old)
    kept = json.loads((old / "results.json").read_text())
    del kept["seconds"]
    kept["results"] = [{k: v for k, v in row.items() if k != "seconds"} for row in kept["results"]]
    (old / "results.json").write_text(json.dumps(kept))
    code, output = invoke("report", old, "--format", "console")
    assert code == 1, output
    xml = JUnitXml.fromfile(str(old / "junit.xml"))
    assert float(xml.time) == 0.0 and {t.time for suite in xml for t in suite} == {0.0}


def test_a_rows_seconds_time_the_whole_check_not_only_the_target(references, monkeypatch):
    """The row's time was the target's runs alone; judging a row is also the check's own work
    (and the references for the case's first row), which CI's test views should show."""
    import dataclasses
    import time

    from gradcheck_rnn.judging.checks import CHECKS

    check = CHECKS["reference"]

    def slow_check(*args):
        time.sleep(0.05)
        return check.run(*args)

    monkeypatch.setitem(CHECKS, "reference", dataclasses.replace(check, run=slow_check))
    row = judge_one(references, resolve_target("torch-native"))
    assert row.status == "pass" and row.seconds >= 0.05


def test_latest_names_the_newest_run_also_without_symlinks(tmp_path, monkeypatch, references):
    result = judge_one(references, resolve_target("torch-native"))
    first = write_reports([result], tmp_path, meta([result]))
    assert os.readlink(tmp_path / "latest") == first.name and latest_run(tmp_path) == first

    def no_symlinks(*args, **kwargs):
        raise OSError("symlinks are not supported here")

    monkeypatch.setattr(os, "symlink", no_symlinks)
    second = write_reports([result], tmp_path, meta([result]))
    assert second != first and (tmp_path / "latest").read_text() == second.name + "\n"
    assert latest_run(tmp_path) == second
    code, output = invoke("report", tmp_path / "latest")
    assert code == 0 and str(second) in output.replace("\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name, "latest"])


def test_html_stays_readable_with_0_and_500_failures(failing_run, monkeypatch):
    monkeypatch.setattr(html_writer, "case_png", lambda *args: b"\x89PNG\r\n\x1a\n")  # the layout, not the pictures
    document = load_document(failing_run[0])
    passing = copy.deepcopy(document)
    passing["results"] = [r for r in document["results"] if r["status"] == "pass"]
    page = html_writer.render(StoredRun.of(passing)).decode()
    assert "No failures." in page and "<img" not in page
    failing = [r for r in document["results"] if r["status"] == "fail"]
    many = copy.deepcopy(document)
    many["results"] = [dict(failing[i % len(failing)], case_id=f"{failing[i % len(failing)]['case_id']}-{i}")
                       for i in range(500)]
    page = html_writer.render(StoredRun.of(many)).decode()
    assert page.count("<img") == html_writer.DETAIL_CAP
    assert page.count('<tr><td rowspan=2>') == page.count('<tr class="repro">') == html_writer.TABLE_CAP
    assert f"… and {500 - html_writer.TABLE_CAP} more" in page and "Failures (500 findings in 500 results, worst first)" in page
    ratios = [float(r) for r in re.findall(r"<td class=l>[^<]+</td><td>([0-9.e+-]+|inf)</td></tr><tr class=\"repro\">", page)]
    assert len(ratios) == html_writer.TABLE_CAP
    assert ratios == sorted(ratios, reverse=True)


def test_html_without_matplotlib_says_so(failing_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    page = html_writer.render(StoredRun.of(load_document(failing_run[0]))).decode()
    assert "<img" not in page and "pip install 'gradcheck-rnn[html]'" in page


def test_the_console_says_report_html_has_no_pictures_without_matplotlib(failing_run, monkeypatch, tmp_path):
    """The page said so and the console did not: a failing run rendered without matplotlib says it
    on the console too, with how to get them; with matplotlib, or with nothing failing, it does not."""
    run, sweep_output, _ = failing_run
    assert "no error pictures" not in sweep_output  # matplotlib is here
    copy_ = tmp_path / "copy"
    shutil.copytree(run, copy_)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, output = invoke("report", copy_, "--format", "console")
    assert code == 1 and "note: report.html has no error pictures: matplotlib is not installed" in " ".join(
        output.split()) and f"  gradcheck-rnn report {copy_}\n" in output, output
    passing = write_reports([], tmp_path / "passing", {"command": "sweep", "verdict": {"exit_code": 5, "reason": "-"}})
    assert "no error pictures" not in invoke("report", passing)[1]


def test_mistrusted_comparisons_are_counted_and_shown(tmp_path, references):
    result = judge_one(references, resolve_target("torch-native"), Tolerances(rtol=2.0))
    # rtol ≥ 1 accepts zeros everywhere: every comparison is trivial.
    assert result.status == "pass" and all(t.mistrusted for t in result.tensors)
    run = write_reports([result], tmp_path, meta([result]))
    counts = load_document(run)["mistrusted"]
    assert counts == {"tensors": len(result.tensors), "compared": len(result.tensors), "results": 1}
    assert "**Mistrusted:**" in (run / "report.md").read_text()
    assert "Mistrusted:" in (run / "report.html").read_text()
    assert render.mistrusted_lines(Tally.of_results([result]))[0].plain.startswith(f"note: {len(result.tensors)} of")
    strict = judge_one(references, resolve_target("torch-native"), Tolerances())
    assert not any(t.mistrusted for t in strict.tensors) and render.mistrusted_lines(Tally.of_results([strict])) == []


# --- the page in a real browser --------------------------------------------------------------------

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
# Writes each image's decoded size into the DOM, which --dump-dom then prints.
PROBE = """<script>window.addEventListener('load', () => { const out = document.createElement('pre');
out.id = 'probe'; out.textContent = [...document.images].map(i => i.naturalWidth + 'x' + i.naturalHeight).join(' ');
document.body.appendChild(out); });</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
def test_report_renders_its_pictures_in_headless_chromium(failing_run, tmp_path):
    run = failing_run[0]
    probe_page = tmp_path / "probe.html"
    probe_page.write_text((run / "report.html").read_text().replace("</body>", PROBE + "</body>"))

    def chromium(*args: str) -> str:
        done = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    dom = chromium("--virtual-time-budget=5000", "--dump-dom", probe_page.as_uri())
    sizes = re.search(r'<pre id="probe">([^<]*)</pre>', dom).group(1).split()
    assert len(sizes) == (run / "report.html").read_text().count("<img") > 0
    assert all(int(w) > 100 and int(h) > 100 for w, h in (s.split("x") for s in sizes)), sizes
    shot = tmp_path / "shot.png"
    chromium("--window-size=1200,1800", f"--screenshot={shot}", (run / "report.html").as_uri())
    assert png_size(shot.read_bytes()) == (1200, 1800)
    pixels = shot.read_bytes()
    assert len(pixels) > 20_000  # a blank page compresses to a few kB


def test_html_verdict_of_a_mutants_run_is_detection(failing_run, monkeypatch):
    monkeypatch.setattr(html_writer, "case_png", lambda *args: None)
    # The header shows the verdict the mutants command stored; it is never recomputed from rows.
    document = dict(load_document(failing_run[0]), command="mutants",
                    mutants=[{"target": "mutant:truncated-bptt", "cases": 4, "flagged": 3}],
                    false_alarms=[{"target": "fused-cpu", "cases": 4, "flagged": 0}],
                    verdict={"exit_code": 0, "reason": "every mutant caught on 4 cases"})
    page = html_writer.render(StoredRun.of(document)).decode()
    assert "every mutant caught, no false alarm" in page and "every mutant caught on 4 cases" in page
    document["mutants"][0]["flagged"] = 0
    document["verdict"] = {"exit_code": 1, "reason": "1 mutant survived: mutant:truncated-bptt"}
    page = html_writer.render(StoredRun.of(document)).decode()
    assert '<span class="fail">failed</span>' in page and "1 mutant survived: mutant:truncated-bptt" in page
    assert "<h2>Mutants</h2>" in page
