"""A gallery index holds a pcmr.Model: built from one, queries encoded by its ``encode_text`` /
``encode_image``, saved as its ``save_pretrained`` folder; an index of the older layout (the network in
``model/``, ``vocab.json`` beside it, the image size in ``meta``) still loads and answers the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import pcmr
from pcmr.data import load_dataset
from pcmr.models import save_model
from pcmr.search import GalleryIndex
from pcmr.search.manifest import _manifest_digest, _sha256


@pytest.fixture(scope="module")
def built(search_run_factory, tiny_shapes, tmp_path_factory):
    root = tmp_path_factory.mktemp("model-folder")
    run = search_run_factory(root / "run")
    model = pcmr.load(run)
    index = GalleryIndex.build(model, load_dataset("shapes", "test", **tiny_shapes))
    index.save(root / "index")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(root / "q.png")
    return root, model, index


def test_the_index_keeps_the_model_and_saves_its_pretrained_folder(built):
    root, model, index = built
    assert isinstance(index.model, pcmr.Model) and index.model.network is model.network
    assert index.similarity_options == model.similarity_options == {"match_prob": {"a": 3.0, "b": 1.0}}
    info = json.loads((root / "index" / "index.json").read_text())
    assert info["version"] == 3 and info["model"] == "model" and "vocab" not in info
    assert not (root / "index" / "vocab.json").exists()
    assert {"config.json", "model.safetensors", "vocabulary.json", "preprocessor_config.json",
            "similarity_options.json"} <= {p.name for p in (root / "index" / "model").iterdir()}
    assert all(f"model/{p.name}" in info["checksums"] for p in (root / "index" / "model").iterdir())
    saved = pcmr.load(root / "index" / "model")  # a save_pretrained folder: pcmr.load opens it as it is
    assert saved.image_transform == index.model.image_transform and saved.similarity_options == model.similarity_options
    torch.testing.assert_close(saved.encode_text(["a red circle"]).mean, model.encode_text(["a red circle"]).mean)


def test_queries_are_encoded_by_the_models_own_methods(built):
    root, model, index = built
    loaded = GalleryIndex.load(root / "index")
    text = loaded.search_text(["a red circle"], k=3, similarity="kl")
    direct = loaded.search(model.encode_text(["a red circle"]), k=3, similarity="kl", modality="caption")
    assert torch.equal(text.indices, direct.indices) and torch.equal(text.scores, direct.scores)
    image = loaded.search_image(root / "q.png", k=3)
    direct = loaded.search(model.encode_image([str(root / "q.png")]), k=3, modality="image")
    assert torch.equal(image.indices, direct.indices)


def _as_version_2(folder: Path, network, vocabulary, image_size: int) -> None:
    """Rewrite ``folder`` (a version-3 index) in the layout of versions 1 and 2."""
    shutil.rmtree(folder / "model")
    save_model(network, folder / "model")
    vocabulary.save(folder / "vocab.json")
    info = json.loads((folder / "index.json").read_text())
    info.update(version=2, vocab="vocab.json", meta={**info["meta"], "image_size": image_size})
    files = [name for name in info["checksums"] if not name.startswith("model/")]
    files += ["vocab.json"] + [f"model/{p.name}" for p in (folder / "model").iterdir()]
    info["checksums"] = {name: _sha256(folder / name) for name in files}
    info["manifest_sha256"] = _manifest_digest(info)
    (folder / "index.json").write_text(json.dumps(info))


def test_an_index_of_the_older_layout_loads_and_answers_the_same(built, tmp_path):
    root, model, index = built
    old = tmp_path / "old"
    shutil.copytree(root / "index", old)
    _as_version_2(old, model.network, model.vocabulary, index.model.image_size)
    legacy, current = GalleryIndex.load(old), GalleryIndex.load(root / "index")
    assert isinstance(legacy.model, pcmr.Model) and legacy.model.image_transform == current.model.image_transform
    for similarity in ("kl", "match_prob"):
        a = legacy.search_text(["a red circle", "two blue squares"], k=4, similarity=similarity, rerank="csls")
        b = current.search_text(["a red circle", "two blue squares"], k=4, similarity=similarity, rerank="csls")
        assert torch.equal(a.indices, b.indices) and torch.equal(a.scores, b.scores)
    a, b = legacy.search_image(root / "q.png", k=3), current.search_image(root / "q.png", k=3)
    assert torch.equal(a.indices, b.indices) and torch.equal(a.scores, b.scores)
