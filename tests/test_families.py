"""The family registry: the cuDNN cells as families, and a user family (minGRU) defined outside
the package, judged through both references and caught when its target slips."""

import dataclasses
import json
import re
from importlib.metadata import EntryPoint

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import gradcheck_rnn as gr
from family_targets import MINGRU, mingru_slipped, mingru_target
from gradcheck_rnn import Case, RNNConfig, families
from gradcheck_rnn.cli import main
from gradcheck_rnn.model.rnn_config import GATE_NAMES
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import CUDNN_MODES, family, modes, register
from gradcheck_rnn.families.ops import jax_ops, torch_ops
from gradcheck_rnn.model.layout import param_shapes


def test_cudnn_cells_are_the_first_families_in_their_historical_order():
    assert CUDNN_MODES == ("rnn_relu", "rnn_tanh", "lstm", "gru") == modes()[:4]
    assert {m: family(m).gates for m in CUDNN_MODES} == GATE_NAMES
    assert [m for m in modes() if family(m).cell_state] == ["lstm", "slstm", "mlstm"]
    with pytest.raises(UsageError, match="unknown mode 'nosuch'"):
        RNNConfig("nosuch", 1, False, 2, 3, 4, 1)
    with pytest.raises(ValueError, match="already registered"):
        register(dataclasses.replace(family("gru")))


def _torch_nn_cell(config: RNNConfig, unit: dict) -> torch.nn.Module:
    """torch.nn's one-step cell of the config's mode with ``unit``'s parameters (float64)."""
    if config.mode == "lstm":  # torch.nn.LSTMCell has no projection: one step of a one-layer LSTM
        cell = torch.nn.LSTM(config.input_size, config.hidden_size, bias=config.bias, proj_size=config.proj_size)
    elif config.mode == "gru":
        cell = torch.nn.GRUCell(config.input_size, config.hidden_size, bias=config.bias)
    else:
        cell = torch.nn.RNNCell(config.input_size, config.hidden_size, bias=config.bias,
                                nonlinearity=config.mode[4:])
    cell = cell.double()
    suffix = "_l0" if config.mode == "lstm" else ""
    with torch.no_grad():
        for kind, value in unit.items():
            getattr(cell, f"{'weight' if kind.startswith('w_') else 'bias'}_{kind[2:]}{suffix}").copy_(value)
    return cell


@pytest.mark.parametrize("config", [RNNConfig("lstm", 1, False, 3, 4, 1, 5, proj_size=2),
                                    RNNConfig("lstm", 1, False, 3, 4, 1, 5, bias=False),
                                    RNNConfig("gru", 1, False, 3, 4, 1, 5),
                                    RNNConfig("rnn_tanh", 1, False, 3, 4, 1, 5, bias=False),
                                    RNNConfig("rnn_relu", 1, False, 3, 4, 1, 5)],
                         ids=lambda c: f"{c.mode}-P{c.proj_size}-bias{c.bias}")
def test_each_cudnn_family_steps_as_torch_nn_in_both_namespaces(config):
    """Every family has a step, the cuDNN cells too: one step of a batch of rows, on torch tensors
    and on jax arrays, is torch.nn's cell; and no family is asked whether it has one."""
    assert not hasattr(families.Family, "has_step")
    rng = np.random.default_rng(3)
    unit = {k: torch.from_numpy(rng.uniform(-0.5, 0.5, shape)) for k, shape in config.family.unit_shapes(config, 0).items()}
    x, h = torch.from_numpy(rng.standard_normal((5, 3))), torch.from_numpy(rng.standard_normal((5, config.h_size)))
    c = torch.from_numpy(rng.standard_normal((5, config.c_size))) if config.has_cell_state else None
    cell = _torch_nn_cell(config, unit)
    with torch.no_grad():
        if config.mode == "lstm":
            _, (want_h, want_c) = cell(x[None], (h[None], c[None]))
            want_h, want_c = want_h[0], want_c[0]
        else:
            want_h, want_c = cell(x, h), None
        y, got_h, got_c = config.family.step(torch_ops(), unit, x, h, c, config)
    pytest.importorskip("jax")
    from gradcheck_rnn.references.jax_cudnn import x64

    with x64():
        as_jax = {k: np.asarray(v) for k, v in unit.items()}
        jy, jh, jc = config.family.step(jax_ops(), as_jax, x.numpy(), h.numpy(), None if c is None else c.numpy(), config)
        jy, jh, jc = np.asarray(jy), np.asarray(jh), None if jc is None else np.asarray(jc)
    for got in (y, got_h, jy, jh):
        np.testing.assert_allclose(np.asarray(got), want_h.numpy(), rtol=0, atol=1e-12)
    if config.has_cell_state:
        for got in (got_c, jc):
            np.testing.assert_allclose(np.asarray(got), want_c.numpy(), rtol=0, atol=1e-12)
    else:
        assert got_c is None and jc is None


register(MINGRU)  # what --family family_targets:MINGRU does in every process


def test_a_user_family_is_judged_and_a_slip_in_its_target_is_caught():
    case = Case.from_id("mingru-L2-uni-I2-H3-T5-B3-len5.2.0-f64-s4")
    assert list(param_shapes(case.config)) == ["l0.fwd.w_z", "l0.fwd.w_h", "l1.fwd.w_z", "l1.fwd.w_h"]
    good = gr.check(mingru_target, case, checks=["reference", "padding", "future", "fd"])
    assert {r.status for r in good} == {"pass"}, [r.message for r in good]
    slipped = gr.check(mingru_slipped, case, checks=["reference"])
    assert [r.status for r in slipped] == ["fail"]


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def test_family_flag_loads_a_user_family_in_the_worker_processes_too(tmp_path, worker_processes):
    """--family is carried by the run spec: two worker processes rebuild minGRU cases from their ids,
    the repro line names the family, and repro with it catches the slip."""
    reports = tmp_path / "reports"
    code, output = invoke("sweep", "--family", "family_targets:MINGRU", "--mode", "mingru", "-n", "2",
                          "--workers", "2",
                          "-t", "family_targets:mingru_slipped", "--report-dir", reports)
    assert code == 1, output
    document = json.loads((reports / "latest" / "results.json").read_text())
    assert document["spec"]["families"] == ["family_targets:MINGRU"]
    failing = [row for row in document["results"] if row["status"] == "fail"]
    assert failing and all(row["repro_options"] == "--family family_targets:MINGRU" for row in failing)
    code, output = invoke("repro", failing[0]["case_id"], "--family", "family_targets:MINGRU",
                          "-t", "family_targets:mingru_target")
    assert code == 0, output


def test_last_failed_reruns_a_run_whose_profile_draws_a_user_family(tmp_path, monkeypatch):
    """--last-failed takes the stored run's families with its profile: they are registered before
    the profile that names their token is read (a fresh process knows only the built-in ones)."""
    profile = tmp_path / "mingru.toml"
    profile.write_text("[sweep]\ncases = 2\n[draw]\nmodes = { mingru = 1 }\n[checks]\nreference = true\n"
                       "determinism = false\npadding = false\npermutation = false\nfuture = false\n"
                       "linearity = false\nstateless = false\nsegments = false\npoisoned = false\nfd = false\njvp = false\ngradgrad = false\n")
    reports = tmp_path / "reports"
    code, output = invoke("sweep", "--family", "family_targets:MINGRU", "-c", profile,
                          "-t", "family_targets:mingru_slipped", "--report-dir", reports)
    assert code == 1, output
    monkeypatch.delitem(families._REGISTRY, "mingru")  # as in a new process
    code, output = invoke("sweep", "--last-failed", "--report-dir", reports)
    assert code == 1 and "rerunning the 1 rows that did not pass" in output, output


@pytest.mark.parametrize("args, message", [
    (["--family", "no_such_module:CELLS"], "no module named 'no_such_module' on PYTHONPATH"),
    (["--family", "family_targets:NOT_A_FAMILY"], "is a object, not a gradcheck_rnn.families.Family"),
    (["--family", "family_targets"], "give package.module:NAME"),
    (["--family", "family_targets:TOKEN_TAKEN"], "has the token 'gru', which another family already has"),
    (["--mode", "nosuch"], "unknown mode 'nosuch'; a family's token, built in or loaded with --family"),
])
def test_a_family_that_cannot_be_loaded_is_one_sentence_and_exit_2(args, message):
    code, output = invoke("sweep", *args, "-n", "1", "-t", "fused-cpu")
    assert code == 2
    assert re.search(message, " ".join(output.split())), output
    assert "Traceback" not in output


def test_an_installed_entry_point_family_loads_by_its_token(monkeypatch):
    point = EntryPoint(name="mingru", value="family_targets:MINGRU", group=families.ENTRY_POINT_GROUP)
    wrong = EntryPoint(name="mingru_alias", value="family_targets:MINGRU", group=families.ENTRY_POINT_GROUP)
    monkeypatch.setattr(families, "_installed", lambda: {"mingru": point, "mingru_alias": wrong})
    assert "mingru_alias" in families.modes()
    assert families.family("mingru") is MINGRU
    with pytest.raises(UsageError, match="named by its family's token"):
        families.family("mingru_alias")


def test_registered_user_families_are_named_for_other_processes():
    assert families.user_families()["mingru"] == "my_family:MINGRU"
    assert "lstm" not in families.user_families()
