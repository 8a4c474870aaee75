"""A study file (YAML) and the grid of runs it describes.

A study is recipes x named variants x seeds; each run trains one recipe with the study's
overrides, the recipe entry's, the variant's and its seed, then evaluates it. See
``docs/study.md`` for the format; ``pcmr study FILE --list`` prints the numbered runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from pcmr.config import ConfigError, build_dataclass, yaml_error_text
from pcmr.evaluation.columns import HS_SUM, RSUM, r_precision, recall
from pcmr.relevance import I2T, RELEVANCE_MODES, T2I
from pcmr.study.benchmark import BenchmarkCheck, parse_benchmark
from pcmr.study.claims import Claim, parse_claims
from pcmr.study.design import StudyDesign, parse_design
from pcmr.study.power import check_power
from pcmr.suggest import unknown_name

__all__ = ["AnalysisOptions", "RecipeEntry", "StudyError", "StudyRun", "StudySpec", "find_study", "list_studies",
           "load_study", "parse_study", "select_recipes", "shipped_study_dir"]

DEFAULT_SUMMARY_METRICS = (RSUM, recall(I2T, 1), recall(T2I, 1), r_precision(I2T), r_precision(T2I), HS_SUM)
_LABEL = re.compile(r"^[A-Za-z0-9_.+]+$")


class StudyError(ValueError):
    """A study file is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class AnalysisOptions:
    """Which per-run analysis scalars to record (see ``docs/study.md``)."""

    deciles: bool = True  # R@1 of the least / most uncertain decile of queries
    corruption: bool = True  # uncertainty slope against occlusion / word erasure
    relevant_count: bool = True  # rank correlation of uncertainty with the number of relevant items
    binary_selection: bool = True  # binary selection accuracies (shapes data only)
    signal: bool = True  # the trained-signal gate of the uncertainty heads (pcmr.metrics.signal)
    max_items: int = 256  # items of the test split used by the corruption series


@dataclass
class _RecipeFields:
    """The keys of one entry of a study file's ``recipes`` (read by ``pcmr.config.build_dataclass``)."""

    recipe: str | None = None
    similarities: list[str] | None = None
    rerankers: list[str] | None = None
    variants: list[str] | None = None
    set: dict[str, Any] | None = None
    headline: str | None = None
    seeds: list[int] | None = None


@dataclass
class _StudyFields:
    """The top-level keys of a study file (read by ``pcmr.config.build_dataclass``)."""

    seeds: list[int] = field(default_factory=list)
    recipes: dict[str, Any] = field(default_factory=dict)
    name: str = "study"
    description: str = ""
    seed_key: str = "train.seed"
    set: dict[str, Any] | None = None
    variants: dict[str, Any] | None = None
    default_variants: list[str] | None = None
    relevance: list[str] = field(default_factory=lambda: list(RELEVANCE_MODES))
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    summary_metrics: list[str] = field(default_factory=lambda: list(DEFAULT_SUMMARY_METRICS))
    level: float = 0.95
    claims: list[Any] | None = None
    benchmark: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    untrained_null: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    primary: list[Any] | None = None
    removed: list[Any] | None = None
    distinct_test_split: bool = False
    power: dict[str, Any] | None = None


@dataclass(frozen=True)
class RecipeEntry:
    """One recipe of the grid: ``label`` names it in results, ``recipe`` is what ``pcmr train`` takes."""

    label: str
    recipe: str
    similarities: tuple[str, ...] | None  # None: the recipe's eval.similarities
    rerankers: tuple[str, ...] | None  # None: the recipe's eval.rerankers
    variants: tuple[str, ...]
    overrides: dict[str, Any]
    headline: str | None = None  # the similarity of recipes.md / recipes.png (None: the first evaluated)
    seeds: tuple[int, ...] | None = None  # a subset of the study's seeds (None: all of them)


@dataclass(frozen=True)
class StudyRun:
    """One cell of the grid: train ``recipe`` with ``overrides`` and evaluate it."""

    index: int
    name: str  # run folder name: <label>-<variant>-s<seed>
    label: str
    recipe: str
    variant: str
    seed: int
    overrides: dict[str, Any]  # dotted key -> value, applied in this order
    similarities: tuple[str, ...] | None
    rerankers: tuple[str, ...] | None


@dataclass
class StudySpec:
    """A parsed study file."""

    name: str
    seeds: tuple[int, ...]
    recipes: tuple[RecipeEntry, ...]
    variants: dict[str, dict[str, Any]]
    overrides: dict[str, Any] = field(default_factory=dict)
    seed_key: str = "train.seed"
    relevance: tuple[str, ...] = RELEVANCE_MODES
    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    summary_metrics: tuple[str, ...] = DEFAULT_SUMMARY_METRICS
    level: float = 0.95
    claims: tuple[Claim, ...] = ()
    description: str = ""
    source: Path | None = None
    default_variants: tuple[str, ...] = ()  # the variants of a recipe that lists none
    benchmark: BenchmarkCheck | None = None  # checked before any claim is judged (pcmr.study.benchmark)
    part: tuple[str, ...] = ()  # the recipes a part of the study keeps (select_recipes); () = the whole study
    design: StudyDesign = field(default_factory=StudyDesign)  # gate, null, drift, primary family (design.py)

    def runs(self) -> list[StudyRun]:
        """The numbered runs: recipes in file order, then variants, then seeds (the recipe's own
        ``seeds`` where it lists them, else the study's)."""
        out: list[StudyRun] = []
        for entry in self.recipes:
            for variant in entry.variants:
                for seed in entry.seeds if entry.seeds is not None else self.seeds:
                    overrides = {"train.progress": False, **self.overrides, **entry.overrides,
                                 **self.variants[variant], self.seed_key: seed}
                    out.append(StudyRun(len(out), f"{entry.label}-{variant}-s{seed}", entry.label, entry.recipe,
                                        variant, seed, overrides, entry.similarities, entry.rerankers))
        return out


def _fail(where: str, message: str) -> StudyError:
    return StudyError(f"{where}: {message}")


def _build(cls: type, raw: Any, where: str, section: str = "") -> Any:
    """``build_dataclass(cls, raw)`` for the study file ``where`` (``section``: the dotted key of
    ``raw`` in it), its error (unknown key, wrong type) raised as a :class:`StudyError`."""
    try:
        return build_dataclass(cls, raw, where=section, label="study file")
    except ConfigError as exc:
        raise StudyError(f"{where}: {exc}") from None


def _names(value: list[str] | None, where: str) -> tuple[str, ...]:
    if not value or not all(value):
        raise _fail(where, f"expected a non-empty list of names, got {value!r}")
    return tuple(value)


def _overrides(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise _fail(where, f"expected a mapping of dotted config keys to values (e.g. train.epochs: 3), got {value!r}")
    return dict(value)


def _label(value: str, where: str) -> str:
    if not _LABEL.match(value):
        raise _fail(where, f"name {value!r} may only use letters, digits, '_', '.' and '+'")
    return value


def _recipe_entry(label: Any, raw: Any, variants: dict[str, dict[str, Any]], default: tuple[str, ...],
                  file: str, study_seeds: tuple[int, ...] = ()) -> RecipeEntry:
    where = f"{file}: recipes.{label}"
    label = _label(str(label), where)
    fields = _build(_RecipeFields, raw, file, f"recipes.{label}")
    chosen = _names(fields.variants, f"{where}.variants") if fields.variants is not None else default
    missing = [v for v in chosen if v not in variants]
    if missing:
        raise _fail(f"{where}.variants", unknown_name("variant", missing, variants))
    recipe = fields.recipe if fields.recipe is not None else label
    if not recipe:
        raise _fail(f"{where}.recipe", f"expected a recipe name or YAML path, got {recipe!r}")
    sims = _names(fields.similarities, f"{where}.similarities") if fields.similarities is not None else None
    reranks = _names(fields.rerankers, f"{where}.rerankers") if fields.rerankers is not None else None
    headline = fields.headline
    if headline is not None and sims is not None and headline not in sims:
        raise _fail(f"{where}.headline", f"expected one of the recipe's similarities {list(sims)}, got {headline!r}")
    seeds = None
    if fields.seeds is not None:
        seeds = tuple(fields.seeds)
        if not seeds or len(set(seeds)) != len(seeds) or not set(seeds) <= set(study_seeds):
            raise _fail(f"{where}.seeds", f"expected distinct seeds of the study {list(study_seeds)}, "
                                          f"got {fields.seeds!r}")
    return RecipeEntry(label, recipe, sims, reranks, chosen, _overrides(fields.set, f"{where}.set"), headline,
                       seeds)


def _analysis_mapping(raw: Any) -> Any:
    """``analysis: true`` / nothing: every analysis; ``false``: none; otherwise the mapping as given."""
    if raw is None or raw is True:
        return {}
    if raw is False:
        return {"deciles": False, "corruption": False, "relevant_count": False, "binary_selection": False}
    return raw


def parse_study(raw: Any, where: str = "study") -> StudySpec:
    """Build a :class:`StudySpec` from the mapping of a study file (``where`` names it in errors).

    Unknown keys and values of the wrong type are reported by ``pcmr.config.build_dataclass`` (the
    one configuration engine), with ``where`` in front."""
    if not isinstance(raw, dict):
        raise _fail(where, "a study file must hold a mapping with keys seeds, recipes, variants, ...")
    fields = _build(_StudyFields, {**raw, "analysis": _analysis_mapping(raw.get("analysis"))}, where)
    name = _label(str(fields.name), f"{where}: name")
    seeds = fields.seeds
    if not seeds or len(set(seeds)) != len(seeds):
        raise _fail(f"{where}: seeds", f"expected a list of distinct integers, got {raw.get('seeds')!r}")
    variants = {_label(str(k), f"{where}: variants"): _overrides(v, f"{where}: variants.{k}")
                for k, v in (fields.variants or {"base": {}}).items()}
    default = _names(fields.default_variants, f"{where}: default_variants") if fields.default_variants is not None \
        else tuple(variants)
    undefined = [v for v in default if v not in variants]
    if undefined:
        raise _fail(f"{where}: default_variants", unknown_name("variant", undefined, variants))
    if not fields.recipes:
        raise _fail(f"{where}: recipes", f"expected a mapping of recipe names to options, got {raw.get('recipes')!r}")
    recipes = tuple(_recipe_entry(k, v, variants, default, where, tuple(seeds)) for k, v in fields.recipes.items())
    relevance = _names(fields.relevance, f"{where}: relevance")
    bad = [r for r in relevance if r not in RELEVANCE_MODES]
    if bad:
        raise _fail(f"{where}: relevance", unknown_name("mode", bad, RELEVANCE_MODES))
    level = fields.level
    if not 0 < level < 1 or math.isnan(level):
        raise _fail(f"{where}: level", f"expected a confidence level between 0 and 1, got {level!r}")
    if "." not in fields.seed_key:
        raise _fail(f"{where}: seed_key", f"expected a dotted config key such as train.seed, got {fields.seed_key!r}")
    summary = _names(fields.summary_metrics, f"{where}: summary_metrics")
    spec = StudySpec(name=name, seeds=tuple(seeds), recipes=recipes, variants=variants,
                     overrides=_overrides(fields.set, f"{where}: set"), seed_key=fields.seed_key,
                     relevance=relevance, analysis=fields.analysis, summary_metrics=summary, level=float(level),
                     claims=parse_claims(fields.claims, f"{where}: claims"), description=fields.description,
                     default_variants=tuple(default))
    try:
        spec.benchmark = parse_benchmark(fields.benchmark, f"{where}: benchmark")
    except ValueError as err:
        raise StudyError(str(err)) from None
    labels = [e.label for e in recipes]
    try:
        spec.design = parse_design(raw, where, tuple(c.id for c in spec.claims),
                                   {e.label: e.variants for e in recipes}, spec.seeds,
                                   tuple(c.id for c in spec.claims if c.null))
    except ValueError as err:
        raise StudyError(str(err)) from None
    try:
        check_power(spec.claims, spec.level, spec.design,
                    {e.label: len(e.seeds if e.seeds is not None else spec.seeds) for e in recipes}, where)
    except ValueError as err:
        raise StudyError(str(err)) from None
    if spec.benchmark is not None:
        _check_benchmark_rows(spec.benchmark, spec, labels, where)
    for claim in spec.claims:
        for side in (claim.a, claim.b):
            if side is None:
                continue
            if side.recipe is not None and side.recipe not in labels:
                raise _fail(f"{where}: claims.{claim.id}", f"recipe {side.recipe!r} is not in the study's recipes "
                                                           f"({', '.join(labels)})")
            if side.variant is not None and side.variant not in variants:
                raise _fail(f"{where}: claims.{claim.id}", f"variant {side.variant!r} is not defined "
                                                           f"({', '.join(variants)})")
            if side.relevance is not None and side.relevance not in relevance:
                raise _fail(f"{where}: claims.{claim.id}", f"relevance {side.relevance!r} is not evaluated "
                                                           f"({', '.join(relevance)})")
    return spec


def _check_benchmark_rows(check: BenchmarkCheck, spec: StudySpec, labels: list[str], where: str) -> None:
    """The baseline of the benchmark check must be a recipe, variant and relevance mode the study runs."""
    if check.recipe not in labels:
        raise _fail(f"{where}: benchmark.recipe", f"recipe {check.recipe!r} is not in the study's recipes "
                                                  f"({', '.join(labels)})")
    entry = next(e for e in spec.recipes if e.label == check.recipe)
    if check.variant is not None and check.variant not in entry.variants:
        raise _fail(f"{where}: benchmark.variant", f"recipe {check.recipe!r} runs the variants "
                                                   f"{', '.join(entry.variants)}, not {check.variant!r}")
    if check.relevance not in spec.relevance:
        raise _fail(f"{where}: benchmark.relevance", f"relevance {check.relevance!r} is not evaluated "
                                                     f"({', '.join(spec.relevance)})")


def load_study(path: str | Path) -> StudySpec:
    """Read and check a study YAML file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"study file not found: {path}") from None
    except yaml.YAMLError as err:
        raise StudyError(f"{path} is not valid YAML {yaml_error_text(err)}") from None
    spec = parse_study(raw, where=str(path))
    spec.source = path.resolve()
    return spec


def select_recipes(spec: StudySpec, labels: list[str] | tuple[str, ...]) -> StudySpec:
    """The part of ``spec`` that trains only the recipes ``labels`` (``pcmr study --recipes``).

    Run names stay those of the whole study (``<recipe>-<variant>-s<seed>``), so a part's finished runs
    count for the whole study in the same ``--out`` folder. Claims that read a recipe outside the part
    are left out, and the benchmark check is kept only when its baseline recipe is in the part.
    """
    known = [entry.label for entry in spec.recipes]
    unknown = [label for label in labels if label not in known]
    if unknown:
        raise StudyError(f"--recipes: {', '.join(map(repr, unknown))} not in the study's recipes ({', '.join(known)})")
    if not labels:
        raise StudyError("--recipes: name at least one recipe")
    chosen = set(labels)

    def reads_only_chosen(claim: Claim) -> bool:
        return all(side is None or side.recipe is None or side.recipe in chosen for side in (claim.a, claim.b))

    benchmark = spec.benchmark if spec.benchmark is not None and spec.benchmark.recipe in chosen else None
    claims = tuple(claim for claim in spec.claims if reads_only_chosen(claim))
    design = spec.design
    drift = design.drift
    if drift is not None:
        kept = tuple(recipe for recipe in drift.recipes if recipe in chosen)
        drift = replace(drift, recipes=kept) if kept else None
    design = replace(design, drift=drift,
                     primary=None if design.primary is None else
                     tuple(c for c in design.primary if c in {claim.id for claim in claims}))
    return replace(spec, recipes=tuple(entry for entry in spec.recipes if entry.label in chosen),
                   claims=claims, benchmark=benchmark, design=design,
                   part=tuple(entry.label for entry in spec.recipes if entry.label in chosen))


def shipped_study_dir() -> Path:
    """The folder of the study files shipped with pcmr (``pcmr/studies``, package data)."""
    return Path(__file__).resolve().parents[1] / "studies"


def list_studies() -> dict[str, Path]:
    """Shipped study name -> path."""
    return {p.stem: p for p in sorted(shipped_study_dir().glob("*.yaml"))}


def find_study(name_or_path: str) -> Path:
    """A study YAML path as given, or the shipped study of that name (e.g. ``papers``, ``tiny``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    studies = list_studies()
    if name_or_path in studies:
        return studies[name_or_path]
    raise FileNotFoundError(f"study {name_or_path!r} not found: give a YAML path or one of "
                            f"{', '.join(studies) or '(none shipped)'}")


