"""Layouts and kernel configurations (issue 45): case-id tokens that round-trip, views that reach
the kernels with their strides, correct kernels that pass under them, and the three mutants each
caught by the layout, the check or the kernel configuration meant to catch it and by nothing else."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import gradcheck_rnn as gr
from gradcheck_rnn import Case, UsageError
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.judge import configured_case, judged_case_id
from gradcheck_rnn.kernels.strided import as_tensor
from gradcheck_rnn.model.case import private_copy, with_changes
from gradcheck_rnn.model.narrowing import Narrowing
from gradcheck_rnn.model.profiles import draw_case_ref, load_profile
from gradcheck_rnn.targets import as_target, resolve_target

GRU = "gru-L2-bi-I3-H4-T6-B3-len6.4.1-f32-s11"
GLA = "gla-L1-uni-I3-H4-NH2-K3-R1-T9-B2-len9.7-f64-s5"
MLSTM = "mlstm-L1-uni-I3-H4-NH2-K2-T12-B2-len12.7-f32-s5"


def statuses(target, case_id, checks=("reference",), config="matrix"):
    return [row.status for row in gr.check(target, case_id, checks=list(checks), config=config, in_process=True)]


# ------------------------------------------------------------------ the case-id grammar

@pytest.mark.parametrize("case_id", [GRU + "-dyT", GRU + "-wx-z-dyE-xS", GLA + "-tail2-dyS-kc.chunk.8",
                                     GRU + "-xS-kc.backend.triton-kc.chunk.256"])
def test_layout_and_kernel_config_tokens_round_trip(case_id):
    case = Case.from_id(case_id)
    assert case.id == case_id
    again = Case.from_id(case.id)
    assert all(np.array_equal(getattr(case, n), getattr(again, n)) for n in ("x", "dy", "dhy"))


def test_kernel_config_values_read_back_as_written():
    case = Case.from_id(GRU + "-kc.backend.triton-kc.chunk.256")
    assert case.kernel_config == (("backend", "triton"), ("chunk", 256))


@pytest.mark.parametrize("case_id, words", [(GRU + "-kc.chunk.8-kc.backend.x", "name order"),
                                            (GRU + "-dyQ", "-dy{T|S|E}"), (GRU + "-xS-dyT", "in that order"),
                                            (GRU + "-kc.chunk.8-kc.chunk.4", "name order")])
def test_a_bad_layout_or_kernel_config_token_is_one_sentence(case_id, words):
    with pytest.raises(UsageError) as raised:
        Case.from_id(case_id)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_an_expanded_head_gradient_is_a_draw_then_broadcast():
    plain, expanded = Case.from_id(GRU), Case.from_id(GRU + "-dyE")
    assert np.array_equal(expanded.dy, np.broadcast_to(plain.dy[..., :1], plain.dy.shape))
    assert np.array_equal(expanded.dhy[..., 0], plain.dhy[..., 0]) and np.array_equal(expanded.x, plain.x)


def test_the_other_layouts_change_no_value():
    plain = Case.from_id(GRU)
    for suffix in ("-dyT", "-dyS", "-xS"):
        laid = Case.from_id(GRU + suffix)
        assert all(np.array_equal(getattr(plain, n), getattr(laid, n)) for n in ("x", "dy", "dhy", "h0"))


# ------------------------------------------------------------------ the views a target is handed

def test_the_private_copy_hands_the_views():
    transposed = private_copy(Case.from_id(GRU + "-dyT"))
    assert not transposed.dy.flags.c_contiguous and transposed.dy.strides[0] < transposed.dy.strides[1]
    strided = private_copy(Case.from_id(GRU + "-dyS-xS"))
    assert np.isnan(strided.x.base).sum() == strided.x.size  # the gaps between its elements are NaN
    assert np.array_equal(strided.dy, Case.from_id(GRU).dy)
    expanded = private_copy(Case.from_id(GRU + "-dyE"))
    assert expanded.dy.strides[-1] == 0 and expanded.dhy.strides[-1] == 0


def test_an_expanded_layout_never_changes_values_a_check_derived():
    case = Case.from_id(GRU + "-dyE")
    derived = with_changes(case, dy=np.random.default_rng(0).standard_normal(case.dy.shape))
    handed = private_copy(derived)
    assert np.array_equal(handed.dy, derived.dy) and handed.dy.flags.c_contiguous


@pytest.mark.parametrize("suffix, strides", [("-dyT", (8, 48, 1)), ("-dyS", (48, 16, 2)), ("-dyE", (3, 1, 0))])
def test_kernels_receive_the_strides_in_any_dtype(suffix, strides):
    dy = private_copy(Case.from_id(GRU + suffix)).dy  # (T, B, D·S) = (6, 3, 8)
    for dtype in (torch.float64, torch.float32):
        tensor = as_tensor(dy, dtype)
        assert tensor.dtype == dtype and torch.equal(tensor, torch.from_numpy(np.ascontiguousarray(dy)).to(dtype))
        assert tensor.stride() == strides


# ------------------------------------------------------------------ correct kernels pass under them

@pytest.mark.parametrize("suffix", ["-dyT", "-dyS", "-dyE-xS"])
@pytest.mark.parametrize("target", ["fused-cpu", "torch-native"])
def test_correct_kernels_pass_under_every_layout(target, suffix):
    assert statuses(target, GRU + suffix, config="ci") == ["pass"]


@pytest.mark.parametrize("chunk", [2, 4, 8])
def test_the_fused_matrix_kernels_pass_under_every_chunk_they_declare(chunk):
    for case_id in (GLA + "-dyT", MLSTM + "-xS"):
        assert statuses("fused-cpu", f"{case_id}-kc.chunk.{chunk}") == ["pass"]


# ------------------------------------------------------------------ kernel configurations

def test_a_declaring_target_is_judged_under_a_drawn_configuration_named_in_its_rows():
    rows = gr.check("fused-cpu", GLA, checks=["reference"], config="matrix", in_process=True)
    assert rows[0].case_id.startswith(GLA + "-kc.chunk.") and rows[0].status == "pass"
    again = gr.check("fused-cpu", GLA, checks=["reference"], config="matrix", in_process=True)
    assert again[0].case_id == rows[0].case_id  # drawn from the case's own generator


def test_a_target_without_declarations_keeps_the_case_and_ignores_its_configuration():
    target = as_target(resolve_target("torch-native"))
    case = Case.from_id(GRU + "-kc.chunk.8")
    assert target.kernel_configs(case.config) == {} and configured_case(case, target) is case
    assert statuses("torch-native", GRU + "-kc.chunk.8", config="ci") == ["pass"]


def test_a_value_the_target_does_not_offer_declines_the_case():
    rows = gr.check("fused-cpu", GLA + "-kc.chunk.3", checks=["reference"], config="matrix", in_process=True)
    assert rows[0].status == "skip" and "chunk=3 is not one this target runs (chunk in 2, 4, 8)" in rows[0].message


def test_kernel_config_narrowing_names_the_value_in_every_drawn_case():
    narrowed = Narrowing.build(kernel_config=["chunk=4,8"]).apply(load_profile("matrix"))
    ids = [draw_case_ref(narrowed, 0, i).id for i in range(20)]
    assert all(i.endswith(("-kc.chunk.4", "-kc.chunk.8")) for i in ids)
    assert {i[-1] for i in ids} == {"4", "8"}
    plain = [draw_case_ref(load_profile("matrix"), 0, i).id for i in range(20)]
    assert [i.rsplit("-kc.", 1)[0] for i in ids] == plain  # nothing else of a case moves


@pytest.mark.parametrize("value", ["chunk", "chunk=", "Chunk=4", "chunk=4-8"])
def test_a_bad_kernel_config_flag_is_exit_2_with_one_sentence(value, tmp_path):
    result = CliRunner().invoke(main, ["sweep", "-n", "1", "-t", "fused-cpu", "--kernel-config", value,
                                       "--report-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    message = result.output.strip().splitlines()
    assert len(message) == 1 and "--kernel-config" in message[0] and "Traceback" not in result.output


def test_profiles_draw_the_layouts_where_they_are_on():
    def tokens(profile):
        ids = [draw_case_ref(load_profile(profile), 0, i).id for i in range(100)]
        return sum(any(t in i.split("-") for t in ("dyT", "dyS", "dyE", "xS")) for i in ids)

    assert 25 <= tokens("nightly") <= 65 and tokens("ci") <= 20  # 44 % and 10 % expected


# ------------------------------------------------------------------ the mutants

def test_dy_strides_assumed_contiguous_is_caught_only_by_a_non_contiguous_dy():
    name = "mutant:gla-dy-strides-assumed-contiguous"
    assert statuses(name, GLA + "-xS") == ["pass"]
    assert statuses(name, GLA + "-dyT") == ["fail"] and statuses(name, GLA + "-dyS") == ["fail"]
    assert statuses(name, GLA + "-dyE") == ["error"]  # torch refuses to read past the expanded storage


def test_state_grad_wrong_head_is_caught_by_segments_where_the_reference_check_passes():
    name = "mutant:gla-state-grad-wrong-head"
    assert statuses(name, GLA + "-gy", checks=["reference", "segments"]) == ["pass", "fail"]
    assert statuses("fused-cpu", GLA + "-gy", checks=["reference", "segments"]) == ["pass", "pass"]


def test_chunk_states_wrong_size_at_chunk_8_is_caught_only_under_that_configuration():
    name = "mutant:mlstm-chunk-states-wrong-size-at-chunk-8"
    assert statuses(name, MLSTM + "-kc.chunk.4") == ["pass"] and statuses(name, MLSTM + "-kc.chunk.2") == ["pass"]
    assert statuses(name, MLSTM + "-kc.chunk.8") == ["fail"]


def test_the_error_row_of_a_target_that_ends_its_worker_names_its_kernel_configuration(worker_processes):
    # the supervisor writes that row itself: it must carry the id the target's rows carry, or the
    # case is counted twice and its repro runs another configuration
    [row] = gr.check("plugin_targets:segfaults_under_a_chunk", GLA, checks=["reference"], config="matrix")
    assert row.status == "error" and "killed by signal 11" in row.message, row
    assert row.case_id.startswith(GLA + "-kc.chunk."), row.case_id
    assert row.case_id == judged_case_id(Case.from_id(GLA), resolve_target("plugin_targets:segfaults_under_a_chunk"))
