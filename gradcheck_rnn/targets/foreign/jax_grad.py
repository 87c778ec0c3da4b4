"""What the flax and keras targets share: the scalar a user differentiates, one jitted program per
configuration, request and product (the run's forward and gradient, the forward mode's ``jax.jvp``,
the second order's ``jax.jvp`` of ``jax.grad``), and running a case through it.

Forward mode and second order (docs/contracts.md, "Forward mode and second order") are what a JAX
user writes: ``jax.jvp`` of the library's forward along the tangents of the requested arrays
(every other array is a constant), and forward-over-reverse ``jax.jvp(jax.grad(loss))`` for the
Hessian-vector product. A library whose forward JAX cannot push a tangent through (a
``jax.custom_vjp`` without a JVP rule) is declined with JAX's own sentence, asked once per
program by tracing it (:meth:`JaxGradTarget.refusal`).

Like them it imports nothing from gradcheck_rnn and is loaded by file path (by the targets, from
beside their own file), so it works in a foreign interpreter with only numpy and JAX.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping

import numpy as np

# leaves (the requested inputs and parameters), constants (the rest), lengths -> (y, hy, cy)
Forward = Callable[[dict[str, Any], dict[str, Any], Any], tuple[Any, Any, Any]]
PRODUCTS = ("run", "jvp", "hvp")


class JaxGradTarget(ABC):
    """A target whose gradients are JAX's derivative of ``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)``
    with respect to the requested arrays only; subclasses give the library's forward pass."""

    def __init__(self) -> None:
        self._cache: dict[Any, Any] = {}
        self._refusals: dict[Any, bool | str] = {}

    @abstractmethod
    def forward_fn(self, cfg: Any, params: tuple[str, ...]) -> Forward:
        """The library's forward pass for ``cfg`` over our arrays (parameters named ``params``)."""

    @staticmethod
    def _key(case: Any, product: str) -> tuple:
        """What a program is compiled for: the configuration (the client's carries the family's
        options as a dict: hashed as its sorted items), the request, the parameter names, the product."""
        cfg = case.config
        return (tuple((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in vars(cfg).items()),
                frozenset(case.wants), tuple(case.params), product)

    def _program(self, case: Any, product: str) -> Any:
        """One jitted program per configuration, request and product (``run``: outputs and gradients;
        ``jvp``: the outputs' tangents; ``hvp``: the gradients' tangents), reused by every call of it
        (the checks run a case several times), so a sweep compiles each shape once."""
        import jax
        import jax.numpy as jnp

        key = self._key(case, product)
        if key not in self._cache:
            forward = self.forward_fn(case.config, tuple(case.params))

            def loss(leaves: dict[str, Any], constants: dict[str, Any], lengths: Any, heads: tuple) -> tuple[Any, tuple]:
                outputs = forward(leaves, constants, lengths)  # the scalar a user differentiates
                return sum(jnp.sum(o * h) for o, h in zip(outputs, heads) if o is not None), outputs

            def run(leaves, constants, lengths, heads, tangents) -> tuple:
                grads, outputs = jax.grad(loss, has_aux=True)(leaves, constants, lengths, heads)
                return outputs, grads

            def jvp(leaves, constants, lengths, heads, tangents) -> tuple:
                return jax.jvp(lambda l: forward(l, constants, lengths), (leaves,), (tangents,))[1]

            def hvp(leaves, constants, lengths, heads, tangents) -> dict[str, Any]:
                gradient = jax.grad(lambda l: loss(l, constants, lengths, heads)[0])
                return jax.jvp(gradient, (leaves,), (tangents,))[1]

            self._cache[key] = jax.jit({"run": run, "jvp": jvp, "hvp": hvp}[product])
        return self._cache[key]

    def _call(self, case: Any, product: str, tangents: Mapping[str, Any] | None = None, trace_only: bool = False) -> Any:
        """``product``'s program on ``case`` in the case dtype (the tangents of the requested arrays
        rounded to it too); ``trace_only``: JAX's abstract evaluation, which traces and runs nothing."""
        import jax
        import jax.numpy as jnp

        cfg = case.config
        dtype = jnp.float64 if cfg.dtype == "f64" else jnp.float32
        arrays = {"x": case.x, "h0": case.h0, "c0": case.c0, **case.params}
        leaves = {k: jnp.asarray(v, dtype) for k, v in arrays.items() if k in case.wants}
        constants = {k: jnp.asarray(v, dtype) for k, v in arrays.items() if k not in case.wants and v is not None}
        heads = tuple(None if h is None else jnp.asarray(h, dtype)
                      for h in (case.dy, case.dhy, case.dcy if cfg.mode == "lstm" else None))
        directions = None if tangents is None else {k: jnp.asarray(tangents[k], dtype) for k in leaves}
        program = self._program(case, product)
        args = (leaves, constants, jnp.asarray(case.seq_lengths, jnp.int32), heads, directions)
        return jax.eval_shape(program, *args) if trace_only else program(*args)

    def run(self, case: Any) -> dict[str, Any]:
        (y, hy, cy), grads = self._call(case, "run")
        return {"y": np.asarray(y), "hy": np.asarray(hy), "cy": None if cy is None else np.asarray(cy),
                "grads": {k: np.asarray(v) for k, v in grads.items()}}

    def refusal(self, case: Any, product: str) -> bool | str:
        """True when JAX can trace ``product`` ("jvp" or "hvp") of this library's forward for the
        case's program, else JAX's own sentence (a custom_vjp has no forward mode): asked once per
        program, by abstract evaluation (nothing is compiled or run). The run's program is traced
        first, outside the catch: what the forward itself raises is the target's error, not a refusal."""
        key = self._key(case, product)
        if key not in self._refusals:
            self._call(case, "run", trace_only=True)
            zeros = {k: np.zeros(np.shape(v)) for k, v in {"x": case.x, "h0": case.h0, "c0": case.c0,
                                                           **case.params}.items() if k in case.wants}
            try:
                self._call(case, product, zeros, trace_only=True)
                self._refusals[key] = True
            except (TypeError, NotImplementedError) as exc:  # JAX's refusals of a transformation
                what = "forward mode" if product == "jvp" else "forward-over-reverse second order"
                self._refusals[key] = f"JAX refuses {what} through {self.name}: {str(exc).splitlines()[0]}"
        return self._refusals[key]

    def supports_jvp(self, case: Any) -> bool | str:
        """Forward mode wherever JAX traces it (:meth:`refusal`)."""
        return self.refusal(case, "jvp")

    def jvp(self, case: Any, tangents: Mapping[str, Any]) -> dict[str, Any]:
        """``jax.jvp`` of the library's forward along ``tangents``: the tangents of y, hy and cy."""
        y, hy, cy = self._call(case, "jvp", tangents)
        return {"y": np.asarray(y), "hy": np.asarray(hy), "cy": None if cy is None else np.asarray(cy)}

    def supports_hvp(self, case: Any) -> bool | str:
        """Second order wherever JAX traces it (:meth:`refusal`)."""
        return self.refusal(case, "hvp")

    def hvp(self, case: Any, tangents: Mapping[str, Any]) -> dict[str, Any]:
        """``jax.jvp`` of ``jax.grad`` of the loss along ``tangents``: each requested gradient's tangent."""
        return {"grads": {k: np.asarray(v) for k, v in self._call(case, "hvp", tangents).items()}}
