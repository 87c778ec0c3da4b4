"""The names of the mutants, without their kernels: what ``mutant:<name>`` may name, known without
importing torch, so that a command refuses a typo in a moment (and says which name was meant).

:mod:`gradcheck_rnn.targets.kernel_bugs` registers one bug under each name, in these groups and this
order, and asserts at import that the two agree; the families' mutants are named by the families
themselves (``Family.mutants``), which import no torch either.
"""

from __future__ import annotations

from ..families import BUILT_IN_MODES, registered

# the bugs of cuDNN's cells, crossed with the fused CPU kernel (mutants.MUTANTS)
CUDNN = ("truncated-bptt", "bptt-skipped-when-frozen", "bidir-dy-overwritten", "gru-middle-w_ih", "top-b_hh-zero",
         "lengths-ignored", "relu-mask-wrong-tensor", "hy-at-T-1", "padded-dx-leak", "dc0-missing",
         "weight-grad-skips-first-step", "gru-reset-before-bias", "forget-gate-sign-flip", "tanh-derivative-of-input",
         "cell-grad-not-carried", "hy-in-sorted-order", "nondeterministic-weight-grad", "gradient-clipped-in-kernel",
         "stale-dh0-buffer", "projection-grad-transposed", "bias-assumed-present", "zero-length-runs-one-step",
         "zero-length-dh0-dropped", "forget-gate-grad-dropped", "reverse-weight-grad-skips-step")
# the fused GPU kernel's (mutants.GPU_MUTANTS)
GPU = ("gpu-forget-gate-grad-dropped", "gpu-reverse-starts-in-padding", "gpu-reverse-weight-grad-skips-step")
# measured blind spots of the half tolerances (mutants.BLIND_SPOTS)
BLIND_SPOTS = ("half-accumulated-in-half", "half-rounds-per-op")
# forward-mode and second-order bugs, judged by the jvp and gradgrad checks (mutants.PRODUCT_MUTANTS)
PRODUCT = ("jvp-recurrent-tangent-dropped", "hvp-gate-second-order-dropped", "hvp-silent-zeros")



def family_names(kernels_key: str, built_in: bool = False) -> tuple[str, ...]:
    """The mutants the registered families (the built-in ones only: ``built_in``) name for
    ``kernels_key``'s kernels (``Family.mutants``; kernel_bugs.family_mutants crosses them)."""
    return tuple(name for f in registered() if not built_in or f.token in BUILT_IN_MODES
                 for name, (key, _) in f.mutants.items() if key == kernels_key)


# the built-in families' CPU and GPU kernels' (kernel_bugs.FAMILY_MUTANTS, kernel_bugs.GPU_FAMILY_MUTANTS)
FAMILY, GPU_FAMILY = family_names("fused-cpu", built_in=True), family_names("fused-gpu", built_in=True)
ALL = CUDNN + BLIND_SPOTS + PRODUCT + GPU + FAMILY + GPU_FAMILY


def check_mutant_name(name: str) -> None:
    """UsageError for a mutant name that is not one (the families loaded since included), with the
    closest name when one is close."""
    from ..errors import unknown_name

    known = tuple(dict.fromkeys(ALL + family_names("fused-cpu") + family_names("fused-gpu")))
    if name not in known:
        raise unknown_name("mutant", name, known, "'gradcheck-rnn targets' lists them")
