"""The rwkv7 family (gradcheck_rnn/families/rwkv7.py) and its fused CPU kernel
(gradcheck_rnn/kernels/rwkv7_cpu.py): case ids and regimes, the kernel equal to the float64 loop
reference, every check passing it in float32, fla 0.6.0's own RWKV-7 recurrence agreeing with the
family's map, and each rwkv7 mutant caught where its bug matters and hidden where the docstring
says it hides."""

import math

import numpy as np
import pytest
import torch

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.kernels.rwkv7_cpu import RWKV7CPUKernel
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.references import run_reference

# Every option, regime and variant once: heads, K not a power of two, a zero and uneven lengths,
# stacked layers, -nobias, -z, partial requests and head-gradient variants.
F64_IDS = [
    "rwkv7-L2-uni-I3-H4-NH2-K2-T9-B4-len9.5.0.1-f64-s1",
    "rwkv7-L3-uni-I2-H6-NH3-K3-strongdecay-T11-B3-len11.0.8-f64-s3",
    "rwkv7-L1-uni-I4-H2-K4-longmem-T9-B3-len9.5.4-f64-s4-z",
    "rwkv7-L2-uni-I1-H2-K2-nobias-T5-B3-len0.5.3-f64-s5-gstates",
    "rwkv7-L2-uni-I3-H4-NH4-K3-T7-B2-len7.4-f64-s6-wparams-glast",
    "rwkv7-L1-uni-I3-H3-K2-T6-B2-len6.3-f64-s7-winputs-gy",
]
# A case under strong decay (steps decaying faster than e^-5) and one with an initial state (h0
# requested): the cases the mutants' bugs need.
STRONG_F32 = "rwkv7-L1-uni-I3-H4-NH2-K3-strongdecay-T18-B2-len18.12-f32-s2"
WITH_H0 = "rwkv7-L2-uni-I3-H4-NH2-K2-T9-B3-len9.5.0-f64-s1"


def test_case_ids_round_trip_with_the_family_s_parameters():
    case = Case.from_id("rwkv7-L1-uni-I3-H4-NH2-K3-T4-B1-len4-f64-s1")
    assert case.id == "rwkv7-L1-uni-I3-H4-NH2-K3-T4-B1-len4-f64-s1"
    assert {k: v.shape for k, v in case.params.items()} == {
        "l0.fwd.w_q": (6, 3), "l0.fwd.w_k": (6, 3), "l0.fwd.w_v": (4, 3), "l0.fwd.w_d": (6, 3), "l0.fwd.b_d": (6,),
        "l0.fwd.w_a": (6, 3), "l0.fwd.b_a": (6,)}
    assert case.h0.shape == (1, 1, 2 * 3 * 2)
    assert sorted(k.rpartition(".")[2] for k in Case.from_id("rwkv7-L1-uni-I3-H4-K2-nobias-T4-B1-len4-f64-s1").params) \
        == ["w_a", "w_d", "w_k", "w_q", "w_v"]


def test_the_regimes_shift_only_the_decay_logits_bias():
    """A larger logit decays faster (log w = −exp(d)): -longmem lowers it by 4, -strongdecay raises it by log 4."""
    plain = Case.from_id("rwkv7-L1-uni-I3-H4-K2-T4-B1-len4-f64-s3")
    for token, shift in (("longmem", -4.0), ("strongdecay", math.log(4.0))):
        held = Case.from_id(f"rwkv7-L1-uni-I3-H4-K2-{token}-T4-B1-len4-f64-s3")
        for key, value in plain.params.items():
            np.testing.assert_array_equal(held.params[key], value + shift if key.endswith("b_d") else value)
        np.testing.assert_array_equal(held.x, plain.x)
    held = Case.from_id("rwkv7-L1-uni-I3-H4-K2-longmem-T4-B1-len4-f64-s3").params["l0.fwd.b_d"]
    assert np.all(np.exp(-np.exp(held)) > 0.97)  # the bias alone: w near 1


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    out = as_mapping(RWKV7CPUKernel().run(case, torch.float64))
    assert set(out) == {"y", "hy", *case.wants}
    for name, value in out.items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-10,
                                   atol=1e-12 * (1 + np.abs(expected[name]).max()), err_msg=name)


def test_every_check_passes_the_float32_kernel_under_strong_decay():
    rows = gr.check("fused-cpu", STRONG_F32, config="matrix")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert {"reference", "segments", "padding"} <= {r.check for r in rows if r.status == "pass"}


def test_fla_s_dplr_recurrence_agrees_with_the_family():
    """fla 0.6.0's torch loop of RWKV-7 (fla-naive), fed r, w = −exp(d), k, v, a = −κ̂, b = κ̂ ⊙ η by
    the target's map: the family's definitions are fla's, judged by our references."""
    pytest.importorskip("fla.ops.generalized_delta_rule.dplr.naive")
    rows = gr.check("fla-naive", "rwkv7-L2-uni-I3-H4-NH2-K2-T6-B3-len6.4.0-f32-s1", config="matrix",
                    checks=["reference"])
    assert [r.status for r in rows] == ["pass"], [r.message for r in rows]
    assert "no backward" in gr.check("fla-recurrent", STRONG_F32, checks=["reference"])[0].message


def statuses(targets, case_id):
    rows = gr.check(targets, case_id, config="matrix", checks=["reference"], in_process=True)
    return {r.target: r.status for r in rows}


def test_the_h0_low_rank_mutant_shows_only_with_an_initial_state():
    """fla #351's class: wrong dh0 only; a case without h0 (-z) cannot see it."""
    name = "mutant:rwkv7-h0-grad-low-rank-dropped"
    assert statuses([name, "fused-cpu"], WITH_H0) == {name: "fail", "fused-cpu": "pass"}
    assert statuses([name], WITH_H0 + "-z") == {name: "pass"}


def test_the_carry_without_the_low_rank_term_is_caught():
    name = "mutant:rwkv7-state-grad-no-low-rank"
    assert statuses([name, "fused-cpu"], WITH_H0 + "-z") == {name: "fail", "fused-cpu": "pass"}


def test_the_clamped_exclusive_cumulative_decay_loses_the_gradient_under_strong_decay():
    """fla #77's class: the clamp that keeps exp(−G) finite is exact only while no step decays
    faster than e^−5, so strong decay shows it (f32 and f64) and a decay near 1 hides it."""
    name = "mutant:rwkv7-decay-grad-exclusive-cumsum"
    assert statuses([name, "fused-cpu"], STRONG_F32) == {name: "fail", "fused-cpu": "pass"}
    assert statuses([name], STRONG_F32.replace("-f32-", "-f64-")) == {name: "fail"}
    assert statuses([name], STRONG_F32.replace("strongdecay", "longmem")) == {name: "pass"}
