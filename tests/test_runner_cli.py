"""The runner and the CLI end to end: statuses, plugins, reports, exit codes, repro."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_rnn import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.rows.result import row_field
from gradcheck_rnn.targets import resolve_target

TESTS = Path(__file__).parent

# the pipeline as users run it: judging in worker processes (see conftest.py)
pytestmark = pytest.mark.usefixtures("worker_processes")


@pytest.fixture(autouse=True)
def plugins_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def run_dirs(report_dir: Path) -> list[Path]:
    return sorted(p for p in report_dir.iterdir() if not p.name.startswith(".") and p.name != "latest")


def test_torch_native_sweep_passes_and_writes_reports(tmp_path):
    code, output = invoke("sweep", "--target", "torch-native", "--cases", 12, "--seed", 3, "--report-dir", tmp_path)
    assert code == 0, output
    [run] = run_dirs(tmp_path)
    document = json.loads((run / "results.json").read_text())
    summary = document["summary"]
    assert document["verdict"]["exit_code"] == 0 and summary["fail"] == summary["error"] == 0
    reference_rows = [r for r in document["results"] if r["check"] == "reference"]
    # torch.nn cannot pack a zero-length sequence: those cases (ci draws some) are skips with that reason
    assert len(reference_rows) == 12 and all(r["status"] == "pass" or "length 0" in r["message"]
                                             for r in reference_rows)
    assert sum(r["status"] == "pass" for r in reference_rows) >= 9
    assert {r["check"] for r in document["results"]} == {"reference", "padding", "permutation", "future",
                                                         "determinism", "linearity", "stateless",
                                                         "segments", "poisoned"}
    entry = reference_rows[0]
    assert {"case_id", "target", "status", "tensors"} <= set(entry)  # a passing row is short (docs/contracts.md)
    assert row_field(entry, "wants") in ("all", "inputs", "x", "params")
    assert Case.from_id(entry["case_id"]).id == entry["case_id"]
    junit = (run / "junit.xml").read_text()
    assert junit.count("<testcase") == summary["total"] and "<failure" not in junit
    assert "torch-native: 12 cases" in output and "wants=all" in output and "all passed" in output


def test_zeroed_top_bias_gradient_is_caught_and_named(tmp_path):
    code, output = invoke("sweep", "--target", "plugin_targets:zero_top_bhh", "--cases", 5, "--seed", 1,  # 4 fail: L1, L2, L3
                          "--report-dir", tmp_path)
    assert code == 1
    failing = {m for m in re.findall(r"l(\d)\.fwd\.b_hh", output)}
    assert failing, output
    document = json.loads((run_dirs(tmp_path)[0] / "results.json").read_text())
    fails = [r for r in document["results"] if r["status"] == "fail"]
    for r in fails:
        layers = Case.from_id(r["case_id"]).config.num_layers
        assert {t["name"] for t in r["tensors"] if t["status"] != "pass"} == {f"l{layers - 1}.fwd.b_hh"}
    junit = (run_dirs(tmp_path)[0] / "junit.xml").read_text()
    assert "gradcheck-rnn repro" in junit and "<failure" in junit


def test_truncated_bptt_is_caught_on_input_gradients():
    case = Case.from_id("lstm-L1-uni-I3-H4-T6-B2-len6.3-f32-s5")
    result = judge_one(case, resolve_target("plugin_targets:truncated_bptt"))
    assert result.status == "fail"
    assert {"x", "h0", "c0"} <= {t.name for t in result.failing}
    assert {"y", "hy", "cy"}.isdisjoint(t.name for t in result.failing)  # the forward is exact
    x_error = next(t for t in result.tensors if t.name == "x")
    assert x_error.per_step[0] > 1e-2 > 1e-5 > x_error.per_step[-1]  # the last step has no future to lose


def test_error_and_nan_targets_are_judged_and_the_sweep_goes_on():
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1")
    raised = judge_one(case, resolve_target("plugin_targets:raises"))
    assert raised.status == "error" and "kernel exploded" in raised.message
    nan = judge_one(case, resolve_target("plugin_targets:returns_nan"))
    assert nan.status == "fail" and nan.failing[0].name == "x"


def test_missing_requested_gradient_fails_unrequested_is_ignored():
    from gradcheck_rnn.targets.torch_native import TorchNativeTarget

    def drops_h0(case):
        outputs = TorchNativeTarget().run(case)
        outputs.grads.pop("h0", None)
        return outputs

    full = judge_one(Case.from_id("rnn_tanh-L1-uni-I2-H3-T4-B2-len4.2-f64-s1"), drops_h0)
    assert full.status == "fail" and [t.name for t in full.failing] == ["h0"]
    frozen_inputs = judge_one(Case.from_id("rnn_tanh-L1-uni-I2-H3-T4-B2-len4.2-f64-s1-wparams"), drops_h0)
    assert frozen_inputs.status == "pass" and "h0" not in frozen_inputs.compared


def test_repro_prints_the_numbers_the_sweep_reported(tmp_path):
    code, _ = invoke("sweep", "--target", "plugin_targets:truncated_bptt", "--cases", 6, "--seed", 2,
                     "--report-dir", tmp_path)
    assert code == 1
    document = json.loads((run_dirs(tmp_path)[0] / "results.json").read_text())
    failed = next(r for r in document["results"] if r["status"] == "fail")
    code, output = invoke("repro", failed["case_id"], "--target", "plugin_targets:truncated_bptt")
    assert code == 1
    worst = max((t for t in failed["tensors"] if t["status"] == "fail"), key=lambda t: t["ratio"])
    assert f"{worst['ratio']:.3g}" in output and f"{worst['max_abs']:.3g}" in output
    # the picture under the table is a failing tensor's: the worst with a time axis, else the worst
    timed = [t for t in failed["tensors"] if t["status"] == "fail" and t.get("per_step")]
    shown = max(timed, key=lambda t: t["ratio"]) if timed else worst
    picture = "max |a − b| per time step" if timed else "tolerance ratio per gate block"
    assert f"{shown['name']}: {picture}" in output, output
    assert f"gradcheck-rnn repro {failed['case_id']} --target plugin_targets:truncated_bptt" in output


@pytest.mark.parametrize("args, words", [
    (["repro", "lstm-L2-bi-I3"], "case id"),
    (["repro", "lstm-L2-bi-I3-H0-T7-B3-len7.4.1-f32-s9"], "hidden_size=0"),
    (["sweep", "--target", "no-such-target"], "unknown target 'no-such-target'"),
    (["sweep", "--target", "no_such_module_xyz:run"], "no module named 'no_such_module_xyz' on PYTHONPATH"),
    (["sweep", "--target", "plugin_targets:nope"], "has no attribute 'nope'"),
    (["check", "--lengths", "3,-1"], "sequence length -1"),
    (["check", "--lengths", "3,x"], "comma-separated"),
    (["check", "--lengths", "3,5", "--max-len", "4"], "sequence length 5"),
])
def test_bad_input_exits_2_with_one_sentence_and_no_report(tmp_path, args, words):
    result = CliRunner().invoke(main, args + (["--report-dir", str(tmp_path)] if args[0] == "sweep" else []))
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("toml_text, words", [
    ("[draw\nmodes = 1", "not valid TOML"),
    ("[draw]\nmodes = ['lstmx']", "'lstmx' is not allowed"),
    ("[draw]\nhidden_size = [0, 3]", "draw.hidden_size"),
    ("[draw]\nbogus = 1", "draw.bogus is not allowed"),
    ("[tolerances.f32.output]\nrtol = 'big'", "tolerances.f32.output"),
])
def test_bad_profile_exits_2(tmp_path, toml_text, words):
    profile = tmp_path / "bad.toml"
    profile.write_text(toml_text)
    reports = tmp_path / "reports"
    result = CliRunner().invoke(main, ["sweep", "--config", str(profile), "--report-dir", str(reports)])
    assert result.exit_code == 2 and words in result.output, result.output
    assert not reports.exists()


def test_check_from_flags_and_from_id_agree():
    code, by_flags = invoke("check", "--mode", "gru", "--layers", 2, "--lengths", "4,2", "--dtype", "f32",
                            "--seed", 7, "--target", "torch-native")
    assert code == 0
    code, by_id = invoke("check", "--case-id", "gru-L2-uni-I3-H4-T4-B2-len4.2-f32-s7", "--target", "torch-native")
    assert code == 0 and by_id == by_flags


def test_targets_lists_builtins(monkeypatch):
    # the command's table, not the frameworks' imports (seconds for eight of them; the probe itself
    # is judged in tests/test_fused_gpu.py): every framework imports here
    monkeypatch.setattr("gradcheck_rnn.targets.foreign._import_error", lambda module: None)
    code, output = invoke("targets")
    assert code == 0 and "torch-native" in output and "fused-cpu" in output and "mambapy" in output


def test_default_targets_are_every_builtin_this_machine_runs():
    import torch

    from gradcheck_rnn.targets import default_targets

    names = [t.name for t in default_targets()]
    expected = ["fused-cpu", "torch-native"] + (["torch-native-cuda", "fused-gpu"] if torch.cuda.is_available() else [])
    assert names == expected


def test_help_of_every_command_is_fast_and_teaches():
    for command in ("sweep", "check", "repro", "mutants", "calibrate", "targets"):
        code, output = invoke(command, "--help")
        assert code == 0 and "Usage:" in output
    assert "Examples:" in invoke("sweep", "--help")[1] and "Examples:" in invoke("check", "--help")[1]
