"""What torch 2.13's ``scan`` higher-order op and ``torch.compile`` do with a recurrence's derivatives,
with torch alone: why the torch-scan and torch-compiled targets decline the jvp and gradgrad
checks (gradcheck_rnn/targets/torch_scan.py, torch_compiled.py). torch only.

- pytorch #184528 (gradients of a closed-over parameter miss the part through a carry whose
  initial value does not require grad): right on torch 2.13, scan equals the Python loop;
- torch.func.jvp through scan: refused (UncapturedHigherOrderOpError);
- forward-mode dual numbers through scan: no error, the output has no tangent (silently zero);
- double backward through scan: no error, the gradient returned under create_graph=True has no
  grad_fn, so a gradient penalty built on it contributes nothing to the parameter's gradient;
- torch.compile: torch.func.jvp refused, dual numbers silently without a tangent, double
  backward refused (RuntimeError).
"""

import torch
import torch.autograd.forward_ad as forward_ad
from torch._higher_order_ops.scan import scan

torch.manual_seed(0)
W = 0.5 * torch.randn(3, 3, dtype=torch.float64)
XS = torch.randn(6, 2, 3, dtype=torch.float64)
H0 = torch.zeros(2, 3, dtype=torch.float64)  # requires no grad: the setting of #184528


def by_scan(w: torch.Tensor) -> torch.Tensor:
    def combine(h, x):
        h = torch.tanh(x + h @ w.T)  # w closed over
        return h, h.clone()

    return scan(combine, H0, XS)[1]


def by_loop(w: torch.Tensor) -> torch.Tensor:
    h, ys = H0, []
    for x in XS:
        h = torch.tanh(x + h @ w.T)
        ys.append(h)
    return torch.stack(ys)


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    why = next((line for line in lines if not line.startswith("This higher order operator")), lines[0])
    return f"{type(exc).__name__}: {why}"


def grad(f, w: torch.Tensor) -> torch.Tensor:
    w = w.clone().requires_grad_()
    return torch.autograd.grad((f(w) ** 2).sum(), [w])[0]


print(f"#184528 closed-over parameter, carry without grad: max |scan - loop| of dL/dw = "
      f"{float((grad(by_scan, W) - grad(by_loop, W)).abs().max()):.1e}")

try:
    torch.func.jvp(by_scan, (W,), (torch.ones_like(W),))
    print("scan torch.func.jvp: works")
except Exception as exc:  # noqa: BLE001 - torch's words are the finding
    print(f"scan torch.func.jvp: refused: {first_line(exc)}")


def dual_tangent(f) -> str:
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(f(forward_ad.make_dual(W, torch.ones_like(W)))).tangent
    return "no tangent (silently zero)" if tangent is None else f"max |tangent| = {float(tangent.abs().max()):.2f}"


print(f"scan dual numbers: {dual_tangent(by_scan)}; the loop: {dual_tangent(by_loop)}")


def penalty_grad(f) -> torch.Tensor:
    """d/dw of |dL/dw|², a gradient penalty: double backward."""
    w = W.clone().requires_grad_()
    [g] = torch.autograd.grad((f(w) ** 2).sum(), [w], create_graph=True)
    loss = (g ** 2).sum() + 0.0 * w.sum()  # the 0·w term keeps the graph alive, as a model's other terms would
    return torch.autograd.grad(loss, [w])[0]


print(f"scan double backward: max |penalty gradient| = {float(penalty_grad(by_scan).abs().max()):.2e}, "
      f"the loop's {float(penalty_grad(by_loop).abs().max()):.2e}")

compiled = torch.compile(by_loop, fullgraph=True)
try:
    torch.func.jvp(compiled, (W,), (torch.ones_like(W),))
    print("torch.compile torch.func.jvp: works")
except Exception as exc:  # noqa: BLE001
    print(f"torch.compile torch.func.jvp: refused: {first_line(exc)}")
print(f"torch.compile dual numbers: {dual_tangent(compiled)}")
try:
    penalty_grad(compiled)
    print("torch.compile double backward: works")
except RuntimeError as exc:
    print(f"torch.compile double backward: refused: {first_line(exc)}")
