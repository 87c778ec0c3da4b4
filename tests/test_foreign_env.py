"""The foreign venvs' set-up (tests/foreign_env.py): a test that needs one is skipped only when the
packages are truly unavailable here; a set-up that fails is a failure (issue 38: a flax/Keras venv
whose pip stopped mid-install on a temporary file was reported as skipped tests)."""

from __future__ import annotations

import subprocess

import pytest

import foreign_env
from foreign_env import NoVenv, ensure_venv

# pip's last words in each case (the temporary-file one as it was seen in issue 38)
MID_INSTALL = ("ERROR: Could not install packages due to an OSError: [Errno 2] No such file or directory: "
               "'/tmp/pip-install-x1/keras/keras/src/__init__.py'")
NO_DISTRIBUTION = ("ERROR: Could not find a version that satisfies the requirement mxnet==1.9.1 (from versions: none)\n"
                   "ERROR: No matching distribution found for mxnet==1.9.1")
OFFLINE = ("WARNING: Retrying ... NewConnectionError: Failed to establish a new connection: [Errno 101] Network is "
           "unreachable\nERROR: No matching distribution found for flax==0.12.8")


def made_with_pip_saying(monkeypatch, tmp_path, stderr: str) -> NoVenv:
    """ensure_venv where creating the venv works and pip exits 1 with ``stderr``."""
    def run(command, **_):
        return subprocess.CompletedProcess(command, 1 if "pip" in command else 0, "", stderr if "pip" in command else "")

    monkeypatch.setattr(foreign_env.subprocess, "run", run)
    made = ensure_venv(tmp_path / "venv", ("mxnet==1.9.1",), "print('ok')", "ok")
    assert isinstance(made, NoVenv)
    return made


def test_a_pip_install_that_fails_midway_fails_the_tests(monkeypatch, tmp_path):
    made = made_with_pip_saying(monkeypatch, tmp_path, MID_INSTALL)
    assert not made.unavailable and "failed to install mxnet==1.9.1" in made.reason
    with pytest.raises(pytest.fail.Exception, match="OSError"):
        made.end_test()


@pytest.mark.parametrize("stderr", [NO_DISTRIBUTION, OFFLINE], ids=["no distribution", "offline"])
def test_packages_the_registry_cannot_provide_skip_the_tests(monkeypatch, tmp_path, stderr):
    made = made_with_pip_saying(monkeypatch, tmp_path, stderr)
    assert made.unavailable and "cannot provide mxnet==1.9.1" in made.reason
    with pytest.raises(pytest.skip.Exception):
        made.end_test()


def test_a_venv_that_cannot_be_created_fails_the_tests(monkeypatch, tmp_path):
    def run(command, **_):
        return subprocess.CompletedProcess(command, 1, "", "Error: [Errno 28] No space left on device")

    monkeypatch.setattr(foreign_env.subprocess, "run", run)
    made = ensure_venv(tmp_path / "venv", ("mxnet==1.9.1",), "print('ok')", "ok")
    assert isinstance(made, NoVenv) and not made.unavailable and "could not create a venv" in made.reason
