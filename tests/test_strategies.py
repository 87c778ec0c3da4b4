"""The hypothesis strategy: drawn cases round-trip through their ids, and failures shrink small."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings

from gradcheck_rnn import Case, UsageError
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.strategies import cases
from gradcheck_rnn.targets import resolve_target

SHRINK_PAGE = (Path(__file__).parent.parent / "docs" / "how-to" / "shrink.md").read_text()
# No example database in the repository, and the same examples on every run.
QUICK = settings(max_examples=25, deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])
ARRAYS = ("x", "seq_lengths", "h0", "c0", "dy", "dhy", "dcy")


@QUICK
@given(cases(dtypes=("f64", "f32", "f16", "bf16"), max_layers=3, max_len=6))
def test_from_id_rebuilds_every_drawn_case_bit_for_bit(case):
    again = Case.from_id(case.id)
    assert again.id == case.id and again.wants == case.wants and again.heads == case.heads
    for name in ARRAYS:
        a, b = getattr(case, name), getattr(again, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert np.array_equal(a, b) and a.dtype == b.dtype, name
    assert case.params.keys() == again.params.keys()
    assert all(np.array_equal(case.params[k], again.params[k]) for k in case.params)


def test_a_structural_property_shrinks_to_the_smallest_case():
    # Fails on any bidirectional stack of two or more layers with a sequence of length >= 3:
    # everything else shrinks to its simplest value.
    found = find(cases(), lambda c: c.config.num_layers >= 2 and c.config.bidirectional and max(c.seq_lengths) >= 3,
                 settings=settings(max_examples=200, database=None, derandomize=True, deadline=None))
    assert found.id == "rnn_relu-L2-bi-I1-H1-T3-B1-len3-f64-s0"


def test_a_failing_gradient_property_shrinks_to_a_small_case():
    # The property of MXNet #21143: the input gradient x is right. Truncated BPTT breaks it only
    # where a step has a future, so the smallest counterexample has two steps.
    truncated = resolve_target("mutant:truncated-bptt")

    def x_is_wrong(case):
        return "x" in {t.name for t in judge_one(case, truncated).failing}

    found = find(cases(modes=("gru",), max_layers=2, max_len=4, max_size=3, dtypes=("f64",)), x_is_wrong,
                 settings=settings(max_examples=60, database=None, derandomize=True, deadline=None))
    cfg = found.config
    assert (cfg.num_layers, cfg.bidirectional, cfg.batch_size, cfg.max_len) == (1, False, 1, 2)
    assert list(found.seq_lengths) == [2] and (cfg.input_size, cfg.hidden_size) == (1, 1)
    assert x_is_wrong(Case.from_id(found.id))  # its id reproduces it


@pytest.mark.parametrize("kwargs, words", [
    ({"modes": ("lstmx",)}, "modes"), ({"dtypes": ()}, "dtypes"), ({"max_len": 0}, "max_len"),
    ({"wants": ("everything",)}, "wants"),
])
def test_bad_arguments_are_refused_when_the_strategy_is_made(kwargs, words):
    with pytest.raises(UsageError, match=words):
        cases(**kwargs)


def test_hypothesis_reports_a_falsifying_case_by_its_id():
    from hypothesis.vendor.pretty import pretty

    assert pretty(Case.from_id("gru-L1-uni-I1-H1-T2-B1-len2-f64-s0-wx")) == \
        "Case.from_id('gru-L1-uni-I1-H1-T2-B1-len2-f64-s0-wx')"


def test_the_readme_strategy_example_runs():
    example = next(block for block in re.findall(r"```python\n(.*?)```", SHRINK_PAGE, flags=re.S)
                   if "gradcheck_rnn.strategies" in block)
    namespace: dict = {}
    exec(example, namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests
    for test in tests:
        test()


def test_the_api_surface_is_drawn_on_request_and_shrinks_to_its_smallest_form():
    surface = cases(modes=("lstm",), max_size=4, projections=True, no_bias=True, zero_lengths=True)
    found = find(surface, lambda c: c.config.proj_size > 0 and not c.config.bias and 0 in c.seq_lengths,
                 settings=settings(database=None, max_examples=2000, deadline=None, derandomize=True,
                                   suppress_health_check=list(HealthCheck)))
    assert found.id == "lstm-L1-uni-I1-H2-P1-nobias-T1-B1-len0-f64-s0"
    assert Case.from_id(found.id).id == found.id
    assert judge_one(found, resolve_target("fused-cpu")).status == "pass"
    plain = find(cases(), lambda c: True, settings=settings(database=None, derandomize=True, deadline=None))
    assert plain.config.bias and plain.config.proj_size == 0 and 0 not in plain.seq_lengths


@pytest.mark.parametrize("mode", ["conv1d", "kda", "rwkv7", "deltaproduct"])
def test_the_families_of_issue_46_are_drawn_with_their_options_and_round_trip(mode):
    """Each new family through the strategy: its options drawn (conv1d's window, deltaproduct's n),
    its regimes and variants, and every drawn id rebuilds the case bit for bit."""
    seen = []

    @settings(max_examples=15, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(cases(modes=(mode,), max_layers=2, max_len=5, max_size=4, long_memory=True, packed_tail=True,
                 no_initial_state=True, layouts=True))
    def round_trips(case):
        again = Case.from_id(case.id)
        assert again.id == case.id and again.config == case.config
        assert all(np.array_equal(case.params[k], again.params[k]) for k in case.params)
        seen.append(case)

    round_trips()
    assert seen and {c.config.mode for c in seen} == {mode}
    assert len({c.id for c in seen}) > 1  # not one case drawn over and over
