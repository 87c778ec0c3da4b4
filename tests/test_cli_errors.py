"""Usage errors are one line in the project's style (exit 2), and repro/check take --case-timeout
so that the repro line of a timed-out row stops too instead of hanging."""

import json
import subprocess
import sys

import pytest

from gradcheck_rnn.cli import main


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from gradcheck_rnn.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


# the pointer to --help is left out where the line would not fit 80 columns
USAGES = [(["sweep", "--cases", "0"], "Invalid value for '--cases' / '-n': 0 is not in the range x>=1"),
          (["nosuch"], "No such command 'nosuch'; see 'gradcheck-rnn --help'"),
          (["repro"], "Missing argument 'CASE_ID'; see 'gradcheck-rnn repro --help'")]


def test_click_usage_errors_are_one_line_in_the_project_style():
    """Each usage error, through the console script's main() in a fresh interpreter (one for all
    three: each child costs ~0.6 s), exits 2 with one `error: ...` line on stderr."""
    probe = ("import contextlib, io, json, sys; sys.argv[0] = 'gradcheck-rnn'; from gradcheck_rnn.cli import main\n"
             "done = []\n"
             "for args in json.loads(sys.argv[1]):\n"
             "    err = io.StringIO()\n"
             "    with contextlib.redirect_stderr(err):\n"
             "        try:\n"
             "            main(args)\n"
             "        except SystemExit as exc:\n"
             "            done.append([exc.code, err.getvalue()])\n"
             "        else:\n"
             "            done.append([0, err.getvalue()])\n"
             "print(json.dumps(done))")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps([args for args, _ in USAGES])],
                          capture_output=True, text=True, timeout=120)
    results = json.loads(done.stdout)
    assert len(results) == len(USAGES), done.stderr
    for (args, words), (code, stderr) in zip(USAGES, results):
        assert code == 2, (args, code, stderr)
        assert stderr.strip().splitlines() == [f"error: {words}"], (args, stderr)


def test_help_still_exits_0():
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["sweep", "--help"])
    assert result.exit_code == 0 and "--cases" in result.output


def test_check_and_repro_stop_a_hanging_target_with_case_timeout(worker_processes):
    # in this process: the repro's worker, forked from the suite's kept fork server, is what hangs
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["repro", "gru-L1-uni-I2-H3-T4-B2-len4.2-f64-s1", "-t", "plugin_targets:hangs",
                                       "--case-timeout", "2"])
    assert result.exit_code == 1, result.output
    assert "timed out after 2 s" in result.output
    assert "--target plugin_targets:hangs --case-timeout 2" in result.output


def test_help_report_and_merge_import_neither_torch_nor_jax(tmp_path):
    from gradcheck_rnn.reports import write_reports

    run_dir = write_reports([], tmp_path, {"command": "sweep", "verdict": {"exit_code": 5, "reason": "nothing"}})
    probe = ("import sys; from click.testing import CliRunner; from gradcheck_rnn.cli import main; "
             "codes = [CliRunner().invoke(main, args).exit_code for args in "
             "(['--help'], ['report', sys.argv[1]], ['merge', sys.argv[1]])]; "
             "print(codes, 'torch' in sys.modules, 'jax' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(run_dir)], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["[0,", "5,", "2]", "False", "False"], done.stdout + done.stderr


def test_usage_errors_that_need_no_kernel_are_refused_before_torch_and_jax_import(tmp_path):
    """Issue 38: a bad case id, an unknown target or a bad @PYTHON path waited 4-9 s for torch and
    JAX to import before the one-line refusal. One fresh interpreter judges every command."""
    commands = [["repro", "lstm-L1-bad", "-t", "fused-cpu"],
                ["check", "--case-id", "gru-L1-uni-I2-H3-T5-B1-len5-f32"],
                ["shrink", "lstm-L1-uni-I2-H3-T5-B1-len9-f32-s7", "-t", "fused-cpu"],
                ["sweep", "-t", "nosuch", "-n", "2", "--report-dir", str(tmp_path / "reports")],
                ["repro", "lstm-L1-uni-I2-H3-T5-B1-len5-f32-s7", "-t", "fused-cpu@" + str(tmp_path / "no-venv")]]
    probe = ("import json, sys; from click.testing import CliRunner; from gradcheck_rnn.cli import main; "
             "runs = [CliRunner().invoke(main, args) for args in json.loads(sys.argv[1])]; "
             "print(json.dumps([[r.exit_code, r.output, 'torch' in sys.modules or 'jax' in sys.modules] "
             "for r in runs]))")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(commands)], capture_output=True,
                          text=True, timeout=120)
    for args, (code, output, heavy) in zip(commands, json.loads(done.stdout)):
        assert code == 2 and len(output.strip().splitlines()) == 1 and output.startswith("error: "), (args, output)
        assert not heavy, f"{args}: torch or jax imported before the refusal"
    assert not (tmp_path / "reports").exists()


def test_a_folder_named_like_a_profile_does_not_shadow_it(tmp_path, monkeypatch):
    from gradcheck_rnn.model.profiles import CONFIG_DIR, resolve_profile_path

    (tmp_path / "half").mkdir()  # e.g. a report folder of an earlier half sweep
    monkeypatch.chdir(tmp_path)
    assert resolve_profile_path("half") == CONFIG_DIR / "half.toml"


@pytest.mark.parametrize("command", ["sweep", "mutants", "calibrate", "repro", "shrink"])
def test_help_and_the_unknown_profile_error_give_one_list_of_profile_names(command, tmp_path):
    """Issue 29: --help named 6 profiles and the error 8. --help gives every shipped profile; the
    error (one short line since issue 48) names the shipped one meant, or where they are."""
    import re

    from click.testing import CliRunner

    from gradcheck_rnn.model.profiles import CONFIG_DIR

    shipped = sorted(path.stem for path in CONFIG_DIR.glob("*.toml"))
    runner = CliRunner()
    help_text = " ".join(runner.invoke(main, [command, "--help"]).output.split())
    in_help = re.search(r"a name in configs/ \(([^)]*)\)", help_text)
    assert in_help, help_text
    unwrapped = re.sub(r"-\s+", "-", in_help.group(1))  # click may wrap the help at a name's hyphen
    assert sorted(unwrapped.split(", ")) == shipped
    error = runner.invoke(main, ["sweep", "-c", "no-such-profile", "--report-dir", str(tmp_path)]).output
    assert error.strip().endswith("give a TOML file or a name in configs/"), error
    for name in shipped:
        error = runner.invoke(main, ["sweep", "-c", name + name[-1], "--report-dir", str(tmp_path)]).output
        assert error.strip().endswith(f"did you mean '{name}'?"), error


def test_a_usage_error_is_one_short_line_with_the_name_meant_before_torch_and_jax():
    """Issue 48: an unknown mutant took 5 s and printed a 1,400-character line; a target module
    that is nowhere, or a --family one, waited for torch and JAX too. Each unknown name is now
    refused before they import, in one line that fits 80 columns, with the closest name when one
    is close (difflib) or where the names are listed; so are mutants' --mode without --config
    (10 s) and --executor dask without --scheduler."""
    case_id = "gru-L1-uni-I2-H3-T5-B1-len5-f32-s7"
    commands = {
        "unknown mutant 'truncated-bpt'; did you mean 'truncated-bptt'?": ["mutants", "-m", "truncated-bpt"],
        "unknown mutant 'nope'; 'gradcheck-rnn targets' lists them": ["sweep", "-t", "mutant:nope", "-n", "1"],
        "unknown mutant 'truncated'; did you mean 'truncated-bptt'?": ["shrink", case_id, "-t", "mutant:truncated"],
        "unknown target 'fused-cpus'; did you mean 'fused-cpu'?": ["repro", case_id, "-t", "fused-cpus"],
        "unknown target 'nosuch'; 'gradcheck-rnn targets' lists them": ["check", "-t", "nosuch"],
        "target 'nowhere_pkg.rnn:f': no module named 'nowhere_pkg' on PYTHONPATH": ["sweep", "-t", "nowhere_pkg.rnn:f"],
        "family 'nowhere_pkg:CELL': no module named 'nowhere_pkg' on PYTHONPATH": ["sweep", "--family", "nowhere_pkg:CELL"],
        "unknown profile 'cii'; did you mean 'ci'?": ["sweep", "-c", "cii"],
        "unknown mode 'lstn'; did you mean 'lstm'?": ["sweep", "--mode", "lstn"],
        "--mode narrows one profile's draw: name it, e.g. -c families --mode s6": ["mutants", "--mode", "gru"],
        "--executor dask needs --scheduler ADDRESS, e.g. tcp://10.0.0.5:8786": ["sweep", "--executor", "dask"],
    }
    probe = ("import json, sys; from click.testing import CliRunner; from gradcheck_rnn.cli import main; "
             "runs = [CliRunner().invoke(main, args, prog_name='gradcheck-rnn') for args in json.loads(sys.argv[1])]; "
             "print(json.dumps([[r.exit_code, r.output, 'torch' in sys.modules or 'jax' in sys.modules] "
             "for r in runs]))")
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(list(commands.values()))], capture_output=True,
                          text=True, timeout=120)
    for (words, args), (code, output, heavy) in zip(commands.items(), json.loads(done.stdout)):
        lines = output.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {words}"), (args, output)
        assert len(lines[0]) <= 80, (args, lines[0])
        assert not heavy, f"{args}: torch or jax imported before the refusal"


def test_the_mutant_names_known_without_torch_are_the_registered_ones():
    """targets/mutant_names.py lists what targets/kernel_bugs.py registers (its import asserts it):
    every name resolves, and the registry's groups hold no other."""
    from gradcheck_rnn.targets import mutant_names, mutants

    assert set(mutant_names.ALL) == {*mutants.MUTANTS, *mutants.FAMILY_MUTANTS, *mutants.GPU_MUTANTS,
                                     *mutants.GPU_FAMILY_MUTANTS, *mutants.BLIND_SPOTS, *mutants.PRODUCT_MUTANTS}
    assert len(mutant_names.ALL) == len(set(mutant_names.ALL))


@pytest.mark.parametrize("raised, code", [(TypeError("expected a message argument"), 130),
                                          (TypeError("a bug of ours"), 1)], ids=["after-ctrl-c", "no-signal"])
def test_ctrl_c_that_an_extension_s_import_turns_into_another_error_is_still_one_line(
        raised, code, monkeypatch, capsys):
    """Issue 38 again: Ctrl-C while torch's C init runs came out of it as a TypeError and a
    traceback. An error that escapes after a SIGINT is the interrupt; one without is a bug shown
    as one (the second row: the same error, no signal)."""
    import signal
    import time

    import gradcheck_rnn.run.plan as plan_module

    def importing_torch(request):
        if code == 130:
            try:
                signal.raise_signal(signal.SIGINT)
                time.sleep(5)  # not reached: the signal is delivered at once
            except KeyboardInterrupt:
                raise raised from None  # what the extension's init made of it
        raise raised

    monkeypatch.setattr(plan_module, "plan", importing_torch)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a user's interpreter
    try:
        with pytest.raises(BaseException) as stopped:
            main.main(["sweep", "-n", "1", "-t", "fused-cpu"], prog_name="gradcheck-rnn")
    finally:
        signal.signal(signal.SIGINT, previous)
    if code == 130:
        assert isinstance(stopped.value, SystemExit) and stopped.value.code == 130
        assert capsys.readouterr().err.strip() == "error: interrupted (SIGINT) before any case was judged"
    else:
        assert stopped.value is raised
