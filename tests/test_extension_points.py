"""Extension points are records: a check, an executor, a family's kernels and mutants are each added
in the one place docs/architecture.md ("Where to add") names, and every part of the tool that needs
to know of them reads that record (issue 43). Each test adds a toy and touches nothing else."""

import ast
from pathlib import Path

import numpy as np
import pytest

import gradcheck_rnn as gr
from gradcheck_rnn.judging import checks
from gradcheck_rnn.judging.checks import CHECKS, Check, Labels, check_names, enabled
from gradcheck_rnn.model.compare import TensorError
from gradcheck_rnn.model import streams
from gradcheck_rnn.reports.document import values_parts

CASE = "gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s5"


def toy_truth(context):
    """The toy check's float64 truth: the loop reference's y, doubled (computed once per case)."""
    toy_truth.calls += 1
    return 2 * context.expected["loop"]["y"]


def toy_check(context, call, tolerances):
    """y + y equals the truth within the tolerance, plus a draw from the toy's own stream."""
    noise = TOY.rng(context.case).standard_normal()  # the toy's stream, claimed by its record
    y = call.base()["y"]
    diff = float(np.max(np.abs(2 * y - context.truth(TOY))))
    return [TensorError("y", "pass" if diff <= 1e-9 else "fail", diff, 0.0, diff / 1e-9, {}, float(noise), 0.0)]


TOY = Check("toy", toy_check, order=15, labels=Labels("twice y", "twice the loop reference's y"), salt=901,
            truth=toy_truth)


@pytest.fixture
def toy_registered():
    """The toy check registered for one test, the registry as it was afterwards."""
    checks.register(TOY)
    toy_truth.calls = 0
    yield TOY
    del CHECKS[TOY.name]


def test_a_check_is_added_by_its_record_alone(toy_registered):
    # its place in the judging order, and in the names every surface offers
    assert check_names()[:3] == ("reference", "toy", "determinism")
    assert enabled({"padding": False}, "p.toml")[:2] == ("reference", "toy")
    # judged like any check, for every target of the case, its truth computed once
    rows = gr.check(["fused-cpu", "torch-native"], CASE, checks=["reference", "toy"], in_process=True)
    assert [(r.target, r.check, r.status) for r in rows] == [
        ("fused-cpu", "reference", "pass"), ("fused-cpu", "toy", "pass"),
        ("torch-native", "reference", "pass"), ("torch-native", "toy", "pass")]
    assert toy_truth.calls == 1
    # its salt is its own, and the reports say what its a and b are
    assert streams.owners()[901] == "the toy check"
    tensor = {"name": "y", "a": 1.0, "b": 2.0}
    assert values_parts(tensor, "toy")[:2] == ["a=1 (twice y),", "b=2 (twice the loop reference's y),"]


def test_the_registry_refuses_a_check_whose_name_or_place_is_taken(toy_registered):
    with pytest.raises(ValueError, match="clashes with 'toy'"):
        checks.register(Check("toy2", toy_check, order=15, labels=Labels("a", "b")))
    with pytest.raises(ValueError, match="clashes with 'padding'"):
        checks.register(Check("padding", toy_check, order=16, labels=Labels("a", "b")))


def test_every_check_says_what_its_values_are():
    """No check is reported with bare "a" and "b": the labels are a field its record cannot leave out."""
    for name, check in CHECKS.items():
        assert check.labels.a and check.labels.b and check.labels.a != "a", name
        what, a_is, b_is = check.labels.what, check.labels.a, check.labels.b
        parts = values_parts({"name": "x", "a": 1.0, "b": 3.0}, name)
        assert f"({a_is})," in parts[0] and f"({b_is})," in parts[1] and parts[0].startswith(what), name


def test_a_salt_has_one_owner():
    """Every private stream of a case has a salt of its own: the salts claimed (the checks', the
    packed tail's, the fd witness's, the drift probe's, a kernel configuration's, the jvp
    directions') are distinct, and a second owner of one is refused."""
    import gradcheck_rnn.judging.judge  # noqa: F401 - the owners beside the checks
    import gradcheck_rnn.model.packed  # noqa: F401
    import gradcheck_rnn.references.drift  # noqa: F401
    import gradcheck_rnn.references.fd  # noqa: F401

    owners = streams.owners()
    named = {"the padding check", "the permutation check", "the linearity check", "the segments check",
             "the packed tail's rows", "the fd witness's directions", "the drift probe's rounding noise",
             "the kernel configuration a target runs a case under", "the jvp and gradgrad checks' directions"}
    assert named <= set(owners.values()) and len(set(owners.values())) == len(owners)
    assert {c.salt for c in CHECKS.values() if c.salt is not None} <= set(owners)
    with pytest.raises(ValueError, match="already the salt of the padding check"):
        streams.claim(CHECKS["padding"].salt, "a new feature")
    with pytest.raises(ValueError, match="claimed by no one"):
        streams.case_rng(1, 12345)


# Where a generator may be made from a seed: the streams module (a case's private streams), the
# case's own data (model/case.py) and the draw (model/profiles.py, from the sweep seed).
GENERATOR_MAKERS = {"model/streams.py", "model/case.py", "model/profiles.py", "model/narrowing.py"}


def test_no_stream_is_made_outside_the_streams_module():
    """A per-case generator made anywhere else would have a salt no one owns."""
    root = Path(gr.__file__).parent
    makers = {"SeedSequence", "PCG64", "default_rng", "RandomState"}
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in makers:
                    found.add(path.relative_to(root).as_posix())
    assert found - GENERATOR_MAKERS == set(), sorted(found - GENERATOR_MAKERS)


class LaneExecutor:
    """A toy executor: judges in this process through the in-process executor and counts the rows it
    yields; it owns one option, ``--lane``."""

    rows = 0

    def __init__(self, setup, execution, jobs):
        from gradcheck_rnn.run import InProcess
        from gradcheck_rnn.targets import resolve_targets

        self.inner = InProcess(setup, resolve_targets(setup.targets))

    def judge(self, jobs, stopping):
        from gradcheck_rnn.model.case import Case

        # jobs come as case references, as to any executor but --in-process: rebuilt from their ids
        cases = [(index, Case.from_id(ref.id)) for index, ref in jobs]
        for index, row in self.inner.judge(cases, stopping):
            LaneExecutor.rows += 1
            yield index, row

    def close(self):
        pass


@pytest.fixture
def lane_registered():
    """The toy executor registered for one test, the registry as it was afterwards."""
    from gradcheck_rnn.run import EXECUTORS, ExecutorEntry, ExecutorOption, register_executor

    entry = register_executor(ExecutorEntry(
        "lane", LaneExecutor, lambda execution, jobs, why: f"on lane {execution.option('lane')}", "a toy",
        (ExecutorOption("lane", "Which lane.", "N", "7"),), place="on a lane"))
    LaneExecutor.rows = 0
    yield entry
    del EXECUTORS[entry.name]


def test_an_executor_is_added_by_its_entry_alone(lane_registered):
    from gradcheck_rnn.errors import UsageError
    from gradcheck_rnn.run import judge_run
    from gradcheck_rnn.run.plan import RunRequest, plan
    from gradcheck_rnn.run.spec import Judging, Selection

    def request(**how):
        return RunRequest(targets=("fused-cpu",), selection=Selection(cases=2, seed=3),
                          judging=Judging(("reference",)), workers=1, **how)

    planned = plan(request(executor="lane", executor_options=(("lane", "7"),)))
    assert "on lane 7" in planned.header()  # the header says where, in the entry's words
    run = judge_run(planned.spec, planned.execution)
    local = plan(request(in_process=True))
    assert LaneExecutor.rows == len(run.results) > 0  # every row came through the toy
    assert [(r.case_id, r.status) for r in run.results] == \
        [(r.case_id, r.status) for r in judge_run(local.spec, local.execution).results]
    # the options it owns are checked as --scheduler is for dask
    with pytest.raises(UsageError, match="--executor lane needs --lane N, e.g. 7"):
        plan(request(executor="lane"))
    with pytest.raises(UsageError, match="--lane is only for --executor lane; add --executor lane or drop --lane"):
        plan(request(executor_options=(("lane", "7"),)))
    with pytest.raises(UsageError, match="--in-process judges in this process and --executor lane on a lane"):
        plan(request(executor="lane", executor_options=(("lane", "7"),), in_process=True))


def test_the_command_line_offers_every_executor_and_its_options():
    """--executor's choices and each executor's own options come from the registry."""
    from click.testing import CliRunner

    from gradcheck_rnn.cli import main
    from gradcheck_rnn.run import EXECUTORS

    help_text = CliRunner().invoke(main, ["sweep", "--help"], terminal_width=200).output
    for entry in EXECUTORS.values():
        assert entry.name in help_text and entry.help in help_text
        assert all(f"--{option.name}" in help_text for option in entry.options)


@pytest.fixture
def toy_family():
    """The toy family loaded (as ``--family extension_toys:TOY`` does) for one test, gone afterwards."""
    from gradcheck_rnn import families

    loaded = families.load("extension_toys:TOY")
    yield loaded
    del families._REGISTRY[loaded.token]


def test_a_family_brings_its_kernel_and_mutants(toy_family):
    """fused-cpu runs the toy family through the kernel the family names; its mutant is a name
    every surface knows, judged on its home profile, caught on its cases and a skip on others."""
    from gradcheck_rnn.targets.mutant_names import check_mutant_name
    from gradcheck_rnn.targets.kernel_bugs import home_profile

    toy_case, s6_case = "toys6-L1-uni-I2-H2-N2-R1-T3-B2-len3.1-f64-s1", "s6-L1-uni-I2-H2-N2-R1-T3-B2-len3.1-f64-s1"
    [correct] = gr.check("fused-cpu", toy_case, checks=["reference"], in_process=True)
    assert correct.status == "pass", correct.message
    check_mutant_name("toy-gate-grad-dropped")  # known without torch, as a built-in's name is
    assert home_profile("toy-gate-grad-dropped") == toy_family.home_profile == "families"
    [caught] = gr.check("mutant:toy-gate-grad-dropped", toy_case, checks=["reference"], in_process=True)
    assert caught.status == "fail", caught.message
    [elsewhere] = gr.check("mutant:toy-gate-grad-dropped", s6_case, checks=["reference"], in_process=True)
    assert elsewhere.status == "skip" and "toys6 kernel" in elsewhere.message


def test_a_family_owns_its_kink_and_its_home():
    from gradcheck_rnn.families import family

    assert [m for m in ("rnn_relu", "rnn_tanh", "lstm", "gru", "s6", "gla") if family(m).kinked] == ["rnn_relu"]
    assert {m: family(m).home_profile for m in ("lstm", "s6", "conv1d", "gla", "deltaproduct")} == {
        "lstm": "ci", "s6": "families", "conv1d": "families", "gla": "matrix", "deltaproduct": "matrix"}
