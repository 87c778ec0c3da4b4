"""The family registry: the cuDNN cells as families, and a user family (minGRU) defined outside
the package, judged through both references and caught when its target slips."""

import dataclasses

import numpy as np
import pytest
import torch

import gradcheck_rnn as gr
from gradcheck_rnn import Case, Outputs, RNNConfig
from gradcheck_rnn.config import GATE_NAMES
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import CUDNN_MODES, Family, family, modes, register
from gradcheck_rnn.layout import param_shapes


def test_cudnn_cells_are_the_first_families_in_their_historical_order():
    assert CUDNN_MODES == ("rnn_relu", "rnn_tanh", "lstm", "gru") == modes()[:4]
    assert {m: family(m).gates for m in CUDNN_MODES} == GATE_NAMES
    assert [m for m in modes() if family(m).cell_state] == ["lstm", "slstm"]
    with pytest.raises(UsageError, match="unknown mode 'nosuch'"):
        RNNConfig("nosuch", 1, False, 2, 3, 4, 1)
    with pytest.raises(ValueError, match="already registered"):
        register(dataclasses.replace(family("gru")))


class MinGRU(Family):
    """minGRU (Feng et al. 2024): z = σ(W_z x), h' = (1 − z) ⊙ h + z ⊙ (W_h x); y = h'."""

    def unit_shapes(self, config, layer):
        return {"w_z": (config.hidden_size, self.layer_input_size(config, layer)),
                "w_h": (config.hidden_size, self.layer_input_size(config, layer))}

    def step(self, ops, p, x, h, c, config):
        z = ops.sigmoid(x @ p["w_z"].T)
        h = (1 - z) * h + z * (x @ p["w_h"].T)
        return h, h, c


MINGRU = register(MinGRU(token="mingru", gates=("h",)))


def mingru_target(case, masked: bool = True) -> Outputs:
    """The user's own batched minGRU in torch autograd; ``masked=False`` is the planted slip (padded steps update the state)."""
    cfg = case.config
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0, requires_grad=True)
    valid = torch.from_numpy(np.arange(cfg.max_len)[:, None] < case.seq_lengths[None, :])[..., None]
    inp, finals = x, []
    for layer in range(cfg.num_layers):
        h, ys = h0[layer], []
        for t in range(cfg.max_len):
            z = torch.sigmoid(inp[t] @ params[f"l{layer}.fwd.w_z"].T)
            new = (1 - z) * h + z * (inp[t] @ params[f"l{layer}.fwd.w_h"].T)
            h = torch.where(valid[t], new, h) if masked else new
            ys.append(torch.where(valid[t], new, torch.zeros_like(new)))
        inp = torch.stack(ys)
        finals.append(h)
    hy = torch.stack(finals)
    loss = (inp * torch.from_numpy(case.dy)).sum() + (hy * torch.from_numpy(case.dhy)).sum()
    names = ["x", "h0", *params]
    grads = torch.autograd.grad(loss, [x, h0, *params.values()])
    return Outputs(y=inp.detach(), hy=hy.detach(), grads=dict(zip(names, grads)))


def test_a_user_family_is_judged_and_a_slip_in_its_target_is_caught():
    case = Case.from_id("mingru-L2-uni-I2-H3-T5-B3-len5.2.0-f64-s4")
    assert list(param_shapes(case.config)) == ["l0.fwd.w_z", "l0.fwd.w_h", "l1.fwd.w_z", "l1.fwd.w_h"]
    good = gr.check(mingru_target, case, checks=["reference", "padding", "future", "fd"])
    assert {r.status for r in good} == {"pass"}, [r.message for r in good]
    slipped = gr.check(lambda c: mingru_target(c, masked=False), case, checks=["reference"])
    assert [r.status for r in slipped] == ["fail"]
