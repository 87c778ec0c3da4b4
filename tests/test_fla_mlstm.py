"""The fla-* and mlstm-* targets (issue 36), in this process; skipped where fla or mlstm_kernels is
not installed (extras ``fla`` and ``mlstm``, not in the test extra).

The maps are checked both ways: the real targets pass a few cases (fla's naive torch loops
cross-check the map that the Triton kernels share), and a planted slip of the kind a misread state
layout or gate order produces (tests/foreign_matrix_targets.py) fails. The findings' standalone
scripts (docs/fla-0.6.0/, docs/mlstm_kernels-2.0.6/) must still confirm what docs/findings/frameworks.md says.
fla's Triton kernels run in Triton's interpreter on CPU (tens of seconds for a case): slow-marked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from foreign_env import installed

from gradcheck_rnn import Case
from gradcheck_rnn.judging.judge import judge, judge_one
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.targets.foreign import triton_cpu

DOCS = Path(__file__).resolve().parent.parent / "docs"
GLA_PACKED = "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B3-len5.0.3-f32-s3"  # lengths differ, one is 0: cu_seqlens
GLA_PADDED = "gla-L2-uni-I2-H4-NH2-K3-R2-headdecay-T4-B2-len4.4-f32-s5"  # equal lengths: one (B, T) call
GLA_TAIL = "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B2-len5.3-f32-s3-tail2"
GDN = "gdn-L1-uni-I2-H4-NH2-K2-T5-B2-len5.3-f32-s3"
DELTAPRODUCT = "deltaproduct-L1-uni-I2-H4-NH2-K2-n3-T5-B2-len5.3-f32-s3"
# conv1d on fla-recurrent: no initial state (the interpreter cannot run its gradient), two layers so that
# layer 0's taps reach hy
CONV = "conv1d-L2-uni-I3-H4-W3-silu-T7-B3-len7.4.1-f32-s9-z"
MLSTM = "mlstm-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f32-s3"  # chunks of 2 and of 1 step
MLSTM_NO_STATE = f"{MLSTM}-z"


def failing(result) -> set[str]:
    return {t.name for t in result.tensors if not t.passed}


def slip(name):
    import foreign_matrix_targets

    return getattr(foreign_matrix_targets, name)


@pytest.fixture(scope="module")
def fla():
    installed("fla", "fla")


@pytest.fixture
def interpreted_fla(fla):
    """fla's Triton kernels in the interpreter: not where this test process imported Triton without
    TRITON_INTERPRET=1 before (another test module's collection), which fla-recurrent declines."""
    early = triton_cpu.imported_for_a_gpu("fla") if "triton" in sys.modules else None
    if early is not None:
        pytest.skip(f"{early} was imported in this process without TRITON_INTERPRET=1; run this file alone or "
                    f"with TRITON_INTERPRET=1 set")


@pytest.fixture(scope="module")
def mlstm_kernels():
    installed("mlstm_kernels", "mlstm")


@pytest.mark.parametrize(("name", "case_id"), [
    ("fla-naive", GLA_PACKED), ("fla-naive", GDN), ("fla-naive", DELTAPRODUCT),
    pytest.param("fla-recurrent", GLA_PACKED, marks=pytest.mark.slow),
    pytest.param("fla-recurrent", GLA_PADDED, marks=pytest.mark.slow),
    pytest.param("fla-recurrent", CONV, marks=pytest.mark.slow)])
def test_fla_targets_pass_with_the_correct_map(fla, name, case_id, request):
    if name == "fla-recurrent":
        request.getfixturevalue("interpreted_fla")
    result = judge_one(Case.from_id(case_id), resolve_target(name))
    assert result.status == "pass", (name, case_id, result.message)


@pytest.mark.slow
def test_fla_recurrent_runs_each_autotune_candidate_it_declares_and_names_it(interpreted_fla, monkeypatch):
    """-kc.autotune.<i>: fused_recurrent's forward offers num_warps 4 and 8 (its backward 4 only);
    each candidate is the only one its autotuner holds for the call, both pass a correct case,
    each named in the row's case id, and the autotuners hold all their candidates again after."""
    target = resolve_target("fla-recurrent")
    assert target.kernel_configs(Case.from_id(GLA_PACKED).config) == {"autotune": (0, 1)}
    assert target.kernel_configs(Case.from_id(GDN).config) == {}  # no backward there: declined, nothing drawn
    assert resolve_target("fla-naive").kernel_configs(Case.from_id(GLA_PACKED).config) == {}
    from triton.runtime.autotuner import Autotuner  # after the target imported Triton under the interpreter

    held = []
    run = Autotuner.run

    def recording(self, *args, **kwargs):
        held.append(tuple(config.num_warps for config in self.configs))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Autotuner, "run", recording)
    for candidate, warps in ((0, 4), (1, 8)):
        held.clear()
        result = judge_one(Case.from_id(f"{GLA_PACKED}-kc.autotune.{candidate}"), target)
        assert result.status == "pass" and result.case_id.endswith(f"-kc.autotune.{candidate}"), result.message
        assert held[0] == (warps,) and set(held[1:]) == {(4,)}, held  # the forward pinned, the backward's only one
    tuners = triton_cpu._autotuners("fla.ops.common.fused_recurrent")
    assert sorted(len(tuner.configs) for tuner in tuners) == [1, 2]


@pytest.mark.parametrize(("name", "case_id"), [("mlstm-chunkwise", MLSTM), ("mlstm-parallel", MLSTM_NO_STATE)])
def test_mlstm_targets_pass_with_the_correct_map(mlstm_kernels, name, case_id):
    result = judge_one(Case.from_id(case_id), resolve_target(name))
    assert result.status == "pass", (name, case_id, result.message)


@pytest.mark.parametrize(("name", "case_id"), [
    ("fla_naive_transposed_state", GDN), ("fla_naive_swapped_gate", GDN), ("fla_naive_swapped_gate", GLA_PACKED),
    ("fla_naive_transposed_state", DELTAPRODUCT),
    pytest.param("fla_recurrent_transposed_state", GLA_PACKED, marks=pytest.mark.slow),
    pytest.param("fla_recurrent_swapped_gate", GLA_PACKED, marks=pytest.mark.slow),
    pytest.param("fla_recurrent_flipped_taps", CONV, marks=pytest.mark.slow)])
def test_a_planted_slip_in_the_fla_map_is_caught(fla, name, case_id, request):
    if name.startswith("fla_recurrent"):
        request.getfixturevalue("interpreted_fla")
    result = judge_one(Case.from_id(case_id), slip(name))
    assert result.status == "fail" and {"y", "hy"} <= failing(result), (name, result.message)


@pytest.mark.parametrize(("name", "case_id"), [
    ("mlstm_chunkwise_transposed_state", MLSTM), ("mlstm_chunkwise_swapped_gate", MLSTM),
    ("mlstm_parallel_swapped_gate", MLSTM_NO_STATE)])
def test_a_planted_slip_in_the_mlstm_map_is_caught(mlstm_kernels, name, case_id):
    result = judge_one(Case.from_id(case_id), slip(name))
    assert result.status == "fail" and {"y", "hy"} <= failing(result), (name, result.message)


def test_mlstm_custbw_is_judged_under_its_convention_and_fails_only_on_the_initial_stabiliser(mlstm_kernels):
    """native_custbw holds the denominator and m constant by design: judged under the head_norm
    convention (-headnorm, -gy), its forward and its gradients of x and every parameter pass, and
    what still fails is dc0 at m0 (docs/mlstm_kernels-2.0.6/custbw_initial_state_gradients.py)."""
    result = judge_one(Case.from_id(MLSTM), resolve_target("mlstm-custbw"))
    # judged under a drawn chunk size too (its kernel configuration, -kc.chunk.<c>)
    assert "-headnorm-" in result.case_id and result.case_id.split("-kc.chunk.")[0].endswith("-gy")
    assert result.status == "fail" and failing(result) == {"c0"}, result.message
    config = Case.from_id(MLSTM).config
    assert result.worst.location["unit"] >= config.option("heads") * config.option("key_width")  # m, not n
    # without an initial state there is nothing left to fail
    assert judge_one(Case.from_id(f"{MLSTM}-z"), resolve_target("mlstm-custbw")).status == "pass"


@pytest.mark.parametrize("case_id", [MLSTM_NO_STATE, "mlstm-L1-uni-I5-H6-NH3-K4-longmem-T14-B4-len8.13.5.13-f32-s807764264-z"])
def test_mlstm_custbw_declines_segments_under_its_convention(mlstm_kernels, case_id):
    """Its inner segments would get a final-state gradient, outside the head_norm convention (-gy):
    the segments rows failed on x and w_f, a convention broken by the check, not a kernel bug."""
    rows = list(judge(Case.from_id(case_id), [resolve_target("mlstm-custbw")], checks=["reference", "segments"]))
    assert [r.status for r in rows] == ["pass", "skip"], [r.message for r in rows]
    assert "normaliser_gradient convention, exact only for losses through all of y" in rows[1].message


def test_a_true_derivative_passes_under_the_convention_and_a_wrong_one_fails(mlstm_kernels):
    import convention_targets

    for case_id in (MLSTM, MLSTM.replace("-f32-", "-f64-"), "mlstm-L2-uni-I3-H4-NH2-K2-T8-B2-len8.4-f32-s7"):
        rows = list(judge(Case.from_id(case_id), [convention_targets.chunkwise_head_norm],
                          checks=["reference", "linearity", "padding"]))
        assert all(r.status in ("pass", "skip") and "-headnorm-" in r.case_id for r in rows), rows
    wrong = judge_one(Case.from_id(MLSTM), convention_targets.custbw_dx_off)
    assert wrong.status == "fail" and "x" in failing(wrong)


# docs/findings/frameworks.md's mlstm-parallel row: log σ(f₀) > ĩ₀, so the stabiliser's start shows in y
PARALLEL_FINDING = "mlstm-L1-uni-I4-H1-K4-longmem-T10-B1-len4-f64-s521336563-z"


def test_mlstm_parallel_is_judged_under_its_stabiliser_start_and_passes_the_finding(mlstm_kernels):
    """The parallel form starts m at −∞ (stabiliser_start = "minus_infinity", -minf): judged so, it
    passes the float64 case it failed by up to 70 times the tolerance when judged from m₀ = 0, and
    at two steps, before an input gate overtakes the start, its final states (the chunkwise kernel's
    from m_initial = −∞) too."""
    for case_id in (PARALLEL_FINDING, PARALLEL_FINDING.replace("-len4-", "-len2-")):
        result = judge_one(Case.from_id(case_id), resolve_target("mlstm-parallel"))
        assert result.status == "pass" and result.case_id == case_id.replace("-longmem", "-minf-longmem"), \
            (result.case_id, result.message)


def test_a_kernel_that_declares_one_stabiliser_start_and_computes_the_other_fails(mlstm_kernels):
    import convention_targets

    for target in (convention_targets.parallel_from_zero, convention_targets.chunkwise_from_zero_minus_infinity):
        result = judge_one(Case.from_id(PARALLEL_FINDING), target)
        assert result.status == "fail" and {"y", "x"} <= failing(result), (target.name, result.message)


def test_a_case_the_convention_cannot_judge_is_skipped_with_the_reason(mlstm_kernels):
    result = judge_one(Case.from_id(f"{MLSTM}-gstates"), resolve_target("mlstm-custbw"))
    assert result.status == "skip" and "exact only for losses through all of y" in result.message


def test_each_decline_says_why_in_the_librarys_words(fla, mlstm_kernels):
    parallel = resolve_target("mlstm-parallel")
    assert "c_initial is not supported" in parallel.supports_case(Case.from_id(MLSTM))
    recurrent = resolve_target("fla-recurrent")
    assert "Backward pass is not implemented" in recurrent.supports(Case.from_id(GDN).config)
    assert "no fused recurrent gated delta product" in recurrent.supports(Case.from_id(DELTAPRODUCT).config)
    assert "float32" in recurrent.supports(Case.from_id(GLA_PACKED.replace("-f32-", "-f64-")).config)
    assert "no torch fallback" in resolve_target("fla-naive").supports(Case.from_id(CONV).config)
    if triton_cpu.interpreted():
        # which sentence depends on this process's history: a test run earlier in the same worker may
        # have imported triton without TRITON_INTERPRET=1, and then that decline comes first
        declined = recurrent.supports_case(Case.from_id(CONV.removesuffix("-z")))  # imports triton interpreted
        expected = "compute_dh0_kernel" if triton_cpu.imported_for_a_gpu("fla") is None else "without TRITON_INTERPRET=1"
        assert expected in declined
    assert "mlstm" in resolve_target("mlstm-chunkwise").supports(Case.from_id(GDN).config)


def test_fla_imported_for_a_gpu_on_a_cpu_machine_is_declined_with_the_way_out(fla):
    """A process that imported fla without TRITON_INTERPRET=1 on CPU has GPU kernels: fla-recurrent
    says so instead of an error row per case ("0 active drivers")."""
    code = ("import fla, torch; from gradcheck_rnn import Case; from gradcheck_rnn.targets import resolve_target; "
            f"print(torch.cuda.is_available(), resolve_target('fla-recurrent').supports(Case.from_id('{GLA_PACKED}').config))")
    env = {k: v for k, v in os.environ.items() if k != triton_cpu.INTERPRET}  # fla imported as a GPU user does
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    cuda, _, answer = out.stdout.strip().rpartition("\n")[2].partition(" ")
    assert answer == "True" if cuda == "True" else "without TRITON_INTERPRET=1" in answer, out.stdout + out.stderr


@pytest.mark.slow
def test_fla_recurrent_conv1d_declines_forward_mode_in_torchs_words(interpreted_fla):
    """The refusal probe runs causal_conv1d's forward on its own: inside the interpreter's scope too,
    or its autotuner asks for a GPU ("0 active drivers") and the jvp row is an error."""
    answer = resolve_target("fla-recurrent").supports_jvp(Case.from_id(CONV))
    assert "autograd.Function with functorch transforms" in answer, answer


@pytest.mark.slow
def test_fla_recurrent_leaves_a_packed_tail_unwritten_outside_its_contract(interpreted_fla):
    """docs/fla-0.6.0/varlen_tail_unwritten.py: the tail rows' gradients are not 0, which breaks no
    promise of fla's (T == cu_seqlens[-1]): out-of-contract, with the contract quoted; every tensor
    inside the contract (y, hy, the real tokens' dx) passes."""
    result = judge_one(Case.from_id(GLA_TAIL), resolve_target("fla-recurrent"))
    assert result.status == "out-of-contract" and "x[tail]" in failing(result), result.message
    assert "consistent with the FlashAttention API" in result.message
    assert all(t.passed for t in result.tensors if t.name in ("y", "hy", "x", "h0"))


@pytest.mark.slow
def test_a_sweep_of_fla_recurrent_exits_0_unless_contracts_are_strict(interpreted_fla, tmp_path):
    """The matrix-libs profile's tail cases on fla-recurrent: out-of-contract and nothing else fails.
    Its checks but gradgrad, which fails fla-recurrent for a cause of its own: a double backward
    silently leaves its Triton backward out (docs/foreign-targets.md)."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main
    from gradcheck_rnn.model.profiles import load_profile

    checks = [a for check, on in load_profile("matrix-libs").checks.items() if on and check != "gradgrad"
              for a in ("--check", check)]

    def sweep(*extra):
        return CliRunner().invoke(main, ["sweep", "-c", "matrix-libs", "-t", "fla-recurrent", "--cases", "12",
                                         "--mode", "gla", "--workers", "1", "--report-dir", str(tmp_path), *checks,
                                         *extra])

    lenient = sweep()
    assert lenient.exit_code == 0 and "out-of-contract" in lenient.output, lenient.output
    assert sweep("--strict-contracts").exit_code == 1


@pytest.mark.parametrize(("module", "script"), [
    ("mlstm_kernels", "mlstm_kernels-2.0.6/custbw_initial_state_gradients.py"),
    ("mlstm_kernels", "mlstm_kernels-2.0.6/parallel_stabiliser_start.py"),
    pytest.param("fla", "fla-0.6.0/varlen_tail_unwritten.py", marks=pytest.mark.slow)])
def test_the_standalone_scripts_confirm_each_finding(module, script):
    """docs/<library>-<version>/*.py: torch and the library only, what docs/findings/frameworks.md cites."""
    installed(module, module)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(DOCS / script)], capture_output=True, text=True, env=env, timeout=600)
    assert "CONFIRMED" in out.stdout, out.stdout + out.stderr


def test_an_issue_body_holds_a_standalone_script_that_shows_the_failure(mlstm_kernels, tmp_path):
    """gradcheck-rnn issue: the body of mlstm-custbw's row, whose script needs only torch and
    mlstm_kernels (no gradcheck_rnn on its path) and prints REPRODUCED; a passing row is not filed."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    body = tmp_path / "issue.md"
    result = CliRunner().invoke(main, ["issue", MLSTM, "-t", "mlstm-custbw", "-o", str(body)])
    assert result.exit_code == 0, result.output
    text = body.read_text()
    assert "mlstm_kernels: 2.0.6" in text and "torch: " in text and "normaliser_gradient='head_norm'" in text
    script = tmp_path / "script.py"
    script.write_text(text.split("```python\n", 1)[1].split("```", 1)[0])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                         cwd=tmp_path)
    assert "REPRODUCED: wrong gradients of m0" in out.stdout, out.stdout + out.stderr
    assert CliRunner().invoke(main, ["issue", f"{MLSTM}-z", "-t", "mlstm-custbw"]).exit_code == 1


@pytest.mark.parametrize("case_id, target", [
    ("mlstm-L1-uni-I2-H4-NH2-K2-minf-T6-B2-len6.3-f64-s3-z", "mlstm-parallel"),  # no state in or out
    ("mlstm-L1-uni-I2-H4-NH2-K2-minf-T6-B2-len6.3-f64-s3-z", "mlstm-chunkwise"),  # m0 = −∞ as a literal
    ("mlstm-L2-uni-I2-H4-NH2-K2-T6-B2-len6.3-f64-s3", "mlstm-chunkwise"),  # layer 0 under its own dh
])
def test_an_issue_script_runs_the_kernel_as_the_target_calls_it(mlstm_kernels, tmp_path, case_id, target):
    """The script of a correct kernel's case finds nothing: the parallel kernel is called without
    the initial state it refuses and judged through h alone, an empty memory under -minf starts its
    stabiliser at −∞ (written as float('-inf')), and a deep case's layer 0 gets a head gradient."""
    from gradcheck_rnn.workflows.issue import mlstm_script

    script = tmp_path / "script.py"
    script.write_text(mlstm_script(Case.from_id(case_id), target, "a correct kernel"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("NOT REPRODUCED"), out.stdout + out.stderr


@pytest.mark.slow
def test_the_issue_script_of_an_fla_tail_shows_the_unwritten_rows(interpreted_fla, tmp_path):
    """gradcheck-rnn issue on fla-recurrent's out-of-contract tail: the contract quoted, and a script
    (torch and fla only) whose gradients past cu_seqlens[-1] are not 0 while the sequences' rows agree."""
    from gradcheck_rnn.workflows.issue import write_issue

    code, body = write_issue(GLA_TAIL, "fla-recurrent")
    assert code == 0 and "consistent with the FlashAttention API" in body and "PR #892" in body
    script = tmp_path / "script.py"
    script.write_text(body.split("```python\n", 1)[1].split("```", 1)[0])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", triton_cpu.INTERPRET)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=900,
                         cwd=tmp_path)
    assert "REPRODUCED: " in out.stdout and "past cu_seqlens[-1]" in out.stdout, out.stdout + out.stderr
    assert "rows of the sequences" not in out.stdout  # inside the contract the kernel is right
