"""Compact rows: a row that passed is stored short in results.json and every reader reads it as it
read the whole row; a row that did not pass keeps every detail (docs/contracts.md, "Row size")."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gradcheck_rnn import CaseResult
from gradcheck_rnn.workflows.baseline import grown
from gradcheck_rnn.model.case import Case, id_facts
from gradcheck_rnn.model.compare import RatioMap, TensorError, expand_tensor, tensor_summary
from gradcheck_rnn.rows.result import document_row, row_field, row_worst
from gradcheck_rnn.rows.store import Tally

CASE_ID = "lstm-L2-bi-I3-H5-P3-T7-B3-len7.4.1-f32-s9-winputs-gy"


def tensors(status: str = "pass") -> list[TensorError]:
    """Tensors of every location shape, with the numbers a comparison gives."""
    return [
        TensorError("y", "pass", 1.2345e-7, 3.456e-6, 0.0123456, {"t": 2, "b": 0, "unit": 1}, 0.5, 0.5000001,
                    1e-4, 1e-5, per_step=[1e-8] * 7, ratio_map=RatioMap("t", "b", np.zeros((7, 3), np.float32))),
        TensorError("hy", "pass", 1e-8, 2e-8, 3e-4, {"layer": 1, "dir": "bwd", "b": 2, "unit": 0}, mistrusted=True),
        TensorError("l1.bwd.w_ih", status, 2e-7, 5e-6, 0.25 if status == "pass" else 3.5,
                    {"layer": 1, "dir": "bwd", "gate": "g", "row": 1, "col": 4}),
        TensorError("l0.fwd.w_hr", "pass", 1e-9, 1e-9, 1e-3, {"layer": 0, "dir": "fwd", "row": 2, "col": 1}),
        TensorError("l0.fwd.b_hh", "pass", 0.0, 0.0, 0.0, {"layer": 0, "dir": "fwd", "gate": "i", "row": 0}),
        TensorError("custom", "pass", 1e-9, 1e-9, 1e-3, {"k": 3}),  # a shape the coordinates do not name
    ]


def result(status: str = "pass") -> CaseResult:
    return CaseResult(CASE_ID, "fused-cpu", status, "lstm", "f32", "inputs", seconds=0.01234, check="reference",
                      tensors=tensors("pass" if status == "pass" else "fail"), case_index=4,
                      message="" if status == "pass" else "l1.bwd.w_ih: error 3.5 exceeds tolerance")


def stored(row: CaseResult) -> dict:
    return json.loads(json.dumps(document_row(row), allow_nan=False))


def test_the_case_id_says_mode_dtype_and_wants():
    assert id_facts(CASE_ID) == {"mode": "lstm", "dtype": "f32", "wants": "inputs"}
    assert id_facts("gru-L1-uni-I2-H3-T5-B1-len5-f64-s7") == {"mode": "gru", "dtype": "f64", "wants": "all"}
    assert id_facts("not a case id") == {}
    for case_id in (CASE_ID, "s6-L2-uni-I3-H4-N2-R1-nosoftplus-nogate-nobias-T7-B3-len7.4.1-bf16-s9-wx-gstates-z"):
        case = Case.from_id(case_id)
        assert id_facts(case_id) == {"mode": case.config.mode, "dtype": case.config.dtype, "wants": case.wants_group}


def test_a_passing_row_is_short_and_reads_back_as_the_whole_row_read():
    whole, short = result().to_json(), stored(result())
    assert len(json.dumps(short)) < len(json.dumps(whole)) / 3
    assert {"repro", "traceback", "per_step", "mode", "dtype", "wants"}.isdisjoint(short)
    assert "per_step" not in json.dumps(short) and "ratio_map" not in json.dumps(short)
    # every reader gets what it read from the whole row
    assert [row_field(short, key) for key in ("mode", "dtype", "wants")] == ["lstm", "f32", "inputs"]
    assert row_worst(short) == ("l1.bwd.w_ih", 0.25)
    assert Tally.of([short]).document_part() == Tally.of([whole]).document_part()
    for kept, full in zip(map(expand_tensor, short["tensors"]), whole["tensors"]):
        assert kept["name"] == full["name"] and kept["location"] == (full["location"] if full["ratio"] else {})
        assert kept["mistrusted"] == full["mistrusted"] and kept["status"] == "pass"
        for key, digits in (("ratio", 3), ("max_abs", 1), ("max_rel", 1)):
            assert kept[key] == pytest.approx(full[key], rel=0.5 * 10 ** (1 - digits))  # half a unit of the last digit
    assert short["tensors"][4] == "l0.fwd.b_hh"  # equal everywhere: the name alone
    back = CaseResult.from_json(short)
    assert (back.mode, back.dtype, back.wants, back.worst.name) == ("lstm", "f32", "inputs", "l1.bwd.w_ih")
    assert document_row(back) == short  # merge and report read it back and store it again unchanged


def test_a_row_that_did_not_pass_keeps_every_detail():
    short = stored(result("fail"))
    assert short == json.loads(json.dumps(result("fail").to_json(), allow_nan=False))
    assert short["repro"].startswith("gradcheck-rnn repro") and short["tensors"][0]["per_step"]
    assert short["tensors"][0]["ratio_map"] is not None and short["tensors"][0]["a"] == 0.5


def test_a_passing_row_with_a_tensor_that_did_not_pass_stays_whole():
    odd = result()
    odd.tensors[2].status = "missing"  # a reader must see it; the short form only holds passes
    assert stored(odd)["tensors"][2]["status"] == "missing"


def test_the_baseline_reads_drift_from_short_rows():
    then = {t["name"]: t["ratio"] for t in map(expand_tensor, stored(result())["tensors"])}
    grew = result()
    grew.tensors[2].ratio = 0.25 * 50
    now = {t["name"]: t["ratio"] for t in map(expand_tensor, stored(grew)["tensors"])}
    assert grown(then, now, 4.0) == [("l1.bwd.w_ih", 0.25, 12.5)]
    assert grown(then, then, 4.0) == []


def test_non_finite_numbers_stay_strict_json_and_never_read_as_a_pass_ratio():
    odd = result()
    odd.tensors[3].max_rel = math.inf
    odd.tensors[5].max_abs = math.nan
    text = json.dumps(document_row(odd), allow_nan=False)
    kept = [expand_tensor(t) for t in json.loads(text)["tensors"]]
    assert kept[3]["max_rel"] == "inf" and kept[5]["max_abs"] is None


# --- flat memory: a logged run keeps only the rows that did not pass ---------------------------

def test_a_logged_run_keeps_only_the_rows_that_did_not_pass_and_counts_every_row(tmp_path, monkeypatch):
    from pathlib import Path

    from gradcheck_rnn.reports import RowLog
    from gradcheck_rnn.run import Execution, Judging, RunSpec, Selection, judge_run
    from gradcheck_rnn.model.statuses import is_bad

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec, _ = RunSpec.build("ci", ("fused-cpu", "plugin_targets:zero_top_bhh"), Selection(cases=4, seed=11),
                            Judging(("reference", "linearity")))
    everything = judge_run(spec, Execution(in_process=True))
    log = RowLog(tmp_path, "20261203-120000-sweep-s11")
    try:
        logged = judge_run(spec, Execution(in_process=True), store=log)
        assert len(everything.results) == everything.rows == logged.rows == len(log) == 4 * 2 * 2
        assert logged.results and all(is_bad(r.status) for r in logged.results)  # the plugin's bug
        assert [(r.case_id, r.target, r.check, r.worst.ratio) for r in logged.results] \
            == [(r.case_id, r.target, r.check, r.worst.ratio) for r in everything.failures]
        assert (logged.exit_code, logged.reason) == (everything.exit_code, everything.reason) == (1, logged.reason)
        assert logged.cases_judged == everything.cases_judged == 4 and logged.complete
        assert logged.tally is log.tally  # one tally: the verdict's, the console's, the reports'
    finally:
        log.discard()


def test_rows_are_written_with_the_shortest_spelling_of_each_number_and_read_back_the_same():
    from hypothesis import given, settings, strategies as st

    from gradcheck_rnn.model.numbers import shorten_json_numbers

    assert shorten_json_numbers('{"a":0.000469,"b":1.3e-07,"c":0.002,"d":1e+20,"e":-0.0,"f":12,"g":0.5}') == \
        '{"a":4.69e-4,"b":1.3e-7,"c":2e-3,"d":1e20,"e":-0.0,"f":12,"g":0.5}'
    assert shorten_json_numbers('{"m":"ratio 0.000469 \\" 1.3e-07"}') == '{"m":"ratio 0.000469 \\" 1.3e-07"}'
    assert shorten_json_numbers('[10.000469,-0.00012,1.5e+300]') == '[10.000469,-1.2e-4,1.5e300]'  # no tail taken

    @settings(max_examples=80, deadline=None)
    @given(st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(), st.text(max_size=8)),
                    max_size=12))
    def same_values(values):
        text = json.dumps({"v": values, "s": [str(v) for v in values]}, separators=(",", ":"))
        short = shorten_json_numbers(text)
        assert len(short) <= len(text)
        assert json.loads(short) == json.loads(text)  # strings untouched, each float the same double

    same_values()


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_the_tally_s_quick_read_of_a_stored_tensor_is_the_expanded_one(status):
    """tensor_summary reads name, status, ratio and mistrust straight from either stored form (the
    tally and the baseline read them for every row): the same values expand_tensor gives."""
    stored = document_row(result(status))["tensors"]
    assert {type(t) for t in stored} == ({str, list} if status == "pass" else {dict})
    for data in stored:
        whole = expand_tensor(data)
        assert tensor_summary(data) == (whole["name"], whole["status"], whole["ratio"], whole["mistrusted"])


def test_a_worker_s_line_is_written_as_it_is_while_the_row_is_what_it_was():
    """A worker makes a short row's results.jsonl line (the supervisor of many workers would spend
    most of its time on it): the line and the row read back are the ones the supervisor would make."""
    from gradcheck_rnn.rows.result import normal_form, row_line, stored_form

    made_here = document_row(result())
    row = normal_form(result(), 4)
    assert row.stored_line == row_line(made_here)
    stored, line = stored_form(row)
    assert line is row.stored_line and stored == json.loads(row_line(made_here))
    assert normal_form(result("fail"), 4).stored_line is None  # a failure is stored whole, by the supervisor


@pytest.mark.parametrize("change", ["drifted", "index"])
def test_a_row_changed_after_its_worker_wrote_its_line_is_stored_as_it_is_now(change):
    """A baseline marks a passing row drifted in the supervisor, after its worker made its line: the
    stale line must not be written (it would store a pass). A row moved to another index neither."""
    from gradcheck_rnn.rows.result import normal_form, row_line, stored_form

    row = normal_form(result(), 4)
    if change == "drifted":
        row.status, row.message = "drifted", "l1.bwd.w_ih: ratio grew 50x since the baseline"
    else:
        row.case_index = 5
    stored, line = stored_form(row)
    assert line != row.stored_line and line == row_line(document_row(row))
    assert (stored["status"], stored["case_index"]) == (row.status, row.case_index)


def test_rows_stored_from_workers_lines_are_the_rows_stored_in_process(tmp_path, worker_processes):
    """Every stored row of a sweep judged by a worker process (which wrote the short rows' lines)
    is the row --in-process stores (the supervisor writes every line), but for its seconds."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    def stored(*how: str) -> tuple[list[dict], dict]:
        folder = tmp_path / how[-1].lstrip("-")
        result = CliRunner().invoke(main, ["sweep", "-n", "2", "--report-dir", str(folder), *how])
        assert result.exit_code == 0, result.output
        document = json.loads((folder / "latest" / "results.json").read_text())
        return [{k: v for k, v in row.items() if k != "seconds"} for row in document["results"]], document["summary"]

    assert stored("--in-process") == stored("--workers", "1")


def test_a_repro_environment_is_in_the_repro_line_and_survives_results_json():
    """A target judged under an environment its repro must set (fused-gpu under Triton's
    interpreter) says so in front of the repro line, in results.json and after re-reading it."""
    plain, interpreted = result("fail"), result("fail")
    interpreted.repro_env = "TRITON_INTERPRET=1"
    assert "repro_env" not in plain.to_json() and plain.repro.startswith("gradcheck-rnn repro ")
    stored = interpreted.to_json()
    assert stored["repro_env"] == "TRITON_INTERPRET=1"
    assert stored["repro"] == f"TRITON_INTERPRET=1 gradcheck-rnn repro {CASE_ID} --target fused-cpu"
    assert CaseResult.from_json(stored).repro == stored["repro"]
