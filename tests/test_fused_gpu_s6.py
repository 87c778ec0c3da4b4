"""fused-gpu's s6 kernel (Triton chunked scans) on CPU through the Triton interpreter.

``TRITON_INTERPRET=1`` is set by a module-wide fixture before the Triton scan is first imported.
The float64 runs pin :class:`S6GPUKernel` to :class:`S6CPUKernel` (itself pinned to the loop
reference in tests/test_s6.py) on cases that cross chunk boundaries; the CLI tests pin a short
families sweep with every check and the GPU mutant's detection.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from test_fused_cpu import outputs
from test_fused_gpu import interpreter, invoke  # noqa: F401  (interpreter: the module's autouse fixture)

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.workflows.detection import detection_targets
from gradcheck_rnn.kernels.fused_gpu import FusedGPUTarget
from gradcheck_rnn.kernels.fused_gpu.s6 import S6GPUKernel
from gradcheck_rnn.kernels.s6_cpu import S6CPUKernel, decayed_carry
from gradcheck_rnn.targets.kernel_bugs import (
    GPU_FAMILY_MUTANTS,
    home_profile,
    undecayed_carry,
)

MUTANT = "gpu-s6-reverse-carry-undecayed"
# Lengths uneven and below T (padded steps inside the last chunks), T not a multiple of the chunks
CASES = ["s6-L1-uni-I3-H2-N3-R1-T7-B3-len7.2.5-f64-s11",
         "s6-L2-uni-I2-H3-N2-R2-nosoftplus-T10-B2-len6.10-f64-s12",
         "s6-L3-uni-I3-H2-N1-R1-nogate-nobias-T9-B3-len9.0.4-f64-s13-winputs",
         "s6-L2-uni-I2-H2-N2-R1-nosoftplus-nogate-T6-B2-len5.6-f64-s14-wparams-gstates-z"]


@pytest.mark.parametrize("chunk", [1, 3, 4, 16])
def test_the_triton_scan_equals_the_cpu_scan_forward_and_reverse(chunk):
    rng = np.random.default_rng(chunk)
    a, b = torch.from_numpy(rng.uniform(0.2, 1.0, (11, 2, 3, 2))), torch.from_numpy(rng.normal(size=(11, 2, 3, 2)))
    h0 = torch.from_numpy(rng.normal(size=(2, 3, 2)))
    for reverse in (False, True):
        want = S6CPUKernel(chunk).scan(a, b, h0, reverse)
        torch.testing.assert_close(S6GPUKernel(chunk).scan(a, b, h0, reverse), want, rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(S6GPUKernel(chunk).scan(a.float(), b.float(), h0.float(), reverse), want.float(),
                                   rtol=1e-5, atol=1e-6)
    nan = a.clone()
    nan[5, 1] = float("nan")  # a NaN reaches every later state of its element, and no other
    got = S6GPUKernel(chunk).scan(nan, b, h0)
    assert got[5:, 1].isnan().all() and not got[:5].isnan().any() and not got[:, 0].isnan().any()


@pytest.mark.parametrize("case_id", CASES)
def test_float64_kernel_equals_the_cpu_kernel_across_chunk_boundaries(case_id):
    """Every output and requested gradient, with the chunk smaller than, dividing and beyond T."""
    case = Case.from_id(case_id)
    for chunk in (2, 4) if case.config.num_layers < 3 else (3,):
        got = outputs(S6GPUKernel(chunk).run(case, torch.float64, "cpu"))
        want = outputs(S6CPUKernel(chunk).run(case, torch.float64, "cpu"))
        assert set(got) == set(want) and case.wants <= set(got)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13, err_msg=f"{name}, chunk {chunk}")


def test_fused_gpu_runs_s6_through_its_triton_kernel_in_f64_and_f32_only():
    target = FusedGPUTarget()
    assert isinstance(target.family_kernels["s6"], S6GPUKernel)
    case = Case.from_id(CASES[0].replace("f64", "f32"))
    got, cpu = outputs(target.run(case)), outputs(S6CPUKernel().run(case, torch.float32, "cpu"))
    for name in cpu:
        np.testing.assert_allclose(got[name], cpu[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert target.supports(case.config) is True
    assert "f64 and f32 only" in target.supports(dataclasses.replace(case.config, dtype="f16"))


def test_the_carry_rule_is_what_breaks_the_mutant_on_both_kernels():
    """The rule the Triton scan jits is the CPU kernel's: the mutant's rule differs from it
    exactly by the chunk's decay, and a scan with it differs only past the first chunk."""
    a_last, b_last, h = torch.tensor([0.5]), torch.tensor([1.0]), torch.tensor([2.0])
    assert decayed_carry(a_last, b_last, h).item() == 2.0 and undecayed_carry(a_last, b_last, h).item() == 3.0
    [mutant_class] = [bug for family, bug in GPU_FAMILY_MUTANTS.values() if family == "s6"]
    broken = type("Broken", (mutant_class, S6GPUKernel), {})(4)
    a, b = torch.full((9, 1), 0.5, dtype=torch.float64), torch.ones(9, 1, dtype=torch.float64)
    h0 = torch.ones(1, dtype=torch.float64)
    right, wrong = S6GPUKernel(4).scan(a, b, h0, True), broken.scan(a, b, h0, True)
    assert torch.equal(right[:4], wrong[:4]) and not torch.isclose(right[4:], wrong[4:]).any()
    assert torch.equal(broken.scan(a, b, h0), S6GPUKernel(4).scan(a, b, h0))  # the forward scan is untouched


def test_the_gpu_mutant_is_caught_and_fused_gpu_passes_the_same_case():
    case_id = CASES[1].replace("f64", "f32")
    assert [r.status for r in gr.check(f"mutant:{MUTANT}", case_id, checks=["reference"])] == ["fail"]
    assert [r.status for r in gr.check("fused-gpu", case_id, checks=["reference"])] == ["pass"]
    assert "fused-gpu" in detection_targets([MUTANT])[1]  # judged beside its mutant
    assert home_profile(MUTANT) == "families"  # a plain `mutants -m gpu-s6-…` draws s6 cases


def test_a_detection_run_narrows_a_named_profile_only():
    code, output = invoke("mutants", "--mode", "s6", "-m", MUTANT)
    assert code == 2 and "--mode narrows one profile's draw: name it, e.g. -c families" in " ".join(output.split())


def test_a_short_families_sweep_passes_every_check(tmp_path):
    """Seed 23 draws an f64 case that crosses a chunk boundary (so the fd witness judges the
    kernel too) and an f32 long-memory one that crosses two."""
    code, output = invoke("sweep", "-t", "fused-gpu", "-c", "families", "--mode", "s6", "-n", 2, "-s", 23,
                          "--report-dir", tmp_path)
    assert code == 0, output
    [run] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    results = json.loads((run / "results.json").read_text())["results"]
    assert {r["case_id"].split("-")[0] for r in results} == {"s6"}
    assert {r["status"] for r in results} <= {"pass", "skip"}, [r for r in results if r["status"] not in ("pass", "skip")]
    passed = {r["check"] for r in results if r["status"] == "pass"}
    assert passed == {"reference", "determinism", "padding", "permutation", "future", "linearity", "stateless", "segments",
                      "poisoned", "fd"}


@pytest.mark.slow
def test_interpreted_soak_has_no_false_alarm_and_the_mutant_is_caught(tmp_path):
    """The soak quoted in docs/findings/kernels.md, smaller: every check, f32 and f64."""
    code, output = invoke("sweep", "-t", "fused-gpu", "-c", "families", "--mode", "s6", "-n", 40,
                          "--report-dir", tmp_path / "sweep")
    assert code == 0, output
    code, output = invoke("mutants", "-c", "families", "--mode", "s6", "-m", MUTANT, "-n", 8,
                          "--report-dir", tmp_path / "mutants")
    assert code == 0 and "every mutant caught (1), no false alarm" in " ".join(output.split()), output
