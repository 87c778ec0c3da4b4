"""The fused GPU kernel (Triton cells) on CPU through the Triton interpreter.

Every test here runs with ``TRITON_INTERPRET=1`` set before the Triton cells are first imported
(a module-wide fixture), so the kernels run on CPU tensors; cases stay tiny (~3 ms a launch).
The float64 runs pin the algorithm against torch.nn one sequence at a time (as for fused-cpu);
the CLI tests pin the interp profile sweep and the GPU mutants' detection.
"""

from __future__ import annotations

import functools
import json
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("triton")

from gradcheck_rnn import make_case  # noqa: E402
from gradcheck_rnn.model.case import with_changes  # noqa: E402
from gradcheck_rnn.cli import main  # noqa: E402
from gradcheck_rnn.kernels.target import cuda_matmul_precision# noqa: E402
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget  # noqa: E402
from gradcheck_rnn.kernels.fused_gpu import CELLS_MODULE, FusedGPUKernel, FusedGPUTarget, fused_rnn_gpu  # noqa: E402
from gradcheck_rnn.targets import default_targets, describe_targets, resolve_target  # noqa: E402
from gradcheck_rnn.targets.kernel_bugs import GPU_MUTANTS  # noqa: E402
from test_fused_cpu import assert_matches, config, outputs, reference  # noqa: E402

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


@pytest.fixture(autouse=True, scope="module")
def interpreter():
    """Triton's CPU interpreter for every test of this module (restored afterwards)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        patch.delenv("GRADCHECK_RNN_TF32", raising=False)
        yield


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


@functools.cache
def float64_run(mode: str, bi: bool) -> tuple:
    """A float64 case of two layers (uneven, unsorted lengths, one of 1) and fused-gpu's outputs on
    it, computed once per module: the tests below that judge this case share the interpreted run."""
    case = make_case(config(mode, layers=2, bi=bi, T=4, B=3), [3, 4, 1], seed=9)
    return case, outputs(FusedGPUTarget().run(case))


@pytest.mark.parametrize("bi", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("mode", MODES)
def test_forward_and_every_gradient_match_torch_in_float64(mode, bi):
    case, got = float64_run(mode, bi)
    assert_matches(got, reference(case))


@pytest.mark.parametrize("case_id", ["lstm-L2-bi-I3-H5-P3-T6-B4-len4.6.1.3-f64-s12",
                                     "lstm-L1-uni-I2-H4-P1-nobias-T5-B3-len5.0.2-f64-s3",
                                     "gru-L2-bi-I3-H4-nobias-T5-B3-len0.5.2-f32-s4"])
def test_projection_no_bias_and_zero_length(case_id):
    """The API surface rides on the shared algorithm: fused-gpu equals torch.nn (f64, non-zero lengths)
    and fused-cpu (every case)."""
    from gradcheck_rnn import Case

    case = Case.from_id(case_id)
    got = outputs(FusedGPUTarget().run(case))
    tol = dict(rtol=1e-9, atol=1e-10) if case.config.dtype == "f64" else dict(rtol=1e-5, atol=1e-6)
    assert_matches(got, outputs(FusedCPUTarget().run(case)), **tol)
    if (case.seq_lengths > 0).all():
        assert_matches(got, reference(case))


@pytest.mark.parametrize("mode", MODES)
def test_no_initial_state_path(mode):
    case = make_case(config(mode, layers=2, bi=True, T=4, B=3), [2, 4, 3], seed=5, initial_state=False)
    got = outputs(FusedGPUTarget().run(case))
    assert "h0" not in got and "c0" not in got
    assert_matches(got, reference(case))


class Spy(FusedGPUKernel):
    """Records which weight-gradient GEMMs ran."""

    def __init__(self) -> None:
        self.weight_units: list[str] = []

    def weight_grads(self, unit, packing, grads):
        self.weight_units.append(unit.name)
        super().weight_grads(unit, packing, grads)


@pytest.mark.parametrize("mode", MODES)
def test_each_wants_group_matches_all_and_skips_frozen_weight_gemms(mode):
    base, everything = float64_run(mode, True)
    for group in ("inputs", "x", "params"):
        spy = Spy()
        case = with_changes(base, wants=group)
        got = outputs(FusedGPUTarget(kernel=spy).run(case))
        assert case.wants <= got.keys(), group
        assert_matches(got, everything, names=sorted(case.wants) + ["y", "hy"], rtol=0, atol=0)
        assert bool(spy.weight_units) == (group == "params"), group


@pytest.mark.parametrize("mode", MODES)
def test_float32_close_to_float64_and_to_fused_cpu(mode):
    f64_case, f64 = float64_run(mode, True)  # the same draws, in float64
    case = make_case(config(mode, layers=2, bi=True, T=4, B=3, dtype="f32"), f64_case.seq_lengths, seed=9)
    f32 = outputs(FusedGPUTarget().run(case))
    assert_matches(f32, f64, rtol=1e-4, atol=1e-5)
    assert_matches(f32, outputs(FusedCPUTarget().run(case)), rtol=1e-5, atol=1e-6)


def test_zero_length_sequence_and_autograd_entry():
    case = make_case(config("lstm", layers=2, bi=True, T=4, B=3), [3, 4, 2], seed=8)
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0, requires_grad=True)
    c0 = torch.tensor(case.c0, requires_grad=True)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    y, hy, cy = fused_rnn_gpu(x, [3, 0, 2], h0, c0, params, "lstm", 2, True)
    (hy * torch.from_numpy(case.dhy)).sum().backward()
    assert not y[:, 1].any() and not x.grad[:, 1].any()
    assert torch.equal(hy[:, 1], h0[:, 1].detach()) and torch.equal(cy[:, 1], c0[:, 1].detach())
    assert torch.equal(h0.grad[:, 1], torch.from_numpy(case.dhy[:, 1]))
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params.values())
    # the other sequences are unaffected: their dh0 is torch's, whatever sequence 1's length
    want = reference(with_changes(case, seq_lengths=[3, 4, 2], dy=0 * case.dy, dcy=0 * case.dcy))
    np.testing.assert_allclose(h0.grad.numpy()[:, [0, 2]], want["h0"][:, [0, 2]], rtol=1e-9, atol=1e-10)


def interp_sweep(tmp_path, *args):
    code, output = invoke("sweep", "--target", "fused-gpu", "--config", "interp", *args, "--report-dir", tmp_path)
    assert code == 0, output
    [run] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    results = json.loads((run / "results.json").read_text())["results"]
    statuses = {r["status"] for r in results}
    assert "pass" in statuses and statuses <= {"pass", "skip"}
    return results


def test_interp_profile_sweep_passes_on_one_case_per_mode(tmp_path):
    """The fast part of the whole-profile sweep below (16.6 s of the default suite): its first
    cases, every check, each mode at least once."""
    for mode in MODES:
        results = interp_sweep(tmp_path / mode, "--cases", 1, "--mode", mode)
        assert {r["case_id"].split("-")[0] for r in results} == {mode}


@pytest.mark.slow
def test_interp_profile_sweep_passes(tmp_path):
    results = interp_sweep(tmp_path)
    assert {r["case_id"].split("-")[0] for r in results} == set(MODES)


def test_gpu_mutants_are_caught_by_the_interp_sweep(tmp_path):
    names = [arg for name in GPU_MUTANTS for arg in ("--mutant", name)]
    # seed 7's first two cases (lstm L2 bi, gru L1 bi) catch each mutant; seed 0 needed four
    code, output = invoke("mutants", "--config", "interp", "--cases", 2, "--seed", 7, "--check", "reference", *names,
                          "--report-dir", tmp_path)
    assert code == 0, output
    [run] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    document = json.loads((run / "results.json").read_text())
    assert {m["target"] for m in document["mutants"]} == {f"mutant:{name}" for name in GPU_MUTANTS}
    assert all(m["flagged"] > 0 for m in document["mutants"])
    # judged by the interpreter: each repro line sets it too, or it would skip on this machine
    assert all(m["repro"].startswith("TRITON_INTERPRET=1 gradcheck-rnn repro ") for m in document["mutants"])
    failing = [r for r in document["results"] if r["status"] == "fail"]
    assert failing and all(r["repro_env"] == "TRITON_INTERPRET=1" and r["repro"].startswith("TRITON_INTERPRET=1 ")
                           for r in failing)
    assert "mutant:fused-gpu" not in {f["target"] for f in document["false_alarms"]}
    assert "fused-gpu" in {f["target"] for f in document["false_alarms"]}
    assert all(f["flagged"] == 0 for f in document["false_alarms"])


@pytest.mark.slow
def test_gpu_mutants_are_caught_with_every_check(tmp_path):
    names = [arg for name in GPU_MUTANTS for arg in ("--mutant", name)]
    code, output = invoke("mutants", "--config", "interp", *names, "--report-dir", tmp_path)
    assert code == 0, output


@NO_CUDA
def test_without_cuda_or_interpreter_fused_gpu_is_skipped_with_its_reason(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_INTERPRET")
    reason = FusedGPUTarget().supports(config("lstm", dtype="f32"))
    assert isinstance(reason, str) and "CUDA" in reason and "TRITON_INTERPRET=1" in reason
    for name in ("fused-gpu", "torch-native-cuda", "mutant:gpu-forget-gate-grad-dropped"):
        target = resolve_target(name)
        assert isinstance(target.supports(config("gru", dtype="f32")), str), name
    code, output = invoke("sweep", "-t", "fused-gpu", "-t", "torch-native-cuda", "-n", 1, "--report-dir", tmp_path)
    assert code == 5 and "unknown target" not in output
    assert "fused-gpu needs a CUDA device" in " ".join(output.split())
    rows = {name: (available, note) for name, available, note in describe_targets()}
    assert rows["fused-gpu"][0] is False and "TRITON_INTERPRET=1" in rows["fused-gpu"][1]
    assert all(rows[f"mutant:{name}"][0] is False for name in GPU_MUTANTS)


@NO_CUDA
def test_interpreter_runs_f32_and_f64_only_and_defaults_leave_fused_gpu_out():
    target = FusedGPUTarget()
    assert target.supports(config("gru", dtype="f32")) is True
    assert target.supports(config("gru")) is True
    for dtype in ("f16", "bf16"):
        assert "f64 and f32 only" in target.supports(config("gru", dtype=dtype))
    assert "fused-gpu" not in [t.name for t in default_targets()]
    rows = {name: (available, note) for name, available, note in describe_targets()}
    assert rows["fused-gpu"][0] is True and all(rows[f"mutant:{name}"][0] for name in GPU_MUTANTS)


def test_kernels_imported_for_the_compiler_are_refused_under_the_interpreter(monkeypatch):
    class CompiledCells:
        INTERPRETED = False

    monkeypatch.setitem(sys.modules, CELLS_MODULE, CompiledCells)
    reason = FusedGPUTarget().supports(config("lstm", dtype="f32"))
    assert isinstance(reason, str) and "cannot switch" in reason


def test_tf32_is_off_while_checking_unless_the_flag_asks(monkeypatch):
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with cuda_matmul_precision() as on:
        assert on is False and not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    monkeypatch.setenv("GRADCHECK_RNN_TF32", "1")
    with cuda_matmul_precision() as on:
        assert on is True and torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_gpu_script_refuses_in_one_sentence_without_cuda():
    """benchmarks/gpu.sh is the GPU session's one command; here, with no CUDA, it must run nothing."""
    import os
    import subprocess
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the script would run for real")
    script = Path(__file__).parent.parent / "benchmarks" / "gpu.sh"
    done = subprocess.run(["bash", str(script)], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert "needs a CUDA GPU" in done.stderr and "nothing was run" in done.stderr and not done.stdout


def test_an_emitted_test_of_an_interpreted_target_quotes_repro_lines_that_set_the_interpreter():
    from gradcheck_rnn.model.case import Case
    from gradcheck_rnn.workflows.emit_test import emit_test
    from gradcheck_rnn.model.tolerances import Tolerances

    case = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f32-s1")
    source = emit_test(case, "mutant:gpu-reverse-starts-in-padding", ["reference"], Tolerances())
    assert f"    TRITON_INTERPRET=1 gradcheck-rnn repro {case.id} --target mutant:gpu-reverse-starts-in-padding" in source
