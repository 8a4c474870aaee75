"""The Milvus back-end in its embedded mode (Milvus Lite): build with the CLI, query with the CLI, serve
through FastAPI's test client; answers equal the exact backend's (candidates re-scored exactly)."""

from __future__ import annotations

import json

import pytest
import torch

from pcmr import Gaussian
from pcmr.cli import main
from pcmr.search import GalleryIndex

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")


@pytest.fixture(scope="module")
def built(search_run_factory, tmp_path_factory):
    root = tmp_path_factory.mktemp("milvus")
    run = search_run_factory(root / "run")
    uri = str(root / "gallery.db")
    assert main(["search", str(root / "index"), "--build", str(run), "--backend", "milvus", "--uri", uri,
                 "--similarity", "kl"]) == 0
    return root / "index", uri


def test_cli_build_writes_collections_and_the_index_names_them(built, capsys):
    index_dir, uri = built
    info = json.loads((index_dir / "index.json").read_text())
    assert info["backend"] == "milvus"
    build_id = info["ann"]["image"]["build_id"]
    assert len(build_id) == 16 and info["ann"]["caption"]["build_id"] == build_id
    assert info["ann"]["image"] == {**info["ann"]["image"], "engine": "milvus", "uri": uri,
                                    "collection": f"pcmr_image_{build_id}", "score": "wasserstein",
                                    "index_type": "FLAT"}
    assert "ann-image.faiss" not in info["checksums"]
    index = GalleryIndex.load(index_dir)
    assert index.ann["image"].ntotal == 13 and index.ann["caption"].ntotal == 65


@pytest.mark.parametrize("rerank", ["nns", "csls", "is"])
def test_cli_query_equals_the_exact_backend(built, capsys, rerank):
    index_dir, _ = built
    capsys.readouterr()
    common = ["search", str(index_dir), "--text", "a red circle", "--text", "two blue squares", "-k", "4",
              "--similarity", "kl", "--rerank", rerank, "--json"]
    assert main([*common, "--backend", "milvus"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert main([*common, "--backend", "exact"]) == 0
    exact = json.loads(capsys.readouterr().out)
    for a, b in zip(fast, exact):
        assert [h["index"] for h in a["results"]] == [h["index"] for h in b["results"]]
        assert [h["score"] for h in a["results"]] == pytest.approx([h["score"] for h in b["results"]], rel=1e-4, abs=2e-3)


def test_serve_answers_from_milvus(built):
    from fastapi.testclient import TestClient

    from pcmr.search.service import create_app

    index_dir, _ = built
    index = GalleryIndex.load(index_dir)
    client = TestClient(create_app(index, similarity="kl", rerank="csls"), raise_server_exceptions=False)
    health = client.get("/api/health").json()
    assert health["backend"] == {"image": "milvus/FLAT", "caption": "milvus/FLAT"}
    body = client.get("/api/search", params={"text": "a red circle", "k": 3}).json()
    expected = index.search_text("a red circle", k=3, similarity="kl", rerank="csls", backend="exact")
    assert [r["index"] for r in body["results"]] == expected.indices[0].tolist()
    captions = client.get("/api/images/2", params={"k": 4}).json()["captions"]
    exact = index.search(index.images[2], k=4, modality="image", similarity="kl", rerank="csls", backend="exact")
    assert [c["index"] for c in captions] == exact.indices[0].tolist()


def test_flat_collection_gives_the_faiss_flat_candidates(tmp_path):
    from pcmr.search.ann import build_ann
    from pcmr.search.vectordb import MilvusCandidates

    gen = torch.Generator().manual_seed(0)
    gallery = Gaussian(torch.randn(300, 8, generator=gen), 0.3 * torch.randn(300, 8, generator=gen))
    query = Gaussian(torch.randn(5, 8, generator=gen), 0.3 * torch.randn(5, 8, generator=gen))
    for score in ("cosine", "wasserstein", "csd"):
        source = MilvusCandidates.create(str(tmp_path / "c.db"), f"g_{score}", score, gallery, 300, "flat")
        source.add(gallery[:120], first_id=0)
        source.add(gallery[120:])
        source.finish()
        again = MilvusCandidates.open(str(tmp_path / "c.db"), f"g_{score}")
        scores, indices = again.search(query, 7)
        flat_scores, flat_indices = build_ann(gallery, score, "flat").search(query, 7)
        assert torch.equal(indices, flat_indices)
        torch.testing.assert_close(scores, flat_scores, rtol=1e-4, atol=1e-4)


def test_bad_uri_and_missing_collection_are_named(tmp_path, capsys):
    from safetensors.torch import save_file

    from pcmr.search.vectordb import MilvusCandidates

    with pytest.raises(ValueError, match="ending in .db"):
        MilvusCandidates.open(str(tmp_path / "x.sqlite"), "g")
    with pytest.raises(FileNotFoundError, match="empty.db not found"):
        MilvusCandidates.open(str(tmp_path / "empty.db"), "nothing")
    assert not (tmp_path / "empty.db").exists()  # opening never creates a database
    MilvusCandidates.create(str(tmp_path / "other.db"), "g", "cosine", Gaussian.point(torch.randn(4, 3)), 4)
    with pytest.raises(ValueError, match="no Milvus collection 'nothing'"):
        MilvusCandidates.open(str(tmp_path / "other.db"), "nothing")
    save_file({"image_mean": torch.randn(5, 3)}, str(tmp_path / "e.safetensors"))
    assert main(["search", str(tmp_path / "idx"), "--from-embeddings", str(tmp_path / "e.safetensors"),
                 "--backend", "milvus"]) != 0
    assert "--backend milvus needs --uri" in capsys.readouterr().err


def test_relative_uri_is_stored_absolute_and_queried_from_another_directory(tiny_run_factory, tmp_path, monkeypatch,
                                                                          capsys):
    run = tiny_run_factory(tmp_path / "run")
    (tmp_path / "build").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "build")
    assert main(["search", "idx", "--build", str(run), "--backend", "milvus", "--uri", "x.db"]) == 0
    info = json.loads((tmp_path / "build" / "idx" / "index.json").read_text())
    assert info["ann"]["image"]["uri"] == str(tmp_path / "build" / "x.db")
    capsys.readouterr()
    monkeypatch.chdir(tmp_path / "elsewhere")
    common = ["search", str(tmp_path / "build" / "idx"), "--text", "a red circle", "-k", "3", "--json"]
    assert main([*common, "--backend", "milvus"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert main([*common, "--backend", "exact"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert [h["index"] for h in fast[0]["results"]] == [h["index"] for h in exact[0]["results"]]
    assert list((tmp_path / "elsewhere").iterdir()) == []  # no empty database next to the caller
    import shutil

    database = tmp_path / "build" / "x.db"
    shutil.rmtree(database) if database.is_dir() else database.unlink()
    assert main(common) == 2
    assert f"Milvus Lite database {database} not found" in capsys.readouterr().err
    assert not database.exists() and list((tmp_path / "elsewhere").iterdir()) == []
