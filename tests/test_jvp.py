"""The jvp check (issue 47): forward-mode products against the float64 references and against the
target's own reverse mode; loud refusals are skips, silent zeros and direction-blind tangents fail."""

import numpy as np
import pytest
import torch

from gradcheck_rnn import Outputs, make_case
from gradcheck_rnn.judging.context import CaseContext, tangent_directions
from gradcheck_rnn.judging.judge import judge
from gradcheck_rnn.model.case import Case
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.model.rnn_config import RNNConfig
from gradcheck_rnn.references import fd, run_reference, run_reference_hvp, run_reference_jvp
from gradcheck_rnn.references.jax_family import run_jax_family_jvp
from gradcheck_rnn.references.jax_cudnn import run_jax_jvp
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.targets.torch_native import TorchNativeTarget


def ci_cases(count: int, seed: int = 0) -> list[Case]:
    return list(draw_cases(load_profile("ci"), sweep_seed=seed, count=count))


def jvp_rows(case: Case, *targets) -> list:
    return list(judge(CaseContext(case), targets, checks=["jvp"]))


def lstm_case(dtype: str = "f64", lengths=(5, 3, 4), wants: str = "all") -> Case:
    config = RNNConfig("lstm", 2, True, 3, 4, max_len=5, batch_size=3, dtype=dtype)
    return make_case(config, list(lengths), seed=11, wants=wants)


class Reference:
    """A target whose forward mode is the loop reference itself (and reverse mode too), optionally spoiled."""

    def __init__(self, spoil=None) -> None:
        self.spoil = spoil

    def run(self, case):
        return run_reference("loop", case)

    def jvp(self, case, tangents):
        out = run_reference_jvp("loop", case, tangents)
        return out if self.spoil is None else self.spoil(case, tangents, out)


def test_loop_jvp_is_the_directional_derivative_of_the_outputs():
    """vᵀ(J·u) of the loop reference's forward mode equals a central difference of the loss along u."""
    for case in ci_cases(4):
        u = tangent_directions(case)[0]
        out = run_reference_jvp("loop", case, u)
        heads = np.sum(out.y * case.dy) + np.sum(out.hy * case.dhy)
        heads += 0.0 if out.cy is None else np.sum(out.cy * case.dcy)
        assert heads == pytest.approx(fd.central_difference(case, u, 1e-6), rel=1e-6, abs=1e-8), case.id


def test_references_agree_on_output_tangents():
    for case in ci_cases(8, seed=3):
        assert CaseContext(case).jvp.disagreement is None, case.id


@pytest.mark.slow
def test_references_agree_on_output_tangents_of_the_other_families():
    """The generic step program's jax.jvp (its own compiles: slow) against the loop's forward AD."""
    for case in draw_cases(load_profile("families"), 0, 4):
        assert CaseContext(case).jvp.disagreement is None, case.id


@pytest.mark.slow
def test_bucketed_jvp_programs_equal_the_exact_shape_ones():
    """Both JAX programs place tangents into their buckets exactly (the family placement is affine)."""
    case = lstm_case()
    u = tangent_directions(case)[0]
    bucketed, exact = run_jax_jvp(case, u), run_jax_jvp(case, u, bucketed=False)
    for name in ("y", "hy", "cy"):
        np.testing.assert_allclose(getattr(bucketed, name), getattr(exact, name), rtol=1e-12, atol=1e-13)
    s6 = next(c for c in draw_cases(load_profile("families"), 0, 20) if c.config.mode == "s6")
    u = tangent_directions(s6)[0]
    bucketed, exact = run_jax_family_jvp(s6, u), run_jax_family_jvp(s6, u, bucketed=False)
    np.testing.assert_allclose(bucketed.y, exact.y, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(bucketed.hy, exact.hy, rtol=1e-12, atol=1e-13)


def test_fused_cpu_forward_mode_passes_on_ci_cases():
    target = resolve_target("fused-cpu")
    judged = 0
    for case in ci_cases(12, seed=5):  # the four modes, bi and uni, 1-3 layers, f32 and f64, P1, nobias, len 0
        (row,) = jvp_rows(case, target)
        assert row.status == "pass", (case.id, row.message)
        names = [t.name for t in row.tensors]
        assert "dot" in names and "y.u0" in names and "y.u1" in names
        judged += "direction" in names
    assert judged > 0


def test_a_target_without_forward_mode_is_a_skip_with_the_reason():
    (row,) = jvp_rows(lstm_case(), lambda case: run_reference("loop", case))
    assert row.status == "skip" and "offers no forward mode" in row.message


def test_a_declined_case_is_a_skip_and_a_raising_supports_jvp_an_error():
    class Declines(Reference):
        def supports_jvp(self, case):
            return "no forward mode in f64"

    class Raises(Reference):
        def supports_jvp(self, case):
            raise ValueError("boom")

    (declined,) = jvp_rows(lstm_case(), Declines())
    assert declined.status == "skip" and declined.message == "no forward mode in f64"
    (raised,) = jvp_rows(lstm_case(), Raises())
    assert raised.status == "error" and "boom" in raised.message


def test_the_references_own_forward_mode_passes():
    (row,) = jvp_rows(lstm_case(), Reference())
    assert row.status == "pass", row.message


def test_zero_tangents_fail_as_a_silent_zero():
    def zeros(case, tangents, out):
        return Outputs(np.zeros_like(out.y), np.zeros_like(out.hy), np.zeros_like(out.cy))

    (row,) = jvp_rows(lstm_case(), Reference(zeros))
    assert row.status == "fail"
    assert "same output tangents for two different directions" in row.message


def test_tangents_that_ignore_the_direction_fail():
    """A forward mode that returns J·u along one fixed direction, whatever it is given."""
    def fixed(case, tangents, out):
        return run_reference_jvp("loop", case, tangent_directions(case)[0])

    (row,) = jvp_rows(lstm_case(), Reference(fixed))
    assert row.status == "fail"
    assert "same output tangents for two different directions" in row.message


def test_the_dot_product_test_catches_a_reverse_mode_that_disagrees_with_the_forward_mode():
    """Forward mode right, reverse mode (the base run's gradients) off by 1 %: only the dot row
    ties the jvp check to it."""
    class WrongGradients(Reference):
        def run(self, case):
            out = run_reference("loop", case)
            return Outputs(out.y, out.hy, out.cy, {k: v * 1.01 for k, v in out.grads.items()})

    (row,) = jvp_rows(lstm_case(), WrongGradients())
    assert row.status == "fail"
    failing = [t.name for t in row.tensors if not t.passed]
    assert failing == ["dot"], failing
    assert "forward and reverse modes disagree" in row.message


def test_wrong_tangent_values_fail_against_the_references():
    def scaled(case, tangents, out):
        return Outputs(out.y * 1.001, out.hy, out.cy)

    (row,) = jvp_rows(lstm_case(), Reference(scaled))
    assert row.status == "fail"
    assert any(t.name.startswith("y.u") and not t.passed for t in row.tensors)


def test_the_forward_mode_mutant_is_caught_and_fused_cpu_is_not():
    mutant, correct = resolve_target("mutant:jvp-recurrent-tangent-dropped"), resolve_target("fused-cpu")
    caught = 0
    for case in ci_cases(10):
        bad, good = jvp_rows(case, mutant, correct)
        assert good.status == "pass", (case.id, good.message)
        caught += bad.status == "fail"
    assert caught >= 5


def test_fused_cpu_declines_forward_mode_outside_the_cudnn_cells_and_in_half():
    target = resolve_target("fused-cpu")
    s6 = next(c for c in draw_cases(load_profile("families"), 0, 20) if c.config.mode == "s6")
    (row,) = jvp_rows(s6, target)
    assert row.status == "skip" and "cuDNN's cells only" in row.message
    (row,) = jvp_rows(lstm_case("f16"), target)
    assert row.status == "skip" and "f64 and f32 only" in row.message


def test_torch_native_forward_mode_passes_on_full_length_and_declines_packed_with_torchs_reason():
    target = resolve_target("torch-native")
    (row,) = jvp_rows(lstm_case(lengths=(5, 5, 5)), target)
    assert row.status == "pass", row.message
    (row,) = jvp_rows(lstm_case(lengths=(5, 3, 4)), target)
    assert row.status == "skip" and "_pack_padded_sequence" in row.message
    reason = TorchNativeTarget().supports_jvp(lstm_case("f32", lengths=(5, 5, 5)))
    assert reason is True or "mkldnn_rnn_layer" in reason


@pytest.mark.slow
def test_the_torch_forward_mode_script_shows_both_refusals():
    """docs/torch-2.13/forward_ad.py: what torch-native's jvp declines, in torch's words."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "docs" / "torch-2.13" / "forward_ad.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=300)
    assert done.stdout.count("forward AD works, max |jvp - central difference|") == 3
    assert "packed sequences: refused: NotImplementedError: Trying to use forward AD with _pack_padded_sequence" \
        in done.stdout
    assert "dense float32 LSTM: refused: NotImplementedError: Trying to use forward AD with mkldnn_rnn_layer" \
        in done.stdout


# --- gradgrad: Hessian-vector products --------------------------------------------------------------

def gradgrad_rows(case: Case, *targets) -> list:
    return list(judge(CaseContext(case), targets, checks=["gradgrad"]))


class DoubleBackward:
    """A target whose second order is the loop reference's double backward (computed in ``dtype``),
    optionally spoiled."""

    def __init__(self, spoil=None, dtype: str = "f64") -> None:
        self.spoil, self.dtype = spoil, {"f64": torch.float64, "f32": torch.float32}[dtype]

    def run(self, case):
        return run_reference("loop", case)

    def hvp(self, case, tangents):
        from gradcheck_rnn.references.loop import run_loop_hvp

        out = run_loop_hvp(case, tangents, dtype=self.dtype)
        return out if self.spoil is None else Outputs(None, None, grads=self.spoil(case, tangents, out.grads))


def test_loop_hvp_is_the_directional_derivative_of_the_gradients():
    from gradcheck_rnn.references.fd import shifted

    for case in [c for c in ci_cases(8) if c.config.mode != "rnn_relu"][:3]:
        u = tangent_directions(case)[0]
        hv = run_reference_hvp("loop", case, u).grads
        plus, minus = (run_reference("loop", shifted(case, u, s)).grads for s in (1e-5, -1e-5))
        for name, value in hv.items():
            np.testing.assert_allclose(value, (plus[name] - minus[name]) / 2e-5, rtol=1e-5, atol=1e-7, err_msg=case.id)


def test_references_agree_on_hessian_vector_products():
    for case in ci_cases(8, seed=3):
        assert CaseContext(case).hvp.disagreement is None, case.id


def test_torch_native_second_order_passes_and_fused_cpu_refuses_it_loudly():
    native, fused = resolve_target("torch-native"), resolve_target("fused-cpu")
    (good,), (refused,) = gradgrad_rows(lstm_case(), native), gradgrad_rows(lstm_case(), fused)
    assert good.status == "pass", good.message
    assert {"direction", "symmetry", "x.u0", "l1.bwd.w_hh.u1"} <= {t.name for t in good.tensors}
    assert refused.status == "skip" and "not itself differentiable" in refused.message


def test_a_target_without_second_order_is_a_skip_and_silent_zeros_fail():
    (row,) = gradgrad_rows(lstm_case(), Reference())
    assert row.status == "skip" and "offers no second order" in row.message
    (row,) = gradgrad_rows(lstm_case(), DoubleBackward(lambda case, u, grads: {k: 0 * v for k, v in grads.items()}))
    assert row.status == "fail" and "same Hessian-vector products for two different directions" in row.message


def test_an_asymmetric_second_order_fails_the_symmetry_row():
    """H·u with one block scaled: each product is off, and u1ᵀ(H·u0) ≠ u0ᵀ(H·u1) says so on its own."""
    def skewed(case, u, grads):
        return {k: v * 1.05 if k == "x" else v for k, v in grads.items()}

    (row,) = gradgrad_rows(lstm_case(), DoubleBackward(skewed))
    symmetry = next(t for t in row.tensors if t.name == "symmetry")
    assert row.status == "fail" and not symmetry.passed and "not symmetric" in symmetry.message


def test_the_second_order_mutants_are_caught_and_torch_native_is_not():
    names = ("mutant:hvp-gate-second-order-dropped", "mutant:hvp-silent-zeros")
    targets = [resolve_target(n) for n in names] + [resolve_target("torch-native")]
    caught = dict.fromkeys(names, 0)
    for case in [c for c in ci_cases(24) if c.config.mode in ("lstm", "gru")][:6]:
        *bad, good = gradgrad_rows(case, *targets)
        assert good.status in ("pass", "skip"), (case.id, good.message)
        for name, row in zip(names, bad):
            caught[name] += row.status == "fail"
    assert all(count >= 2 for count in caught.values()), caught


def test_product_rows_get_more_room_below_float64_only():
    """A tangent sums every requested array's rounded contribution, a Hessian-vector product the
    first order's terms once more: jvp and gradgrad judge below float64 with PRODUCT_ROOM times
    the room, float64 with the table as it is."""
    from gradcheck_rnn.judging.checks.directions import PRODUCT_ROOM, ProductTolerances
    from gradcheck_rnn.model.tolerances import Tolerances

    first = Tolerances(rtol={"weight_grad": 3e-4})
    second = ProductTolerances(first)
    assert second.for_tensor("f64", "l0.fwd.w_ih.u0") == first.for_tensor("f64", "l0.fwd.w_ih.u0")
    widened, table = second.for_tensor("f32", "l0.fwd.w_ih.u0"), first.for_tensor("f32", "l0.fwd.w_ih.u0")
    assert (widened.rtol, widened.atol) == (PRODUCT_ROOM * 3e-4, PRODUCT_ROOM * table.atol)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_rounding_sensitive_family_s_second_order_is_judged_in_every_dtype(dtype):
    """gdn below float64 is judged as every family is, its failing rows re-judged with the rounding
    probe's second-order allowance: the loop's own double backward computed in the case dtype passes,
    silent zeros fail (the direction row, widened by the allowance, still sees them)."""
    case = Case.from_id(f"gdn-L1-uni-I3-H4-NH2-K2-T4-B2-len4.3-{dtype}-s5")
    (correct,) = gradgrad_rows(case, DoubleBackward(dtype=dtype))
    (zeros,) = gradgrad_rows(case, DoubleBackward(lambda case, u, grads: {k: 0 * v for k, v in grads.items()}))
    assert correct.status == "pass" and zeros.status == "fail", (correct.message, zeros.message)
    assert "same Hessian-vector products for two different directions" in zeros.message


# fla-naive's float32 gdn double backward failed it at 1.03 times the product room (docs/findings/soak.md)
KEY_NEAR_ZERO = "gdn-L1-uni-I4-H3-NH3-K2-longmem-T7-B1-len7-f32-s1843578612-glast-z"


def test_the_rounding_allowance_grants_rounding_and_not_a_wrong_element():
    """On a gdn case whose key near 0 amplifies float32 rounding: a double backward twice as far from
    the truth as the loop's own float32 one (past the fixed room) passes with the allowance; the
    float64 truth with one element off by 1e-2 where the allowance is largest still fails."""
    from gradcheck_rnn.references.loop import run_loop_hvp

    case = Case.from_id(KEY_NEAR_ZERO)
    context = CaseContext(case)

    def unlucky(case, u, grads):  # f64 + 2·(f32 − f64): a float32 rounding error twice the loop's
        f32 = run_loop_hvp(case, u, dtype=torch.float32).grads
        return {k: v + 2 * (f32[k] - v) for k, v in grads.items()}

    (row,) = judge(context, [DoubleBackward(unlucky)], checks=["gradgrad"])
    granted = [t for t in row.tensors if t.drift]
    assert row.status == "pass" and granted, row.message
    assert all("within tolerance + drift allowance" in t.message for t in granted)

    allowance = context.hvp_drift[0].for_tensor("l0.fwd.w_k")
    worst = np.unravel_index(int(np.argmax(allowance)), allowance.shape)

    def one_element_off(case, u, grads):
        grads = {k: v.copy() for k, v in grads.items()}
        if np.array_equal(u["x"], context.hvp.directions[0]["x"]):
            grads["l0.fwd.w_k"][worst] *= 1 + 1e-2
        return grads

    (row,) = judge(context, [DoubleBackward(one_element_off)], checks=["gradgrad"])
    (off,) = [t for t in row.tensors if not t.passed]
    assert row.status == "fail" and off.name == "l0.fwd.w_k.u0" and off.drift > 0, row.message
    assert "outside tolerance + drift allowance" in off.message


def test_the_second_order_allowance_is_local_and_runs_the_noise_only_across_layers():
    """The allowance of an element no rounding reaches (x past each sequence's length) is 0; a
    one-layer case runs the loop once in float32 only (no layer below to carry noise), a deeper one
    the probe's noisy float64 runs besides."""
    from gradcheck_rnn.references.drift import PROBE_RUNS, hvp_probe_allowance

    for layers, runs in ((1, 1), (2, PROBE_RUNS + 1)):
        case = Case.from_id(f"gdn-L{layers}-uni-I3-H4-NH2-K2-longmem-T6-B2-len6.2-f32-s7")
        u = tangent_directions(case)[0]
        allowance = hvp_probe_allowance(case, u, run_reference_hvp("loop", case, u).grads)
        dx = allowance.for_tensor("x")
        assert allowance.runs == runs and dx is not None and dx[:2, 1].any()
        assert not dx[2:, 1].any(), dx[2:, 1]
