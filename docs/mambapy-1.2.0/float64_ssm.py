"""mambapy 1.2.0 computes a float64 MambaBlock's scan with float32 A and D.

``MambaBlock.ssm`` starts with ``A = -torch.exp(self.A_log.float())`` and ``D = self.D.float()``,
so whatever the block's dtype, A_log and D are rounded to float32 first. This script runs
``ssm`` of a float64 block and compares it with a float64 numpy loop of the same recurrence
(h_t = exp(Δ_t A) h_{t-1} + Δ_t B_t u_t, y_t = C_t h_t + D u_t, Δ = softplus(W_dt δ + b_dt)): the
error is float32's, ~1e-8 relative, not float64's; the same loop given A = -exp(A_log) computed in
float32 (torch's float32 exp, as ssm computes it) and D rounded to float32 agrees to float64 rounding. The gradcheck-rnn target ``mambapy`` therefore judges
float32 only (gradcheck_rnn/targets/foreign/mambapy_target.py). numpy, torch and mambapy only.
"""

import numpy as np
import torch
from mambapy.mamba import MambaBlock, MambaConfig

rng = np.random.default_rng(0)
H, N, R, L = 3, 2, 1, 5
config = MambaConfig(d_model=H, n_layers=1, dt_rank=R, d_state=N, expand_factor=1)
block = MambaBlock(config).double()
with torch.no_grad():
    for p in block.parameters():
        p.copy_(torch.from_numpy(rng.standard_normal(p.shape)))
u, z = rng.standard_normal((1, L, H)), rng.standard_normal((1, L, H))
y = block.ssm(torch.from_numpy(u), torch.from_numpy(z)).detach().numpy()[0]


def loop(A, d):
    """The selective scan in float64 numpy, from the block's own weights and the given A and D."""
    w_x, w_dt = block.x_proj.weight.detach().numpy(), block.dt_proj.weight.detach().numpy()
    b_dt = block.dt_proj.bias.detach().numpy()
    h, out = np.zeros((H, N)), []
    for t in range(L):
        proj = w_x @ u[0, t]
        delta = np.logaddexp(0, w_dt @ proj[:R] + b_dt)  # softplus
        h = np.exp(delta[:, None] * A) * h + (delta * u[0, t])[:, None] * proj[R:R + N][None, :]
        out.append(h @ proj[R + N:] + d * u[0, t])
    return np.array(out)


a_log, d = block.A_log.detach().numpy(), block.D.detach().numpy()
as_float64 = np.abs(y - loop(-np.exp(a_log), d)).max() / np.abs(y).max()
# what ssm does: torch's float32 exp of A_log rounded to float32, and D rounded to float32
A32 = -torch.exp(torch.from_numpy(a_log).float()).double().numpy()
as_float32 = np.abs(y - loop(A32, d.astype(np.float32).astype(np.float64))).max() / np.abs(y).max()
print(f"float64 block vs float64 loop: {as_float64:.1e} relative; vs the loop with A and D computed as ssm computes them (float32): {as_float32:.1e}")
if as_float64 > 1e-10 and as_float32 < 1e-13:
    print("CONFIRMED mambapy computes A and D in float32 in a float64 block")
else:
    print("NOT REPRODUCED")
