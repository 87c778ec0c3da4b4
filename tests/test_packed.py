"""Packed variable lengths (gradcheck_rnn/model/packed.py): the packed form of a case, its tail variant,
and the judge's exact-zero rule for a packed target's gradients past cu_seqlens[-1]."""

import numpy as np
import pytest

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.model.packed import PackedBatch, packed_inputs, tail_rows
from gradcheck_rnn.targets.packed import PackedAdapter

TAIL_ID = "s6-L2-uni-I3-H2-N2-R1-T6-B3-len6.0.3-f32-s5-tail3"


def test_the_packed_form_holds_each_sequence_back_to_back_then_the_tail():
    case = Case.from_id(TAIL_ID)
    x, dy, cu_seqlens = packed_inputs(case)
    assert cu_seqlens.dtype == np.int32 and cu_seqlens.tolist() == [0, 6, 6, 9]  # a length 0 repeats an offset
    assert x.shape == (1, 9 + 3, 3) and dy.shape == (1, 12, 2)
    np.testing.assert_array_equal(x[0, :6], case.x[:6, 0])
    np.testing.assert_array_equal(x[0, 6:9], case.x[:3, 2])
    tail_x, tail_dy = tail_rows(case)
    np.testing.assert_array_equal(x[0, 9:], tail_x)
    assert np.all(tail_x != 0) and np.all(tail_dy != 0)  # a tail that leaks must show
    back = PackedBatch.of(case).unpack(x, case.config.max_len)
    np.testing.assert_array_equal(back[:6, 0], case.x[:6, 0])
    assert not back[:, 1].any() and not back[3:, 2].any()  # padded steps come back as 0


def test_a_tail_changes_nothing_else_of_the_case_and_round_trips():
    with_tail, plain = Case.from_id(TAIL_ID), Case.from_id(TAIL_ID.removesuffix("-tail3"))
    assert with_tail.id == TAIL_ID and with_tail.tail == 3 and plain.tail == 0
    for name in ("x", "h0", "dy", "dhy"):
        np.testing.assert_array_equal(getattr(with_tail, name), getattr(plain, name))
    assert Case.from_id(TAIL_ID + "".replace("", "")).id == TAIL_ID
    assert Case.from_id("gdn-L1-uni-I2-H2-K2-T3-B1-len3-f64-s1-wx-z-tail2").id.endswith("-wx-z-tail2")


@pytest.mark.parametrize("bad", ["-tail0", "-tail65", "-tailx"])
def test_a_bad_tail_is_one_clear_error(bad):
    with pytest.raises(UsageError, match="tail"):
        Case.from_id(TAIL_ID.removesuffix("-tail3") + bad)


def test_a_correct_kernel_behind_the_packed_interface_passes_every_check():
    rows = gr.check(PackedAdapter(FusedCPUTarget(name="fused-cpu")), TAIL_ID)
    assert rows and all(r.status == "pass" for r in rows), [(r.check, r.status, r.message) for r in rows]
    reference = next(r for r in rows if r.check == "reference")
    assert "x[tail]" in {t.name for t in reference.tensors}


class TailLeftUnwritten(PackedAdapter):
    """The dx buffer is the packed x's: its tail keeps x's values."""

    def input_grad_buffer(self, x_packed):
        return x_packed.copy()


class TailOffByRounding(PackedAdapter):
    """A tail that is almost zero is still not zero."""

    def input_grad_buffer(self, x_packed):
        return np.full_like(x_packed, 1e-30)


@pytest.mark.parametrize("broken", [TailLeftUnwritten, TailOffByRounding])
def test_a_tail_gradient_that_is_not_exactly_zero_fails_the_reference_check(broken):
    rows = gr.check(broken(FusedCPUTarget(name="fused-cpu")), TAIL_ID, checks=["reference"])
    failing = {t.name for r in rows for t in r.tensors if t.status != "pass"}
    assert [r.status for r in rows] == ["fail"] and failing == {"x[tail]"}
    # without a tail there is nothing past cu_seqlens[-1] to judge: the same target passes
    assert all(r.status == "pass" for r in gr.check(broken(FusedCPUTarget(name="fused-cpu")),
                                                     TAIL_ID.removesuffix("-tail3"), checks=["reference"]))


def test_shrink_keeps_a_tail_failure_and_shortens_the_tail_to_one_row():
    from gradcheck_rnn.workflows.shrink import shrink
    from gradcheck_rnn.targets.protocol import as_target

    path = shrink(Case.from_id(TAIL_ID), as_target(TailLeftUnwritten(FusedCPUTarget(name="fused-cpu"))))
    minimal = Case.from_id(path.minimal.case_id)
    assert minimal.tail == 1 and minimal.config.num_layers == 1 and path.failure.tensor == "x[tail]"
