"""`pcmr serve` returns k distinct lines like `pcmr search`: identical captions merge into one line, so its
caption searches (an uploaded image, a gallery image's captions) fetch more until k distinct texts remain,
and a query that cannot reach k says how many came back and why."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from pcmr.search import GalleryIndex
from pcmr.search.service import ServiceLimits, create_app


@pytest.fixture(scope="module")
def repetitive(tmp_path_factory, search_index_factory):
    """The tiny index with all but 7 of its captions reading "the same caption" (spread over the gallery, so
    the first 5k results of a query hold few distinct texts), its service, its number of distinct texts and its folder."""
    path = search_index_factory(tmp_path_factory.mktemp("serve-repetitive"), backend="exact")
    index = GalleryIndex.load(path)
    num = index.captions.num
    keep = set(range(0, num, max(1, num // 7)))
    index.caption_texts = [f"caption {i}" if i in keep else "the same caption" for i in range(num)]
    index.save(path)
    index = GalleryIndex.load(path)
    client = TestClient(create_app(index, limits=ServiceLimits(max_k=50)), raise_server_exceptions=False)
    return index, client, len(keep) + 1, path


def _upload(client, k, **params):
    buffer = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), (200, 30, 30), dtype=np.uint8)).save(buffer, format="PNG")
    response = client.post("/api/search/image", params={"k": k, **params},
                           files={"file": ("q.png", buffer.getvalue(), "image/png")})
    assert response.status_code == 200, response.text
    return response.json()["results"], response.json()["warnings"]


def _item(client, k, **params):
    response = client.get("/api/images/3", params={"k": k, **params})
    assert response.status_code == 200, response.text
    return response.json()["captions"], response.json()["warnings"]


@pytest.mark.parametrize("ask", [_upload, _item], ids=["upload", "gallery-image"])
@pytest.mark.parametrize("k", [5, 8])
def test_k_distinct_lines_when_the_gallery_holds_them(repetitive, ask, k):
    index, client, _, _ = repetitive
    lines, warnings = ask(client, k)
    texts = [line["text"] for line in lines]
    assert len(texts) == k and len(set(texts)) == k
    assert [line["rank"] for line in lines] == list(range(1, k + 1))
    assert not any("distinct results" in warning for warning in warnings)
    merged = next(line for line in lines if line["text"] == "the same caption")
    assert merged["count"] > 1 and len(merged["ids"]) == merged["count"]
    assert all(index.caption_texts[i] == "the same caption" for i in merged["indices"])


@pytest.mark.parametrize("ask", [_upload, _item], ids=["upload", "gallery-image"])
def test_fewer_distinct_texts_than_k_says_so(repetitive, ask):
    index, client, distinct, _ = repetitive
    lines, warnings = ask(client, distinct + 3)
    assert len(lines) == distinct
    assert sum(line["count"] for line in lines) == index.captions.num  # the whole gallery was read
    expected = f"only {distinct} distinct results of the {distinct + 3} asked for"
    assert any(expected in warning and "identical captions are shown once" in warning for warning in warnings)


def test_the_service_and_the_command_show_the_same_lines(repetitive, tmp_path, capsys):
    import json

    from pcmr.cli import main

    _, client, _, path = repetitive
    pixels = np.full((16, 16, 3), (200, 30, 30), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "q.png")
    assert main(["search", str(path), "--image", str(tmp_path / "q.png"), "--json", "-k", "5"]) == 0
    command = json.loads(capsys.readouterr().out)[0]["results"]
    served, _ = _upload(client, 5)
    assert [(line["text"], line["ids"]) for line in served] == [(line["text"], line["ids"]) for line in command]


def test_a_matching_that_returns_repeated_texts_says_so(repetitive):
    _, client, _, _ = repetitive
    lines, warnings = _upload(client, 5, rerank="rgm")
    assert len(lines) < 5  # most captions read the same, and a matching returns exactly 5 items
    assert any(f"only {len(lines)} distinct results of the 5 asked for" in warning
               and "a matching's lists are not cut from longer ones" in warning for warning in warnings)
