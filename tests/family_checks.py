"""Checks every family with a step function gets in its own test file (tests/test_s6.py,
tests/test_slstm.py): both references against central differences of the loop forward, and the
bucketed JAX program against the exact-shape one; and each mutant of a family caught where its
correct kernel passes (tests/test_gdn_kernel.py, test_kda_family.py, test_mlstm_kernel.py)."""

import numpy as np

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.model.case import as_mapping, with_changes
from gradcheck_rnn.references import run_reference
from gradcheck_rnn.references.jax_family import program_count, run_jax_family_reference
from gradcheck_rnn.references.loop import loop_loss


def assert_matches_central_differences(reference: str, case: Case, names: list[str], samples: int,
                                       valid_x: tuple[int, int]) -> None:
    """``samples`` random elements of each named gradient equal a central difference of the loop
    loss; x's are taken at a valid step (below ``valid_x[0]``) of sequence ``valid_x[1]``."""
    grads = run_reference(reference, case).grads
    rng = np.random.default_rng(0)
    eps = 1e-6
    inputs = [n for n in ("x", "h0", "c0") if getattr(case, n) is not None]
    for name in names:
        for _ in range(samples):
            index = tuple(int(rng.integers(s)) for s in grads[name].shape)
            if name == "x":
                index = (int(rng.integers(valid_x[0])), valid_x[1], index[2])
            values = []
            for sign in (1, -1):
                shifted = {k: v.copy() for k, v in case.params.items()}
                arrays = {n: getattr(case, n).copy() for n in inputs}
                target = shifted[name] if name in shifted else arrays[name]
                target[index] += sign * eps
                values.append(loop_loss(with_changes(case, params=shifted, **arrays)))
            fd = (values[0] - values[1]) / (2 * eps)
            assert abs(grads[name][index] - fd) <= 1e-7 + 1e-6 * abs(fd), (reference, name, index, grads[name][index], fd)


def assert_one_bucketed_program_is_exact(ids: list[str], exact: list[str]) -> None:
    """The cases of ``ids`` share one bucketed JAX program, and equal the exact-shape program to
    float64 rounding on the ids of ``exact`` (each costs a compile)."""
    before = program_count()
    bucketed = {i: as_mapping(run_jax_family_reference(Case.from_id(i))) for i in ids}
    assert program_count() - before <= 1  # one program for all (none if an earlier test compiled it)
    for case_id in exact:
        got, expected = bucketed[case_id], as_mapping(run_jax_family_reference(Case.from_id(case_id), bucketed=False))
        assert set(got) == set(expected)
        for name, value in got.items():
            assert value.shape == expected[name].shape, name
            np.testing.assert_allclose(value, expected[name], rtol=1e-13, atol=1e-14, err_msg=f"{case_id} {name}")


def assert_mutants_fail_where_fused_cpu_passes(mutants: list[str], case_id: str, **check_options) -> None:
    """Each of ``mutants`` fails the reference check on ``case_id`` and fused-cpu passes it, judged
    in one call: they share the case's references (and the rounding probe, for a family that declares one)."""
    rows = gr.check([*(f"mutant:{name}" for name in mutants), "fused-cpu"], case_id, checks=["reference"],
                    **check_options)
    assert {r.target: r.status for r in rows} == {**{f"mutant:{name}": "fail" for name in mutants},
                                                  "fused-cpu": "pass"}, [(r.target, r.status, r.message) for r in rows]
    assert len(rows) == len(mutants) + 1
