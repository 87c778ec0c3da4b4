"""``segments``: the target run segment by segment, state handed across calls, equals the uncut run.

Chunked prefill, training with carried state and context parallelism call a kernel on pieces of a
sequence, each piece's final states the next one's initial states, and chain the backward the
other way: the gradient of a piece's initial state is the earlier piece's final-state head
gradient. Bugs live where a piece is short or starts from a state (fla-org/flash-linear-attention
#1140: a segment shorter than the conv width drops dh0's pass-through term; #459 and
open-lm-engine/accelerated-model-architectures #445: the final-state gradient never reaches the
decay gradient; #351, #1115), and the reference check, which never cuts a sequence, can miss them.

Each sequence of the case is cut at the same drawn points (:func:`draw_cuts`, from the case's own
generator: the record's salt): a 1-step segment, segments shorter than a chunk of
:data:`CHUNK_SIZES`, a cut exactly at and one past a chunk multiple. A sequence that ended before
a segment has an empty segment there (length 0: hy = h0, dh0 = dhy). Each segment is a case of
its own handed to the target through the normal protocol (:func:`segment_case`): max_len the
segment's length, the lengths clipped, h0/c0 the states the target returned for the segment
before, dy its slice, dhy/dcy the dh0/dc0 the target returned for the segment after (the case's
own for the last). The forward runs the segments in order (every one but the last), then the
backward runs them in reverse with the chained head gradients: 2K − 1 target calls for K segments.

Judged per tensor, the worse comparison kept: y and dx joined over the segments, hy/cy of the last
segment, dh0/dc0 of the first and the parameter gradients summed over all of them, against

* the uncut base run, within the sum of the runs' bounds (each segment's gradient is within its
  own tolerance, :func:`~gradcheck_rnn.model.compare.term_bound`), and
* both float64 references, each segment's sum term within the case's tolerance, re-judged with
  the case's drift allowance (:mod:`gradcheck_rnn.references.drift`) as the reference check does.

Declined (a ``skip`` with the reason): a bidirectional case (a reverse direction carries its
state from the later segment to the earlier one, so no single schedule of calls chains a stack of
both directions: a layer's reverse pass needs the layer below's whole sequence first); a family
that carries no state; a target judged under a gradient convention exact only for losses through
y (mlstm-custbw's ``head_norm``: the inner segments would get a final-state gradient, which the
convention does not cover); a case where no sequence is longer than one step; a target that declines
a segment (no initial state, say). A target that declines zero lengths is cut only before its
shortest sequence's end, so that no segment is empty.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Sequence

import numpy as np

from ...model.case import Case, round_to_dtype, with_changes
from ...model.statuses import worst_tensor
from ...model.compare import TensorError, compare_tensor
from ...model.tolerances import Tolerances
from .base import Arrays, Check, Labels, ReferenceDisagreement, Skip

# Chunk sizes whose multiples are cut at and one past: the fused kernels' chunk (4), the matrix
# profile's second (8) and flash-linear-attention's (16, 64). Fixed here, not the profile's: the
# cuts must follow from the case id alone.
CHUNK_SIZES = (4, 8, 16, 64)
MAX_CUTS = 3
# The wants group of a segment that must return dh0/dc0 for the segment before it: the case's own
# group with h0 (and c0) added, so frozen weights stay frozen.
WITH_STATE_GRADS = {"all": "all", "params": "all", "inputs": "inputs", "x": "inputs"}
STATE_TENSORS = frozenset({"hy", "cy", "h0", "c0"})


def draw_cuts(rng: np.random.Generator, limit: int) -> list[int]:
    """1..:data:`MAX_CUTS` sorted cut points in 1..limit−1 (``limit`` >= 2): each a chunk multiple
    or one past it (half the time, where there is one below ``limit``) or uniform, and a third of
    the time followed by the next step too, which makes a 1-step segment."""
    edges = sorted({e for c in CHUNK_SIZES for k in range(1, limit // c + 1) for e in (k * c, k * c + 1)
                    if e < limit})
    cuts: set[int] = set()
    for _ in range(int(rng.integers(1, MAX_CUTS + 1))):
        cut = int(rng.choice(edges)) if edges and rng.random() < 0.5 else int(rng.integers(1, limit))
        cuts.add(cut)
        if cut + 1 < limit and rng.random() < 1 / 3:
            cuts.add(cut + 1)
    return sorted(cuts)


def segment_case(case: Case, start: int, stop: int, h0: np.ndarray | None, c0: np.ndarray | None,
                 dhy: np.ndarray, dcy: np.ndarray | None) -> Case:
    """Steps start..stop−1 of ``case`` as a case of their own (see the module docstring); a
    segment with an initial state requests its gradient, the one without (the first of a ``-z``
    case) takes the target's "no initial state" path."""
    config = replace(case.config, max_len=stop - start)
    lengths = np.clip(case.seq_lengths - start, 0, stop - start)
    wants = case.wants_group if h0 is None or start == 0 else WITH_STATE_GRADS[case.wants_group]

    def state(a: np.ndarray | None) -> np.ndarray | None:  # the target's own output, as case data is
        return None if a is None else round_to_dtype(a, config.dtype)

    return with_changes(case, config=config, x=case.x[start:stop], seq_lengths=lengths, h0=state(h0),
                        c0=state(c0), dy=case.dy[start:stop], dhy=state(dhy), dcy=state(dcy), wants=wants,
                        heads="all")


def run_segments(call, case: Case, bounds: Sequence[tuple[int, int]]) -> list[Arrays]:
    """The target's run of every segment with the states chained (module docstring), in time order."""
    starts = [(case.h0, case.c0)]
    zero_dcy = None if case.dcy is None else np.zeros_like(case.dcy)
    for start, stop in bounds[:-1]:  # forward: each segment's final states start the next
        out = call.run(segment_case(case, start, stop, *starts[-1], np.zeros_like(case.dhy), zero_dcy))
        starts.append((out["hy"], out.get("cy")))
    runs: list[Arrays] = []
    dhy, dcy = case.dhy, case.dcy
    for (start, stop), (h0, c0) in zip(reversed(bounds), reversed(starts)):  # backward: dh0 is dhy before
        out = call.run(segment_case(case, start, stop, h0, c0, dhy, dcy))
        runs.append(out)
        dhy, dcy = out.get("h0"), out.get("c0")
    return runs[::-1]


def check_segments(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    config = case.config
    if config.bidirectional:
        raise Skip("bidirectional: a reverse direction carries its state from the later segment to the earlier "
                   "one, so no single schedule of calls can chain the stack")
    if config.h_size == 0:
        raise Skip(f"the {config.mode} family carries no state from one step to the next: nothing to hand over")
    for convention in config.family.conventions:
        if convention.heads and config.option(convention.option):
            raise Skip(f"judged under the {convention.attribute} convention, exact only for losses through all of "
                       f"y (-g{convention.heads}): every segment but the last would hand the one before it a "
                       f"final-state gradient")
    if context.disagreement is not None:
        raise ReferenceDisagreement([context.disagreement])
    rng = CHECK.rng(case)
    longest, shortest = int(case.seq_lengths.max()), int(case.seq_lengths.min())
    if longest < 2:
        raise Skip("no sequence is longer than one step: nothing to cut")
    cuts = draw_cuts(rng, longest)
    if cuts[-1] >= shortest:  # a segment is empty for the shortest sequence: can the target take a length 0?
        declined = call.declines(with_changes(case, seq_lengths=np.where(case.seq_lengths == shortest, 0,
                                                                         case.seq_lengths)))
        if declined:
            if shortest < 2:
                raise Skip(f"the target declines zero lengths ({declined}) and the shortest sequence leaves no "
                           f"cut before its end")
            cuts = draw_cuts(rng, shortest)
    edges = [0, *cuts, config.max_len]
    bounds = list(pairwise(edges))
    runs = run_segments(call, case, bounds)
    base = call.base()
    # a tensor some run set aside (unusable outside a contract the case breaks) is reported as such
    # by the judge, not judged here: neither joined (a missing y part) nor summed as a zero term
    names = [name for name in context.tensor_names() if name not in call.set_aside]
    segmented, terms = joined(context, runs, names)
    where = f"cut at t = {', '.join(map(str, cuts))}"
    return [judge_tensor(context, base, name, segmented[name], terms[name], tolerances, where) for name in names]


def joined(context, runs: list[Arrays], names: list[str]) -> tuple[Arrays, dict[str, list[np.ndarray]]]:
    """The segmented run as one run of the case (its tensors ``names``), and for each tensor the
    values it is the sum of (one per segment for a parameter gradient, itself for the rest)."""
    segmented: Arrays = {}
    terms: dict[str, list[np.ndarray]] = {}
    for name in names:
        if name in ("y", "x"):
            segmented[name] = np.concatenate([run[name] for run in runs])
        elif name in STATE_TENSORS:
            segmented[name] = (runs[-1] if name in ("hy", "cy") else runs[0])[name]
        else:
            # torch's autograd gives no gradient for a parameter a segment never reaches (all its rows
            # padding or tail): a zero term. Were the omitted term not zero, the sum would differ from
            # the uncut run and the references, and the row fail: a zero can pass nothing wrong.
            zero = np.zeros_like(next(iter(context.expected.values()))[name])
            terms[name] = [run.get(name, zero) for run in runs]
            segmented[name] = sum(terms[name][1:], terms[name][0])
        terms.setdefault(name, [segmented[name]])
    return segmented, terms


def judge_tensor(context, base: Arrays, name: str, value: np.ndarray, terms: list[np.ndarray],
                 tolerances: Tolerances, where: str) -> TensorError:
    """One tensor of the segmented run against the uncut run and each reference; the worst kept."""
    from ...references.drift import needs_allowance, widened  # torch: the checks' registry is read without it

    case = context.case
    tol = tolerances.for_tensor(case.config.dtype, name)
    drift = None
    uncut = compare_tensor(name, value, base[name], tol, case.config, terms=[base[name], *terms])
    if not uncut.passed and needs_allowance(case):
        drift = context.drift.for_tensor(name)
        if drift is not None:  # two runs of a correct kernel, each may drift by the allowance
            uncut = compare_tensor(name, value, base[name], tol, case.config, terms=[base[name], *terms],
                                   allowance=2 * widened(drift, tol.rtol))
    uncut.reference = "uncut run"
    candidates = [uncut]
    for ref_name, ref in context.expected.items():
        error = compare_tensor(name, value, ref[name], tol, case.config, terms=terms if len(terms) > 1 else None)
        if not error.passed and needs_allowance(case):
            drift = context.drift.for_tensor(name) if drift is None else drift
            if drift is not None:
                error = compare_tensor(name, value, ref[name], tol, case.config, allowance=widened(drift, tol.rtol),
                                       terms=terms if len(terms) > 1 else None)
        error.reference = ref_name
        candidates.append(error)
    worst = worst_tensor([e for e in candidates if not e.passed] or candidates)
    if not worst.passed:
        against = "the uncut run" if worst.reference == "uncut run" else f"the {worst.reference} reference"
        worst.message = f"{worst.message} (run in segments, {where}, against {against})"
    return worst


CHECK = Check("segments", check_segments, order=80,
              labels=Labels("run in segments", "uncut run, or the reference the row names"), salt=5)
