"""A real wheel, installed in a fresh venv, sweeps from another folder: the profiles ship in the
package, so nothing depends on running from the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).parent.parent


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_wheel_in_a_fresh_venv_sweeps_from_another_folder(tmp_path):
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist",
                ROOT, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("gradcheck_rnn-*.whl")

    venv = tmp_path / "venv"
    # without pip of its own (ensurepip costs seconds): this environment's pip installs into it
    assert run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path).returncode == 0
    python = venv / "bin" / "python"
    installed = run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel,
                    cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    # The heavy dependencies (torch, jax) come from this test's environment through a path
    # entry; path entries come after the venv's own site-packages, so the wheel's copy of
    # gradcheck_rnn is the one imported.
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp_path).stdout.strip())
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(python, "-c", "import gradcheck_rnn; print(gradcheck_rnn.__file__)", cwd=elsewhere)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr

    # the suite's JAX cache (tests/conftest.py), as a user's install has its own: an artifact's name
    # is the fingerprint of its sources' text, so the wheel's copy loads the source tree's programs
    env = {**os.environ, "PYTHONPATH": ""}
    swept = run(venv / "bin" / "gradcheck-rnn", "sweep", "-n", "2", "-t", "fused-cpu", "--report-dir", "out",
                cwd=elsewhere, env=env)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    [results] = [p for p in (elsewhere / "out").glob("*/results.json") if p.parent.name != "latest"]
    document = json.loads(results.read_text())
    assert document["profile"] == "ci" and document["summary"]["pass"] > 0


def test_the_flashrnn_extra_installs_what_flashrnn_imports():
    """Issue 38: flashrnn 1.0.8 imports `packaging` (flashrnn/cuda_init.py) but does not require
    it, so `pip install ".[flashrnn]"` in a clean venv left it unimportable. The test extra
    installs every foreign built-in's extra."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}

    assert {"flashrnn", "packaging"} <= names(extras["flashrnn"])
    assert names(extras["flashrnn"]) | names(extras["mambapy"]) <= names(extras["test"])
