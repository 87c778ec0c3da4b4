"""The loop reference against central finite differences on tiny cases of every mode."""

import copy

import numpy as np
import pytest

from gradcheck_rnn import RNNConfig, make_case
from gradcheck_rnn.case import MODES
from gradcheck_rnn.references.loop import run_loop_reference


def scalar_loss(case) -> float:
    out = run_loop_reference(case)
    loss = (out.y * case.dy).sum() + (out.hy * case.dhy).sum()
    return float(loss + (0.0 if out.cy is None else (out.cy * case.dcy).sum()))


def finite_difference(case, tensor: str, index: tuple, eps: float = 1e-6) -> float:
    values = []
    for sign in (1, -1):
        shifted = copy.deepcopy(case)
        array = shifted.params[tensor] if tensor in shifted.params else getattr(shifted, tensor)
        array[index] += sign * eps
        values.append(scalar_loss(shifted))
    return (values[0] - values[1]) / (2 * eps)


CONFIGS = [(mode, layers, bi) for mode in MODES for layers, bi in [(1, False), (2, True)]] + [
    ("lstm", 3, True), ("gru", 3, False)]


@pytest.mark.parametrize("mode, layers, bidirectional", CONFIGS)
def test_gradients_match_finite_differences(mode, layers, bidirectional):
    config = RNNConfig(mode, layers, bidirectional, 2, 2, 4, 3)
    case = make_case(config, [2, 4, 1], seed=layers * 10 + bidirectional)
    grads = run_loop_reference(case).grads
    rng = np.random.default_rng(0)
    names = ["x", "h0"] + (["c0"] if mode == "lstm" else [])
    names += [f"l{layers - 1}.{'bwd' if bidirectional else 'fwd'}.w_hh", "l0.fwd.w_ih", "l0.fwd.b_hh"]
    for name in names:
        shape = grads[name].shape
        for _ in range(2):
            index = tuple(int(rng.integers(s)) for s in shape)
            if name == "x":
                index = (0, 1, index[2])  # a valid step of the longest sequence: non-zero gradient
            fd = finite_difference(case, name, index)
            assert abs(grads[name][index] - fd) <= 1e-6 + 1e-5 * abs(fd), (name, index, grads[name][index], fd)


def test_padded_steps_give_zero_outputs_and_input_gradients():
    case = make_case(RNNConfig("gru", 2, True, 3, 4, 6, 3), [6, 2, 4], seed=1)
    out = run_loop_reference(case)
    for b, length in enumerate(case.seq_lengths):
        assert not out.y[length:, b].any() and not out.grads["x"][length:, b].any()
        assert out.y[length - 1, b].any() and out.grads["x"][length - 1, b].any()
