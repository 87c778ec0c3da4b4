"""The project's own fused RNN kernels, the systems under test.

``fused_cpu``: packed-sequence CPU operator with hand-written BPTT (the ``fused-cpu`` target);
its :class:`~gradcheck_rnn.kernels.fused_cpu.FusedCPUKernel` is also the base that mutants
subclass to re-create historical gradient bugs.
"""
