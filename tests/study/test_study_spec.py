"""Study files: parsing, errors naming the field, the grid of runs, the shipped studies and the
override form handed to the config parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from pcmr.study import StudyError, find_study, list_studies, load_study, parse_study
from pcmr.study.backend import override_items, resolve_config


def _raw(**changes) -> dict:
    raw = {"name": "t", "seeds": [0, 1], "set": {"train.epochs": 1},
           "variants": {"base": {}, "slow": {"train.lr": 1e-5}},
           "recipes": {"pcme": {"similarities": ["cosine", "kl"]}, "vsepp_sum": {"variants": ["base"]}}}
    raw.update(changes)
    return raw


def test_grid_order_names_and_override_precedence() -> None:
    spec = parse_study(_raw(recipes={"pcme": {"set": {"train.epochs": 2}}, "vsepp_sum": {"variants": ["base"]}}))
    runs = spec.runs()
    assert [r.name for r in runs] == ["pcme-base-s0", "pcme-base-s1", "pcme-slow-s0", "pcme-slow-s1",
                                      "vsepp_sum-base-s0", "vsepp_sum-base-s1"]
    assert [r.index for r in runs] == list(range(6))
    slow = runs[3]
    assert slow.overrides == {"train.progress": False, "train.epochs": 2, "train.lr": 1e-5, "train.seed": 1}
    assert runs[4].overrides["train.epochs"] == 1 and runs[4].similarities is None


def test_default_variants() -> None:
    spec = parse_study(_raw(default_variants=["slow"], recipes={"pcme": None, "hal": {"variants": ["base", "slow"]}}))
    assert [(r.label, r.variant) for r in spec.runs()[::2]] == [("pcme", "slow"), ("hal", "base"), ("hal", "slow")]


def test_headline_similarity_and_default_variants_are_kept() -> None:
    spec = parse_study(_raw(recipes={"pcme": {"similarities": ["cosine", "kl"], "headline": "kl"}, "hal": None},
                            default_variants=["slow"]))
    assert [(e.label, e.headline) for e in spec.recipes] == [("pcme", "kl"), ("hal", None)]
    assert spec.default_variants == ("slow",)


def test_a_recipe_may_run_a_subset_of_the_study_seeds() -> None:
    spec = parse_study(_raw(seeds=[0, 1, 2], recipes={"pcme": {"variants": ["base"], "seeds": [0, 2]},
                                                      "hal": {"variants": ["base"]}}))
    assert [r.name for r in spec.runs()] == ["pcme-base-s0", "pcme-base-s2", "hal-base-s0", "hal-base-s1",
                                             "hal-base-s2"]
    assert spec.recipes[0].seeds == (0, 2) and spec.recipes[1].seeds is None
    for bad in ([0, 3], [], [0, 0]):
        with pytest.raises(StudyError, match=r"recipes\.pcme\.seeds: expected distinct seeds of the study"):
            parse_study(_raw(seeds=[0, 1, 2], recipes={"pcme": {"seeds": bad}}), where="my.yaml")


def test_recipe_alias_and_defaults() -> None:
    spec = parse_study(_raw(recipes={"small_pcme": {"recipe": "pcme", "rerankers": "nns,is"}}, variants=None))
    (run,) = spec.runs()[:1]
    assert (run.label, run.recipe, run.variant, run.rerankers) == ("small_pcme", "pcme", "base", ("nns", "is"))
    assert spec.relevance == ("exact", "source") and spec.level == 0.95


@pytest.mark.parametrize(("change", "message"), [
    ({"seeds": []}, "seeds"),
    ({"seeds": [0, 0]}, "seeds"),
    ({"recipes": {}}, "recipes"),
    ({"recipes": {"pcme": {"variants": ["nope"]}}}, "unknown variant"),
    ({"recipes": {"pcme": {"colour": 1}}}, "my.yaml: unknown study file key 'recipes.pcme.colour'; accepted keys"),
    ({"recipes": {"bad-name": None}}, "may only use"),
    ({"relevance": ["exact", "coco"]}, "unknown mode"),
    ({"level": 1.5}, "level"),
    ({"analysis": {"deciles": "yes"}}, "analysis.deciles"),
    ({"set": ["train.epochs=1"]}, "set"),
    ({"default_variants": ["nope"]}, "default_variants"),
    ({"colour": 1}, "my.yaml: unknown study file key 'colour'; accepted keys"),
    ({"seeds": [0, "one"]}, r"study file key 'seeds\[1\]' expects an integer"),
    ({"recipes": {"pcme": {"similarities": ["cosine"], "headline": "kl"}}}, "pcme.headline"),
    ({"recipes": {"pcme": {"headline": 3}}}, "pcme.headline"),
    ({"claims": [{"id": "c", "paper": "p", "statement": "s", "metric": "rsum", "expect": "greater",
                  "a": {"recipe": "gce"}}]}, "not in the study's recipes"),
])
def test_bad_study_names_the_field(change: dict, message: str) -> None:
    with pytest.raises(StudyError, match=message):
        parse_study(_raw(**change), where="my.yaml")


def test_load_study_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [0\n")
    with pytest.raises(StudyError, match="bad.yaml"):
        load_study(bad)
    with pytest.raises(FileNotFoundError, match="not found"):
        find_study("no_such_study")


@pytest.mark.parametrize("name", sorted(list_studies()))
def test_shipped_studies_load_and_name_existing_recipes(name: str) -> None:
    from pcmr.similarity import list_similarities
    from pcmr.train.recipes import list_recipes

    spec = load_study(find_study(name))
    recipes = list_recipes()
    assert spec.runs()
    for entry in spec.recipes:
        assert entry.recipe in recipes, entry.recipe
        assert set(entry.similarities or ()) <= set(list_similarities())
    for claim in spec.claims:
        for side in (claim.a, claim.b):
            if side is not None and side.similarity is not None:
                assert side.similarity in list_similarities()


def test_shipped_papers_study_fixes_its_design_before_the_runs() -> None:
    """Every recipe is read by a claim; five seeds for the recipes of the primary claims, three for the
    others; at most ten primary claims; the HAL and RGM claims judged at 1x and 3x the learning rate; a
    skill gate, the distinct test split and source-pair training everywhere."""
    spec = load_study(find_study("papers"))
    design = spec.design
    assert design.gate is not None and design.gate.min_skill == 0.3 and design.distinct_test_split
    assert spec.overrides["data.options.preset"] == "specific" and spec.relevance == ("exact",)
    assert all(run.overrides["data.train_relevance"] == "source" for run in spec.runs())
    claims = {c.id: c for c in spec.claims}
    primary = set(design.primary or ())
    assert 1 <= len(primary) <= 10 and primary <= set(claims)
    seeds = {e.label: len(e.seeds if e.seeds is not None else spec.seeds) for e in spec.recipes}

    def recipes(claim) -> set[str]:
        return {side.recipe for side in (claim.a, claim.b) if side is not None and side.recipe} or set()

    read = {label for claim in spec.claims for label in recipes(claim)}
    assert read == set(seeds)
    for claim in spec.claims:
        assert all(seeds[r] >= (5 if claim.id in primary else 3) for r in recipes(claim)), claim.id
        assert claim.min_effect > 0 or claim.margin > 0, claim.id
        if claim.paper.startswith("HAL/RGM"):
            assert len(claim.cells) == 2 and any(c.endswith("_lr3") for c in claim.cells), claim.id
    for variant in {c for claim in spec.claims for c in claim.cells if c.endswith("_lr3")}:
        assert spec.variants[variant]["train.finetune_lr_factor"] == 3.0
    for run in spec.runs():  # every run's config resolves, and a x3 cell triples a rate used from step one
        config = resolve_config(run.recipe, run.overrides)
        assert config.train.warmup_epochs == 0 or "train.finetune_lr_factor" not in run.overrides, run.name


def test_override_items_read_back_by_the_config_parser() -> None:
    overrides = {"train.lr": 1e-4, "train.epochs": 2, "data.options.num_train": 48, "train.progress": False,
                 "eval.similarities": ["cosine", "kl"], "model.name": "pcme", "train.grad_clip": None,
                 "data.loader_options": {"augment": False, "word_dropout": 0.25}}
    assert override_items({"train.lr": 1e-4})[0] == "train.lr=0.0001"
    config = resolve_config("pcme", overrides)
    assert config.train.lr == 1e-4 and config.train.epochs == 2 and config.train.progress is False
    assert config.data.options["num_train"] == 48 and config.train.grad_clip is None
    assert config.eval.similarities == ["cosine", "kl"]
    assert config.data.loader_options == {"augment": False, "word_dropout": 0.25}


def test_threads_per_worker() -> None:
    from pcmr.study import threads_per_worker

    assert threads_per_worker(1, cores=16) == 16
    assert threads_per_worker(3, cores=16) == 5
    assert threads_per_worker(4, cores=2) == 1
    with pytest.raises(ValueError, match="workers"):
        threads_per_worker(0)


def test_a_bad_override_stops_the_study_before_any_training(tmp_path: Path) -> None:
    from pcmr.cli import main

    study = tmp_path / "bad.yaml"
    study.write_text("name: bad\nseeds: [0]\nrecipes: {vsepp_sum: {set: {train.colour: red}}}\n")
    with pytest.raises(StudyError, match=r"run 0 \(vsepp_sum-base-s0\).*train.colour"):
        from pcmr.study import run_study

        run_study(load_study(study), tmp_path / "out", threads=1, echo=lambda line: None)
    assert not (tmp_path / "out" / "runs").exists()
    assert main(["study", str(study), "--out", str(tmp_path / "out"), "--workers", "0"]) == 2


def test_shipped_uncertainty_study_resolves_every_run_and_fixes_its_design_before_the_runs() -> None:
    spec = load_study(find_study("uncertainty"))
    assert spec.overrides["data.options.preset"] == "multiplicity_distinct"
    # the budget the probes chose (tools/budget_probes.yaml): 32 px, 16 epochs, at least 3 named slots
    assert spec.overrides["data.options.image_size"] == 32 and spec.overrides["data.options.min_attributes"] == 3
    assert spec.design.distinct_test_split
    assert not set(spec.seeds) & (set(range(5)) | {30, 31, 32, 900, 901})  # fresh: no pilot's, probe's or old run's
    assert [e.label for e in spec.recipes] == ["pcme", "pcme_small_init", "pcme_mu_only", "pcme_mu_only_exact"]
    # every recipe on source pairs; the exact relation only for the data-learnable line of the mu-only twin
    assert {(run.label, run.variant) for run in spec.runs() if run.variant.startswith("exact")} == {
        ("pcme_mu_only_exact", "exact_long")}
    assert spec.benchmark is not None and (spec.benchmark.recipe, spec.benchmark.variant) == (
        "pcme_mu_only_exact", "exact_long")
    cells = ("source", "source_lr3")
    swept = {(run.label, run.variant) for run in spec.runs() if run.variant.startswith("source")}
    assert swept == {(label, cell) for label in ("pcme", "pcme_small_init", "pcme_mu_only") for cell in cells}
    # the twin in every cell of PCME, on pcme_small_init's seeds (its contrasts are paired by seed)
    seeds = {label: {r.seed for r in spec.runs() if r.label == label} for label in {r.label for r in spec.runs()}}
    assert seeds["pcme_mu_only"] <= seeds["pcme_small_init"]
    # each recipe runs the seeds the claims reading it need (the power computation), at least 5
    for claim in spec.claims:
        for side in (claim.a, claim.b):
            if side is not None and side.recipe:
                assert len(seeds[side.recipe]) >= claim.seeds_needed
    assert all(len(v) >= 5 for k, v in seeds.items() if k != "pcme_mu_only_exact")
    first = {}
    for run in spec.runs():
        first.setdefault((run.label, run.variant), run)
    for run in first.values():  # every recipe and variant
        config = resolve_config(run.recipe, run.overrides)
        assert config.train.epochs == (32 if run.variant.endswith("_long") else 16)
        assert config.data.options["preset"] == "multiplicity_distinct"
        assert config.data.train_relevance == ("exact" if run.variant.startswith("exact") else "source")
        assert config.train.lr == (9e-4 if run.variant == "source_lr3" else 3e-4)
        if run.label == "pcme_small_init":
            assert config.model.options["image_head"]["logvar_init"] == -8
            assert config.model.options["caption_head"]["logvar_init"] == -8
    design = spec.design
    assert design.gate is not None and design.gate.min_skill == 0.3
    assert design.null is not None and design.null.inits >= 200
    assert design.null.source("pcme_small_init") == "pcme"  # one null per distinct head
    assert design.drift is not None and len(design.drift.seeds) >= 3 and design.drift.threads != 1
    assert design.power is not None and design.power.max_seeds == 18  # what 8 hours afford at the pilot's times
    assert design.primary is not None and 0 < len(design.primary) <= 10
    # every primary claim's models are drifted, so its contrast's drift is measured
    for claim in spec.claims:
        if claim.id in design.primary:
            assert {s.recipe for s in (claim.a, claim.b) if s is not None and s.recipe} <= set(design.drift.recipes)
    # claims the data cannot test are removed with their reason; PMRP is one
    removed = {entry.id: entry.reason for entry in design.removed}
    assert {f"{m}-vs-mu-only-pmrp-{d}" for m in ("pcme", "pcme_small_init") for d in ("i2t", "t2i")} <= set(removed)
    assert all("PMRP" in removed[i] or "seeds the study affords" in removed[i] or "could not measure" in removed[i]
               for i in removed)
    assert not any("pmrp" in c.metric for c in spec.claims)
    assert all(c.min_effect > 0 and c.cells == cells for c in spec.claims)
    # PCME's central question is judged, or its removal says why: caption sigma against the number of relevant
    # images, within wildcard strata, against the null
    central = "pcme_small_init-caption-uncertainty-vs-relevant-images-within-wildcards"
    assert central in {c.id for c in spec.claims} | set(removed)
    margin = [c for c in spec.claims if c.id.endswith("-vs-margin")]
    assert all(c.metric.endswith("_excess_aurc") and c.expect == "less" and c.b is not None
               and c.b.recipe is None and c.b.metric == c.metric + "_margin" for c in margin)
    assert all(c.directions() == (c.metric[:3],) for c in spec.claims if c.metric[:3] in ("i2t", "t2i"))


def test_select_recipes_keeps_the_part_and_the_claims_that_read_it_alone() -> None:
    from pcmr.study import select_recipes

    spec = load_study(find_study("papers"))
    part = select_recipes(spec, ["pcmepp_csd_small_init", "pcme_small_init"])
    assert [e.label for e in part.recipes] == ["pcme_small_init", "pcmepp_csd_small_init"]  # the file's order
    assert {run.name for run in part.runs()} <= {run.name for run in spec.runs()}  # the whole study's names
    assert len(part.runs()) == 15 + 13  # each recipe's own seeds
    kept = {c.id for c in part.claims}
    assert "pcmepp-csd-small-init-over-pcme-i2t" in kept and "hal-csls-raises-rsum" not in kept
    assert all(side.recipe in {"pcmepp_csd_small_init", "pcme_small_init"}
               for c in part.claims for side in (c.a, c.b) if side is not None and side.recipe)
    assert part.design.primary == ()  # the primary claims read hal and ProbVSE
    assert part.design.drift is None  # no drifted recipe in the part
    # the papers' protocol: every recipe trains on source pairs, judged under exact relevance
    assert {run.overrides["data.train_relevance"] for run in part.runs()} == {"source"}
    assert part.relevance == ("exact",) and all(c.min_effect >= 2.0 for c in part.claims)
    with pytest.raises(StudyError, match="'nope' not in the study's recipes"):
        select_recipes(spec, ["pcme", "nope"])
    with pytest.raises(StudyError, match="at least one"):
        select_recipes(spec, [])


def test_shipped_uncertainty_study_judges_each_claim_once_on_complete_results() -> None:
    """Fake results with every column the claims read: each claim is judged exactly once (the study
    evaluates one relevance mode), none is refused, and the swept claims carry their three cells."""
    import random

    from pcmr.study.claims import judge_claims

    spec = load_study(find_study("uncertainty"))
    metrics = {c.metric for c in spec.claims} | {s.metric for c in spec.claims for s in (c.a, c.b)
                                                if s is not None and s.metric}
    metrics |= {f"{side}_uncertainty_agreement" for side in ("image", "caption")}
    rng = random.Random(0)
    rows = []
    for run in spec.runs():
        for similarity in ("match_prob", "cosine", "csd", "wasserstein"):
            rows.append({"run": run.name, "recipe": run.label, "variant": run.variant, "seed": run.seed,
                         "similarity": similarity, "rerank": "nns", "relevance": "exact",
                         **{m: rng.uniform(0, 1) for m in metrics}})
    from pcmr.study.claims import JudgeOptions

    null = [{"recipe": label, "init": i, "relevance": "exact", **{m: rng.uniform(0, 1) for m in metrics}}
            for label in ("pcme", "pcme_small_init") for i in range(20)]
    judgements, errors = judge_claims(spec.claims, rows, options=JudgeOptions(null_rows=null, primary=spec.design.primary))
    assert errors == {}
    assert sum(j.family == "primary" for j in judgements) == len(spec.design.primary)
    assert sorted(j.claim.id for j in judgements) == sorted(c.id for c in spec.claims)
    for judgement in judgements:
        assert len(judgement.cells) == len(judgement.claim.cells)


def test_shipped_papers_study_judges_each_claim_once_and_gates_the_models_it_reads() -> None:
    """Fake results for every run, similarity and re-ranker of the papers study: each claim is judged
    once, none is refused, the swept claims carry both cells, and a model below the skill gate in one
    direction and cell (vsepp_max at 3x its rate) turns every claim that reads it there into `not learned`,
    and no other (GCE against VSE++ reads vsepp_max at its own rate only)."""
    import random

    from pcmr.study.claims import NOT_LEARNED, JudgeOptions, judge_claims

    spec = load_study(find_study("papers"))
    metrics = {c.metric for c in spec.claims} | {"i2t_r_precision", "t2i_r_precision"}
    rng = random.Random(0)
    rows = []
    for run in spec.runs():
        for similarity in run.similarities or ("cosine",):
            for rerank in run.rerankers or ("nns", "is", "csls", "csls+rgm"):
                # R-Precision 60-70 against a query-blind 1: skill about 0.6; vsepp_max t2i at 20 in the x3 cell
                low = run.recipe == "vsepp_max" and run.variant.endswith("_lr3")
                rows.append({"run": run.name, "recipe": run.label, "variant": run.variant, "seed": run.seed,
                             "similarity": similarity, "rerank": rerank, "relevance": "exact",
                             **{m: rng.uniform(60, 70) for m in metrics},
                             **({"t2i_r_precision": 20.0} if low else {}),
                             "i2t_query_blind_r_precision": 1.0, "t2i_query_blind_r_precision": 1.0})
    gate = spec.design.gate
    judgements, errors = judge_claims(spec.claims, rows, options=JudgeOptions(
        primary=spec.design.primary, min_skill=gate.min_skill if gate else None))
    assert errors == {}
    assert sorted(j.claim.id for j in judgements) == sorted(c.id for c in spec.claims)
    assert sum(j.family == "primary" for j in judgements) == len(spec.design.primary or ())
    for judgement in judgements:
        assert len(judgement.cells) == len(judgement.claim.cells)
        reads_max = any(s is not None and s.recipe in ("vsepp_max", "vsepp_max_noise")
                        for s in (judgement.claim.a, judgement.claim.b))
        in_lr3_cell = any(str(cell).endswith("_lr3") for cell in judgement.claim.cells)
        assert (judgement.verdict == NOT_LEARNED) == (reads_max and in_lr3_cell), judgement.claim.id
