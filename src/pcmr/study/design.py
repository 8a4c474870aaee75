"""The parts of a study file fixed before its runs that decide how claims are judged.

- ``gate: {min_skill: 0.3}``: every model a claim reads must rank better than the query-blind list
  by this skill, ``(R-P - QB) / (100 - QB)``, in each direction the claim reads (``pcmr.study.claims``).
- ``untrained_null: {inits: 200, same_as: {recipe: other}}``: per distinct head configuration, this many
  untrained initialisations evaluated on the test split; claims with ``vs_null: true`` test the trained
  seeds against them. ``same_as`` lets a recipe read another's null where the two untrained models differ
  by nothing the statistics see (e.g. only a constant shift of log det, which moves no rank and no slope),
  so that null is drawn once.
- ``drift: {recipes, variant, seeds, threads}``: these runs are trained again under a second thread
  count; each claim whose both sides they hold gets the drift of its own contrast ``a - b``, and an
  effect smaller than it reads ``equal`` (``pcmr.study.claims``).
- ``power: {power: 0.8, max_seeds: 10}``: every claim states its minimum effect (or margin), the pilot's
  sd of its per-seed differences and the seeds these need at this power (``pcmr.study.power``); a claim
  that would need more than ``max_seeds`` is removed with that reason.
- ``primary: [claim ids]``: the pre-registered family (at most :data:`MAX_PRIMARY`) Holm's correction
  runs over; every other claim is secondary and read uncorrected.
- ``removed: [{id, reason}]``: claims the data cannot test, kept in the file with the reason.
- ``distinct_test_split: true``: the study refuses a test split that repeats a caption text or holds an
  item relevant to the whole other side (``pcmr.study.backend.split_faults``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pcmr.config import ConfigError, build_dataclass

__all__ = ["DriftSpec", "GateSpec", "MAX_PRIMARY", "NullSpec", "PowerSpec", "RemovedClaim", "StudyDesign",
           "parse_design"]

#: the most claims a pre-registered primary family may hold
MAX_PRIMARY = 10
#: the fewest untrained initialisations a null may be built from
MIN_NULL_INITS = 2


@dataclass(frozen=True)
class GateSpec:
    """``gate``: the skill every model a claim reads must reach in each direction the claim reads."""

    min_skill: float = 0.3


@dataclass(frozen=True)
class NullSpec:
    """``untrained_null``: untrained initialisations per recipe (head configuration), drawn from seeds
    ``first_seed .. first_seed + inits - 1`` (torch is seeded with ``pcmr.train.trainer.torch_seed`` of
    each, as a training run is with its own seed; the default start keeps clear of the study's seeds)."""

    inits: int = 200
    first_seed: int = 100_000
    same_as: dict[str, str] | None = None  # recipe -> the recipe whose null it reads (drawn once)

    def source(self, recipe: str) -> str:
        """The recipe whose null ``recipe`` reads."""
        return (self.same_as or {}).get(recipe, recipe)


@dataclass(frozen=True)
class DriftSpec:
    """``drift``: the runs ``<recipe>-<variant>-s<seed>`` of each of ``recipes`` trained again with
    ``threads`` torch threads."""

    recipes: tuple[str, ...] = ()
    variant: str = ""
    seeds: tuple[int, ...] = ()
    threads: int = 2

    @property
    def recipe(self) -> str:
        """The first drift recipe."""
        return self.recipes[0] if self.recipes else ""


@dataclass(frozen=True)
class PowerSpec:
    """``power``: the power every claim's seeds are sized for, and the most seeds the study affords."""

    power: float = 0.8
    max_seeds: int = 10


@dataclass(frozen=True)
class RemovedClaim:
    """A claim the data cannot test, and why; ``paper`` names the paper it is from, as a claim's ``paper``
    field does (``by_paper.md`` lists it under that paper as not judged)."""

    id: str = ""
    reason: str = ""
    paper: str = ""


@dataclass(frozen=True)
class StudyDesign:
    """Every design section of a study file (each None / empty when absent)."""

    gate: GateSpec | None = None
    null: NullSpec | None = None
    drift: DriftSpec | None = None
    primary: tuple[str, ...] | None = None
    removed: tuple[RemovedClaim, ...] = ()
    distinct_test_split: bool = False
    power: PowerSpec | None = None


@dataclass
class _DriftFields:
    recipe: str = ""
    recipes: list[str] | None = None
    variant: str = ""
    seeds: list[int] | None = None
    threads: int = 2


def _build(cls: type, raw: Any, where: str, section: str) -> Any:
    try:
        return build_dataclass(cls, raw, where=section, label="study file")
    except ConfigError as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_design(raw: dict[str, Any], where: str, claim_ids: tuple[str, ...], recipes: dict[str, tuple[str, ...]],
                 seeds: tuple[int, ...], null_claims: tuple[str, ...]) -> StudyDesign:
    """The design sections of a study file's mapping ``raw`` (keys ``gate``, ``null``, ``drift``,
    ``primary``, ``removed``, ``distinct_test_split``), checked against the study's claims, recipes
    (label -> variants) and seeds; ``null_claims``: ids of the claims with ``vs_null: true``."""
    gate = None
    if raw.get("gate") is not None:
        gate = _build(GateSpec, raw["gate"], where, "gate")
        if not -math.inf < gate.min_skill <= 1.0:
            raise ValueError(f"{where}: gate.min_skill: expected a number <= 1, got {gate.min_skill!r}")
    null = None
    if raw.get("untrained_null") is not None:
        null = _build(NullSpec, raw["untrained_null"], where, "untrained_null")
        if null.inits < MIN_NULL_INITS:
            raise ValueError(f"{where}: untrained_null.inits: expected at least {MIN_NULL_INITS} initialisations, "
                             f"got {null.inits!r}")
        for recipe, source in (null.same_as or {}).items():
            if recipe not in recipes or source not in recipes or recipe == source:
                raise ValueError(f"{where}: untrained_null.same_as: expected recipe: other recipe of the study "
                                 f"({', '.join(recipes)}), got {recipe!r}: {source!r}")
        shared = [s for s in seeds if null.first_seed <= s < null.first_seed + null.inits]
        if shared:
            raise ValueError(f"{where}: untrained_null.first_seed: the initialisations "
                             f"{null.first_seed}..{null.first_seed + null.inits - 1} include the study's seeds "
                             f"{shared}; the null must not hold the trained runs' own starts")
    if null_claims and null is None:
        raise ValueError(f"{where}: claims {', '.join(null_claims)} read the null of untrained models; add an "
                         "'untrained_null: {inits: N}' section")
    drift = None
    if raw.get("drift") is not None:
        fields = _build(_DriftFields, raw["drift"], where, "drift")
        if bool(fields.recipe) == bool(fields.recipes):
            raise ValueError(f"{where}: drift: expected either recipe: NAME or recipes: [NAMES]")
        drifted = tuple(fields.recipes or [fields.recipe])
        for recipe in drifted:
            if recipe not in recipes:
                raise ValueError(f"{where}: drift.recipes: {recipe!r} is not in the study's recipes "
                                 f"({', '.join(recipes)})")
            if fields.variant not in recipes[recipe]:
                raise ValueError(f"{where}: drift.variant: recipe {recipe!r} runs "
                                 f"{', '.join(recipes[recipe])}, not {fields.variant!r}")
        chosen = tuple(fields.seeds or ())
        if not chosen or any(s not in seeds for s in chosen) or len(set(chosen)) != len(chosen):
            raise ValueError(f"{where}: drift.seeds: expected distinct seeds of the study {list(seeds)}, "
                             f"got {fields.seeds!r}")
        if isinstance(fields.threads, bool) or fields.threads < 1:
            raise ValueError(f"{where}: drift.threads: expected a positive integer, got {fields.threads!r}")
        drift = DriftSpec(drifted, fields.variant, chosen, int(fields.threads))
    primary = None
    if raw.get("primary") is not None:
        listed = raw["primary"]
        if not isinstance(listed, list) or not listed or len(set(listed)) != len(listed):
            raise ValueError(f"{where}: primary: expected a list of distinct claim ids, got {listed!r}")
        if len(listed) > MAX_PRIMARY:
            raise ValueError(f"{where}: primary: at most {MAX_PRIMARY} primary claims, got {len(listed)}")
        unknown = [c for c in listed if c not in claim_ids]
        if unknown:
            raise ValueError(f"{where}: primary: {', '.join(map(str, unknown))} not among the claims")
        primary = tuple(str(c) for c in listed)
    removed = []
    for i, item in enumerate(raw.get("removed") or ()):
        entry = _build(RemovedClaim, item, where, f"removed[{i}]")
        if not entry.id or not entry.reason:
            raise ValueError(f"{where}: removed[{i}]: expected an id and the reason the data cannot test it")
        if entry.id in claim_ids:
            raise ValueError(f"{where}: removed[{i}]: {entry.id!r} is still among the claims")
        removed.append(entry)
    distinct = raw.get("distinct_test_split", False)
    if not isinstance(distinct, bool):
        raise ValueError(f"{where}: distinct_test_split: expected true or false, got {distinct!r}")
    power = None
    if raw.get("power") is not None:
        power = _build(PowerSpec, raw["power"], where, "power")
        if not 0.0 < power.power < 1.0 or isinstance(power.max_seeds, bool) or power.max_seeds < 2:
            raise ValueError(f"{where}: power: expected 0 < power < 1 and max_seeds >= 2, got {raw['power']!r}")
    return StudyDesign(gate, null, drift, primary, tuple(removed), distinct, power)
