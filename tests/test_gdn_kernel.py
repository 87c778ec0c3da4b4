"""The fused chunkwise gdn kernel (gradcheck_rnn/kernels/gdn_cpu.py): equal to the float64 loop
reference at every chunk size, judged correct by every check in float32 (strong decay, long
memory, lengths at chunk edges, zero lengths, partial requests, head variants), each of its
mutants caught where the correct kernel passes, and in float32 as accurate as the family's step
run one step at a time, stage by stage (issue 35)."""

import dataclasses

import numpy as np
import pytest
import torch
from family_checks import assert_mutants_fail_where_fused_cpu_passes

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.families.ops import torch_ops
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.gdn_cpu import GDNCPUKernel
from gradcheck_rnn.references import run_reference

CHUNKS = [1, 2, 3, 4, 8]
# Lengths 9, 8, 5, 4, 3 sit at c−1, c, c+1 and 2c+1 of chunks 2, 4 and 8 (and cross chunk 3's
# edges); 0 is a sequence that never runs. Every family option, regime and variant appears once.
F64_IDS = [
    "gdn-L2-uni-I3-H4-NH2-K2-T9-B6-len9.8.5.4.3.0-f64-s1",
    "gdn-L3-uni-I2-H6-NH3-K3-strongdecay-T17-B4-len17.9.0.8-f64-s3",
    "gdn-L1-uni-I4-H2-K4-longmem-T9-B3-len9.5.4-f64-s4-z",
    "gdn-L2-uni-I1-H1-K1-nobias-T5-B3-len0.5.3-f64-s5-gstates",
    "gdn-L2-uni-I3-H4-NH4-K2-T13-B2-len13.4-f64-s6-wparams-glast",
    "gdn-L2-uni-I3-H4-NH2-K3-T9-B2-len9.3-f64-s7-winputs-gy",
    "gdn-L1-uni-I2-H3-K1-strongdecay-T12-B2-len12.7-f64-s8-wx",
]
# The default suite keeps the two cheapest; the two that compile the largest programs (2-3 s
# each) are slow twins: strong decay and long memory stay in its f64 and rounding-probe cases.
F32_IDS = [
    pytest.param("gdn-L3-uni-I2-H6-NH3-K3-strongdecay-T17-B4-len17.9.0.8-f32-s3", marks=pytest.mark.slow),
    pytest.param("gdn-L2-uni-I3-H4-NH2-K4-longmem-T13-B3-len13.4.5-f32-s11", marks=pytest.mark.slow),
    "gdn-L2-uni-I1-H2-K2-nobias-T9-B3-len0.9.3-f32-s12-gstates-z",
    "gdn-L1-uni-I4-H4-NH4-K1-T8-B2-len8.7-f32-s13-winputs-glast",
]


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference_at_every_chunk_size(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    for chunk in CHUNKS:
        out = as_mapping(GDNCPUKernel(chunk).run(case, torch.float64))
        assert set(out) == {"y", "hy", *case.wants}, chunk
        for name, value in out.items():
            # atol relative to the tensor's scale: a K = 1 key's L2 norm makes its map's gradient ~1e-6
            scale = np.abs(expected[name]).max()
            np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-10, atol=1e-12 * (1 + scale),
                                       err_msg=f"chunk {chunk}: {name}")


@pytest.mark.parametrize("case_id", F32_IDS)
@pytest.mark.parametrize("chunk", [4, pytest.param(16, marks=pytest.mark.slow)])  # chunk 16: strong decay over e^-64
def test_every_check_passes_the_float32_kernel(case_id, chunk):
    """Chunk 16 spans e^−64 of decay under -strongdecay: still finite, still right."""
    target = FusedCPUTarget(family_kernels={"gdn": GDNCPUKernel(chunk)})
    rows = gr.check(target, case_id, config="matrix")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert [r.status for r in rows if r.check == "reference"] == ["pass"]


def test_fused_cpu_runs_gdn_computing_only_the_requested_gradients():
    case = Case.from_id("gdn-L2-uni-I3-H4-NH2-K2-T6-B2-len6.2-f32-s1-wx")
    assert set(FusedCPUTarget().run(case).grads) == {"x"}
    assert "f64 and f32 only" in FusedCPUTarget().supports(dataclasses.replace(case.config, dtype="f16"))
    rows = gr.check("fused-cpu", case.id, config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


class _RecordingKernel(GDNCPUKernel):
    """Records what each layer's backward made: (dx made, weight gradients made), top layer first."""

    def __init__(self):
        super().__init__()
        self.made = []

    def layer_backward(self, cfg, p, layer, mask, dy, dhy, need_weights, need_x):
        dx, dh0, grads = super().layer_backward(cfg, p, layer, mask, dy, dhy, need_weights, need_x)
        self.made.append((dx is not None, bool(grads)))
        return dx, dh0, grads


@pytest.mark.parametrize("group, made", [("-wx", [(True, False), (True, False)]),
                                         ("-wparams", [(True, True), (False, True)])])
def test_weight_gradients_and_the_bottom_dx_are_made_only_when_requested(group, made):
    kernel = _RecordingKernel()
    kernel.run(Case.from_id(f"gdn-L2-uni-I2-H2-K2-T5-B2-len5.2-f64-s1{group}"), torch.float64)
    assert kernel.made == made


def test_a_chunk_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk=0 must be >= 1"):
        GDNCPUKernel(0)


# ------------------------------------------------------------------ mutants
MUTANT_IDS = ["gdn-L2-uni-I3-H4-NH2-K2-T9-B3-len9.5.4-f32-s21", "gdn-L1-uni-I2-H2-K3-strongdecay-T6-B2-len6.3-f64-s22"]
MUTANTS = ["gdn-state-grad-no-householder", "gdn-sequence-start-gate-grad", "gdn-padded-gate-grad"]


@pytest.mark.parametrize("case_id", MUTANT_IDS)
def test_each_gdn_mutant_is_caught_and_the_correct_kernel_passes_where_they_are_caught(case_id):
    assert_mutants_fail_where_fused_cpu_passes(MUTANTS, case_id, config="matrix")


def test_the_sequence_start_mutant_hides_without_an_initial_state():
    # α at t = 0 scales h0 alone: from a zero state its gradient is 0, and zeroing it is exact
    rows = gr.check("mutant:gdn-sequence-start-gate-grad", MUTANT_IDS[0] + "-z", config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


def test_the_padded_gate_mutant_hides_when_every_sequence_is_full():
    rows = gr.check("mutant:gdn-padded-gate-grad", "gdn-L2-uni-I3-H4-NH2-K2-T9-B2-len9.9-f32-s21", config="matrix",
                    checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


# ------------------------------------------------------------------ float32 accuracy
# One layer (NH = 2, K = V = 4, T = 32: eight chunks of 4) in each regime that could cost the
# chunkwise form float32 digits: decay near 1 over many chunks (Φ's products), strong decay
# (exp of decay differences), and β near 1 with nearly parallel keys of a head (the UT solve of
# I + A at its worst: A's entries near ±1).
ACCURACY_CASE = "gdn-L1-uni-I4-H8-NH2-K4-T32-B3-len32.32.32-f32-s7"
REGIMES = ["plain", "longmem", "strongdecay", "parallel-keys"]
STAGES = ("a", "w", "u", "transition", "starts")  # the saved stages of the forward (Layer's fields)


def _adversarial_layer(regime: str, seed: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Float32 parameters (by kind) and input (T, B, I) of one layer of ACCURACY_CASE in a regime, drawn from seed."""
    case = Case.from_id(ACCURACY_CASE)
    g = torch.Generator().manual_seed(seed)
    p = {k.split(".")[-1]: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in case.params.items()}
    if regime in ("longmem", "parallel-keys"):
        p["b_a"], p["w_a"] = torch.full_like(p["b_a"], 12.0), p["w_a"] * 0.01   # log α ≈ −6e-6
    if regime == "strongdecay":
        p["b_a"] = torch.full_like(p["b_a"], -4.0)                              # log α ≈ −4
    if regime == "parallel-keys":
        p["b_b"], p["w_b"] = torch.full_like(p["b_b"], 9.0), p["w_b"] * 0.01   # β ≈ 1
        # every key ≈ x̂_0 (1, 1, 1, 1), x̂_0 kept away from 0: parallel keys, not near-zero ones
        p["w_k"] = 1e-3 * p["w_k"] + torch.eye(p["w_k"].shape[1], dtype=torch.float64)[0]
    x = torch.randn(case.x.shape, generator=g, dtype=torch.float64)
    if regime == "parallel-keys":
        x[..., 0] += 4
    return {k: v.float() for k, v in p.items()}, x.float()


def _step_by_step(cfg, p: dict[str, torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """y and the final state of the family's own step run one step at a time, in the inputs' dtype."""
    ops, h, ys = torch_ops(), x.new_zeros(x.shape[1], cfg.h_size), []
    for x_t in x:
        y, h, _ = cfg.family.step(ops, p, x_t, h, None, cfg)
        ys.append(y)
    return torch.stack(ys), h


def _rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b).pow(2).mean().sqrt())


def _float32_errors(kernel: GDNCPUKernel, regime: str, seed: int = 7) -> dict[str, float]:
    """RMS errors against the same kernel in float64 on the float32 data: the kernel's y and final
    state, the step-by-step recurrence's, and each saved stage's largest error relative to its scale."""
    cfg = Case.from_id(ACCURACY_CASE).config
    p, x = _adversarial_layer(regime, seed)
    mask, h0 = torch.ones(x.shape[:2] + (1,)), torch.zeros(x.shape[1], cfg.h_size)
    with torch.no_grad():
        y, hy, layer = kernel.layer_forward(cfg, p, x, mask, h0, 0)
        exact_y, exact_hy, exact = GDNCPUKernel(kernel.chunk).layer_forward(
            cfg, {k: v.double() for k, v in p.items()}, x.double(), mask.double(), h0.double(), 0)
        step_y, step_hy = _step_by_step(cfg, p, x)
    errors = {"y": _rms(y, exact_y), "hy": _rms(hy, exact_hy), "step y": _rms(step_y, exact_y),
              "step hy": _rms(step_hy, exact_hy)}
    for stage in STAGES:
        want = getattr(exact, stage)
        errors[stage] = float((getattr(layer, stage).double() - want).abs().max() / want.abs().max().clamp(min=1))
    return errors


@pytest.mark.parametrize("regime", REGIMES)
def test_the_float32_kernel_is_as_accurate_as_the_step_by_step_recurrence(regime):
    """Issue 35: no stage of the chunkwise form costs float32 digits that a sequential evaluation keeps.
    Measured over 12 seeds per regime: the kernel's RMS error is 0.7–1.3× the step's on y and up to
    1.9× on the final state (strong decay; both ~3e-8), each stage within 4 units of float32
    roundoff of its scale; a carry in bfloat16 is 9000× the step's (the test below)."""
    errors = _float32_errors(GDNCPUKernel(), regime)
    assert errors["y"] <= 2 * errors["step y"], errors
    assert errors["hy"] <= 2 * errors["step hy"], errors
    eps = torch.finfo(torch.float32).eps
    assert all(errors[stage] <= 8 * eps for stage in STAGES), errors


@pytest.mark.parametrize("chunk", [4, 16])
@pytest.mark.parametrize("regime", ["plain", "strongdecay"])
def test_each_pairwise_decay_is_as_accurate_as_its_own_segment_allows(regime, chunk):
    """D_rs = exp(Σ_{s<i≤r} log α_i) in float32 has a relative error of at most ~(1 + |log D_rs|)·eps,
    whatever the decay from the chunk's start. As exp(G_r − G_s), a difference of two cumulative
    sums, it reached 2.4–2.9× that at chunk 4 and 8.8–11.7× at chunk 16 (G up to −64 there)."""
    cfg = Case.from_id(ACCURACY_CASE).config
    p, x = _adversarial_layer(regime, 7)
    mask, h0 = torch.ones(x.shape[:2] + (1,)), torch.zeros(x.shape[1], cfg.h_size)
    with torch.no_grad():
        layer = GDNCPUKernel(chunk).layer_forward(cfg, p, x, mask, h0, 0)[2]
        exact = GDNCPUKernel(chunk).layer_forward(cfg, {k: v.double() for k, v in p.items()}, x.double(),
                                                  mask.double(), h0.double(), 0)[2]
    eps = torch.finfo(torch.float32).eps
    for stage in ("decay", "to_end"):
        want, got = getattr(exact, stage), getattr(layer, stage).double()
        live = want > 0
        relative = ((got - want).abs() / want)[live]
        assert (relative <= 2 * eps * (1 - want[live].log())).all(), (stage, float(relative.max()))


class _HalfCarryKernel(GDNCPUKernel):
    """A carry across chunks that stores its states in bfloat16: a precision loss the accuracy test must see."""

    @staticmethod
    def carry_states(transition, written, h0):
        starts, final = GDNCPUKernel.carry_states(transition, written, h0)
        return starts.bfloat16().float(), final


def test_the_accuracy_measure_sees_a_carry_that_loses_precision():
    errors = _float32_errors(_HalfCarryKernel(), "longmem")
    assert errors["y"] > 2 * errors["step y"], errors


# float32 soak cases that no float32 evaluation holds to the fixed tolerance: a layer-1 key near the
# L2 norm's floor (the first), long memory through three layers (all); benchmarks/gdn_float32_conditioning.py.
# Under the chunk they were found at (4, the kernels' default): a case of one chunk (T = 8 under
# chunk 8) hands no state gradient across a chunk, where the Householder mutant lives.
ILL_CONDITIONED_F32 = ["gdn-L3-uni-I3-H5-NH5-K2-longmem-T11-B3-len11.11.11-f32-s123429745-z-kc.chunk.4",
                       "gdn-L3-uni-I4-H6-NH3-K2-longmem-T8-B3-len7.5.4-f32-s1629891769-wx-kc.chunk.4"]


@pytest.mark.parametrize("case_id", ILL_CONDITIONED_F32)
def test_a_float32_case_float32_cannot_hold_passes_with_the_rounding_probe_and_a_broken_kernel_still_fails(case_id):
    """The reference check re-judges a failing float32 gdn tensor with the rounding probe's
    allowance (references/drift.py): the correct kernel passes, the Householder mutant does not."""
    from gradcheck_rnn.judging.context import CaseContext
    from gradcheck_rnn.judging.judge import judge_one
    from gradcheck_rnn.targets import resolve_target

    case = CaseContext(Case.from_id(case_id))  # the references and the probe, once for both targets
    correct = judge_one(case, resolve_target("fused-cpu"))
    assert correct.status == "pass", correct.message
    assert any("rounding probe" in tensor.message for tensor in correct.tensors)
    broken = judge_one(case, resolve_target("mutant:gdn-state-grad-no-householder"))
    assert broken.status == "fail" and "outside tolerance + drift allowance" in broken.message


def test_the_rounding_probe_is_local_below_float64_and_absent_in_float64():
    """Where the problem is well conditioned the probe's allowance stays at float32 rounding, so a
    wrong gradient there still fails; float64 cases are never re-judged."""
    from gradcheck_rnn.references.drift import needs_allowance, probe_allowance

    case = Case.from_id("gdn-L2-uni-I3-H4-NH2-K3-T6-B2-len6.4-f32-s5")
    allowance = probe_allowance(case)
    loop = run_reference("loop", case)
    for name, grad in loop.grads.items():
        assert np.max(allowance.tensors[name]) <= 1e-5 * (np.max(np.abs(grad)) + 1), name
    assert needs_allowance(case) and not needs_allowance(Case.from_id(case.id.replace("-f32-", "-f64-")))
    assert not needs_allowance(Case.from_id("gla-L2-uni-I3-H4-NH2-K3-R1-T6-B2-len6.4-f32-s5"))
