"""The comparison engine: ratio, location in logical coordinates, NaN/Inf never pass."""

import json
import math

import numpy as np
import pytest

from gradcheck_rnn import RNNConfig
from gradcheck_rnn.model.compare import compare_tensor
from gradcheck_rnn.model.tolerances import Tolerance, Tolerances

CONFIG = RNNConfig("lstm", 2, True, 3, 5, 7, 3, "f32")
TOL = Tolerance(1e-2, 1e-6)


def test_ratio_location_and_values_of_the_worst_element():
    b = np.ones((7, 3, 10))
    a = b.copy()
    a[5, 2, 8] += 0.032
    error = compare_tensor("y", a, b, TOL, CONFIG)
    assert error.status == "fail"
    assert error.ratio == pytest.approx(0.032 / (1e-6 + 1e-2))
    assert error.location == {"t": 5, "b": 2, "unit": 8}
    assert (error.a, error.b) == (pytest.approx(1.032), 1.0)
    assert "Location of maximum error: (t=5,b=2,unit=8)" in error.message
    assert error.per_step[5] == pytest.approx(0.032) and error.per_step[4] == 0


def test_within_tolerance_passes():
    b = np.linspace(-3, 3, 7 * 3 * 10).reshape(7, 3, 10)
    error = compare_tensor("y", b * (1 + 5e-3), b, TOL, CONFIG)
    assert error.passed and error.ratio < 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_never_passes(bad):
    b = np.zeros((4, 3, 5))
    a = b.copy()
    a[1, 0, 2] = bad
    error = compare_tensor("hy", a, b, Tolerance(math.inf, math.inf), CONFIG)
    assert error.status == "fail" and "non-finite" in error.message
    assert error.location == {"layer": 0, "dir": "bwd", "b": 0, "unit": 2}


def test_parameter_location_names_layer_direction_gate_row_col():
    b = np.zeros((20, 10))
    a = b.copy()
    a[13, 4] = 1.0  # gate 13 // 5 = 2 -> "g", row 3
    error = compare_tensor("l1.bwd.w_ih", a, b, TOL, CONFIG)
    assert error.location == {"layer": 1, "dir": "bwd", "gate": "g", "row": 3, "col": 4}
    bias = compare_tensor("l0.fwd.b_hh", np.eye(20)[19], np.zeros(20), TOL, CONFIG)
    assert bias.location == {"layer": 0, "dir": "fwd", "gate": "o", "row": 4}


def test_missing_and_misshapen_tensors_fail():
    assert compare_tensor("x", None, np.zeros(3), TOL, CONFIG).status == "missing"
    assert compare_tensor("x", np.zeros(4), np.zeros(3), TOL, CONFIG).status == "fail"


def test_torch_inputs_of_low_precision_are_compared_in_float64():
    import torch

    b = np.full((2, 2), 1.0 / 3.0)
    error = compare_tensor("l0.fwd.b_ih", torch.tensor(b, dtype=torch.bfloat16)[0], b[0], TOL, CONFIG)
    assert error.max_abs == pytest.approx(abs(float(torch.tensor(1 / 3, dtype=torch.bfloat16)) - 1 / 3))


def test_tolerance_tables_and_overrides():
    tols = Tolerances.from_profile({"f32": {"weight_grad": {"rtol": 0.5}}})
    assert tols.for_tensor("f32", "l0.fwd.w_hh").rtol == 0.5
    assert tols.for_tensor("f32", "x") == Tolerances().for_tensor("f32", "x")
    assert Tolerances(rtol=0.25).for_tensor("f64", "y").rtol == 0.25


def test_ratio_maps_hold_the_maxima_per_step_and_sequence_and_per_gate_block():
    b = np.ones((7, 3, 10))
    a = b.copy()
    a[5, 2, 8] += 0.032
    y = compare_tensor("y", a, b, TOL, CONFIG).ratio_map
    assert (y.rows, y.cols, y.pool, y.ratio.shape) == ("t", "b", (1, 1), (7, 3))
    assert y.ratio[5, 2] == pytest.approx(0.032 / (1e-6 + 1e-2), rel=1e-6) and y.ratio[4, 2] == 0
    hy = compare_tensor("hy", np.zeros((4, 3, 5)), np.zeros((4, 3, 5)), TOL, CONFIG).ratio_map
    assert (hy.rows, hy.cols, hy.ratio.shape) == ("state", "b", (4, 3))
    w = np.zeros((20, 10))
    w[13, 4] = 1.0  # gate g (13 // 5 = 2), unit 3
    gates = compare_tensor("l1.bwd.w_ih", w, np.zeros((20, 10)), TOL, CONFIG).ratio_map
    assert (gates.rows, gates.cols, gates.ratio.shape) == ("gate", "unit", (4, 5))
    assert np.argwhere(gates.ratio > 1).tolist() == [[2, 3]]


def test_ratio_maps_are_pooled_small_and_round_trip_through_json():
    from gradcheck_rnn.model.compare import MAP_MAX, RatioMap

    long = RNNConfig("gru", 1, False, 2, 3, 200, 70, "f32")
    b = np.zeros((200, 70, 3))
    a = b.copy()
    a[199, 69, 0] = np.nan
    a[0, 0, 0] = 1.0
    error = compare_tensor("x", a, b, TOL, long)
    ratio_map = error.ratio_map
    assert ratio_map.pool == (4, 2) and max(ratio_map.ratio.shape) <= MAP_MAX and ratio_map.ratio.shape == (50, 35)
    assert np.isposinf(ratio_map.ratio[-1, -1]) and ratio_map.ratio[0, 0] == pytest.approx(1 / 1e-6, rel=1e-3)
    back = RatioMap.from_json(json.loads(json.dumps(ratio_map.to_json(), allow_nan=False)))
    # Stored to 3 significant digits: they only colour pixels.
    assert back.pool == ratio_map.pool and np.allclose(back.ratio, ratio_map.ratio, rtol=5e-3, equal_nan=True)


def test_projection_weight_has_no_gate_blocks():
    projected = RNNConfig("lstm", 1, False, 3, 5, 4, 2, "f32", proj_size=3)
    w = np.zeros((3, 5))
    w[2, 4] = 1.0
    error = compare_tensor("l0.fwd.w_hr", w, np.zeros((3, 5)), TOL, projected)
    assert error.location == {"layer": 0, "dir": "fwd", "row": 2, "col": 4} and error.ratio_map is None


def test_comparisons_that_zeros_would_pass_are_mistrusted():
    rng = np.random.default_rng(0)
    b = rng.standard_normal((7, 3, 10))
    assert not compare_tensor("y", b, b, TOL, CONFIG).mistrusted
    assert compare_tensor("y", b, b, Tolerance(1.0, 0.0), CONFIG).mistrusted  # rtol 1 accepts zeros anywhere
    tiny = np.full(b.shape, 1e-8)  # below atol, but for one element in 210: zeros pass 99.5 %
    tiny[3, 1, 4] = 2.0
    assert compare_tensor("y", tiny, tiny, TOL, CONFIG).mistrusted
    sparse = np.where(np.arange(b.size).reshape(b.shape) % 10 == 0, b, 0.0)  # padding-like zeros, 10 % real
    assert not compare_tensor("y", sparse, sparse, TOL, CONFIG).mistrusted
