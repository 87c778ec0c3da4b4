"""Long sweeps (``pytest -m slow``): the fused CPU kernel on 1000 nightly cases."""

import pytest

from gradcheck_rnn.generate import draw_cases, load_profile
from gradcheck_rnn.runner import run_sweep
from gradcheck_rnn.targets import resolve_target


@pytest.mark.slow
def test_fused_cpu_passes_1000_nightly_cases():
    profile = load_profile("nightly")
    results = run_sweep(draw_cases(profile, 0, 1000), [resolve_target("fused-cpu")], profile.tolerance_table(),
                        checks=["reference"])
    bad = [(r.case_id, r.status, r.message) for r in results if r.status not in ("pass", "skip")]
    assert not bad and sum(r.status == "pass" for r in results) == 1000
