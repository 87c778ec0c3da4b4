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


def set_environ(name: str, value: str | None) -> None:
    """Set (or, for None, remove) one variable in this process's environment: run on each Dask worker."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@pytest.mark.xdist_group("dask")
def test_under_dask_a_target_s_child_sees_the_dask_worker_s_environment(child_record, dask_cluster):
    """On a cluster the command's machine is not the worker's: the target sees its Dask worker's
    environment as that worker has it, with nothing of the tool's added. The shared cluster started
    before this test's fixture named the record file, so its workers are told it here."""
    distributed = pytest.importorskip("distributed")
    with distributed.Client(dask_cluster) as client:
        client.run(set_environ, CHILD_RECORD_ENV, str(child_record))
        try:
            environs = list(client.run(lambda: dict(os.environ)).values())
            seen = child_view(child_record, "--executor", "dask", "--scheduler", dask_cluster.scheduler_address)
        finally:
            client.run(set_environ, CHILD_RECORD_ENV, None)
    # the worker that judged it, whichever of the cluster's (a worker restarted by an earlier test
    # may differ from the other in what its nanny set)
    assert seen["environ"] in environs, (seen["environ"], environs)
    assert seen["environ"].get("PYTHONPATH") == os.environ.get("PYTHONPATH")
