"""Checks agree with each other about precision (issue 25): a precision the reference check
accepts fails no reference-free check, and a case a check derives is put to the target's
``supports_case`` like the base case."""

from __future__ import annotations

import numpy as np
import pytest

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.judging.checks import CHECKS
from gradcheck_rnn.judging.checks.base import compare_runs
from gradcheck_rnn.judging.judge import judge
from gradcheck_rnn.model.tolerances import Tolerances

import check_targets

# float64 cases on which float32-rounded y and dx failed a check before issue 25: linearity
# (cancelling sums, ratios up to 8.8) and fd (one-element x, e up to 1.7e-8 against 1e-8).
ROUNDED_CASES = [
    "rnn_tanh-L1-uni-I1-H1-T1-B1-len1-f64-s7-wx",
    "gru-L1-uni-I1-H1-T1-B1-len1-f64-s4-wx",
    "rnn_tanh-L1-uni-I1-H1-T1-B1-len1-f64-s3-wx",
    "lstm-L1-uni-I1-H1-T1-B1-len1-f64-s4-wx",
    "rnn_relu-L2-bi-I5-H4-nobias-T20-B4-len7.20.1.10-f64-s1928818697",
    "lstm-L4-bi-I12-H1-T6-B4-len5.4.2.1-f64-s216831637-glast",
    "gru-L3-uni-I4-H2-T10-B4-len3.7.5.7-f64-s65426541-wx-z",
]


@pytest.mark.parametrize("case_id", ROUNDED_CASES)
def test_a_precision_the_reference_check_accepts_fails_no_other_check(case_id):
    rows = {r.check: r for r in judge(Case.from_id(case_id), [check_targets.float32_outputs_on_float64],
                                      Tolerances(), CHECKS)}
    reference = rows["reference"]
    assert reference.status == "pass", reference.message
    assert max(t.max_abs for t in reference.tensors if t.name == "x") > 0  # the rounding is there
    assert all(r.status in ("pass", "skip") for r in rows.values()), \
        [(r.check, r.status, r.message) for r in rows.values() if r.status not in ("pass", "skip")]


def _float32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float64)


def test_a_sum_is_judged_by_the_size_of_its_terms_yet_a_real_difference_fails():
    case = Case.from_id("rnn_tanh-L1-uni-I1-H1-T1-B1-len1-f64-s1-wx")
    g1, g2 = np.full((1, 1, 1), 0.2357311), np.full((1, 1, 1), -0.2353530)
    rounded = [{"x": _float32(g)} for g in (g1, g2)]
    [row] = compare_runs(case, {"x": _float32(g1 + g2)}, rounded, Tolerances())
    assert row.passed, row.message  # 3.8e-4 is the sum, but each term carries 0.236's rounding
    assert row.max_abs > 1e-9 + 1e-7 * 3.8e-4  # what the old bound, rtol·|g1 + g2|, failed
    [row] = compare_runs(case, {"x": _float32(g1 + g2) + 1e-6}, rounded, Tolerances())
    assert not row.passed and "x: error" in row.message and row.location == {"t": 0, "b": 0, "unit": 0}


GY_CASE = "gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1-gy"


def test_a_derived_case_the_target_declines_is_a_skip_not_an_error():
    rows = {r.check: r for r in gr.check(check_targets.only_zero_state_heads, GY_CASE,
                                         checks=["reference", "linearity"])}
    assert rows["reference"].status == "pass", rows["reference"].message
    linearity = rows["linearity"]
    assert linearity.status == "skip", (linearity.status, linearity.message)
    assert linearity.message.startswith("the target declines the case this check derives")
    assert linearity.message.endswith("takes no gradient of the final states")


def test_supports_case_raising_on_a_derived_case_is_an_error_row_of_that_check():
    rows = {r.check: r for r in gr.check("check_targets:state_heads_raise", GY_CASE, checks=["reference", "linearity"])}
    assert rows["reference"].status == "pass", rows["reference"].message
    linearity = rows["linearity"]
    assert linearity.status == "error", (linearity.status, linearity.message)
    assert linearity.message.startswith("supports_case raised RuntimeError: cannot tell")
