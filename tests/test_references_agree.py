"""The two independent float64 references agree on random cases, and a broken one is flagged
as reference-disagreement, never as a target failure."""

import numpy as np
import pytest

from gradcheck_rnn import Case, Outputs, references
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.targets import resolve_target


def disagreements(count: int) -> list[tuple[str, str]]:
    """The first ``count`` cases of a fixed ci-profile draw on which the references disagree."""
    profile = load_profile("ci")
    profile.wants = {"all": 1.0}  # compare every gradient
    profile.initial_state = 0.8
    found = []
    for case in draw_cases(profile, sweep_seed=2026, count=count):
        refs = CaseContext(case)
        if refs.disagreement is not None:
            found.append((case.id, refs.disagreement.message))
    return found


def test_loop_and_jax_agree_on_30_random_cases():
    """The first 30 cases of the slow test's 200 (that one took 15-50 s of the default suite)."""
    assert not disagreements(30)


@pytest.mark.slow
def test_loop_and_jax_agree_on_200_random_cases():
    assert not disagreements(200)


def test_disagreeing_references_are_their_own_status(monkeypatch):
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1")
    real = references.run_reference

    def broken_jax(name, case):
        out = real(name, case)
        if name != "jax":
            return out
        return Outputs(out.y, out.hy, out.cy, dict(out.grads, x=out.grads["x"] + 1e-3))

    monkeypatch.setattr(references, "run_reference", broken_jax)
    result = judge_one(case, resolve_target("torch-native"))
    assert result.status == "reference-disagreement" and "x" in result.message
    assert np.isfinite(result.tensors[0].ratio)


@pytest.mark.parametrize("broken", ["loop", "jax"])
def test_a_non_finite_reference_is_a_disagreement_and_no_target_passes_by_it(monkeypatch, broken):
    """NaN in one reference where the other is finite: the comparison bounds nothing where the
    side compared against is NaN, so a loop reference's NaN would have let every target pass
    there. Either side's NaN is reference-disagreement."""
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1")
    real = references.run_reference

    def nan_in(name, case):
        out = real(name, case)
        if name != broken:
            return out
        x = np.array(out.grads["x"], dtype=np.float64)
        x[0, 0, 0] = np.nan
        return Outputs(out.y, out.hy, out.cy, dict(out.grads, x=x))

    monkeypatch.setattr(references, "run_reference", nan_in)
    result = judge_one(case, resolve_target("torch-native"))
    assert result.status == "reference-disagreement" and "x" in result.message, result


def test_a_non_finite_loop_output_tangent_is_a_disagreement_of_the_jvp_check(monkeypatch):
    """The references' output tangents are compared the same way (jvp; gradgrad's products too)."""
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1")
    real = references.run_reference_jvp

    def nan_in_loop(name, case, tangents):
        out = real(name, case, tangents)
        if name != "loop":
            return out
        y = np.array(out.y, dtype=np.float64)
        y[0, 0, 0] = np.nan
        return Outputs(y, out.hy, out.cy, out.grads)

    monkeypatch.setattr(references, "run_reference_jvp", nan_in_loop)
    result = judge_one(case, resolve_target("fused-cpu"), check="jvp")
    assert result.status == "reference-disagreement" and "y" in result.message, result
