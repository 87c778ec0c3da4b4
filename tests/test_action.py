"""The GitHub Action (action.yml) run as a runner would run it, on a tiny sweep.

Its `run:` steps are run with bash in a temporary workspace, their `${{ ... }}` expressions
substituted from the inputs as GitHub does, with GITHUB_STEP_SUMMARY and GITHUB_OUTPUT set. Two
steps are not run here: the install step (a `pip install` of the action's folder: this venv
already has the tool, and the tests use no network) and actions/upload-artifact, which runs only
on GitHub; the test checks what it uploads instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")  # pyyaml comes with dask[distributed] in the test extra

ROOT = Path(__file__).parent.parent
EXPRESSION = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


@pytest.fixture(scope="module")
def action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def substitute(text: str, inputs: dict[str, str]) -> str:
    """``text`` with each ``${{ inputs.NAME }}`` and ``${{ github.action_path }}`` replaced, as the
    runner does before the step runs; any other expression is a KeyError (this test would not
    know its value)."""
    values = {f"inputs.{name}": value for name, value in inputs.items()} | {"github.action_path": str(ROOT)}
    return EXPRESSION.sub(lambda match: values[match[1]], text)


def run_step(step: dict, inputs: dict[str, str], workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A composite action's `run:` step with `shell: bash`, as GitHub runs it (bash -e -o pipefail)."""
    assert step["shell"] == "bash", step
    script = workspace / f"step-{step['name'].replace(' ', '-')}.sh"
    script.write_text(substitute(step["run"], inputs), encoding="utf-8")
    step_env = {name: substitute(str(value), inputs) for name, value in step.get("env", {}).items()}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                          env={**env, **step_env}, capture_output=True, text=True, timeout=300)


def test_the_action_sweeps_the_users_targets_and_profile_and_writes_the_summary_and_reports(
        action, reference_only, tmp_path):
    given = {"targets": "fused-cpu\ntorch-native", "profile": str(reference_only), "cases": "2", "args": "--seed 3",
             "report-dir": "reports"}
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()} | given
    assert action["runs"]["using"] == "composite" and set(given) <= set(action["inputs"])
    install, *steps = action["runs"]["steps"]
    assert "pip install" in install["run"] and install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    (tmp_path / "reports" / "20250101-000000-sweep-s0").mkdir(parents=True)  # an older run kept in the folder
    for step in steps:
        if "uses" in step:  # GitHub's own step: checked below, on what the sweep step said
            upload = step
            continue
        done = run_step(step, inputs, tmp_path, env)
        assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads((tmp_path / "reports" / "latest" / "results.json").read_text(encoding="utf-8"))
    assert document["spec"]["targets"] == ["fused-cpu", "torch-native"] and document["spec"]["profile"] == "reference"
    assert document["cases"] == 2 and document["seed"] == 3
    assert "all passed" in summary.read_text(encoding="utf-8")
    said = dict(line.split("=", 1) for line in outputs.read_text(encoding="utf-8").splitlines())
    assert said == {"exit-code": "0", "run-dir": str((tmp_path / "reports" / "latest").resolve())}
    # the upload: this run's folder alone, even after a failure; the report folder would hold it twice
    # (upload-artifact follows the latest symlink) beside the older run
    assert upload["uses"].startswith("actions/upload-artifact@"), upload
    assert upload["if"] == "always() && steps.sweep.outputs.run-dir != ''"
    assert upload["with"]["path"] == "${{ steps.sweep.outputs.run-dir }}"


@pytest.mark.parametrize("index", ["https://download.pytorch.org/whl/cpu", ""])
def test_the_install_step_takes_torch_from_the_cpu_index_first_unless_told_otherwise(action, tmp_path, index):
    """Installing the extras pulled torch's CUDA build (6.3 GB): by default the action installs
    torch alone from PyTorch's CPU index first, then gradcheck-rnn (which keeps it); an empty
    torch-index-url leaves torch to PyPI. The step runs with a `python` that records its calls."""
    assert action["inputs"]["torch-index-url"]["default"] == "https://download.pytorch.org/whl/cpu"
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs |= {"extras": "fla,mlstm", "torch-index-url": index}
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$*" >> {calls}\n', encoding="utf-8")
    (bin_dir / "python").chmod(0o755)
    install = action["runs"]["steps"][0]
    done = run_step(install, inputs, tmp_path, {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    expected = [f"-m pip install torch --index-url {index}"] * bool(index) + [f"-m pip install {ROOT}[fla,mlstm]"]
    assert calls.read_text(encoding="utf-8").splitlines() == expected


@pytest.mark.slow  # a second sweep command (~5 s of CPU); the default suite runs the passing one
def test_a_failing_sweep_fails_the_step_and_still_says_its_exit_code(action, reference_only, tmp_path):
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs |= {"targets": "mutant:truncated-bptt", "profile": str(reference_only), "cases": "3", "report-dir": "reports"}
    [sweep] = [step for step in action["runs"]["steps"] if step.get("id") == "sweep"]
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    done = run_step(sweep, inputs, tmp_path, env)
    assert done.returncode == 1 and "::error title=gradcheck-rnn fail" in done.stdout, done.stdout + done.stderr
    said = dict(line.split("=", 1) for line in outputs.read_text(encoding="utf-8").splitlines())
    assert said == {"exit-code": "1", "run-dir": str((tmp_path / "reports" / "latest").resolve())}
    assert "fail" in summary.read_text(encoding="utf-8") and (tmp_path / "reports" / "latest" / "results.json").is_file()


def test_the_ci_page_lists_every_input_of_the_action_with_its_default(action):
    """docs/how-to/ci.md's table of inputs, read against action.yml."""
    page = (ROOT / "docs" / "how-to" / "ci.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w-]+)` \|([^|]*)\|", page, re.MULTILINE)
    assert [name for name, _ in rows] == list(action["inputs"])
    for name, default in rows:
        given = str(action["inputs"][name].get("default", ""))
        shown = default.strip()
        assert given == shown.strip("`") if shown.startswith("`") else not given, name
