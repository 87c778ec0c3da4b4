"""The project's own fused RNN kernels, the systems under test.

What they share, one module per role: ``packing`` (the sorted, packed variable-length layout and
the mode specs), ``algorithm`` (the one fused algorithm with its hooks,
:class:`~gradcheck_rnn.kernels.algorithm.FusedKernel`), ``autograd`` (the ``torch.autograd.Function``
whose backward is the kernel's hand-written BPTT) and ``target`` (a case in, Outputs out).
``fused_cpu``: the cells as aten ops (the ``fused-cpu`` target). ``fused_gpu``: the cells as Triton
kernels (the ``fused-gpu`` target, on CUDA or under ``TRITON_INTERPRET=1``). Mutants
(gradcheck_rnn.targets.kernel_bugs) cross one bug with either kernel.
"""
