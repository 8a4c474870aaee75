"""docs/architecture.md: the exact backend of a gallery index answers with every registered re-ranker
(re-weightings and matchings alike), and never returns a gallery item twice for one query."""

from __future__ import annotations

import pytest
import torch

from pcmr import Gaussian
from pcmr.inference import list_rerankers
from pcmr.search import GalleryIndex


@pytest.mark.parametrize("rerank", list_rerankers())
def test_every_reranker_runs_on_the_exact_backend(rerank):
    gen = torch.Generator().manual_seed(0)
    images = Gaussian(torch.randn(9, 4, generator=gen), 0.3 * torch.randn(9, 4, generator=gen))
    captions = Gaussian(torch.randn(14, 4, generator=gen), 0.3 * torch.randn(14, 4, generator=gen))
    index = GalleryIndex(images, captions, image_ids=list(range(9)), caption_ids=list(range(14)),
                         caption_texts=[f"caption {c}" for c in range(14)])
    query = Gaussian(torch.randn(3, 4, generator=gen), 0.3 * torch.randn(3, 4, generator=gen))
    options = {"lam": 2.0} if "rgm" in rerank else {}
    results = index.search(query, k=4, similarity="cosine", rerank=rerank, rerank_options=options, backend="exact")
    indices = results.indices
    assert tuple(indices.shape) == (3, 4)
    assert all(len(set(row.tolist())) == 4 and all(0 <= i < 9 for i in row.tolist()) for row in indices)
