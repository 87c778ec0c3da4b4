"""Poisoned memory (gradcheck_rnn/runtime.poisoned_memory, gradcheck_rnn/judging/checks/poisoned.py):
memory torch hands out uninitialised reads as NaN, a read of it fails in words and is never
non-determinism, and torch's settings come back as they were."""

import numpy as np
import pytest
import torch

import gradcheck_rnn as gr
from gradcheck_rnn import Case, Outputs
from gradcheck_rnn.judging.checks.poisoned import first_axis_ranges
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.runtime import poisoned_memory
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.targets.kernel_bugs import PackedTailFromEmpty

TAIL_CASE = "gla-L2-uni-I2-H4-NH2-K2-R1-T7-B3-len7.3.2-f64-s4-tail3"


def test_poisoned_memory_fills_torch_empty_with_nan_and_restores_torch_settings():
    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    with poisoned_memory():
        assert torch.isnan(torch.empty(5)).all() and torch.isnan(torch.zeros(2).new_empty(3)).all()
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before


def test_first_axis_ranges_names_the_rows_that_hold_a_set_element():
    mask = np.zeros((12, 2), dtype=bool)
    mask[[7, 8, 9, 11], 1] = True
    assert first_axis_ranges(mask) == "7–9, 11"


def named_rows(message: str, tensor: str) -> set[int]:
    """The rows a "reads memory it never wrote: <tensor> rows 0–1, 3" message names."""
    ranges = message.split(f"reads memory it never wrote: {tensor} rows ", 1)[1].split(" (", 1)[0]
    return {i for span in ranges.split(", ") for i in range(int(span.split("–")[0]), int(span.split("–")[-1]) + 1)}


@pytest.mark.parametrize("check", ["poisoned", "determinism", "stateless"])
def test_an_unwritten_tail_fails_in_words_and_is_never_nondeterministic(check):
    case = Case.from_id(TAIL_CASE)
    row = judge_one(case, resolve_target("mutant:gla-packed-tail-from-empty"), check=check)
    if check == "poisoned":  # poisoned memory is NaN every time
        assert row.status == "fail", row
    # the others compare two plain runs, whose unwritten memory may hold the same bytes twice:
    # then they agree (pass); when they differ, the poisoned run names the read, in words. The
    # plain runs' unwritten memory holds what the allocator had, NaN now and then (an earlier
    # poisoned run's): a row NaN in every plain run is not evidence, so the rows named are some
    # of the tail's three, or the plain run fails as non-finite first (a fail either way)
    assert row.status in ("fail", "pass"), row
    if row.status == "fail" and "non-finite value(s) in the target" not in row.message:
        assert named_rows(row.message, "x[tail]") <= {0, 1, 2}, row.message
    assert judge_one(case, resolve_target("fused-cpu"), check=check).status == "pass"


class ScriptedGarbage(PackedTailFromEmpty):
    """The tail mutant, its unwritten rows holding scripted bytes instead of the allocator's: NaN
    in its first plain run (as left by an earlier poisoned run), then a new finite value in each
    next one; NaN under poisoned memory, as torch fills it."""

    def __init__(self) -> None:
        super().__init__()
        self.plain_runs = 0

    def input_grad_buffer(self, x_packed: np.ndarray) -> np.ndarray:
        if torch.utils.deterministic.fill_uninitialized_memory and torch.are_deterministic_algorithms_enabled():
            return super().input_grad_buffer(x_packed)
        self.plain_runs += 1
        return np.full(x_packed.shape, np.nan if self.plain_runs == 1 else float(self.plain_runs))


@pytest.mark.parametrize("check", ["determinism", "stateless"])
def test_an_unwritten_read_is_named_whole_when_one_plain_run_met_nan(check):
    """Two plain runs differ in the tail, the first NaN there and the second finite: the read is
    named from both runs, all three rows, not taken for state carried between calls or for
    non-determinism (the first run alone is no evidence there)."""
    row = judge_one(Case.from_id(TAIL_CASE), ScriptedGarbage(), check=check)
    assert row.status == "fail" and named_rows(row.message, "x[tail]") == {0, 1, 2}, row


class EmptyOutput:
    """y from torch.empty, only the valid steps written: the padded steps read what was there."""

    def __init__(self) -> None:
        self.correct = FusedCPUTarget()

    def run(self, case):
        out = self.correct.run(case)
        y = torch.empty(out.y.shape, dtype=out.y.dtype)
        for b, length in enumerate(case.seq_lengths):
            y[:length, b] = out.y[:length, b]
        return Outputs(y=y, hy=out.hy, cy=out.cy, grads=out.grads)


def test_a_kernel_that_leaves_padded_outputs_unwritten_fails_the_poisoned_check():
    [row] = gr.check(EmptyOutput(), "gru-L1-uni-I2-H3-T9-B3-len9.7.4-f32-s5", checks=["poisoned"])
    # torch.empty's memory in the plain run is whatever was there, now and then a NaN already: then
    # the plain run fails as non-finite before poisoning can say more (a fail either way)
    assert row.status == "fail" and ("reads memory it never wrote: y rows 4–8" in row.message
                                     or "non-finite value(s) in the target" in row.message), row.message


def test_real_non_determinism_stays_nondeterministic():
    row = judge_one(Case.from_id("gru-L1-bi-I2-H3-T4-B2-len4.3-f32-s2"),
                    resolve_target("mutant:nondeterministic-weight-grad"), check="determinism")
    assert row.status == "nondeterministic", row
