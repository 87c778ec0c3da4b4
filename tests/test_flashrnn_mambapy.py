"""The FlashRNN and mambapy targets, in this process (both are in the ``test`` extra; issue 27).

The maps are checked both ways: the real targets pass cases of every mode they take (gradients of
our parameters come back through the same map), and a planted slip of the kind a misread gate
order or bias placement produces (tests/foreign_torch_targets.py) fails, while the modes it does
not touch pass. The length groups are checked by counting the library calls: one per distinct
length, and one with the whole batch for a fixed-length case. Each decline says why.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from gradcheck_rnn import Case
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.targets import resolve_target

pytest.importorskip("flashrnn")
pytest.importorskip("mambapy")

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Both directions, two layers, variable lengths with a 0, the frozen paths, no initial state.
# The first LSTM case is tests/test_builtin_targets.py's (its JAX reference program is compiled once
# per session); the two-layer bidirectional LSTM (~6 s of reference compile) is slow-marked.
FLASHRNN_CASES = ("lstm-L1-bi-I2-H3-T3-B2-len3.1-f32-s5", "gru-L2-bi-I3-H4-T5-B3-len5.0.4-f64-s8-wx",
                  "rnn_tanh-L1-uni-I2-H3-nobias-T4-B2-len2.4-f32-s11-wparams", "lstm-L1-uni-I2-H3-T4-B2-len4.4-f32-s3-z")
FLASHRNN_SLOW_CASES = ("lstm-L2-bi-I3-H4-T5-B3-len5.2.4-f32-s8",)
# One s6 case in the default suite, tests/test_builtin_targets.py's (each s6 bucket compiles a JAX
# reference program: ~4 s); the rest slow.
MAMBAPY_CASES = ("s6-L1-uni-I2-H3-N2-R1-T4-B3-len4.0.2-f32-s5",)
MAMBAPY_SLOW_CASES = ("s6-L2-uni-I3-H4-N2-R1-T7-B3-len7.4.1-f32-s5", "s6-L1-uni-I2-H3-N3-R2-nobias-T5-B2-len5.5-f32-s6-z",
                      "s6-L3-uni-I2-H2-N1-R1-T6-B4-len6.0.3.3-f32-s7-wparams")


def failing(result) -> set[str]:
    return {t.name for t in result.tensors if not t.passed}


@pytest.mark.parametrize(("name", "case_id"), [("flashrnn-vanilla", c) for c in FLASHRNN_CASES]
                         + [("flashrnn-fwbw", FLASHRNN_CASES[0]), ("flashrnn-fwbw", FLASHRNN_CASES[3])]
                         + [pytest.param(name, c, marks=pytest.mark.slow) for c in FLASHRNN_SLOW_CASES
                            for name in ("flashrnn-vanilla", "flashrnn-fwbw")]
                         + [("mambapy", c) for c in MAMBAPY_CASES]
                         + [pytest.param("mambapy", c, marks=pytest.mark.slow) for c in MAMBAPY_SLOW_CASES])
def test_each_target_passes_the_modes_it_takes(name, case_id):
    result = judge_one(Case.from_id(case_id), resolve_target(name))
    assert result.status == "pass", (name, case_id, result.message)


S6 = "s6-L1-uni-I2-H3-N2-R1-T4-B3-len4.1.2-f32-s3"
# Two heads, initial states, lengths 4 and 2; one JAX reference program (bucket) for all its variants.
SLSTM = "slstm-L1-uni-I2-H4-NH2-T4-B2-len4.2-f32-s3"
SLSTM_NOBIAS = "slstm-L1-uni-I2-H4-NH2-nobias-T4-B2-len4.2-f32-s3"


@pytest.mark.parametrize(("name", "case_id", "judged_as"), [
    ("flashrnn-vanilla", SLSTM, SLSTM),
    ("flashrnn-fwbw", f"{SLSTM}-z", SLSTM.replace("-T4", "-mconst-T4") + "-z"),
    pytest.param("flashrnn-vanilla", "slstm-L2-bi-I3-H4-NH2-T5-B3-len5.0.3-f64-s8", None, marks=pytest.mark.slow),
    pytest.param("flashrnn-fwbw", f"{SLSTM}-wparams", None, marks=pytest.mark.slow),
    pytest.param("flashrnn-fwbw", "slstm-L2-bi-I3-H6-NH3-T5-B3-len5.0.3-f32-s8-gstates-z", None, marks=pytest.mark.slow),
])
def test_flashrnn_slstm_passes_under_the_convention_its_backend_declares(name, case_id, judged_as):
    """vanilla (autograd) is judged on the true derivative; vanilla_fwbw, whose backward holds m
    constant, declares it and is judged on the -mconst case, through the in-process wrapper."""
    target = resolve_target(name)
    assert target.impl.stabilizer_gradient == ("constant" if name == "flashrnn-fwbw" else "true")
    result = judge_one(Case.from_id(case_id), target)
    assert result.status == "pass", (name, case_id, result.message)
    assert judged_as is None or result.case_id == judged_as


def test_flashrnn_fwbw_drops_the_initial_stabilizer_gradient():
    """FlashRNN 1.0.8's vanilla_fwbw returns dm0 = 0 (docs/flashrnn-1.0.8/slstm_initial_m.py): with
    initial states, c0's m third fails and nothing else does; the vanilla backend passes the case."""
    result = judge_one(Case.from_id(SLSTM), resolve_target("flashrnn-fwbw"))
    assert result.status == "fail" and failing(result) == {"c0"}, result.message
    [c0] = [t for t in result.tensors if t.name == "c0"]
    assert c0.location["unit"] >= 2 * 4 and c0.a == 0, c0.location  # [c | n | m]: the m third, H = 4


@pytest.mark.parametrize(("slips", "caught", "untouched"), [
    ("flashrnn_vanilla_slips", {"gru-L1-uni-I2-H3-T4-B2-len4.2-f32-s3": {"y", "hy", "l0.fwd.w_hh"},
                                "lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s3": {"y", "hy", "cy", "l0.fwd.b_ih"}},
     "rnn_tanh-L1-uni-I2-H3-T4-B2-len4.2-f32-s3"),
    ("flashrnn_fwbw_slips", {"lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s3": {"y", "hy", "cy", "l0.fwd.b_ih"}},
     "lstm-L1-uni-I2-H3-nobias-T4-B2-len4.2-f32-s3"),
    ("flashrnn_vanilla_slstm_swapped_bias", {SLSTM: {"y", "hy", "cy", "l0.fwd.b"}}, SLSTM_NOBIAS),
    ("flashrnn_fwbw_slstm_swapped_bias", {f"{SLSTM}-z": {"y", "hy", "cy", "l0.fwd.b"}}, f"{SLSTM_NOBIAS}-z"),
    ("mambapy_swapped_in_proj", {S6: {"y", "hy", "x", "l0.fwd.w_in"}}, None),
    ("mambapy_no_delta_bias", {S6: {"y", "hy", "l0.fwd.b_dt"}}, "s6-L1-uni-I2-H3-N2-R1-nobias-T4-B3-len4.1.2-f32-s3"),
])
def test_a_planted_map_slip_is_caught(slips, caught, untouched):
    """The slipped map fails on the tensors its slip touches, and a case it does not touch passes."""
    target = resolve_target(f"foreign_torch_targets:{slips}")
    for case_id, touched in caught.items():
        result = judge_one(Case.from_id(case_id), target)
        assert result.status == "fail" and touched <= failing(result), (case_id, failing(result), result.message)
    if untouched is not None:
        result = judge_one(Case.from_id(untouched), target)
        assert result.status == "pass", (untouched, result.message)


def _library_calls(monkeypatch, name: str) -> tuple[object, list[tuple[int, int]]]:
    """The target's own object, and the (length, batch) of each library call it makes."""
    impl = resolve_target(name).impl.impl  # Target -> LocalForeignTarget -> the target file's object
    calls: list[tuple[int, int]] = []
    real = impl.forward_group

    def spy(case, params, x, h0, c0):
        calls.append(tuple(x.shape[:2]))
        return real(case, params, x, h0, c0)

    monkeypatch.setattr(impl, "forward_group", spy)
    return impl, calls


@pytest.mark.parametrize(("name", "mode"), [("flashrnn-vanilla", "gru-L1-uni-I2-H3"), ("mambapy", "s6-L1-uni-I2-H3-N2-R1")])
def test_equal_lengths_are_one_call_each_and_a_fixed_length_batch_is_never_split(monkeypatch, name, mode):
    impl, calls = _library_calls(monkeypatch, name)
    impl.run(Case.from_id(f"{mode}-T5-B4-len5.5.5.5-f32-s1"))
    assert calls == [(5, 4)]
    calls.clear()
    out = impl.run(Case.from_id(f"{mode}-T5-B5-len5.2.0.2.5-f32-s1"))
    assert calls == [(2, 2), (5, 2)]  # the length 0 makes no call: its y is 0, its hy is h0
    assert (out["y"][:, 2] == 0).all() and (out["y"][2:, 1] == 0).all()
    calls.clear()
    empty = Case.from_id(f"{mode}-T5-B2-len0.0-f32-s1-wparams")  # no call at all, and zero gradients
    out = impl.run(empty)
    assert calls == [] and all((g == 0).all() for g in out["grads"].values()) and set(out["grads"]) == empty.wants


def test_declines_say_why():
    vanilla, fwbw, triton, cuda, mamba = (resolve_target(n) for n in (
        "flashrnn-vanilla", "flashrnn-fwbw", "flashrnn-triton", "flashrnn-cuda", "mambapy"))
    relu = Case.from_id("rnn_relu-L1-uni-I2-H3-T4-B1-len4-f32-s3")
    assert "FlashRNN has no rnn_relu cell" in vanilla.supports_case(relu)
    assert "no projections" in vanilla.supports_case(Case.from_id("lstm-L1-uni-I2-H3-P2-T4-B1-len4-f32-s3"))
    gru = Case.from_id("gru-L1-uni-I2-H4-T4-B1-len4-f32-s3")
    assert '"Function gru not implemented for vanilla_fwbw backend."' in fwbw.supports_case(gru)
    assert "float32, float16 and bfloat16 kernels only" in fwbw.supports_case(Case.from_id("lstm-L1-uni-I2-H4-T4-B1-len4-f64-s3"))
    assert "triton_fused backend has no gru kernel" in triton.supports_case(gru)
    for target in (vanilla, fwbw, triton):
        assert "logsigmoid(fbar)" in target.supports_case(Case.from_id("slstm-L1-uni-I2-H4-expf-T4-B1-len4-f32-s3"))
    assert "slstm_pt_registry raises KeyError: 'float64'" in fwbw.supports_case(
        Case.from_id("slstm-L1-uni-I2-H4-T4-B1-len4-f64-s3"))
    if not torch.cuda.is_available():
        lstm = Case.from_id("lstm-L1-uni-I2-H4-T4-B1-len4-f32-s3")
        assert "Block pointers have been removed" in triton.supports_case(lstm)
        assert "needs a CUDA device" in cuda.supports_case(lstm)
    assert "not lstm" in mamba.supports_case(Case.from_id("lstm-L1-uni-I2-H4-T4-B1-len4-f32-s3"))
    s6 = "s6-L1-uni-I2-H3-N2-R1{}-T4-B1-len4-{}-s3"
    assert "self.A_log.float()" in mamba.supports_case(Case.from_id(s6.format("", "f64")))
    assert "always applies softplus" in mamba.supports_case(Case.from_id(s6.format("-nosoftplus", "f32")))
    assert "always gates its output" in mamba.supports_case(Case.from_id(s6.format("-nogate", "f32")))


def test_the_standalone_scripts_show_each_library_behaviour(monkeypatch, capsys):
    """docs/flashrnn-1.0.8/refusals.py and docs/mambapy-1.2.0/float64_ssm.py, run here (both libraries
    are in this venv); the interpreter refusal needs TRITON_INTERPRET=1 before FlashRNN's kernels load."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for script in (DOCS / "flashrnn-1.0.8" / "refusals.py", DOCS / "flashrnn-1.0.8" / "slstm_initial_m.py",
                   DOCS / "mambapy-1.2.0" / "float64_ssm.py"):
        runpy.run_path(str(script), run_name="__main__")
    verdicts = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("CONFIRMED", "NOT REPRODUCED"))]
    assert verdicts == ["CONFIRMED FlashRNN 1.0.8 refuses what the flashrnn targets decline",
                        "CONFIRMED FlashRNN 1.0.8's vanilla_fwbw sLSTM drops the initial stabiliser's gradient (dm0 = 0)",
                        "CONFIRMED mambapy computes A and D in float32 in a float64 block"]


def test_the_protocol_carries_a_familys_options():
    """mambapy@PYTHON reads s6's options from the client's config: the host sends them, defaults included."""
    from gradcheck_rnn.targets.foreign import client

    wire = Case.from_id("s6-L1-uni-I2-H3-N2-R1-nogate-T4-B1-len4-f32-s3").config.to_wire()
    assert wire["attributes"]["options"] == {"state_dim": 2, "dt_rank": 1, "softplus": True, "gated": False}
    assert client.make_config(wire).option("gated") is False
    assert Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f32-s3").config.to_wire()["attributes"]["options"] == {}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "case_id"), [("mambapy", MAMBAPY_SLOW_CASES[0]), ("flashrnn-vanilla", FLASHRNN_CASES[1]),
                                            ("flashrnn-fwbw", f"{SLSTM}-z")])
def test_each_target_passes_in_another_interpreter(name, case_id):
    """NAME@PYTHON, with this venv's python as the other interpreter (the client imports torch there);
    the convention flashrnn-fwbw declares comes back from the client, so its rows are the -mconst case's."""
    import sys

    target = resolve_target(f"{name}@{sys.executable}")
    try:
        result = judge_one(Case.from_id(case_id), target)
    finally:
        target.impl.close()
    assert result.status == "pass", result.message
    assert ("-mconst" in result.case_id) == (name == "flashrnn-fwbw")


class _Missing:
    """A meta-path finder for which ``name`` is not installed, as in a venv that lacks it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


@pytest.fixture
def without_packaging(monkeypatch):
    """flashrnn as `pip install ".[flashrnn]"` left it before issue 38: `packaging` missing, so
    `import flashrnn` fails. Every module imported meanwhile is dropped again afterwards."""
    import sys

    saved = dict(sys.modules)
    for name in [n for n in sys.modules if n.partition(".")[0] in ("packaging", "flashrnn")]:
        del sys.modules[name]
    monkeypatch.setattr(sys, "meta_path", [_Missing("packaging"), *sys.meta_path])
    yield
    for name in set(sys.modules) - set(saved):
        del sys.modules[name]
    sys.modules.update(saved)


def test_a_named_target_that_cannot_load_is_a_usage_error_with_its_import_error(without_packaging, tmp_path):
    """Issue 38: it was a skip of every case (exit 5, "flashrnn is not importable here") and a
    "next:" hint about narrowing flags, hiding the ModuleNotFoundError."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    result = CliRunner().invoke(main, ["sweep", "-c", "modern", "-n", "2", "-t", "flashrnn-vanilla",
                                       "--report-dir", str(tmp_path / "reports")])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: target 'flashrnn-vanilla' cannot load")
    assert "(ModuleNotFoundError: No module named 'packaging')" in line and "next:" not in line
    assert not (tmp_path / "reports").exists()
