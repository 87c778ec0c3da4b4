"""Layouts: the memory a case's arrays are handed to a target in, and the kernel configuration it runs.

The draws reach shapes, lengths and dtypes; a kernel's strides and its own configuration are other
paths, where shipped bugs lived (fla-org/flash-linear-attention #871: causal_conv1d's backward
read a non-contiguous dy with strides hard-coded; state-spaces/mamba #1036: a ``dout.contiguous()``
hid the same; NX-AI/mlstm_kernels #10: wrong only for chunk sizes over 128). Each is a case-id
token, so that a failure reproduces from its id alone:

* ``-dy<T|S|E>``: the head gradients dy, dhy and dcy handed as a non-contiguous view of the same
  values: ``T`` transposed (stored (B, T, …) or (B, L·D, …), viewed with the first two axes
  swapped), ``S`` strided (every other element of a buffer twice as wide in its last axis, the
  elements in between NaN, so that a kernel that reads them shows it), ``E`` a zero-stride expand
  of the last axis, as ``loss.sum()`` or a broadcast hands a gradient down. ``E`` changes the
  values: the case draws its head gradients as always and then broadcasts each one's first
  element of the last axis across it (:func:`broadcast_heads`), so that they are equal along it
  and a stride of 0 can hold them; a check that derives a case whose head gradients are not equal
  there (the padding check's new values) gets them contiguous.
* ``-xS``: x handed as a strided view (NaN between its elements) as well.
* ``-kc.<name>.<value>``: a kernel configuration the target runs under (a chunk size, a block
  size, a backend: :func:`format_kernel_config`), one token per name in name order; a target that
  declares configurations (``kernel_configs(config)``, :mod:`gradcheck_rnn.targets.protocol`)
  gets one drawn per case where the case names none (:mod:`gradcheck_rnn.judging.judge`).

The float64 references read the values, never the strides, so a layout changes nothing of the
truth; only what a target is handed. :func:`lay_out` makes the views, in the private copy every
target call gets (:func:`gradcheck_rnn.model.case.private_copy`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from ..errors import UsageError

GRAD_LAYOUTS = ("T", "S", "E")  # -dyT, -dyS, -dyE
INPUT_LAYOUTS = ("S",)  # -xS
LAYOUT_NAMES = {"T": "transposed", "S": "strided", "E": "expanded (stride 0)"}
# a kernel configuration's name and value in a case id: -kc.chunk.8, -kc.backend.triton
KERNEL_CONFIG_TOKEN = re.compile(r"kc\.([a-z][a-z0-9_]*)\.([A-Za-z0-9_]+)")

KernelConfig = tuple[tuple[str, Any], ...]  # sorted (name, value) pairs; ints as int


def lay_out(array: np.ndarray | None, layout: str) -> np.ndarray | None:
    """A fresh non-contiguous view holding ``array``'s values in ``layout`` (``""``: a contiguous
    copy). ``E`` needs values equal along the last axis (a copy comes back contiguous otherwise,
    never other values); a 0-d or 1-d array, or one too small for a layout to mean anything,
    comes back contiguous."""
    if array is None:
        return None
    if not layout or array.ndim < 2 or array.size == 0:
        return array.copy()
    if layout == "T":
        stored = np.ascontiguousarray(np.swapaxes(array, 0, 1))
        return np.swapaxes(stored, 0, 1)
    if layout == "S":
        wide = np.full(array.shape[:-1] + (2 * array.shape[-1],), np.nan)
        view = wide[..., ::2]
        view[...] = array
        return view
    if layout == "E":
        first = array[..., :1]
        if not np.array_equal(np.broadcast_to(first, array.shape), array):
            return array.copy()
        column = np.ascontiguousarray(first)
        # writable, unlike np.broadcast_to's: torch.from_numpy takes it as it is (a stride of 0)
        return np.lib.stride_tricks.as_strided(column, array.shape, column.strides[:-1] + (0,), writeable=True)
    raise UsageError(f"layout {layout!r} is not allowed; allowed: {', '.join(GRAD_LAYOUTS)}")


def broadcast_heads(array: np.ndarray | None) -> np.ndarray | None:
    """``-dyE``'s values: the first element of the last axis broadcast across it (a copy)."""
    return None if array is None else np.broadcast_to(array[..., :1], array.shape).copy()


def describe_layouts(grad_layout: str, input_layout: str) -> str:
    """``"dy, dhy, dcy transposed; x strided"``: the layouts in words, "" when contiguous."""
    parts = [f"dy, dhy, dcy {LAYOUT_NAMES[grad_layout]}"] if grad_layout else []
    parts += [f"x {LAYOUT_NAMES[input_layout]}"] if input_layout else []
    return "; ".join(parts)


def config_value(text: str) -> Any:
    """A kernel configuration's value as a case id writes it: digits are an int, the rest a name."""
    return int(text) if text.isdigit() else text


def normal_kernel_config(given: Mapping[str, Any] | KernelConfig | None) -> KernelConfig:
    """A kernel configuration as sorted (name, value) pairs, each checked to fit a case-id token."""
    items = given.items() if isinstance(given, Mapping) else (given or ())
    pairs = []
    for name, value in items:
        value = config_value(str(value)) if not isinstance(value, bool) else value
        if not KERNEL_CONFIG_TOKEN.fullmatch(f"kc.{name}.{value}"):
            raise UsageError(f"kernel configuration {name}={value!r} is not allowed; names are lower-case words "
                             f"(a-z, 0-9, _) and values digits or letters, e.g. chunk=8")
        pairs.append((str(name), value))
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise UsageError(f"kernel configuration {next(n for n in names if names.count(n) > 1)!r} is given twice")
    return tuple(sorted(pairs))


def format_kernel_config(config: KernelConfig) -> str:
    """``-kc.chunk.8-kc.warps.4``: the case-id tokens of a kernel configuration ("" for none)."""
    return "".join(f"-kc.{name}.{value}" for name, value in config)


def draw_kernel_config(rng: np.random.Generator, candidates: Mapping[str, tuple], given: KernelConfig) -> KernelConfig:
    """``given`` with one value of every name ``candidates`` declares that it does not name, drawn
    from ``rng`` name by name in name order (so adding a name later shifts no earlier draw)."""
    chosen = dict(given)
    for name in sorted(candidates):
        values = tuple(candidates[name])
        if name not in chosen and values:
            chosen[name] = values[int(rng.integers(len(values)))]
    return normal_kernel_config(chosen)


def kernel_config_refusal(candidates: Mapping[str, tuple], config: KernelConfig) -> str | None:
    """Why a target that declares ``candidates`` cannot run ``config`` (a value it does not offer), or None."""
    for name, value in config:
        offered = candidates.get(name)
        if offered is not None and value not in tuple(offered):
            return (f"kernel configuration {name}={value} is not one this target runs "
                    f"({name} in {', '.join(map(str, offered))})")
    return None
