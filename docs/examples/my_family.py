# my_family.py
"""A cell family of your own, minGRU (Feng et al. 2024), and a kernel to judge on it.

    PYTHONPATH=. gradcheck-rnn sweep --family my_family:MINGRU --mode mingru -t my_family:my_mingru
"""

import numpy as np
import torch

from gradcheck_rnn import Outputs
from gradcheck_rnn.families import Family


class MinGRU(Family):
    """z = σ(W_z x), h' = (1 − z) ⊙ h + z ⊙ (W_h x), y = h'. Both references run ``step``."""

    def unit_shapes(self, config, layer):
        width = self.layer_input_size(config, layer)
        return {"w_z": (config.hidden_size, width), "w_h": (config.hidden_size, width)}

    def step(self, ops, p, x, h, c, config):
        z = ops.sigmoid(x @ p["w_z"].T)
        h = (1 - z) * h + z * (x @ p["w_h"].T)
        return h, h, c


MINGRU = MinGRU(token="mingru", gates=("h",), bidirectional=False)


def my_mingru(case, masked: bool = True) -> Outputs:
    """The kernel under test: a batched minGRU in torch autograd (``masked=False`` lets padded steps
    update the state, a classic slip)."""
    cfg = case.config
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0 if case.initial_state else np.zeros((cfg.num_layers, cfg.batch_size, cfg.hidden_size)),
                      requires_grad=True)
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
    grads = dict(zip(names, torch.autograd.grad(loss, [x, h0, *params.values()])))
    return Outputs(y=inp.detach(), hy=hy.detach(), grads=grads)
