"""fused-gpu's slstm kernel (Triton cells) on CPU through the Triton interpreter.

As in tests/test_fused_gpu.py, ``TRITON_INTERPRET=1`` is set for the whole module before the
Triton cells are first imported. The float64 runs pin the Triton kernel to the CPU kernel whose
algorithm it shares (~1e-15 apart: the same formulas, in the same order); the CLI tests pin a
families sweep and the GPU slstm mutants. Cases stay tiny: each launch costs ~10 ms interpreted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("triton")

from test_fused_gpu import interpreter  # noqa: F401  (TRITON_INTERPRET=1 for the whole module)

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.model.case import as_mapping, with_changes
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.checks import check_names
from gradcheck_rnn.kernels.fused_gpu import FusedGPUTarget
from gradcheck_rnn.kernels.fused_gpu.slstm import SLSTMGPUKernel
from gradcheck_rnn.kernels.slstm_cpu import SLSTMCPUKernel
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.targets.kernel_bugs import GPU_FAMILY_MUTANTS

DTYPES = {"f64": torch.float64, "f32": torch.float32}
# heads 1 and > 1, -expf, both directions, 1-3 layers, uneven and zero lengths, -z, -nobias, heads on states
KERNEL_IDS = ["slstm-L2-bi-I3-H4-NH2-T4-B3-len4.2.0-f64-s3",
              "slstm-L1-uni-I2-H3-expf-T4-B2-len4.3-f64-s1-z",
              "slstm-L3-bi-I2-H4-NH4-expf-nobias-T3-B3-len3.1.0-f64-s7-gstates",
              "slstm-L2-uni-I1-H2-T4-B2-len3.4-f64-s8"]
# where the input gate wins the max at some step and cy has a head gradient: δm's route matters
MUTANT_CASE = "slstm-L1-bi-I2-H3-T4-B2-len4.2-f64-s3"


def both(case: Case, **kernel) -> tuple[dict, dict]:
    """The Triton kernel's and the CPU kernel's outputs, as numpy."""
    dtype = DTYPES[case.config.dtype]
    return tuple({k: v.numpy() for k, v in as_mapping(cls(**kernel).run(case, dtype)).items()}
                 for cls in (SLSTMGPUKernel, SLSTMCPUKernel))


def assert_close(got: dict, want: dict, rtol: float, atol: float) -> None:
    assert set(got) == set(want)
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("case_id", KERNEL_IDS)
def test_f64_triton_kernel_equals_the_cpu_kernel(case_id):
    got, want = both(Case.from_id(case_id))
    assert_close(got, want, rtol=1e-12, atol=1e-13)


def test_each_wants_group_computes_what_it_requests_and_equals_the_cpu_kernel():
    base = Case.from_id("slstm-L2-uni-I2-H2-NH2-T3-B2-len3.1-f64-s5")
    for group in ("inputs", "x", "params"):
        case = with_changes(base, wants=group)
        got, want = both(case)
        assert set(got) - {"y", "hy", "cy"} == set(case.wants), group
        assert_close(got, want, rtol=1e-12, atol=1e-13)


@functools.cache
def correct_on_the_mutant_case() -> tuple[dict, dict]:
    """both() of MUTANT_CASE, the true derivative, once for the two tests below that compare with it."""
    return both(Case.from_id(MUTANT_CASE))


def test_held_stabilizer_equals_the_cpu_kernel_and_differs_from_the_true_derivative():
    case = Case.from_id(MUTANT_CASE)
    held, want = both(case, hold_stabilizer=True)
    assert_close(held, want, rtol=1e-12, atol=1e-13)
    true, _ = correct_on_the_mutant_case()
    assert not np.allclose(held["x"], true["x"])  # the head gradient on cy reaches x only through m


def test_f32_close_to_the_cpu_kernel():
    got, want = both(Case.from_id("slstm-L1-bi-I3-H4-NH2-T4-B3-len4.2.0-f32-s3"))
    assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_fused_gpu_runs_slstm_in_f64_and_f32_only():
    config = Case.from_id(MUTANT_CASE).config
    assert FusedGPUTarget().supports(config) is True
    assert "f64 and f32 only" in FusedGPUTarget().supports(dataclasses.replace(config, dtype="f16"))


def test_the_gpu_stabilizer_mutant_is_the_cpu_one():
    """The route flag re-creates slstm-stabilizer-grad-to-forget exactly (tests/test_slstm.py shows
    where that one is wrong and where it is exact)."""
    gpu, cpu = (resolve_target(f"mutant:{name}") for name in ("gpu-slstm-stabilizer-grad-to-forget",
                                                               "slstm-stabilizer-grad-to-forget"))
    case = Case.from_id(MUTANT_CASE)
    got, want = ({k: v.numpy() for k, v in as_mapping(t.run(case)).items()} for t in (gpu, cpu))
    assert_close(got, want, rtol=1e-12, atol=1e-13)
    correct, _ = correct_on_the_mutant_case()
    assert not np.allclose(got["x"], correct["x"])


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def run_document(tmp_path) -> dict:
    [run] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    return json.loads((run / "results.json").read_text())


# Seed 869 draws one small f64 slstm case of the families profile (T3, two heads, lengths 1.1.3) on
# which every check judges fused-gpu (fd needs float64; future a sequence shorter than T), in about a
# second of interpreted launches; seed 260's first case (f32 T2) is where the stabilizer mutant shows.
SMALL = ("-c", "families", "--mode", "slstm", "-n", 1, "-s", 869)
MUTANT_SMALL = ("-c", "families", "--mode", "slstm", "-n", 1, "-s", 260)


# seed 260's first case, in float32: every check judges fused-gpu in both dtypes
SMALL_F32 = "slstm-L1-uni-I1-H4-NH2-T2-B3-len2.1.1-f32-s1137158013"


def test_a_short_families_sweep_passes_with_every_check(tmp_path):
    code, output = invoke("sweep", "-t", "fused-gpu", *SMALL, "--report-dir", tmp_path)
    assert code == 0, output
    rows = run_document(tmp_path)["results"]
    f32 = gr.check("fused-gpu", SMALL_F32, config="families")
    # float32: every check but fd (float64 only), jvp and gradgrad passes
    assert {r.check for r in f32 if r.status == "pass"} == set(check_names()) - {"fd", "jvp", "gradgrad"}, f32
    rows += [{"case_id": r.case_id, "status": r.status, "check": r.check} for r in f32]
    assert {r["case_id"].split("-")[0] for r in rows} == {"slstm"}
    assert {r["status"] for r in rows} <= {"pass", "skip"}
    # every check but jvp and gradgrad: fused-gpu offers neither (skips that say so)
    assert {r["check"] for r in rows if r["status"] == "pass"} == set(check_names()) - {"jvp", "gradgrad"}


def test_the_gpu_stabilizer_mutant_is_caught_and_fused_gpu_has_no_false_alarm(tmp_path):
    code, output = invoke("mutants", *MUTANT_SMALL, "-m", "gpu-slstm-stabilizer-grad-to-forget", "--check", "reference",
                          "--report-dir", tmp_path)
    assert code == 0, output
    document = run_document(tmp_path)
    assert [m["flagged"] > 0 for m in document["mutants"]] == [True]
    assert {f["target"]: f["flagged"] for f in document["false_alarms"]}["fused-gpu"] == 0


@pytest.mark.slow
def test_the_gpu_slstm_mutants_are_caught_by_a_families_run_with_no_false_alarm(tmp_path):
    slstm = [name for name, (family, _) in GPU_FAMILY_MUTANTS.items() if family == "slstm"]
    names = [arg for name in slstm for arg in ("-m", name)]
    code, output = invoke("mutants", "-c", "families", "--mode", "slstm", "-n", 10, "-s", 0, *names,
                          "--report-dir", tmp_path)
    assert code == 0, output
    document = run_document(tmp_path)
    assert {m["target"] for m in document["mutants"]} == {f"mutant:{name}" for name in slstm} and len(slstm) == 2
    assert all(m["flagged"] > 0 for m in document["mutants"])
    assert "fused-gpu" in {f["target"] for f in document["false_alarms"]}
    assert all(f["flagged"] == 0 for f in document["false_alarms"])


@pytest.mark.slow  # a new interpreter: ~2 s of imports
def test_importing_fused_gpu_and_building_its_target_does_not_import_triton():
    code = ("import sys; from gradcheck_rnn.kernels.fused_gpu import FusedGPUTarget; FusedGPUTarget(); "
            "sys.exit('triton' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120, check=False).returncode == 0
