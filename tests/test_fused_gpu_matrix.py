"""fused-gpu's matrix-memory kernels (gla, gdn, kda, mlstm, deltaproduct: the Triton chunk hand-off) on CPU through
the Triton interpreter.

As in tests/test_fused_gpu.py, ``TRITON_INTERPRET=1`` is set for the whole module before the
Triton hand-off is first imported. The hand-off kernels are pinned to the CPU kernels' loops
(forward and backward, diagonal and matrix coefficients, several column blocks and heads per
program, padding of K and V), the family kernels to the CPU kernels they extend (float64 to
~1e-12 on cases of several chunks with a partial last one, stacked layers, every gradient
wanted); the CLI tests pin a matrix sweep and the GPU mutants. Cases stay tiny: a launch costs
~40 ms interpreted.
"""

from __future__ import annotations

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
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.fused_gpu import FusedGPUTarget
from gradcheck_rnn.kernels.gdn_cpu import GDNCPUKernel
from gradcheck_rnn.kernels.gla_cpu import GLACPUKernel
from gradcheck_rnn.kernels.mlstm_cpu import MLSTMCPUKernel, States
from gradcheck_rnn.targets.kernel_bugs import GPU_FAMILY_MUTANTS, home_profile

FAMILIES = ("gla", "gdn", "kda", "mlstm", "deltaproduct")
# Per family: several chunks of 4 with a partial last one, uneven and zero lengths, stacked layers,
# heads > 1 with K, V not powers of two, -headdecay, -strongdecay, -longmem, every gradient wanted
KERNEL_IDS = ["gla-L2-uni-I2-H6-NH2-K3-R1-T10-B3-len10.7.0-f64-s12",
              "gla-L1-uni-I3-H2-NH2-K3-R2-headdecay-strongdecay-T9-B2-len9.5-f64-s13",
              "gdn-L2-uni-I3-H6-NH2-K3-T10-B3-len10.4.0-f64-s3",
              "gdn-L1-uni-I2-H3-K3-longmem-T9-B2-len9.8-f64-s4",
              "kda-L2-uni-I3-H6-NH2-K3-R2-converged-T10-B3-len10.4.0-f64-s3",
              "mlstm-L2-uni-I3-H6-NH2-K3-T10-B3-len10.6.0-f64-s3",
              "mlstm-L1-uni-I2-H3-K2-strongdecay-T9-B2-len9.2-f64-s5",
              "deltaproduct-L2-uni-I3-H6-NH2-K3-n2-T5-B3-len5.4.0-f64-s3",
              "deltaproduct-L1-uni-I2-H3-K3-n3-longmem-T4-B2-len4.3-f64-s4"]
# a case of two chunks (the second partial) per family: the mutant of its Triton kernel shows there
# two chunks of the kernels' default chunk (4), named so (-kc.chunk.4): a drawn chunk of 8 is one chunk
MUTANT_CASES = {"gla": "gla-L1-uni-I2-H4-K2-R1-T5-B2-len5.3-f32-s12-kc.chunk.4",
                "gdn": "gdn-L1-uni-I3-H4-NH2-K2-T5-B2-len5.4-f32-s1-kc.chunk.4",
                "kda": "kda-L1-uni-I3-H4-NH2-K2-R1-T5-B2-len5.4-f32-s1-kc.chunk.4",
                "mlstm": "mlstm-L1-uni-I3-H4-NH2-K2-T5-B2-len5.4-f32-s3-kc.chunk.4",
                "deltaproduct": "deltaproduct-L1-uni-I3-H4-NH2-K2-n2-T5-B2-len5.4-f32-s1-kc.chunk.4"}
# a case of one chunk per family: the mutant's shifted read finds no other chunk (deltaproduct's
# chunks hold n sub-steps a token: two tokens of two steps)
ONE_CHUNK_CASES = {family: case_id.replace("-T5-", "-T4-").replace("-len5.", "-len4.")
                   for family, case_id in MUTANT_CASES.items()}
ONE_CHUNK_CASES["deltaproduct"] = "deltaproduct-L1-uni-I3-H4-NH2-K2-n2-T2-B2-len2.1-f32-s1-kc.chunk.4"


def gpu_and_cpu(case: Case, chunk: int) -> tuple[dict, dict]:
    """The Triton kernel's and the CPU kernel's outputs of a case, as numpy."""
    family = case.config.mode
    dtype = {"f64": torch.float64, "f32": torch.float32}[case.config.dtype]
    return tuple(outputs(target.family_kernel_classes()[family](chunk).run(case, dtype, "cpu"))
                 for target in (FusedGPUTarget, FusedCPUTarget))


def chunk_states():
    """The Triton hand-off module, imported inside a test: after the fixture set TRITON_INTERPRET."""
    from gradcheck_rnn.kernels.fused_gpu import chunk_states as module

    return module


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_triton_hand_off_equals_the_cpu_loops_both_ways(dtype):
    """B·NH = 6 heads in one program, K = 3 padded to 16, W = 40 in two column blocks; the
    matrix coefficient also as a transposed view (the backward's Φᵀ)."""
    rng = np.random.default_rng(1)
    B, NH, NC, K, W = 2, 3, 5, 3, 40

    def tensor(*shape):
        return torch.from_numpy(rng.normal(size=shape)).to(dtype)

    diagonal, matrix, written, start = tensor(B, NH, NC, K).exp().neg(), tensor(B, NH, NC, K, K) / 2, \
        tensor(B, NH, NC, K, W), tensor(B, NH, K, W)
    tol = {"rtol": 1e-13, "atol": 1e-14} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    carry = chunk_states().chunk_carry
    for reverse in (False, True):
        torch.testing.assert_close(carry(diagonal, written, start, diagonal=True, reverse=reverse),
                                   GLACPUKernel.hand_off(diagonal, written, start, reverse), **tol)
    starts, final = GDNCPUKernel.carry_states(matrix, written, start)
    torch.testing.assert_close(carry(matrix, written, start, diagonal=False), torch.cat([starts, final[:, :, None]], 2),
                               **tol)
    ends, first = GDNCPUKernel.carry_state_grads(matrix.mT, written, start)
    torch.testing.assert_close(carry(matrix.mT, written, start, diagonal=False, reverse=True),
                               torch.cat([ends, first[:, :, None]], 2), **tol)


def test_the_stabilised_hand_off_equals_the_cpu_loop():
    """Stabilisers that win and lose the max, a chunk of padded steps only (own max −∞)."""
    rng = np.random.default_rng(2)
    B, NH, NC, K, V = 2, 2, 4, 3, 2
    own_max = torch.from_numpy(rng.normal(size=(B, NH, NC)))
    own_max[0, 1, 2] = -float("inf")
    f_end = -torch.from_numpy(rng.uniform(0, 2, (B, NH, NC)))
    own_C, own_n = torch.from_numpy(rng.normal(size=(B, NH, NC, K, V))), torch.from_numpy(rng.normal(size=(B, NH, NC, K)))
    start = States(torch.from_numpy(rng.normal(size=(B, NH, 1, K, V))), torch.from_numpy(rng.normal(size=(B, NH, 1, K))),
                   torch.from_numpy(rng.normal(size=(B, NH, 1))))
    want = MLSTMCPUKernel().carry_states(start, own_max, own_C, own_n, f_end)
    got, m = chunk_states().stabilised_carry(own_max, f_end, torch.cat([own_C, own_n[..., None]], -1),
                                             torch.cat([start.C[:, :, 0], start.n[:, :, 0, :, None]], -1),
                                             start.m[:, :, 0])
    for name, value in (("C", got[..., :V]), ("n", got[..., V]), ("m", m)):
        torch.testing.assert_close(value, getattr(want, name), rtol=1e-13, atol=1e-14, msg=name)


@pytest.mark.parametrize("case_id", KERNEL_IDS)
def test_float64_kernel_equals_the_cpu_kernel_across_chunk_boundaries(case_id):
    """Every output and requested gradient, chunks of 4 (T = 9, 10: a partial last chunk) and 3."""
    case = Case.from_id(case_id)
    for chunk in (4, 3):
        got, want = gpu_and_cpu(case, chunk)
        assert set(got) == set(want) and case.wants <= set(got)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13, err_msg=f"{name}, chunk {chunk}")


@pytest.mark.parametrize("family", FAMILIES)
def test_fused_gpu_runs_the_family_through_its_triton_kernel_in_f32(family):
    target = FusedGPUTarget()
    assert type(target.family_kernels[family]).__name__.lower() == f"{family}gpukernel"
    case = Case.from_id(MUTANT_CASES[family])
    got, cpu = outputs(target.run(case)), gpu_and_cpu(case, 4)[1]
    for name in cpu:
        np.testing.assert_allclose(got[name], cpu[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert target.supports(case.config) is True


def family_mutant(family: str) -> str:
    [name] = [name for name, (home, _) in GPU_FAMILY_MUTANTS.items() if home == family and "chunk" in name]
    return name


@pytest.mark.parametrize("family", FAMILIES)
def test_each_gpu_mutant_is_caught_and_fused_gpu_passes_the_same_case(family):
    name = family_mutant(family)
    results = gr.check([f"mutant:{name}", "fused-gpu"], MUTANT_CASES[family], checks=["reference"], in_process=True)
    assert {r.target: r.status for r in results} == {f"mutant:{name}": "fail", "fused-gpu": "pass"}
    assert "fused-gpu" in detection_targets([name])[1]  # judged beside its mutant
    assert home_profile(name) == "matrix"


@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpu_mutant_is_the_correct_kernel_on_a_case_of_one_chunk(family):
    """The shifted read is clamped to the last chunk: with one chunk nothing is read from elsewhere."""
    case = Case.from_id(ONE_CHUNK_CASES[family])
    correct = FusedGPUTarget.family_kernel_classes()[family]
    mutant = type("Mutant", (GPU_FAMILY_MUTANTS[family_mutant(family)][1], correct), {})
    got, want = (outputs(kernel().run(case, torch.float32, "cpu")) for kernel in (mutant, correct))
    assert all(np.array_equal(got[name], want[name]) for name in want)


def run_document(tmp_path) -> dict:
    [run] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    return json.loads((run / "results.json").read_text())


@pytest.mark.slow  # ~30 s each: the references and the fd witness of three cases
@pytest.mark.parametrize("seed", [1, 2])  # gla, gla, mlstm; gdn, gdn, mlstm (f64 and f32, a packed tail)
def test_a_short_matrix_sweep_passes_every_check(tmp_path, seed):
    code, output = invoke("sweep", "-t", "fused-gpu", "-c", "matrix", "--layers", 1, "-n", 3, "-s", seed,
                          "-j", 1, "--report-dir", tmp_path)
    assert code == 0, output
    results = run_document(tmp_path)["results"]
    assert {r["case_id"].split("-")[0] for r in results} <= {*FAMILIES, "rwkv7"}  # rwkv7: tests/test_fused_gpu_rwkv7.py
    assert {r["status"] for r in results} <= {"pass", "skip"}, [r for r in results if r["status"] not in ("pass", "skip")]
    assert {"reference", "fd", "padding", "determinism"} <= {r["check"] for r in results if r["status"] == "pass"}


@pytest.mark.slow  # ~1 min: eight matrix cases, four mutants beside fused-gpu
def test_the_gpu_matrix_mutants_are_caught_by_a_matrix_run_with_no_false_alarm(tmp_path):
    names = [family_mutant(family) for family in FAMILIES]
    code, output = invoke("mutants", "-c", "matrix", "-n", 12, "-s", 3, "--check", "reference",
                          *[arg for family in FAMILIES for arg in ("--mode", family)],
                          *[arg for name in names for arg in ("-m", name)], "--report-dir", tmp_path)
    assert code == 0, output
    document = run_document(tmp_path)
    assert {m["target"] for m in document["mutants"]} == {f"mutant:{name}" for name in names}
    assert all(m["flagged"] > 0 for m in document["mutants"])
    assert {f["target"]: f["flagged"] for f in document["false_alarms"]}["fused-gpu"] == 0


@pytest.mark.parametrize("case_id", ["gla-L1-uni-I2-H4-NH2-K2-R1-T7-B2-len7.5-f64-s4",
                                     "mlstm-L1-uni-I3-H4-NH2-K2-T6-B2-len6.3-f32-s3"])
def test_segments_and_poisoned_pass_the_triton_kernels(case_id):
    """State handed between calls and memory never written: the Triton kernels, interpreted."""
    rows = gr.check("fused-gpu", case_id, checks=["segments", "poisoned"], config="matrix", in_process=True)
    assert [r.status for r in rows] == ["pass", "pass"], [r.message for r in rows]
