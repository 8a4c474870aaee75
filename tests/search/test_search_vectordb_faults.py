"""Milvus collections are never shared or lost between indexes: each build names its collections by a
build id that ``index.json`` records; a second index at the same uri and prefix makes its own; a
rebuild (``--overwrite``) or ``--add`` that fails at any step leaves the old folder on its old
collections; the replaced collections go only once the new folder is in place, and those of a failed
build are dropped by the next build."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from _faults import full_disk_at
from pcmr import Gaussian
from pcmr.cli import main
from pcmr.search import GalleryIndex

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")


def embeddings(path, seed: int, images: int = 30, captions: int = 40):
    gen = torch.Generator().manual_seed(seed)
    tensors = {f"{name}_{part}": (1.0 if part == "mean" else 0.3) * torch.randn(n, 6, generator=gen)
               for name, n in (("image", images), ("caption", captions)) for part in ("mean", "logvar")}
    save_file(tensors, str(path), metadata={"caption_texts": json.dumps([f"c{i}" for i in range(captions)])})
    return path


QUERY = Gaussian(torch.randn(4, 6, generator=torch.Generator().manual_seed(9)),
                 0.3 * torch.randn(4, 6, generator=torch.Generator().manual_seed(8)))


def top(index_dir) -> list[list[int]]:
    index = GalleryIndex.load(index_dir)
    return index.search(QUERY, k=5, similarity="wasserstein", backend="milvus").indices.tolist()


def collections(uri) -> list[str]:
    from pcmr.search.vectordb import milvus_client

    return sorted(milvus_client(uri).list_collections())


def build(index_dir, source, uri, *extra) -> int:
    return main(["search", str(index_dir), "--from-embeddings", str(source), "--backend", "milvus", "--uri", uri,
                 "--similarity", "wasserstein", *extra])



def test_a_second_index_at_the_same_uri_and_prefix_keeps_the_first_ones_collections(tmp_path, capsys):
    uri = str(tmp_path / "g.db")
    assert build(tmp_path / "a", embeddings(tmp_path / "a.safetensors", 0), uri) == 0
    first = top(tmp_path / "a")
    assert build(tmp_path / "b", embeddings(tmp_path / "b.safetensors", 1), uri) == 0
    assert top(tmp_path / "a") == first  # untouched by the second build
    assert top(tmp_path / "b") != first
    ids = {json.loads((tmp_path / name / "index.json").read_text())["ann"]["image"]["build_id"] for name in "ab"}
    assert len(ids) == 2
    assert collections(uri) == sorted(f"pcmr_{m}_{i}" for m in ("image", "caption") for i in ids)


def test_a_collection_of_another_build_is_a_clear_error(tmp_path):
    from pcmr.search.manifest import _manifest_digest

    uri = str(tmp_path / "g.db")
    assert build(tmp_path / "a", embeddings(tmp_path / "a.safetensors", 0), uri) == 0
    meta = tmp_path / "a" / "index.json"
    info = json.loads(meta.read_text())
    recorded = info["ann"]["image"]["build_id"]
    info["ann"]["image"]["build_id"] = "0123456789abcdef"
    info["manifest_sha256"] = _manifest_digest(info)
    meta.write_text(json.dumps(info))
    with pytest.raises(ValueError) as caught:
        GalleryIndex.load(tmp_path / "a")
    assert str(caught.value) == (f"{uri}: collection 'pcmr_image_{recorded}' holds build {recorded} but {meta} was "
                                 "saved with build 0123456789abcdef; the collection was replaced by another index, "
                                 "rebuild this one")


@pytest.mark.parametrize("operation", ["overwrite", "add"])
def test_a_failed_rebuild_or_add_leaves_the_old_index_on_its_old_collections(tmp_path, monkeypatch, capsys,
                                                                           operation):
    uri = str(tmp_path / "g.db")
    index_dir = tmp_path / "a"
    assert build(index_dir, embeddings(tmp_path / "a.safetensors", 0), uri) == 0
    first, old = top(index_dir), collections(uri)
    other = embeddings(tmp_path / "b.safetensors", 1, images=5, captions=7)
    command = (["search", str(index_dir), "--add", str(other)] if operation == "add" else
               ["search", str(index_dir), "--from-embeddings", str(other), "--backend", "milvus", "--uri", uri,
                "--similarity", "wasserstein", "--overwrite"])
    for k in (1, 2, 3, 4):  # the files of the new folder, the old folder set aside, the new one renamed in
        with monkeypatch.context() as patch:
            full_disk_at(patch, k, index_dir)
            assert main(command) == 1, k
        assert "is intact" in capsys.readouterr().err
        assert top(index_dir) == first, k  # the old folder, on its own collections
        assert set(old) <= set(collections(uri))  # the failed build's collections may stay until the next build
    assert main(command) == 0
    info = json.loads((index_dir / "index.json").read_text())
    now = sorted(entry["collection"] for entry in info["ann"].values())
    assert collections(uri) == now and not set(now) & set(old)  # old and failed builds' collections dropped
    index = GalleryIndex.load(index_dir)
    expected = (35, 47) if operation == "add" else (5, 7)
    assert (index.ann["image"].ntotal, index.ann["caption"].ntotal) == expected


@pytest.mark.parametrize("step", ["cleanup", "file:1"])
def test_collections_orphaned_by_a_killed_add_are_dropped_by_the_next_build(tmp_path, step):
    """kill -9 of an --add after its new folder was in place ("cleanup": the old collections, committed, are
    no longer named) or while writing it ("file:1": the new ones were never saved): the next build with
    the prefix drops exactly the collections no index names."""
    from milvus_lite.server_manager import server_manager_instance

    from _kill_runner import pcmr_process

    uri = str(tmp_path / "g.db")
    index_dir = tmp_path / "a"
    assert build(index_dir, embeddings(tmp_path / "a.safetensors", 0), uri) == 0
    server_manager_instance.release_server(uri)  # one process at a time opens a Milvus Lite file
    killed = pcmr_process(step, "search", str(index_dir), "--add",
                          str(embeddings(tmp_path / "more.safetensors", 1, images=5, captions=7)))
    assert killed.returncode == -9, killed.stderr
    if step == "cleanup":  # the old and the new build's collections, the old ones committed but named by no index
        assert len(collections(uri)) == 4
    assert build(tmp_path / "b", embeddings(tmp_path / "b.safetensors", 2), uri) == 0
    named = sorted(entry["collection"] for folder in (index_dir, tmp_path / "b")
                   for entry in json.loads((folder / "index.json").read_text())["ann"].values())
    assert collections(uri) == named
    assert top(index_dir) == top(index_dir) and GalleryIndex.load(index_dir).ann["image"].ntotal == (
        35 if step == "cleanup" else 30)


def test_a_milvus_uri_in_a_folder_that_refuses_files_fails_before_encoding(tmp_path, capsys):
    source = embeddings(tmp_path / "a.safetensors", 0)
    assert build(tmp_path / "a", source, "/proc/x.db") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("pcmr search: error: --uri /proc/x.db: Milvus Lite cannot write "
                                                   "/proc/x.db (")
    assert not (tmp_path / "a").exists()
