"""A toy cell family for tests/test_extension_points.py: s6's cell under another token, whose
fused kernel and one mutant are named on the family alone (``Family.kernels``, ``Family.mutants``)."""

import dataclasses

from gradcheck_rnn.families.s6 import S6, S6Family


class ToyFamily(S6Family):
    """s6 again, registered with a kernel and a mutant of its own."""

    kernels = {"fused-cpu": "gradcheck_rnn.kernels.s6_cpu:S6CPUKernel"}
    mutants = {"toy-gate-grad-dropped": ("fused-cpu", "gradcheck_rnn.targets.kernel_bugs:S6GateGradDropped")}


TOY = ToyFamily(**{**{f.name: getattr(S6, f.name) for f in dataclasses.fields(S6)}, "token": "toys6"})
