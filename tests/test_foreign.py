"""Targets in another interpreter (``NAME@PYTHON``) and the MXNet 1.9.1 built-ins, for real.

The out-of-process path runs ``tests/foreign_targets.py`` through the client in this venv's own
python (numpy only is used there); the MXNet tests run MXNet 1.9.1 in the venv that
tests/foreign_env.py makes, and are skipped with the reason when the registry cannot provide it
(they fail when making the venv fails otherwise).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gradcheck_rnn import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.model.layout import pack
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.targets.foreign import mxnet_target

try:  # one check of one target on one case: gradcheck_rnn.judging.judge, runner.check_case before it
    from gradcheck_rnn.judging.judge import judge_one
except ImportError:
    from gradcheck_rnn.runner import check_case as judge_one

PY = sys.executable
TANH = "rnn_tanh-L1-uni-I3-H4-T6-B3-len6.2.4-f64-s{seed}"

# A profile for short sweeps: the reference comparison only, small shapes.
REFERENCE_ONLY = """
[sweep]
cases = 6
seed = 0
[draw]
input_size = [1, 3]
hidden_size = [1, 4]
max_len = [1, 5]
batch_size = [1, 3]
{draw}
[checks]
fd = false
padding = false
permutation = false
future = false
determinism = false
linearity = false
stateless = false
segments = false
poisoned = false
jvp = false
gradgrad = false
"""


def invoke(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def profile(tmp_path: Path, draw: str = "", cases: int = 6) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(REFERENCE_ONLY.format(draw=draw).replace("cases = 6", f"cases = {cases}"))
    return path


def results(report_dir: Path) -> list[dict]:
    [run] = [p for p in report_dir.iterdir() if not p.is_symlink() and (p / "results.json").is_file()]
    return json.loads((run / "results.json").read_text())["results"]


# --- the out-of-process path --------------------------------------------------------------


def test_a_numpy_target_in_another_interpreter_passes_and_a_planted_slip_fails(foreign_path):
    target = resolve_target(f"foreign_targets:numpy_tanh@{PY}")
    assert target.name == f"foreign_targets:numpy_tanh@{PY}"
    for case_id in (TANH.format(seed=3), TANH.format(seed=4) + "-wparams", "rnn_tanh-L1-uni-I2-H3-T4-B2-len4.0-f32-s5-z"):
        result = judge_one(Case.from_id(case_id), target)
        assert result.status == "pass", (case_id, result.message)
    # supports() is answered by the foreign target itself
    skipped = judge_one(Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.1-f64-s5"), target)
    assert skipped.status == "skip" and "one-layer unidirectional rnn_tanh" in skipped.message
    slipped = judge_one(Case.from_id(TANH.format(seed=3)), resolve_target(f"foreign_targets:Slipped@{PY}"))
    assert slipped.status == "fail" and "l0.fwd.w_hh" in slipped.message


def test_a_killed_interpreter_is_an_error_and_the_next_case_restarts_it(foreign_path):
    target = resolve_target(f"foreign_targets:Killer@{PY}")
    assert judge_one(Case.from_id(TANH.format(seed=2)), target).status == "pass"
    first_pid = target.impl._proc.pid
    killed = judge_one(Case.from_id(TANH.format(seed=1)), target)
    assert killed.status == "error"
    assert "was killed by signal 9 while running " + TANH.format(seed=1) in killed.message
    again = judge_one(Case.from_id(TANH.format(seed=2)), target)
    assert again.status == "pass" and target.impl._proc.pid != first_pid


def test_a_raising_foreign_target_is_an_error_naming_its_line_and_the_client_stays_up(foreign_path):
    target = resolve_target(f"foreign_targets:Raiser@{PY}")
    assert judge_one(Case.from_id(TANH.format(seed=2)), target).status == "pass"
    pid = target.impl._proc.pid
    error = judge_one(Case.from_id(TANH.format(seed=1)), target)
    assert error.status == "error"
    assert "ValueError: planted failure in the foreign target (at foreign_targets.py:" in error.message
    assert judge_one(Case.from_id(TANH.format(seed=2)), target).status == "pass" and target.impl._proc.pid == pid


def test_a_foreign_import_error_is_one_sentence_and_exit_2_before_anything_runs(foreign_path, tmp_path):
    """The target is loaded once in its interpreter before the run: an import error there is the
    interpreter's own error line and exit 2, not an error row per case and check."""
    with pytest.raises(UsageError, match="No module named 'a_framework_missing_from_this_interpreter'"):
        resolve_target(f"foreign_broken:run@{PY}")
    result = CliRunner().invoke(main, ["sweep", "-t", f"foreign_broken:run@{PY}", "-n", "3",
                                       "--report-dir", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "could not load its target" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "latest").exists()


def test_a_hang_past_the_case_timeout_is_killed_and_reported(foreign_path, monkeypatch):
    monkeypatch.setenv("GRADCHECK_RNN_CASE_TIMEOUT", "1.5")
    target = resolve_target(f"foreign_targets:Sleeper@{PY}")
    assert judge_one(Case.from_id(TANH.format(seed=2)), target).status == "pass"
    hung = judge_one(Case.from_id(TANH.format(seed=1)), target)
    assert hung.status == "error" and hung.message.startswith("TimeoutError: ")
    assert "ran past 1.5 s (GRADCHECK_RNN_CASE_TIMEOUT)" in hung.message
    assert judge_one(Case.from_id(TANH.format(seed=2)), target).status == "pass"


def test_a_target_that_prints_does_not_break_the_protocol(foreign_path):
    result = judge_one(Case.from_id(TANH.format(seed=3)), resolve_target(f"foreign_targets:Noisy@{PY}"))
    assert result.status == "pass", result.message


@pytest.mark.parametrize("spec, words", [
    ("foreign_targets:numpy_tanh@/no/such/python", "'/no/such/python' is not a python executable or a venv folder"),
    ("mxnet@", "is not allowed; a foreign target is NAME@PYTHON"),
])
def test_a_missing_interpreter_exits_2_with_one_sentence(tmp_path, spec, words):
    code, output = invoke("sweep", "--target", spec, "-n", 1, "--report-dir", tmp_path)
    assert code == 2 and words in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not [p for p in tmp_path.iterdir() if p.name != ".gitkeep"]


def test_sweep_with_workers_and_repro_carry_the_interpreter(foreign_path, tmp_path, worker_processes):
    spec = f"foreign_targets:Slipped@{PY}"
    draw = 'modes = { rnn_tanh = 1 }\nlayers = [1, 1]\nbidirectional = 0.0\nwants = { all = 1 }'
    code, output = invoke("sweep", "--config", profile(tmp_path, draw, cases=4), "--target", spec,
                          "--workers", 2, "--report-dir", tmp_path / "reports")
    assert code == 1, output
    rows = results(tmp_path / "reports")
    assert len(rows) == 4 and all(r["target"] == spec for r in rows)
    failing = [r for r in rows if r["status"] == "fail"]
    assert failing and all(r["status"] in ("fail", "pass") for r in rows)  # pass: H = 1, w_hh.T == w_hh
    repro_line = f"gradcheck-rnn repro {failing[0]['case_id']} --target {spec}"
    assert repro_line in output
    code, output = invoke("repro", failing[0]["case_id"], "--target", spec)
    assert code == 1 and "l0.fwd.w_hh" in output


# --- MXNet 1.9.1 ---------------------------------------------------------------------------


def test_mxnet_layout_is_the_projects_mxnet_packing():
    for case_id in ("gru-L2-bi-I3-H4-T2-B1-len2-f32-s1", "lstm-L3-uni-I2-H3-T2-B1-len2-f64-s2"):
        case = Case.from_id(case_id)
        flat = mxnet_target.pack_mxnet(case.params, case.config)
        assert np.array_equal(flat, pack(case.params, case.config, "mxnet"))
        assert all(np.array_equal(v, case.params[k]) for k, v in mxnet_target.unpack_mxnet(flat, case.config).items())


def test_mxnet_unimportable_here_is_a_usage_error_with_the_import_error_and_the_way_out():
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("mxnet imports here")
    with pytest.raises(UsageError) as refused:
        resolve_target("mxnet-native")
    assert str(refused.value) == ("target 'mxnet-native' cannot load: importing mxnet failed here "
                                  "(ModuleNotFoundError: No module named 'mxnet'); install what it lacks, or run it "
                                  "in an interpreter where it imports: mxnet-native@/path/to/venv")


@pytest.fixture(scope="module")
def mxnet_targets(mxnet_python):
    """mxnet-native and mxnet through the MXNet venv: one client each for the whole module."""
    return resolve_target(f"mxnet-native@{mxnet_python}"), resolve_target(f"mxnet@{mxnet_python}")


def failing(result) -> list[str]:
    return [t.name for t in result.tensors if not t.passed]


def test_mxnet_native_frozen_weights_and_frozen_inputs_are_wrong_and_the_rest_is_right(mxnet_targets):
    """MXNet 1.9.1's native CPU backward: dx is wrong (GRU) or truncated BPTT (RNN) when the weights
    request no gradient, and a stacked RNN's weight gradients are wrong when the inputs request none;
    the same cases with every gradient requested, and the default (oneDNN) path, are right."""
    native, default = mxnet_targets
    frozen_weights = Case.from_id("gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx")
    result = judge_one(frozen_weights, native)
    assert result.status == "fail" and failing(result) == ["x"]
    assert judge_one(frozen_weights, default).status == "pass"
    assert judge_one(Case.from_id("gru-L1-uni-I2-H3-T5-B1-len5-f32-s7"), native).status == "pass"
    assert judge_one(Case.from_id("lstm-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx"), native).status == "pass"
    frozen_inputs = Case.from_id("lstm-L2-uni-I2-H3-T3-B2-len3.3-f32-s4-wparams")
    result = judge_one(frozen_inputs, native)
    assert result.status == "fail" and "l0.fwd.w_ih" in failing(result) and "l1.fwd.w_ih" not in failing(result)
    assert judge_one(frozen_inputs, default).status == "pass"


def test_mxnet_default_path_ignores_sequence_length(mxnet_targets):
    """MXNet 1.9.1's oneDNN RNN takes use_sequence_length=True and runs every sequence to T: the
    case fails, and its outputs are exactly those of the case with every length set to T."""
    from gradcheck_rnn.model.case import with_changes

    case = Case.from_id("lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s3")
    result = judge_one(case, mxnet_targets[1])
    assert result.status == "fail" and {"y", "hy", "cy"} <= set(failing(result))
    assert judge_one(with_changes(case, seq_lengths=[4, 4]), mxnet_targets[1]).status == "pass"


def test_mxnet_declines_what_mxnet_refuses(mxnet_targets):
    native, default = mxnet_targets
    variable = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f32-s3")
    assert native.supports_case(variable) == mxnet_target.SEQUENCE_LENGTH_REFUSED
    assert default.supports_case(variable) is True  # accepted by MXNet, so judged (and it fails)
    assert default.supports_case(Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s3")) == mxnet_target.SEQUENCE_LENGTH_REFUSED
    assert native.supports_case(Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f16-s3")).startswith("MXNet 1.9.1 refuses float16")
    assert native.supports_case(Case.from_id("lstm-L1-uni-I2-H3-P2-T4-B1-len4-f32-s3")) == mxnet_target.PROJECTION_REFUSED


def test_a_short_mxnet_sweep_fails_only_on_the_documented_mxnet_behaviours(mxnet_targets, tmp_path):
    """Swept through the module's two MXNet clients (gr.sweep takes the target objects): the sweep
    starts no third and fourth MXNet interpreter (an import of MXNet, ~1 s each)."""
    import gradcheck_rnn as gr

    specs = {mxnet_targets[0].name: "native", mxnet_targets[1].name: "default"}
    draw = ("lengths = { all_full = 3, random = 1 }\nlayers = [1, 2]\ndtypes = { f32 = 1 }\nproj = 0.0\n"
            "wants = { all = 1, x = 1, params = 1 }\nmodes = { gru = 1, rnn_tanh = 1, lstm = 1 }")
    run = gr.sweep(list(mxnet_targets), config=profile(tmp_path, draw, cases=6), seed=0)
    rows = [row.to_json() for row in run.results]
    assert run.exit_code == 1 and not [r for r in rows if r["status"] not in ("pass", "fail", "skip")], run.reason
    assert len(rows) == 2 * 6 and set(specs) == {r["target"] for r in rows}
    for row in rows:
        case = Case.from_id(row["case_id"])
        variable = bool((case.seq_lengths != case.config.max_len).any())
        path = specs[row["target"]]
        frozen_weights = case.wants_group in ("inputs", "x") and case.config.mode != "lstm"
        if path == "default":  # oneDNN: wrong exactly where the lengths it ignores matter
            assert (row["status"] == "fail") == variable, row
        elif row["status"] != "skip":  # native: dx of every step but the last; stacked frozen-input weight grads
            assert row["status"] == ("fail" if frozen_weights and case.config.max_len > 1 else
                                     row["status"] if case.wants_group == "params" and case.config.num_layers > 1
                                     else "pass"), row
    assert {r["status"] for r in rows if specs[r["target"]] == "native"} >= {"pass", "fail"}
    assert {r["status"] for r in rows if specs[r["target"]] == "default"} >= {"pass", "fail"}


def test_the_standalone_mxnet_scripts_show_each_finding(mxnet_python):
    """docs/mxnet-1.9.1/*.py: numpy + mxnet only, no gradcheck_rnn; what the README cites."""
    from docs_scripts import run_scripts

    folder = Path(__file__).parent.parent / "docs" / "mxnet-1.9.1"
    scripts = ["native_frozen_weights_truncate_bptt.py", "native_frozen_inputs_stacked_weight_grads.py",
               "onednn_ignores_sequence_length.py", "refusals.py"]
    done = run_scripts(mxnet_python, [folder / script for script in scripts],
                       env={"MXNET_SUBGRAPH_VERBOSE": "0", "OMP_NUM_THREADS": "1"})
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and sum(line.startswith("CONFIRMED") for line in lines) == 3, done.stdout + done.stderr
    refusals = dict(line.split(": ", 1) for line in lines[-4:])
    for quoted, said in [(mxnet_target.SEQUENCE_LENGTH_REFUSED, refusals["native use_sequence_length"]),
                         (mxnet_target.SEQUENCE_LENGTH_REFUSED, refusals["float64 use_sequence_length"]),
                         (mxnet_target._REFUSED_DTYPES["f16"], refusals["float16"]),
                         (mxnet_target._REFUSED_DTYPES["bf16"], refusals["bfloat16"])]:
        assert said.removeprefix("MXNetError: ") in quoted
