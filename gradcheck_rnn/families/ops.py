"""The array namespace a family's step function is written against, for torch and for jax.numpy.

A family gives its step once (:meth:`gradcheck_rnn.families.Family.step`); the loop reference runs
it on torch tensors (float64, autograd) and the JAX reference on jax arrays (float64, ``jax.vjp``).
Both arrays support ``@``, slicing, ``None`` indexing, ``.reshape`` and ``.sum``; what differs
between the libraries is named here (``linear(a, w)`` is a @ wᵀ, ``split(a, n)`` n equal blocks of
the last axis), with the same formula on both sides (softplus as
``logaddexp(x, 0)``, not torch's thresholded softplus), so that the two references differ only by
rounding. Nothing is imported before it is asked for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def _torch_linear(a: Any, w: Any) -> Any:
    """a @ wᵀ: for the loop reference's single rows as ``w @ a``, which autograd runs about a
    fifth faster than through the transpose."""
    return w @ a if a.dim() == 1 else a @ w.T


def torch_ops() -> Any:
    import torch

    return SimpleNamespace(exp=torch.exp, abs=torch.abs, log=torch.log, sqrt=torch.sqrt, tanh=torch.tanh, sigmoid=torch.sigmoid,
                           relu=torch.relu, linear=_torch_linear, split=lambda a, n: a.chunk(n, -1),
                           softplus=lambda a: torch.logaddexp(a, torch.zeros_like(a)),
                           log_sigmoid=torch.nn.functional.logsigmoid, stop_gradient=lambda a: a.detach(),
                           maximum=torch.maximum, where=torch.where, stack=torch.stack, cat=torch.cat)


def jax_ops() -> Any:
    import jax
    import jax.numpy as jnp

    return SimpleNamespace(exp=jnp.exp, abs=jnp.abs, log=jnp.log, sqrt=jnp.sqrt, tanh=jnp.tanh, sigmoid=jax.nn.sigmoid,
                           relu=jax.nn.relu, linear=lambda a, w: a @ w.T, split=lambda a, n: jnp.split(a, n, axis=-1),
                           softplus=lambda a: jnp.logaddexp(a, 0.0),
                           log_sigmoid=jax.nn.log_sigmoid, stop_gradient=jax.lax.stop_gradient,
                           maximum=jnp.maximum, where=jnp.where, stack=jnp.stack, cat=jnp.concatenate)
