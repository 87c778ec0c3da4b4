"""Hypothesis strategies for RNN cases: property tests whose failures shrink to small cases.

    from hypothesis import given
    import gradcheck_rnn as gr
    from gradcheck_rnn.strategies import cases

    @given(cases(modes=("gru",), max_layers=2, max_len=5, dtypes=("f32",)))
    def test_my_gru(case):
        assert all(r.status == "pass" for r in gr.check(my_gru, case, checks=["reference"]))

Every case is built from small integers and choices drawn one by one — mode, layers,
direction, I, H, T, B, lengths, dtype, wants group, head variant, initial state, data seed — so
hypothesis shrinks each toward its simplest value: the first mode and dtype given, 1 layer,
unidirectional, I = H = T = B = 1, length 1, all gradients, default heads, with an initial
state, seed 0. A failing property therefore ends on the smallest case that still fails, and
hypothesis prints it; ``case.id`` names it for ``gradcheck-rnn repro`` and ``shrink``.

hypothesis is an optional dependency: only this module imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

try:
    from hypothesis import reject
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("gradcheck_rnn.strategies needs hypothesis: pip install hypothesis") from exc

from .model.case import DTYPES, HEADS, MODES, WANTS_GROUPS, Case, RNNConfig, make_case
from .model.layouts import GRAD_LAYOUTS, INPUT_LAYOUTS
from .errors import UsageError
from .families import family, modes as family_modes

# Data seeds stay short in case ids, as in sweeps (generate.SEED_LIMIT).
MAX_DATA_SEED = 2**31 - 1


def _show_case_id(case: Case, printer, cycle: bool) -> None:
    printer.text(f"Case.from_id({case.id!r})")


# hypothesis prints a falsifying Case field by field (every array) by default; its id says it all
# and rebuilds it. Only the printing of hypothesis's reports changes, so a hypothesis without
# this hook just prints the long form.
try:
    from hypothesis.vendor.pretty import for_type_by_name

    for_type_by_name("gradcheck_rnn.model.case", "Case", _show_case_id)
except (ImportError, AttributeError):  # pragma: no cover - depends on the hypothesis version
    pass


def _choices(name: str, values: Sequence[str], allowed: Sequence[str]) -> tuple[str, ...]:
    values = (values,) if isinstance(values, str) else tuple(values)
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise UsageError(f"{name}={values!r} is not allowed; give one or more of {', '.join(allowed)}")
    return values


def _bound(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
    return value


def cases(modes: Sequence[str] = MODES, max_layers: int = 2, max_len: int = 5, dtypes: Sequence[str] = ("f64", "f32"),
          max_size: int = 4, max_batch: int = 3, bidirectional: bool = True,
          wants: Sequence[str] = WANTS_GROUPS, heads: Sequence[str] = HEADS,
          no_initial_state: bool = True, projections: bool = False, no_bias: bool = False,
          zero_lengths: bool = False, long_memory: bool = False,
          packed_tail: bool = False, layouts: bool = False) -> st.SearchStrategy[Case]:
    """A strategy of :class:`Case` objects that shrinks toward small cases.

    ``modes``, ``dtypes``, ``wants`` and ``heads`` are the choices drawn from (the first is the
    one shrinking ends on); ``max_layers``, ``max_len`` (T), ``max_size`` (I and H) and
    ``max_batch`` (B) bound the sizes; ``bidirectional`` and ``no_initial_state`` allow those
    variants, and ``projections`` (LSTM ``-P<proj>``), ``no_bias`` (``-nobias``) and
    ``zero_lengths`` (sequences of length 0) the API surface beyond the four modes, and
    ``long_memory`` (``-longmem``, where the family has that regime) and ``packed_tail``
    (``-tail<n>``, 1..4 rows) and ``layouts`` (the head gradients and x handed as non-contiguous
    views, ``-dy<T|S|E>`` and ``-xS``: gradcheck_rnn/model/layouts.py) — off by default, so that existing property tests draw what they drew; each is a boolean per case (per
    sequence for lengths) that shrinks to the plain path. Bad arguments raise UsageError when the
    strategy is made, not while drawing.
    """
    modes = _choices("modes", modes, family_modes())
    dtypes = _choices("dtypes", dtypes, DTYPES)
    wants = _choices("wants", wants, WANTS_GROUPS)
    heads = _choices("heads", heads, HEADS)
    for name, value in (("max_layers", max_layers), ("max_len", max_len), ("max_size", max_size),
                        ("max_batch", max_batch)):
        _bound(name, value)

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        mode = draw(st.sampled_from(modes))
        layers = draw(st.integers(1, max_layers))
        bidir = draw(st.booleans()) if bidirectional and family(mode).bidirectional else False
        input_size, hidden_size = draw(st.integers(1, max_size)), draw(st.integers(1, max_size))
        T, B = draw(st.integers(1, max_len)), draw(st.integers(1, max_batch))
        lengths = draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
        if zero_lengths:  # False (keep the length) is what shrinking returns to
            lengths = [0 if draw(st.booleans()) else n for n in lengths]
        proj = 0
        if projections and family(mode).projections and hidden_size >= 2 and draw(st.booleans()):
            proj = draw(st.integers(1, hidden_size - 1))
        bias = not (no_bias and draw(st.booleans()))
        # a family's options: integers shrink to 1 (or the smallest divisor), flags to their default;
        # a gradient convention's option (sLSTM's -mconst) is the judge's to set from the target
        sizes = {"hidden_size": hidden_size, "input_size": input_size}
        conventions = {c.option for c in family(mode).conventions}
        options = {o.name: (o.default != draw(st.booleans())) if o.is_flag else
                   draw(st.sampled_from([k for k in range(1, sizes[o.divides] + 1) if sizes[o.divides] % k == 0]))
                   if o.divides else draw(st.integers(1, max_size))
                   for o in family(mode).options if o.name not in conventions}
        try:
            config = RNNConfig(mode, layers, bidir, input_size, hidden_size, T, B, draw(st.sampled_from(dtypes)),
                               proj_size=proj, bias=bias, options=options)
        except UsageError:  # options that exclude each other (-strongdecay without a bias): not a case
            reject()
        if long_memory and config.family.keeps_memory(config) and draw(st.booleans()):
            try:
                config = dataclasses.replace(config, long_memory=True)
            except UsageError:  # a regime the config's options exclude (-strongdecay): keep it plain
                pass
        group, head = draw(st.sampled_from(wants)), draw(st.sampled_from(heads))
        # booleans shrink to False, so "omit the initial state" shrinks toward the default (given).
        omit_state = draw(st.booleans()) if no_initial_state else False
        seed = draw(st.integers(0, MAX_DATA_SEED))
        tail = draw(st.integers(0, 4)) if packed_tail else 0
        # "" (contiguous) first: what shrinking returns to
        grad_layout = draw(st.sampled_from(("",) + GRAD_LAYOUTS)) if layouts else ""
        input_layout = draw(st.sampled_from(("",) + INPUT_LAYOUTS)) if layouts else ""
        return make_case(config, lengths, seed, wants=group, heads=head, initial_state=not omit_state, tail=tail,
                         grad_layout=grad_layout, input_layout=input_layout)

    return draw_case()


__all__ = ["cases"]
