"""pcmr.search.presentation: merged identical captions, uncertainty percentiles (against a slow
float64 count), unknown-word and collapsed-score warnings."""

from __future__ import annotations

import pytest
import torch

from pcmr.data.text import Vocabulary
from pcmr.search.gallery import SearchHit
from pcmr.search.presentation import (
    collapsed_score_warning,
    entries_text,
    fetch_size,
    merge_identical_texts,
    more_to_fetch,
    query_word_warning,
    shown_entries,
    uncertainty_percentile,
    unknown_query_words,
)


def _hits(texts):
    return [SearchHit(rank=r + 1, index=10 + r, id=f"c{r}", score=1.0 - 0.1 * r, uncertainty=float(r), text=t)
            for r, t in enumerate(texts)]


def test_identical_captions_become_one_line_with_count_and_ids():
    hits = _hits(["a large shape", "A large  shape", "a red circle", "a large shape", "a blue square"])
    shown = merge_identical_texts(hits)
    assert [s.hit.text for s in shown] == ["a large shape", "a red circle", "a blue square"]
    assert [s.rank for s in shown] == [1, 2, 3]
    assert shown[0].count == 3 and shown[0].ids == ["c0", "c1", "c3"] and shown[0].indices == [10, 11, 13]
    assert merge_identical_texts(hits, limit=2)[-1].hit.text == "a red circle"
    images = [SearchHit(1, 0, "i0", 0.5, None), SearchHit(2, 1, "i1", 0.5, None)]
    assert [s.count for s in merge_identical_texts(images)] == [1, 1]  # images are never merged


def test_shown_entries_and_text_listing():
    gallery = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    entries = shown_entries(_hits(["x", "x", "y"]), k=5, gallery_uncertainty=gallery)
    assert [e["count"] for e in entries] == [2, 1]
    assert entries[0]["uncertainty"] == 0.0 and entries[0]["uncertainty_percentile"] == 6.2
    text = entries_text("an image", "cosine, nns", entries, ["a warning"], 40.0, "images")
    lines = text.splitlines()
    assert lines[0] == "an image  (query uncertainty: 40th percentile of the stored images)  [cosine, nns]"
    assert lines[2].endswith("x  (x2, ids c0, c1)") and "6%" in lines[2]
    assert lines[-1] == "warning: a warning"


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentile_matches_a_slow_count(n):
    generator = torch.Generator().manual_seed(n)
    values = torch.randint(0, 5, (n,), generator=generator).float() - 1000.0  # with ties, log-det-like scale
    for probe in [float(values[0]), -1001.0, -990.0, float(values.max())]:
        below = sum(1 for v in values.tolist() if v < probe)
        ties = sum(1 for v in values.tolist() if v == probe)
        expected = round(100.0 * (below + 0.5 * ties) / n, 1)
        assert uncertainty_percentile(probe, values) == expected
    assert uncertainty_percentile(None, values) is None
    assert uncertainty_percentile(1.0, None) is None
    assert uncertainty_percentile(-2000.0, values) == 0.0 and uncertainty_percentile(0.0, values) == 100.0


def test_query_word_warnings():
    vocab = Vocabulary(["a", "red", "circle"])
    assert query_word_warning("a red circle", vocab) is None
    assert "no word of the query 'zzzz qqqq'" in query_word_warning("zzzz qqqq", vocab)
    assert unknown_query_words("a red zzzz", vocab) == ["zzzz"]
    assert query_word_warning("a red zzzz", vocab) == "words not in the model's vocabulary, read as unknown: zzzz"
    assert "holds no word" in query_word_warning("!!!", vocab)


def test_collapsed_scores():
    assert "all 0.5" in collapsed_score_warning([0.5, 0.5, 0.5], "query 'x'")
    assert collapsed_score_warning([0.5, 0.4]) is None
    assert collapsed_score_warning([0.5]) is None
    assert collapsed_score_warning([-1012.5531, -1012.5531 + 1e-7]) is not None  # relative tolerance


def test_fetch_size_only_grows_for_caption_galleries_with_scores():
    assert fetch_size(10, 500, "caption", "nns") == 50
    assert fetch_size(10, 30, "caption", "csls") == 30
    assert fetch_size(10, 500, "image", "nns") == 10
    assert fetch_size(10, 500, "caption", "rgm") == 10


def test_more_to_fetch_asks_for_more_until_k_lines_or_the_whole_gallery():
    gallery = ["same"] * 40 + [f"text {i}" for i in range(4)] + ["same"] * 56  # 100 items, 5 distinct texts

    def asked(k, modality, rerank):
        """The result counts asked for, round by round, as the session asks them."""
        fetch, rounds = fetch_size(k, len(gallery), modality, rerank), []
        while fetch is not None:
            rounds.append(fetch)
            fetch = more_to_fetch([_hits(gallery[:fetch])], k, fetch, len(gallery), modality, rerank)
        return rounds

    assert asked(3, "caption", "nns") == [15, 75]  # 15 hold 1 distinct text, 75 hold 5
    assert len(merge_identical_texts(_hits(gallery[:75]), limit=3)) == 3
    assert asked(8, "caption", "nns") == [40, 100]  # only 5 distinct texts: stops once the gallery was read
    assert asked(3, "caption", "rgm") == [3]  # a matching's lists are not prefixes of longer ones: asked once
    assert asked(3, "image", "nns") == [3]  # images never merge
