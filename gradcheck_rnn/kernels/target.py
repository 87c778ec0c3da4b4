"""The target adapter of the fused kernels: a case in, :class:`~gradcheck_rnn.model.case.Outputs` out,
computing only the requested gradients; and the TF32 switch of CUDA targets."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import numpy as np
import torch
from torch import Tensor

from ..model.case import Case, Outputs, RNNConfig
from ..families import CUDNN_MODES
from .algorithm import FusedKernel
from .strided import as_tensor


class FusedTarget:
    """A target over a :class:`FusedKernel`: runs a case on ``device`` in the case's dtype,
    computing only the requested gradients, the way a framework's fused op would (no
    weight-gradient GEMMs for frozen weights, no layer-0 dx GEMM when x is frozen).

    cuDNN's four cells run through ``kernel``; a family with a fused kernel of its own runs
    through ``family_kernels[mode]``, an object with ``run(case, dtype, device) -> Outputs``, in
    f64 and f32: by default one of each class :meth:`family_kernel_classes` names."""

    dtypes: Mapping[str, torch.dtype] = {"f64": torch.float64, "f32": torch.float32}
    family_dtypes = ("f64", "f32")
    # the key of this target's kernels in a family's ``kernels`` (families/base.py): "fused-cpu"
    kernels_key = ""

    def __init__(self, kernel: FusedKernel, name: str, device: str = "cpu",
                 family_kernels: Mapping[str, Any] | None = None) -> None:
        self.kernel = kernel
        self.name = name
        self.device = device
        if family_kernels is None:
            family_kernels = {mode: kernel_class() for mode, kernel_class in self.family_kernel_classes().items()}
        self.family_kernels = dict(family_kernels)

    @classmethod
    def family_kernel_classes(cls) -> dict[str, type]:
        """The family kernels of this target by mode, as each registered family names them
        (``Family.kernels[kernels_key]``), imported when asked for: the default ``family_kernels``,
        and what a family mutant subclasses."""
        from ..families import registered
        from ..importing import import_object

        return {f.token: import_object(f.kernels[cls.kernels_key], f"the {f.token} kernel of {cls.kernels_key}")
                for f in registered() if cls.kernels_key in f.kernels}

    def family_support(self, config: RNNConfig) -> bool | str:
        """True where this target has a kernel for the config's family and dtype; else why not."""
        if config.mode in CUDNN_MODES:
            return True
        if config.mode not in self.family_kernels:
            return f"{self.name} has no {config.mode} kernel"
        if config.dtype not in self.family_dtypes:
            return f"{self.name} computes {config.mode} in {' and '.join(self.family_dtypes)} only, not {config.dtype}"
        return True

    def kernel_configs(self, config: RNNConfig) -> dict[str, tuple]:
        """The kernel configurations of the config's family kernel (the matrix families' chunk
        sizes); {} for cuDNN's cells and a kernel that declares none."""
        declare = getattr(self.family_kernels.get(config.mode), "kernel_configs", None)
        return {} if declare is None else declare()

    def run(self, case: Case) -> Outputs:
        """Forward, backward_data and (when any parameter is requested) backward_weights."""
        config = case.config
        dtype, device = self.dtypes[config.dtype], self.device
        family_kernel = self.family_kernels.get(config.mode)
        if family_kernel is not None:
            if hasattr(family_kernel, "under"):  # under the case's kernel configuration (-kc.chunk.8)
                family_kernel = family_kernel.under(case.kernel_config)
            return family_kernel.run(case, dtype, device)

        def tensor(a: np.ndarray | None) -> Tensor | None:  # in the case's layout (kernels/strided.py)
            return None if a is None else as_tensor(a, dtype, device)

        params = {k: tensor(v) for k, v in case.params.items()}
        y, hy, cy, state = self.kernel.forward(tensor(case.x), case.seq_lengths.tolist(), tensor(case.h0),
                                               tensor(case.c0), params, config.mode, config.num_layers,
                                               config.bidirectional)
        dx, dh0, dc0 = self.kernel.backward_data(state, tensor(case.dy), tensor(case.dhy), tensor(case.dcy),
                                                 need_x="x" in case.wants)
        grads = {name: value for name, value in (("x", dx), ("h0", dh0), ("c0", dc0))
                 if name in case.wants and value is not None}
        if any(name in params for name in case.wants):
            grads.update(self.kernel.backward_weights(state))
        return Outputs(y=y, hy=hy, cy=cy, grads=grads)


TF32_ENV = "GRADCHECK_RNN_TF32"


@contextmanager
def cuda_matmul_precision() -> Iterator[bool]:
    """TF32 off for cuBLAS and cuDNN while a CUDA target runs (restored afterwards), unless
    ``GRADCHECK_RNN_TF32=1``; yields whether TF32 is on.

    TF32 rounds GEMM inputs to a 10-bit mantissa (~5e-4 relative): a float32 target with it on
    needs float16-like tolerances, so a check of float32 kernels runs without it by default
    (torch's own default leaves TF32 on for cuDNN convolutions and RNNs)."""
    wanted = os.environ.get(TF32_ENV, "0").strip().lower() in ("1", "true", "yes", "on")
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = wanted
    try:
        yield wanted
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
