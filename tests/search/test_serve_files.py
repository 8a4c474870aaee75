"""`pcmr serve` sends only image files under the folder given when it starts (`--images DIR`, never a folder
the index names), and an index names only files inside its own folder: an edited `index.json` (with its
`manifest_sha256` recomputed, as anyone can) pointing at `/etc/passwd`, at `../secret`, through a symbolic
link or moving its recorded image root gets 404 from the server or an error at load; answers never carry a
path of the server's disk."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from pcmr.search import GalleryIndex
from pcmr.search.building import _image_source
from pcmr.search.image_files import confined_file, files_source, image_root, public_metadata
from pcmr.search.manifest import _manifest_digest
from pcmr.search.service import create_app


@pytest.fixture(scope="module")
def built(search_index_factory, tmp_path_factory):
    return GalleryIndex.load(search_index_factory(tmp_path_factory.mktemp("files"), backend="exact"))


def _file_gallery(built: GalleryIndex, folder: Path) -> tuple[Path, Path, Path]:
    """An index of 13 image files under ``folder/images`` (paths relative to that root), saved to
    ``folder/index``; also a secret file beside the root. Returns (index folder, image root, secret)."""
    root = folder / "images"
    (root / "sub").mkdir(parents=True)
    paths = []
    for i in range(built.images.num):
        path = root / "sub" / f"{i}.png"
        Image.fromarray(np.full((8, 8, 3), 10 * i, dtype=np.uint8)).save(path)
        paths.append(path)
    secret = folder / "secret.txt"
    secret.write_text("not part of the gallery")
    source, relative = files_source([str(p) for p in paths])
    index = GalleryIndex(built.images, built.captions, image_ids=built.image_ids, caption_ids=built.caption_ids,
                         caption_texts=built.caption_texts, image_metadata=[{"path": p} for p in relative],
                         similarity_options=built.similarity_options,
                         meta={**built.meta, "image_source": source}, model=built.model)
    index.save(folder / "index")
    return folder / "index", root, secret


def _edit_manifest(index_dir: Path, edit) -> None:
    """Edit ``index.json`` and recompute its digest (a plain hash: no signature)."""
    path = index_dir / "index.json"
    info = json.loads(path.read_text())
    edit(info)
    info["manifest_sha256"] = _manifest_digest(info)
    path.write_text(json.dumps(info))


def test_files_under_the_root_are_served_and_answers_carry_relative_paths(built, tmp_path):
    index_dir, root, _ = _file_gallery(built, tmp_path)
    info = json.loads((index_dir / "index.json").read_text())
    assert info["meta"]["image_source"] == {"kind": "files", "root": str(root / "sub")}
    assert info["image_metadata"][3] == {"path": "3.png"}
    client = TestClient(create_app(GalleryIndex.load(index_dir), image_folder=root / "sub"),
                        raise_server_exceptions=False)
    picture = client.get("/images/3")
    assert picture.status_code == 200 and picture.content == (root / "sub" / "3.png").read_bytes()
    body = client.get("/api/search", params={"text": "a red circle", "k": 5}).json()
    item = client.get("/api/images/3").json()
    shown = [hit["metadata"]["path"] for hit in body["results"]] + [item["metadata"]["path"]]
    assert all(not os.path.isabs(p) and str(tmp_path) not in p for p in shown)
    assert item["metadata"]["path"] == "3.png"


@pytest.mark.parametrize("named", ["/etc/passwd", "../../secret.txt", "sub/../../secret.txt", "link.png", "", 7])
def test_a_manifest_naming_a_file_outside_the_root_gets_404(built, tmp_path, named):
    index_dir, root, secret = _file_gallery(built, tmp_path)
    (root / "sub" / "link.png").symlink_to(secret)  # a link inside the root that leads out of it
    _edit_manifest(index_dir, lambda info: info["image_metadata"][0].update(path=named))
    client = TestClient(create_app(GalleryIndex.load(index_dir), image_folder=root / "sub"),
                        raise_server_exceptions=False)
    response = client.get("/images/0")
    assert response.status_code == 404 and "no image file" in response.json()["error"]
    assert b"not part of the gallery" not in response.content
    assert client.get("/images/1").status_code == 200  # the other items are still served
    shown = client.get("/api/images/0").json()["metadata"]
    assert "path" not in shown or not os.path.isabs(shown["path"])


@pytest.mark.parametrize(("root", "named"), [("/etc", "passwd"), ("//etc", "passwd"), ("/", "etc/passwd"),
                                              ("ABOVE", "secret.txt")])
def test_a_root_edited_in_the_manifest_moves_nothing(built, tmp_path, root, named):
    """The recorded root only says where the images were: the server serves from the folder it was given."""
    index_dir, images, _ = _file_gallery(built, tmp_path)

    def edit(info):
        info["meta"]["image_source"]["root"] = str(tmp_path) if root == "ABOVE" else root
        info["image_metadata"][0]["path"] = named

    _edit_manifest(index_dir, edit)
    index = GalleryIndex.load(index_dir)
    for folder in (images / "sub", None):
        client = TestClient(create_app(index, image_folder=folder), raise_server_exceptions=False)
        response = client.get("/images/0")
        assert response.status_code == 404 and b"root:" not in response.content
        assert b"not part of the gallery" not in response.content
        assert client.get("/images/1").status_code == (200 if folder else 404)
    assert client.get("/api/images/0").json()["image_url"] is None  # no folder given: no file is served


def test_the_image_folder_is_resolved_once_and_never_the_file_system_root(built, tmp_path):
    index_dir, images, _ = _file_gallery(built, tmp_path)
    index = GalleryIndex.load(index_dir)
    with pytest.raises(ValueError, match="is the file system root"):
        create_app(index, image_folder="/")
    with pytest.raises(ValueError, match="does not exist"):
        create_app(index, image_folder=tmp_path / "missing")
    (tmp_path / "link").symlink_to(images / "sub")
    client = TestClient(create_app(index, image_folder=tmp_path / "link"), raise_server_exceptions=False)
    (tmp_path / "link").unlink()
    (tmp_path / "link").symlink_to("/etc")  # repointed after start: the server keeps the folder it resolved
    _ = client.get("/images/2")
    assert client.get("/images/2").content == (images / "sub" / "2.png").read_bytes()


def test_older_indexes_with_absolute_paths(tmp_path):
    """Indexes built before roots were recorded: the root is the deepest folder of all their files, so a
    path elsewhere widens it to `/` and then nothing is served; paths are shown relative to it."""
    root = tmp_path / "pics"
    root.mkdir()
    metadata = [{"path": str(root / f"{i}.png")} for i in range(3)]
    for entry in metadata:
        Image.new("RGB", (4, 4)).save(entry["path"])
    assert image_root({}, metadata) == root
    assert confined_file(root, metadata[1]["path"]) == (root / "1.png").resolve()
    assert public_metadata(metadata[1], root) == {"path": "1.png"}
    assert image_root({}, [*metadata, {"path": "/etc/passwd"}]) is None
    assert confined_file(None, metadata[1]["path"]) is None
    assert public_metadata({"path": "/etc/passwd", "labels": ["x"]}, root) == {"labels": ["x"]}


def test_a_split_of_image_files_records_its_root(tmp_path):
    class Images:
        paths = [str(tmp_path / "a" / "x.jpg"), str(tmp_path / "a" / "b" / "y.jpg")]

    class Split:
        name, split, info, images, num_images = "coco", "test", {}, Images(), 2

    source, metadata = _image_source(Split())
    assert source == {"image_source": {"kind": "files", "root": str(tmp_path / "a")}}
    assert metadata == [{"path": "x.jpg"}, {"path": "b/y.jpg"}]


@pytest.mark.parametrize(("field", "edit"), [
    ("checksums", lambda info, outside: info["checksums"].update({"../outside.bin": "0" * 64})),
    ("checksums", lambda info, outside: info["checksums"].update({str(outside): "0" * 64})),
    ("model", lambda info, outside: info.update(model="../run/model")),
    ("vocab", lambda info, outside: info.update(vocab=str(outside))),
    ("ann.image.file", lambda info, outside: info["ann"]["image"].update(file="../outside.bin")),
])
def test_a_manifest_naming_a_file_outside_the_index_folder_does_not_load(search_index_factory, tmp_path, field, edit):
    index_dir = search_index_factory(tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    _edit_manifest(index_dir, lambda info: edit(info, outside))
    with pytest.raises(ValueError, match=f"field '{field}' names .* not inside the index folder"):
        GalleryIndex.load(index_dir)


def test_a_link_inside_the_index_folder_leading_out_does_not_load(search_index_factory, tmp_path):
    index_dir = search_index_factory(tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    (index_dir / "extra.bin").symlink_to(outside)
    _edit_manifest(index_dir, lambda info: info["checksums"].update({"extra.bin": "0" * 64}))
    with pytest.raises(ValueError, match="field 'checksums' names 'extra.bin', a link that leads out"):
        GalleryIndex.load(index_dir)


def test_pcmr_serve_warns_when_no_image_file_can_be_served(built, tmp_path, capsys, monkeypatch):
    """`pcmr serve` on an index of image files without `--images`: a warning naming the recorded folder before
    it listens; `--images /` is refused."""
    import uvicorn

    from pcmr.cli import main

    index_dir, images, _ = _file_gallery(built, tmp_path)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # bind, then serve nothing
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main(["serve", str(index_dir), "--port", str(port), "--no-access-log"]) == 0
    err = capsys.readouterr().err
    assert "no --images DIR was given, so no image file will be served" in err
    assert f"(pass --images {images / 'sub'} to serve them)" in err
    assert main(["serve", str(index_dir), "--port", str(port), "--no-access-log", "--images", "/"]) == 2
    assert "is the file system root" in capsys.readouterr().err
    assert main(["serve", str(index_dir), "--port", str(port), "--no-access-log", "--images", str(images)]) == 0
    assert "no image file will be served" not in capsys.readouterr().err
