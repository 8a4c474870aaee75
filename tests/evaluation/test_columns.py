"""pcmr.evaluation.columns: the one schema of metric keys, titles, bounds and direction."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

from pcmr import Gaussian
from pcmr.evaluation import columns as schema
from pcmr.evaluation import evaluate_embeddings
from pcmr.evaluation.columns import ALL_COLUMNS, EVALUATION_COLUMNS, metric_bounds
from pcmr.metrics.driver import DIRECTIONS

SRC = Path(__file__).resolve().parents[2] / "src" / "pcmr"
#: the modules that spell metric keys: the schema and the abstention series keys below it
SCHEMA_MODULES = ("evaluation/columns.py", "report/figure_keys.py")

# a metric key of an evaluation row or of the study's analysis columns, or a piece of one in an f-string
METRIC_KEY = re.compile(r"(?:^|_)(?:r_precision|map_at_r|pmrp(?:_\w+)?|rsum|hs_sum|r1_(?:least|most)_uncertain"
                        r"|uncertainty_(?:signal|spread|spread_init|floor|relevant_rho(?:_strata)?|occlusion_slope"
                        r"|erasure_slope|agreement|S|R2))(?:_untrained)?$"
                        r"|_R@\d*$|(?:^|_)aurc(?:_margin|_multiplicity|_random)?(?:_within)?$|_excess_aurc(?:_margin)?$"
                        r"|(?:^|_)random_within$|^(?:i2t|t2i)?_lambda$|^binsel_|^match_[ab]$")


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module, f-string pieces included, docstrings excluded."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def _exported(path: Path) -> set[str]:
    """The names in a module's ``__all__`` (a function called like a figure is not its name)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return set()


def test_no_metric_key_is_spelled_outside_the_schema():
    """Only pcmr.evaluation.columns spells the keys of evaluation rows and analysis columns (with
    pcmr.report.figure_keys, the abstention series' keys its AURC columns are made of). The
    metrics layer below it names the values it computes (``R@K``, ``r_precision``, its ``total``
    row's ``rsum``), which the schema maps to the row's columns."""
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in SCHEMA_MODULES or relative.startswith("metrics/"):
            continue
        found = [f"{line}: {value!r}" for line, value in _literals(path) if METRIC_KEY.search(value)]
        if found:
            offenders[relative] = found
    assert not offenders, f"metric keys spelled outside pcmr.evaluation.columns: {offenders}"


def test_the_scan_recognises_every_key_of_the_schema():
    keys = [c.key for c in ALL_COLUMNS.columns if c.group != "id"]
    keys += [schema.recall(d, k) for d in DIRECTIONS for k in (1, 5, 10)]
    keys += [schema.binary_selection("i2t_union"), "folds_i2t_R@5", schema.recall("t2i", 1, "cxc")]
    assert [k for k in keys if not METRIC_KEY.search(k)] == []
    for fragment in ("_R@", "_r_precision", "_map_at_r", "_pmrp_", "_r1_least_uncertain", "_uncertainty_signal",
                     "_aurc", "_aurc_within", "_random_within", "_uncertainty_agreement", "_uncertainty_relevant_rho"):
        assert METRIC_KEY.search(fragment) or METRIC_KEY.search(fragment.rstrip("_")), fragment
    # the keys of one direction's abstention series, spelled without a leading direction
    for key in ("aurc", "aurc_margin", "aurc_multiplicity", "aurc_within", "aurc_margin_within", "random_within"):
        assert METRIC_KEY.search(key), key


def test_the_directions_are_spelled_once():
    """``i2t`` and ``t2i`` are spelled in code only by pcmr.relevance (``I2T``, ``T2I``, ``DIRECTIONS``); the
    others import them (docstrings may name them)."""
    offenders = [f"{path.relative_to(SRC).as_posix()}:{line}" for path in sorted(SRC.rglob("*.py"))
                 if path.relative_to(SRC).as_posix() != "relevance.py"
                 for line, value in _literals(path) if value in DIRECTIONS]
    assert offenders == [] and DIRECTIONS == ("i2t", "t2i")


def test_bounds_and_direction_of_every_percentage():
    for d in DIRECTIONS:
        for key in (schema.recall(d, 1), schema.recall(d, 10), schema.r_precision(d), schema.map_at_r(d),
                    schema.pmrp(d, 0), schema.pmrp(d, "mean"), schema.r_precision(d, "cxc"),
                    schema.recall(d, 5, "eccv"), schema.map_at_r(d, "eccv"), schema.r1_by_uncertainty(d, "most")):
            assert metric_bounds(key) == (0.0, 100.0), key
            assert ALL_COLUMNS.column(key).higher_is_better is True, key
    assert metric_bounds("i2t_map_at_r") == (0.0, 100.0)
    assert metric_bounds(schema.RSUM) == (0.0, 600.0)
    assert metric_bounds(schema.HS_SUM) is None and EVALUATION_COLUMNS.column(schema.HS_SUM).higher_is_better is False
    assert metric_bounds(schema.tuned_value("i2t")) is None
    assert metric_bounds(schema.relevant_count_rho("image")) == (-1.0, 1.0)


def test_hubness_ks_without_ten():
    gen = torch.Generator().manual_seed(0)
    images = Gaussian(torch.randn(12, 4, generator=gen), torch.zeros(12, 4))
    captions = Gaussian(torch.randn(24, 4, generator=gen), torch.zeros(24, 4))
    relevance = torch.zeros(12, 24, dtype=torch.bool)
    relevance[torch.arange(24) % 12, torch.arange(24)] = True
    report = evaluate_embeddings(images, captions, relevance, similarities=["cosine"], rerankers=["nns"],
                                 hubness_ks=(1, 5))
    assert report.rows[0][schema.HS_SUM] is not None
    assert report.figures["k_occurrence"]["k"] == 5
    assert any("k = 1, 5 over both" in note for note in report.meta["notes"])
    default = evaluate_embeddings(images, captions, relevance, similarities=["cosine"], rerankers=["nns"])
    assert default.figures["k_occurrence"]["k"] == 10


def test_figure_names_are_spelled_once():
    """The figure names are spelled in code only by pcmr.report.figure_keys; the evaluation that stores a
    figure, the plots that draw it and the readers (``pcmr search --risk-curve``, the study) import them.
    The one other spelling is the torch-free catalog of registered names (``pcmr list producers``), which
    tests/test_catalog.py checks against the producer registry."""
    from pcmr.report.plots import FIGURES

    names = set(FIGURES)
    offenders = [f"{path.relative_to(SRC).as_posix()}:{line}: {value}" for path in sorted(SRC.rglob("*.py"))
                 if path.relative_to(SRC).as_posix() not in ("report/figure_keys.py", "catalog.py")
                 for line, value in _literals(path) if value in names and value not in _exported(path)]
    assert offenders == [] and len(names) == 7
