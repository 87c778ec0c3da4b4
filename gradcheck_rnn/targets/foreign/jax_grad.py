"""What the flax and keras targets share: the scalar a user differentiates, one jitted
forward-and-gradient program per configuration and request, and running a case through it.

Like them it imports nothing from gradcheck_rnn and is loaded by file path (by the targets, from
beside their own file), so it works in a foreign interpreter with only numpy and JAX.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

import numpy as np

# leaves (the requested inputs and parameters), constants (the rest), lengths -> (y, hy, cy)
Forward = Callable[[dict[str, Any], dict[str, Any], Any], tuple[Any, Any, Any]]


class JaxGradTarget(ABC):
    """A target whose gradients are JAX's derivative of ``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)``
    with respect to the requested arrays only; subclasses give the library's forward pass."""

    def __init__(self) -> None:
        self._cache: dict[Any, Any] = {}

    @abstractmethod
    def forward_fn(self, cfg: Any, params: tuple[str, ...]) -> Forward:
        """The library's forward pass for ``cfg`` over our arrays (parameters named ``params``)."""

    def _compiled(self, cfg: Any, wants: frozenset, params: tuple[str, ...]) -> Any:
        """One jitted forward-and-vjp per configuration and request, reused by every run of it
        (the checks run a case several times), so a sweep compiles each shape once."""
        import jax
        import jax.numpy as jnp

        # the client's config carries the family's options as a dict: hashed as its sorted items
        key = (tuple((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in vars(cfg).items()),
               wants, params)
        if key not in self._cache:
            forward = self.forward_fn(cfg, params)

            def step(leaves: dict[str, Any], constants: dict[str, Any], lengths: Any, heads: tuple) -> tuple:
                def loss(requested: dict[str, Any]) -> tuple[Any, tuple]:
                    outputs = forward(requested, constants, lengths)  # the scalar a user differentiates
                    return sum(jnp.sum(o * h) for o, h in zip(outputs, heads) if o is not None), outputs

                grads, outputs = jax.grad(loss, has_aux=True)(leaves)
                return outputs, grads

            self._cache[key] = jax.jit(step)
        return self._cache[key]

    def run(self, case: Any) -> dict[str, Any]:
        import jax.numpy as jnp

        cfg = case.config
        dtype = jnp.float64 if cfg.dtype == "f64" else jnp.float32
        arrays = {"x": case.x, "h0": case.h0, "c0": case.c0, **case.params}
        leaves = {k: jnp.asarray(v, dtype) for k, v in arrays.items() if k in case.wants}
        constants = {k: jnp.asarray(v, dtype) for k, v in arrays.items() if k not in case.wants and v is not None}
        heads = tuple(None if h is None else jnp.asarray(h, dtype)
                      for h in (case.dy, case.dhy, case.dcy if cfg.mode == "lstm" else None))
        step = self._compiled(cfg, frozenset(case.wants), tuple(case.params))
        (y, hy, cy), grads = step(leaves, constants, jnp.asarray(case.seq_lengths, jnp.int32), heads)
        return {"y": np.asarray(y), "hy": np.asarray(hy), "cy": None if cy is None else np.asarray(cy),
                "grads": {k: np.asarray(v) for k, v in grads.items()}}
