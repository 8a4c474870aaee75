"""``pcmr.catalog``, the torch-free copy of the names and defaults the command line offers before the
library loads, is exactly what the library holds: every registry's names in listing order, the search's
index types and exact ANN scores, and each default the commands' help quotes."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import pcmr
from pcmr import catalog
from pcmr.cli.parsers.study import shipped_studies
from pcmr.data import DATASETS, ENCODE_BATCH_SIZE, list_datasets
from pcmr.evaluation.producers import MODEL_PRODUCERS, PRODUCERS, list_producers
from pcmr.inference import MATCHINGS, REWEIGHTINGS, list_rerankers
from pcmr.losses import LOSSES, list_losses
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.models import list_models
from pcmr.registry import Registry
from pcmr.search import ann, compose, searcher, service
from pcmr.search.sources import CANDIDATE_SOURCES
from pcmr.similarity import SIMILARITIES, list_similarities
from pcmr.study.spec import list_studies

#: each kind of ``pcmr list`` and the library's listing of it
LISTINGS = {"models": list_models, "similarities": list_similarities, "losses": list_losses,
            "rerankers": list_rerankers, "datasets": list_datasets, "backends": compose.backend_names,
            "producers": list_producers}

#: each registry of the package and the kind of ``pcmr list`` that shows its names
SHOWN_IN = {id(SIMILARITIES): "similarities", id(LOSSES): "losses", id(DATASETS): "datasets",
            id(REWEIGHTINGS): "rerankers", id(MATCHINGS): "rerankers", id(compose.SEARCH_BACKENDS): "backends",
            id(CANDIDATE_SOURCES): "backends", id(PRODUCERS): "producers", id(MODEL_PRODUCERS): "producers"}


def test_the_catalog_lists_the_kinds_of_the_library():
    assert set(catalog.REGISTERED) == set(LISTINGS)


@pytest.mark.parametrize("kind", sorted(LISTINGS))
def test_the_registered_names_are_the_registries_in_listing_order(kind):
    assert list(catalog.REGISTERED[kind]) == list(LISTINGS[kind]())


def _package_registries() -> list[tuple[str, Registry]]:
    """``(module.attribute, registry)`` for every Registry a module of the library holds (every library
    module imported; one whose optional dependency is absent holds none)."""
    for info in pkgutil.walk_packages(pcmr.__path__, "pcmr."):
        if info.name.split(".")[1] in ("train", "study", "cli", "__main__") or ".web" in info.name:
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
    found: dict[int, tuple[str, Registry]] = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("pcmr.") and module is not None:
            for attribute, value in vars(module).items():
                if isinstance(value, Registry):
                    found.setdefault(id(value), (f"{name}.{attribute}", value))
    return list(found.values())


def test_every_name_of_every_registry_is_in_the_catalog():
    """A new registry needs a kind of ``pcmr list`` (here and in the catalog); a new name of a registry
    needs its place in the catalog."""
    registries = _package_registries()
    assert {id(registry) for _, registry in registries} == set(SHOWN_IN), [where for where, _ in registries]
    for where, registry in registries:
        kind = SHOWN_IN[id(registry)]
        missing = [name for name in registry.names() if name not in catalog.REGISTERED[kind]]
        assert missing == [], f"{where}: {missing} not in pcmr.catalog.REGISTERED[{kind!r}]"


def test_the_search_choices_are_the_library_ones():
    assert catalog.ANN_SCORES == ann.ANN_SCORES
    assert catalog.INDEX_TYPES == ann.INDEX_TYPES


def test_the_quoted_defaults_are_the_library_ones():
    assert catalog.ENCODE_BATCH_SIZE == ENCODE_BATCH_SIZE
    assert catalog.DEFAULT_SIMILARITIES == DEFAULT_SIMILARITIES
    assert catalog.DEFAULT_RERANKERS == DEFAULT_RERANKERS
    assert catalog.DEFAULT_TOP_K == compose.DEFAULT_TOP_K
    assert catalog.RESCORE_ALL_MAX == compose.RESCORE_ALL_MAX
    assert catalog.DEFAULT_CANDIDATES == searcher.DEFAULT_CANDIDATES
    assert catalog.DEFAULT_REFERENCE_SAMPLE == searcher.DEFAULT_REFERENCE_SAMPLE
    assert catalog.REQUEST_TIMEOUT_S == service.ServiceLimits.request_timeout_s


def test_the_study_parser_offers_the_shipped_studies():
    assert shipped_studies() == list(list_studies())
