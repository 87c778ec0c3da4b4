"""The run spec: one frozen object that says what a run is, built once by the CLI.

A run is its profile (name and content hash), sweep seed, number of cases, targets, tolerance
overrides, enabled checks, draw narrowing and shard, or, instead of the draw, a list of case ids
(``check``, ``repro``, ``shrink``, ``gr.check``: one case is a run of one). Case ``i`` of a run is
``draw_case(profile, seed, i)`` (or ``Case.from_id(case_ids[i])``) whichever process, worker or
machine judges it, so every executor (process pool, Dask, in-process) and ``gradcheck-rnn merge``
work from this object alone, and results.json records it under ``"spec"``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any, Iterator

from ..model.case import Case, CaseRef
from ..errors import UsageError
from ..model.narrowing import NO_NARROWING, SHAPE_KNOBS, Narrowing

Job = tuple[int, "Case | CaseRef"]  # (sweep index, the case, or its id, config and wants group)

# top-level keys of a spec written before the narrowing held the shape of the draw too
SHAPE_FIELDS = tuple(knob.field for knob in SHAPE_KNOBS)
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"2/3"`` -> ``(2, 3)``: the second of three parts; None stays None (no sharding)."""
    if text is None:
        return None
    match = _SHARD.match(text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UsageError(f"--shard {text!r} is not allowed; give K/N with 1 <= K <= N, e.g. --shard 2/3")
    return int(match.group(1)), int(match.group(2))


def shard_indices(cases: int, shard: tuple[int, int] | None) -> range:
    """The sweep indices of shard k/n of ``cases`` cases: every case, or every n-th from k-1.

    Interleaving (not contiguous blocks) gives each shard the same mix of modes and sizes, so
    shards of one CI matrix take about as long as each other.
    """
    k, n = shard or (1, 1)
    return range(k - 1, cases, n)


@dataclass(frozen=True)
class Selection:
    """Which cases a run judges: ``cases`` drawn from the profile with ``seed`` (None: the
    profile's), narrowed by ``narrowing``, or the named ``case_ids`` instead of a draw; of those,
    the ``shard`` (k, n), and of their rows only the ``only`` ones when given (``--last-failed``)."""

    cases: int | None = None
    seed: int | None = None
    narrowing: Narrowing = NO_NARROWING
    shard: tuple[int, int] | None = None
    case_ids: tuple[str, ...] = ()
    only: tuple[tuple[str, str, str], ...] = ()  # (case id, target, check) of every row judged
    rerun_of: str = ""  # the run folder whose rows that did not pass these are (sweep --last-failed)


@dataclass(frozen=True)
class Judging:
    """How a run judges: its checks (None: the profile's) and the ``--rtol``/``--atol`` overrides."""

    checks: tuple[str, ...] | None = None
    rtol: float | None = None
    atol: float | None = None
    strict_contracts: bool | None = None  # --strict-contracts; None: the profile's [checks] strict_contracts


@dataclass(frozen=True)
class RunSpec:
    """What a run judges. Two runs with equal specs judge the same rows; shards differ only in ``shard``."""

    profile: str  # the profile's name (file stem)
    profile_sha256: str  # of the profile file's bytes: the same name with other content is another run
    config: str | None  # the --config value as given (None: ci), for reloading and for repro lines
    seed: int
    cases: int  # cases of the whole run; a shard judges its part of range(cases)
    targets: tuple[str, ...]  # resolved names, in judging order
    named_targets: tuple[str, ...] = ()  # those named on the command line (exit 5 when one judged nothing)
    checks: tuple[str, ...] = ("reference",)
    rtol: float | None = None
    atol: float | None = None
    narrowing: Narrowing = NO_NARROWING  # modes, layers, projections, sizes, … (gradcheck_rnn/model/narrowing.py)
    shard: tuple[int, int] | None = None  # (k, n), 1 <= k <= n
    case_ids: tuple[str, ...] = ()  # the cases, named, instead of a draw from the profile
    families: tuple[str, ...] = ()  # user families (--family package.module:NAME) every process loads first
    # (case id, target, check) of every row judged, when not every case × target × check is
    # (sweep --last-failed judges exactly the rows that did not pass): other rows are dropped
    only: tuple[tuple[str, str, str], ...] = ()
    # (dtype, kind, rtol, atol): the tolerance table the run judges by (Tolerances.rows), overrides
    # applied; a stored ratio means something only beside it. Empty in runs written before it.
    tolerance_table: tuple[tuple[str, str, float, float], ...] = ()
    # the name of the run folder whose rows that did not pass this run judges again (sweep --last-failed)
    rerun_of: str = ""
    # out-of-contract rows fail the run (--strict-contracts, or the profile's [checks] strict_contracts)
    strict_contracts: bool = False

    @classmethod
    def build(cls, config: str | None = None, targets: tuple[Any, ...] = (), selection: Selection = Selection(),
              judging: Judging = Judging(), families: tuple[str, ...] = (),
              profile: Any = None) -> tuple["RunSpec", list]:
        """The spec of a run, and its targets resolved: ``config`` names the profile (None: ci),
        which fills what ``selection`` and ``judging`` leave out; ``targets`` are names or objects
        (none: the default targets); ``families`` are the user families every process loads first.

        Validates everything a run needs before it starts (profile, narrowing, tolerances, target
        names, case ids), raising UsageError with one sentence. The resolved targets come back so
        that a caller who judges in this process does not resolve them again; ``profile`` is the
        profile already loaded from ``config``, so that a command reads its file once.
        """
        from ..families import load_all
        from ..judging.checks import enabled
        from ..model.profiles import load_profile
        from ..targets import default_targets, resolve_targets

        load_all(families)  # before anything reads a mode token of theirs (profile, case ids)
        profile = profile or load_profile(config)
        tolerance_table = profile.tolerance_table(judging.rtol, judging.atol).rows()  # validates the overrides first
        profile_checks = enabled(profile.checks, profile.source)  # validated even where judging names the checks
        case_ids = tuple(CaseRef.from_id(case_id).id for case_id in selection.case_ids)  # checked, in normal form
        resolved = resolve_targets(targets) if targets else default_targets()
        cases = selection.cases if selection.cases is not None else profile.cases
        spec = cls(profile=profile.name, profile_sha256=profile.sha256, config=config,
                   seed=profile.seed if selection.seed is None else selection.seed,
                   cases=len(case_ids) if case_ids else cases, targets=tuple(t.name for t in resolved),
                   named_targets=tuple(dict.fromkeys(t.name for t in resolved)) if targets else (),
                   checks=tuple(judging.checks or profile_checks), rtol=judging.rtol, atol=judging.atol,
                   narrowing=selection.narrowing, shard=selection.shard, case_ids=case_ids,
                   families=tuple(families), only=tuple(selection.only), tolerance_table=tolerance_table,
                   rerun_of=selection.rerun_of,
                   strict_contracts=profile.strict_contracts if judging.strict_contracts is None
                   else judging.strict_contracts)
        spec.__dict__["profile_data"] = spec.narrow(profile)
        return spec, resolved

    @staticmethod
    def count_cases(config: str | None = None, cases: int | None = None,
                    shard: tuple[int, int] | None = None, profile: Any = None) -> int:
        """How many cases :meth:`build` with these values will judge, from the profile alone (no
        target is imported): enough to choose the worker count before the slow part of the set-up."""
        from ..model.profiles import load_profile

        return len(shard_indices((profile or load_profile(config)).cases if cases is None else cases, shard))

    # ------------------------------------------------------------------ what the spec derives

    @functools.cached_property
    def profile_data(self):
        """The profile, narrowed as the command line asked; loaded once per spec object."""
        return self.load_profile()

    def load_profile(self):
        """The profile read from its file, narrowed; UsageError if the file changed since the spec was made."""
        from ..model.profiles import load_profile

        profile = load_profile(self.config)
        if profile.sha256 != self.profile_sha256:
            raise UsageError(f"profile {self.profile!r} has changed since this run was specified "
                             f"(sha256 {profile.sha256[:12]} instead of {self.profile_sha256[:12]}); run it again")
        return self.narrow(profile)

    def narrow(self, profile):
        """``profile`` with the run's draw narrowing applied (UsageError when it leaves nothing to draw)."""
        if self.case_ids:  # named cases draw nothing
            return profile
        return self.narrowing.apply(profile)

    def tolerances(self):
        """The profile's tolerance table with the --rtol/--atol overrides."""
        return self.profile_data.tolerance_table(self.rtol, self.atol)

    def resolve_targets(self):
        """The targets, resolved by name (each process that judges resolves them itself)."""
        from ..targets import resolve_target

        return [resolve_target(name) for name in self.targets]

    @property
    def indices(self) -> range:
        """The sweep indices this run judges (:func:`shard_indices`)."""
        return shard_indices(self.cases, self.shard)

    def draw(self) -> Iterator[tuple[int, Case]]:
        """``(index, case)`` for every case this run judges, in index order."""
        return self.jobs(full=True)

    def lazy_jobs(self, full: bool = False) -> "LazyJobs":
        """:meth:`jobs` as a sized collection that draws its cases only while it is iterated."""
        return LazyJobs(self, full)

    def jobs(self, full: bool = False) -> Iterator[Job]:
        """``(index, case)`` for every case this run judges, in index order: each case whole
        (``full``) or as a :class:`CaseRef` (its id, config and wants group, no arrays drawn)."""
        from ..model.profiles import draw_case, draw_case_ref

        for index in self.indices:
            if self.case_ids:
                case_id = self.case_ids[index]
                yield index, Case.from_id(case_id) if full else CaseRef.from_id(case_id)
            elif full:
                yield index, draw_case(self.profile_data, self.seed, index)
            else:
                yield index, draw_case_ref(self.profile_data, self.seed, index)

    @property
    def repro_options(self) -> str:
        """What a repro command needs to judge like this run: ``--config nightly --rtol 0.01``."""
        from ..rows.result import repro_options

        return repro_options(self.config, self.rtol, self.atol, self.families)

    @property
    def rows(self) -> int:
        """How many rows the run judges: every case × target × check, or the chosen ones."""
        return len(self.only) if self.only else len(self.indices) * len(self.targets) * len(self.checks)

    def row_keys(self) -> Iterator[tuple[str, str, str]]:
        """``(case id, target, check)`` of every row this run judges, in judging order; each case
        named without drawing its arrays."""
        if self.only:
            yield from self.only
            return
        for _, ref in self.jobs():
            for target in self.targets:
                for check in self.checks:
                    yield ref.id, target, check

    def judges(self, case_id: str, target: str, check: str) -> bool:
        """Whether the row of this case, target and check is one this run judges (always, unless
        rows were chosen)."""
        return not self.only or (case_id, target, check) in self._chosen

    @functools.cached_property
    def _chosen(self) -> frozenset[tuple[str, str, str]]:
        return frozenset(self.only)

    def unsharded(self) -> "RunSpec":
        """The spec of the whole run this shard is part of."""
        return dataclasses.replace(self, shard=None)

    # ------------------------------------------------------------------ results.json

    def to_json(self) -> dict[str, Any]:
        """The ``"spec"`` object of results.json (the shard as ``"k/n"`` or null)."""
        data = dataclasses.asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = [list(v) if isinstance(v, tuple) else v for v in value]
        data["shard"] = None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}"
        data["narrowing"] = self.narrowing.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "results.json") -> "RunSpec":
        """Inverse of :meth:`to_json`; UsageError naming ``where`` when it is not a run spec."""
        names = {f.name for f in dataclasses.fields(cls)}
        if isinstance(data, dict):
            # runs written before named cases, user families, narrowing, chosen rows, the tolerance
            # table, reruns and strict contracts
            data = {"case_ids": [], "families": [], "narrowing": None, "only": [], "tolerance_table": [],
                    "rerun_of": "", "strict_contracts": False, **data}
            if set(SHAPE_FIELDS) <= set(data):  # written before the narrowing held the shape: fold it in
                shape = {name: data.pop(name) for name in SHAPE_FIELDS}
                data["narrowing"] = {**shape, **(data["narrowing"] or {})}
        if not isinstance(data, dict) or set(data) != names:
            raise UsageError(f"{where} holds no run spec of this version; it was not written by "
                             f"gradcheck-rnn sweep, or by another version")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        values["shard"] = parse_shard(data["shard"])
        values["narrowing"] = Narrowing.from_json(data["narrowing"])
        values["only"] = tuple(tuple(row) for row in data["only"])
        values["tolerance_table"] = tuple(tuple(row) for row in data["tolerance_table"])
        return cls(**values)

    def differences(self, other: "RunSpec") -> list[str]:
        """The fields (shard aside) in which two specs differ, as ``seed (3 vs 4)``."""
        return [f"{f.name} ({getattr(self, f.name)!r} vs {getattr(other, f.name)!r})"
                for f in dataclasses.fields(self) if f.name != "shard" and getattr(self, f.name) != getattr(other, f.name)]

    def draw_json(self) -> dict[str, Any]:
        """The ``"draw"`` object of results.json: how the run narrowed the profile's draw."""
        return self.narrowing.to_json()

    def meta(self, command: str) -> dict[str, Any]:
        """The top-level keys of results.json that describe the run, ``"spec"`` among them."""
        rerun = {"rerun_of": self.rerun_of} if self.rerun_of else {}
        return {"command": command, **rerun, "profile": self.profile, "seed": self.seed, "cases": self.cases,
                "targets": list(self.targets), "rtol": self.rtol, "atol": self.atol, "draw": self.draw_json(),
                "spec": self.to_json()}


@dataclass(frozen=True)
class LazyJobs:
    """A run's jobs (:meth:`RunSpec.jobs`), drawn one at a time while iterated, with their count:
    an executor that streams them (Dask) never holds a reference per case of a large run."""

    spec: RunSpec
    full: bool = False

    def __len__(self) -> int:
        return len(self.spec.indices)

    def __iter__(self) -> Iterator[Job]:
        return self.spec.jobs(self.full)
