"""`pcmr serve`: the JSON API through FastAPI's test client (httpx), errors as 4xx JSON, the page's assets."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from pcmr.search import GalleryIndex
from pcmr.search.service import ServiceLimits, create_app


@pytest.fixture(scope="module")
def index(search_index_factory, tmp_path_factory):
    return GalleryIndex.load(search_index_factory(tmp_path_factory.mktemp("serve")))


@pytest.fixture(scope="module")
def client(index):
    return TestClient(create_app(index, limits=ServiceLimits(max_k=20, max_upload_bytes=20_000)),
                      raise_server_exceptions=False)


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_health_and_text_search_match_the_library(client, index):
    health = client.get("/api/health").json()
    assert health["status"] == "ok" and health["images"] == 13 and health["captions"] == 65
    assert health["backend"] == {"image": "faiss/flat", "caption": "faiss/flat"} and health["text_queries"]
    response = client.get("/api/search", params={"text": "a red circle", "k": 5})
    assert response.status_code == 200
    body = response.json()
    assert body["similarity"] == "match_prob" and health["similarity"] == "match_prob"  # the trained score
    expected = index.search_text("a red circle", k=5, similarity="match_prob")
    assert [r["index"] for r in body["results"]] == expected.indices[0].tolist()
    assert [r["score"] for r in body["results"]] == pytest.approx(expected.scores[0].tolist())
    first = body["results"][0]
    assert first["image_url"] == f"/images/{first['index']}" and 0.0 <= first["uncertainty_percentile"] <= 100.0
    assert "uncertainty_level" not in first  # one uncertainty rank
    assert first["metadata"]["labels"]


def test_items_images_and_captions(tiny_shapes, client, index):
    from pcmr.data import load_dataset

    item = client.get("/api/images/4", params={"k": 3}).json()
    assert item["id"] == index.image_ids[4] and len(item["captions"]) == 3
    expected = index.search(index.images[4], k=3, modality="image", similarity="match_prob")
    assert [c["index"] for c in item["captions"]] == expected.indices[0].tolist()
    assert item["captions"][0]["text"] == index.caption_texts[expected.indices[0, 0]]
    caption = client.get("/api/captions/7").json()
    assert caption["text"] == index.caption_texts[7] and caption["uncertainty"] is not None
    from pcmr.search.presentation import uncertainty_percentile

    for modality, entry in (("image", item), ("caption", caption)):  # the one rank, as pcmr search gives it
        assert "uncertainty_level" not in entry
        assert entry["uncertainty_percentile"] == uncertainty_percentile(entry["uncertainty"],
                                                                         index.item_uncertainty(modality))
    picture = client.get("/images/4")
    assert picture.status_code == 200 and picture.headers["content-type"] == "image/png"
    pixels = np.asarray(Image.open(io.BytesIO(picture.content)))
    assert np.array_equal(pixels, load_dataset("shapes", "test", **tiny_shapes).images.pixels[4])


def test_image_upload_returns_captions(tiny_shapes, client, index):
    from pcmr.data import load_dataset

    pixels = load_dataset("shapes", "test", **tiny_shapes).images.pixels[2]
    response = client.post("/api/search/image", params={"k": 4}, files={"file": ("q.png", _png(pixels), "image/png")})
    assert response.status_code == 200
    expected = index.search(index.images[2], k=4, modality="image", similarity="match_prob")
    assert [r["index"] for r in response.json()["results"]] == expected.indices[0].tolist()


@pytest.mark.parametrize(("method", "url", "kwargs", "status", "message"), [
    ("get", "/api/search", {"params": {"text": ""}}, 400, "non-empty"),
    ("get", "/api/search", {"params": {"text": "   "}}, 400, "non-empty"),
    ("get", "/api/search", {"params": {"text": "x" * 1001}}, 400, "longer than"),
    ("get", "/api/search", {}, 422, "text"),
    ("get", "/api/search", {"params": {"text": "a", "k": 0}}, 400, "k must be an integer in [1, 13]"),
    ("get", "/api/search", {"params": {"text": "a", "k": 14}}, 400, "k must be"),
    ("get", "/api/search", {"params": {"text": "a", "k": "ten"}}, 422, "k"),
    ("get", "/api/images/13", {}, 404, "unknown image 13"),
    ("get", "/api/images/-1", {}, 404, "unknown image -1"),
    ("get", "/api/images/abc", {}, 422, "item"),
    ("get", "/api/captions/65", {}, 404, "unknown caption 65"),
    ("get", "/images/99", {}, 404, "unknown image 99"),
    ("get", "/api/images/1", {"params": {"k": 21}}, 400, "k must be"),
    ("get", "/static/secret.py", {}, 404, "no static file"),
    ("get", "/nowhere", {}, 404, "Not Found"),
    ("post", "/api/search/image", {"files": {"file": ("a.txt", b"not an image", "text/plain")}}, 415, "not an image"),
    ("post", "/api/search/image", {"files": {"file": ("a.png", b"", "image/png")}}, 400, "empty"),
    ("post", "/api/search/image", {"files": {"file": ("big.png", b"\x89PNG" + b"0" * 30_000, "image/png")}}, 413,
     "larger than"),
    ("post", "/api/search/image", {}, 422, "file"),
])
def test_bad_requests_get_a_4xx_json_error(client, method, url, kwargs, status, message):
    response = getattr(client, method)(url, **kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_an_index_without_a_model_refuses_queries_but_serves_items(index):
    bare = GalleryIndex(index.images, index.captions, image_ids=index.image_ids, caption_ids=index.caption_ids,
                        caption_texts=index.caption_texts)
    client = TestClient(create_app(bare), raise_server_exceptions=False)
    response = client.get("/api/search", params={"text": "a red circle"})
    assert response.status_code == 409 and "no model" in response.json()["error"]
    item = client.get("/api/images/0").json()
    assert item["image_url"] is None and len(item["captions"]) == 5
    assert client.get("/images/0").status_code == 404


def test_the_page_and_its_assets(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="query"' in page.text and "/static/app.js" in page.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert "grid-template-columns" in client.get("/static/style.css").text


def test_serve_command_refuses_a_bad_port_and_a_missing_index(tmp_path, capsys):
    from pcmr.cli import main

    assert main(["serve", str(tmp_path), "--port", "0"]) == 2
    assert "--port must be in 1..65535" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "pcmr search" in capsys.readouterr().err and "--build RUN_OR_MODEL" not in ""


def test_a_query_string_chooses_the_similarity_and_reranker(client, index):
    for params, similarity, rerank in [({}, "match_prob", "nns"), ({"similarity": "cosine"}, "cosine", "nns"),
                                       ({"similarity": "kl", "rerank": "csls"}, "kl", "csls")]:
        body = client.get("/api/search", params={"text": "a red circle", "k": 5, **params}).json()
        assert (body["similarity"], body["rerank"]) == (similarity, rerank)
        expected = index.search_text("a red circle", k=5, similarity=similarity, rerank=rerank)
        assert [r["index"] for r in body["results"]] == expected.indices[0].tolist()
        assert [r["score"] for r in body["results"]] == pytest.approx(expected.scores[0].tolist())
    item = client.get("/api/images/4", params={"k": 3, "similarity": "cosine", "rerank": "csls"}).json()
    expected = index.search(index.images[4], k=3, modality="image", similarity="cosine", rerank="csls")
    assert [c["index"] for c in item["captions"]] == expected.indices[0].tolist()
    upload = client.post("/api/search/image", params={"k": 3, "similarity": "cosine"},
                         files={"file": ("q.png", _png(np.zeros((16, 16, 3), np.uint8)), "image/png")}).json()
    assert upload["similarity"] == "cosine" and len(upload["results"]) == 3


@pytest.mark.parametrize(("params", "message"), [
    ({"similarity": "cosin"}, "unknown similarity 'cosin'"),
    ({"rerank": "csl"}, "unknown re-ranker 'csl'"),
])
def test_an_unknown_similarity_or_reranker_in_the_query_string_is_a_400(client, params, message):
    response = client.get("/api/search", params={"text": "a red circle", **params})
    assert response.status_code == 400 and message in response.json()["error"]
    assert "did you mean" in response.json()["error"]


def test_the_page_says_what_the_score_is(client):
    """The number on each result is named in the server's words (as `pcmr search` names it): the log of the
    match probability for PCME's trained similarity, the cosine for cosine, and the re-weighting of a
    re-ranker; the page shows that text in its legend."""
    health = client.get("/api/health").json()
    assert health["score_note"].startswith("score: the log of the match probability")
    body = client.get("/api/search", params={"text": "a red circle", "k": 3}).json()
    assert body["score_note"] == health["score_note"]
    body = client.get("/api/search", params={"text": "a red circle", "k": 3, "similarity": "cosine",
                                             "rerank": "csls"}).json()
    assert body["score_note"].startswith("score: the cosine of the two means")
    assert "after the csls re-ranking" in body["score_note"]
    upload = client.post("/api/search/image", params={"k": 3},
                         files={"file": ("q.png", _png(np.zeros((16, 16, 3), np.uint8)), "image/png")}).json()
    assert upload["score_note"] == health["score_note"]
    assert 'id="score-note"' in client.get("/").text  # the page drawing it: tests/search/test_serve_browser.py
