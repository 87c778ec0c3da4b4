"""One way through (issue 25, 8 and 10): a sweep reads its profile once, resolves its targets once
in the supervisor, keeps no case's arrays there when workers judge, and every command shares one
definition of each option."""

import click
import pytest
from click.testing import CliRunner

import gradcheck_rnn.run.advice as advice
import gradcheck_rnn.model.case as case_module
import gradcheck_rnn.model.profiles as generate
import gradcheck_rnn.targets as targets
from gradcheck_rnn.cli import main

# the pipeline as users run it: judging in worker processes (see conftest.py)
pytestmark = pytest.mark.usefixtures("worker_processes")


def _counting(monkeypatch, module, name: str) -> list:
    calls: list = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_sweep_reads_its_profile_and_resolves_its_targets_once_and_draws_no_arrays(monkeypatch, tmp_path):
    advice.load.cache_clear()  # the hints read the shipped profiles, once each per process
    loads = _counting(monkeypatch, generate, "load_profile")
    hinted = _counting(monkeypatch, advice, "load")
    resolved = _counting(monkeypatch, targets, "resolve_target")
    drawn = _counting(monkeypatch, case_module, "make_case")  # the supervisor's draws; workers are other processes
    result = CliRunner().invoke(main, ["sweep", "-n", "2", "-t", "fused-cpu", "-t", "torch-native",
                                       "--report-dir", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(loads) - len(set(hinted)) == 1 and len(resolved) == 2 and drawn == []


def _options(command: click.Command) -> dict[str, click.Option]:
    return {option.name: option for option in command.params if isinstance(option, click.Option)}


@pytest.mark.parametrize("name", ["workers", "case_timeout", "in_process", "rtol", "atol", "targets", "report_dir"])
def test_an_option_shared_by_commands_has_one_definition(name):
    """--case-timeout once had two helps; an option that several commands take reads the same in each."""
    helps = {command: _options(main.commands[command])[name].help for command in main.commands
             if name in _options(main.commands[command])}
    assert len(helps) >= 2 and len(set(helps.values())) == 1, helps


def test_the_reports_come_from_one_row_store_read_back_as_little_as_possible(monkeypatch, tmp_path):
    """The tallies of results.json are made from exactly its rows as they were written (one source
    of truth), and publishing reads the row file back for results.json and junit.xml only (eight
    times before the tallies and failing rows were kept as rows arrived)."""
    import json

    from gradcheck_rnn.rows import log as stream
    from gradcheck_rnn.rows.store import Tally

    reads = _counting(monkeypatch, stream.StoredRows, "lines")
    result = CliRunner().invoke(main, ["sweep", "-n", "2", "-t", "fused-cpu", "-t", "mutant:truncated-bptt",
                                       "--report-dir", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert len(reads) <= 4  # results.json copies the lines once; junit.xml counts, then writes per target
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    stored = {key: document[key] for key in Tally().document_part()}
    assert stored == json.loads(json.dumps(Tally.of(document["results"]).document_part()))


def test_the_header_names_the_executor_and_the_built_ins_a_default_sweep_leaves_out(tmp_path):
    runner = CliRunner()
    default = runner.invoke(main, ["sweep", "-n", "1", "--report-dir", str(tmp_path)], catch_exceptions=False)
    header = " ".join(default.output.split("\n\n")[0].split())
    assert "judging 1 case × fused-cpu, torch-native in 1 worker process (" in header, default.output
    # CUDA-only foreign built-ins are "no CUDA device" on a CPU machine, never "installed: name them"
    assert ("left out: torch-native-cuda, fused-gpu, flashrnn-triton, flashrnn-cuda, fla-chunk, mlstm-triton (no CUDA device)" in header
            and "keras" in header), header
    named = runner.invoke(main, ["sweep", "-n", "1", "-t", "fused-cpu", "--in-process", "--report-dir",
                                 str(tmp_path)], catch_exceptions=False)
    assert "judging 1 case × fused-cpu in this process (--in-process: not isolated)" in named.output
    assert "left out" not in named.output


def test_an_unreachable_dask_scheduler_is_exit_2_and_leaves_no_report_folder(monkeypatch, tmp_path):
    pytest.importorskip("distributed")
    from gradcheck_rnn.run import dask_executor

    monkeypatch.setattr(dask_executor, "CONNECT_TIMEOUT", 0.2)
    folder = tmp_path / "new" / "reports"
    result = CliRunner().invoke(main, ["sweep", "-n", "1", "-t", "fused-cpu", "--executor", "dask", "--scheduler",
                                       "tcp://127.0.0.1:9", "--report-dir", str(folder)], catch_exceptions=False)
    assert result.exit_code == 2 and "cannot reach the Dask scheduler" in result.output, result.output
    assert not folder.exists()
