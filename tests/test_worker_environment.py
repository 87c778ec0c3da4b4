"""A target judged in a worker sees the environment the command was started with (docs/contracts.md,
"Isolation"): a target that starts another interpreter works the same under every executor."""

import json
import os

import pytest
from click.testing import CliRunner

from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.checks import check_names
from isolation_targets import CHILD_RECORD_ENV

PROFILE = "[sweep]\ncases = 1\nseed = 2\n[checks]\n" + "".join(
    f"{check} = {'true' if check == 'stateless' else 'false'}\n"
    for check in check_names())


@pytest.fixture
def child_record(tmp_path, monkeypatch, worker_processes):
    """The file the target writes its child's view into; the thread variables a user might set."""
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    monkeypatch.setenv(CHILD_RECORD_ENV, str(tmp_path / "child.json"))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    # pytest's terminal set-up puts these in the C environment only, where a child of this process
    # sees them and os.environ does not: named here, every process agrees on them
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    (tmp_path / "one.toml").write_text(PROFILE)
    return tmp_path / "child.json"


def child_view(record, *options) -> dict:
    """Sweep one case with the recording target; what its child interpreter saw."""
    profile = record.parent / "one.toml"
    result = CliRunner().invoke(main, ["sweep", "-c", str(profile), "-t", "isolation_targets:records_a_child_interpreter",
                                       "--report-dir", str(record.parent / "reports"), *options],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(record.read_text())


@pytest.mark.parametrize("start, options", [("forkserver", ()), ("exec", ()), ("forkserver", ("--in-process",))],
                         ids=["forked-worker", "exec-worker", "in-process"])
def test_a_target_s_child_interpreter_sees_the_command_s_environment(child_record, monkeypatch, start, options):
    monkeypatch.setenv("GRADCHECK_RNN_WORKER_START", start)  # exec: the workers' start on a Dask worker
    seen = child_view(child_record, *options)
    assert seen["environ"] == dict(os.environ)  # no import path, thread variable or other change of ours
    import numpy

    assert seen["numpy"] == numpy.__file__
