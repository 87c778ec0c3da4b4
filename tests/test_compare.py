"""The comparison engine: ratio, location in logical coordinates, NaN/Inf never pass."""

import math

import numpy as np
import pytest

from gradcheck_rnn import RNNConfig
from gradcheck_rnn.compare import compare_tensor
from gradcheck_rnn.tolerances import Tolerance, Tolerances

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
