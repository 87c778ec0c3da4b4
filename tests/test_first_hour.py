"""Issue 48, items 1-5: the first hour with the newest features, as a newcomer meets them.

Family options from the command line (sweep and check), `next:` hints that hold for the families
a run drew, `--last-failed` runs that say what they rerun, and user families (no duplicate
`-nobias` draws, a hint to pass --family). Each test failed before its fix; the last one walks
the newcomer's path end to end and ends in runs.
"""

import json
import re

import pytest
from click.testing import CliRunner

from gradcheck_rnn.cli import main
from gradcheck_rnn.run.advice import next_step
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import BUILT_IN_MODES, family
from gradcheck_rnn.model.case import Case, CaseRef
from gradcheck_rnn.model.narrowing import Narrowing
from gradcheck_rnn.model.profiles import draw_case_ref, load_profile
from gradcheck_rnn.model.profiles import profile_names
from gradcheck_rnn.model.rnn_config import RNNConfig
from gradcheck_rnn.rows.store import Tally
from gradcheck_rnn.run import RunSpec, Selection


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def next_line(output):
    return output.split("next: ", 1)[1].split(" all passed")[0] if "next: " in output else ""


def named_profiles(hint):
    """The profiles a hint tells a user to run (`-c NAME`), for what the run drew: where a check is
    run and where more cases are; not where families the run did not draw are."""
    told = re.findall(r"\(-c ([\w-]+) runs (?:it|them)\)", hint) + re.findall(r"or -c ([\w-]+)", hint)
    return [name for name in told if name in profile_names()]


# --- item 1: a family option narrows what it needs to ---------------------------------------------


def test_strong_decay_on_the_matrix_profile_is_a_run_not_four_refusals(tmp_path):
    code, output = invoke("sweep", "-c", "matrix", "--family-option", "strong_decay=on", "-t", "fused-cpu", "-n", 2,
                          "--workers", 1, "--report-dir", tmp_path)
    assert code == 0, output
    ids = [row["case_id"] for row in json.loads((tmp_path / "latest" / "results.json").read_text())["results"]]
    assert ids and all("-strongdecay" in i and "-nobias" not in i and "-longmem" not in i for i in ids), ids


def test_no_flag_turned_long_memory_off_and_now_one_does(tmp_path):
    profile = load_profile("matrix")
    assert any(draw_case_ref(profile, 0, i).config.long_memory for i in range(40))
    off = Narrowing.build(long_memory=False).apply(profile)
    assert not any(draw_case_ref(off, 0, i).config.long_memory for i in range(40))
    code, output = invoke("sweep", "-c", "matrix", "--no-long-memory", "--no-bias", "--family-option",
                          "strong_decay=on", "-n", 1, "--report-dir", tmp_path)
    assert code == 2 and output == ("error: --family-option strong_decay=on and --no-bias cannot hold together on "
                                    "mlstm cases: strongdecay is not allowed for this mlstm config; it shifts the "
                                    "decay gate's bias, so it needs it (not with -nobias); give --family-option "
                                    "strong_decay=on without --no-bias"), output
    assert not list(tmp_path.iterdir())


def test_a_range_the_users_own_flag_set_is_named_as_theirs_not_the_profiles():
    with pytest.raises(UsageError, match=r"and --hidden-size 3 draws 3\.\.3 only; give --hidden-size 2 too"):
        Narrowing.build(family_options=["heads=2"], hidden_size=3).apply(load_profile("matrix"))


# --- item 2: check builds a matrix or s6 case from flags -----------------------------------------


@pytest.mark.parametrize("flags, token", [
    (["--mode", "gla"], "gla-L1-uni-I3-H4-K2-R1-T3"),
    (["--mode", "s6"], "s6-L1-uni-I3-H4-N2-R1-T3"),
    (["--mode", "gdn", "--family-option", "heads=2", "--family-option", "key_width=3",
      "--family-option", "strong_decay=on"], "gdn-L1-uni-I3-H4-NH2-K3-strongdecay-T3"),
])
def test_check_builds_a_case_of_a_family_with_options_from_flags(flags, token):
    code, output = invoke("check", *flags, "--lengths", "3,1", "-t", "fused-cpu")
    assert code == 0, output
    assert f"gradcheck-rnn repro {token}" in output, output


@pytest.mark.parametrize("flags, sentence", [
    (["--family-option", "heads=1..2"], "error: --family-option heads=1..2 is a range, and check builds one case; "
                                        "give one value, e.g. heads=1"),
    (["--family-option", "heads=3"], "error: heads=3 is not allowed with hidden_size=4; it must divide it"),
    (["--family-option", "gated"], "error: family option 'gated' is not allowed; give NAME=VALUE, e.g. gated=on"),
])
def test_check_refuses_a_family_option_it_cannot_build_in_one_sentence(flags, sentence):
    code, output = invoke("check", "--mode", "gla", *flags, "-t", "fused-cpu")
    assert code == 2 and output.startswith(sentence), output


def test_a_required_option_without_an_example_names_the_flag_that_gives_it():
    from family_targets import MINGRU

    from gradcheck_rnn.families import register
    from gradcheck_rnn.families.base import Option
    from gradcheck_rnn.model.case import case_from_options

    strict = register(type(MINGRU)(token="mingruw", gates=("h",), bidirectional=False,
                                   options=(Option("width", r"W(\d+)", None, "W<width>, e.g. W2"),)))
    with pytest.raises(UsageError, match=r"^mingruw needs option width \(W<width>, e.g. W2\); give it with "
                                         r"--family-option width=VALUE$"):
        case_from_options(strict.token, 1, False, 2, 2, "2", None, "f64", 0)
    assert case_from_options(strict.token, 1, False, 2, 2, "2", None, "f64", 0, options={"width": 3}).id.startswith(
        "mingruw-L1-uni-I2-H2-W3-T2")


# --- item 3: the next: hints hold for the families the run drew ----------------------------------


def hint(config, modes=()):
    spec, _ = RunSpec.build(config, ("fused-cpu",), Selection(cases=2, narrowing=Narrowing(modes=tuple(modes))))
    return next_step(spec, Tally().coverage), spec


@pytest.mark.parametrize("config, modes", [("matrix", ["gdn"]), (None, ["gla"]), ("families", ["s6"]),
                                           ("matrix", []), (None, [])])
def test_a_hint_names_only_profiles_that_draw_the_families_the_run_drew(config, modes):
    step, spec = hint(config, modes)
    drawn = {m for m, w in spec.profile_data.modes.items() if w > 0}
    for name in named_profiles(step):
        assert drawn <= {m for m, w in load_profile(name).modes.items() if w > 0}, (step, name)


def test_the_hints_the_issue_quotes_are_true_now():
    matrix_gdn, _ = hint("matrix", ["gdn"])
    assert matrix_gdn == "next: judge more and larger cases: -n 100", matrix_gdn
    ci_gla, _ = hint(None, ["gla"])
    assert "the fd, jvp, gradgrad checks were not run (-c matrix runs them)" in ci_gla, ci_gla
    ci_gru, _ = hint(None, ["gru"])
    assert "the fd, jvp, gradgrad checks were not run (-c nightly runs them)" in ci_gru, ci_gru


# --- item 4: --last-failed says what it reruns, keeps its seed, takes --target --------------------


@pytest.fixture
def failed_run(tmp_path, reference_only):
    reports = tmp_path / "reports"
    code, output = invoke("sweep", "-c", reference_only, "-s", 1, "-n", 4, "-t", "mutant:truncated-bptt",
                          "--report-dir", reports)
    assert code == 1, output
    return reports


def test_a_rerun_of_a_seed_1_run_is_named_a_rerun_of_it_with_its_seed(failed_run):
    first = (failed_run / "latest").resolve()
    code, output = invoke("sweep", "--last-failed", "--report-dir", failed_run)
    assert code == 1, output
    rerun = (failed_run / "latest").resolve()
    assert rerun.name.endswith("-rerun-s1"), rerun.name
    document = json.loads((rerun / "results.json").read_text())
    assert document["rerun_of"] == first.name and document["spec"]["rerun_of"] == first.name
    assert document["seed"] == 1 and document["spec"]["seed"] == 1
    assert f"rerun of {first.name} · profile" in (rerun / "report.html").read_text()
    assert f"**Rerun** of the rows that did not pass in run {first.name} (seed 1)." in (rerun / "report.md").read_text()
    code, _ = invoke("report", rerun)
    assert code == 1


def test_last_failed_takes_target_to_judge_the_failures_on_another_target(failed_run):
    failed = json.loads((failed_run / "latest" / "results.json").read_text())
    bad = {(r["case_id"], r["check"]) for r in failed["results"] if r["status"] == "fail"}
    code, output = invoke("sweep", "--last-failed", "-t", "fused-cpu", "--report-dir", failed_run)
    assert code == 0, output
    assert "cases on fused-cpu (there: mutant:truncated-bptt)" in output, output
    rows = json.loads((failed_run / "latest" / "results.json").read_text())["results"]
    assert {(r["case_id"], r["check"]) for r in rows} == bad and {r["target"] for r in rows} == {"fused-cpu"}


def test_last_failed_help_says_it_takes_target():
    code, output = invoke("sweep", "--help")
    assert code == 0 and "with --target, on those targets instead" in output, output


# --- item 5: user families -------------------------------------------------------------------------


def test_a_family_without_biases_draws_no_nobias_and_refuses_it_in_an_id():
    from family_targets import MINGRU

    from gradcheck_rnn.families import register

    register(MINGRU)
    profile = load_profile(None)
    profile.modes, profile.bias, profile.bidirectional = {"mingru": 1.0}, 0.5, 0.0
    ids = [draw_case_ref(profile, 0, i).id for i in range(30)]
    assert not any("-nobias" in i for i in ids), ids
    with pytest.raises(UsageError, match=r"nobias is not allowed for mingru; it has no biases to leave out"):
        CaseRef.from_id("mingru-L1-uni-I2-H3-nobias-T5-B1-len5-f64-s4")
    assert all(family(m).has_biases(Case.from_id(i).config) for m, i in [
        ("lstm", "lstm-L1-uni-I2-H3-T5-B1-len5-f64-s4"), ("s6", "s6-L1-uni-I2-H3-N2-R1-T5-B1-len5-f64-s4"),
        ("slstm", "slstm-L1-uni-I2-H3-T5-B1-len5-f64-s4"), ("gla", "gla-L1-uni-I2-H3-K2-R1-T5-B1-len5-f64-s4")])
    assert all(RNNConfig(m, 1, False, 2, 4, 3, 1, options={o.name: o.example for o in family(m).options
                                                          if o.default is None}, bias=False).bias is False
               for m in BUILT_IN_MODES)


@pytest.mark.parametrize("command", [["shrink", "leaky-L1-uni-I2-H3-T5-B1-len5-f64-s4", "-t", "fused-cpu"],
                                     ["repro", "leaky-L1-uni-I2-H3-T5-B1-len5-f64-s4"],
                                     ["check", "--case-id", "leaky-L1-uni-I2-H3-T5-B1-len5-f64-s4"]])
def test_an_id_of_a_family_not_loaded_says_to_pass_family(command):
    code, output = invoke(*command)
    assert code == 2, output
    assert "'leaky' is not a built-in family (one of rnn_relu" in output, output
    assert output.endswith("pass --family MODULE:NAME to load the family of your own that it names"), output


# --- the newcomer's walk ---------------------------------------------------------------------------


def test_a_newcomers_walk_through_family_options_check_and_hints_ends_in_runs(tmp_path):
    """--family-option on -c matrix, check with family options, and every profile a `next:` hint
    names, followed: each step is a run (exit 0), never a refusal (one case each: a run is the claim)."""
    code, output = invoke("sweep", "-c", "matrix", "--mode", "gla", "--family-option", "strong_decay=on",
                          "--family-option", "heads=2", "-t", "fused-cpu", "-n", 1, "--report-dir", tmp_path)
    assert code == 0, output
    case_id = json.loads((tmp_path / "latest" / "results.json").read_text())["results"][0]["case_id"]
    assert "-NH2-" in case_id and "-strongdecay" in case_id, case_id
    code, output = invoke("check", "--mode", "gla", "--family-option", "heads=2", "--family-option",
                          "strong_decay=on", "-t", "fused-cpu")
    assert code == 0, output
    code, output = invoke("sweep", "--mode", "gla", "-t", "fused-cpu", "-n", 1, "--report-dir", tmp_path)
    assert code == 0, output
    told = named_profiles(next_line(output))
    assert told == ["matrix"], output
    code, output = invoke("sweep", "-c", told[0], "--mode", "gla", "-t", "fused-cpu", "-n", 1,
                          "--report-dir", tmp_path)
    assert code == 0, output
    assert "fd" in json.loads((tmp_path / "latest" / "results.json").read_text())["spec"]["checks"]
