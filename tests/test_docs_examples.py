"""Every fenced shell and Python example in README.md and docs/**/*.md runs, or says why it does not.

A fence's language says what it is: ``python`` and ``sh`` are examples; ``text`` (output),
``toml``, ``yaml`` and ``jsonc`` are not. Comment lines right before a fence mark it
(docs/contributing.md, "Examples in the docs"):

- ``<!-- not-run: REASON -->``: never executed, for the reason given;
- ``<!-- slow -->``: executed only under ``-m slow`` (the default suite runs the cheap ones);
- ``<!-- exit: N -->`` or ``<!-- exit: N, M, ... -->``: the exit code of every command of a shell
  example, or of each in turn (default 0).

A fence whose first line is ``# NAME.py`` (or ``.toml``) is a file: it is written into the
example folder of its page before that page's examples run, and a Python one that is not a test
file (``test_*.py``) is also executed. A fence holding only ``--8<-- "PATH"`` is that file
(pymdownx.snippets includes it in the site). The Python examples of a page run in order in one
namespace, in a temporary folder; each shell example runs its commands one at a time with bash in
a temporary folder, with this venv's ``gradcheck-rnn`` and ``python`` first on PATH, judging in
worker processes as a user's commands do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from docs_scripts import bytecode_folders, no_bytecode, run_scripts

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLES = {"python", "sh"}
NOT_EXAMPLES = {"text", "toml", "yaml", "jsonc"}
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!--\s*([\w-]+)\s*(?::\s*(.*?))?\s*-->")
MARKERS = {"not-run", "slow", "exit"}
FILE_NAME = re.compile(r"# ([\w-]+\.(?:py|toml))\n")
SNIPPET = re.compile(r'--8<-- "([^"]+)"\n?')
README_LIMIT = 200


@dataclass
class Fence:
    page: Path
    line: int
    language: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    @property
    def file_name(self) -> str | None:
        match = FILE_NAME.match(self.code)
        return match.group(1) if match else None

    @property
    def runs(self) -> bool:
        return self.language in EXAMPLES and "not-run" not in self.markers

    def exit_codes(self, commands: int) -> list[int]:
        """The expected exit code of each of ``commands`` commands."""
        codes = [int(code) for code in self.markers.get("exit", "0").split(",")]
        return codes * commands if len(codes) == 1 else codes


def fences(page: Path) -> list[Fence]:
    """The fenced blocks of a page with the marker comments right above each."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        markers = {}
        for above in reversed(text[:match.start()].split("\n")[:-1]):
            marker = MARKER.fullmatch(above.strip())
            if not marker:
                break
            markers[marker.group(1)] = marker.group(2) or ""
        code = match.group(2)
        snippet = SNIPPET.fullmatch(code)
        if snippet:
            code = (ROOT / snippet.group(1)).read_text(encoding="utf-8")
        found.append(Fence(page, text.count("\n", 0, match.start()) + 1, match.group(1).strip(), code, markers))
    return found


ALL = [fence for page in PAGES for fence in fences(page)]


def commands(code: str) -> list[str]:
    """The command lines of a shell example: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def example_folder(page: Path, folder: Path) -> Path:
    """Write the page's file examples (``# NAME.py`` fences) into ``folder``."""
    for fence in fences(page):
        if fence.file_name:
            (folder / fence.file_name).write_text(fence.code, encoding="utf-8")
    return folder


def slow_if(is_slow: bool) -> list:
    return [pytest.mark.slow] if is_slow else []


def python_pages() -> list:
    params = []
    for page in PAGES:
        runnable = [f for f in fences(page) if f.language == "python" and f.runs]
        if runnable:
            params.append(pytest.param(page, id=str(page.relative_to(ROOT)),
                                       marks=slow_if(any("slow" in f.markers for f in runnable))))
    return params


def shell_fences() -> list:
    return [pytest.param(fence, id=fence.where, marks=slow_if("slow" in fence.markers))
            for fence in ALL if fence.language == "sh" and fence.runs]


# --- the form of every fence -----------------------------------------------------------------------

def test_every_fence_says_what_it_is():
    unknown = [f"{f.where}: ```{f.language}" for f in ALL if f.language not in EXAMPLES | NOT_EXAMPLES]
    assert not unknown, f"fences need a language ({sorted(EXAMPLES | NOT_EXAMPLES)}): {unknown}"


def test_every_marker_is_known_and_complete():
    problems = []
    for fence in ALL:
        problems += [f"{fence.where}: unknown marker {name!r}" for name in fence.markers if name not in MARKERS]
        if "not-run" in fence.markers and not fence.markers["not-run"]:
            problems.append(f"{fence.where}: not-run needs a reason")
        if fence.markers and fence.language not in EXAMPLES:
            problems.append(f"{fence.where}: a ```{fence.language} block is not an example; it takes no marker")
        if "exit" in fence.markers:
            codes = fence.markers["exit"].split(",")
            if not all(code.strip().isdigit() for code in codes) or len(codes) not in (1, len(commands(fence.code))):
                problems.append(f"{fence.where}: exit takes one code, or one per command")
    assert not problems, problems


def test_the_fence_reader_sees_markers_files_and_snippets(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('Text.\n\n<!-- not-run: needs a GPU -->\n```sh\ngradcheck-rnn sweep -t fused-gpu\n```\n\n'
                    '<!-- slow -->\n<!-- exit: 1, 0 -->\n```sh\na \\\n  b\n# a comment\nc\n```\n\n'
                    '```python\n# my_mod.py\nX = 1\n```\n\n```python\n--8<-- "docs/examples/my_rnn.py"\n```\n')
    first, second, third, fourth = fences(page)
    assert first.markers == {"not-run": "needs a GPU"} and not first.runs
    assert second.markers == {"slow": "", "exit": "1, 0"} and commands(second.code) == ["a b", "c"]
    assert second.exit_codes(2) == [1, 0] and first.exit_codes(3) == [0, 0, 0]
    assert third.file_name == "my_mod.py" and fourth.file_name == "my_rnn.py" and "class MyGRU" in fourth.code
    assert (example_folder(page, tmp_path) / "my_mod.py").read_text() == "# my_mod.py\nX = 1\n"


# --- the examples run ------------------------------------------------------------------------------

@pytest.mark.parametrize("page", python_pages())
def test_python_examples_run(page, tmp_path, monkeypatch):
    example_folder(page, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict = {"__name__": "docs_example"}
    for fence in fences(page):
        if fence.language == "python" and fence.runs and not (fence.file_name or "").startswith("test_"):
            exec(compile(fence.code, fence.where, "exec"), namespace)


@pytest.mark.parametrize("fence", shell_fences())
def test_shell_examples_run(fence, tmp_path):
    example_folder(fence.page, tmp_path)
    # as a user runs them: judged in worker processes (conftest.py judges in the test process)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "80"}
    env.pop("GRADCHECK_RNN_IN_PROCESS", None)
    lines = commands(fence.code)
    for line, expected in zip(lines, fence.exit_codes(len(lines))):
        done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
                              timeout=900)
        assert done.returncode == expected, (f"{fence.where}: `{line}` exited {done.returncode}, expected "
                                             f"{expected}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def test_a_broken_example_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```sh\ngradcheck-rnn --no-such-option\n```\n")
    [fence] = fences(page)
    with pytest.raises(AssertionError, match="exited 2, expected 0"):
        test_shell_examples_run(fence, tmp_path)


# --- the README and the reference pages stay complete -----------------------------------------------

def test_the_readme_stays_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_LIMIT, f"README.md has {lines} lines; move the detail into docs/ (at most {README_LIMIT})"


def test_the_readme_plugin_example_is_the_docs_one():
    [readme_plugin] = [f for f in fences(ROOT / "README.md") if f.file_name == "my_rnn.py"]
    assert readme_plugin.code == (ROOT / "docs" / "examples" / "my_rnn.py").read_text(encoding="utf-8")


def variables_read(folders: list[Path]) -> set[str]:
    return {name for folder in folders for path in folder.rglob("*.py")
            for name in re.findall(r"GRADCHECK_RNN_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8"))}


def undocumented(page: str, names: set[str]) -> set[str]:
    """The names of ``names`` that no row of the environment page's tables starts with."""
    rows = re.findall(r"^\| ((?:`GRADCHECK_RNN_\w+`(?:, )?)+) \|", page, flags=re.MULTILINE)
    return names - {name for row in rows for name in re.findall(r"GRADCHECK_RNN_\w+", row)}


def test_every_environment_variable_is_in_the_table():
    page = (ROOT / "docs" / "reference" / "environment.md").read_text(encoding="utf-8")
    read = variables_read([ROOT / "gradcheck_rnn", ROOT / "tests"])
    assert {"GRADCHECK_RNN_WORKERS", "GRADCHECK_RNN_JAX_CACHE", "GRADCHECK_RNN_MXNET_VENV"} <= read
    assert not undocumented(page, read), f"docs/reference/environment.md lacks {sorted(undocumented(page, read))}"
    without_workers = "\n".join(line for line in page.splitlines() if not line.startswith("| `GRADCHECK_RNN_WORKERS`"))
    assert undocumented(without_workers, read) == {"GRADCHECK_RNN_WORKERS"}


def keys(value: object) -> set[str]:
    """Every key of every object in a JSON value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def a_results_document() -> dict:
    """A results document with every optional part: a failing row with a drift allowance and a
    ratio map, a merge's shards, a baseline's drift, a mutants run's lists."""
    import numpy as np

    from gradcheck_rnn.model.compare import RatioMap, TensorError
    from gradcheck_rnn.reports.document import results_document
    from gradcheck_rnn.rows.result import CaseResult
    from gradcheck_rnn.run.spec import RunSpec

    tensor = TensorError("x", "fail", 1.0, 1.0, 2.0, {"t": 0, "b": 0, "unit": 0}, 1.0, 0.0, 1e-4, 1e-5,
                         per_step=[1.0], ratio_map=RatioMap("t", "b", np.ones((1, 1), np.float32), (1, 1)), drift=0.5)
    row = CaseResult("gru-L1-uni-I1-H1-T1-B1-len1-f64-s0", "fused-cpu", "fail", "gru", "f64", "all",
                     tensors=[tensor], case_index=0)
    spec = RunSpec("ci", "0" * 64, None, 0, 1, ("fused-cpu",))
    meta = {**spec.meta("merge"), "shards": ["a"], "verdict": {"exit_code": 1, "reason": "failures found"},
            "complete": True, "cases_judged": 1, "interrupted": None}
    drift = {"baseline": "b", "factor": 4, "floor": 0.01, "fail_on_drift": False, "compared": 1,
             "rows": [{"case_id": "c", "target": "t", "check": "reference", "tensors": [{"name": "x", "then": 1, "now": 8}]}]}
    mutant = {"target": "t", "doc": "", "cases": 1, "flagged": 1, "first_case_id": "c", "caught_by": "", "repro": ""}
    home = [{"profile": "ci", "seed": 0, "cases": 1}]
    return results_document([row], meta, {"drift": drift, "mutants": [mutant], "false_alarms": [mutant],
                                          "home_profiles": home})


def unnamed(page: str, document: dict) -> set[str]:
    """The keys of ``document`` that ``page`` never names as ``"key"``."""
    return keys(document) - set(re.findall(r'"([\w-]+)"', page))


def test_the_schema_page_names_every_key_of_a_results_document():
    page = (ROOT / "docs" / "reference" / "results-json.md").read_text(encoding="utf-8")
    document = a_results_document()
    assert {"traceback", "draw", "shards", "summary", "skips", "by_check", "drift", "home_profiles"} <= keys(document)
    assert '"fd"' in page and '"merge"' in page  # the check and the command, values rather than keys
    assert not unnamed(page, document), f"docs/reference/results-json.md does not name {sorted(unnamed(page, document))}"
    assert unnamed(page.replace('"traceback"', '"trace"'), document) == {"traceback"}


@pytest.mark.slow
def test_the_sample_output_is_what_the_tool_prints_today(tmp_path):
    """docs/getting-started.md shows the default sweep's output: the same, but the run folder's name
    and the worst ratios' digits. A ratio measures a float32 kernel's rounding, and the CPU's GEMM
    kernels (AVX2, AVX-512, AMX) sum in their own order: the same cases gave gru 0.0109 on one
    machine and 0.00796 on another. Whether a ratio is there, and every count, must match."""
    [shown] = [f.code for f in fences(ROOT / "docs" / "getting-started.md")
               if f.language == "text" and "all passed:" in f.code]
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("GRADCHECK_RNN_IN_PROCESS", None)
    done = subprocess.run([str(Path(sys.executable).parent / "gradcheck-rnn"), "sweep", "--report-dir", "reports"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=900)
    printed = "\n".join(line.rstrip() for line in done.stdout.splitlines()) + "\n"
    run_folder, ratio = re.compile(r"reports/\d{8}-\d{6}-sweep-s0"), re.compile(r" *\b\d+\.\d+(e-?\d+)? │")

    def masked(text: str) -> str:
        return ratio.sub(" RATIO │", run_folder.sub("RUN", text))

    assert done.returncode == 0 and masked(printed) == masked(shown), printed


# --- the site builds ------------------------------------------------------------------------------

def test_the_site_leaves_out_the_bytecode_of_the_docs_scripts(tmp_path):
    """A run that imported docs/mxnet-1.9.1/common.py left __pycache__ beside it, and the site
    build copied it into site/: mkdocs.yml's exclude_docs leaves it out, whatever left it."""
    pytest.importorskip("mkdocs", reason='mkdocs is not installed here: pip install -e ".[docs]"')
    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files

    scripts = tmp_path / "mxnet-1.9.1"
    (scripts / "__pycache__").mkdir(parents=True)
    (tmp_path / "index.md").write_text("# Home\n")
    (scripts / "common.py").write_text("X = 1\n")
    (scripts / "__pycache__" / "common.cpython-311.pyc").write_bytes(b"\0")
    files = get_files(load_config(config_file=str(ROOT / "mkdocs.yml"), docs_dir=str(tmp_path)))
    included = {file.src_uri for file in files if file.inclusion.is_included()}
    assert included == {"index.md", "mxnet-1.9.1/common.py"}


def test_the_docs_scripts_the_tests_run_leave_no_bytecode_beside_them(tmp_path, monkeypatch):
    """tests/docs_scripts.py runs docs/'s scripts (in another interpreter, or imported here) as a
    reader would, importing their siblings, and writes no __pycache__ into docs/."""
    (tmp_path / "common_h38b.py").write_text("SAID = 'CONFIRMED imported beside the script'\n")
    (tmp_path / "finding.py").write_text("from common_h38b import SAID\nprint(SAID)\n")
    done = run_scripts(sys.executable, [tmp_path / "finding.py"], env={})
    assert done.returncode == 0 and done.stdout == "CONFIRMED imported beside the script\n", done.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "common_h38b", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as in a session that writes bytecode
    with no_bytecode():
        __import__("common_h38b")
    monkeypatch.delitem(sys.modules, "common_h38b")
    assert bytecode_folders(tmp_path) == [] and not sys.dont_write_bytecode


@pytest.mark.slow
def test_the_docs_site_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.skip('mkdocs is not installed here: pip install -e ".[docs]"')
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, check=False, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
