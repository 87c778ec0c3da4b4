"""FlashRNN 1.0.8's vanilla_fwbw sLSTM returns 0 as the gradient of the initial stabiliser state m0,
where the true derivative is not 0 (what the flashrnn-fwbw target fails on: c0's m third).
numpy, torch and flashrnn only.

The loss reads h only (every step's h and the last h): no head gradient on c, n or m, so the
stabiliser convention does not matter, and holding m constant is exact for it, dm0 included
(docs/contracts.md, "slstm"). m0 still changes h: f' = exp(log σ(f̃) + m0 − m1) weighs the
initial c0 and n0 against the first input. bw.py's slstm_pointwise_bw sets "delta_m_tminus1 =
zero" at every step, the first one too, so dm0 is dropped. The vanilla backend (autograd through
the same forward) in float64 and a central difference in float64 agree on the true dm0; in
float32 vanilla_fwbw agrees with them on every other gradient.
"""

import numpy as np
import torch
from flashrnn import flashrnn

B, T, NH, D = 2, 4, 1, 3
rng = np.random.default_rng(0)
Wx = rng.standard_normal((B, T, 4, NH, D))
R = rng.standard_normal((4, NH, D, D)) / np.sqrt(D)
b = rng.standard_normal((4, NH, D)) / np.sqrt(D)
n0 = np.exp(np.abs(rng.standard_normal((B, NH, D))))  # a valid state: n0 >= 1, |c0| < n0
states = np.stack([rng.standard_normal((B, NH, D)), n0 * np.tanh(rng.standard_normal((B, NH, D))), n0,
                   rng.standard_normal((B, NH, D))])[:, :, None]  # (h, c, n, m), (4, B, 1, NH, D)
dh = rng.standard_normal((B, T, NH, D))
dh_last = rng.standard_normal((B, NH, D))


def loss_and_grads(backend, dtype, s=states):
    """The loss through h and hy, and the gradients of Wx, R, b and the initial states."""
    leaves = [torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True) for a in (Wx, R, b, s)]
    h, last = flashrnn(*leaves[:3], states=leaves[3], function="slstm", backend=backend, dtype=dtype)
    loss = (h[0] * torch.tensor(dh, dtype=h.dtype)).sum() + (last[0, :, 0] * torch.tensor(dh_last, dtype=h.dtype)).sum()
    return loss.item(), [g.double().numpy() for g in torch.autograd.grad(loss, leaves)]


_, true = loss_and_grads("vanilla", "float64")
_, fwbw = loss_and_grads("vanilla_fwbw", "float32")
eps, unit = 1e-6, (0, 0, 0, 0)  # the central difference of the loss along m0 of one unit
up, down = states.copy(), states.copy()
up[3][unit] += eps
down[3][unit] -= eps
fd = (loss_and_grads("vanilla", "float64", up)[0] - loss_and_grads("vanilla", "float64", down)[0]) / (2 * eps)

names = ("Wx", "R", "b", "h0", "c0", "n0")
others = [true[:3][k] for k in range(3)] + [true[3][k] for k in range(3)]
theirs = [fwbw[:3][k] for k in range(3)] + [fwbw[3][k] for k in range(3)]
for name, a, t in zip(names, theirs, others):
    print(f"{name}: vanilla_fwbw (float32) vs the true derivative (float64): max |diff| {np.abs(a - t).max():.1e}")
print(f"m0: vanilla_fwbw {np.abs(fwbw[3][3]).max():.1e} (max |dm0|), true max |dm0| {np.abs(true[3][3]).max():.2e}; "
      f"unit {unit}: true {true[3][3][unit]:.6f}, central difference {fd:.6f}")
agree = all(np.allclose(a, t, rtol=1e-4, atol=1e-4) for a, t in zip(theirs, others))
if agree and not fwbw[3][3].any() and np.abs(true[3][3]).max() > 1e-3 and abs(fd - true[3][3][unit]) < 1e-6:
    print("CONFIRMED FlashRNN 1.0.8's vanilla_fwbw sLSTM drops the initial stabiliser's gradient (dm0 = 0)")
else:
    print("NOT REPRODUCED")
