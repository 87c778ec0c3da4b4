"""The loop reference against central finite differences on tiny cases of every mode, and
against torch.nn on the cuDNN families."""

import copy

import numpy as np
import pytest

from gradcheck_rnn import RNNConfig, make_case
from gradcheck_rnn.model.case import MODES
from gradcheck_rnn.references.loop import run_loop_reference
from gradcheck_rnn.targets.torch_native import TorchNativeTarget


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


TORCH_NN_CASES = [
    RNNConfig("lstm", 2, True, 3, 5, 5, 3, proj_size=2),  # projected, stacked, bidirectional
    RNNConfig("lstm", 3, False, 2, 4, 5, 3),
    RNNConfig("lstm", 1, True, 3, 4, 5, 3, proj_size=3, bias=False),
    RNNConfig("gru", 3, True, 3, 4, 5, 3),
    RNNConfig("gru", 2, True, 2, 3, 5, 3, bias=False),
    RNNConfig("rnn_tanh", 2, True, 3, 4, 5, 3),
    RNNConfig("rnn_relu", 2, True, 3, 4, 5, 3, bias=False),
]


@pytest.mark.parametrize("config", TORCH_NN_CASES, ids=lambda c: f"{c.mode}-L{c.num_layers}-P{c.proj_size}-bias{c.bias}")
def test_the_cudnn_families_steps_give_torch_nn_to_1e_12(config):
    """The loop reference runs each cuDNN family's own step: on variable lengths (the reverse
    direction from each sequence's last step), stacked, bidirectional and projected configs it is
    torch.nn's float64 result, every output and gradient."""
    case = make_case(config, [5, 2, 4], seed=7)
    loop = run_loop_reference(case)
    torch_nn = TorchNativeTarget().run(case)
    pairs = {"y": (loop.y, torch_nn.y), "hy": (loop.hy, torch_nn.hy)}
    if config.has_cell_state:
        pairs["cy"] = (loop.cy, torch_nn.cy)
    pairs.update({name: (loop.grads[name], grad) for name, grad in torch_nn.grads.items()})
    assert set(torch_nn.grads) == set(loop.grads)  # every gradient compared, parameters included
    for name, (ours, theirs) in pairs.items():
        np.testing.assert_allclose(ours, np.asarray(theirs), rtol=0, atol=1e-12, err_msg=name)
