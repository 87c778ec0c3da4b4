"""Targets with a narrow API surface, for the narrowing tests (tests/test_narrowing.py)."""

from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget


class OnlyLstmWithoutProjections:
    """A plugin author's LSTM kernel: no proj_size (issue 29: 8 of 20 cases were skipped)."""

    name = "only-lstm-without-projections"

    def supports(self, config):
        if config.mode != "lstm":
            return "LSTM only"
        return True if not config.proj_size else "no projections"

    def run(self, case):
        return FusedCPUTarget().run(case)


only_lstm_without_projections = OnlyLstmWithoutProjections()
