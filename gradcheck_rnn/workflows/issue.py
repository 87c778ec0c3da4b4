"""``gradcheck-rnn issue``: one failing row of a library target as the body of an upstream issue.

The body (markdown) says what a maintainer needs and nothing of gradcheck-rnn's own vocabulary:
the case (shrunk with ``--shrink``), the versions (library, torch, Triton, Python, device), what
was expected and what came out at the worst element, the gradient convention the row was judged
under, the library's contract quoted for an out-of-contract row, and a standalone script that
needs only torch and the library. The script holds the case's data as literals (the kernel's own
inputs, made from the case by the target's map: tiny cases stay short), runs the library's kernel
and a float64 loop of the family's equations written out in it, compares them and prints
``REPRODUCED`` when the difference is there.

Scripts exist for the kernels whose maps give plain kernel inputs: ``mlstm-*`` (mlstm_kernels) and
``fla-recurrent`` on gla (fla's ``fused_recurrent_gla``, packed). For other targets the body says
so and points at the repro command.
"""

from __future__ import annotations

import math
import platform
from importlib import metadata
from typing import Any

import numpy as np

from ..errors import UsageError
from ..model.case import Case
from ..model.streams import case_rng, claim
from ..rows.result import CaseResult

# the statuses whose row can be filed: the target's own failure, or what it does outside a contract
FILED = ("fail", "nondeterministic", "out-of-contract")
LIBRARIES = {"mlstm-": "mlstm_kernels", "fla-": "fla-core"}
# a deep case's script judges layer 0 alone under a head gradient of its own (the literals carry it)
SCRIPT_GRADIENT_SALT = claim(8, "an issue script's head gradient of layer 0")


def library_of(target: str) -> str | None:
    """The distribution a built-in library target judges, or None."""
    return next((dist for prefix, dist in LIBRARIES.items() if target.startswith(prefix)), None)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions(target: str) -> dict[str, str]:
    """The versions an issue states: the library, torch, Triton, Python and the device."""
    import torch

    found = {}
    if (dist := library_of(target)) is not None:
        found[dist] = _version(dist)
    found["torch"] = torch.__version__
    found["triton"] = _version("triton")
    found["python"] = platform.python_version()
    found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.machine()})"
    return found


def _literal(array: Any) -> str:
    """A float64 array as a torch.tensor literal that round-trips exactly (−∞, the parallel form's
    stabiliser start, as ``float('-inf')``: ``repr`` would write a bare ``-inf``)."""
    def element(value: Any) -> str:
        if isinstance(value, list):
            return "[" + ", ".join(element(v) for v in value) + "]"
        return repr(value) if math.isfinite(value) else f"float('{value}')"

    values = np.asarray(array, dtype=np.float64)
    return f"torch.tensor({element(values.tolist())}, dtype=torch.float64)"


def _finite(value: float) -> str:
    return format(value, ".6g") if math.isfinite(value) else str(value)


MLSTM_SCRIPT = '''"""{title}

Standalone: torch and mlstm_kernels only. The kernel's inputs (layer 0 of gradcheck-rnn case
{case_id}, the sequences of length {length}) are literals; a float64 loop of the mLSTM below is the
reference (m differentiated through its max).{convention_note}
"""

import torch
from mlstm_kernels.torch import get_mlstm_kernel

KERNEL, CHUNK, EPS, HEAD_NORM = {kernel!r}, {chunk}, 1e-6, {head_norm}
PARALLEL = KERNEL.startswith("parallel")
q, k, v = {q}, {k}, {v}
i, f = {i}, {f}
c0, n0, m0 = {c0}, {n0}, {m0}
dh = {dh}
dc, dn, dm = {dc}, {dn}, {dm}
S, K = q.shape[2], q.shape[3]


def head_norm(h):
    return h / torch.sqrt((h * h).sum(-1, keepdim=True) + 1e-30) if HEAD_NORM else h


def loop(q, k, v, i, f, c, n, m):
    """The mLSTM step by step: m_t = max(log sigmoid(f_t) + m_(t-1), i_t), C and n rescaled by it."""
    hs = []
    for t in range(S):
        log_f = torch.nn.functional.logsigmoid(f[..., t, None])
        m_new = torch.maximum(log_f + m, i[..., t, None])
        f_s, i_s = torch.exp(log_f + m - m_new), torch.exp(i[..., t, None] - m_new)
        c = f_s[..., None] * c + i_s[..., None] * k[..., t, :, None] * v[..., t, None, :]
        n = f_s * n + i_s * k[..., t, :]
        qs = q[..., t, :] * K ** -0.5
        denominator = torch.maximum((n * qs).sum(-1, keepdim=True).abs(), torch.exp(-m_new)) + EPS
        hs.append((c * qs[..., None]).sum(-2) / denominator)
        m = m_new
    return torch.stack(hs, -2), (c, n, m)


def library(q, k, v, i, f, c, n, m):
    if PARALLEL:  # no initial state in, no final state out ("c_initial is not supported")
        return get_mlstm_kernel(KERNEL)(q, k, v, i, f, eps=EPS), (None, None, None)
    return get_mlstm_kernel(KERNEL)(q, k, v, i, f, c_initial=c, n_initial=n, m_initial=m,
                                    return_last_states=True, chunk_size=CHUNK, eps=EPS)


# the parallel kernel's loss is through h alone, and its initial state is no input of it
names = ("q", "k", "v", "i", "f") if PARALLEL else ("q", "k", "v", "i", "f", "c0", "n0", "m0")


def grads(run, dtype):
    leaves = [x.to(dtype).requires_grad_() for x in (q, k, v, i, f)]
    leaves += [x.to(dtype).requires_grad_(not PARALLEL) for x in (c0, n0, m0)]
    h, (c, n, m) = run(*leaves)
    loss = (head_norm(h) * dh.to(dtype)).sum()
    if not PARALLEL:
        loss = loss + (c * dc.to(dtype)).sum() + (n * dn.to(dtype)).sum() + (m * dm.to(dtype)).sum()
    found = torch.autograd.grad(loss, leaves[:len(names)], allow_unused=True)
    return [torch.zeros_like(x).double() if g is None else g.double() for x, g in zip(leaves, found)]


expected, actual = grads(loop, torch.float64), grads(library, torch.{dtype})
wrong = []
for name, a, b in zip(names, actual, expected):
    if not torch.allclose(a, b, rtol={rtol}, atol={atol} + 1e-4 * max(float(b.abs().max()), 1e-2)):
        worst = int((a - b).abs().argmax())
        wrong.append(name)
        print(f"{{name}}: expected {{b.flatten()[worst].item():.6g}}, got {{a.flatten()[worst].item():.6g}} "
              f"(element {{worst}}, max abs difference {{(a - b).abs().max().item():.3g}})")
print("REPRODUCED: wrong gradients of " + ", ".join(wrong) if wrong else "NOT REPRODUCED")
'''


def mlstm_script(case: Case, target: str, title: str) -> str:
    """The standalone script of an ``mlstm-*`` row: layer 0's kernel inputs as literals, the
    library's kernel against a float64 loop, through the per-head norm under ``-headnorm``."""
    import torch

    from ..targets.foreign import mlstm_target as mlstm  # the map the target judged with

    config = case.config
    lengths = [int(n) for n in case.seq_lengths]
    length = max(lengths)
    if length == 0:
        raise UsageError(f"case {case.id} has only empty sequences: there is no kernel call to script")
    rows = [b for b, n in enumerate(lengths) if n == length]  # one kernel call: the longest sequences
    x = torch.tensor(case.x[:length, rows], dtype=torch.float64).transpose(0, 1)
    params = {key: torch.tensor(value, dtype=torch.float64) for key, value in case.params.items()}
    q, k, v, i, f = mlstm.layer_map(params, config, 0, x)
    heads, K = config.option("heads"), config.option("key_width")
    B, V = len(rows), v.shape[-1]
    if case.h0 is None:  # the empty memory; its stabiliser at −∞ under -minf (the target's start)
        m_start = -math.inf if config.option("minus_inf_start") else 0.0
        c0, n0, m0 = np.zeros((B, heads, K, V)), np.zeros((B, heads, K)), np.full((B, heads, 1), m_start)
    else:
        c0 = case.h0[0, rows].reshape(B, heads, K, V)
        n0 = case.c0[0, rows, :heads * K].reshape(B, heads, K)
        m0 = case.c0[0, rows, heads * K:].reshape(B, heads, 1)
    if config.num_layers == 1:
        dh = case.dy[:length, rows].reshape(length, B, heads, V).transpose(1, 2, 0, 3)
        dc = case.dhy[0, rows].reshape(B, heads, K, V)
        dn = case.dcy[0, rows, :heads * K].reshape(B, heads, K)
        dm = case.dcy[0, rows, heads * K:].reshape(B, heads, 1)
    else:  # the kernel of layer 0 alone, under the same kind of loss
        dh = case_rng(case.seed, SCRIPT_GRADIENT_SALT).standard_normal((B, heads, length, V))
        dc, dn, dm = (np.zeros(s) for s in ((B, heads, K, V), (B, heads, K), (B, heads, 1)))
    kernel = mlstm.KERNELS[target.removeprefix("mlstm-").split("@")[0]]
    head_norm = bool(config.option("head_norm"))
    note = ("\nJudged under the library's own convention (its backward holds the normaliser's denominator and the "
            "stabiliser constant, 'cancels out in the following group norm'): the loss goes through a per-head "
            "norm of h and has no head gradient on the final states, where that convention is exact."
            if head_norm else "")
    arrays = {"q": q, "k": k, "v": v, "i": i, "f": f, "c0": c0, "n0": n0, "m0": m0, "dh": dh, "dc": dc, "dn": dn,
              "dm": dm}
    literals = {name: _literal(value.detach().numpy() if hasattr(value, "detach") else value)
                for name, value in arrays.items()}
    dtype = {"f64": "float64", "f32": "float32"}.get(config.dtype, "float32")
    rtol, atol = (1e-6, 1e-9) if dtype == "float64" else (1e-3, 1e-5)
    return MLSTM_SCRIPT.format(title=title, case_id=case.id, length=length, convention_note=note, kernel=kernel,
                               chunk=math.gcd(length, mlstm.CHUNK) if not kernel.startswith("parallel") else 1,
                               head_norm=head_norm, dtype=dtype, rtol=rtol, atol=atol, **literals)


FLA_SCRIPT = '''"""{title}

Standalone: torch and fla only (on a machine without CUDA in Triton's interpreter). The kernel's
inputs (layer 0 of gradcheck-rnn case {case_id}, packed through cu_seqlens) are literals; a float64
loop of GLA per sequence below is the reference, and every gradient of a row after cu_seqlens[-1]
(which no sequence reads) must be 0.
"""

import os

import torch

INTERPRET = not torch.cuda.is_available()
if INTERPRET:  # Triton's interpreter decorates the kernels at import: set before fla is imported
    os.environ["TRITON_INTERPRET"] = "1"

from fla.ops.gla import fused_recurrent_gla  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

if INTERPRET:  # the interpreter cannot benchmark: one configuration per autotuner
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("fla.") and module is not None:
            for value in vars(module).values():
                while value is not None:
                    if isinstance(value, Autotuner):
                        value.configs = value.configs[:1]
                    value = getattr(value, "fn", None) if not isinstance(value, type) else None

cu_seqlens = torch.tensor({cu_seqlens})
q, k, v, gk = {q}, {k}, {v}, {gk}
h0 = {h0}
do, dht = {do}, {dht}
T, NH, K, V = q.shape[1], q.shape[2], q.shape[3], v.shape[3]


def loop(q, k, v, gk, h0):
    """Per sequence, float64: o (1, T, NH, V), zero past cu_seqlens[-1], and the final states."""
    o, finals = torch.zeros(1, T, NH, V, dtype=torch.float64), []
    for n, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        state = h0[n]
        for t in range(start, end):
            state = gk[0, t].exp()[..., None] * state + k[0, t][..., None] * v[0, t][:, None, :]
            o[0, t] = (state * q[0, t][..., None]).sum(-2) * K ** -0.5
        finals.append(state)
    return o, torch.stack(finals)


def library(q, k, v, gk, h0):
    return fused_recurrent_gla(q, k, v, gk=gk, initial_state=h0, output_final_state=True, cu_seqlens=cu_seqlens)


def grads(run, dtype):
    leaves = [a.to(dtype).requires_grad_() for a in (q, k, v, gk, h0)]
    o, final = run(*leaves)
    valid = int(cu_seqlens[-1])  # the loss reads the sequences' rows only
    loss = (o[:, :valid] * do[:, :valid].to(dtype)).sum() + (final * dht.to(dtype)).sum()
    return [g.double() for g in torch.autograd.grad(loss, leaves)]


expected, actual = grads(loop, torch.float64), grads(library, torch.float32)
valid, wrong = int(cu_seqlens[-1]), []
for name, a, b in zip(("q", "k", "v", "gk", "h0"), actual, expected):
    real = (a, b) if name == "h0" else (a[:, :valid], b[:, :valid])
    if not torch.allclose(*real, rtol=1e-3, atol=1e-5 + 1e-4 * float(real[1].abs().max())):
        wrong.append(f"{{name}} (rows of the sequences: max abs difference {{(real[0] - real[1]).abs().max().item():.3g}})")
    if name != "h0" and a.shape[1] > valid and a[:, valid:].abs().max() > 0:
        wrong.append(f"d{{name}} past cu_seqlens[-1] (up to {{a[:, valid:].abs().max().item():.3g}}; the true value is 0)")
print(f"T = {{T}}, cu_seqlens[-1] = {{valid}}")
print("REPRODUCED: " + "; ".join(wrong) if wrong else "NOT REPRODUCED")
'''


def fla_script(case: Case, target: str, title: str) -> str:
    """The standalone script of an ``fla-recurrent`` (gla) row: layer 0's packed kernel inputs as
    literals, fused_recurrent_gla against a float64 loop per sequence, the tail rows against 0."""
    import torch

    from ..model.packed import packed_inputs
    from ..targets.foreign import fla_target as fla  # the map the target judged with

    config = case.config
    if config.mode != "gla":
        raise UsageError(f"a script is generated for fla's GLA kernel only, not for {config.mode}")
    heads, K = config.option("heads"), config.option("key_width")
    x_packed, dy_packed, cu_seqlens = packed_inputs(case)
    params = {key: torch.tensor(value, dtype=torch.float64) for key, value in case.params.items()}
    maps = fla.layer_map(params, config, 0, torch.tensor(x_packed, dtype=torch.float64))
    N, rows = len(case.seq_lengths), x_packed.shape[1]
    V = maps["v"].shape[-1]
    h0 = np.zeros((N, heads, K, V)) if case.h0 is None else case.h0[0].reshape(N, heads, K, V)
    if config.num_layers == 1:
        do, dht = dy_packed.reshape(1, rows, heads, V), case.dhy[0].reshape(N, heads, K, V)
    else:  # the kernel of layer 0 alone, under the same kind of loss
        rng = case_rng(case.seed, SCRIPT_GRADIENT_SALT)
        do, dht = rng.standard_normal((1, rows, heads, V)), rng.standard_normal((N, heads, K, V))
    literals = {name: _literal(maps[name].detach().numpy()) for name in ("q", "k", "v", "gk")}
    return FLA_SCRIPT.format(title=title, case_id=case.id, cu_seqlens=[int(n) for n in cu_seqlens],
                             h0=_literal(h0), do=_literal(do), dht=_literal(dht), **literals)


SCRIPTS = {"mlstm-custbw": mlstm_script, "mlstm-chunkwise": mlstm_script, "mlstm-triton": mlstm_script,
           "fla-recurrent": fla_script}


def issue_body(case: Case, row: CaseResult, finding_cause: str, contract: str = "") -> str:
    """The markdown body of an upstream issue for ``row`` (a row of ``case`` that did not pass)."""
    target = row.target
    library = library_of(target) or target
    worst = row.worst
    title = (f"{library}: {target.removeprefix('mlstm-').removeprefix('fla-')} — "
             f"{finding_cause or 'wrong ' + (worst.name if worst else 'outputs')}")
    lines = [f"## {title}", ""]
    lines += ["### Versions", ""] + [f"- {name}: {value}" for name, value in versions(target).items()] + [""]
    lines += ["### What happens", ""]
    if contract:
        lines += [f"This is outside the library's documented contract, reported as an unchecked precondition: "
                  f"{contract}", ""]
    if worst is not None and not worst.passed:
        lines += [f"Expected {worst.name} = {_finite(worst.b)} at {worst.location_text()}, got {_finite(worst.a)} "
                  f"(max abs difference {_finite(worst.max_abs)}).", ""]
    others = [t.name for t in row.failing if worst is None or t.name != worst.name]
    if others:
        lines += [f"Also wrong: {', '.join(others)}.", ""]
    lines += [f"Found by gradcheck-rnn on case `{case.id}` ({row.check} check); reproduce with "
              f"`{row.repro}`.", ""]
    script = SCRIPTS.get(target.split("@")[0])
    lines += ["### Standalone script (torch and the library only)", ""]
    if script is None:
        lines += [f"No standalone script is generated for `{target}` yet; the repro command above shows it.", ""]
    else:
        lines += ["```python", script(case, target.split("@")[0], title).rstrip("\n"), "```", ""]
    return "\n".join(lines)


def write_issue(case_id: str, target_name: str, check: str = "reference", shrink_first: bool = False,
                tolerances: Any = None, repro_options: str = "", say: Any = None) -> tuple[int, str]:
    """Judge ``case_id`` on ``target_name`` (shrunk first when asked) and make the issue body of its
    row: ``(0, body)``, or ``(1, why)`` when the row did not fail (nothing to file)."""
    from ..judging.judge import judge
    from ..reports import findings, message_shown
    from ..rows.result import document_row
    from ..targets import resolve_target
    from .shrink import DidNotReproduce, shrink

    target = resolve_target(target_name)
    case = Case.from_id(case_id)
    if shrink_first:
        try:
            result = shrink(case, target, check=check, tolerances=tolerances, repro_options=repro_options,
                            on_step=say)
        except DidNotReproduce as exc:
            return 1, str(exc)
        case = Case.from_id(result.minimal.case_id)
    row = next(judge(case, [target], tolerances, [check]))
    row.repro_options = repro_options
    if row.status not in FILED:
        return 1, f"{row.case_id} on {target.name} ({check}) is {row.status}: there is nothing to file"
    stored = document_row(row)
    cause = findings([stored])[0]["cause"]
    contract = row.message.split("; seen here")[0] if row.status == "out-of-contract" and message_shown(stored) else ""
    # a convention's case (-headnorm -gy) is drawn from its id exactly as the judge derived it
    judged = case if row.case_id == case.id else Case.from_id(row.case_id)
    return 0, issue_body(judged, row, cause, contract)

