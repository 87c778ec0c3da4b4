"""The ``fla-*`` targets: flash-linear-attention 0.6.0's GLA, gated delta rule, gated delta product,
RWKV-7 and KDA kernels and its causal convolution (gla, gdn, deltaproduct, rwkv7, kda, conv1d).

One target per kernel form: ``fla-recurrent`` (``fused_recurrent_gla``; the gated delta rule's
``fused_recurrent_gated_delta_rule`` has no backward, so gdn is declined there), ``fla-chunk``
(``chunk_gla``, ``chunk_gated_delta_rule``) and ``fla-naive`` (``naive_recurrent_gla``,
``naive_recurrent_gated_delta_rule``, ``naive_recurrent_kda``, and for deltaproduct
``naive_recurrent_gated_delta_product``: fla's own torch loops, the cross-check of this map). Read from
fla/ops/gla/{fused_recurrent,chunk,naive}.py, fla/ops/gated_delta_rule/{chunk,fused_recurrent,naive}.py,
fla/ops/gated_delta_product/naive.py and fla/ops/kda/{naive,gate,fused_recurrent}.py.
RWKV-7 (fla/ops/rwkv7/{chunk,fused_recurrent}.py, fla/ops/generalized_delta_rule/dplr/naive.py):
``fla-chunk`` is ``chunk_rwkv7``, ``fla-naive`` the generalised delta rule's ``dplr_recurrence`` (the
torch loop ``fused_recurrent_rwkv7`` and ``chunk_rwkv7`` compute), and ``fla-recurrent`` declines it:
``fused_recurrent_rwkv7`` is ``fused_recurrent_dplr_delta_rule``, which has no backward.

The map (docs/contracts.md, the matrix-memory families), per layer, in ordinary torch ops that
autograd differentiates (they are not what is judged): the pre-norm x / sqrt(mean(x²) + 1), q, k,
v = the maps w_q, w_k, w_v as (…, T, NH, K) / (…, T, NH, V), fla's layout (B, T, H, K);
- gla: gk = logsigmoid(W_a2 W_a1 x̂ + b_a) per key unit (B, T, NH, K), with -headdecay the head's
  value broadcast over its K units; scale K^-1/2 (fla's default);
- gdn: g = logsigmoid(w_a x̂ + b_a) and beta = sigmoid(w_b x̂ + b_b) per head (B, T, NH), q and k
  L2-normalised by the kernel (``use_qk_l2norm_in_kernel=True``; fla-naive has no such switch, so
  the map normalises them the same way, q / sqrt(|q|² + 1e-6)), scale K^-1/2;
- deltaproduct: as gdn, with k, v and beta n times as wide, laid out as fla's GatedDeltaProduct
  layer does (``'... t (n h d) -> ... (t n) h d'``: sub-step j of token t at position t·n + j of
  a (B, T·n, …) tensor), and ``num_householder`` = n.
- rwkv7: r = the q map, w = −exp(w_d x̂ + b_d) (the log decay, per key unit), a = −κ̂ and
  b = κ̂ ⊙ sigmoid(w_a x̂ + b_a) with κ̂ = k / sqrt(|k|² + 1e-6) (B, T, NH, K), scale K^-1/2
  (``dplr_recurrence``'s own q scale).
- kda (fla-naive only): g = fla's own ``naive_kda_gate`` of the rank-R map W_a2 W_a1 x̂ with A_log =
  a_log and dt_bias = b_a (−exp(A_log) ⊙ softplus(· + dt_bias), (B, T, NH, K)), beta = sigmoid(w_b x̂
  + b_b) (B, T, NH), q and k L2-normalised by the map as for gdn, scale K^-1/2.
- conv1d (fla-recurrent only): the family's pre-norm and w_in map, then fla's Triton ``causal_conv1d``
  (fla/modules/causal_conv1d/ops.py; ``ShortConvolution``'s op) with w_conv (H, W), b_conv,
  ``activation="silu"`` with -silu, and the state: fla's (N, H, W) holds the last W inputs oldest first
  and its forward reads the newest W−1, the family's (H, W−1), so the oldest slot goes in as 0 and
  comes out dropped. fla has one form of it (not chunk and recurrent) and no torch fallback to
  cross-check (backends triton, cuda, mix), so fla-chunk and fla-naive decline it; on CPU the kernel
  of the initial state's gradient does not run in the interpreter, so there only -z cases are judged.
The recurrence is the library's kernel; its state (N, NH, K, V) is the case's h0 / hy per sequence
((h·K + j)·V + v, the family's layout), the final state is ``output_final_state``'s.

Lengths: ``fla-recurrent`` and ``fla-chunk`` take ``cu_seqlens``, so a case whose sequences differ
in length (or that has a packed tail, ``-tail<n>``) goes in packed (gradcheck_rnn.model.packed: B = 1,
N initial states), and a case whose sequences all have the same length goes in padded, one
(B, T, …) call: both paths are judged. ``fla-naive`` has no ``cu_seqlens``: equal lengths are one
call each (torch_grad.py).

On a machine without CUDA the kernels run in Triton's interpreter (triton_cpu.py); the chunk
kernels do not run there (its reason, :data:`INTERPRETER_REFUSES`) and are judged on CUDA only.

Kernel configurations: ``fla-recurrent`` offers its autotuners' candidates, one per call
(``kernel_configs`` -> ``{"autotune": (0, 1, …)}``, the case id's ``-kc.autotune.<i>``): for the
whole run (forward and backward) every fla autotuner holds only its candidate i, its last where
it has fewer (triton_cpu.pinned_candidate). For gla that is :data:`AUTOTUNED`'s module, whose
forward kernel offers ``num_warps`` 4 and 8 and whose backward kernel 4 only: ``-kc.autotune.1``
is the forward under 8 warps. Triton's interpreter does not model warps (it drops ``num_warps``
and runs each program whole), so on CPU both candidates compute the same and the token proves the
pinning, not the warps; on a GPU the pinned candidate is the one launched, with no benchmarking.
``fla-chunk`` declares none: its kernels run on CUDA only, where its autotuners (block sizes, warps,
stages across the chunk modules) are not yet mapped to a call's candidates, and ``fla-naive`` has
no Triton kernel.
Declined, in fla's own words: families other than those above, and each family's forms in
:data:`DECLINED` (the gated delta rule, RWKV-7 and KDA on ``fla-recurrent``: forward-only kernels;
deltaproduct on ``fla-recurrent`` and ``fla-chunk``; KDA on ``fla-chunk``: ``chunk_kda`` runs on CUDA
only, and this map of it has had no CUDA run to check it; conv1d on ``fla-chunk`` and ``fla-naive``),
dtypes other than float32 (the recurrent kernels keep their state in float32,
the naive loops compute in float32, ``chunk_gla`` asserts a float32 initial state).

Unlike the other foreign built-ins this file imports gradcheck_rnn (its packed form), so
``fla-*@PYTHON`` needs gradcheck_rnn installed in that interpreter too; there the packed case is
rebuilt from its id (the client's case has no tail), and the tail's gradients are not sent back
(the protocol has no field for them): only an in-process fla target is judged on them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Loaded by file path, like the other foreign built-ins: so are the shared helpers.
_HERE = Path(__file__).parent


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_gradcheck_foreign_{name}", _HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


torch_grad, triton_cpu = _load("torch_grad"), _load("triton_cpu")

NORM_EPS = 1.0  # the matrix families' pre-norm (docs/contracts.md)
L2_EPS = 1e-6   # fla's l2norm, as the gdn family has it
KERNELS = ("recurrent", "chunk", "naive")
CONV_MODULE = "fla.modules.causal_conv1d.ops"
# What Triton 3.9's interpreter raises on fla 0.6.0's chunk kernels (docs/fla-0.6.0/refusals.py).
INTERPRETER_REFUSES = "'int' object has no attribute 'to'"
FLOAT32_ONLY = {
    "recurrent": ("fla 0.6.0's fused_recurrent_gla keeps its state in float32 (\"b_h = tl.zeros([BK, BV], "
                  "dtype=tl.float32)\") and returns a float32 final state, so a {dtype} case is not computed in {dtype}"),
    "chunk": "fla 0.6.0's chunk kernels take a float32 state only (\"initial_state must be in float32.\"), not {dtype}",
    "naive": ("fla 0.6.0's naive recurrences compute in float32 (\"q, k, v, gk = map(lambda x: "
              "x.transpose(1, 2).float(), ...)\"), so a {dtype} case is not computed in {dtype}"),
}
# fla's precondition on a packed batch (docs/contracts.md, "Target contracts"): plain data, as a target in
# another interpreter sends it. fla asserts nothing and documents no behaviour past cu_seqlens[-1].
PACKED_CONTRACT = {
    "precondition": "T == cu_seqlens[-1]",
    "quote": "cu_seqlens (torch.LongTensor): Cumulative sequence lengths of shape `[N+1]` used for variable-length "
             "training, consistent with the FlashAttention API.",
    "source": "fla 0.6.0, fla/ops/gla/fused_recurrent.py and chunk.py docstrings; its maintainers hold "
              "T == cu_seqlens[-1] as the canonical contract (fla-org/flash-linear-attention PR #892, closed), "
              "as FlashAttention does (Dao-AILab/flash-attention #1228)",
    "outside": "writes nothing past cu_seqlens[-1]: outputs and gradients there are uninitialised (values up to 1e30 "
               "seen), and a parameter gradient summed over those rows is then wrong",
}
NO_GDN_BACKWARD = ("fla 0.6.0's fused_recurrent_gated_delta_rule has no backward (\"Backward pass is not implemented "
                   "yet and we do not have plans to implement it because we haven't figured out how to compute dg "
                   "without materializing the full hidden states for all time steps.\")")
NO_DELTAPRODUCT = {
    "recurrent": "fla 0.6.0 has no fused recurrent gated delta product (fla/ops/gated_delta_product: chunk and naive)",
    "chunk": ("fla-chunk does not map fla 0.6.0's chunk_gated_delta_product: its chunk kernels run on CUDA only and "
              "that map is not checked there yet; fla-naive judges deltaproduct"),
}
NO_RWKV7_BACKWARD = ("fla 0.6.0's fused_recurrent_rwkv7 is fused_recurrent_dplr_delta_rule, which has no backward "
                     "(\"Backward pass for fused_recurrent_dplr_delta_rule is not implemented and will not be "
                     "supported. This kernel is only for inference.\")")
NO_KDA_BACKWARD = ("fla 0.6.0's fused_recurrent_kda is a forward-only (inference) kernel: no torch.autograd.Function "
                   "wraps it, so it has no gradients to judge")
NO_TORCH_CONV = ("fla 0.6.0 has no torch causal convolution to cross-check: fla.modules.causal_conv1d's backends are "
                 "triton, cuda (Dao-AILab's causal-conv1d) and mix (\"Supported values are `'cuda'`, `'triton'`, and "
                 "`'mix'`\"), no torch fallback; fla-recurrent judges its Triton causal_conv1d")
CONV_ON_RECURRENT = ("fla 0.6.0 has one causal_conv1d kernel (Triton, not chunk and recurrent forms): fla-recurrent "
                     "judges it")
CONV_FLOAT32 = ("fla 0.6.0's Triton causal_conv1d accumulates in float32 (\"b_y = tl.zeros((BT, BD), "
                "dtype=tl.float32)\"), so a {dtype} case is not computed in {dtype}")
CONV_STATE_INTERPRETED = ("fla 0.6.0's causal_conv1d with an initial state is judged on a CUDA device only, not under "
                          "Triton's CPU interpreter: the kernel of its gradient (compute_dh0_kernel) raises there "
                          "(\"mask has unsupported dtype\", docs/fla-0.6.0/refusals.py); cases without one (-z) are judged")
KDA_CHUNK_UNCHECKED = ("fla-chunk does not map kda yet: fla 0.6.0's chunk_kda runs on CUDA only and no CUDA run has "
                       "checked a map of it; fla-naive judges fla's KDA loop and gate")
FAMILIES = ("gla", "gdn", "deltaproduct", "rwkv7", "kda", "conv1d")
# (family, kernel form) -> the module whose Triton autotuners that form's call runs (module docstring)
AUTOTUNED = {("gla", "recurrent"): "fla.ops.common.fused_recurrent"}
# (family, kernel form) -> why that form of fla 0.6.0 is not judged on that family
DECLINED = {("gdn", "recurrent"): NO_GDN_BACKWARD, ("rwkv7", "recurrent"): NO_RWKV7_BACKWARD,
            ("deltaproduct", "recurrent"): NO_DELTAPRODUCT["recurrent"],
            ("deltaproduct", "chunk"): NO_DELTAPRODUCT["chunk"],
            ("kda", "recurrent"): NO_KDA_BACKWARD, ("kda", "chunk"): KDA_CHUNK_UNCHECKED,
            ("conv1d", "naive"): NO_TORCH_CONV, ("conv1d", "chunk"): CONV_ON_RECURRENT}


def pre_norm(x: Any) -> Any:
    """The families' pre-norm of a layer's input, x / sqrt(mean(x²) + NORM_EPS) (docs/contracts.md)."""
    import torch

    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + NORM_EPS)


def layer_map(params: dict[str, Any], config: Any, layer: int, x: Any) -> dict[str, Any]:
    """One layer's q, k, v and gates in fla's layout from x (…, T, I_l): the pre-norm and the maps."""
    import torch
    import torch.nn.functional as F

    heads, K = config.option("heads"), config.option("key_width")
    steps = config.option("householder") if config.mode == "deltaproduct" else 1

    def p(kind: str) -> Any:
        return params.get(f"l{layer}.fwd.{kind}")

    def by_sub_step(a: Any, width: int) -> Any:  # (…, T, n·NH·width) -> (…, T·n, NH, width): '… t (n h d) -> … (t n) h d'
        return a.unflatten(-1, (steps, heads, width)).flatten(-4, -3)

    x = pre_norm(x)
    lead = x.shape[:-1]
    out = {"q": (x @ p("w_q").T).unflatten(-1, (heads, K)), "k": by_sub_step(x @ p("w_k").T, K),
           "v": by_sub_step(x @ p("w_v").T, -1)}
    if config.mode == "gla":
        gate = (x @ p("w_a1").T) @ p("w_a2").T + (p("b_a") if config.bias else 0)
        out["gk"] = F.logsigmoid(gate).reshape(lead + (heads, -1)).expand(lead + (heads, K))  # -headdecay: (…, NH, 1)
    elif config.mode == "rwkv7":
        logits, rate = x @ p("w_d").T, x @ p("w_a").T
        if config.bias:
            logits, rate = logits + p("b_d"), rate + p("b_a")
        removal = _l2norm(out["k"])
        out["w"] = -torch.exp(logits).unflatten(-1, (heads, K))
        out["a"], out["b"] = -removal, removal * torch.sigmoid(rate).unflatten(-1, (heads, K))
    elif config.mode == "kda":
        gate = triton_cpu.import_interpreted("fla.ops.kda.gate")
        raw = ((x @ p("w_a1").T) @ p("w_a2").T).unflatten(-1, (heads, K))
        out["g"] = gate.naive_kda_gate(raw, p("a_log"), p("b_a") if config.bias else None, output_dtype=x.dtype)
        write = x @ p("w_b").T
        out["beta"] = torch.sigmoid(write + p("b_b") if config.bias else write)
    else:
        decay, write = x @ p("w_a").T, x @ p("w_b").T
        if config.bias:
            decay, write = decay + p("b_a"), write + p("b_b")
        out["g"], out["beta"] = F.logsigmoid(decay), by_sub_step(torch.sigmoid(write), 1)[..., 0]
    return out


def _l2norm(a: Any) -> Any:
    import torch

    return a / torch.sqrt((a * a).sum(-1, keepdim=True) + L2_EPS)


class FlaTarget(torch_grad.TorchGradTarget):
    """One fla kernel form on the families of :data:`FAMILIES`; see the module docstring."""

    def __init__(self, kernel: str = "recurrent") -> None:
        self.kernel = kernel
        self.name = f"fla-{kernel}"
        # the kernels that take cu_seqlens; fla-naive has none and is never handed a packed tail
        self.contracts = () if kernel == "naive" else (PACKED_CONTRACT,)

    def supports(self, config: Any) -> bool | str:
        if config.mode not in FAMILIES:
            return (f"the fla targets judge fla's GLA, gated delta rule, gated delta product, RWKV-7 and KDA "
                    f"kernels and its causal convolution ({', '.join(FAMILIES)}), not {config.mode}")
        declined = DECLINED.get((config.mode, self.kernel))
        if declined is not None:
            return declined
        if config.dtype != "f32":
            reason = CONV_FLOAT32 if config.mode == "conv1d" else FLOAT32_ONLY[self.kernel]
            return reason.format(dtype=torch_grad.DTYPES[config.dtype])
        if self.kernel != "naive" and triton_cpu.interpreted():
            triton_cpu.import_interpreted("fla.ops.gla")
            early = triton_cpu.imported_for_a_gpu("fla")
            if early is not None:
                return (f"{early} was imported in this process before {self.name} without TRITON_INTERPRET=1, so "
                        f"its Triton functions were built for a GPU this machine does not have and cannot run in "
                        f"the interpreter; set TRITON_INTERPRET=1 before the first import of {early} (a new process)")
        if self.kernel == "chunk" and triton_cpu.interpreted():  # the quote is Triton 3.9's own words
            return ("fla-chunk is judged on a CUDA device only, not under Triton's CPU interpreter "
                    f"(TRITON_INTERPRET=1): Triton 3.9's interpreter refuses fla's chunk kernels (\"{INTERPRETER_REFUSES}\"), "
                    "and no interpreter run of them is checked")
        return True

    def kernel_configs(self, config: Any) -> dict[str, tuple]:
        """The autotune candidates of the kernels this form runs on ``config``, one index each
        (module docstring); {} where it runs no autotuned kernel."""
        module = AUTOTUNED.get((config.mode, self.kernel))
        if module is None or self.supports(config) is not True:
            return {}
        return {"autotune": tuple(range(triton_cpu.candidate_count(module)))}

    @contextmanager
    def _candidate(self, case: Any) -> Iterator[None]:
        """The case's autotune candidate (``-kc.autotune.<i>``) pinned for the block; nothing pinned
        where the case names none (the autotuners as fla has them)."""
        candidate = dict(getattr(case, "kernel_config", ())).get("autotune")
        if candidate is None:
            yield
            return
        with triton_cpu.pinned_candidate("fla", int(candidate)):
            yield

    def supports_case(self, case: Any) -> bool | str:
        if case.config.mode == "conv1d" and case.h0 is not None and triton_cpu.interpreted():
            return CONV_STATE_INTERPRETED
        return True

    # ------------------------------------------------------------------ one kernel call
    def _kernel(self, mode: str, inputs: dict[str, Any], h0: Any, cu_seqlens: Any = None) -> tuple[Any, Any]:
        """The library's recurrence on one layer: o (B, T, NH, V), the final state (N, NH, K, V). Inside
        the interpreter's scope on CPU, the naive loops too: a module fla imports lazily during a call
        must be decorated for the interpreter, or a later Triton call cannot call its helpers."""
        with triton_cpu.interpreter_call("fla"):
            return self._call(mode, inputs, h0, cu_seqlens, inputs["q"].shape[-1] ** -0.5)

    def _call(self, mode: str, inputs: dict[str, Any], h0: Any, cu_seqlens: Any, scale: float) -> tuple[Any, Any]:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        if mode == "rwkv7":
            return self._rwkv7(inputs, h0, cu_seqlens, scale)
        if self.kernel == "naive":
            if mode == "gla":
                naive = triton_cpu.import_interpreted("fla.ops.gla.naive")
                return naive.naive_recurrent_gla(q, k, v, inputs["gk"], initial_state=h0, output_final_state=True)
            if mode == "deltaproduct":  # k, v, beta: n sub-steps a token
                naive = triton_cpu.import_interpreted("fla.ops.gated_delta_product.naive")
                return naive.naive_recurrent_gated_delta_product(
                    _l2norm(q), _l2norm(k), v, inputs["g"], inputs["beta"], scale, initial_state=h0,
                    output_final_state=True, num_householder=k.shape[-3] // q.shape[-3])
            if mode == "kda":
                naive = triton_cpu.import_interpreted("fla.ops.kda.naive")
                return naive.naive_recurrent_kda(_l2norm(q), _l2norm(k), v, inputs["g"], inputs["beta"], scale=scale,
                                                 initial_state=h0, output_final_state=True)
            naive = triton_cpu.import_interpreted("fla.ops.gated_delta_rule")
            return naive.naive_recurrent_gated_delta_rule(_l2norm(q), _l2norm(k), v, inputs["beta"], inputs["g"],
                                                          scale=scale, initial_state=h0, output_final_state=True)
        if mode == "gla":
            gla = triton_cpu.import_interpreted("fla.ops.gla")
            call = gla.fused_recurrent_gla if self.kernel == "recurrent" else gla.chunk_gla
            gate = {"gk": inputs["gk"]} if self.kernel == "recurrent" else {"g": inputs["gk"]}
            return call(q, k, v, **gate, scale=scale, initial_state=h0, output_final_state=True, cu_seqlens=cu_seqlens)
        gdn = triton_cpu.import_interpreted("fla.ops.gated_delta_rule")
        return gdn.chunk_gated_delta_rule(q, k, v, g=inputs["g"], beta=inputs["beta"], scale=scale, initial_state=h0,
                                          output_final_state=True, cu_seqlens=cu_seqlens, use_qk_l2norm_in_kernel=True)

    def _rwkv7(self, inputs: dict[str, Any], h0: Any, cu_seqlens: Any, scale: float) -> tuple[Any, Any]:
        """RWKV-7: ``dplr_recurrence`` (heads before time, its own K^-1/2 scale) or ``chunk_rwkv7``."""
        names = ("q", "k", "v", "a", "b", "w")
        if self.kernel == "naive":
            naive = triton_cpu.import_interpreted("fla.ops.generalized_delta_rule.dplr.naive")
            q, k, v, a, b, w = (inputs[n].transpose(1, 2) for n in names)
            o, last = naive.dplr_recurrence(q, k, v, a, b, w, initial_state=h0, output_final_state=True)
            return o.transpose(1, 2), last
        rwkv7 = triton_cpu.import_interpreted("fla.ops.rwkv7")
        return rwkv7.chunk_rwkv7(inputs["q"], inputs["w"], inputs["k"], inputs["v"], inputs["a"], inputs["b"],
                                 scale=scale, initial_state=h0, output_final_state=True, cu_seqlens=cu_seqlens)

    def _layers(self, case: Any, params: dict[str, Any], x: Any, h0: Any, cu_seqlens: Any = None) -> tuple[Any, Any]:
        """Every layer on batch-first x (B, T, I): y (B, T, H) and hy (L, N, NH·K·V)."""
        import torch

        cfg = case.config
        if cfg.mode == "conv1d":
            return self._conv_layers(cfg, params, x, h0, cu_seqlens)
        heads, K = cfg.option("heads"), cfg.option("key_width")
        hy = []
        for layer in range(cfg.num_layers):
            inputs = layer_map(params, cfg, layer, x)
            start = None if h0 is None else h0[layer].unflatten(-1, (heads, K, -1))
            o, last = self._kernel(cfg.mode, inputs, start, cu_seqlens)
            x = o.flatten(-2)
            hy.append(last.flatten(-3))
        return x, torch.stack(hy)

    def _conv_layers(self, cfg: Any, params: dict[str, Any], x: Any, h0: Any, cu_seqlens: Any) -> tuple[Any, Any]:
        """conv1d's layers through fla's Triton ``causal_conv1d``: the pre-norm and w_in in torch ops, then
        the convolution with its bias, SiLU and state. fla's state is (N, H, W), the last W inputs oldest
        first, of which the forward reads the newest W−1 (the family's (H, W−1)): the oldest slot goes in
        as 0 and comes out dropped."""
        import torch

        W = cfg.option("conv_width")
        conv = triton_cpu.import_interpreted(CONV_MODULE)
        hy = []
        for layer in range(cfg.num_layers):
            p = {kind: params.get(f"l{layer}.fwd.{kind}") for kind in ("w_in", "w_conv", "b_conv")}
            u = pre_norm(x) @ p["w_in"].T
            start = None
            if h0 is not None:
                state = h0[layer].unflatten(-1, (cfg.hidden_size, W - 1))
                start = torch.cat([state.new_zeros(state.shape[:-1] + (1,)), state], -1)
            with triton_cpu.interpreter_call("fla"):  # the forward alone too (torch_grad's refusal probes run it)
                x, last = conv.causal_conv1d(u, p["w_conv"], p["b_conv"], initial_state=start,
                                             output_final_state=True, activation="silu" if cfg.option("silu") else None,
                                             backend="triton", cu_seqlens=cu_seqlens)
            hy.append(last[..., 1:].flatten(-2))
        return x, torch.stack(hy)

    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        y, hy = self._layers(case, params, x.transpose(0, 1), h0)
        return y.transpose(0, 1), hy, None

    @contextmanager
    def _scope(self, case: Any) -> Iterator[None]:
        """The case's autotune candidate (:meth:`_candidate`) and the interpreter's scope
        (triton_cpu.interpreter_call) for a whole run, backward included: autograd runs a kernel's
        backward after its forward's scope has closed, and an autotuned backward (causal_conv1d's)
        benchmarks every configuration there ("0 active drivers"). The candidate first: the
        interpreter's scope keeps each autotuner's first configuration, then the pinned one."""
        if case.config.mode == "conv1d":
            triton_cpu.import_interpreted(CONV_MODULE)  # before the scope cuts the autotuners it finds
        with self._candidate(case), triton_cpu.interpreter_call("fla"):
            yield

    def run(self, case: Any) -> Any:
        lengths = [int(n) for n in case.seq_lengths]
        with self._scope(case):
            if self.kernel == "naive" or (getattr(case, "tail", 0) == 0 and len(set(lengths)) == 1):
                return super().run(case)  # one padded call per length (naive: fla has no cu_seqlens there)
            return self._run_packed(case)

    def jvp(self, case: Any, tangents: Any) -> Any:
        with self._scope(case):
            return super().jvp(case, tangents)

    def hvp(self, case: Any, tangents: Any) -> Any:
        with self._scope(case):
            return super().hvp(case, tangents)

    def _run_packed(self, case: Any) -> Any:
        """The case packed through ``cu_seqlens`` (B = 1, one initial state per sequence)."""
        import numpy as np
        import torch

        from gradcheck_rnn.model.case import Case
        from gradcheck_rnn.model.packed import packed_inputs, packed_outputs

        if not isinstance(case, Case):  # the client's plain case (NAME@PYTHON): the same case, bit for bit
            case = Case.from_id(case.id)
        dtype = getattr(torch, torch_grad.DTYPES[case.config.dtype])

        def tensor(array: Any, name: str | None = None) -> Any:
            if array is None:
                return None
            t = torch.tensor(np.asarray(array), dtype=dtype)
            return t.requires_grad_(name in case.wants) if name else t

        x_packed, dy_packed, cu_seqlens = packed_inputs(case)
        x, h0 = tensor(x_packed, "x"), tensor(case.h0, "h0")
        params = {k: tensor(v, k) for k, v in case.params.items()}
        y, hy = self._layers(case, params, x, h0, torch.tensor(cu_seqlens, dtype=torch.long))
        loss = (y * tensor(dy_packed)).sum() + (hy * tensor(case.dhy)).sum()
        leaves = {"x": x, "h0": h0, **params}
        requested = [(k, v) for k, v in leaves.items() if k in case.wants and v is not None]
        grads = torch.autograd.grad(loss, [v for _, v in requested], allow_unused=True)
        out = {k: np.zeros(v.shape) if g is None else g.detach().double().numpy() for (k, v), g in zip(requested, grads)}
        return packed_outputs(case, y.detach().double().numpy(), hy.detach().double().numpy(), None, out)


def make_target(kernel: str = "recurrent") -> FlaTarget:
    return FlaTarget(kernel)
