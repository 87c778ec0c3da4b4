"""The ``mlstm-*`` targets: NX-AI's mlstm_kernels 2.0.6 on the mlstm family, one target per kernel.

``mlstm-chunkwise`` (``chunkwise--native_autograd``: torch autograd through the chunkwise forward),
``mlstm-custbw`` (``chunkwise--native_custbw``: the same forward with a hand-written backward),
``mlstm-parallel`` (``parallel--native_autograd``) and ``mlstm-triton`` (``chunkwise--triton_xl_chunk``).
Loaded by path in any interpreter with numpy, torch and mlstm_kernels (``mlstm-chunkwise@PYTHON``),
or in-process when mlstm_kernels imports here; it imports nothing from gradcheck_rnn. Read from
mlstm_kernels/torch/{__init__.py,chunkwise/native/fw.py,chunkwise/native/fwbw.py,parallel/native/fwbw.py}.

The map (docs/contracts.md, "mlstm"), per layer, in ordinary torch ops: the pre-norm
x / sqrt(mean(x²) + 1), q, k, v = the maps w_q, w_k, w_v in the library's layout (B, NH, S, DH),
and the gate pre-activations i = w_i x̂ + b_i, f = w_f x̂ + b_f (B, NH, S): the kernels take them as
they are (exponential input gate, ``logsigmoid(f)`` inside) and scale q by DHQK^-1/2 themselves,
ε = 1e-6 as the family. States: the case's h0 / hy is C (B, NH, K, V); its c0 / cy is [n | m],
n (B, NH, K) then m (B, NH, 1): ``c_initial``, ``n_initial``, ``m_initial`` and
``return_last_states=True``'s (C, n, m).

Lengths: the kernels take no lengths and "do not support arbitrary sequence lengths" (the
chunkwise forms need S divisible by the chunk size), so equal lengths are one call each
(torch_grad.py) and each call's chunk size is gcd(S, c): chunks of c steps where the length
allows. c is the kernel configuration ``chunk`` (docs/contracts.md, "Kernel configurations"): the
chunkwise kernels declare the powers of two from 4 up to the first that covers T, at most 256
(NX-AI/mlstm_kernels #10 was wrong only above 128: a case of T > 128 draws 256), one drawn per case
(``-kc.chunk.<c>``); 4 where the case names none.

``mlstm-parallel``: the parallel kernels take no initial state and return no final one
("c_initial is not supported", "return_last_states is not supported"), so a case with an
initial state is declined and the final states (hy, cy) come from ``chunkwise--native_autograd``
on the same q, k, v, i, f: y and the gradients through y are the parallel kernel's. Their
stabiliser is the row maximum of log D, the xLSTM paper's parallel form, which starts m at −∞
(the chunkwise kernels start it at 0): the target declares the mlstm family's convention
``stabiliser_start = "minus_infinity"`` and is judged on the ``-minf`` case, where (with no initial
state) the chunkwise kernel's final states are started from C = 0, n = 0, m = −∞ too.

``mlstm-custbw`` and ``mlstm-triton`` have hand-written backwards that hold the normaliser's
denominator and the stabiliser constant, by design: they declare the mlstm family's convention
``normaliser_gradient = "head_norm"`` and are judged on the ``-headnorm`` case (every layer's output
normalised per head, here after the kernel as in the family, and no head gradient on the final states).

``mlstm-triton`` is judged on CUDA only, never under Triton's CPU interpreter (Triton 3.9's refuses
its kernels, :data:`INTERPRETER_REFUSES`; the skip reason says only what holds for every Triton the
extra allows), and it needs S divisible by 16.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

_HERE = Path(__file__).parent


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_gradcheck_foreign_{name}", _HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


torch_grad, triton_cpu = _load("torch_grad"), _load("triton_cpu")

NORM_EPS = 1.0  # the matrix families' pre-norm (docs/contracts.md)
EPS = 1e-6      # the family's and the kernels' ε
HEAD_NORM_EPS = 1e-30  # the family's per-head norm under the -headnorm convention (families/mlstm.py)
# The kernels whose backward is written by hand and holds the normaliser's denominator and the
# stabiliser constant ("cancels out in the following group norm"): judged under the mlstm family's
# convention normaliser_gradient = "head_norm" (docs/contracts.md, "Gradient conventions").
HAND_WRITTEN_BACKWARD = ("custbw", "triton")
CHUNK = 4       # the chunk size where the length allows and the case names none (module docstring)
MAX_CHUNK = 256  # the largest chunk size declared (above mlstm_kernels #10's 128)
XL_CHUNK_MULTIPLE = 16
KERNELS = {"chunkwise": "chunkwise--native_autograd", "custbw": "chunkwise--native_custbw",
           "parallel": "parallel--native_autograd", "triton": "chunkwise--triton_xl_chunk"}
# What Triton 3.9's interpreter raises on mlstm_kernels 2.0.6's Triton kernels (docs/mlstm_kernels-2.0.6/refusals.py).
INTERPRETER_REFUSES = "Block pointers have been removed in favor of the tensor descriptor API"


def layer_map(params: dict[str, Any], config: Any, layer: int, x: Any) -> tuple[Any, ...]:
    """One layer's q, k (B, NH, S, K), v (B, NH, S, V), i and f (B, NH, S) from batch-first x (B, S, I_l)."""
    import torch

    heads, K = config.option("heads"), config.option("key_width")

    def p(kind: str) -> Any:
        return params.get(f"l{layer}.fwd.{kind}")

    x = x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS)
    q, k = ((x @ p(w).T).unflatten(-1, (heads, K)).transpose(1, 2) for w in ("w_q", "w_k"))
    v = (x @ p("w_v").T).unflatten(-1, (heads, -1)).transpose(1, 2)
    i, f = x @ p("w_i").T, x @ p("w_f").T
    if config.bias:
        i, f = i + p("b_i"), f + p("b_f")
    return q, k, v, i.transpose(1, 2), f.transpose(1, 2)


class MLSTMTarget(torch_grad.TorchGradTarget):
    """One mlstm_kernels kernel on the mlstm family; see the module docstring."""

    def __init__(self, kernel: str = "chunkwise") -> None:
        self.kernel = kernel
        self.name = f"mlstm-{kernel}"
        self.device = "cuda" if kernel == "triton" else "cpu"
        if kernel in HAND_WRITTEN_BACKWARD:
            self.normaliser_gradient = "head_norm"
        if kernel == "parallel":  # its stabiliser is a row max of the decay matrix: m from −∞ (module docstring)
            self.stabiliser_start = "minus_infinity"

    def supports(self, config: Any) -> bool | str:
        if config.mode != "mlstm":
            return f"mlstm_kernels implements the mLSTM (the mlstm family), not {config.mode}"
        if self.kernel == "triton":
            if config.dtype == "f64":
                return "mlstm_kernels 2.0.6's Triton kernels have no float64 kernel (KeyError: torch.float64)"
            if triton_cpu.interpreted():  # true of every Triton the extra allows; the quote is 3.9's own words
                return ("mlstm-triton is judged on a CUDA device only, not under Triton's CPU interpreter "
                        "(TRITON_INTERPRET=1): Triton 3.9's interpreter refuses mlstm_kernels' Triton kernels "
                        f"(\"{INTERPRETER_REFUSES}\"), and no interpreter run of them is checked")
        return True

    def kernel_configs(self, config: Any) -> dict[str, tuple]:
        """The chunk sizes of the chunkwise kernels (module docstring); the parallel one has none,
        and triton_xl_chunk's is fixed at 16."""
        if self.kernel not in ("chunkwise", "custbw"):
            return {}
        sizes = [CHUNK]
        while sizes[-1] < min(config.max_len, MAX_CHUNK):
            sizes.append(2 * sizes[-1])
        return {"chunk": tuple(sizes)}

    def supports_case(self, case: Any) -> bool | str:
        if self.kernel == "parallel" and case.h0 is not None:
            return "mlstm_kernels' parallel kernels take no initial state (\"c_initial is not supported\")"
        if self.kernel == "triton" and any(int(n) % XL_CHUNK_MULTIPLE for n in case.seq_lengths):
            return "mlstm_kernels' triton_xl_chunk needs whole blocks (\"Sequence length must be divisible by 16.\")"
        return True

    def second_order_refusal(self, case: Any) -> str | None:
        if self.kernel in HAND_WRITTEN_BACKWARD:
            return (f"{self.name}'s hand-written backward holds the normaliser's denominator and the stabiliser "
                    "constant (the head_norm convention): its double backward is that gradient's derivative, not "
                    "the loss's second order that the references compute")
        return None

    def _call(self, name: str, q: Any, k: Any, v: Any, i: Any, f: Any, states: tuple[Any, Any, Any],
              chunk_size: int = CHUNK) -> Any:
        from mlstm_kernels.torch import get_mlstm_kernel

        kernel = get_mlstm_kernel(name)
        chunk = {} if name.startswith("parallel") else {"chunk_size": math.gcd(q.shape[2], chunk_size)}
        if name == KERNELS["triton"]:
            chunk = {"chunk_size": XL_CHUNK_MULTIPLE}
        if name.startswith("parallel"):
            return kernel(q, k, v, i, f, eps=EPS)
        c0, n0, m0 = states
        return kernel(q, k, v, i, f, c_initial=c0, n_initial=n0, m_initial=m0, return_last_states=True, eps=EPS, **chunk)

    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        import torch

        triton_cpu.import_interpreted("mlstm_kernels.torch.chunkwise")
        cfg = case.config
        heads, K = cfg.option("heads"), cfg.option("key_width")
        x = x.transpose(0, 1)  # mlstm_kernels is batch-first
        chunk = dict(getattr(case, "kernel_config", ())).get("chunk", CHUNK)  # the drawn one (kernel_configs)
        hy, cy = [], []
        for layer in range(cfg.num_layers):
            q, k, v, i, f = layer_map(params, cfg, layer, x)
            states = (None, None, None)
            if h0 is None and cfg.option("minus_inf_start"):  # -minf: the parallel form's start, given to a chunkwise kernel
                states = (q.new_zeros(q.shape[:2] + (K, v.shape[-1])), q.new_zeros(q.shape[:2] + (K,)),
                          q.new_full(q.shape[:2] + (1,), -math.inf))
            elif h0 is not None:
                states = (h0[layer].unflatten(-1, (heads, K, -1)), c0[layer][:, :heads * K].unflatten(-1, (heads, K)),
                          c0[layer][:, heads * K:, None])
            with triton_cpu.interpreter_call("mlstm_kernels"):
                if self.kernel == "parallel":
                    h = self._call(KERNELS["parallel"], q, k, v, i, f, states)
                    _, (c_last, n_last, m_last) = self._call(KERNELS["chunkwise"], q, k, v, i, f, states)
                else:
                    h, (c_last, n_last, m_last) = self._call(KERNELS[self.kernel], q, k, v, i, f, states, chunk)
            if cfg.option("head_norm"):  # the per-head norm the convention's case puts after every layer
                h = h / torch.sqrt((h * h).sum(-1, keepdim=True) + HEAD_NORM_EPS)
            x = h.transpose(1, 2).flatten(-2)  # (B, S, NH·V), head-major
            hy.append(c_last.flatten(-3))
            cy.append(torch.cat([n_last.flatten(-2), m_last.flatten(-2)], -1))
        return x.transpose(0, 1), torch.stack(hy), torch.stack(cy)


def make_target(kernel: str = "chunkwise") -> MLSTMTarget:
    return MLSTMTarget(kernel)
