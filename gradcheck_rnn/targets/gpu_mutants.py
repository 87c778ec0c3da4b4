"""Mutants of the fused GPU kernel: the bugs of :mod:`~gradcheck_rnn.targets.mutants` that apply to
:class:`~gradcheck_rnn.kernels.fused_gpu.FusedGPUKernel`, each written once there and crossed
with the GPU kernel here (:func:`~gradcheck_rnn.targets.mutants.crossed`).

They are listed apart from :data:`~gradcheck_rnn.targets.mutants.MUTANTS` because they need
CUDA or the Triton interpreter (~4 ms a launch on CPU): the default ``gradcheck-rnn mutants``
run stays CPU-only and fast, and these run by name, e.g. ``TRITON_INTERPRET=1 gradcheck-rnn
mutants -c interp -m gpu-forget-gate-grad-dropped`` (the tests do) or on a GPU through
``benchmarks/gpu.sh``. Importing this module does not import triton.
"""

from __future__ import annotations

from .mutants import ForgetGateGradDropped, KernelBug, LengthsIgnored, ReverseWeightGradSkipsFirstStep

# name -> the bug, crossed with FusedGPUKernel when judged
GPU_MUTANTS: dict[str, type[KernelBug]] = {
    "gpu-forget-gate-grad-dropped": ForgetGateGradDropped,
    # MXNet #19323 on the GPU path: the packing ignores the lengths, the reverse direction starts at T−1
    "gpu-reverse-starts-in-padding": LengthsIgnored,
    "gpu-reverse-weight-grad-skips-step": ReverseWeightGradSkipsFirstStep,
}
