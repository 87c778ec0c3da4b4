"""The project's own fused RNN kernels, the systems under test.

``common``: what they share — the packed variable-length layout, the mode specs, the algorithm
with its hooks (:class:`~gradcheck_rnn.kernels.common.FusedKernel`), the autograd entry and
the target protocol. ``fused_cpu``: the cells as aten ops (the ``fused-cpu`` target).
``fused_gpu``: the cells as Triton kernels (the ``fused-gpu`` target, on CUDA or under
``TRITON_INTERPRET=1``). Mutants subclass either kernel to re-create historical gradient bugs.
"""
