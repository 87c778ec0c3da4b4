"""The families' JAX programs across processes (references/programs.py): a built-in family's
program is compiled once and then loaded by every new process, with the same numbers; a user
family's is never written to a file, since no fingerprint covers its code; and an artifact's name
changes with every source its maths is read from."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradcheck_rnn import Case
from gradcheck_rnn.references import programs
from gradcheck_rnn.references.jax_family import program_name, run_jax_family_reference

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys
import jax, jax.monitoring
events = {"traced": 0}
def on_duration(name, seconds, **_):
    if name == "/jax/core/compile/jaxpr_trace_duration":
        events["traced"] += 1
jax.monitoring.register_event_duration_secs_listener(on_duration)
from gradcheck_rnn import Case, families
import gradcheck_rnn.references.jax_family as m
if len(sys.argv) > 2:
    families.load(sys.argv[2])
out = m.run_jax_family_reference(Case.from_id(sys.argv[1]))
print(json.dumps({"compiled": m.program_count(), "loaded": m.load_count(),
                  "written": m.PROGRAMS.counts["written"], **events,
                  "y": out.y.tolist(), "dx": out.grads["x"].tolist()}))
"""


def _child(cache: Path, case_id: str, *family: str) -> dict:
    env = {**os.environ, "GRADCHECK_RNN_JAX_CACHE": str(cache), "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "docs" / "examples"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _CHILD, case_id, *family], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_family_program_is_compiled_once_then_loaded(tmp_path):
    case_id = "gdn-L2-uni-I2-H2-K3-T3-B2-len3.1-f64-s7"
    here = run_jax_family_reference(Case.from_id(case_id))
    cold = _child(tmp_path, case_id)
    assert (cold["compiled"], cold["loaded"], cold["written"]) == (1, 0, 1)
    assert len(list((tmp_path / "gradcheck-rnn-programs").glob("gdn-*.bin"))) == 1
    warm = _child(tmp_path, case_id)
    assert (warm["compiled"], warm["loaded"], warm["traced"]) == (0, 1, 0)  # no trace at all
    for run in (cold, warm):
        np.testing.assert_array_equal(np.array(run["y"]), here.y)
        np.testing.assert_array_equal(np.array(run["dx"]), here.grads["x"])


def test_a_user_family_program_has_no_file_name(monkeypatch):
    """The name is what writes a file: a user family's programs get none (no fingerprint covers
    its code), every built-in family's do."""
    from gradcheck_rnn import families

    monkeypatch.syspath_prepend(str(ROOT / "docs" / "examples"))
    user = families.load("my_family:MINGRU")
    assert not programs.is_package_code(user)
    assert program_name(Case.from_id("mingru-L1-uni-I2-H3-T3-B2-len3.2-f64-s1").config) is None
    for token in ("gdn", "gla", "mlstm", "rwkv7", "s6", "slstm", "deltaproduct"):
        assert programs.is_package_code(families.family(token))


@pytest.mark.slow  # two processes that compile: the test above checks the name that decides it
def test_a_user_family_program_is_never_written(tmp_path):
    case_id = "mingru-L1-uni-I2-H3-T3-B2-len3.2-f64-s1"
    for _ in range(2):  # the second process compiles again (JAX's own cache may spare the XLA part)
        run = _child(tmp_path, case_id, "my_family:MINGRU")
        assert (run["compiled"], run["loaded"], run["written"]) == (1, 0, 0)
    assert not list((tmp_path / "gradcheck-rnn-programs").glob("*.bin"))


def test_artifact_names_cover_the_maths():
    sources = programs.maths_sources(programs.__file__)
    names = {Path(s).name for s in sources}
    # the step, the family's base classes, the ops namespace, the config's properties, the layout
    assert {"gdn.py", "matrix.py", "base.py", "ops.py", "rnn_config.py", "layout.py", "programs.py",
            "buckets.py"} <= names
    gdn = Case.from_id("gdn-L1-uni-I2-H2-K3-T3-B2-len3.1-f64-s7").config
    other = Case.from_id("gdn-L1-uni-I2-H2-K2-T3-B2-len3.1-f64-s7").config
    assert program_name(gdn) != program_name(other) and program_name(gdn).startswith("gdn-")
