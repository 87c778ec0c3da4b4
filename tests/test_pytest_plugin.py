"""The pytest plugin: the rnn_gradcheck fixture, its failure messages, vacuity, --gradcheck-rnn-cases
and the regression tests `repro --emit-test` writes, run under pytest."""

import re
from pathlib import Path

import pytest

# pytester's in-process runs drop the modules they imported when their test ends, and jaxlib
# aborts the process when it is imported a second time: import the JAX reference here, before any
# run. Other dropped modules come back as second copies (other classes) for the tests after this
# file, so tests/conftest.py runs this file's tests last.
import gradcheck_rnn.references.jax_cudnn  # noqa: F401

pytest_plugins = ["pytester"]

SHRINK_PAGE = (Path(__file__).parent.parent / "docs" / "how-to" / "shrink.md").read_text()
MINIMAL = "lstm-L1-uni-I1-H1-T2-B1-len2-f32-s918273"  # where `shrink` leaves truncated BPTT (test_shrink.py)


def outcome(pytester, source, *args):
    pytester.makepyfile(source)
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_a_sweep_of_a_correct_kernel_passes(pytester):
    result = outcome(pytester, """
        def test_fused(rnn_gradcheck):
            results = rnn_gradcheck.sweep("fused-cpu", cases=3, seed=1, checks=["reference", "padding"])
            assert len(results) == 6 and {r.check for r in results} == {"reference", "padding"}
    """)
    result.assert_outcomes(passed=1)


def test_a_failing_sweep_fails_the_test_with_the_table_and_repro_commands(pytester):
    result = outcome(pytester, """
        def test_mutant(rnn_gradcheck):
            rnn_gradcheck.sweep("mutant:truncated-bptt", cases=3, seed=1, checks=["reference"], rtol=0.001)
    """)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "GradcheckFailed" in text and "failures found: 2 fail in the sweep of 3 cases (profile ci, seed 1)" in text
    ids = re.findall(r"gradcheck-rnn repro (\S+) --target mutant:truncated-bptt --rtol 0.001", text)
    assert ids, text
    assert all(re.search(rf"fail +{re.escape(case_id)}\n", text) for case_id in ids), text  # the failure list


def test_check_judges_one_case_id(pytester):
    result = outcome(pytester, f"""
        import pytest
        from gradcheck_rnn.pytest_plugin import GradcheckFailed

        def test_fused(rnn_gradcheck):
            [row] = rnn_gradcheck.check("fused-cpu", "{MINIMAL}")
            assert row.status == "pass"

        def test_mutant(rnn_gradcheck):
            with pytest.raises(GradcheckFailed, match="gradcheck-rnn repro {MINIMAL} --target mutant:truncated-bptt"):
                rnn_gradcheck.check("mutant:truncated-bptt", "{MINIMAL}")
    """)
    result.assert_outcomes(passed=2)


def test_a_sweep_that_judged_nothing_fails(pytester):
    result = outcome(pytester, """
        class OnlyGigantic:
            name = "only-gigantic"

            def supports(self, config):
                return "only-gigantic runs H >= 1000"

            def run(self, case):
                raise AssertionError("never called")

        def test_vacuous(rnn_gradcheck):
            rnn_gradcheck.sweep(OnlyGigantic(), cases=2, checks=["reference"])
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*nothing was checked: all 2 results were skipped*only-gigantic runs H >= 1000*in the sweep of 2 cases*"])


def test_the_case_count_option_overrides_every_sweep(pytester):
    source = """
        def test_count(rnn_gradcheck):
            assert len(rnn_gradcheck.sweep("fused-cpu", cases=1, checks=["determinism"])) == {}
    """
    outcome(pytester, source.format(4), "--gradcheck-rnn-cases", "4").assert_outcomes(passed=1)
    refused = outcome(pytester, source.format(1), "--gradcheck-rnn-cases", "0")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--gradcheck-rnn-cases 0 is not allowed*"])


def test_the_readme_fixture_example_runs(pytester):
    example = next(block for block in re.findall(r"```python\n(.*?)```", SHRINK_PAGE, flags=re.S)
                   if "rnn_gradcheck" in block)
    result = outcome(pytester, example)
    result.assert_outcomes(passed=2, xfailed=1)


def test_a_failure_shows_the_users_line_not_the_plugins_source(pytester):
    result = outcome(pytester, """
        def test_mutant(rnn_gradcheck):
            rnn_gradcheck.check("mutant:truncated-bptt", "lstm-L1-uni-I1-H1-T2-B1-len2-f32-s918273")
    """)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert 'rnn_gradcheck.check("mutant:truncated-bptt"' in text  # the user's own line
    assert "__tracebackhide__" not in text and "def _judge" not in text and "CaseResult(" not in text


def test_sweep_narrows_the_draw_like_the_command_line(pytester):
    result = outcome(pytester, """
        from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget

        class GruOnly:
            name = "gru-only"

            def supports(self, config):
                return True if config.mode == "gru" and config.num_layers == 1 else "one-layer GRU only"

            def run(self, case):
                return FusedCPUTarget().run(case)

        def test_gru(rnn_gradcheck):
            results = rnn_gradcheck.sweep(GruOnly(), cases=4, seed=2, checks=["reference"], modes=["gru"], layers=1)
            assert len(results) == 4 and all(r.status in ("pass", "skip") for r in results)
            assert sum(r.status == "pass" for r in results) >= 3  # narrowed: not a quarter of the cases
    """)
    result.assert_outcomes(passed=1)



TRUNCATED = "mutant:truncated-bptt"
# The future check's minimal case (tests/test_shrink.py): one step of a two-step T, which the
# reference comparison passes (no future inside the sequence) and the future check fails.
FUTURE = "gru-L1-uni-I1-H1-T2-B1-len1-f64-s2-wx"


@pytest.fixture(scope="module", autouse=True)
def emitted_tests(tmp_path_factory):
    """``repro --emit-test`` files, written before this module's first pytester run: a run drops
    the modules it imported, and the command line would then print with second copies of rich's."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main

    folder = tmp_path_factory.mktemp("emitted")
    emitted = {"test_mutant.py": (MINIMAL, [TRUNCATED]), "test_fused.py": (MINIMAL, ["fused-cpu"]),
               "test_future.py": (FUTURE, [TRUNCATED, "--check", "future"])}
    codes = {}
    for name, (case_id, args) in emitted.items():
        command = ["repro", case_id, "--target", *args, "--rtol", "0.001", "--emit-test", str(folder / name)]
        codes[name] = CliRunner().invoke(main, command).exit_code
    return codes, {name: (folder / name).read_text() for name in emitted}


def test_emitted_tests_fail_for_the_mutant_and_pass_for_the_correct_kernel(pytester, emitted_tests):
    """``repro --emit-test`` writes a pytest file per case; run under pytest, the mutant's fails and
    fused-cpu's passes, and the future check's test fails where the reference comparison passes."""
    codes, sources = emitted_tests
    assert codes == {"test_mutant.py": 1, "test_fused.py": 0, "test_future.py": 1}
    assert f"CASE_ID = {MINIMAL!r}" in sources["test_mutant.py"]
    assert "'output': 0.001," in sources["test_mutant.py"]  # the override is in force
    assert f"gradcheck-rnn repro {MINIMAL} --target {TRUNCATED} --rtol 0.001" in sources["test_mutant.py"]
    for name, source in sources.items():
        (pytester.path / name).write_text(source)
    result = pytester.runpytest("-rA", "-p", "no:cacheprovider")
    report = result.stdout.str()
    result.assert_outcomes(failed=2, passed=2)
    assert re.search(r"PASSED test_fused\.py::test_\w+\[reference\]", report), report
    assert re.search(r"FAILED test_mutant\.py::test_\w+\[reference\]", report), report
    assert re.search(r"PASSED test_future\.py::test_\w+\[reference\]", report), report
    assert re.search(r"FAILED test_future\.py::test_\w+\[future\]", report), report
    assert f"reproduce: gradcheck-rnn repro {MINIMAL} --target {TRUNCATED}" in report
