"""``pcmr search -k K`` prints K distinct lines when the gallery holds them: identical captions merge into
one line, so more results are fetched until K distinct texts remain, and a query that cannot reach K
(the whole gallery read, or a matching's fixed-length lists) says how many came back and why."""

from __future__ import annotations

import json

import pytest

from pcmr.cli import main
from pcmr.search import GalleryIndex


@pytest.fixture(scope="module")
def repetitive_index(tmp_path_factory, search_index_factory):
    """The tiny index with all but 7 of its captions reading "the same caption" (spread over the gallery, so
    the first 5k results of a query hold few distinct texts)."""
    root = tmp_path_factory.mktemp("repetitive")
    path = search_index_factory(root, backend="exact")
    index = GalleryIndex.load(path)
    num = index.captions.num
    keep = set(range(0, num, max(1, num // 7)))
    index.caption_texts = [f"caption {i}" if i in keep else "the same caption" for i in range(num)]
    index.save(path)
    return path, len(keep) + 1


@pytest.fixture
def query_image(tmp_path):
    from PIL import Image

    Image.new("RGB", (16, 16), (200, 30, 30)).save(tmp_path / "q.png")
    return tmp_path / "q.png"


def _search(capsys, index, image, *extra):
    status = main(["search", str(index), "--image", str(image), "--json", *extra])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)[0], captured.err


@pytest.mark.parametrize("k", [5, 8])
def test_k_distinct_lines_when_the_gallery_holds_them(repetitive_index, query_image, capsys, k):
    index, distinct = repetitive_index
    block, err = _search(capsys, index, query_image, "-k", str(k))
    texts = [line["text"] for line in block["results"]]
    assert len(texts) == k and len(set(texts)) == k
    assert "distinct results" not in err
    merged = next(line for line in block["results"] if line["text"] == "the same caption")
    assert merged["count"] > 1 and len(merged["ids"]) == merged["count"]


def test_fewer_distinct_texts_than_k_says_so(repetitive_index, query_image, capsys):
    index, distinct = repetitive_index
    block, err = _search(capsys, index, query_image, "-k", str(distinct + 3))
    assert len(block["results"]) == distinct
    assert sum(line["count"] for line in block["results"]) == GalleryIndex.load(index).captions.num  # all read
    expected = f"only {distinct} distinct results of the {distinct + 3} asked for"
    assert expected in err and "identical captions are shown once" in err
    assert any(expected in warning for warning in block["warnings"])


def test_a_matching_that_returns_repeated_texts_says_so(repetitive_index, query_image, capsys):
    index, _ = repetitive_index
    block, err = _search(capsys, index, query_image, "-k", "5", "--rerank", "rgm", "--option", "lam=2")
    assert len(block["results"]) < 5  # most captions read the same, and a matching returns exactly 5 items
    assert f"only {len(block['results'])} distinct results of the 5 asked for" in err
    assert "a matching's lists are not cut from longer ones" in err
