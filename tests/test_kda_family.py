"""The kda family (gradcheck_rnn/families/kda.py) and its fused chunkwise kernel
(gradcheck_rnn/kernels/kda_cpu.py): the two references agree, the step is fla 0.6.0's
naive_recurrent_kda with its KDA gate, the kernel equals the float64 loop reference at every chunk
size and passes every check in float32 (each regime, -converged included), and each kda mutant is
caught where the correct kernel passes."""

import numpy as np
import pytest
import torch
from family_checks import assert_mutants_fail_where_fused_cpu_passes

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import family
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.kda_cpu import KDACPUKernel
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.references import run_reference

# Lengths at c−1, c, c+1 and 2c+1 of chunks 2, 4 and 8, a zero length, every regime and variant once.
F64_IDS = [
    "kda-L2-uni-I3-H4-NH2-K2-R1-T9-B4-len9.8.5.0-f64-s1",
    "kda-L1-uni-I3-H4-NH2-K3-R2-converged-T9-B3-len9.5.4-f64-s2",
    "kda-L2-uni-I2-H2-K2-R1-strongdecay-T7-B2-len7.3-f64-s3-gstates",
    "kda-L1-uni-I2-H2-K4-R3-converged-nobias-T7-B2-len7.4-f64-s4-z",
    "kda-L2-uni-I3-H4-NH4-K1-R1-longmem-T13-B2-len13.4-f64-s5-wparams-glast",
    "kda-L1-uni-I2-H3-K2-R2-T6-B2-len6.1-f64-s6-winputs-gy",
]


@pytest.mark.parametrize("case_id", F64_IDS[:3])
def test_the_two_references_agree(case_id):
    case = Case.from_id(case_id)
    loop, jax = as_mapping(run_reference("loop", case)), as_mapping(run_reference("jax", case))
    for name, value in loop.items():
        np.testing.assert_allclose(jax[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_the_step_is_flas_naive_recurrent_kda_with_its_gate():
    """One layer's state and outputs through the family's step equal fla 0.6.0's own torch loop fed
    the same q̂, k̂, v, gate and β (``naive_recurrent_kda``, ``naive_kda_gate``), in float64."""
    naive = pytest.importorskip("fla.ops.kda.naive")
    gate_module = pytest.importorskip("fla.ops.kda.gate")
    from gradcheck_rnn.families.ops import torch_ops

    case = Case.from_id("kda-L1-uni-I3-H4-NH2-K3-R2-T6-B1-len6-f64-s7")
    cfg, kda = case.config, family("kda")
    p = {k.rpartition(".")[2]: torch.tensor(v) for k, v in case.params.items()}
    x, h = torch.tensor(case.x[:, 0]), torch.tensor(case.h0[0, 0])
    ours = []
    for t in range(cfg.max_len):
        o, h, _ = kda.step(torch_ops(), p, x[t], h, None, cfg)
        ours.append(o)
    NH, K, V = kda.sizes(cfg)
    xh, q, k, v = kda.project(torch_ops(), p, x, cfg)

    def unit(a):
        return a / torch.sqrt((a * a).sum(-1, keepdim=True) + 1e-6)

    raw_gate = ((xh @ p["w_a1"].T) @ p["w_a2"].T).reshape(-1, NH, K)
    g = gate_module.naive_kda_gate(raw_gate, p["a_log"], p["b_a"], output_dtype=torch.float64)
    beta = torch.sigmoid(xh @ p["w_b"].T + p["b_b"])
    o, last = naive.naive_recurrent_kda(unit(q)[None], unit(k)[None], v[None], g[None], beta[None],
                                        initial_state=torch.tensor(case.h0[0, 0]).reshape(1, NH, K, V),
                                        output_final_state=True)
    # fla computes in float32 (``.to(torch.float)``): agreement to its rounding
    np.testing.assert_allclose(o[0].reshape(cfg.max_len, -1).double(), torch.stack(ours), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last.reshape(-1).double(), h, rtol=1e-5, atol=1e-6)


def test_regimes_shift_the_gates_and_are_refused_where_they_cannot_be():
    plain = Case.from_id("kda-L1-uni-I2-H2-K2-R1-T5-B1-len5-f64-s9")
    converged = Case.from_id("kda-L1-uni-I2-H2-K2-R1-converged-T5-B1-len5-f64-s9")
    assert np.allclose(converged.params["l0.fwd.b_b"], plain.params["l0.fwd.b_b"] + 4)
    assert np.allclose(converged.params["l0.fwd.a_log"], plain.params["l0.fwd.a_log"] - 4)
    longmem = Case.from_id("kda-L1-uni-I2-H2-K2-R1-longmem-T5-B1-len5-f64-s9")
    assert np.allclose(longmem.params["l0.fwd.b_a"], plain.params["l0.fwd.b_a"] - 4)  # −softplus: smaller is slower
    with pytest.raises(UsageError, match="strongdecay is not allowed with longmem"):
        Case.from_id("kda-L1-uni-I2-H2-K2-R1-strongdecay-longmem-T5-B1-len5-f64-s9")


def test_the_hypothesis_strategy_draws_kda_with_its_regimes_and_ids_that_round_trip():
    from hypothesis import given, settings

    from gradcheck_rnn.strategies import cases

    seen = set()

    @settings(max_examples=30, deadline=None, database=None, derandomize=True)
    @given(cases(modes=("kda",), no_bias=True, zero_lengths=True, long_memory=True, packed_tail=True))
    def draw(case):
        assert Case.from_id(case.id).id == case.id and not case.config.bidirectional
        seen.add((case.config.option("converged"), case.config.option("strong_decay"), case.config.long_memory))

    draw()
    assert all({s[i] for s in seen} == {True, False} for i in range(3)), seen


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference_at_every_chunk_size(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    for chunk in [1, 3, 4, 8]:
        out = as_mapping(KDACPUKernel(chunk).run(case, torch.float64))
        assert set(out) == {"y", "hy", *case.wants}, chunk
        for name, value in out.items():
            scale = np.abs(expected[name]).max()  # a K = 1 key's L2 norm makes its map's gradient tiny
            np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-10, atol=1e-12 * (1 + scale),
                                       err_msg=f"chunk {chunk}: {name}")


@pytest.mark.parametrize("case_id", ["kda-L2-uni-I3-H4-NH2-K3-R2-converged-T13-B3-len13.4.5-f32-s11",
                                     "kda-L2-uni-I2-H4-NH2-K2-R1-strongdecay-T9-B3-len0.9.3-f32-s12-gstates-z"])
def test_every_check_passes_the_float32_kernel(case_id):
    rows = gr.check("fused-cpu", case_id, config="matrix")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert [r.status for r in rows if r.check == "reference"] == ["pass"]


def test_fused_cpu_computes_only_the_requested_gradients():
    case = Case.from_id("kda-L2-uni-I3-H4-NH2-K2-R1-T6-B2-len6.2-f32-s1-wx")
    assert set(FusedCPUTarget().run(case).grads) == {"x"}


# ------------------------------------------------------------------ mutants
# two heads with their own decays and several chunks, in float32 (attention-gym #463 is caught there)
MUTANT_IDS = ["kda-L2-uni-I3-H4-NH2-K2-R1-T9-B3-len9.5.4-f32-s21",
              "kda-L1-uni-I2-H4-NH2-K3-R2-converged-T10-B2-len10.6-f32-s22"]


MUTANTS = ["kda-state-grad-first-head-decay", "kda-norm-backward-from-rounded-output", "kda-decay-grad-wrong-axis"]


@pytest.mark.parametrize("case_id", MUTANT_IDS)
def test_each_kda_mutant_is_caught_and_the_correct_kernel_passes_where_they_are_caught(case_id):
    assert_mutants_fail_where_fused_cpu_passes(MUTANTS, case_id, config="matrix")


def test_the_first_head_mutant_hides_with_one_head():
    rows = gr.check("mutant:kda-state-grad-first-head-decay", "kda-L2-uni-I3-H4-K2-R1-T9-B3-len9.5.4-f32-s21",
                    config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


# ------------------------------------------------------------------ fla 0.6.0's KDA loop (extra: fla)
FLA_KDA = "kda-L1-uni-I2-H4-NH2-K2-R2-converged-T5-B2-len5.3-f32-s3"


def test_fla_naive_judges_kda_and_a_transposed_state_in_its_map_is_caught():
    """fla's naive_recurrent_kda and naive_kda_gate through the fla-naive map pass; the same map with
    the initial state read as (V, K) fails on y and hy (tests/foreign_matrix_targets.py)."""
    import importlib.util

    if importlib.util.find_spec("fla") is None:
        pytest.skip("fla is not installed (extra: fla)")
    import foreign_matrix_targets

    from gradcheck_rnn.judging.judge import judge_one
    from gradcheck_rnn.targets import resolve_target

    case = Case.from_id(FLA_KDA)
    assert judge_one(case, resolve_target("fla-naive")).status == "pass"
    broken = judge_one(case, foreign_matrix_targets.fla_naive_transposed_state)
    assert broken.status == "fail" and {"y", "hy"} <= {t.name for t in broken.tensors if not t.passed}
    assert "forward-only" in resolve_target("fla-recurrent").supports(case.config)
    assert "CUDA only" in resolve_target("fla-chunk").supports(case.config)
