"""torch-scan and torch-compiled (issue 46): each family's step through torch's scan op and
through torch.compile, judged as any target is; forward mode and second order where torch
offers them (issue 47); a deliberately broken step is caught; what torch cannot do is declined
with a reason.

Every test that runs either target traces (scan) or compiles (Inductor) for seconds, so it is
slow-marked; the declines and the registry run in the default suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gradcheck_rnn import Case
from gradcheck_rnn.judging.judge import judge
from gradcheck_rnn.targets import check_target_name, default_targets, left_out_builtins, resolve_target
from gradcheck_rnn.targets import torch_compiled, torch_scan
from gradcheck_rnn.targets.torch_compiled import TorchCompiledTarget
from gradcheck_rnn.targets.torch_scan import TorchScanExplicitTarget, TorchScanTarget, masked_step

# both directions, a short and a zero-length sequence, an initial state; the -z twin has none, so
# scan's carry starts without requires_grad: the setting of pytorch #184528
LSTM_CASE = "lstm-L2-bi-I2-H3-T4-B3-len4.1.0-f64-s5"
LSTM_CASE_Z = "lstm-L2-bi-I2-H3-T4-B3-len4.1.0-f32-s5-wparams-z"
# one case of every other family (a cell state: slstm; matrix memory: mlstm, gla, gdn)
FAMILY_CASES = ("s6-L1-uni-I2-H3-N2-R1-T4-B3-len4.0.2-f32-s5",
                "slstm-L1-bi-I2-H4-NH2-T4-B2-len4.2-f64-s5",
                "mlstm-L1-uni-I2-H4-NH2-K2-T5-B2-len5.3-f32-s3",
                "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B3-len5.0.3-f64-s3",
                "gdn-L2-uni-I2-H4-NH2-K2-T4-B2-len4.1-f64-s3")


def negated_backward_step(config, unit, x, m, h, c=None):
    """:func:`masked_step` with the gradient through the new hidden state negated: the forward is
    unchanged (2·h' - h' is h'), so only the gradients can see it."""
    y, h_new, c_new = masked_step(config, unit, x, m, h, c)
    return y, 2 * h_new.detach() - h_new, c_new


class _BrokenScan(TorchScanTarget):
    step = staticmethod(negated_backward_step)


def statuses(case_id: str, target, checks=("reference",)) -> dict[str, str]:
    return {row.check: (row.status, row.message) for row in judge(Case.from_id(case_id), [target], checks=checks)}


def test_the_two_names_resolve_but_a_default_sweep_leaves_them_out():
    check_target_name("torch-scan")
    check_target_name("torch-compiled")
    assert {type(resolve_target(n).impl) for n in ("torch-scan", "torch-compiled")} == {TorchScanTarget,
                                                                                       TorchCompiledTarget}
    assert not {t.name for t in default_targets()} & {"torch-scan", "torch-compiled"}
    assert "torch-scan, torch-compiled (compile-heavy: name them with -t)" in left_out_builtins()


def test_half_precision_is_declined_with_a_reason():
    config = Case.from_id("gru-L1-uni-I2-H3-T3-B2-len3.1-f16-s1").config
    for target in (TorchScanTarget(), TorchCompiledTarget()):
        reason = target.supports(config)
        assert isinstance(reason, str) and "f16" in reason, reason


def test_a_torch_without_scan_is_declined_with_its_reason(monkeypatch):
    def missing():
        raise ImportError("cannot import name 'scan'")

    monkeypatch.setattr(torch_scan, "_scan", missing)
    reason = TorchScanTarget().supports(Case.from_id(LSTM_CASE).config)
    assert isinstance(reason, str) and "has no torch._higher_order_ops.scan" in reason and "cannot import" in reason


def test_a_torch_compile_that_cannot_run_is_declined_with_torchs_sentence(monkeypatch):
    def broken_compile(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    torch_compiled.compiled_refusal.cache_clear()
    monkeypatch.setattr(torch, "compile", broken_compile)
    try:
        reason = TorchCompiledTarget().supports(Case.from_id(LSTM_CASE).config)
    finally:
        torch_compiled.compiled_refusal.cache_clear()
    assert isinstance(reason, str) and "does not run here" in reason and "No working C++ compiler" in reason, reason


@pytest.mark.slow
@pytest.mark.parametrize("case_id", [LSTM_CASE, LSTM_CASE_Z])
def test_torch_scan_passes_a_correct_case_and_catches_a_negated_backward(case_id):
    assert statuses(case_id, TorchScanTarget())["reference"][0] == "pass"
    status, message = statuses(case_id, _BrokenScan())["reference"]
    assert status == "fail", message


@pytest.mark.slow
def test_closed_over_and_explicit_parameters_give_the_same_gradients():
    """pytorch #184528's setting (-z: the carry starts without requires_grad): both forms agree."""
    case = Case.from_id(LSTM_CASE_Z)
    closed, explicit = TorchScanTarget().run(case), TorchScanExplicitTarget().run(case)
    for name in case.wants:
        torch.testing.assert_close(closed.grads[name], explicit.grads[name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", FAMILY_CASES)
def test_torch_scan_passes_every_family(case_id):
    assert statuses(case_id, TorchScanTarget())["reference"][0] == "pass"


@pytest.mark.slow
def test_torch_scan_declines_forward_mode_and_is_caught_in_second_order():
    """torch 2.13 refuses torch.func.jvp through scan (a skip with its sentence) and runs double
    backward through it wrongly or not at all (docs/torch-2.13/scan.md): the gradgrad check must
    not pass it. A torch that fixes either makes this test fail, and the docs must change."""
    rows = statuses("gru-L1-uni-I2-H3-T3-B2-len3.1-f64-s1", TorchScanTarget(), checks=("jvp", "gradgrad"))
    assert rows["jvp"][0] == "skip" and "refuses forward-mode AD through scan" in rows["jvp"][1], rows
    assert rows["gradgrad"][0] in ("fail", "error"), rows


@pytest.mark.slow
def test_the_scan_script_shows_what_torch_gets_wrong():
    """docs/torch-2.13/scan.py: why torch-scan and torch-compiled decline or fail jvp and gradgrad."""
    script = Path(__file__).resolve().parents[1] / "docs" / "torch-2.13" / "scan.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=600).stdout
    assert "#184528 closed-over parameter, carry without grad: max |scan - loop| of dL/dw = 0.0e+00" in out
    assert "scan torch.func.jvp: refused: UncapturedHigherOrderOpError" in out
    assert "scan dual numbers: no tangent (silently zero); the loop: max |tangent|" in out
    [scan_pen, loop_pen] = re.findall(r"penalty gradient\| = ([0-9.e+-]+), the loop's ([0-9.e+-]+)", out)[0]
    assert abs(float(scan_pen) - float(loop_pen)) > 1.0, out
    assert "torch.compile double backward: refused: RuntimeError" in out


@pytest.mark.slow
@pytest.mark.parametrize("case_id", [LSTM_CASE, FAMILY_CASES[1]])
def test_torch_compiled_passes_and_catches_a_negated_backward(case_id):
    class Broken(TorchCompiledTarget):
        step = staticmethod(negated_backward_step)

    assert statuses(case_id, TorchCompiledTarget())["reference"][0] == "pass"
    status, message = statuses(case_id, Broken())["reference"]
    assert status == "fail", message
