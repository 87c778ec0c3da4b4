"""The names of the mutants, without their kernels: what ``mutant:<name>`` may name, known without
importing torch, so that a command refuses a typo in a moment (and says which name was meant).

:mod:`gradcheck_rnn.targets.mutants` registers one bug under each name, in these groups and this
order, and asserts at import that the two agree.
"""

from __future__ import annotations

# the bugs of cuDNN's cells, crossed with the fused CPU kernel (mutants.MUTANTS)
CUDNN = ("truncated-bptt", "bptt-skipped-when-frozen", "bidir-dy-overwritten", "gru-middle-w_ih", "top-b_hh-zero",
         "lengths-ignored", "relu-mask-wrong-tensor", "hy-at-T-1", "padded-dx-leak", "dc0-missing",
         "weight-grad-skips-first-step", "gru-reset-before-bias", "forget-gate-sign-flip", "tanh-derivative-of-input",
         "cell-grad-not-carried", "hy-in-sorted-order", "nondeterministic-weight-grad", "gradient-clipped-in-kernel",
         "stale-dh0-buffer", "projection-grad-transposed", "bias-assumed-present", "zero-length-runs-one-step",
         "zero-length-dh0-dropped", "forget-gate-grad-dropped", "reverse-weight-grad-skips-step")
# the other families' CPU kernels (mutants.FAMILY_MUTANTS)
FAMILY = ("s6-padded-step-decay", "s6-reverse-carry-undecayed", "s6-gate-grad-dropped", "s6-lower-layer-dhy-dropped",
          "slstm-stabilizer-grad-to-forget", "slstm-lower-layer-recurrent-grad", "slstm-padded-step-updates-n",
          "gdn-packed-tail-unwritten", "gla-key-block-mask", "gla-decay-grad-overshoot",
          "gla-short-call-dh0-pass-through-dropped", "gla-decay-grad-ignores-dhy", "gla-packed-tail-from-empty",
          "mlstm-chunk-states-wrong-size", "mlstm-normalizer-grad-not-carried", "gdn-state-grad-no-householder",
          "gdn-sequence-start-gate-grad", "gdn-padded-gate-grad", "conv1d-short-sequence-dh0-pass-through-dropped",
          "conv1d-packed-dweight-whole-stream", "conv1d-initial-state-grad-without-bias",
          "conv1d-backward-reads-next-sequence", "deltaproduct-backward-decays-every-sub-step",
          "deltaproduct-backward-reads-first-sub-step", "deltaproduct-state-grad-drops-second-householder",
          "rwkv7-h0-grad-low-rank-dropped", "rwkv7-state-grad-no-low-rank", "rwkv7-decay-grad-exclusive-cumsum",
          "kda-state-grad-first-head-decay", "kda-norm-backward-from-rounded-output", "kda-decay-grad-wrong-axis",
          # issue 45: a non-contiguous dy, a segmented run, one kernel configuration
          "gla-dy-strides-assumed-contiguous", "gla-state-grad-wrong-head", "mlstm-chunk-states-wrong-size-at-chunk-8")
# the fused GPU kernel's (mutants.GPU_MUTANTS) and the families' GPU kernels' (mutants.GPU_FAMILY_MUTANTS)
GPU = ("gpu-forget-gate-grad-dropped", "gpu-reverse-starts-in-padding", "gpu-reverse-weight-grad-skips-step")
GPU_FAMILY = ("gpu-s6-reverse-carry-undecayed", "gpu-slstm-stabilizer-grad-to-forget",
              "gpu-slstm-lower-layer-recurrent-grad", "gpu-gla-state-grad-reads-next-chunk",
              "gpu-gdn-state-grad-reads-next-chunk", "gpu-kda-state-grad-reads-next-chunk",
              "gpu-mlstm-stabiliser-reads-next-chunk", "gpu-deltaproduct-state-grad-reads-next-chunk",
              "gpu-rwkv7-state-grad-reads-next-step")
# measured blind spots of the half tolerances (mutants.BLIND_SPOTS)
BLIND_SPOTS = ("half-accumulated-in-half", "half-rounds-per-op")
# forward-mode and second-order bugs, judged by the jvp and gradgrad checks (mutants.PRODUCT_MUTANTS)
PRODUCT = ("jvp-recurrent-tangent-dropped", "hvp-gate-second-order-dropped", "hvp-silent-zeros")

ALL = CUDNN + BLIND_SPOTS + PRODUCT + GPU + FAMILY + GPU_FAMILY


def check_mutant_name(name: str) -> None:
    """UsageError for a mutant name that is not one, with the closest name when one is close."""
    from ..errors import unknown_name

    if name not in ALL:
        raise unknown_name("mutant", name, ALL, "'gradcheck-rnn targets' lists them")
