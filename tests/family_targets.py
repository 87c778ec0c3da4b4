"""A user family defined outside the package, as a user writes one: minGRU, with a correct
target and one with a planted slip. Loaded by name (``--family family_targets:MINGRU``) and
registered directly (tests/test_families.py)."""

import numpy as np
import torch

from gradcheck_rnn import Outputs
from gradcheck_rnn.families import Family


class MinGRU(Family):
    """minGRU (Feng et al. 2024): z = σ(W_z x), h' = (1 − z) ⊙ h + z ⊙ (W_h x); y = h'."""

    def unit_shapes(self, config, layer):
        return {"w_z": (config.hidden_size, self.layer_input_size(config, layer)),
                "w_h": (config.hidden_size, self.layer_input_size(config, layer))}

    def step(self, ops, p, x, h, c, config):
        z = ops.sigmoid(x @ p["w_z"].T)
        h = (1 - z) * h + z * (x @ p["w_h"].T)
        return h, h, c


MINGRU = MinGRU(token="mingru", gates=("h",))


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


def mingru_slipped(case) -> Outputs:
    """The planted slip: padded steps update the state."""
    return mingru_target(case, masked=False)


NOT_A_FAMILY = object()
