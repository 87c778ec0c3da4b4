"""One vocabulary for every writer: the console and the reports order failures the same way,
write NaN and Inf the same way, and a row read back from results.json keeps its repro options as
a field (never parsed out of the rendered repro command)."""

import math

from gradcheck_rnn.model.compare import TensorError
from gradcheck_rnn.model.numbers import fmt, fmt_or_dash
from gradcheck_rnn.reports import StoredRun, failures
from gradcheck_rnn.reports.console import failure_lines
from gradcheck_rnn.reports.document import results_document
from gradcheck_rnn.reports.markdown import render as render_markdown
from gradcheck_rnn.rows.result import CaseResult

CASE = "gru-L1-uni-I2-H3-T5-B1-len5-f32-s{seed}"


def _row(seed: int, status: str, ratio: float | None, check: str = "reference", target: str = "t") -> CaseResult:
    tensors = [] if ratio is None else [TensorError("y", "fail" if status == "fail" else "pass", ratio=ratio,
                                                    max_abs=ratio, max_rel=ratio, a=1.0, b=0.0)]
    return CaseResult(CASE.format(seed=seed), target, status, "gru", "f32", "all", message="m", tensors=tensors,
                      check=check, repro_options="--config nightly --rtol 0.01")


ROWS = [_row(1, "error", None), _row(2, "fail", 3.0), _row(3, "fail", math.nan), _row(4, "nondeterministic", 2.0),
        _row(5, "reference-disagreement", 5.0), _row(6, "fail", math.inf), _row(7, "pass", 0.5),
        _row(8, "fail", 40.0, check="padding"), _row(9, "skip", None)]


STORED = [row.to_json() for row in ROWS]  # as results.json holds them: what the console renders


def _document() -> dict:
    return results_document(ROWS, {"verdict": {"exit_code": 1, "reason": "failures found"}, "cases": 9})


def test_console_and_reports_list_failures_in_one_order():
    console = [line.plain.split()[1] for line in failure_lines(STORED) if line.plain.startswith(
        ("fail ", "error ", "nondet.", "disagree"))]
    report = [row["case_id"] for row in failures(_document())]
    assert console == report
    # severity first, then worst ratio (NaN and Inf as the worst), then the case id
    assert [c[-1] for c in report] == ["3", "6", "8", "2", "4", "5", "1"]


def test_nan_and_inf_read_the_same_in_memory_and_from_results_json():
    assert fmt(math.nan) == fmt(None) == "nan"  # results.json stores NaN as null
    assert fmt(math.inf) == fmt("inf") == "inf" and fmt(-math.inf) == fmt("-inf") == "-inf"
    assert fmt_or_dash(None) == "-" and fmt_or_dash(math.nan) == "nan"
    console = "\n".join(line.plain for line in failure_lines(STORED))
    markdown = render_markdown(StoredRun.of(_document())).decode()
    for text in (console, markdown):
        assert "ratio nan" in text and "ratio inf" in text, text


def test_repro_options_and_importability_are_fields_of_a_stored_row():
    row = _row(1, "fail", 3.0)
    row.importable = False
    back = CaseResult.from_json(row.to_json())
    assert back.repro_options == "--config nightly --rtol 0.01" and back.importable is False
    assert back.repro == row.repro
