"""The fd check: the finite-difference witness passes correct references (and float64 kernels)
on many random cases and catches a deliberately wrong reference or a wrong float64 kernel."""

import dataclasses

import numpy as np
import pytest

from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn import Case, Outputs, make_case
from gradcheck_rnn import references
from gradcheck_rnn.judging.checks import CHECKS
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.references import fd
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.targets import resolve_target


def witnessed_cases(count: int, seed: int):
    """Cases of the ci profile (every variant, projections, no-bias, zero lengths), made float64
    with every gradient requested so that every gradient is witnessed."""
    for case in draw_cases(load_profile("ci"), sweep_seed=seed, count=count):
        yield make_case(dataclasses.replace(case.config, dtype="f64"), case.seq_lengths, case.seed,
                        heads=case.heads, initial_state=case.initial_state)


def assert_references_pass(cases) -> None:
    judged = 0
    for case in cases:
        _, rows = CaseContext(case).truth(CHECKS["fd"])
        assert all(row.passed for row in rows), [(case.id, row.message) for row in rows if not row.passed]
        judged += len(rows)
    assert judged > 0


def test_correct_references_pass_the_witness_on_random_cases():
    assert_references_pass(witnessed_cases(30, seed=14))


@pytest.mark.slow
def test_correct_references_pass_the_witness_on_hundreds_of_cases():
    assert_references_pass(witnessed_cases(400, seed=1414))


# a soak case where the loss curves sharply (a layer-1 key and query near 0, the L2 norm's floor)
SHARPLY_CURVED = "gdn-L2-uni-I4-H1-K2-T15-B4-len2.9.6.11-f64-s1241104266-wparams"


def test_where_the_loss_curves_sharply_the_witness_cancels_its_truncation_and_still_catches_0_1_percent(monkeypatch):
    """fd(ε)'s ε² truncation alone reached the tolerance here for correct references (a soak's
    reference-disagreement); the extrapolation from ε and ε/10 cancels it, and a gradient 0.1 %
    off is still caught."""
    case = Case.from_id(SHARPLY_CURVED)
    assert judge_one(case, resolve_target("fused-cpu"), check="fd").status == "pass"
    monkeypatch.setattr(references, "run_reference", _scaled("loop", "l1.fwd.w_k", 1.001))
    assert judge_one(case, resolve_target("fused-cpu"), check="fd").status == "reference-disagreement"


def _scaled(name: str, key: str, factor: float):
    """run_reference with one reference's gradient of ``key`` scaled by ``factor``."""
    real = references.run_reference

    def broken(reference, case):
        out = real(reference, case)
        if reference != name:
            return out
        return Outputs(out.y, out.hy, out.cy, {**out.grads, key: out.grads[key] * factor})

    return broken


@pytest.mark.parametrize("reference", ["loop", "jax"])
@pytest.mark.parametrize("case_id, key", [
    ("lstm-L2-bi-I3-H5-P3-T6-B3-len6.4.0-f64-s21", "l1.fwd.w_hr"),
    ("gru-L1-uni-I3-H4-nobias-T5-B2-len5.3-f32-s3", "l0.fwd.w_hh"),
    ("rnn_tanh-L2-uni-I2-H3-T4-B2-len4.2-f64-s5-winputs", "x"),
])
def test_a_wrong_reference_is_caught_as_reference_disagreement(monkeypatch, reference, case_id, key):
    case = Case.from_id(case_id)
    target = resolve_target("fused-cpu")
    assert judge_one(case, target, check="fd").status in ("pass", "skip")
    monkeypatch.setattr(references, "run_reference", _scaled(reference, key, 1.001))  # 0.1 % off
    result = judge_one(case, target, check="fd")
    assert result.status == "reference-disagreement", result
    assert all(row.name.startswith(f"fd:{reference}.u") for row in result.tensors if not row.passed)
    assert f"{reference}.u" in result.message and "central difference" in result.message


def test_float64_kernels_are_judged_and_a_wrong_one_fails():
    case = Case.from_id("rnn_tanh-L2-uni-I3-H4-T6-B2-len3.6-f64-s9")
    for name in ("fused-cpu", "torch-native"):
        result = judge_one(case, resolve_target(name), check="fd")
        assert result.status == "pass" and len(result.tensors) == fd.DIRECTIONS, result
    caught = judge_one(case, resolve_target("mutant:truncated-bptt"), check="fd")
    assert caught.status == "fail" and "target.u" in caught.message


def test_lower_precision_targets_are_skipped_after_the_references_are_witnessed():
    result = judge_one(Case.from_id("lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s2"), resolve_target("fused-cpu"), check="fd")
    assert result.status == "skip" and "float64 targets only" in result.message


def test_directions_are_unit_vectors_over_the_requested_gradients_only():
    case = Case.from_id("lstm-L1-bi-I2-H3-P2-T4-B2-len4.0-f64-s2-wparams")
    directions = fd.random_directions(case)
    assert len(directions) == fd.DIRECTIONS
    for u in directions:
        assert set(u) == set(case.params)
        assert np.isclose(sum(float(np.sum(v * v)) for v in u.values()), 1.0)
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(directions, fd.random_directions(case)) for k in a)
