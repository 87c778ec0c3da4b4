"""Runs at scale: the run spec, worker processes, shards and merge, the Dask executor, isolation.

Worker processes and the Dask cluster cost seconds to start (torch and jax in each), so these
tests judge few cases; what they pin is that every executor gives the rows of a serial run.
"""

import importlib
import json
import os
import pickle
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_rnn.model.case import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.model.profiles import draw_case_ref, draw_cases, load_profile
from gradcheck_rnn.judging.checks import check_names
from gradcheck_rnn.judging.judge import judged_case_id
from gradcheck_rnn.targets import resolve_target
from gradcheck_rnn.model.narrowing import Narrowing
from gradcheck_rnn.run import Execution, Judging, OnRow, RunSpec, Selection, execute
from gradcheck_rnn.run.dask_executor import _pool, chunk_size, chunks, judge_chunk, lost_chunk_facts, lost_rows
from gradcheck_rnn.run.pool import death_reason, group_jobs, shape_group
from gradcheck_rnn.run.worker import WorkerSetup
from gradcheck_rnn.model.tolerances import Tolerances
from isolation_targets import CHILD_RECORD_ENV
from test_worker_environment import child_record  # noqa: F401 (a fixture)

TESTS = Path(__file__).parent
# A profile of the default draw that runs the reference comparison only: one row per case × target.
REFERENCE_ONLY = "[checks]\n" + "".join(f"{name} = {'true' if name == 'reference' else 'false'}\n"
                                       for name in check_names())


@pytest.fixture(autouse=True)
def plugins_importable(monkeypatch, worker_processes):
    monkeypatch.syspath_prepend(str(TESTS))


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def document(report_dir: Path) -> dict:
    return json.loads((report_dir / "latest" / "results.json").read_text())


def comparable(rows) -> list[dict]:
    """Result rows without what depends on the machine's speed."""
    return [{k: v for k, v in (row if isinstance(row, dict) else row.to_json()).items() if k != "seconds"}
            for row in rows]


def reference_only_profile(tmp_path) -> str:
    path = tmp_path / "reference-only.toml"
    path.write_text(REFERENCE_ONLY)
    return str(path)


# --- the run spec ------------------------------------------------------------------------------

def test_spec_round_trips_through_results_json_and_draws_the_sweep_cases():
    gru = Narrowing(modes=("gru",))
    spec, _ = RunSpec.build("ci", ("fused-cpu",), Selection(cases=7, seed=3, narrowing=gru, shard=(2, 3)),
                            Judging(rtol=1e-3))
    assert RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    assert list(spec.indices) == [1, 4]
    profile = gru.apply(load_profile("ci"))
    whole = list(draw_cases(profile, 3, 7))
    assert [(i, c.id) for i, c in spec.draw()] == [(1, whole[1].id), (4, whole[4].id)]
    assert spec.repro_options == "--config ci --rtol 0.001"


@pytest.mark.parametrize("cases, shard", [(None, None), (7, (2, 3)), (7, (3, 3)), (2, (3, 3)), (None, (1, 4))])
def test_the_worker_count_is_chosen_from_the_cases_the_spec_will_judge(cases, shard):
    """sweep picks --workers before the slow set-up (RunSpec.count_cases reads only the profile)."""
    spec, _ = RunSpec.build("ci", ("fused-cpu",), Selection(cases=cases, shard=shard))
    assert RunSpec.count_cases("ci", cases, shard) == len(spec.indices)


def test_a_profile_is_read_once_and_an_edited_one_is_refused_to_a_stored_spec(tmp_path):
    """The spec holds the profile it was built from (one load per run); a spec read back from
    results.json (merge) refuses a profile file that changed since."""
    path = tmp_path / "mine.toml"
    path.write_text("[sweep]\ncases = 2\n")
    spec, _ = RunSpec.build(str(path), ("fused-cpu",))
    path.write_text("[sweep]\ncases = 3\n[draw]\nmodes = { gru = 1 }\n")
    assert len(list(spec.draw())) == 2
    with pytest.raises(UsageError, match="has changed since"):
        list(RunSpec.from_json(spec.to_json()).draw())


@pytest.mark.parametrize("args, words", [
    (["--shard", "4/3"], "--shard '4/3' is not allowed"),
    (["--shard", "two"], "give K/N with 1 <= K <= N"),
    (["--in-process", "--case-timeout", "5"], "--case-timeout needs worker processes"),
    (["--in-process", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:8786"], "choose one"),
    (["--executor", "dask"], "--executor dask needs --scheduler"),
    (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler is only for --executor dask"),
])
def test_bad_execution_options_are_one_sentence_and_exit_2(tmp_path, args, words):
    code, output = invoke("sweep", "-t", "fused-cpu", "-n", 1, *args, "--report-dir", tmp_path)
    assert code == 2 and words in output and "Traceback" not in output, output
    assert not (tmp_path / "latest").exists()


# --- grouping by JAX shape bucket --------------------------------------------------------------

def test_shape_groups_are_the_jax_reference_buckets():
    from gradcheck_rnn.references.jax_cudnn import bucket_key

    cases = list(draw_cases(load_profile("nightly"), 5, 60))
    for a in cases:
        for b in cases[:20]:
            assert (shape_group(a.config) == shape_group(b.config)) == (bucket_key(a.config) == bucket_key(b.config))
    jobs = list(enumerate(cases))
    groups = group_jobs(jobs)
    assert sorted(i for g in groups.values() for i, _ in g) == list(range(60))
    parts = list(chunks(jobs, chunk_size(len(jobs), slots=2), window=2))
    assert sorted(i for part in parts for i, _ in part) == list(range(60))
    assert all(len({shape_group(c.config) for _, c in part}) == 1 for part in parts)


def test_dask_chunks_read_the_jobs_lazily_a_window_at_a_time():
    """A 100,000-case run must not hold a reference per case: chunks read size × window jobs at a time."""
    read = []

    profile = load_profile("ci")

    def jobs():
        for index in range(1000):
            read.append(index)
            yield index, draw_case_ref(profile, 0, index)

    parts = chunks(jobs(), size=4, window=3)
    first = next(parts)
    assert 1 <= len(first) <= 4 and len(read) == 12
    rest = list(parts)
    assert sorted(i for part in [first, *rest] for i, _ in part) == list(range(1000)) == read


def test_workers_load_their_libraries_on_one_thread_each_and_keep_the_user_s_environment(monkeypatch):
    # importing the fork server's module runs its preload here: it ignores SIGINT and joins
    # sys.modules, both undone so that this process stays as the tests that follow expect it
    handler = signal.getsignal(signal.SIGINT)
    monkeypatch.delitem(sys.modules, "gradcheck_rnn.run.preload", raising=False)
    try:
        preload = importlib.import_module("gradcheck_rnn.run.preload")
    finally:
        signal.signal(signal.SIGINT, handler)
    monkeypatch.delenv("GRADCHECK_RNN_TORCH_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    loaded_under = {}
    monkeypatch.setattr(preload.importlib, "import_module", lambda name: loaded_under.setdefault(
        name, tuple(os.environ.get(variable) for variable in preload.THREAD_VARIABLES)))
    before = dict(os.environ)
    preload.preload()
    assert set(loaded_under) == set(preload.MODULES) and set(loaded_under.values()) == {("1", "1", "1")}
    assert dict(os.environ) == before


def test_the_rows_of_a_lost_dask_chunk_keep_their_target_s_repro_environment():
    """A chunk comes back with each target's repro environment on its Dask worker; the rows of a
    chunk that is lost later (its Dask worker gone, retries too) are written with it."""
    target = "isolation_targets:crashes_under_an_environment"
    setup = WorkerSetup((target,), Tolerances(), ("stateless",), (str(TESTS),))
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1")
    rows, repro_envs = judge_chunk(setup, [(0, case.id)], None)
    assert repro_envs == {target: "ISOLATION_TARGETS_MODE=crash"} and rows[0][1].status == "error"
    ((index, lost),) = lost_rows([(1, case)], setup, "the Dask worker judging it was lost", repro_envs, {})
    assert lost.repro.startswith("ISOLATION_TARGETS_MODE=crash gradcheck-rnn repro ") and index == 1


def test_the_rows_of_a_lost_dask_chunk_carry_the_ids_their_target_is_judged_under():
    """A target that declares kernel configurations judges a case under the one drawn for it: the
    rows of its lost chunk name that case, as its judged rows would (the cluster says which)."""
    target = "plugin_targets:segfaults_under_a_chunk"
    setup = WorkerSetup((target,), Tolerances(), ("reference",), (str(TESTS),))
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1")
    repro_envs, ids = lost_chunk_facts(setup, [(3, case.id)])
    ((index, lost),) = lost_rows([(3, case)], setup, "the Dask worker judging it was lost", repro_envs, ids)
    assert lost.case_id.startswith(case.id + "-kc.chunk.") and index == 3
    assert lost.case_id == judged_case_id(case, resolve_target(target))


def test_a_dask_worker_keeps_its_worker_process_between_chunks():
    setup = WorkerSetup(("fused-cpu",), Tolerances(), ("reference",))
    first = _pool(pickle.loads(pickle.dumps(setup)))  # every task brings its own copy of the setup
    assert _pool(pickle.loads(pickle.dumps(setup))) is first
    other = _pool(WorkerSetup(("torch-native",), Tolerances(), ("reference",)))
    assert other is not first and other.setup.targets == ("torch-native",)


def test_death_reasons_name_the_signal_or_the_exit_code():
    assert death_reason(-11) == "killed by signal 11 (SIGSEGV)"
    assert death_reason(3) == "exited with code 3"


# --- worker processes --------------------------------------------------------------------------

def test_worker_processes_give_the_serial_rows_in_case_order():
    spec, _ = RunSpec.build("ci", ("fused-cpu", "plugin_targets:zero_top_bhh"), Selection(cases=5, seed=11))
    serial = execute(spec, Execution(workers=1))
    seen: list = []
    pooled = execute(spec, Execution(workers=2), observers=(OnRow(seen.append),))  # as the progress bar is
    assert len(seen) == len(pooled) == 5 * 2 * len(spec.checks)  # it saw every row as it came
    assert comparable(pooled) == comparable(serial)
    assert [r.case_index for r in pooled] == sorted(r.case_index for r in pooled)
    assert {"pass", "fail"} <= {r.status for r in pooled}  # the plugin's bug is found in the workers too


def test_a_crash_an_exit_and_a_hang_are_error_rows_and_the_run_goes_on(tmp_path):
    # torch-native first: the hang then times out in the worker that already computed the references
    # (their JAX compile comes before any row's deadline starts); 3 s leaves torch-native's rows
    # (~0.1 s each, ~1 s at worst on a busy 2-core CI machine) a wide margin. One case: each target
    # after the hang is judged by a worker that replaced a lost one (a new worker per lost one, each
    # computing the case's references again); the rows of several cases in case order from several
    # workers are test_worker_processes_give_the_serial_rows_in_case_order's.
    targets = ["torch-native", "plugin_targets:hangs", "plugin_targets:segfaults", "plugin_targets:exits"]
    code, output = invoke("sweep", "-c", reference_only_profile(tmp_path), "-n", 1, "-s", 4,
                          *[a for t in targets for a in ("-t", t)], "--case-timeout", 3,
                          "--report-dir", tmp_path / "reports")
    assert code == 1, output
    rows = document(tmp_path / "reports")["results"]
    assert [(r["case_index"], r["target"]) for r in rows] == [(0, t) for t in targets]
    by_target = {t: [r for r in rows if r["target"] == t] for t in targets}
    assert all(r["status"] == "pass" for r in by_target["torch-native"])
    for target, words in (("plugin_targets:segfaults", "killed by signal 11"),
                          ("plugin_targets:exits", "exited with code 3"),
                          ("plugin_targets:hangs", "timed out after 3 s")):
        assert all(r["status"] == "error" and words in r["message"] for r in by_target[target]), by_target[target]


# --- shards and merge --------------------------------------------------------------------------

@pytest.fixture
def judged_here(monkeypatch):
    """Sweeps judged in this process: merging is about the stored runs, whichever executor made
    them (every executor gives the same rows, tested above), and each worker process would cost
    its imports and a cold JAX compile per sweep."""
    monkeypatch.setenv("GRADCHECK_RNN_IN_PROCESS", "1")


def sweep_shards(tmp_path, n, *args):
    dirs = []
    for k in range(1, n + 1):
        code, output = invoke("sweep", *args, "--shard", f"{k}/{n}", "--report-dir", tmp_path / f"shard-{k}")
        assert code in (0, 1, 5), output
        dirs.append(tmp_path / f"shard-{k}")  # a report folder stands for its latest run
    return dirs


def test_merged_shards_equal_the_unsharded_run(tmp_path, judged_here):
    # 4 cases in 3 shards: uneven shards, at half the judging of 7 (the whole run is judged twice)
    args = ["-c", reference_only_profile(tmp_path), "-n", 4, "-s", 2, "-t", "fused-cpu", "-t",
            "plugin_targets:zero_top_bhh"]
    whole_code, _ = invoke("sweep", *args, "--report-dir", tmp_path / "whole")
    shards = sweep_shards(tmp_path, 3, *args)
    assert [len(document(d)["results"]) for d in shards] == [2 * 2, 1 * 2, 1 * 2]
    code, output = invoke("merge", *shards, "--report-dir", tmp_path / "merged")
    whole, merged = document(tmp_path / "whole"), document(tmp_path / "merged")
    assert code == whole_code == 1, output
    assert comparable(merged["results"]) == comparable(whole["results"])
    assert merged["summary"] == whole["summary"] and merged["by_mode"] == whole["by_mode"]
    assert merged["spec"] == whole["spec"] and whole["spec"]["shard"] is None
    assert "plugin_targets:zero_top_bhh" in output and "gradcheck-rnn repro" in output


def test_a_merged_run_keeps_the_shards_case_timeout_in_its_repro_lines(tmp_path):
    """A row that timed out says so in a field, and its repro line carries --case-timeout (so the
    repro stops the hang too); merge keeps the rows as the shards finished them: the unsharded run's."""
    profile = tmp_path / "stateless.toml"
    profile.write_text("[checks]\n" + "".join(f"{name} = {'true' if name == 'stateless' else 'false'}\n"
                                              for name in check_names()))
    args = ["-c", profile, "-n", 2, "-t", "plugin_targets:hangs", "--case-timeout", 0.5]
    whole_code, _ = invoke("sweep", *args, "--report-dir", tmp_path / "whole")
    code, output = invoke("merge", *sweep_shards(tmp_path, 2, *args), "--report-dir", tmp_path / "merged")
    whole, merged = document(tmp_path / "whole")["results"], document(tmp_path / "merged")["results"]
    assert code == whole_code == 1, output
    assert comparable(merged) == comparable(whole) and len(whole) == 2
    assert all(row["timed_out"] and row["repro"].endswith(" --case-timeout 0.5") for row in whole), whole


def test_merge_keeps_exit_5_for_a_vacuous_run(tmp_path, judged_here):
    shards = sweep_shards(tmp_path, 2, "-c", reference_only_profile(tmp_path), "-n", 3, "-t", "plugin_targets:only_f16")
    code, output = invoke("merge", *shards, "--report-dir", tmp_path / "merged")
    assert code == 5 and "judged on no case" in output, output


def test_merge_refuses_a_missing_a_doubled_and_a_foreign_shard(tmp_path, judged_here):
    profile = reference_only_profile(tmp_path)
    one, two, three = sweep_shards(tmp_path, 3, "-c", profile, "-n", 3, "-t", "fused-cpu")
    invoke("sweep", "-c", profile, "-n", 3, "-s", 9, "-t", "fused-cpu", "--shard", "3/3",
           "--report-dir", tmp_path / "other-seed")
    # two cases in the shard: --fail-fast lets the case in flight finish and starts no other
    invoke("sweep", "-c", profile, "-n", 6, "-t", "plugin_targets:raises", "-t", "fused-cpu", "--shard", "3/3",
           "--fail-fast", "--report-dir", tmp_path / "cut-short")
    for dirs, words in (([one, two], "shard 3/3 is missing"),
                        ([one, two, two, three], "shard 2/3 is given twice"),
                        ([one, two, tmp_path / "other-seed" / "latest"], "it differs in seed (0 vs 9)"),
                        ([tmp_path / "cut-short", one, two], "incomplete shard (stopped by --fail-fast)")):
        code, output = invoke("merge", *dirs, "--report-dir", tmp_path / "merged")
        assert code == 2 and words in output and "Traceback" not in output, output
    assert not (tmp_path / "merged").exists()


def test_merge_refuses_a_whole_run(tmp_path, judged_here):
    invoke("sweep", "-c", reference_only_profile(tmp_path), "-n", 1, "-t", "fused-cpu", "--report-dir", tmp_path / "whole")
    code, output = invoke("merge", tmp_path / "whole" / "latest", "--report-dir", tmp_path / "merged")
    assert code == 2 and "is a whole run, not a shard" in output, output


# --- Dask --------------------------------------------------------------------------------------

@pytest.fixture
def scheduler(dask_cluster):
    """The shared cluster's scheduler address (conftest.py's ``dask_cluster``)."""
    return dask_cluster.scheduler_address


def test_dask_gives_the_serial_rows_isolates_a_segfault_and_a_target_s_child_sees_the_dask_worker_s_environment(
        tmp_path, child_record, dask_cluster, monkeypatch):  # noqa: F811
    """Dask gives the rows of a serial run, and a target that segfaults is its error row there too.
    On a cluster the command's machine is not the worker's: a target's child interpreter sees its
    Dask worker's environment as that worker has it, with nothing of the tool's added. One Dask
    sweep for both claims: each of its targets costs the Dask worker's worker process nothing more,
    a second sweep a new one (torch and jax imported again). The shared cluster started before this
    test's fixture named the record file, so its workers are told it here. The serial run is judged
    in this process: its rows are the reference the Dask rows must equal (every executor gives the
    same rows, tests/test_isolation.py), not what is tested."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr("gradcheck_rnn.run.dask_executor.WINDOW_PER_SLOT", 1)  # later chunks wait for a slot

    # Run on each Dask worker, so defined in here: Dask sends a local function by value, and one of
    # this module by name, which made each Dask worker import this module (torch, jax: seconds each)
    def set_environ(name: str, value: str | None) -> None:
        """Set (or, for None, remove) one variable in this process's environment."""
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    profile = reference_only_profile(tmp_path)
    args = ["-c", profile, "-n", 3, "-s", 5, "-t", "fused-cpu", "-t", "plugin_targets:zero_top_bhh"]
    serial_code, _ = invoke("sweep", *args, "--in-process", "--report-dir", tmp_path / "serial")
    recording, crashing_target = "isolation_targets:records_a_child_interpreter", "plugin_targets:segfaults_on_three_layers"
    with distributed.Client(dask_cluster) as client:
        client.run(set_environ, CHILD_RECORD_ENV, str(child_record))
        try:
            environs = list(client.run(lambda: dict(os.environ)).values())
            # one of the three cases has three layers (seed 5): the crash comes in the middle of the
            # run, as its case's last row (the recording target before it: no new worker process
            # just to finish that case)
            code, output = invoke("sweep", *args, "-t", recording, "-t", crashing_target, "--executor", "dask",
                                  "--scheduler", dask_cluster.scheduler_address, "--report-dir", tmp_path / "dask")
        finally:
            client.run(set_environ, CHILD_RECORD_ENV, None)
    assert code == serial_code == 1, output
    rows = document(tmp_path / "dask")["results"]
    crashing = [r for r in rows if r["target"] == crashing_target]
    crashed = [r for r in crashing if r["status"] != "skip"]
    assert len(crashing) == 3 and len(crashed) == 1, crashing
    assert all(r["status"] == "error" and "killed by signal 11" in r["message"] for r in crashed)
    recorded = [r for r in rows if r["target"] == recording]
    assert len(recorded) == 3 and {r["status"] for r in recorded} == {"pass"}, recorded
    assert comparable([r for r in rows if r not in crashing and r not in recorded]) == comparable(
        document(tmp_path / "serial")["results"])
    # what the target's child saw: the environment of the Dask worker that judged it, whichever of
    # the cluster's (the two may differ in what their nannies set)
    seen = json.loads(child_record.read_text())
    assert seen["environ"] in environs, (seen["environ"], environs)
    assert seen["environ"].get("PYTHONPATH") == os.environ.get("PYTHONPATH")


@pytest.mark.slow  # the lost chunk's test below asserts the same of its row, and costs the same worker restart
def test_a_lost_dask_worker_gives_error_rows_for_its_cases(tmp_path, scheduler):
    code, output = invoke("sweep", "-c", reference_only_profile(tmp_path), "-n", 1, "-t", "plugin_targets:kills_its_dask_worker",
                          "--executor", "dask", "--scheduler", scheduler, "--report-dir", tmp_path / "dask")
    assert code == 1, output
    rows = document(tmp_path / "dask")["results"]
    assert len(rows) == 1 and all(r["status"] == "error" and "Dask worker" in r["message"] for r in rows), rows


def test_a_lost_dask_chunk_s_rows_are_finished_with_their_target_s_repro_environment(tmp_path, scheduler):
    """The first chunk is lost before any came back with the targets' repro environments: its rows
    still carry the environment (asked of the cluster) and the run's repro options, as a pool's do."""
    code, output = invoke("sweep", "-c", reference_only_profile(tmp_path), "-n", 1, "--rtol", "0.5",
                          "-t", "plugin_targets:kills_its_dask_worker_under_an_environment", "--executor", "dask",
                          "--scheduler", scheduler, "--report-dir", tmp_path / "dask")
    assert code == 1, output
    (row,) = document(tmp_path / "dask")["results"]
    assert row["status"] == "error" and "Dask worker" in row["message"], row
    assert row["repro_env"] == "PLUGIN_TARGETS_MODE=kill" and "--rtol 0.5" in row["repro_options"], row
    assert row["repro"].startswith("PLUGIN_TARGETS_MODE=kill gradcheck-rnn repro "), row["repro"]


def test_an_unreachable_scheduler_is_one_sentence(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("gradcheck_rnn.run.dask_executor.CONNECT_TIMEOUT", 1)
    code, output = invoke("sweep", "-n", 1, "-t", "fused-cpu", "--executor", "dask", "--scheduler",
                          "tcp://127.0.0.1:9", "--report-dir", tmp_path)
    assert code == 2 and "cannot reach the Dask scheduler" in output and "Traceback" not in output, output
