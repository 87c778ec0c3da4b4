"""Detection power: sweep every mutant and the correct kernels on the same cases.

A mutant is *caught* when at least one of its results (reference comparison or a
reference-free check) on some case is not a pass or skip; a *false alarm* is such a result of
a correct kernel. ``gradcheck-rnn mutants`` exits 1 if any mutant survives or any false
alarm occurs.

A mutant's bug lives in one family's kernel (cuDNN's cells, or s6, slstm), so it is judged on
the cases of its *home profile*, one that draws that family (:func:`home_cases`): the default
run is one run over the concatenated case ids of every home profile, under the ci profile's
checks and tolerances; a mutant on a case of another family is a skip at no kernel run
(:class:`~gradcheck_rnn.targets.kernel_bugs.ScopedMutant`), and the correct kernels are judged on
every case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..rows.result import BAD_STATUSES, CaseResult

CORRECT_TARGETS = ("fused-cpu", "torch-native")


@dataclass
class Detection:
    """How one target fared: the cases run, those that flagged it, and the first flag."""

    target: str
    doc: str = ""
    cases: int = 0
    flagged_cases: list[str] = field(default_factory=list)
    first: CaseResult | None = None

    @property
    def caught_by(self) -> str:
        """The check and tensor of the first flag, e.g. ``reference: x`` or ``future: x``."""
        if self.first is None:
            return ""
        worst = self.first.failing[0].name if self.first.failing else self.first.status
        return f"{self.first.check}: {worst}"

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "doc": self.doc, "cases": self.cases, "flagged": len(self.flagged_cases),
                "first_case_id": None if self.first is None else self.first.case_id, "caught_by": self.caught_by,
                "repro": None if self.first is None else self.first.repro}


def detection_targets(mutants: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """The names judged by a detection run: the mutants (every one by default; unknown names are a
    UsageError) and the correct kernels judged beside them on the same cases."""
    from ..targets import resolve_target
    from ..targets.kernel_bugs import FAMILY_MUTANTS, MUTANTS

    mutant_names = [resolve_target(f"mutant:{name}").name for name in (mutants or [*MUTANTS, *FAMILY_MUTANTS])]
    gpu = any(name.startswith("mutant:gpu-") for name in mutant_names)  # GPU mutants: fused-gpu is judged too
    return mutant_names, list(CORRECT_TARGETS + (("fused-gpu",) if gpu else ()))


def left_out(named: Iterable[str]) -> list[dict[str, Any]]:
    """The mutants a detection run without ``-m`` leaves out, each group with why and a command
    that runs one (``"mutants"``, ``"why"``, ``"run"``; results.json's ``"left_out"``): the GPU
    kernels' mutants, which need CUDA or Triton's slow interpreter, the half tolerances'
    measured blind spots, which pass by design, and the forward-mode and second-order mutants,
    which only the jvp and gradgrad checks judge; nothing when the run named its mutants."""
    from ..targets.kernel_bugs import BLIND_SPOTS, GPU_FAMILY_MUTANTS, GPU_MUTANTS, PRODUCT_MUTANTS

    if list(named):
        return []
    gpu, blind, products = [*GPU_MUTANTS, *GPU_FAMILY_MUTANTS], list(BLIND_SPOTS), list(PRODUCT_MUTANTS)
    return [
        {"mutants": gpu, "why": "bugs of the fused GPU kernels: they need a CUDA device (on CPU, TRITON_INTERPRET=1 "
                                "runs them in Triton's interpreter, minutes each); benchmarks/gpu.sh runs them all",
         "run": f"gradcheck-rnn mutants -m {gpu[0]}"},
        {"mutants": blind, "why": "measured blind spots of the half tolerances (docs/half-precision.md): they pass, "
                                  "so they survive by design (exit 1)",
         "run": f"gradcheck-rnn mutants -c half -m {blind[0]}"},
        {"mutants": products, "why": "bugs of forward mode and second order: the default run judges ci's checks, "
                                     "where jvp and gradgrad are off",
         "run": f"gradcheck-rnn mutants -m {products[0]} --check jvp"},
    ]


def home_cases(mutant_names: list[str], cases: int | None = None,
               seed: int | None = None) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The case ids of a default detection run: for each home profile of the mutants (in order of
    first mention), its cases 0..``cases``-1 (default: the profile's count) of the sweep ``seed``
    (default: the profile's seed), named by id so that one run judges them all and each repro
    line rebuilds its case; and ``[{"profile", "seed", "cases"}]``, what they were drawn from."""
    from ..model.profiles import draw_case_ref, load_profile
    from ..targets.kernel_bugs import home_profile

    ids: list[str] = []
    drawn: list[dict[str, Any]] = []
    for name in dict.fromkeys(home_profile(n.removeprefix("mutant:")) for n in mutant_names):
        profile = load_profile(name)
        sweep_seed, count = profile.seed if seed is None else seed, profile.cases if cases is None else cases
        ids += [draw_case_ref(profile, sweep_seed, index).id for index in range(count)]
        drawn.append({"profile": name, "seed": sweep_seed, "cases": count})
    return tuple(ids), drawn


def summarise(results: list[CaseResult], mutant_names: list[str], correct_names: list[str],
              tally: Any = None) -> tuple[list[Detection], list[Detection]]:
    """How each mutant and each correct kernel fared in ``results``: (mutant rows, correct rows),
    counting the cases each was judged on (not those where its every row is a skip). With the run's ``tally`` (:class:`~gradcheck_rnn.rows.store.Tally`) the cases per target are its
    counts, and ``results`` need only hold the rows that did not pass."""
    from ..targets.kernel_bugs import mutant_doc

    rows: dict[str, Detection] = {}
    for name in mutant_names + correct_names:
        short = name.removeprefix("mutant:")
        rows[name] = Detection(name, mutant_doc(short) if name.startswith("mutant:") else "correct kernel")
    seen: dict[str, set[str]] = {name: set() for name in rows}
    if tally is not None:
        for target, cases in tally.cases_per_target().items():
            if target in rows:
                rows[target].cases = cases
    for result in results:
        row = rows[result.target]
        if tally is None and result.status != "skip" and result.case_id not in seen[result.target]:
            seen[result.target].add(result.case_id)
            row.cases += 1
        if result.status in BAD_STATUSES and result.case_id not in row.flagged_cases:
            row.flagged_cases.append(result.case_id)
            row.first = row.first or result
    return [rows[n] for n in mutant_names], [rows[n] for n in correct_names]


def detection_verdict(mutant_rows: list[Detection], correct_rows: list[Detection],
                      every_mutant: bool = True) -> tuple[int, str]:
    """Exit code and one sentence naming every surviving mutant and every correct kernel that
    raised a false alarm; 5 when no case was judged at all.

    A mutant judged on no case (every row a skip: no case of its family was drawn) is a survivor
    when ``every_mutant`` (the run promised to judge each one: its home profile, or ``-m``);
    otherwise (``-c PROFILE``) it is named in the sentence without failing the run."""
    unjudged = [row.target for row in mutant_rows if not row.cases]
    survivors = [row.target for row in mutant_rows if row.cases and not row.flagged_cases]
    if every_mutant:
        survivors += [f"{name} (judged on no case)" for name in unjudged]
    false_alarms = [f"{row.target} ({len(row.flagged_cases)} cases)" for row in correct_rows if row.flagged_cases]
    problems = []
    if survivors:
        problems.append(f"{len(survivors)} mutants survived: {', '.join(survivors)}")
    if false_alarms:
        problems.append(f"false alarms on correct kernels: {', '.join(false_alarms)}")
    if problems:
        return 1, "; ".join(problems)
    if not any(row.cases for row in mutant_rows + correct_rows):
        return 5, "nothing was checked: no case was drawn"
    if every_mutant or not unjudged:
        return 0, f"every mutant caught ({len(mutant_rows)}), no false alarm"
    if len(unjudged) == len(mutant_rows):
        return 5, "nothing was checked: no mutant was judged on any case (no case of their families was drawn)"
    return 0, (f"every mutant judged caught ({len(mutant_rows) - len(unjudged)}), no false alarm; "
               f"{len(unjudged)} judged on no case, none of their family being drawn: {', '.join(unjudged)}")


@dataclass(frozen=True)
class DetectionRule:
    """The verdict of a detection run (``gradcheck-rnn mutants``), which the engine computes in
    place of a sweep's (:class:`~gradcheck_rnn.rows.store.VerdictRule`): every mutant flagged and
    no correct kernel (:func:`detection_verdict`), with results.json's detection rows beside it.
    ``every_mutant``, ``home_profiles`` and ``left_out``: see :func:`detection_verdict`,
    :func:`home_cases` and :func:`left_out`."""

    mutant_names: tuple[str, ...]
    correct_names: tuple[str, ...]
    every_mutant: bool = True
    home_profiles: tuple[dict[str, Any], ...] = ()
    left_out: tuple[dict[str, Any], ...] = ()

    def __call__(self, results: list[CaseResult], tally: Any, spec: Any) -> tuple[int, str, dict[str, Any]]:
        mutant_rows, correct_rows = summarise(results, list(self.mutant_names), list(self.correct_names), tally)
        extra: dict[str, Any] = {"mutants": [r.to_json() for r in mutant_rows],
                                 "false_alarms": [r.to_json() for r in correct_rows], "checks": list(spec.checks)}
        if self.home_profiles:
            extra["home_profiles"] = list(self.home_profiles)
        if self.left_out:
            extra["left_out"] = list(self.left_out)
        return (*detection_verdict(mutant_rows, correct_rows, self.every_mutant), extra)


def detection_lines(document: dict[str, Any]) -> tuple[Any, list[str]]:
    """The console's view of a detection run, from its results document alone (so that
    ``gradcheck-rnn report`` of a ``mutants`` run prints what the command printed): the
    "Mutants: caught/total" table and the first flagging repro command of each target."""
    from rich.table import Table
    from rich.text import Text

    mutants, correct = document.get("mutants") or [], document.get("false_alarms") or []
    caught = sum(1 for row in mutants if row.get("flagged"))
    drawn = document.get("home_profiles")  # the default run: each mutant on its home profile's cases
    where = (", ".join(f"{d['profile']} {d['cases']} (seed {d['seed']})" for d in drawn) if drawn
             else f"profile {document.get('profile')}, seed {document.get('seed')}")
    table = Table(title=f"Mutants: {caught}/{len(mutants)} caught on {document.get('cases')} cases ({where})",
                  title_justify="left")
    for column in ("target", "cases", "flagged", "first caught by"):
        table.add_column(column, no_wrap=column != "first caught by", overflow="fold")
    for row in mutants + correct:
        is_mutant = row in mutants
        flagged = int(row.get("flagged") or 0)
        style = ("green" if flagged else "bold red") if is_mutant else ("bold red" if flagged else "green")
        if is_mutant and not row.get("cases"):  # judged on no case: no case of its family was drawn
            style = "dim"
        label = row["target"] if is_mutant else f"{row['target']} (correct)"
        table.add_row(Text(label), str(row.get("cases")), Text(str(flagged), style=style),
                      Text(row.get("caught_by") or "-"))
    lines = ["First flagging case of each target (repro command):"]
    lines += [f"  {row['repro']}" for row in mutants + correct if row.get("repro")]
    return table, lines + left_out_lines(document.get("left_out") or [])


def left_out_lines(groups: list[dict[str, Any]]) -> list[str]:
    """The console's lines of :func:`left_out`'s groups, at most 80 columns but for a command."""
    from ..reports.console import wrapped

    lines = [f"Left out: {sum(len(group['mutants']) for group in groups)} mutants, judged only when named "
             f"(-m):"] if groups else []
    for group in groups:
        lines += wrapped(f"{', '.join(group['mutants'])}: {group['why']}; e.g.", indent="  ", hanging="    ")
        lines.append(f"    {group['run']}")  # a command is never broken
    return lines
