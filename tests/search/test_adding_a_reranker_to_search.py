"""Adding a re-ranker touches only its own class: a re-weighting defined and registered here, and nowhere
else, answers a search request through the search session, on the exact backend and on faiss candidates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.inference.rerankers import REWEIGHTINGS, Reweighting, list_rerankers
from pcmr.search import GalleryIndex
from pcmr.search.session import SearchRequest, SearchSession

NAME = "throwaway_double"


@dataclass(frozen=True)
class Double(Reweighting):
    """Twice the scores: the ranking of nns, every score doubled."""

    name: ClassVar[str] = NAME

    def rescore(self, scores: Tensor) -> Tensor:
        return 2 * scores

    def rescore_candidates(self, scores: Tensor, statistic: Tensor | None) -> Tensor:
        return 2 * scores


@pytest.fixture
def registered():
    REWEIGHTINGS.register(Double)
    yield NAME
    REWEIGHTINGS.unregister(NAME)


@pytest.fixture
def index():
    gen = torch.Generator().manual_seed(0)
    images = Gaussian(torch.randn(40, 6, generator=gen), 0.3 * torch.randn(40, 6, generator=gen))
    captions = Gaussian(torch.randn(50, 6, generator=gen), 0.3 * torch.randn(50, 6, generator=gen))
    built = GalleryIndex(images, captions, image_ids=list(range(40)), caption_ids=list(range(50)),
                         caption_texts=[f"caption {i}" for i in range(50)])
    built.build_ann("wasserstein")
    return built


@pytest.mark.parametrize("backend", ["exact", "faiss"])
def test_a_registered_reranker_answers_through_the_session(registered, index, backend):
    pytest.importorskip("faiss")
    assert registered in list_rerankers()
    session = SearchSession(index, similarity="wasserstein", backend=backend)
    queries = Gaussian(torch.randn(4, 6, generator=torch.Generator().manual_seed(1)))
    doubled = session.search(SearchRequest(gaussian=queries, k=5, rerank=registered))
    plain = session.search(SearchRequest(gaussian=queries, k=5, rerank="nns"))
    assert doubled.rerank == registered
    for mine, theirs in zip(doubled.queries, plain.queries):
        assert [line["index"] for line in mine.lines] == [line["index"] for line in theirs.lines]
        assert [line["score"] for line in mine.lines] == pytest.approx([2 * line["score"] for line in theirs.lines])


def test_the_throwaway_reranker_is_gone_after_its_test():
    assert NAME not in list_rerankers()
