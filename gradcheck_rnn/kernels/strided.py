"""A case's array as a torch tensor in the same memory layout: how the layouts of a case reach a kernel.

A target is handed a case's head gradients and x in the case's layout (transposed, strided or
expanded views: :mod:`gradcheck_rnn.model.layouts`). ``torch.from_numpy(np.ascontiguousarray(a))``
would make every one of them contiguous again before the kernel sees it, as the
``dout.contiguous()`` that hid state-spaces/mamba #1036 did; :func:`as_tensor` keeps the strides,
in any dtype and on any device, so a kernel that assumes them gets what a framework's autograd
would hand it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def as_tensor(array: np.ndarray, dtype: torch.dtype, device: str | torch.device = "cpu") -> Tensor:
    """``array``'s values in ``dtype`` on ``device``, with ``array``'s strides (in elements): a
    zero stride stays an ``expand``, the gaps of a strided view are NaN, a transposed view stays
    transposed; a contiguous array gives a contiguous tensor."""
    if array.flags.c_contiguous or array.size == 0:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)
    itemsize = array.itemsize
    strides = [s // itemsize for s in array.strides]
    expanded = [d for d, (n, s) in enumerate(zip(array.shape, strides)) if s == 0 and n > 1]
    # one element along every expanded axis: its values, laid out as the rest of the view is
    base = array[tuple(slice(0, 1) if d in expanded else slice(None) for d in range(array.ndim))]
    size = [1 if d in expanded else n for d, n in enumerate(array.shape)]
    kept = [0 if d in expanded else s for d, s in enumerate(strides)]
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(size, kept))
    storage = torch.full((extent,), float("nan"), dtype=dtype, device=device)
    out = storage.as_strided(size, kept)
    out.copy_(torch.from_numpy(np.ascontiguousarray(base)))
    return out.expand(array.shape) if expanded else out
