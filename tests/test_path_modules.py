"""The modules one ``pcmr search INDEX --text`` (and ``--image``) call goes through, counted as
``tools/call_path_counts.py`` counts them (the pcmr modules whose functions the call enters, leaving
out the helpers it lists as called wherever needed): a query alone enters none of the index-writing
modules, and no module is entered twice, that is again while it is on the call stack below another
counted module (a callee calling back up into its caller's module: a function handed down, a method
of the caller's object, a constructor of its class)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

from pcmr.cli import main

TOOL = Path(__file__).resolve().parents[1] / "tools" / "call_path_counts.py"

#: what a query never needs: writing an index folder, encoding a split, building candidate sources (the
#: registry of their kinds, pcmr.search.sources, only to reconnect the sources an index has)
INDEX_WRITING = {"pcmr.search.indexing", "pcmr.search.building", "pcmr.search.backends"}


def _load_tool() -> ModuleType:
    """``tools/call_path_counts.py`` as a module (its measurement runs only as a script)."""
    spec = importlib.util.spec_from_file_location("call_path_counts", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COUNTS = _load_tool()


def trace(call: Callable[[], object]) -> tuple[list[str], list[str]]:
    """``(modules entered in order, calls entering a module twice)``, as the tool counts them."""
    traced = COUNTS.trace(call)
    return traced["list"], traced["twice"]


def test_the_trace_sees_a_call_back_into_a_module_below():
    """Made-up modules: ``a.outer`` calls ``b.middle``, which calls back ``a.inner``; ``a.outer`` calling
    ``a.inner`` itself, or ``b`` calling ``b``, is no re-entry."""
    a: dict = {"__name__": "pcmr.search.made_up_a"}
    b: dict = {"__name__": "pcmr.search.made_up_b"}
    exec("def inner():\n    return 1\n", a)
    exec("def middle(back):\n    return helper() + back()\n\ndef helper():\n    return 1\n", b)
    a["middle"] = b["middle"]
    exec("def outer():\n    return inner() + middle(inner)\n", a)
    entered, twice = trace(a["outer"])
    assert entered == ["pcmr.search.made_up_a", "pcmr.search.made_up_b"]
    assert twice == ["pcmr.search.made_up_a <- pcmr.search.made_up_b -> pcmr.search.made_up_a.inner"]
    assert COUNTS.counted("pcmr.search.gallery") and not COUNTS.counted("pcmr.similarity.registry")


@pytest.fixture(scope="module")
def indexes(search_index_factory, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("path-modules")
    return {backend: search_index_factory(root / backend, backend=backend) for backend in ("exact", "faiss")}


@pytest.mark.parametrize("backend", ["exact", "faiss"])
def test_a_query_enters_no_module_twice_and_no_index_writing_module(indexes, backend, tmp_path):
    picture = tmp_path / "q.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(picture)
    for query in (["--text", "a red circle"], ["--image", str(picture)]):
        args = ["search", str(indexes[backend]), *query, "--rerank", "csls", "-k", "3"]
        assert main(args) == 0  # imports and caches first, as the tool does
        entered, twice = trace(lambda args=args: main(args))
        assert twice == [], twice
        writing = INDEX_WRITING | ({"pcmr.search.sources"} if backend == "exact" else set())
        assert not writing & set(entered), sorted(writing & set(entered))
        assert {"pcmr.cli.search", "pcmr.search.session", "pcmr.search.gallery", "pcmr.search.compose"} <= set(entered)
