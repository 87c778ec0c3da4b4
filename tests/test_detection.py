"""Detection power: each reference-free check catches a mutant on its own while correct
kernels pass it, the frozen-weight mutant hides from `all`-group cases, and the ci-profile
mutant sweep catches every mutant with no false alarm."""

import json

import pytest
from click.testing import CliRunner

from gradcheck_rnn import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.judge import judge_one
from gradcheck_rnn.rows.result import row_worst
from gradcheck_rnn.targets import resolve_target

CORRECT = ("fused-cpu", "torch-native")

# (check, mutant caught by that check alone, a case id where it applies)
METAMORPHIC_CATCHES = [
    ("padding", "lengths-ignored", "gru-L2-bi-I3-H4-T6-B3-len6.2.4-f64-s11"),
    ("permutation", "hy-in-sorted-order", "lstm-L1-uni-I2-H3-T5-B3-len2.5.3-f64-s4"),
    ("future", "truncated-bptt", "rnn_tanh-L2-uni-I3-H4-T6-B2-len3.6-f32-s9"),
    ("determinism", "nondeterministic-weight-grad", "gru-L1-bi-I2-H3-T4-B2-len4.3-f32-s2"),
    ("linearity", "gradient-clipped-in-kernel", "lstm-L1-uni-I2-H3-T5-B2-len5.3-f64-s6"),
    ("stateless", "stale-dh0-buffer", "rnn_relu-L2-uni-I2-H3-T4-B2-len4.2-f64-s8"),
]


NONDETERMINISTIC = ("nondeterministic-weight-grad", "stale-dh0-buffer")


@pytest.mark.parametrize("check, mutant, case_id", METAMORPHIC_CATCHES)
def test_each_metamorphic_check_catches_its_mutant_alone(check, mutant, case_id):
    case = Case.from_id(case_id)
    caught = judge_one(case, resolve_target(f"mutant:{mutant}"), check=check)
    # runs of the same case that differ are non-determinism, whatever carried them over
    assert caught.status == ("nondeterministic" if mutant in NONDETERMINISTIC else "fail"), caught
    assert caught.message
    for name in CORRECT:
        assert judge_one(case, resolve_target(name), check=check).status == "pass", name


# (mutant of a new API-surface path, the tensor that must catch it, a case id on that path)
SURFACE_CATCHES = [
    ("projection-grad-transposed", "l0.fwd.w_hr", "lstm-L2-uni-I1-H3-P2-T2-B1-len2-f32-s1495654098"),
    ("bias-assumed-present", "y", "gru-L1-bi-I2-H3-nobias-T4-B2-len4.3-f64-s2"),
    ("zero-length-runs-one-step", "y", "rnn_tanh-L1-bi-I2-H3-T4-B2-len0.3-f64-s2"),
    ("zero-length-dh0-dropped", "h0", "lstm-L2-uni-I2-H3-P1-T4-B2-len0.3-f64-s2-winputs"),
]


@pytest.mark.parametrize("mutant, tensor, case_id", SURFACE_CATCHES)
def test_each_api_surface_mutant_is_caught_on_its_path_only(mutant, tensor, case_id):
    case = Case.from_id(case_id)
    caught = judge_one(case, resolve_target(f"mutant:{mutant}"))
    assert caught.status == "fail" and tensor in [t.name for t in caught.failing], caught.message
    assert judge_one(case, resolve_target("fused-cpu")).status == "pass"
    # off its path (no projection, biases present, no empty sequence) the mutant is the correct kernel
    plain = Case.from_id("lstm-L2-bi-I2-H3-T4-B2-len4.3-f64-s2")
    assert judge_one(plain, resolve_target(f"mutant:{mutant}")).status == "pass"


def test_half_accumulation_is_a_measured_blind_spot():
    """The half tolerances cannot see a half-precision accumulation on small cases: it changes
    the weight gradients, yet passes (README, "Tolerances")."""
    from gradcheck_rnn.model.compare import to_float64

    case = Case.from_id("rnn_tanh-L1-uni-I3-H4-T8-B4-len8.6.5.8-bf16-s3")
    blind = resolve_target("mutant:half-accumulated-in-half")
    correct = resolve_target("fused-cpu")
    assert judge_one(case, blind).status == "pass" and judge_one(case, correct).status == "pass"
    assert not (to_float64(blind.run(case).grads["l0.fwd.w_hh"]) == to_float64(correct.run(case).grads["l0.fwd.w_hh"])).all()


def test_future_check_skips_without_future_steps_or_input_gradient():
    full = Case.from_id("rnn_tanh-L1-uni-I2-H3-T4-B2-len4.4-f64-s1")
    assert judge_one(full, resolve_target("fused-cpu"), check="future").status == "skip"
    frozen = Case.from_id("rnn_tanh-L1-uni-I2-H3-T4-B2-len4.2-f64-s1-wparams")
    assert judge_one(frozen, resolve_target("fused-cpu"), check="future").status == "skip"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def test_bptt_skipped_when_frozen_is_caught_only_on_frozen_weights():
    target = "mutant:bptt-skipped-when-frozen"
    code, output = invoke("check", "--case-id", "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx", "--target", target)
    assert code == 1
    rows = [line.split() for line in output.splitlines()]  # the per-tensor table: name, status, ratio, …
    assert ["x", "fail"] in [row[:2] for row in rows], output
    code, output = invoke("check", "--case-id", "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7", "--target", target)
    assert code == 0, output


def test_bptt_skipped_when_frozen_passes_every_all_group_case():
    from gradcheck_rnn.model.profiles import draw_cases, load_profile

    profile = load_profile("ci")
    profile.wants = {"all": 1.0}
    target = resolve_target("mutant:bptt-skipped-when-frozen")
    results = [judge_one(case, target) for case in draw_cases(profile, 0, 15)]
    assert all(r.status == "pass" for r in results), [r.message for r in results if r.status != "pass"]


# One case per mutant where the ci profile's sweep (`gradcheck-rnn mutants`, seed 0, 40 cases,
# every ci check) caught it, the smallest such case, with the check that did; taken from that
# run's results.json on 2026-12-03. The whole sweep takes 50 s or more, so it is slow-marked below.
CI_CATCHES = [
    ("truncated-bptt", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    ("bptt-skipped-when-frozen", "rnn_tanh-L1-bi-I1-H1-T7-B2-len0.1-f32-s1271306149-winputs", "reference"),
    ("bidir-dy-overwritten", "lstm-L3-bi-I1-H1-T1-B3-len1.1.1-f32-s1610504820-wparams", "reference"),
    ("gru-middle-w_ih", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    ("top-b_hh-zero", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    ("lengths-ignored", "gru-L1-bi-I2-H1-T7-B1-len3-f32-s1315099799", "reference"),
    ("relu-mask-wrong-tensor", "rnn_relu-L3-bi-I1-H1-nobias-T3-B2-len1.1-f64-s702095514", "reference"),
    ("hy-at-T-1", "gru-L1-bi-I2-H1-T7-B1-len3-f32-s1315099799", "reference"),
    ("padded-dx-leak", "gru-L1-bi-I2-H1-T7-B1-len3-f32-s1315099799", "reference"),
    ("dc0-missing", "lstm-L1-bi-I3-H2-P1-T1-B2-len1.1-f64-s1739408668-glast", "reference"),
    ("weight-grad-skips-first-step", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    ("gru-reset-before-bias", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    ("forget-gate-sign-flip", "lstm-L3-bi-I1-H1-T1-B3-len1.1.1-f32-s1610504820-wparams", "reference"),
    ("tanh-derivative-of-input", "rnn_tanh-L1-bi-I1-H1-T7-B2-len0.1-f32-s1271306149-winputs", "reference"),
    ("cell-grad-not-carried", "lstm-L1-bi-I3-H2-P1-T1-B2-len1.1-f64-s1739408668-glast", "reference"),
    ("hy-in-sorted-order", "rnn_tanh-L1-bi-I1-H1-T7-B2-len0.1-f32-s1271306149-winputs", "reference"),
    ("nondeterministic-weight-grad", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "determinism"),
    ("gradient-clipped-in-kernel", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "reference"),
    # Its reference row failed only after other cases had run in the process (a stale buffer);
    # on its own a case shows it to the check that runs the kernel twice.
    ("stale-dh0-buffer", "gru-L3-uni-I3-H1-T1-B1-len1-f32-s425361652", "determinism"),
    ("projection-grad-transposed", "lstm-L2-uni-I1-H3-P2-T2-B1-len2-f32-s1495654098", "reference"),
    ("bias-assumed-present", "rnn_relu-L3-bi-I1-H1-nobias-T3-B2-len1.1-f64-s702095514", "reference"),
    ("zero-length-runs-one-step", "rnn_tanh-L1-bi-I1-H1-T7-B2-len0.1-f32-s1271306149-winputs", "reference"),
    ("zero-length-dh0-dropped", "rnn_tanh-L1-bi-I1-H1-T7-B2-len0.1-f32-s1271306149-winputs", "reference"),
    ("forget-gate-grad-dropped", "lstm-L3-bi-I1-H1-T1-B3-len1.1.1-f32-s1610504820-wparams", "reference"),
    ("reverse-weight-grad-skips-step", "gru-L1-bi-I2-H1-T7-B1-len3-f32-s1315099799", "reference"),
]


def test_the_fast_table_has_a_catching_case_for_every_mutant():
    from gradcheck_rnn.targets.kernel_bugs import MUTANTS

    assert sorted(name for name, _, _ in CI_CATCHES) == sorted(MUTANTS)


@pytest.fixture(scope="module")
def ci_tolerances():
    from gradcheck_rnn.model.profiles import load_profile

    return load_profile("ci").tolerance_table()


@pytest.mark.parametrize("mutant, case_id, check", CI_CATCHES, ids=[m for m, _, _ in CI_CATCHES])
def test_each_mutant_is_caught_on_its_ci_case_where_correct_kernels_pass(mutant, case_id, check, ci_tolerances):
    """The fast form of the ci-profile mutant sweep: the mutant fails (or is non-deterministic)
    on the case and check that caught it in the whole sweep, and the correct kernels pass there
    (torch-native skips a zero-length sequence, which torch cannot pack)."""
    case = Case.from_id(case_id)
    caught = judge_one(case, resolve_target(f"mutant:{mutant}"), ci_tolerances, check=check)
    assert caught.status in ("fail", "nondeterministic"), caught
    statuses = {name: judge_one(case, resolve_target(name), ci_tolerances, check=check).status for name in CORRECT}
    assert statuses["fused-cpu"] == "pass" and set(statuses.values()) <= {"pass", "skip"}, statuses


@pytest.mark.slow
def test_the_default_run_catches_every_mutant_on_its_home_profile_with_no_false_alarm(tmp_path):
    """`gradcheck-rnn mutants`: the cuDNN mutants on the ci profile's cases, the s6, slstm and conv1d
    mutants on the families profile's and the matrix-memory ones on the matrix profile's, one run,
    every one caught, no false alarm."""
    from gradcheck_rnn.model.profiles import load_profile
    from gradcheck_rnn.targets.kernel_bugs import FAMILY_MUTANTS, MUTANTS, home_profile

    code, output = invoke("mutants", "--report-dir", tmp_path)
    assert code == 0, output
    [run] = [p for p in tmp_path.iterdir() if p.name != "latest"]
    document = json.loads((run / "results.json").read_text())
    assert {m["target"] for m in document["mutants"]} == {f"mutant:{name}" for name in [*MUTANTS, *FAMILY_MUTANTS]}
    assert all(m["flagged"] > 0 for m in document["mutants"])
    assert all(f["flagged"] == 0 for f in document["false_alarms"])
    assert document["home_profiles"] == [{"profile": name, "seed": load_profile(name).seed, "cases": load_profile(name).cases}
                                         for name in ("ci", "families", "matrix")]
    cases = {m["target"]: m["cases"] for m in document["mutants"] + document["false_alarms"]}
    # a mutant counts the cases of its family only; fused-cpu was judged on all of ci's and families'
    # and on the matrix cases of each family it has a kernel (and so mutants) for
    matrix = {family: cases[f"mutant:{name}"] for name, (family, _) in FAMILY_MUTANTS.items()
              if home_profile(name) == "matrix"}
    ci, families = load_profile("ci").cases, load_profile("families").cases
    assert cases["mutant:truncated-bptt"] == ci and cases["fused-cpu"] == ci + families + sum(matrix.values())
    assert cases["mutant:s6-gate-grad-dropped"] + cases["mutant:slstm-padded-step-updates-n"] + \
        cases["mutant:conv1d-packed-dweight-whole-stream"] == families
    left = [name for group in document["left_out"] for name in group["mutants"]]
    assert f"Left out: {len(left)} mutants" in output and all(name in output for name in left)


@pytest.mark.slow
def test_with_a_profile_every_mutant_is_judged_there_and_those_of_undrawn_families_fail_nothing(tmp_path):
    """`mutants -c families`: the 11 s6, slstm and conv1d mutants caught on its first 20 cases (8 were
    enough before conv1d took a third of them: s6-reverse-carry-undecayed needs an s6 case longer than
    a chunk); the cuDNN-cell and matrix-memory mutants, judged on no case there, are named in the
    verdict and do not fail the run."""
    from gradcheck_rnn.targets.kernel_bugs import FAMILY_MUTANTS, MUTANTS, home_profile

    code, output = invoke("mutants", "-c", "families", "-n", 20, "--check", "reference", "--report-dir", tmp_path)
    assert code == 0, output
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    elsewhere = len(MUTANTS) + sum(home_profile(name) != "families" for name in FAMILY_MUTANTS)
    assert document["verdict"]["reason"].startswith(
        f"every mutant judged caught (11), no false alarm; {elsewhere} judged on no case")
    assert "home_profiles" not in document and document["spec"]["config"] == "families"
    assert document["left_out"] and "Left out: " in output  # -c PROFILE leaves them out too: it says so


# ------------------------------------------------------------------ each mutant on its home profile

def test_the_default_mutant_set_has_the_family_mutants_and_each_its_home_profile():
    from gradcheck_rnn.workflows.detection import detection_targets
    from gradcheck_rnn.model.profiles import load_profile
    from gradcheck_rnn.targets.kernel_bugs import FAMILY_MUTANTS, MUTANTS, home_profile

    mutants, correct = detection_targets()
    assert mutants == [f"mutant:{name}" for name in [*MUTANTS, *FAMILY_MUTANTS]] and correct == list(CORRECT)
    assert {home_profile(name) for name in MUTANTS} == {"ci"}
    assert home_profile("s6-gate-grad-dropped") == "families" and home_profile("mlstm-chunk-states-wrong-size") == "matrix"
    for name, (family, _) in FAMILY_MUTANTS.items():  # a home profile draws the family the bug is in
        assert family in load_profile(home_profile(name)).modes, name


def test_home_cases_are_each_profiles_own_draw_named_by_id():
    from gradcheck_rnn.workflows.detection import home_cases
    from gradcheck_rnn.model.profiles import draw_case_ref, load_profile

    ids, drawn = home_cases(["mutant:s6-gate-grad-dropped", "mutant:truncated-bptt", "mutant:top-b_hh-zero"], cases=3,
                            seed=5)
    assert drawn == [{"profile": "families", "seed": 5, "cases": 3}, {"profile": "ci", "seed": 5, "cases": 3}]
    families, ci = load_profile("families"), load_profile("ci")
    assert ids == tuple([draw_case_ref(families, 5, i).id for i in range(3)] + [draw_case_ref(ci, 5, i).id for i in range(3)])
    assert all(Case.from_id(case_id).id == case_id for case_id in ids)
    only_ci, drawn = home_cases(["mutant:truncated-bptt"])
    assert drawn == [{"profile": "ci", "seed": 0, "cases": 40}] and len(only_ci) == 40


@pytest.mark.slow
def test_one_default_run_judges_each_mutant_on_its_home_profile_and_repro_lines_rebuild_the_cases(tmp_path):
    """The default run's plumbing end to end on one case of each home profile. Slow-marked (31 s in
    the default suite at load 13: the slstm JAX program's first compile); the default suite keeps
    the parts: home_cases, the skip at no kernel run, the verdict."""
    from gradcheck_rnn.model.profiles import draw_case_ref, load_profile

    # seed 0 for both profiles: the families profile's first case of seed 0 is an slstm one
    code, output = invoke("mutants", "-m", "truncated-bptt", "-m", "slstm-stabilizer-grad-to-forget", "-n", 1,
                          "-s", 0, "--check", "reference", "--report-dir", tmp_path)
    assert code == 0 and "every mutant caught (2), no false alarm" in output, output
    assert output.count("judging 2 cases") == 1 and "Mutants: 2/2 caught on 2 cases (ci 1 (seed 0), families 1" in output
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    ci, slstm = (draw_case_ref(load_profile(name), 0, 0).id for name in ("ci", "families"))
    assert document["spec"]["case_ids"] == [ci, slstm] and document["spec"]["config"] is None
    rows = {(r["case_id"], r["target"]): r for r in document["results"]}
    assert (rows[slstm, "mutant:truncated-bptt"]["status"], rows[slstm, "mutant:truncated-bptt"]["message"]) == \
        ("skip", "the bug is in cuDNN's cells")
    assert rows[ci, "mutant:slstm-stabilizer-grad-to-forget"]["status"] == "skip"
    assert rows[slstm, "mutant:slstm-stabilizer-grad-to-forget"]["status"] == "fail"
    assert rows[slstm, "fused-cpu"]["status"] == rows[ci, "fused-cpu"]["status"] == "pass"
    cases = {m["target"]: m["cases"] for m in document["mutants"] + document["false_alarms"]}
    assert cases == {"mutant:truncated-bptt": 1, "mutant:slstm-stabilizer-grad-to-forget": 1, "fused-cpu": 2,
                     "torch-native": 1}  # a case where every row of a target is a skip is not counted
    repro = {m["target"]: m["repro"] for m in document["mutants"]}
    assert repro["mutant:slstm-stabilizer-grad-to-forget"] == \
        f"gradcheck-rnn repro {slstm} --target mutant:slstm-stabilizer-grad-to-forget"  # the id alone rebuilds it
    assert "left_out" not in document and "Left out" not in output  # named mutants: nothing left out


@pytest.mark.parametrize("mutant, case_id, reason", [
    ("truncated-bptt", "s6-L1-uni-I2-H2-N2-R1-T3-B2-len3.1-f64-s1", "the bug is in cuDNN's cells"),
    ("bptt-skipped-when-frozen", "slstm-L1-uni-I2-H2-T3-B1-len3-f64-s1-wx", "the bug is in cuDNN's cells"),
    ("s6-gate-grad-dropped", "gru-L1-uni-I2-H3-T4-B1-len4-f64-s1", "the bug is in the s6 kernel"),
    ("slstm-padded-step-updates-n", "s6-L1-uni-I2-H2-N2-R1-T3-B2-len3.1-f64-s1", "the bug is in the slstm kernel"),
])
def test_a_mutant_on_a_case_of_another_family_is_a_skip_that_runs_no_kernel(mutant, case_id, reason):
    target = resolve_target(f"mutant:{mutant}")

    def no_run(case):
        raise AssertionError("a skipped mutant ran its kernel")

    target.impl.target.run = no_run
    result = judge_one(Case.from_id(case_id), target)
    assert (result.status, result.message) == ("skip", reason)


def test_the_verdict_counts_a_mutant_judged_on_no_case_only_where_the_run_promised_it():
    from gradcheck_rnn.workflows.detection import Detection, detection_verdict

    caught = Detection("mutant:a", cases=3, flagged_cases=["x"])
    unjudged = Detection("mutant:s6-b", cases=0)
    correct = [Detection("fused-cpu", cases=3)]
    code, reason = detection_verdict([caught, unjudged], correct)
    assert code == 1 and "mutant:s6-b (judged on no case)" in reason
    code, reason = detection_verdict([caught, unjudged], correct, every_mutant=False)
    assert code == 0 and "every mutant judged caught (1)" in reason and "mutant:s6-b" in reason
    assert detection_verdict([unjudged], correct, every_mutant=False)[0] == 5
    assert detection_verdict([caught, Detection("mutant:c", cases=2)], correct, every_mutant=False)[0] == 1


def test_what_the_default_run_leaves_out_is_named_with_why_and_a_command_that_runs_it():
    """`mutants` left 11 of 51 mutants out without a word: every mutant that resolves but is not
    in the default set is in one group of results.json's "left_out", with why and a command (printed
    whole) that names one of them; the console and report.html show them, and a run that named
    its mutants leaves nothing out."""
    import shlex

    from gradcheck_rnn.reports import StoredRun
    from gradcheck_rnn.reports.html import render
    from gradcheck_rnn.targets.kernel_bugs import (BLIND_SPOTS, FAMILY_MUTANTS, GPU_FAMILY_MUTANTS, GPU_MUTANTS, MUTANTS,
                                               PRODUCT_MUTANTS)
    from gradcheck_rnn.workflows.detection import detection_lines, detection_targets, left_out

    every = {*MUTANTS, *FAMILY_MUTANTS, *GPU_MUTANTS, *GPU_FAMILY_MUTANTS, *BLIND_SPOTS, *PRODUCT_MUTANTS}
    default = {name.removeprefix("mutant:") for name in detection_targets()[0]}
    groups = left_out(())
    named = [name for group in groups for name in group["mutants"]]
    assert sorted(named) == sorted(every - default) and len(named) == len(set(named))
    for group in groups:
        words = shlex.split(group["run"])
        assert words[:2] == ["gradcheck-rnn", "mutants"] and words[words.index("-m") + 1] in group["mutants"]
        resolve_target(f"mutant:{words[words.index('-m') + 1]}")
    assert left_out(("truncated-bptt",)) == []
    _, lines = detection_lines({"mutants": [], "false_alarms": [], "left_out": groups})
    assert f"Left out: {len(named)} mutants, judged only when named (-m):" in lines
    assert all(f"    {group['run']}" in lines for group in groups)
    assert all(name in "\n".join(lines) for name in named) and max(len(line) for line in lines) <= 80
    document = {"command": "mutants", "verdict": {"exit_code": 0, "reason": "ok"}, "results": [],
                "summary": {"total": 0}, "mutants": [{"target": "mutant:x", "cases": 1, "flagged": 1}],
                "false_alarms": [], "left_out": groups}
    page = render(StoredRun.of(document)).decode()
    assert all(name in page for name in named)


def test_unknown_mutant_is_a_usage_error():
    code, output = invoke("mutants", "--mutant", "no-such-bug")
    assert code == 2 and "unknown mutant 'no-such-bug'" in output


def test_reference_comparison_alone_misses_bit_level_nondeterminism(tmp_path):
    """Why the determinism check exists: eps-level run-to-run noise passes every tolerance."""
    args = ("mutants", "--mutant", "nondeterministic-weight-grad", "--cases", 2, "--report-dir", tmp_path)  # 2: caught on each
    code, output = invoke(*args, "--check", "reference")
    assert code == 1 and "1 mutants survived: mutant:nondeterministic-weight-grad" in output
    code, output = invoke(*args, "--check", "reference", "--check", "determinism")
    assert code == 0, output


@pytest.mark.slow
def test_mutants_in_worker_processes_judge_the_serial_rows(tmp_path, worker_processes):
    """`mutants --workers 2` goes through the run spec and the process pool, row for row as serial.

    Slow-marked (13 s idle): the default suite keeps the pool's row-for-row equality with serial
    (tests/test_scale.py) and the mutants command's stored verdict (tests/test_engine.py)."""
    args = ("mutants", "--mutant", "truncated-bptt", "--mutant", "top-b_hh-zero", "--cases", 3,
            "--check", "reference", "--check", "future")
    documents = []
    for name, executor in (("here", ["--in-process"]), ("pool", ["--workers", 2])):
        code, output = invoke(*args, *executor, "--report-dir", tmp_path / name)
        assert code == 0 and "every mutant caught (2), no false alarm" in output, output
        [run] = [p for p in (tmp_path / name).iterdir() if p.name != "latest" and not p.name.startswith(".")]
        documents.append(json.loads((run / "results.json").read_text()))
    serial, pooled = ([(r["case_id"], r["target"], r["check"], r["status"], row_worst(r)) for r in d["results"]]
                      for d in documents)
    assert serial == pooled and len(serial) == 3 * 4 * 2
    assert documents[1]["spec"]["targets"] == ["mutant:truncated-bptt", "mutant:top-b_hh-zero", "fused-cpu",
                                                "torch-native"]


def test_a_detection_run_takes_the_machine_s_idle_cores_by_default(monkeypatch):
    """Issue 42: each case of `mutants` is judged by every mutant besides the correct kernels, so the
    default run (120 cases × 42 targets) took one worker as a 120-case sweep does. Its worker count
    weighs each case by its mutants (the rows are the pool's, as serial: the slow test above)."""
    from gradcheck_rnn.cli import options as cli_options
    from gradcheck_rnn.run import default_workers

    monkeypatch.delenv("GRADCHECK_RNN_WORKERS", raising=False)
    monkeypatch.setattr("gradcheck_rnn.run.usable_cores", lambda: 2)
    monkeypatch.setattr("gradcheck_rnn.run.idle_cores", lambda cores, busy_now: cores)  # an idle machine
    monkeypatch.setattr("gradcheck_rnn.run.start_pool_early", lambda execution: None)
    assert default_workers(120)[0] == 1  # a sweep of as many cases
    values = {"cases": 6, "seed": None, "config": None, "checks": (), "workers": None}
    assert cli_options.build_detection_run(values, ()).execution.workers == 2
    assert cli_options.build_detection_run(values, ("truncated-bptt",)).execution.workers == 1  # one mutant on 6 cases: a second worker does not pay
