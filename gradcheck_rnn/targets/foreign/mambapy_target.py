"""The ``mambapy`` target: mambapy 1.2.0's Mamba selective scan (``pscan``) for the s6 family.

Loaded by path in any interpreter with numpy, torch and mambapy (``mambapy@PYTHON``), or in-process
when mambapy imports here; it imports nothing from gradcheck_rnn. Read from mambapy/mamba.py and
mambapy/pscan.py.

What runs: per layer, our pre-norm x / sqrt(mean(x²) + 1) (outside the library: s6 defines it),
then ``MambaBlock.in_proj``, ``chunk(2)`` into u and z, ``MambaBlock.ssm(u, z)`` (x_proj, the
split into δ, B, C, dt_proj, softplus, and ``selective_scan`` over ``pscan``, the parallel scan with
a hand-written backward), and ``y * F.silu(z)`` as ``MambaBlock.forward`` gates it.
``MambaBlock.forward`` itself is not called: it runs a causal conv1d and a silu on u before the
scan, which s6 does not have (no conv is faithful to an s6 case, and an identity conv would still
leave the silu); ``out_proj`` and the residual block are outside s6 too.

Mapping, written once in :func:`to_mambapy` (parameter names of ``MambaBlock``):
``in_proj.weight`` = w_in (u rows, then z rows: chunk(2) order), ``x_proj.weight`` = w_x (δ, B, C
rows: torch.split order), ``dt_proj.weight`` = w_dt, ``dt_proj.bias`` = b_dt (zeros for -nobias:
dt_proj always has one, and its gradient is not returned), ``A_log`` = a_log, ``D`` = d, in a
block built with d_inner = H, d_state = N, dt_rank = R. The gradients of our parameters are torch
autograd's derivative through that map (``torch.func.functional_call``).

States: ``pscan`` computes H[t] = Ā[t]·H[t−1] + X[t] from H = 0, and ``selective_scan`` returns y
only. So the target wraps the ``pscan`` that ``selective_scan`` calls for the duration of the call:
an initial state enters as the first input, X[0] + Ā[0]·h0 (the recurrence's own first step), and
hy is pscan's H at the last step. Both go through pscan's forward and its hand-written backward.

Lengths: mambapy has none; sequences of equal length are one call each (torch_grad.py). pscan pads
a length to the next power of two itself (``pad_npo2``, zeros: the padded steps come after the
last real one and are cut off), so any length is taken.

Declined: families other than s6; -nosoftplus (``ssm`` always applies ``F.softplus(delta +
self.dt_proj.bias)``); -nogate (``MambaBlock.forward`` always multiplies by silu(z)); float64, float16
and bfloat16 (``ssm`` computes ``A = -torch.exp(self.A_log.float())`` and ``D = self.D.float()``:
float32 whatever the block's dtype; docs/mambapy-1.2.0/float64_ssm.py shows it).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Loaded by file path in an interpreter that may not have gradcheck_rnn: so is the shared base.
_spec = importlib.util.spec_from_file_location("_gradcheck_foreign_torch_grad", Path(__file__).with_name("torch_grad.py"))
torch_grad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_grad)

NORM_EPS = 1.0  # s6's pre-norm (docs/contracts.md, "s6")
FLOAT32_ONLY = ("mambapy's MambaBlock.ssm computes A = -torch.exp(self.A_log.float()) and D = self.D.float(), "
                "float32 whatever the block's dtype, so a {} block is not computed in {} "
                "(docs/mambapy-1.2.0/float64_ssm.py)")


def to_mambapy(params: dict[str, Any], config: Any, layer: int) -> dict[str, Any]:
    """One layer of our s6 parameters as MambaBlock's parameters, by name."""
    def p(kind: str) -> Any:
        return params[f"l{layer}.fwd.{kind}"]

    bias = p("b_dt") if config.bias else p("d").new_zeros(config.hidden_size)
    return {"in_proj.weight": p("w_in"), "x_proj.weight": p("w_x"), "dt_proj.weight": p("w_dt"),
            "dt_proj.bias": bias, "A_log": p("a_log"), "D": p("d")}


@contextmanager
def _scan_from(h0: Any, last: list[Any]) -> Iterator[None]:
    """selective_scan's pscan, started from h0 (None: from 0) and keeping its H for hy."""
    import torch
    from mambapy import mamba

    scan = mamba.pscan

    def started(deltaA: Any, BX: Any) -> Any:  # (B, L, ED, N) both
        if h0 is not None:
            BX = torch.cat([BX[:, :1] + deltaA[:, :1] * h0[:, None], BX[:, 1:]], 1)
        hs = scan(deltaA, BX)
        last.append(hs[:, -1])
        return hs

    mamba.pscan = started
    try:
        yield
    finally:
        mamba.pscan = scan


class MambaPyTarget(torch_grad.TorchGradTarget):
    """mambapy's selective scan; see the module docstring for the map and the declines."""

    name = "mambapy"

    def __init__(self) -> None:
        self._blocks: dict[Any, Any] = {}

    def supports(self, config: Any) -> bool | str:
        if config.mode != "s6":
            return f"mambapy implements Mamba's selective scan (the s6 family), not {config.mode}"
        if not config.option("softplus"):
            return "mambapy's MambaBlock.ssm always applies softplus to Δ (F.softplus(delta + self.dt_proj.bias))"
        if not config.option("gated"):
            return "mambapy's MambaBlock.forward always gates its output with silu(z) (output = y * z)"
        if config.dtype != "f32":
            name = torch_grad.DTYPES[config.dtype]
            return FLOAT32_ONLY.format(name, name)
        return True

    def _block(self, config: Any, width: int) -> Any:
        """An s6 mixer of this layer's sizes (its own weights are never used: functional_call)."""
        import torch
        from mambapy.mamba import MambaConfig

        key = (width, config.hidden_size, config.option("state_dim"), config.option("dt_rank"))
        if key not in self._blocks:
            mcfg = MambaConfig(d_model=width, n_layers=1, dt_rank=key[3], d_state=key[2], expand_factor=1)
            mcfg.d_inner = config.hidden_size  # ED = H, whatever the input width
            with torch.random.fork_rng(devices=[]):  # its initialisation draws from torch's global RNG
                self._blocks[key] = _mixer_class()(mcfg)
        return self._blocks[key]

    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        import torch
        from torch.func import functional_call

        cfg = case.config
        H, N = cfg.hidden_size, cfg.option("state_dim")
        hy = []
        x = x.transpose(0, 1)  # mambapy is batch-first: (B, L, ·)
        for layer in range(cfg.num_layers):
            x = x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS)
            last: list[Any] = []
            with _scan_from(None if h0 is None else h0[layer].reshape(-1, H, N), last):
                x = functional_call(self._block(cfg, x.shape[-1]), to_mambapy(params, cfg, layer), (x,))
            hy.append(last[0].reshape(-1, H * N))
        return x.transpose(0, 1), torch.stack(hy), None


def _mixer_class() -> Any:
    """MambaBlock with s6's forward: in_proj, chunk into u and z, ssm, times silu(z)."""
    import torch.nn.functional as F
    from mambapy.mamba import MambaBlock

    class S6Mixer(MambaBlock):
        """MambaBlock.forward without the conv1d and silu before the scan and without out_proj."""

        def forward(self, x: Any) -> Any:
            u, z = self.in_proj(x).chunk(2, dim=-1)
            return self.ssm(u, z) * F.silu(z)

    return S6Mixer


def make_target() -> MambaPyTarget:
    return MambaPyTarget()
