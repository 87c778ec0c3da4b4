"""Long sweeps (``pytest -m slow``): the fused CPU kernel on 1000 nightly cases, the false-alarm soak.

Both run through the public API (``gr.sweep``), in this process, as a user's script does.
"""

import pytest

import gradcheck_rnn as gr
from gradcheck_rnn.judging.checks import enabled
from gradcheck_rnn.model.profiles import load_profile


@pytest.mark.slow
def test_fused_cpu_passes_1000_nightly_cases():
    run = gr.sweep("fused-cpu", cases=1000, seed=0, config="nightly", checks=["reference"])
    bad = [(r.case_id, r.status, r.message) for r in run.results if r.status not in ("pass", "skip")]
    assert not bad and sum(r.status == "pass" for r in run.results) == 1000


@pytest.mark.slow
def test_correct_kernels_raise_no_false_alarm_on_300_soak_cases():
    """A slice of the README's soak (`gradcheck-rnn sweep -c soak`), with a seed of its own."""
    profile = load_profile("soak")
    checks = enabled(profile.checks, profile.source)
    run = gr.sweep(["fused-cpu", "torch-native"], cases=300, seed=7, config="soak")
    false_alarms = [(r.case_id, r.target, r.check, r.message) for r in run.results if r.status not in ("pass", "skip")]
    assert not false_alarms
    assert len(run.results) == 300 * 2 * len(checks)
    assert sum(r.check == "future" and r.status == "pass" for r in run.results) > 100  # the check really judges
