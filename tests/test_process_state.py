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

_API = _STATE + """
torch.set_num_threads(3)  # the caller's own setting, not the library's 1
import gradcheck_rnn as gr
before = state()
checked = gr.check("fused-cpu", sys.argv[1], checks=["reference"])
after_check = state()
here = gr.check("fused-cpu", sys.argv[1], checks=["reference"], in_process=True)  # the JAX reference runs here
after_in_process = state()
run = gr.sweep("fused-cpu", cases=2, seed=1, checks=["reference"], modes=["gru"], workers=1)
print(json.dumps({"before": before, "after check": after_check, "after in-process check": after_in_process,
                  "after sweep": state(), "statuses": [r.status for r in checked + here + run.results]}))
"""

# The import first, with the cache folder named (an import that read it could set jax.config),
# then the variable gone again and the command line run in the same process (its own set-up).
_CLI = _STATE + """
os.environ["GRADCHECK_RNN_JAX_CACHE"] = sys.argv[2]
before = state()
import gradcheck_rnn.references.jax_cudnn
after = state()
del os.environ["GRADCHECK_RNN_JAX_CACHE"]
print(json.dumps({"before": before, "after import": after}))
from gradcheck_rnn.cli import main
main(["check", "--case-id", sys.argv[1], "-t", "fused-cpu", "--check", "reference"])
"""


def _child(script: str, home: Path, *args: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRADCHECK_RNN_")}
    environ.update(HOME=str(home), JAX_PLATFORMS="cpu", **env)
    root = Path(__file__).resolve().parents[1]
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", script, *args], env=environ, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


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


def test_check_and_sweep_leave_threads_environment_and_jax_config_as_they_were(tmp_path):
    child = _child(_API, tmp_path, CASE)
    assert set(child["statuses"]) == {"pass"}
    assert child["before"]["threads"] == 3
    for after in ("after check", "after in-process check", "after sweep"):
        assert _changes(child["before"], child[after]) == {}, after
    # and the JAX reference still kept its compiled program in the default cache folder
    assert list((tmp_path / ".cache" / "gradcheck-rnn" / "jax" / "gradcheck-rnn-programs").glob("*.bin"))


def test_importing_the_jax_reference_leaves_jax_config_as_it_was_and_the_command_line_sets_up_its_process(tmp_path):
    """Only the command line keeps its set-up: its JAX programs land in the default cache folder."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRADCHECK_RNN_")}
    environ.update(HOME=str(tmp_path), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _CLI, CASE, str(tmp_path / "cache")], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    imported = json.loads(done.stdout.splitlines()[0])
    assert _changes(imported["before"], imported["after import"]) == {}
    assert list((tmp_path / ".cache" / "gradcheck-rnn" / "jax" / "gradcheck-rnn-programs").glob("*.bin"))
    assert not (tmp_path / "cache").exists()  # the folder named only while importing: never used
