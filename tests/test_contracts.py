"""Target contracts (gradcheck_rnn/targets/contracts.py): a case outside a precondition the target
declares gives ``out-of-contract`` rows, shown and counted, failing a run only when contracts are
strict; whatever lies inside the contract is judged as before."""

import json

import pytest
from click.testing import CliRunner

import gradcheck_rnn as gr
from gradcheck_rnn.cli import main
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.targets.contracts import as_contract

TAIL_ID = "s6-L2-uni-I3-H2-N2-R1-T6-B3-len6.0.3-f32-s5-tail3"
PLAIN_ID = TAIL_ID.removesuffix("-tail3")
CHECKS = ["reference", "determinism", "linearity"]


def test_breaking_the_contract_outside_it_is_out_of_contract_with_the_contract_quoted():
    rows = gr.check("contract_targets:garbage_tail", TAIL_ID, checks=CHECKS)
    reference = next(r for r in rows if r.check == "reference")
    assert reference.status == "out-of-contract"
    assert {t.name for t in reference.tensors if t.status == "out-of-contract"} == {"x[tail]"}
    assert all(t.status == "pass" for t in reference.tensors if t.name != "x[tail]")  # judged as before
    assert "T == cu_seqlens[-1]" in reference.message and "FlashAttention API" in reference.message
    assert "leaves the dx rows past cu_seqlens[-1] unwritten" in reference.message
    assert all(r.status in ("pass", "out-of-contract") for r in rows)
    # on a case inside the contract the same target passes everything
    assert all(r.status == "pass" for r in gr.check("contract_targets:garbage_tail", PLAIN_ID, checks=CHECKS))


def test_breaking_the_contract_inside_it_fails_whatever_else_the_case_breaks():
    for case_id in (PLAIN_ID, TAIL_ID):
        reference = gr.check("contract_targets:wrong_inside", case_id, checks=["reference"])[0]
        assert reference.status == "fail", case_id
        assert {t.name for t in reference.tensors if t.status == "fail"} == {"x"}
    # the tail's own row is still out-of-contract inside the failing row
    assert {t.name: t.status for t in reference.tensors}["x[tail]"] == "out-of-contract"


def test_a_tensor_unusable_in_only_some_runs_of_a_check_is_out_of_contract_not_an_error():
    """A run that sets a tensor aside (non-finite past the contract) while another run of the same
    check gives it: linearity and segments compare what every run gave (a KeyError crashed the
    worker on fla-recurrent's tail cases) and the set-aside tensor is reported out-of-contract."""
    rows = gr.check("contract_targets:nan_every_other_call", TAIL_ID, checks=["linearity", "segments"],
                    in_process=True)
    assert [r.status for r in rows] == ["out-of-contract", "out-of-contract"], [r.message for r in rows]
    for row in rows:
        assert {t.name for t in row.tensors if t.status == "out-of-contract"} >= {"l0.fwd.w_in"}, row.tensors
        assert all(t.status == "pass" for t in row.tensors if t.name in ("x", "y", "h0"))


TAIL_PROFILE = """[sweep]
cases = 2
[draw]
modes = { s6 = 1 }
dtypes = { f32 = 1 }
packed_tail = 1.0
"""


def invoke(tmp_path, *extra):
    tmp_path.mkdir()
    (tmp_path / "tails.toml").write_text(TAIL_PROFILE)
    result = CliRunner().invoke(main, ["sweep", "-c", str(tmp_path / "tails.toml"), "-t", "contract_targets:garbage_tail",
                                       "--workers", "1", "--report-dir", str(tmp_path), *extra],
                                catch_exceptions=False)
    document = json.loads((tmp_path / "latest" / "results.json").read_text()) if (tmp_path / "latest").exists() \
        else None
    return result, document


def test_out_of_contract_rows_exit_0_and_fail_with_strict_contracts(tmp_path):
    result, document = invoke(tmp_path / "lenient")
    assert result.exit_code == 0, result.output
    assert "out-of-contract" in document["verdict"]["reason"] and document["summary"]["out-of-contract"] >= 2
    assert not {r["status"] for r in document["results"]} - {"pass", "skip", "out-of-contract"}
    junit = (tmp_path / "lenient" / "latest" / "junit.xml").read_text()
    assert 'type="out-of-contract"' in junit and "<skipped" in junit and "<failure" not in junit
    rows = sum(r["status"] == "out-of-contract" for r in document["results"])
    cases = len({r["case_id"] for r in document["results"] if r["status"] == "out-of-contract"})
    assert rows > cases  # several checks see the one cause: one finding per case, its rows listed under it
    one_per_case = f"{cases} findings in {rows} results"
    assert one_per_case in " ".join(result.output.split()) and "cause: outside the contract" in result.output
    for report in ("report.md", "report.html"):
        text = (tmp_path / "lenient" / "latest" / report).read_text()
        assert "out-of-contract" in text and "FlashAttention API" in text
        assert one_per_case in text and "also: " in text and "Cause:" in text
    strict, document = invoke(tmp_path / "strict", "--strict-contracts")
    assert strict.exit_code == 1 and document["spec"]["strict_contracts"] is True
    assert "<failure" in (tmp_path / "strict" / "latest" / "junit.xml").read_text()


def test_a_profile_makes_contracts_strict_and_validates_the_setting(tmp_path):
    profile = tmp_path / "strict.toml"
    profile.write_text("[checks]\nstrict_contracts = true\n")
    assert gr.sweep("contract_targets:garbage_tail", cases=1, config=str(profile)).spec.strict_contracts
    profile.write_text("[checks]\nstrict_contracts = 1\n")
    with pytest.raises(UsageError, match="strict_contracts"):
        gr.sweep("contract_targets:garbage_tail", cases=1, config=str(profile))


def test_a_contract_the_tool_cannot_test_is_one_clear_error():
    with pytest.raises(UsageError, match="cannot test"):
        as_contract({"precondition": "B <= 4", "quote": "", "source": "", "outside": ""})
    with pytest.raises(UsageError, match="without quote"):
        as_contract({"precondition": "T == cu_seqlens[-1]", "source": "", "outside": ""})


def test_an_issue_body_of_an_out_of_contract_row_quotes_the_contract():
    from gradcheck_rnn.workflows.issue import write_issue

    code, body = write_issue(TAIL_ID, "contract_targets:garbage_tail")
    assert code == 0 and "outside the library's documented contract" in body
    assert "T == cu_seqlens[-1]" in body and "FlashAttention API" in body and "Versions" in body
    code, why = write_issue(PLAIN_ID, "contract_targets:garbage_tail")
    assert code == 1 and "nothing to file" in why
