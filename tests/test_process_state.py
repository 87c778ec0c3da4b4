"""The library leaves its caller's process as it found it (docs/contracts.md, "Process set-up").

Each test runs in a fresh interpreter, as a user's script: this test process has set its threads
and JAX cache folder once for the whole suite (tests/conftest.py), so it cannot show a change.
The child's home is a temporary folder, so the default JAX cache folder is there too, and the
test checks that the cache is still used: leaving the process alone must not turn it off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASE = "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7"

_STATE = """
import json, os, sys
import jax, torch

def state():
    return {"threads": torch.get_num_threads(), "environ": dict(os.environ),
            "jax": {k: repr(v) for k, v in jax.config.values.items()}}
"""

# One user's script for both tests' claims (each fresh interpreter imports torch and jax, and each
# fork server of the pool its preload, seconds). First the import, with the cache folder named (an
# import that read it could set jax.config), then the variable gone again; then the library's
# calls; then, the default cache folder moved aside, the command line in the same process (its own
# set-up, so it comes last). One fork server serves the calls and the command line (each would
# start and stop its own): its start is inside the check's window; its stop, which only kills and
# reaps it, comes at the end. That a call leaves no server behind is
# tests/test_isolation.py::test_a_signal_publishes_what_was_judged_as_interrupted_and_no_run_leaves_a_process_behind.
_SCRIPT = _STATE + """
import shutil
from pathlib import Path
torch.set_num_threads(3)  # the caller's own setting, not the library's 1
os.environ["GRADCHECK_RNN_JAX_CACHE"] = sys.argv[2]
before_import = state()
import gradcheck_rnn.references.jax_cudnn
after_import = state()
del os.environ["GRADCHECK_RNN_JAX_CACHE"]
import gradcheck_rnn as gr
from gradcheck_rnn.run import fork_server
before = state()
with fork_server.kept():
    checked = gr.check("fused-cpu", sys.argv[1], checks=["reference"])
    after_check = state()
    here = gr.check("fused-cpu", sys.argv[1], checks=["reference"], in_process=True)  # the JAX reference runs here
    after_in_process = state()
    run = gr.sweep("fused-cpu", cases=2, seed=1, checks=["reference"], modes=["gru"], workers=1)
    after_sweep = state()
    jax_folder = Path.home() / ".cache" / "gradcheck-rnn" / "jax"
    shutil.move(jax_folder, sys.argv[3])  # the calls' programs, and none for the command line to load
    print(json.dumps({"before import": before_import, "after import": after_import, "before": before,
                      "after check": after_check, "after in-process check": after_in_process,
                      "after sweep": after_sweep, "statuses": [r.status for r in checked + here + run.results]}),
          flush=True)
    from gradcheck_rnn.cli import main
    main(["check", "--case-id", sys.argv[1], "-t", "fused-cpu", "--check", "reference"])
"""


def _changes(before: dict, after: dict) -> dict:
    """What differs: threads, environment variables and jax.config values, each (before, after)."""
    changed = {} if before["threads"] == after["threads"] else {"threads": (before["threads"], after["threads"])}
    for part in ("environ", "jax"):
        keys = before[part].keys() | after[part].keys()
        changed.update({f"{part}:{k}": (before[part].get(k), after[part].get(k))
                        for k in sorted(keys) if before[part].get(k) != after[part].get(k)})
    return changed



@pytest.fixture(autouse=True)
def worker_processes_here(worker_processes):
    """gr.check and gr.sweep judge in worker processes here, as for a user."""


def test_calls_and_import_leave_threads_environment_and_jax_config_and_the_command_line_sets_up_its_process(tmp_path):
    """The library's calls and the import of the JAX reference leave the caller's process as they
    found it; only the command line keeps its set-up. Both keep their JAX programs in the default
    cache folder (leaving the process alone must not turn the cache off)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRADCHECK_RNN_")}
    environ.update(HOME=str(tmp_path / "home"), JAX_PLATFORMS="cpu")
    root = Path(__file__).resolve().parents[1]
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), environ.get("PYTHONPATH")]))
    (tmp_path / "home").mkdir()
    done = subprocess.run([sys.executable, "-c", _SCRIPT, CASE, str(tmp_path / "cache"), str(tmp_path / "calls")],
                          env=environ, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    child = json.loads(done.stdout.splitlines()[0])
    assert _changes(child["before import"], child["after import"]) == {}
    assert set(child["statuses"]) == {"pass"}
    assert child["before"]["threads"] == 3
    for after in ("after check", "after in-process check", "after sweep"):
        assert _changes(child["before"], child[after]) == {}, after
    # the calls' JAX reference still kept its compiled program in the default cache folder (moved aside)
    assert list((tmp_path / "calls" / "gradcheck-rnn-programs").glob("*.bin"))
    # and so did the command line's
    assert list((tmp_path / "home" / ".cache" / "gradcheck-rnn" / "jax" / "gradcheck-rnn-programs").glob("*.bin"))
    assert not (tmp_path / "cache").exists()  # the folder named only while importing: never used
