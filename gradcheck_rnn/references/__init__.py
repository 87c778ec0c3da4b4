"""The float64 ground truth: two independent references and a finite-difference witness.

* ``loop`` (:mod:`.loop`): one sample at a time, each sequence cut to its own length, explicit
  cell equations, torch autograd — never padded, so it cannot share a padding bug;
* ``jax`` (:mod:`.jax_ref`; :mod:`.jax_family` for the families that give a step function): the
  padded batch with length masks, ``lax.scan`` + ``jax.vjp``;
* ``fd`` (:mod:`.fd`): central differences of the loop forward, no autodiff at all.

The engine asks for them through :class:`gradcheck_rnn.context.CaseContext`, which computes
each once per case.
"""

from __future__ import annotations

from ..case import Case, Outputs

REFERENCE_NAMES = ("loop", "jax")


def run_reference(name: str, case: Case) -> Outputs:
    """Run one float64 reference (``loop`` or ``jax``) on a case."""
    if name == "loop":
        from .loop import run_loop_reference

        return run_loop_reference(case)
    if case.config.family.has_step():
        from .jax_family import run_jax_family_reference

        return run_jax_family_reference(case)
    from .jax_ref import run_jax_reference

    return run_jax_reference(case)
