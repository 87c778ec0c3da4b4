"""The error picture of a failure shows the failing tensor (issue 29): for a failing weight
gradient, the repro's console picture and report.html's panel show that tensor's ratio per gate
block and unit, titled with its name, not the error per step of a ``y`` that passed."""

import io

import numpy as np
import pytest
from rich.console import Console

from gradcheck_rnn.cli import commands as console

from gradcheck_rnn.reports import console as render
from gradcheck_rnn.model.case import Case
from gradcheck_rnn.model.compare import compare_tensor
from gradcheck_rnn.rows.result import CaseResult, document_row
from gradcheck_rnn.model.tolerances import Tolerance

CASE_ID = "lstm-L1-uni-I2-H3-T4-B2-len4.2-f64-s3"
TOL = Tolerance(1e-6, 1e-9)


def result(failing: str | None) -> CaseResult:
    """y, x and the layer's w_hh compared; ``failing`` (one of them, or None) is off by a lot."""
    case = Case.from_id(CASE_ID)
    rng = np.random.default_rng(0)
    expected = {"y": rng.normal(size=(4, 2, 3)), "x": rng.normal(size=(4, 2, 2)),
                "l0.fwd.w_hh": rng.normal(size=(12, 3))}
    tensors = []
    for name, b in expected.items():
        a = b.copy()
        if name == failing and a.ndim == 2:
            a[4] += 1.0  # w_hh: gate f (rows 3..5), unit 1
        elif name == failing:
            a[2, 1] += 1.0  # y or x: step 2 of sequence 1
        tensors.append(compare_tensor(name, a, b, TOL, case.config))
    status = "fail" if failing else "pass"
    return CaseResult(CASE_ID, "fused-cpu", status, "lstm", "f64", "all", tensors=tensors)


def printed(result: CaseResult, monkeypatch) -> str:
    recorder = Console(file=io.StringIO(), width=100, color_system=None)
    monkeypatch.setattr(console, "out", recorder)
    console.print_case_result(result.to_json(), per_step=True)
    return recorder.file.getvalue()


def test_the_repro_picture_of_a_failing_weight_gradient_is_that_tensor(monkeypatch):
    text = printed(result("l0.fwd.w_hh"), monkeypatch)
    assert "l0.fwd.w_hh: tolerance ratio per gate block (no time axis)" in text
    assert "max |a − b| per time step" not in text
    f_row = next(line for line in text.splitlines() if line.startswith("│ f "))
    assert f_row.split("│")[3].strip() == "1"  # the worst unit of gate f


@pytest.mark.parametrize("failing", ["x", None])
def test_the_repro_picture_of_a_failing_or_passing_series_is_the_error_per_step(monkeypatch, failing):
    text = printed(result(failing), monkeypatch)
    assert "per time step" in text and "no time axis" not in text
    if failing:
        assert "x: max |a − b| per time step" in text


def titles(row, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from gradcheck_rnn.reports import pictures

    seen = []
    original = Axes.set_title
    monkeypatch.setattr(Axes, "set_title", lambda ax, text, *a, **k: seen.append(text) or original(ax, text, *a, **k))
    assert pictures.case_png(row, [4, 2], 1).startswith(b"\x89PNG")
    return seen


def test_the_report_picture_of_a_failing_weight_gradient_is_that_tensor(monkeypatch):
    seen = titles(document_row(result("l0.fwd.w_hh")), monkeypatch)
    assert "l0.fwd.w_hh: ratio per unit" in seen and "max |a − b| per time step" not in seen


def test_the_report_picture_of_a_failing_series_plots_only_the_failing_one(monkeypatch):
    from gradcheck_rnn.reports import pictures

    row = document_row(result("x"))
    assert [t["name"] for t in pictures.stepped_tensors(row)[0]] == ["x"]
    assert "max |a − b| per time step" in titles(row, monkeypatch)
    passing = document_row(result(None))  # stored short: no per-step series to draw
    assert pictures.stepped_tensors(passing) == ([], None)


def test_a_tensor_without_a_map_is_named_with_its_worst_element():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gradcheck_rnn.reports import pictures

    axes = Figure().subplots()
    pictures._ratio_panel(axes, {"name": "l0.A", "ratio": 12.5, "location": {"unit": 3}}, (), 1)
    assert axes.get_title() == "l0.A: no time axis" and "12.5 at (unit=3)" in axes.texts[0].get_text()
    assert render.per_unit_table(result("l0.fwd.w_hh").tensors[2].to_json(), "lstm").title is not None


@pytest.mark.parametrize("values", [[[40.0], [3.0]], [[40.0, 2.0, 7.0], [3.0, 0.5, 1.0]]], ids=["H=1", "H=3"])
def test_the_per_unit_picture_ticks_whole_units_only(values):
    """At H = 1 the per-unit panel had overlapping fractional ticks (MaxNLocator around one point):
    its ticks are the units, 0 … H − 1, and so are the time steps' at T = 1."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from gradcheck_rnn.reports import pictures

    axes = Figure().subplots()
    tensor = {"name": "l0.fwd.w_hh", "ratio": 40.0, "ratio_map": {"rows": "gate", "cols": "unit", "pool": [1, 1],
                                                                 "ratio": values}}
    pictures._ratio_panel(axes, tensor, ("r", "z"), 1)
    assert list(axes.get_xticks()) == list(range(len(values[0])))
    steps = Figure().subplots()
    pictures._steps_panel(steps, [{"name": "x", "per_step": [0.3]}])
    assert list(steps.get_xticks()) == [0]
