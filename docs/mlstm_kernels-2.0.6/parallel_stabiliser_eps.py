"""mlstm_kernels 2.0.6: parallel--native_autograd and chunkwise--native_autograd compute two
slightly different functions when eps > 0, so their float64 outputs and forward-mode tangents
differ by ~1e-7 relative; with eps = 0 they agree to float64 rounding.

Both divide by max(|n·q|, exp(-m)) + eps, but at different scales: the parallel kernel's
stabiliser m is the row maximum of its log decays (parallel/native/fw.py: vecM = max(matLogD)),
while the chunkwise kernel (and the recurrent mLSTM, the mlstm family) carries m from m = 0
without an initial state. The numerator and the denominator are scaled by exp(-m), so the same
eps = 1e-6 weighs differently. That is a convention, not a wrong derivative: each kernel's jvp is
the exact tangent of its own function. gradcheck-rnn judges the mlstm family with m starting at 0,
so mlstm-parallel's float64 jvp and gradgrad are declined with this reason (below float64 the
difference is far inside the tolerances). torch and mlstm_kernels only.
"""

import torch
from mlstm_kernels.torch import get_mlstm_kernel
from torch.func import jvp

torch.manual_seed(0)
B, NH, S, K = 2, 3, 5, 4
q, k, v = (torch.randn(B, NH, S, K, dtype=torch.float64) for _ in range(3))
i, f = torch.randn(B, NH, S, dtype=torch.float64), torch.randn(B, NH, S, dtype=torch.float64) + 2
tangent = torch.randn_like(q)
parallel, chunkwise = get_mlstm_kernel("parallel--native_autograd"), get_mlstm_kernel("chunkwise--native_autograd")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / b.abs().clamp_min(1e-3)).max())


differences = {}
for eps in (1e-6, 0.0):
    h_par, t_par = jvp(lambda q, eps=eps: parallel(q, k, v, i, f, eps=eps), (q,), (tangent,))
    h_chk, t_chk = jvp(lambda q, eps=eps: chunkwise(q, k, v, i, f, eps=eps, chunk_size=1), (q,), (tangent,))
    differences[eps] = relative(h_par, h_chk), relative(t_par, t_chk)
    print(f"eps={eps:g}: parallel against chunkwise in float64: outputs {differences[eps][0]:.2e}, "
          f"tangents {differences[eps][1]:.2e} (max relative difference)")
shown = min(differences[1e-6]) > 1e-8 and max(differences[0.0]) < 1e-12
print("CONFIRMED" if shown else "NOT REPRODUCED",
      "the parallel and chunkwise kernels differ in float64 by their eps's scale only")
