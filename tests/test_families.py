"""The family registry: the cuDNN cells as families, and a user family (minGRU) defined outside
the package, judged through both references and caught when its target slips."""

import dataclasses
import json
import re
from importlib.metadata import EntryPoint

import pytest
from click.testing import CliRunner

import gradcheck_rnn as gr
from family_targets import MINGRU, mingru_slipped, mingru_target
from gradcheck_rnn import Case, RNNConfig, families
from gradcheck_rnn.cli import main
from gradcheck_rnn.config import GATE_NAMES
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import CUDNN_MODES, family, modes, register
from gradcheck_rnn.layout import param_shapes


def test_cudnn_cells_are_the_first_families_in_their_historical_order():
    assert CUDNN_MODES == ("rnn_relu", "rnn_tanh", "lstm", "gru") == modes()[:4]
    assert {m: family(m).gates for m in CUDNN_MODES} == GATE_NAMES
    assert [m for m in modes() if family(m).cell_state] == ["lstm", "slstm", "mlstm"]
    with pytest.raises(UsageError, match="unknown mode 'nosuch'"):
        RNNConfig("nosuch", 1, False, 2, 3, 4, 1)
    with pytest.raises(ValueError, match="already registered"):
        register(dataclasses.replace(family("gru")))


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
                       "linearity = false\nstateless = false\nfd = false\n")
    reports = tmp_path / "reports"
    code, output = invoke("sweep", "--family", "family_targets:MINGRU", "-c", profile,
                          "-t", "family_targets:mingru_slipped", "--report-dir", reports)
    assert code == 1, output
    monkeypatch.delitem(families._REGISTRY, "mingru")  # as in a new process
    code, output = invoke("sweep", "--last-failed", "--report-dir", reports)
    assert code == 1 and "rerunning the 1 rows that did not pass" in output, output


@pytest.mark.parametrize("args, message", [
    (["--family", "no_such_module:CELLS"], "cannot import module|could not be loaded"),
    (["--family", "family_targets:NOT_A_FAMILY"], "is a object, not a gradcheck_rnn.families.Family"),
    (["--family", "family_targets"], "give package.module:NAME"),
    (["--family", "family_targets:TOKEN_TAKEN"], "has the token 'gru', which another family already has"),
    (["--mode", "nosuch"], "unknown mode 'nosuch'.*--family package.module:NAME"),
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
