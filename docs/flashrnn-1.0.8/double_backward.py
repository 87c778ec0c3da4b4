"""FlashRNN 1.0.8's vanilla_fwbw backend: torch's double backward through it returns zeros without
a word, where its autograd backend (vanilla) gives the true second order. torch and flashrnn only.

vanilla_fwbw is a torch.autograd.Function whose backward (flashrnn/vanilla_fwbw/fwbw.py) reads
the states and gates its forward saved. Those were computed inside Function.forward, where torch
records no graph, so with create_graph=True torch differentiates the backward as if they were
constants: the input's Hessian-vector product loses every term through them (here all of it), and
the backward is not marked @once_differentiable, which would have refused loudly. The gradgrad
check fails flashrnn-fwbw on this (gradcheck_rnn/targets/foreign/torch_grad.py), never skips it.
"""

import numpy as np
import torch
from flashrnn import flashrnn

rng = np.random.default_rng(0)
B, T, NH, D = 2, 4, 1, 3
Wx = torch.tensor(rng.standard_normal((B, T, 4, NH, D)), dtype=torch.float32, requires_grad=True)
R = torch.tensor(rng.standard_normal((4, NH, D, D)) * 0.5, dtype=torch.float32)
b = torch.tensor(rng.standard_normal((4, NH, D)) * 0.1, dtype=torch.float32)
head = torch.tensor(rng.standard_normal((1, B, T, NH, D)), dtype=torch.float32)
u = torch.tensor(rng.standard_normal(Wx.shape), dtype=torch.float32)


def hessian_vector_product(backend: str) -> torch.Tensor:
    """d/dε of the gradient of sum(h·head) with respect to Wx, along u (double backward)."""
    h, _ = flashrnn(Wx, R, b, function="lstm", backend=backend, dtype="float32")
    (grad,) = torch.autograd.grad((h * head).sum(), Wx, create_graph=True)
    if not grad.requires_grad:
        return torch.zeros_like(Wx)
    (hvp,) = torch.autograd.grad((grad * u).sum(), Wx, allow_unused=True)
    return torch.zeros_like(Wx) if hvp is None else hvp


autograd, fwbw = hessian_vector_product("vanilla"), hessian_vector_product("vanilla_fwbw")
print(f"vanilla (autograd): max |H·u| = {float(autograd.abs().max()):.3g}")
print(f"vanilla_fwbw (hand-written backward): max |H·u| = {float(fwbw.abs().max()):.3g}, "
      f"no error raised; max |difference| = {float((autograd - fwbw).abs().max()):.3g}")
silent_zero = float(fwbw.abs().max()) == 0.0 and float(autograd.abs().max()) > 0.1
print(("CONFIRMED" if silent_zero else "NOT REPRODUCED")
      + " FlashRNN 1.0.8's vanilla_fwbw double backward is a silent zero for the input's Hessian-vector product")
