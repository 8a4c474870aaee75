"""The one registry mechanism (``pcmr.registry.Registry``): registration, refusals, the unknown-name
error, the listing order, and every registry of the package built on it (docs/architecture.md, Registries)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass

import pytest

import pcmr
from pcmr.data import DATASETS, DataError
from pcmr.inference import MATCHINGS, REWEIGHTINGS
from pcmr.losses import LOSSES
from pcmr.registry import Registry, every_registry
from pcmr.search.candidate_sources import CANDIDATE_SOURCES
from pcmr.search.compose import SEARCH_BACKENDS, backend_names
from pcmr.similarity import SIMILARITIES


@dataclass(frozen=True)
class Entry:
    name: str
    rank: int = 0


def test_register_as_call_and_as_decorator():
    registry: Registry[object] = Registry("widget")
    first = registry.register(Entry("alpha"))
    assert first == Entry("alpha")

    @registry.register
    class Beta:
        name = "beta"

    @registry.register(name="gamma")
    def make() -> int:
        return 1

    assert registry.names() == ["alpha", "beta", "gamma"]
    assert registry.get("beta") is Beta and registry.get("gamma") is make
    assert "alpha" in registry and "delta" not in registry and 3 not in registry
    assert registry.find("delta") is None and len(registry) == 3
    assert [name for name, _ in registry.items()] == list(registry) == registry.names()


def test_a_taken_or_empty_name_is_refused():
    registry: Registry[Entry] = Registry("widget")
    registry.register(Entry("alpha"))
    with pytest.raises(ValueError, match="widget name 'alpha' is already registered"):
        registry.register(Entry("alpha", rank=1))
    assert registry.get("alpha") == Entry("alpha")  # the first one stays
    with pytest.raises(ValueError, match="needs a non-empty name"):
        registry.register(Entry(""))


def test_check_name_refuses_before_registering():
    def no_plus(name: str) -> None:
        if "+" in name:
            raise ValueError(f"{name!r} contains '+'")

    registry: Registry[Entry] = Registry("part", check_name=no_plus)
    with pytest.raises(ValueError, match="contains"):
        registry.register(Entry("a+b"))
    assert registry.names() == []


def test_an_unknown_name_names_the_registry_and_the_near_miss():
    registry: Registry[Entry] = Registry("widget")
    for name in ("cosine", "kl"):
        registry.register(Entry(name))
    with pytest.raises(ValueError) as err:
        registry.get("cosin")
    assert str(err.value) == "unknown widget 'cosin' (did you mean 'cosine'?); expected one of: cosine, kl"
    with pytest.raises(ValueError, match="unknown widget 'zzz'; expected one of"):
        registry.get("zzz")
    with pytest.raises(ValueError, match="unknown widget '3'"):
        registry.get(3)  # type: ignore[arg-type]


def test_the_error_class_is_the_registrys():
    registry: Registry[Entry] = Registry("dataset", error=DataError)
    with pytest.raises(DataError):
        registry.get("shapez")
    with pytest.raises(DataError, match="did you mean 'shapes'"):
        DATASETS.get("shapez")


def test_order_is_registration_order_or_the_entries_key_then_the_name():
    plain: Registry[Entry] = Registry("widget")
    ranked: Registry[Entry] = Registry("widget", order=lambda entry: entry.rank)
    for entry in (Entry("c", 2), Entry("b", 1), Entry("a", 2), Entry("d", 0)):
        plain.register(entry)
        ranked.register(entry)
    assert plain.names() == ["c", "b", "a", "d"]
    assert ranked.names() == ["d", "b", "a", "c"]
    assert [entry.name for entry in ranked.values()] == ranked.names()


def test_unregister_removes_a_throwaway_entry():
    registry: Registry[Entry] = Registry("widget")
    registry.register(Entry("alpha"))
    registry.unregister("alpha")
    registry.unregister("never")
    assert registry.names() == []
    registry.register(Entry("alpha"))  # the name is free again


def test_the_built_in_listing_orders():
    """The orders users see (``pcmr list``, the evaluation tables) as properties of the entries."""
    assert SIMILARITIES.names()[:3] == ["cosine", "l2", "kl"]
    assert SIMILARITIES.names()[-1] == "max_cosine"
    assert DATASETS.names() == sorted(DATASETS.names())
    assert REWEIGHTINGS.names() == ["nns", "is", "csls"] and MATCHINGS.names() == ["gm", "rgm"]
    assert SEARCH_BACKENDS.names() == ["auto", "exact"]  # no candidate source; then one backend per kind of source
    assert CANDIDATE_SOURCES.names() == ["faiss", "milvus"]
    assert backend_names() == ("auto", "exact", "faiss", "milvus")
    assert LOSSES.names()[0] == "triplet_sum"


def _import_every_library_module() -> None:
    for info in pkgutil.walk_packages(pcmr.__path__, "pcmr."):
        top = info.name.split(".")[1]
        if top in ("train", "study", "cli", "__main__") or ".web" in info.name:
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency (faiss, pymilvus) absent: its module holds no registry
            continue


def test_every_registry_of_the_package_is_one_registry():
    """No second mechanism: no module-level mapping of names to things carrying that name (the shape
    of a hand-kept registry) outside ``Registry``, and every registry of the package is one."""
    _import_every_library_module()
    hand_kept = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("pcmr.") or module is None:
            continue
        for attribute, value in vars(module).items():
            if isinstance(value, dict) and value and all(
                    isinstance(key, str) and getattr(entry, "name", None) == key for key, entry in value.items()):
                hand_kept.append(f"{name}.{attribute}")
    assert hand_kept == [], "a mapping of names to named entries; make it a pcmr.registry.Registry"
    registries = every_registry()
    for known in (SIMILARITIES, REWEIGHTINGS, MATCHINGS, LOSSES, DATASETS, SEARCH_BACKENDS, CANDIDATE_SOURCES):
        assert isinstance(known, Registry) and known in registries
