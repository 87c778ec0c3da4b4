"""The docs read against the tool (issue 38): what a page quotes or counts is what the tool prints,
knows or registers, so that the two cannot drift apart again.

Each test takes the fact from the tool itself (a header it prints, the families it registers, the
mutants it judges, the targets it leaves out) and the words from the page a new user reads.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gradcheck_rnn.families import BUILT_IN_MODES, family
from gradcheck_rnn.model.profiles import CONFIG_DIR

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def prose(path: Path) -> str:
    """A page's text with every run of white space one space (quotes wrap across lines)."""
    return " ".join(path.read_text(encoding="utf-8").split())


def _plain_install(monkeypatch) -> None:
    """This process as after getting-started's ``pip install .`` on a machine without CUDA: only
    the frameworks of the project's own dependencies are found."""
    import importlib.util

    from gradcheck_rnn.targets.foreign import _FRAMEWORK

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    installed = {re.split(r"[<>=!\[; ]", requirement)[0] for requirement in project["dependencies"]}
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name in
                        set(_FRAMEWORK.values()) - installed else find_spec(name, *args))
    monkeypatch.setattr("gradcheck_rnn.targets._cuda_available", lambda: False)


def test_the_worker_header_the_docs_quote_is_the_one_the_tool_prints(monkeypatch, capsys):
    """getting-started.md quotes the default sweep's header after its own install, scale.md its
    worker part; the default worker count of 40 cases does not depend on how busy the machine is."""
    from gradcheck_rnn.cli.options import announce
    from gradcheck_rnn.run import Execution, RunSpec, default_workers
    from gradcheck_rnn.run.plan import Plan

    _plain_install(monkeypatch)
    spec, _ = RunSpec.build()
    [shown] = [fence for fence in re.findall(r"```text\n(.*?)```", (DOCS / "getting-started.md").read_text(
        encoding="utf-8"), re.DOTALL) if fence.startswith("judging ")]
    [quoted] = re.findall(r"judging 40 cases × [^()]*?\(default: [^)]*\)", prose(DOCS / "how-to" / "scale.md"))
    for busy in (0.0, 1.0):  # an idle machine, and one with a core busy elsewhere
        workers, why = default_workers(len(spec.indices), lambda: busy)
        announce(Plan(spec, Execution(workers=workers), [], why))
        printed = capsys.readouterr().err
        assert printed == shown and " ".join(printed.split()).startswith(quoted + ";"), busy


def test_the_families_page_has_a_row_and_the_id_tokens_of_every_built_in_family():
    page = (DOCS / "concepts" / "families.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    for mode in BUILT_IN_MODES:
        assert any(f"`{mode}`" in row.split("|")[1] for row in rows), f"families.md has no row for {mode}"
        for option in family(mode).options:
            assert f"-{option.label}" in page, f"families.md does not show {mode}'s -{option.label}"


def _readme_findings() -> list[tuple[str, str]]:
    """(library, linked page) of each row of the README's "What it found in frameworks" table."""
    section = README.read_text(encoding="utf-8").split("## What it found in frameworks")[1].split("\n## ")[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [(library.strip(), re.search(r"\]\(([^)]+)\)", details)[1]) for library, _, details in rows[1:]]


def _heading_anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives a page's headings (python-markdown's toc slugify)."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower()) for heading in headings}


def _nav_section(title: str) -> list[str]:
    """The pages filed under a top-level section of mkdocs.yml's nav."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n")[1]
    section = nav.split(f"  - {title}:\n")[1].split("\n  - ")[0]
    return re.findall(r":\s*(\S+\.md)\s*$", section, re.MULTILINE)


def test_every_finding_of_the_readme_links_a_findings_page_that_names_its_library():
    """Each row's page names the library, sits under the site's Findings, and has the anchor
    linked; the page "All of them" points to names every library of the table."""
    findings = _nav_section("Findings")
    for library, link in _readme_findings():
        path, _, anchor = link.partition("#")
        page = ROOT / path
        assert library.split()[0] in page.read_text(encoding="utf-8"), (library, link)
        assert str(page.relative_to(DOCS)) in findings, f"{link} ({library}) is not filed under Findings"
        assert not anchor or anchor in _heading_anchors(page), link
    [all_of_them] = re.findall(r"All of them, and what the targets do about each: \[[^]]+\]\(([^)]+)\)",
                               README.read_text(encoding="utf-8"))
    text = (ROOT / all_of_them).read_text(encoding="utf-8")
    assert [library for library, _ in _readme_findings() if library.split()[0] not in text] == []


def _default_items(module: str, skips_when) -> int:
    """How many tests of the default suite (not ``slow``) in ``tests/<module>.py`` skip when
    ``skips_when(function)`` says their function does: each function's parametrized cases counted
    as pytest collects them, the slow-marked cases left out."""
    import importlib
    import inspect

    tests = importlib.import_module(module)
    count = 0
    for name, function in inspect.getmembers(tests, inspect.isfunction):
        marks = getattr(function, "pytestmark", [])
        if not name.startswith("test_") or any(mark.name == "slow" for mark in marks) or not skips_when(function):
            continue
        cases = 1
        for mark in marks:
            if mark.name == "parametrize":
                cases *= sum(not any(m.name == "slow" for m in getattr(value, "marks", ())) for value in mark.args[1])
        count += cases
    return count


def _source_says(*words: str):
    import inspect

    return lambda function: any(word in inspect.getsource(function) for word in words)


def test_the_readme_counts_the_tests_a_machine_without_cuda_a_browser_or_the_extras_skips():
    """README said "13 skipped" where the suite skipped 28: the count is made from the tests' own
    skip conditions. Without the fla and mlstm extras: the browser test, the site's build test (the
    docs extra), test_fla_mlstm.py's tests and the in-process test of each built-in target that needs
    CUDA or a framework the test extra does not install; with those extras, the targets that need
    CUDA or a venv of their own, and fla-recurrent, which declines once the suite's collection
    imported Triton for a GPU (test_fused_gpu.py and its siblings import it at module level)."""
    from test_builtin_targets import CUDA_ONLY

    from gradcheck_rnn.targets import builtin_names
    from gradcheck_rnn.targets.foreign import _FRAMEWORK, FOREIGN_BUILTINS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    def frameworks(*names: str) -> set[str]:
        return {re.split(r"[<>=!\[; ]", requirement)[0] for name in names for requirement in extras[name]} | {"torch"}

    def skipped_targets(installed: set[str]) -> list[str]:
        return [name for name in [*builtin_names(), *FOREIGN_BUILTINS]
                if name in CUDA_ONLY or _FRAMEWORK.get(name, "torch") not in installed]

    module_names = {"fla": "flash-linear-attention", "mlstm_kernels": "mlstm_kernels"}  # import name -> requirement
    browser = _default_items("test_reports", lambda f: any("chromium" in str(m.kwargs.get("reason", ""))
                                                          for m in getattr(f, "pytestmark", [])))
    site = _default_items("test_docs_examples", _source_says('importorskip("mkdocs"', "mkdocs is not installed"))
    matrix_libs = _default_items("test_fla_mlstm", _source_says("fla", "mlstm_kernels", "installed("))
    # a family's own test of fla's loop (kda, rwkv7): skipped without the fla extra
    family_fla = sum(_default_items(path.stem, _source_says('importorskip("fla'))
                     for path in (ROOT / "tests").glob("test_*_family.py"))
    plain = skipped_targets({module for module, requirement in module_names.items()
                             if requirement in frameworks("test")} | frameworks("test"))
    with_extras = skipped_targets(set(module_names) | frameworks("test", "fla", "mlstm")) + ["fla-recurrent"]
    assert (browser, site) == (1, 1) and matrix_libs > 0
    assert "test_fla_mlstm" not in " ".join(plain) and "triton" in (ROOT / "tests" / "test_fused_gpu.py").read_text()
    text = prose(README)
    [without, with_] = [int(n) for n in re.findall(r'"(\d+) skipped"', text)]
    assert family_fla == 2 and without == browser + site + matrix_libs + family_fla + len(plain), (without, plain)
    assert with_ == browser + site + len(with_extras), (with_, with_extras)
    sentence = text.split(f'"{without} skipped"')[1].split(f'"{with_} skipped"')[0]
    assert all(name in sentence for name in plain) and f"{matrix_libs}" in sentence, sentence


def test_targets_says_not_available_for_what_a_default_sweep_leaves_out_for_no_cuda(monkeypatch):
    """`gradcheck-rnn targets` listed flashrnn-triton and flashrnn-cuda as available where the
    sweep's header leaves them out for "no CUDA device"."""
    from gradcheck_rnn.targets import describe_targets, left_out_builtins

    monkeypatch.setattr("gradcheck_rnn.targets._cuda_available", lambda: False)
    monkeypatch.setattr("gradcheck_rnn.targets.foreign._import_error", lambda module: None)  # every framework here
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    [no_cuda] = re.findall(r"(?:^|; )([\w, -]+) \(no CUDA device\)", left_out_builtins())
    available = {name: ok for name, ok, _ in describe_targets()}
    assert {name: available[name] for name in no_cuda.split(", ")} == dict.fromkeys(no_cuda.split(", "), False)


@pytest.mark.parametrize("path", [*sorted(CONFIG_DIR.glob("*.toml")), README], ids=lambda path: path.name)
def test_a_count_of_mutants_is_the_tools(path):
    """configs/ci.toml said "23 mutants" when the tool judged 32: a count, where one is given, is
    the number `gradcheck-rnn mutants` judges."""
    from gradcheck_rnn.workflows.detection import detection_targets

    mutants, _ = detection_targets(())
    assert all(int(n) == len(mutants) for n in re.findall(r"(\d+) mutants", prose(path))), path


# Where a page lists the built-in modes: the words that start the list, and the page.
MODE_LISTS = [(DOCS / "concepts" / "cases.md", "| mode |"), (DOCS / "contracts.md", "Built in:")]


@pytest.mark.parametrize("page, start", MODE_LISTS, ids=lambda item: getattr(item, "name", item))
def test_a_list_of_the_built_in_modes_names_every_built_in_family(page, start):
    """The cases page listed the modes without slstm, mlstm, gla and gdn: a list of the built-in
    modes is every family the package registers, in its order."""
    [line] = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith(start)]
    assert re.findall(r"`(\w+)`", line) == list(BUILT_IN_MODES), line


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda path: path.name)
def test_every_path_a_profile_names_exists(path):
    """configs/ci.toml named gradcheck_rnn/fd.py after the module had moved to checks/fd.py."""
    named = re.findall(r"[A-Za-z_][\w./-]*/[\w.-]+\.(?:py|md|toml|json)\b", path.read_text(encoding="utf-8"))
    assert [name for name in named if not (ROOT / name).exists()] == [], path


def test_docstrings_quote_no_measured_times():
    """Docstrings quoted timings measured once ("~12 ms the first time", "11 µs with one"), which
    went stale unseen: a figure belongs in benchmarks/RESULTS.md, with its command and date, and a
    docstring says why the code is as it is."""
    import ast

    timing = re.compile(r"\d[\d.]*(?:[–-]\d[\d.]*)?\s?(?:ms|µs|s)\b(?!\w)")
    quoted = []
    for path in sorted((ROOT / "gradcheck_rnn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                prose_only = re.sub(r'"[^"\n]*"', "", ast.get_docstring(node) or "")  # not a message it quotes
                quoted += [f"{path.relative_to(ROOT)}: {match}" for match in timing.findall(prose_only)]
    assert quoted == [], quoted


SHRINK_EXITS = re.compile(r"exits? 0 when (?:it )?shr[au]nk.{0,160}?1 when the case (?:does|did) not fail", re.I)


def test_every_page_gives_shrinks_exit_codes_one_meaning():
    """statuses.md listed shrink among the commands that exit 0 when all pass and 1 on a fail, the
    opposite of what shrink does and the contract says (0: shrunk; 1: the case did not fail):
    README, statuses.md, the shrink how-to and `shrink --help` each say the contract's meaning."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    texts = {path.name: prose(path) for path in (README, DOCS / "concepts" / "statuses.md",
                                                DOCS / "how-to" / "shrink.md")}
    texts["shrink --help"] = " ".join(CliRunner().invoke(main, ["shrink", "--help"]).output.split())
    assert [name for name, text in texts.items() if not SHRINK_EXITS.search(text)] == []
    [judging] = re.findall(r"Exit codes of every judging command \(([^)]*)\)", texts["statuses.md"])
    assert "`shrink`" not in judging.split(";")[0], judging


def test_the_findings_page_counts_the_cases_of_the_default_mutants_run():
    """findings/mutants.md said the default run is "one run of 80 cases" after the matrix
    profile's 40 had joined it: the count is the tool's, every home profile's cases."""
    from gradcheck_rnn.workflows.detection import detection_targets, home_cases

    ids, _ = home_cases(detection_targets()[0])
    [count] = re.findall(r"one run of (\d+) cases", prose(DOCS / "findings" / "mutants.md"))
    assert int(count) == len(ids)


GETTING_STARTED = DOCS / "getting-started.md"


def test_getting_started_lists_every_extra_of_the_package():
    """getting-started's list of extras left out flashrnn, mambapy, fla and mlstm."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    sentence = prose(GETTING_STARTED).split("Optional extras")[1].split("## ")[0]
    assert sorted(re.findall(r"`(\w+)`", sentence)) == sorted(extras), sentence


def test_getting_started_quotes_no_time_of_its_own_and_names_where_it_is_measured():
    """It said "22 s" where a fresh clone took 5-8 s: a time depends on the machine and its load,
    so the page names the section of benchmarks/RESULTS.md that has the command and the load."""
    from test_docs_examples import fences

    text = GETTING_STARTED.read_text(encoding="utf-8")
    for fence in fences(GETTING_STARTED):
        text = text.replace(fence.code, "")
    assert re.findall(r"\b\d[\d.]*(?:[–-]\d[\d.]*)? ?(?:s|seconds|min)\b(?! of)", text) == []
    [section] = re.findall(r'`benchmarks/RESULTS.md`, "([^"]+)"', prose(GETTING_STARTED))
    assert f"## {section} " in (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")


def test_getting_starteds_repro_output_is_what_the_tool_prints(monkeypatch):
    """Its sample repro output had gone stale (column widths, the passing rows' numbers): the same
    as the tool prints today, but for the numbers of rounding size (the passing rows' digits and
    a step's error below 1e-5), which depend on the CPU's GEMM kernels, and the width of the rule
    under the header, which follows the passing rows' widest number."""
    from click.testing import CliRunner

    from test_docs_examples import fences
    from gradcheck_rnn.cli import main

    case_id = "rnn_tanh-L2-uni-I3-H4-T6-B2-len3.6-f32-s9"
    [shown] = [f.code for f in fences(GETTING_STARTED) if f.language == "text" and f.code.startswith(case_id)]
    monkeypatch.setenv("COLUMNS", "80")
    done = CliRunner().invoke(main, ["repro", case_id, "-t", "mutant:truncated-bptt", "--in-process"])

    def masked(text: str) -> list[str]:
        lines = [" ".join(line.split()) for line in text.strip().splitlines()]
        lines = ["RULE" if line and set(line) == {"─"} else line for line in lines]
        passing = sorted(line.split()[0] for line in lines if line.split()[1:2] == ["pass"])
        kept = [re.sub(r"\b\d\.\d+e-(?:0[6-9]|[1-9]\d)\b", "TINY", line) for line in lines
                if line.split()[1:2] != ["pass"]]
        return kept + passing

    assert done.exit_code == 1 and masked(done.output) == masked(shown), done.output


def test_no_file_holds_a_merge_s_conflict_marker():
    """A merge's leftover ``<<<<<<<``, ``=======`` or ``>>>>>>>`` line reads as text in a page and
    as a syntax error nowhere (markdown, TOML comments): look for them in every text file."""
    import os

    marker = re.compile(r"^(<<<<<<< |>>>>>>> |=======$)", re.MULTILINE)
    suffixes = (".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".cfg", ".txt", ".ini")
    found = []
    for folder, subfolders, files in os.walk(ROOT):
        # hidden folders (.git, .venv), built sites and packages hold no file of ours
        subfolders[:] = [name for name in subfolders
                         if not name.startswith(".") and name not in {"site", "build", "dist", "node_modules"}]
        for name in files:
            path = Path(folder, name)
            if name.endswith(suffixes) and marker.search(path.read_text(encoding="utf-8", errors="replace")):
                found.append(str(path.relative_to(ROOT)))
    assert not found, found
