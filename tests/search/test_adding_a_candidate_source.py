"""Adding a vector database touches only its own module and its test: a kind of candidate source defined
and registered here, and nowhere else, is built into an index folder, saved, reconnected to, searched
through the search session, grown by added items and dropped when the index is replaced."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from pcmr.atomic import atomic_write_safetensors
from pcmr.gaussian import Gaussian
from pcmr.search.compose import get_backend
from pcmr.search.indexing import IndexWrite, write_index
from pcmr.search.session import SearchRequest, SearchSession
from pcmr.search.sources import CANDIDATE_SOURCES, BuildSettings, SourceKind, replace_source

ENGINE = "throwaway_brute"
DROPPED: list[dict[str, Any]] = []


class BruteForce:
    """A candidate source that scores every mean by cosine (what a vector database answers)."""

    engine = ENGINE
    score = "cosine"
    index_type = "brute"
    exact = True
    exhaustive = True  # it lists every item: a gallery within the default candidate count keeps its lists
    searches = 0

    def __init__(self, means: Tensor) -> None:
        self.means = torch.nn.functional.normalize(means.float(), dim=1)

    @property
    def ntotal(self) -> int:
        return self.means.shape[0]

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    def search(self, query: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        BruteForce.searches += 1
        scores = torch.nn.functional.normalize(query.mean.float(), dim=1) @ self.means.T
        return scores.topk(min(k, self.ntotal), dim=1)  # (scores, indices)


class BruteForceSource(SourceKind):
    engine = ENGINE

    def build(self, index: Any, score: str, modalities: Sequence[str], settings: BuildSettings,
              say: Callable[[str], None], warn: Callable[[str], None]) -> dict[str, Any]:
        for modality in modalities:
            replace_source(index, modality, BruteForce(index.gallery(modality).mean))
            say(f"{ENGINE} over {index.gallery(modality).num} {modality}s")
        return dict(index.ann)

    def save(self, source: Any, folder: Path, modality: str) -> dict[str, Any]:
        name = f"brute-{modality}.safetensors"
        atomic_write_safetensors(folder / name, {"means": source.means.contiguous()})
        return {"engine": ENGINE, "file": name}

    def reconnect(self, entry: dict[str, Any], modality: str, gallery: Any, file: Path | None,
                  meta_path: Path) -> Any:
        assert file is not None
        source = BruteForce(load_file(str(file))["means"])
        assert source.ntotal == gallery.num
        return source

    def add(self, index: Any, modality: str, source: Any, items: Gaussian, merged: Gaussian, shard_size: int,
            progress: bool | None) -> Any:
        new = BruteForce(merged.mean)
        replace_source(index, modality, new)
        return new

    def drop_entry(self, entry: dict[str, Any]) -> None:
        DROPPED.append(entry)


@pytest.fixture
def registered():
    CANDIDATE_SOURCES.register(BruteForceSource(), name=ENGINE)
    yield ENGINE
    CANDIDATE_SOURCES.unregister(ENGINE)


def _embeddings(path: Path, seed: int, images: int, captions: int) -> Path:
    gen = torch.Generator().manual_seed(seed)
    save_file({"image_mean": torch.randn(images, 8, generator=gen), "image_logvar": torch.randn(images, 8, generator=gen),
               "caption_mean": torch.randn(captions, 8, generator=gen),
               "caption_logvar": torch.randn(captions, 8, generator=gen)}, str(path))
    return path


def test_a_registered_candidate_source_is_built_saved_reopened_searched_grown_and_dropped(registered, tmp_path):
    folder = tmp_path / "idx"
    lines: list[str] = []
    write_index(IndexWrite(str(folder), from_embeddings=str(_embeddings(tmp_path / "a.safetensors", 0, 30, 40)),
                           backend=registered, similarity="cosine"), say=lines.append)
    assert f"{registered} over 30 images" in lines
    info = json.loads((folder / "index.json").read_text())
    assert info["backend"] == registered and info["ann"]["image"]["file"] == "brute-image.safetensors"

    session = SearchSession.open(folder, similarity="cosine", backend=registered)
    assert get_backend(registered).engine == registered
    queries = Gaussian(torch.randn(3, 8, generator=torch.Generator().manual_seed(1)))
    before = BruteForce.searches
    found = session.search(SearchRequest(gaussian=queries, modality="caption", k=5, labels=["a", "b", "c"]))
    assert BruteForce.searches > before  # the registered source proposed the candidates
    exact = SearchSession.open(folder, similarity="cosine", backend="exact").search(
        SearchRequest(gaussian=queries, modality="caption", k=5, labels=["a", "b", "c"]))
    assert [[line["index"] for line in q.lines] for q in found.queries] == \
        [[line["index"] for line in q.lines] for q in exact.queries]
    assert [q.label for q in found.queries] == ["a", "b", "c"]

    write_index(IndexWrite(str(folder), add=str(_embeddings(tmp_path / "b.safetensors", 2, 5, 0))))
    grown = SearchSession.open(folder, backend=registered)
    assert grown.index.ann["image"].ntotal == 35

    write_index(IndexWrite(str(folder), from_embeddings=str(tmp_path / "a.safetensors"), overwrite=True))
    assert [entry["file"] for entry in DROPPED[-2:]] == ["brute-image.safetensors", "brute-caption.safetensors"]


def test_the_throwaway_source_is_gone_after_its_test():
    assert ENGINE not in CANDIDATE_SOURCES
    with pytest.raises(ValueError, match="backend"):
        get_backend(ENGINE)
