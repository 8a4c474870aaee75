"""`pcmr search --build RUN --on-disk`: the gallery encoded batch by batch into stores inside the index,
IVF-PQ candidates re-scored exactly from the rows read; CLI, library and `pcmr serve` answers equal to the
same IVF-PQ index over the gallery in memory, recall against exact search, refusals, damaged stores."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from pcmr.cli import main
from pcmr.search import GalleryIndex
from pcmr.search.service import create_app
from pcmr.search.store import GalleryStore, StoreWriter

IMAGES, CAPTIONS = 300, 1500  # IVF-PQ trains 256 codewords per sub-quantizer: at least 256 items
IVFPQ = ["--index-type", "ivfpq", "--nlist", "4", "--pq-m", "2", "--batch-size", "64", "--ann-score", "cosine"]


@pytest.fixture(scope="module")
def built(tiny_run_factory, tiny_shapes, tmp_path_factory):
    """The run, an on-disk index (float32 store) and the in-memory IVF-PQ index of the same run; the
    number of chunks each store writer received while building the on-disk one."""
    root = tmp_path_factory.mktemp("ondisk")
    run = tiny_run_factory(root / "run", shapes={**tiny_shapes, "num_test": IMAGES},
                        similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})
    appended: dict[int, int] = {}
    original = StoreWriter.append

    def spy(self, chunk):
        appended[self.num] = appended.get(self.num, 0) + 1
        assert chunk.num <= 64  # one encoding batch, never the gallery
        return original(self, chunk)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StoreWriter, "append", spy)
        assert main(["search", str(root / "disk"), "--build", str(run), *IVFPQ, "--on-disk",
                     "--store-dtype", "float32"]) == 0
    assert main(["search", str(root / "memory"), "--build", str(run), "--backend", "faiss", *IVFPQ]) == 0
    return {"run": run, "disk": root / "disk", "memory": root / "memory", "appended": appended}


def _query(index, capsys, *extra):
    capsys.readouterr()
    assert main(["search", str(index), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_build_streams_the_gallery_into_stores_recorded_in_the_manifest(built):
    assert built["appended"] == {IMAGES: 5, CAPTIONS: 24}  # ceil(300 / 64), ceil(1500 / 64) chunks
    info = json.loads((built["disk"] / "index.json").read_text())
    assert info["on_disk"] is True and info["stores"] == {"image": "store-image", "caption": "store-caption"}
    assert not (built["disk"] / "embeddings.safetensors").exists()
    for name in ("store-image/mean.npy", "store-image/logvar.npy", "store-image/store.json",
                 "store-caption/mean.npy", "ann-image.faiss", "statistics.safetensors"):
        assert name in info["checksums"]
    assert info["ann"]["image"]["index_type"] == "ivfpq" and info["ann"]["image"]["ntotal"] == IMAGES
    index = GalleryIndex.load(built["disk"])
    assert index.on_disk and isinstance(index.images, GalleryStore) and index.images.info["dtype"] == "float32"
    assert (index.images.num, index.captions.num) == (IMAGES, CAPTIONS)


@pytest.mark.parametrize("extra", [[], ["--rerank", "csls"], ["--rerank", "is"], ["--similarity", "kl"],
                                   ["--similarity", "match_prob", "--candidates", "40"]])
def test_cli_answers_equal_the_in_memory_ivfpq_index(built, capsys, extra):
    queries = ["--text", "a red circle", "--text", "a small blue square above a green cross", "-k", "10", *extra]
    assert _query(built["disk"], capsys, *queries) == _query(built["memory"], capsys, *queries)


def test_image_queries_and_items_equal_the_in_memory_index(built):
    disk, memory = GalleryIndex.load(built["disk"]), GalleryIndex.load(built["memory"])
    for position in (0, 17, IMAGES - 1):
        assert disk.item("image", position).mean.tolist() == memory.images[position].mean.tolist()
        query = memory.images[position]
        for rerank in ("nns", "csls"):
            a = disk.search(query, 5, "wasserstein", rerank, modality="image")
            b = memory.search(query, 5, "wasserstein", rerank, modality="image")
            assert a.indices.tolist() == b.indices.tolist() and a.scores.tolist() == b.scores.tolist()
            assert a.uncertainty.tolist() == b.uncertainty.tolist()


def test_recall_against_exact_search(built, capsys):
    texts = ["a red circle", "a blue square", "a green cross below a yellow diamond", "two cyan circles",
             "a magenta triangle left of a red square"]
    queries = [arg for text in texts for arg in ("--text", text)] + ["-k", "10", "--similarity", "cosine"]
    exact = _query(built["memory"], capsys, *queries, "--backend", "exact")
    every = _query(built["disk"], capsys, *queries, "--candidates", str(IMAGES))
    assert [[h["index"] for h in e["results"]] for e in every] == [[h["index"] for h in e["results"]] for e in exact]
    fast = _query(built["disk"], capsys, *queries, "--candidates", "60")
    found = [len({h["index"] for h in f["results"]} & {h["index"] for h in e["results"]}) / 10
             for f, e in zip(fast, exact)]
    assert sum(found) / len(found) >= 0.8


@pytest.mark.parametrize("extra", [["--backend", "exact"], ["--rerank", "rgm", "--option", "lam=2"],
                                   ["--rerank", "gm"]])
def test_the_whole_gallery_paths_are_refused_naming_on_disk(built, capsys, extra):
    capsys.readouterr()
    assert main(["search", str(built["disk"]), "--text", "a red circle", *extra]) == 2
    assert "--on-disk" in capsys.readouterr().err


def test_a_backend_the_index_lacks_is_refused(built, capsys):
    capsys.readouterr()
    assert main(["search", str(built["disk"]), "--text", "a red circle", "--backend", "milvus"]) == 2
    assert "no milvus candidates" in capsys.readouterr().err


def test_build_options_are_checked(built, tmp_path, capsys):
    capsys.readouterr()
    assert main(["search", str(tmp_path / "a"), "--build", str(built["run"]), "--store-dtype", "float16"]) == 2
    assert "add --on-disk" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "b"), "--build", str(built["run"]), "--on-disk", "--backend", "exact"]) == 2
    assert "--backend faiss" in capsys.readouterr().err
    save_file({"image_mean": torch.randn(3, 4), "image_logvar": torch.randn(3, 4)}, str(tmp_path / "more.safetensors"))
    assert main(["search", str(built["disk"]), "--add", str(tmp_path / "more.safetensors")]) == 2
    assert "adding images" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_float16_store_is_the_default_and_close(built, tmp_path, capsys):
    assert main(["search", str(tmp_path / "half"), "--build", str(built["run"]), *IVFPQ, "--on-disk"]) == 0
    index = GalleryIndex.load(tmp_path / "half")
    assert index.images.info["dtype"] == "float16"
    assert (tmp_path / "half" / "store-image" / "mean.npy").stat().st_size < (
        built["disk"] / "store-image" / "mean.npy").stat().st_size
    queries = ["--text", "a red circle", "-k", "10", "--candidates", str(IMAGES)]
    half = {h["index"]: h["score"] for h in _query(tmp_path / "half", capsys, *queries)[0]["results"]}
    full = {h["index"]: h["score"] for h in _query(built["disk"], capsys, *queries)[0]["results"]}
    shared = half.keys() & full.keys()
    assert len(shared) >= 8
    assert all(half[i] == pytest.approx(full[i], abs=2e-3) for i in shared)


def test_serve_answers_from_the_store(built):
    index = GalleryIndex.load(built["disk"])
    memory = GalleryIndex.load(built["memory"])
    client = TestClient(create_app(index), raise_server_exceptions=False)
    health = client.get("/api/health").json()
    assert health["status"] == "ok" and (health["images"], health["captions"]) == (IMAGES, CAPTIONS)
    body = client.get("/api/search", params={"text": "a red circle", "k": 5}).json()
    assert body["similarity"] == "match_prob"  # the run's trained score
    expected = memory.search_text("a red circle", k=5, similarity="match_prob")
    assert [r["index"] for r in body["results"]] == expected.indices[0].tolist()
    assert [r["score"] for r in body["results"]] == pytest.approx(expected.scores[0].tolist())
    item = client.get("/api/images/3", params={"k": 4}).json()
    assert item["index"] == 3 and len(item["captions"]) >= 1 and item["uncertainty"] is not None
    caption = client.get("/api/captions/7").json()
    assert caption["text"] == index.caption_texts[7] and caption["uncertainty"] is not None
    for settings in ({"backend": "exact"}, {"rerank": "rgm"}):  # refused when the service is created
        with pytest.raises(ValueError, match="--on-disk"):
            create_app(index, **settings)


def test_pcmr_serve_refuses_the_exact_backend_before_listening(built, capsys):
    assert main(["serve", str(built["disk"]), "--backend", "exact", "--port", "1"]) == 2
    captured = capsys.readouterr()
    assert "--on-disk" in captured.err and "serving" not in captured.out


def test_a_truncated_store_file_is_detected_on_load(built, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built["disk"], copy)
    target = copy / "store-caption" / "logvar.npy"
    target.write_bytes(target.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"store-caption/logvar\.npy.*truncated"):
        GalleryIndex.load(copy)
    shutil.rmtree(copy / "store-image")
    with pytest.raises(FileNotFoundError, match="store-image"):
        GalleryIndex.load(copy)


def test_chunked_encoding_equals_the_whole_split_and_needs_split_order(built, monkeypatch):
    from pcmr.encode import inputs as encode
    from pcmr.hub import load
    from pcmr.train.loading import load_split, run_config

    loaded = load(str(built["run"]))
    split = load_split(None, "test", run_config(loaded), None)
    whole = encode.encode_images(loaded.network, split)
    chunks = list(encode.encode_split_chunks(loaded.network, split, loaded.vocabulary, "image", batch_size=64))
    assert [c.num for c in chunks] == [64, 64, 64, 64, 44]
    assert torch.allclose(torch.cat([c.mean for c in chunks]), whole.mean, atol=1e-6)
    original = encode.image_loader
    monkeypatch.setattr(encode, "image_loader", lambda split, size: list(original(split, size))[::-1])
    with pytest.raises(ValueError, match="in order"):
        list(encode.encode_split_chunks(loaded.network, split, loaded.vocabulary, "image", batch_size=64))


def test_item_uncertainties_are_saved_once_and_equal_the_stores(built):
    index = GalleryIndex.load(built["disk"])
    memory = GalleryIndex.load(built["memory"])
    assert set(index.uncertainty_cache) == {"image", "caption"}  # read from uncertainty.safetensors, not the stores
    for modality in ("image", "caption"):
        assert index.item_uncertainty(modality).tolist() == memory.item_uncertainty(modality).tolist()
    info = json.loads((built["disk"] / "index.json").read_text())
    assert info["uncertainty"] == {"file": "uncertainty.safetensors", "measure": "log_det"}
    assert "uncertainty.safetensors" in info["checksums"]
