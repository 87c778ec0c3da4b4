"""Narrowing the draw from the command line, gr.sweep and the pytest fixture (issue 29):
projections, bias, initial states, head gradients, sizes, length patterns, zero-length sequences.

Each narrowing is shown to change the draw (the same cases without it break the property) and to
hold on every case drawn with it; a narrowing that leaves nothing to draw is exit 2.
"""

import dataclasses
import json

import pytest
from click.testing import CliRunner

import gradcheck_rnn as gr
from gradcheck_rnn.model.case import CaseRef
from gradcheck_rnn.cli import main
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.model.profiles import draw_case_ref, load_profile
from gradcheck_rnn.model.narrowing import KNOB, KNOBS, NO_NARROWING, SHAPE_KNOBS, Narrowing, draw_flags, parse_range
from gradcheck_rnn.run import Judging, RunSpec, Selection

TARGET = "narrow_targets:only_lstm_without_projections"
CASES = 40


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def refs(narrowing=NO_NARROWING, cases=CASES, modes=(), config="ci"):
    profile = dataclasses.replace(narrowing, modes=tuple(modes)).apply(load_profile(config))
    return [draw_case_ref(profile, 0, i) for i in range(cases)]


def lengths(ref):
    return [int(v) for v in ref.id.split("-len")[1].split("-")[0].split(".")]


# Each narrowing and the property every case drawn with it has (and some case drawn without it lacks).
PROPERTIES = {
    "no projections": (Narrowing(projections=False), lambda c: c.config.proj_size == 0),
    "projections": (Narrowing(projections=True), lambda c: c.config.mode == "lstm" and c.config.proj_size > 0),
    "no bias": (Narrowing(bias=False), lambda c: not c.config.bias),
    "bias": (Narrowing(bias=True), lambda c: c.config.bias),
    "no initial state": (Narrowing(initial_state=False), lambda c: "z" in c.id.split("-")),
    "initial state": (Narrowing(initial_state=True), lambda c: "z" not in c.id.split("-")),
    "heads": (Narrowing(heads=("states", "last")), lambda c: "-gstates" in c.id or "-glast" in c.id),
    "input size": (Narrowing(input_size=(2, 3)), lambda c: 2 <= c.config.input_size <= 3),
    "hidden size": (Narrowing(hidden_size=(4, 4)), lambda c: c.config.hidden_size == 4),
    "zero length": (Narrowing(zero_length=True), lambda c: 0 in lengths(c)),
    "no zero length": (Narrowing(zero_length=False), lambda c: 0 not in lengths(c)),
    "length pattern": (Narrowing(lengths=("all_full",), zero_length=False), lambda c: set(lengths(c)) == {c.config.max_len}),
}


@pytest.mark.parametrize("name", PROPERTIES)
def test_every_case_drawn_with_a_narrowing_has_it_and_the_profile_alone_does_not(name):
    narrowing, holds = PROPERTIES[name]
    assert all(holds(ref) for ref in refs(narrowing)), name
    assert not all(holds(ref) for ref in refs()), f"the ci profile alone already draws only {name}"


def test_no_narrowing_is_the_profile_itself_bit_for_bit():
    profile = load_profile("ci")
    assert Narrowing().apply(profile) is profile
    spec, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=CASES))
    assert [ref.id for _, ref in spec.jobs()] == [ref.id for ref in refs()]


def test_a_surface_switch_leaves_the_main_draw_of_each_case_as_it_was():
    """Projections, bias and zero lengths come from the case's second generator: mode, sizes,
    dtype, variants and data seed of case i stay those of the profile's own draw (long memory
    follows bias: a cuDNN cell has the regime only with biases)."""
    def main_draw(ref):
        head, tail = ref.id.split("-len")
        kept = [t for t in head.split("-") if not t.startswith("P") and t not in ("nobias", "longmem")]
        return kept, tail.split("-", 1)[1]

    plain = refs(modes=("lstm",))
    narrowed = refs(Narrowing(projections=False), modes=("lstm",))
    assert any(r.config.proj_size for r in plain)  # the ci profile draws projections for LSTMs
    assert [main_draw(r) for r in narrowed] == [main_draw(r) for r in plain]


@pytest.mark.parametrize("narrowing, config, words", [
    (Narrowing(hidden_size=(7, 9)), "ci", ["--hidden-size 7..9", "hidden_size 1..5"]),
    (Narrowing(input_size=(6, 6)), "ci", ["--input-size 6..6", "input_size 1..5"]),
    (Narrowing(heads=("states",)), "short-f32", ["--heads states", "heads y only"]),
    (Narrowing(lengths=("all_one",)), "interp", ["--length-pattern all_one", "random"]),
    (Narrowing(projections=True), "families", ["--projections", "draw.proj = 0"]),
    (Narrowing(zero_length=True), "short-f32", ["--zero-length", "draw.zero_length = 0"]),
    (Narrowing(bias=False), "short-f32", ["--no-bias", "draw.bias = 1"]),
    (Narrowing(projections=True, hidden_size=(1, 1)), "ci", ["--projections", "hidden_size >= 2", "1..1"]),
])
def test_a_narrowing_that_leaves_nothing_to_draw_names_the_conflict(narrowing, config, words):
    with pytest.raises(UsageError) as raised:
        narrowing.apply(load_profile(config))
    message = str(raised.value)
    assert "leaves nothing to draw" in message and all(w in message for w in words), message


def test_projections_with_modes_that_have_none_leave_nothing_to_draw():
    with pytest.raises(UsageError, match="projections are LSTM only, and profile ci draws gru"):
        Narrowing(modes=("gru",), projections=True).apply(load_profile("ci"))


@pytest.mark.parametrize("text, bounds", [("3", (3, 3)), ("2..5", (2, 5)), (" 2 .. 5 ", (2, 5)), (4, (4, 4)),
                                          ((1, 2), (1, 2)), (None, None)])
def test_a_size_range_reads_as_one_size_or_min_max(text, bounds):
    assert parse_range(text, "--hidden-size") == bounds


@pytest.mark.parametrize("text", ["0", "5..2", "a..b", "2-5", (0, 3), True, 2.5])
def test_a_bad_size_range_is_one_sentence(text):
    with pytest.raises(UsageError, match="is not allowed; give a size or a range MIN..MAX"):
        parse_range(text, "--hidden-size")


def test_the_spec_records_the_narrowing_and_reads_it_back():
    narrowing = Narrowing(modes=("lstm",), projections=False, heads=("all", "y"), hidden_size=(2, 4),
                          zero_length=False)
    spec, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=3, narrowing=narrowing))
    data = json.loads(json.dumps(spec.to_json()))
    assert RunSpec.from_json(data) == spec
    only_lstm, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=3, narrowing=Narrowing(modes=("lstm",))))
    assert RunSpec.from_json(data).differences(only_lstm)
    del data["narrowing"]  # a run written before narrowing existed reads as a run without it
    assert RunSpec.from_json(data).narrowing == Narrowing()
    assert draw_flags(spec.draw_json()) == ["--mode lstm", "--no-projections", "--no-zero-length", "--heads all",
                                            "--heads y", "--hidden-size 2..4"]


def test_the_command_line_narrows_records_and_shows_the_narrowing(tmp_path):
    code, output = invoke("sweep", "-n", 2, "-t", "fused-cpu", "--mode", "lstm", "--no-projections", "--hidden-size",
                          "2..3", "--heads", "y", "--no-zero-length", "--report-dir", tmp_path)
    assert code == 0, output
    header = " ".join(output.split())
    assert "narrowed by --mode lstm --no-projections --no-zero-length --heads y --hidden-size 2..3" in header
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    spec = RunSpec.from_json(document["spec"])
    assert spec.narrowing == Narrowing(modes=("lstm",), projections=False, heads=("y",), hidden_size=(2, 3),
                                      zero_length=False)
    for row in document["results"]:
        case = CaseRef.from_id(row["case_id"])
        assert case.config.proj_size == 0 and 2 <= case.config.hidden_size <= 3 and "-gy" in case.id
    assert "narrowed by `--mode lstm --no-projections" in (tmp_path / "latest" / "report.md").read_text()


def test_the_profiles_own_draw_shows_no_narrowing(tmp_path):
    code, output = invoke("sweep", "-n", 1, "-t", "fused-cpu", "--report-dir", tmp_path)
    assert code == 0 and "narrowed" not in output, output


def test_a_conflicting_narrowing_is_exit_2_without_a_report(tmp_path):
    code, output = invoke("sweep", "-n", 2, "-t", "fused-cpu", "--mode", "gru", "--projections",
                          "--report-dir", tmp_path / "reports")
    assert code == 2 and "leaves nothing to draw" in output and "Traceback" not in output, output
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())
    code, output = invoke("sweep", "--hidden-size", "3..1", "--report-dir", tmp_path / "reports")
    assert code == 2 and "'--hidden-size': '3..1' is not allowed" in output, output


def test_shards_of_a_narrowed_run_merge_into_the_same_cases(tmp_path):
    flags = ["-n", 4, "-t", "fused-cpu", "--mode", "lstm", "--no-projections", "--hidden-size", "2"]
    for k in (1, 2):
        assert invoke("sweep", *flags, "--shard", f"{k}/2", "--report-dir", tmp_path / f"s{k}")[0] == 0
    code, output = invoke("merge", tmp_path / "s1", tmp_path / "s2", "--report-dir", tmp_path / "merged")
    assert code == 0, output
    merged = json.loads((tmp_path / "merged" / "latest" / "results.json").read_text())
    narrowing = Narrowing(modes=("lstm",), projections=False, hidden_size=(2, 2))
    whole, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=4, narrowing=narrowing))
    assert sorted({row["case_id"] for row in merged["results"]}) == sorted(ref.id for _, ref in whole.jobs())
    assert merged["spec"]["narrowing"]["modes"] == ["lstm"] and "modes" not in merged["spec"]
    # a shard whose spec has --mode at its top level, as written before the narrowing held it: the same run
    stored = next((tmp_path / "s1").glob("*/results.json"))
    document = json.loads(stored.read_text())
    shape = {name: document["spec"]["narrowing"].pop(name) for name in ("modes", "layers", "bidirectional", "dtypes")}
    stored.write_text(json.dumps({**document, "spec": {**document["spec"], **shape}}))
    code, output = invoke("merge", tmp_path / "s1", tmp_path / "s2", "--report-dir", tmp_path / "merged")
    assert code == 0, output
    unnarrowed = tmp_path / "plain"
    assert invoke("sweep", "-n", 4, "-t", "fused-cpu", "--mode", "lstm", "--shard", "2/2",
                  "--report-dir", unnarrowed)[0] == 0
    code, output = invoke("merge", tmp_path / "s1", unnarrowed, "--report-dir", tmp_path / "mixed")
    assert code == 2 and "narrowing" in output, output


def test_last_failed_refuses_narrowing_flags(tmp_path):
    code, output = invoke("sweep", "--last-failed", "--no-bias", "--report-dir", tmp_path)
    assert code == 2 and "--[no-]bias cannot be given with it" in output, output


def test_gr_sweep_takes_the_same_narrowing():
    run = gr.sweep(TARGET, cases=3, checks=["reference"], modes=["lstm"], projections=False, hidden_size="2..3",
                   heads=["all"], lengths=["all_full", "random"], bias=True, initial_state=True, zero_length=False,
                   input_size=2)
    assert run.exit_code == 0, run.reason
    assert run.spec.narrowing.flags() == ["--mode lstm", "--no-projections", "--bias", "--initial-state",
                                          "--no-zero-length", "--heads all", "--length-pattern all_full",
                                          "--length-pattern random", "--input-size 2", "--hidden-size 2..3"]
    with pytest.raises(UsageError, match="heads 'none' is not allowed"):
        gr.sweep(TARGET, cases=1, heads=["none"])
    with pytest.raises(UsageError, match="bias='no' is not allowed"):
        gr.sweep(TARGET, cases=1, bias="no")


def test_the_done_when_draw_forty_lstm_cases_without_projections_all_supported():
    """Issue 29's done-when, the draw: `sweep -t mod:only_lstm_without_projections -n 40 --mode lstm
    --no-projections` gives the target every one of its 40 cases (the full run: the slow test below)."""
    from narrow_targets import only_lstm_without_projections as target

    spec, _ = RunSpec.build(None, (TARGET,), Selection(cases=CASES, narrowing=Narrowing(modes=("lstm",),
                                                                                         projections=False)))
    reasons = [target.supports(ref.config) for _, ref in spec.jobs()]
    assert len(reasons) == CASES and all(r is True for r in reasons), reasons
    plain, _ = RunSpec.build(None, (TARGET,), Selection(cases=CASES, narrowing=Narrowing(modes=("lstm",))))  # skips
    assert any(target.supports(ref.config) is not True for _, ref in plain.jobs())


@pytest.mark.slow
def test_the_done_when_sweep_judges_forty_cases_without_a_skip(tmp_path):
    code, output = invoke("sweep", "-t", TARGET, "-n", CASES, "--mode", "lstm", "--no-projections",
                          "--report-dir", tmp_path)
    assert code == 0, output
    rows = json.loads((tmp_path / "latest" / "results.json").read_text())["results"]
    reference = [r for r in rows if r.get("check", "reference") == "reference"]
    assert len({r["case_id"] for r in reference}) == CASES and all(r["status"] == "pass" for r in reference)
    assert not [r for r in rows if r["status"] == "skip" and r.get("message") in ("LSTM only", "no projections")]


def test_the_pytest_fixture_takes_the_same_narrowing():
    from gradcheck_rnn.pytest_plugin import GradcheckFailed, RNNGradcheck

    fixture = RNNGradcheck()
    results = fixture.sweep(TARGET, cases=3, checks=["reference"], modes=["lstm"], projections=False,
                            hidden_size=(2, 3))
    assert len(results) == 3 and {r.status for r in results} == {"pass"}
    with pytest.raises(GradcheckFailed, match="nothing was checked"):  # without it: refused, a vacuous run
        fixture.sweep(TARGET, cases=3, checks=["reference"], modes=["gru"])
    with pytest.raises(UsageError, match="--projections leaves nothing to draw"):
        fixture.sweep(TARGET, cases=3, modes=["gru"], projections=True)


# --- issue 38: what a family cannot honour, and the families' own options --------------------------


def test_bidirectional_with_a_forward_only_family_is_refused_naming_the_flag(tmp_path):
    """`--mode s6 --bidirectional` drew unidirectional cases and exited 0, while `--mode gru
    --projections` was refused: both are now "leaves nothing to draw", exit 2."""
    code, output = invoke("sweep", "-n", 2, "-t", "fused-cpu", "--mode", "s6", "--bidirectional",
                          "--report-dir", tmp_path / "reports")
    assert code == 2 and output.strip().splitlines() == [
        "error: --bidirectional leaves nothing to draw: s6 runs forward in time only, and profile ci draws s6"], output
    assert not (tmp_path / "reports").exists()


def test_bidirectional_keeps_the_families_that_run_both_ways():
    profile = Narrowing(bidirectional=True).apply(load_profile("families"))
    assert profile.modes == {"slstm": 1.0}
    assert all(draw_case_ref(profile, 0, i).config.bidirectional for i in range(10))


FAMILY_OPTIONS = {  # family options kept, and what every case drawn with them has
    "gated=on": (lambda c: c.config.mode != "s6" or "-nogate" not in c.id),
    "softplus=on": (lambda c: c.config.mode != "s6" or "-nosoftplus" not in c.id),
    "heads=1": (lambda c: "-NH" not in c.id),
    "exp_forget=off": (lambda c: "-expf" not in c.id),
    "state_dim=2..3": (lambda c: c.config.mode != "s6" or 2 <= c.config.option("state_dim") <= 3),
}


def without_options(ref):
    """A case id less its family-option tokens: what the narrowing of family options leaves alone
    (long memory follows -expf: an sLSTM has the regime only with its sigmoid forget gate)."""
    return [t for t in ref.id.split("-") if not (t.startswith(("N", "R")) and t[1:].isdigit()) and
            t not in ("nogate", "nosoftplus", "expf", "longmem") and not t.startswith("NH")]


@pytest.mark.parametrize("option", FAMILY_OPTIONS)
def test_every_case_drawn_with_a_family_option_has_it_and_the_rest_of_the_case_is_unchanged(option):
    holds = FAMILY_OPTIONS[option]
    narrowed = refs(Narrowing.build(family_options=[option]), config="families")
    plain = refs(config="families")
    assert all(holds(ref) for ref in narrowed) and not all(holds(ref) for ref in plain), option
    assert [without_options(r) for r in narrowed] == [without_options(r) for r in plain]


@pytest.mark.parametrize("options, words", [
    (["nosuch=on"], ["--family-option nosuch=on leaves nothing to draw", "no family that profile families draws",
                     "s6: state_dim, dt_rank, softplus, gated; slstm: heads, exp_forget, m_constant"]),
    (["heads=on"], ["--family-option heads=on is not allowed; heads takes a size or a range MIN..MAX"]),
    (["gated=2"], ["--family-option gated=2 is not allowed; gated takes on or off"]),
    (["heads=4"], ["--family-option heads=4 leaves nothing to draw: heads must divide hidden_size, and "
                   "--hidden-size 2..3 draws 2..3 only; give --hidden-size 4 too"]),
])
def test_a_family_option_no_drawn_family_can_take_is_refused_naming_the_flag(options, words):
    with pytest.raises(UsageError) as raised:
        Narrowing.build(family_options=options, hidden_size="2..3").apply(load_profile("families"))
    assert all(w in str(raised.value) for w in words), str(raised.value)


def test_heads_that_some_drawn_sizes_cannot_take_move_those_sizes_for_its_families_only():
    """Issue 48: heads=2 on a profile that draws odd H asked for --hidden-size; it now draws, for the
    families with heads, the nearest H that 2 divides, and every other case as before."""
    narrowed, plain = refs(Narrowing.build(family_options=["heads=2"]), config="families"), refs(config="families")
    assert all("-NH2-" in r.id and r.config.hidden_size % 2 == 0 for r in narrowed if r.config.mode == "slstm")
    assert any(p.config.hidden_size % 2 for p in plain if p.config.mode == "slstm")
    assert [r.id for r in narrowed if r.config.mode == "s6"] == [p.id for p in plain if p.config.mode == "s6"]


@pytest.mark.parametrize("given", [["gated"], ["=on"], ["heads=0"], ["heads=1", "heads=2"]])
def test_a_malformed_family_option_is_one_sentence(given):
    with pytest.raises(UsageError, match="family option"):
        Narrowing.build(family_options=given)


def test_the_command_line_narrows_family_options_records_and_shows_them(tmp_path):
    code, output = invoke("sweep", "-c", "families", "-n", 2, "-t", "fused-cpu", "--mode", "s6", "--family-option",
                          "gated=on", "--family-option", "state_dim=1", "--dtype", "f64", "--report-dir", tmp_path)
    assert code == 0, output
    assert "--family-option gated=on --family-option state_dim=1" in " ".join(output.split())
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    spec = RunSpec.from_json(json.loads(json.dumps(document["spec"])))
    assert spec.narrowing == Narrowing.build(modes=["s6"], dtypes=["f64"],
                                             family_options={"gated": True, "state_dim": 1})
    assert {row["case_id"].split("-")[5] for row in document["results"]} == {"N1"}
    assert not any("-nogate" in row["case_id"] for row in document["results"])


def test_the_families_page_lists_every_option_that_family_option_takes():
    """docs/concepts/families.md names the options by which --family-option narrows: every built-in
    family's Option objects, no more, no less (a new family's options belong in that table)."""
    import re
    from pathlib import Path

    from gradcheck_rnn.families import BUILT_IN_MODES, family

    page = (Path(__file__).parent.parent / "docs" / "concepts" / "families.md").read_text()
    rows = re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| `(\w+)` \|", page, flags=re.M)
    listed = {(mode, option) for modes, option in rows for mode in re.findall(r"`(\w+)`", modes)}
    assert listed == {(mode, option.name) for mode in BUILT_IN_MODES for option in family(mode).options}


def test_a_kept_option_excludes_the_variants_its_family_refuses_beside_it():
    """-strongdecay excludes -nobias and -longmem (the matrix families' validation): kept on every
    case, the matrix profile draws no -nobias and no -longmem for those families (issue 48: it was
    refused four times in a row); kept off, the profile's strong_decay knob draws it no more."""
    plain = refs(config="matrix")
    assert any("-nobias" in r.id for r in plain) and any("-longmem" in r.id for r in plain)
    narrowed = refs(Narrowing.build(family_options=["strong_decay=on"]), config="matrix")
    assert all("-strongdecay" in r.id and "-nobias" not in r.id and "-longmem" not in r.id for r in narrowed)
    with_bias = refs(Narrowing.build(family_options=["strong_decay=on"], bias=True), config="matrix")
    assert [r.id for r in with_bias] == [r.id for r in narrowed]
    assert any("-strongdecay" in ref.id for ref in refs(config="matrix"))
    assert not any("-strongdecay" in ref.id for ref in refs(Narrowing.build(family_options=["strong_decay=off"]),
                                                            config="matrix"))


@pytest.mark.parametrize("flag, word", [(dict(bias=False), "--no-bias"), (dict(long_memory=True), "--long-memory")])
def test_a_kept_option_beside_a_flag_that_asks_for_what_it_excludes_is_one_sentence_naming_what_works(flag, word):
    with pytest.raises(UsageError) as raised:
        Narrowing.build(family_options=["strong_decay=on"], **flag).apply(load_profile("matrix"))
    assert str(raised.value).startswith(f"--family-option strong_decay=on and {word} cannot hold together on mlstm "
                                        f"cases: ")
    assert str(raised.value).endswith(f"; give --family-option strong_decay=on without {word}")


def test_every_draw_setting_of_a_profile_has_a_flag_or_a_reason_not_to():
    """Issue 48: no flag turned long memory off. Every key of a profile's [draw] table is narrowed by
    a knob (its ``setting``), or is one of the documented few that none narrows."""
    from gradcheck_rnn.model.narrowing import NOT_NARROWED
    from gradcheck_rnn.model.profiles import DRAW_SETTINGS

    # --kernel-config narrows what the targets declare (kernel_configs), which no profile draws
    narrowed = {knob.setting for knob in KNOBS if knob.kind != "configs"}
    assert set(DRAW_SETTINGS) == narrowed | set(NOT_NARROWED) and not narrowed & set(NOT_NARROWED)
    assert narrowed <= set(DRAW_SETTINGS)


@pytest.mark.parametrize("narrowing, holds", [
    (Narrowing(long_memory=False), lambda r: "-longmem" not in r.id),
    (Narrowing(long_memory=True), lambda r: "-longmem" in r.id or "-nobias" in r.id),
    (Narrowing(packed_tail=False), lambda r: "-tail" not in r.id),
    (Narrowing(packed_tail=True), lambda r: "-tail" in r.id),
    (Narrowing(wants=("x",)), lambda r: r.id.endswith("-wx") or "-wx-" in r.id),
    (Narrowing(max_len=(2, 3)), lambda r: 2 <= r.config.max_len <= 3),
    (Narrowing(batch_size=(1, 1)), lambda r: r.config.batch_size == 1),
])
def test_the_new_draw_flags_hold_on_every_case_and_not_on_the_profiles_own(narrowing, holds):
    assert all(holds(r) for r in refs(narrowing, config="matrix"))
    assert not all(holds(r) for r in refs(config="matrix"))


# --- issue 37: one narrowing object, one flag table, a small RunSpec.build -------------------------

# One request, written as each surface takes it: every knob of the table given.
REQUEST = {"modes": ["s6"], "layers": 1, "bidirectional": False, "dtypes": ["f64"], "projections": False,
           "bias": True, "initial_state": True, "zero_length": False, "long_memory": False, "packed_tail": False,
           "wants": ["all"], "heads": ["all"], "lengths": ["random"], "input_size": "2..3", "hidden_size": 4,
           "max_len": "2..5", "batch_size": 2, "family_options": {"gated": True},
           "kernel_config": {"chunk": (4, 8)}}
REQUEST_FLAGS = ["--mode", "s6", "--layers", "1", "--unidirectional", "--dtype", "f64", "--no-projections", "--bias",
                 "--initial-state", "--no-zero-length", "--no-long-memory", "--no-packed-tail", "--wants", "all",
                 "--heads", "all", "--length-pattern", "random", "--input-size", "2..3", "--hidden-size", "4",
                 "--max-len", "2..5", "--batch-size", "2", "--family-option", "gated=on",
                 "--kernel-config", "chunk=4,8"]


class Built(Exception):
    """Raised by the spy in place of building the run: the narrowing reached RunSpec.build."""


@pytest.fixture
def narrowing_built(monkeypatch):
    """The narrowing each call to RunSpec.build received (the call then stops with Built)."""
    seen = []

    def spy(config=None, targets=(), selection=None, *args, **kwargs):
        seen.append(selection.narrowing)
        raise Built

    monkeypatch.setattr(RunSpec, "build", spy)
    return seen


def test_the_command_line_the_api_and_the_fixture_build_one_equal_narrowing(narrowing_built, tmp_path):
    from gradcheck_rnn.pytest_plugin import RNNGradcheck

    with pytest.raises(Built):
        invoke("sweep", "-c", "families", "-n", 1, "-t", "fused-cpu", *REQUEST_FLAGS, "--report-dir", tmp_path)
    with pytest.raises(Built):
        gr.sweep("fused-cpu", config="families", cases=1, **REQUEST)
    with pytest.raises(Built):
        RNNGradcheck().sweep("fused-cpu", config="families", cases=1, **REQUEST)
    cli, api, fixture = narrowing_built
    assert cli == api == fixture == Narrowing.build(**REQUEST)
    assert all(getattr(cli, field) not in (None, ()) for field in KNOB), "the request leaves a knob out"


def test_the_flags_a_narrowing_shows_give_it_back_on_the_command_line(narrowing_built, tmp_path):
    narrowing = Narrowing.build(**REQUEST)
    with pytest.raises(Built):
        invoke("sweep", "-c", "families", *" ".join(narrowing.flags()).split(), "--report-dir", tmp_path)
    assert narrowing_built == [narrowing]
    assert " ".join(narrowing.flags()).split() == REQUEST_FLAGS


def test_the_knob_table_is_the_one_source_of_the_narrowing_and_its_flags():
    from gradcheck_rnn.cli.options import LAST_FAILED_CONFLICTS

    assert [f.name for f in dataclasses.fields(Narrowing)] == [knob.field for knob in KNOBS]
    options = {param.name: param for param in main.commands["sweep"].params}
    assert [name for name in options if name in KNOB] == [knob.field for knob in KNOBS]
    for knob in KNOBS:  # each option is the knob's own: its flags and its help
        option = options[knob.field]
        assert option.opts == [f"--{knob.flag}"] and option.help == knob.help, knob.field
        assert option.secondary_opts == ([f"--{knob.negative}"] if knob.kind == "switch" else []), knob.field
        assert LAST_FAILED_CONFLICTS[knob.field] == knob.usage
    mutants = [param.name for param in main.commands["mutants"].params if param.name in KNOB]
    assert mutants == [knob.field for knob in SHAPE_KNOBS]


def test_an_unknown_narrowing_keyword_is_one_sentence_naming_the_known_ones():
    with pytest.raises(UsageError, match=r"'hidden' is not a way to narrow the draw; give one of modes, layers"):
        gr.sweep("fused-cpu", cases=1, hidden=4)
    with pytest.raises(UsageError, match=r"layers=0 is not allowed"):
        Narrowing.build(layers=0)
    with pytest.raises(UsageError, match=r"mode 'lsmt' is not allowed; allowed: rnn_relu"):
        Narrowing.build(modes=["lsmt"])


def test_run_spec_build_takes_a_handful_of_arguments_and_returns_the_spec_and_its_targets():
    import inspect

    assert len(inspect.signature(RunSpec.build).parameters) <= 6
    spec, targets = RunSpec.build(None, ("fused-cpu",), Selection(cases=2, narrowing=Narrowing(modes=("gru",))),
                                  Judging(("reference",), rtol=1e-3))
    assert isinstance(spec, RunSpec) and [t.name for t in targets] == list(spec.targets) == ["fused-cpu"]
    assert (spec.cases, spec.checks, spec.rtol) == (2, ("reference",), 1e-3)
    assert {ref.config.mode for _, ref in spec.jobs()} == {"gru"}


# The "spec" of a results.json written before the narrowing held the shape of the draw (8ef2349):
# --mode, --layers, --unidirectional and --dtype at the top level, the other knobs under "narrowing".
OLD_SPEC = json.loads("""{"profile": "ci",
 "profile_sha256": "a943173df9efb11e634bc7433be3e2a158c7bc4a3d6787dbacd3aea361670cbd", "config": null, "seed": 5, "cases": 3, "targets": ["fused-cpu"], "named_targets": ["fused-cpu"],
 "checks": ["reference"], "rtol": null, "atol": null, "modes": ["lstm"], "layers": 1, "bidirectional": false,
 "dtypes": ["f64"], "narrowing": {"projections": false, "bias": null, "initial_state": null, "heads": [],
 "input_size": null, "hidden_size": [2, 4], "lengths": [], "zero_length": null, "family_options": []},
 "shard": null, "case_ids": [], "families": [], "only": [], "tolerance_table": [["f64", "output", 1e-07, 1e-09]]}""")


def test_a_spec_written_with_the_shape_outside_the_narrowing_reads_as_one_narrowing():
    spec = RunSpec.from_json(OLD_SPEC)
    assert spec.narrowing == Narrowing(modes=("lstm",), layers=1, bidirectional=False, dtypes=("f64",),
                                       projections=False, hidden_size=(2, 4))
    assert "modes" not in spec.to_json() and spec.to_json()["narrowing"]["modes"] == ["lstm"]
    assert RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    before_narrowing = {key: value for key, value in OLD_SPEC.items() if key != "narrowing"}
    assert RunSpec.from_json(before_narrowing).narrowing == Narrowing(modes=("lstm",), layers=1, bidirectional=False,
                                                                      dtypes=("f64",))

