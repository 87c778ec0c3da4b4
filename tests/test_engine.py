"""The judging engine: private copies, validated outputs, one stored verdict, the public API,
literal target text, object targets' repro lines, and no import cycles (issue: one judging engine)."""

import ast
import functools
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import gradcheck_rnn as gr
from gradcheck_rnn.cli import main
from gradcheck_rnn.targets import resolve_target

import engine_targets

CHECKS = ["reference", "padding", "permutation", "future", "determinism", "linearity", "stateless"]
CASE = "gru-L2-bi-I3-H4-T5-B3-len5.3.2-f32-s11"

# the pipeline as users run it: judging in worker processes (see conftest.py)
pytestmark = pytest.mark.usefixtures("worker_processes")


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def by_check(results):
    return {r.check: r for r in results}


def test_a_target_that_writes_into_its_inputs_hurts_no_one():
    results = gr.check(["engine_targets:writes_into_its_inputs", "fused-cpu"], CASE, checks=CHECKS)
    assert all(r.status in ("pass", "skip") for r in results), [(r.target, r.check, r.message) for r in results]
    assert sum(r.status == "pass" for r in results if r.target == "fused-cpu") >= 5


@pytest.mark.parametrize("target, status, words", [
    ("drops_the_input_gradient", "fail", "x: missing"),
    ("wrong_shapes", "fail", "shape (4, 3, 8), expected (5, 3, 8)"),
    ("returns_none", "error", "run() returned NoneType, expected gradcheck_rnn.Outputs"),
    ("integer_gradients", "fail", "x: dtype int64, not a float dtype"),
    ("always_nan", "fail", "non-finite value(s) in the target"),
])
def test_malformed_outputs_give_one_clear_message_in_every_check(target, status, words):
    results = gr.check(f"engine_targets:{target}", CASE, checks=CHECKS)
    for result in results:
        assert result.status == status, (result.check, result.status, result.message)
        assert words in result.message, (result.check, result.message)
        assert "Error" not in result.message.split(":")[0], result.message  # no crash inside a check


def test_non_finite_output_is_a_fail_never_nondeterminism():
    [result] = gr.check("engine_targets:always_nan", CASE, checks=["determinism"])
    assert result.status == "fail" and "non-finite" in result.message


def test_a_nondeterministic_kernel_has_its_own_status_and_exit_code():
    run = gr.api.check_run("mutant:nondeterministic-weight-grad", CASE, checks=["reference", "determinism"])
    results = by_check(run.results)
    assert results["determinism"].status == "nondeterministic"
    assert "two runs of the same case differ" in results["determinism"].message
    assert run.exit_code == 1
    correct = by_check(gr.check("fused-cpu", CASE, checks=["determinism", "stateless"]))
    assert correct["determinism"].status == correct["stateless"].status == "pass"


def test_shared_checks_run_the_target_once_on_the_base_case():
    engine_targets.counting.calls = 0
    # counted in this process: judged here (in_process), not in a worker process
    gr.check("engine_targets:counting", CASE, checks=["reference", "padding", "permutation", "linearity", "stateless"],
             in_process=True)
    # one base run + padding 1 + permutation 1 + linearity 2 + stateless 2 (another case, then A
    # again; its first A is the base run). Without sharing: 5 base runs more
    assert engine_targets.counting.calls == 7


@pytest.mark.parametrize("checks, runs", [
    (["reference", "determinism"], 2),  # the base run is the first of determinism's two
    (["determinism"], 2),
    (["reference", "padding", "determinism"], 4),  # padding's run came between: two fresh runs
])
def test_determinism_takes_the_base_run_only_when_nothing_ran_between(checks, runs):
    engine_targets.counting.calls = 0
    results = gr.check("engine_targets:counting", CASE, checks=checks, in_process=True)
    assert engine_targets.counting.calls == runs
    assert all(r.status == "pass" for r in results)


def test_a_stateful_mutant_is_still_caught_with_shared_base_runs():
    results = gr.check("mutant:stale-dh0-buffer", "lstm-L1-uni-I2-H3-T4-B2-len4.2-f64-s3", checks=CHECKS)
    assert any(r.status in ("fail", "nondeterministic") for r in results)


def test_target_text_is_printed_literally_by_check_and_repro():
    code, output = invoke("check", "--case-id", CASE, "-t", "engine_targets:raises_markup")
    assert code == 1 and "shape [/b] mismatch" in output, output
    code, output = invoke("repro", CASE, "-t", "engine_targets:raises_with_brackets")
    assert code == 1 and "stacks[key] = stacks[key]" in output, output


def test_the_reference_does_not_turn_on_x64_for_the_target():
    import jax

    assert not jax.config.jax_enable_x64
    # in this process: the references' x64 switch must not leak into the target beside them
    results = gr.check(["fused-cpu", "engine_targets:sees_x64"], CASE, checks=["reference"], in_process=True)
    assert [r.status for r in results] == ["pass", "pass"], [r.message for r in results]
    assert not jax.config.jax_enable_x64


def test_object_targets_are_named_so_their_repro_line_runs():
    [result] = gr.check(engine_targets.counting, CASE, checks=["reference"])
    assert result.target == "engine_targets:counting"
    assert "--target engine_targets:counting" in result.repro
    assert resolve_target(result.target).impl is engine_targets.counting

    class Local:
        name = "local-rnn"

        def run(self, case):
            return engine_targets.counting.run(case)

    [local] = gr.check(Local(), CASE, checks=["reference"])
    assert local.status == "pass" and local.target == "local-rnn"
    assert "not importable" in local.repro and "gradcheck-rnn repro" not in local.repro


def test_sweep_returns_a_run_with_its_verdict():
    run = gr.sweep("fused-cpu", cases=2, seed=1, checks=["reference"], modes=["gru"])
    assert run.exit_code == 0 and run.reason.startswith("all passed") and not run.failures
    assert {r.mode for r in run.results} == {"gru"}
    vacuous = gr.sweep(["fused-cpu", "plugin_targets:only_f16"], cases=2, seed=1, checks=["reference"],
                       dtypes=["f32"])
    assert vacuous.exit_code == 5 and "plugin_targets:only_f16" in vacuous.reason


def test_every_report_stores_and_shows_the_one_verdict(tmp_path):
    code, output = invoke("sweep", "-t", "fused-cpu", "-t", "plugin_targets:only_f16", "-n", 2, "--dtype", "f32",
                          "--report-dir", tmp_path, "-j", 1)
    assert code == 5, output
    run_dir = tmp_path / "latest"
    document = json.loads((run_dir / "results.json").read_text())
    assert document["verdict"]["exit_code"] == 5
    html = (run_dir / "report.html").read_text()
    assert "nothing was checked" in html or "judged on no case" in html
    assert "passed" not in html.split("<h1", 1)[1].split("</h1>", 1)[0]
    code, output = invoke("report", str(run_dir))
    assert code == 5 and document["verdict"]["reason"] in output


def test_a_mutants_run_stores_its_own_verdict(tmp_path):
    code, output = invoke("mutants", "-m", "truncated-bptt", "-n", 2, "--check", "reference", "--report-dir",
                          tmp_path, "-j", 1)
    assert code == 0, output
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert document["verdict"]["exit_code"] == 0
    code, reprinted = invoke("report", str(tmp_path / "latest"))
    assert code == 0 and "Mutants: 1/1 caught" in reprinted and document["verdict"]["reason"] in reprinted


def test_emitted_regression_tests_use_only_top_level_names(tmp_path):
    path = tmp_path / "test_emitted.py"
    code, _ = invoke("repro", "lstm-L1-uni-I1-H1-T2-B1-len2-f32-s918273", "-t", "mutant:truncated-bptt",
                     "--emit-test", path)
    imports = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names}
    assert not [node for node in imports if isinstance(node, ast.ImportFrom)]
    assert names == {"pytest", "gradcheck_rnn"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # the two tests below only read it: the package is parsed once
def _import_edges() -> dict[str, set[str]]:
    """Every import of every module, lazy ones inside functions included: module -> the package's
    modules it imports. The foreign-target client is left out: it is a standalone script that runs
    in another interpreter, where gradcheck_rnn may not even be installed (docs/foreign-targets.md)."""
    root = Path(gr.__file__).parent
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    modules.pop("gradcheck_rnn.targets.foreign.client")
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                found = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            edges[name].update(f for f in found if f in modules and f != name)
    return edges


def test_the_package_has_no_import_cycle():
    """Every import of every module, lazy ones inside functions included, as a graph: no cycle."""
    edges = _import_edges()
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(edges[module]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = 2

    sys.setrecursionlimit(10_000)
    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


# The stages in the order data flows (docs/architecture.md, "The layout"): a module imports from its
# own stage and the stages before it, and from the modules beside them (errors, runtime, ...).
STAGES = ("families", "model", "references", "kernels", "targets", "judging", "rows", "run", "reports", "workflows",
          "cli")
# The imports that still run back up a stage (issue 43 moved tensor errors, numbers, statuses and
# tolerances to model/, and the packed adapter to targets/): judging makes the rows, whose factory
# is rows/result.py's. Listed so that no new one can be added; remove an entry when its import goes.
KNOWN_UPWARD = {
    ("gradcheck_rnn.judging.judge", "gradcheck_rnn.rows.result"),
}


def test_the_stage_order_is_the_one_the_architecture_page_documents():
    """STAGES is docs/architecture.md's table of folders ("The layout"), read top to bottom."""
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    table = page.split("## The layout", 1)[1].split("## ", 1)[0]
    folders = [name for line in table.splitlines() if line.startswith("| `")
               for name in re.findall(r"`(\w+)/`", line.split("|")[1])]
    assert tuple(folders) == STAGES


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 and parts[1] in STAGES else None


def test_no_import_runs_back_up_a_stage():
    """No module imports from a later stage than its own (lazy imports included), but the known
    vocabulary imports listed above, each of which must still exist (the list only shrinks)."""
    upward = {(module, imported) for module, imports in _import_edges().items() for imported in imports
              if _stage(module) is not None and _stage(imported) is not None and _stage(imported) > _stage(module)}
    assert upward - KNOWN_UPWARD == set(), f"imports that run back up a stage: {sorted(upward - KNOWN_UPWARD)}"
    assert KNOWN_UPWARD - upward == set(), f"gone, remove from KNOWN_UPWARD: {sorted(KNOWN_UPWARD - upward)}"


def test_a_target_that_cannot_take_the_case_is_blamed_at_its_own_definition():
    [result] = gr.check("engine_targets:takes_no_case", CASE, checks=["reference"])
    assert result.status == "error" and "takes 0 positional arguments" in result.message
    assert "calling the target defined at engine_targets.py:" in result.message, result.message


def test_stateless_does_not_judge_the_outputs_of_the_case_it_runs_in_between():
    """The other case is only a call in between: its overflow is not the checked case's failure."""
    [result] = gr.check("engine_targets:overflows_on_other_seeds", CASE, checks=["stateless"])
    assert CASE.endswith("-s11") and result.status == "pass", result.message
    [reference] = gr.check("engine_targets:overflows_on_other_seeds", CASE.replace("-s11", "-s12"),
                           checks=["reference"])
    assert reference.status == "fail" and "non-finite" in reference.message  # on its own case it fails


def test_the_package_is_laid_out_by_stage_and_the_old_module_names_still_import():
    """One folder per stage of the pipeline (docs/architecture.md, "The layout"); the few loose
    modules are the public surfaces and process set-up, and the old names of moved modules keep
    importing the same objects, through the one compatibility module (no file at the old place)."""
    import importlib

    from gradcheck_rnn._compat import MOVED

    root = Path(gr.__file__).parent
    folders = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    assert folders == {"families", "model", "references", "kernels", "targets", "judging", "rows", "run",
                       "reports", "workflows", "cli"}
    loose = {p.stem for p in root.glob("*.py")}
    assert loose == {"__init__", "_compat", "api", "pytest_plugin", "strategies", "runtime", "errors", "importing",
                     "version"}
    assert {"gradcheck_rnn.packed", "gradcheck_rnn.result", "gradcheck_rnn.compare", "gradcheck_rnn.statuses",
            "gradcheck_rnn.judge"} <= set(MOVED)
    for old, new in MOVED.items():
        assert not (root.parent / (old.replace(".", "/") + ".py")).exists(), old
        moved = importlib.import_module(new)
        kept = importlib.import_module(old)
        public = [name for name in vars(moved) if not name.startswith("_")
                  and getattr(getattr(moved, name), "__module__", None) == moved.__name__]
        assert public and all(getattr(kept, name) is getattr(moved, name) for name in public), old
    from gradcheck_rnn.compare import TensorError  # noqa: F401 - the from-import form too
