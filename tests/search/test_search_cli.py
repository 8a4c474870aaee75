"""`pcmr search` with the faiss backend: building (printed choice), saved embeddings, adding, refusals."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from pcmr import Gaussian
from pcmr.cli import main
from pcmr.search import GalleryIndex


@pytest.fixture(scope="module")
def run_dir(search_run_factory, tmp_path_factory):
    return search_run_factory(tmp_path_factory.mktemp("cli") / "run")


def test_build_with_faiss_prints_the_chosen_structure_and_searches(run_dir, tmp_path, capsys):
    assert main(["search", str(tmp_path / "idx"), "--build", str(run_dir), "--backend", "faiss",
                 "--similarity", "kl"]) == 0
    out = capsys.readouterr().out
    assert "faiss index over 13 images: flat (chosen by gallery size), score wasserstein" in out
    info = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert info["backend"] == "faiss" and info["ann"]["caption"]["ntotal"] == 65
    assert main(["search", str(tmp_path / "idx"), "--text", "a red circle", "-k", "3", "--similarity", "kl",
                 "--rerank", "csls", "--json"]) == 0
    fast = json.loads(capsys.readouterr().out)[0]["results"]
    assert main(["search", str(tmp_path / "idx"), "--text", "a red circle", "-k", "3", "--similarity", "kl",
                 "--backend", "exact", "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)[0]["results"]
    assert len(fast) == len(exact) == 3
    assert main(["search", str(tmp_path / "idx"), "--text", "a red circle", "--similarity", "kl",
                 "--candidates", "65", "--json"]) == 0
    assert [h["index"] for h in json.loads(capsys.readouterr().out)[0]["results"][:3]] == [h["index"] for h in exact]


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_query_is_refused(run_dir, tmp_path, capsys, text):
    assert main(["search", str(tmp_path / "idx"), "--build", str(run_dir)]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "idx"), "--text", text]) == 2
    assert "--text must be a non-empty caption" in capsys.readouterr().err
    index = GalleryIndex.load(tmp_path / "idx")
    with pytest.raises(ValueError, match="non-empty strings"):
        index.search_text(text)


def test_missing_index_hint_names_the_build_command(tmp_path, capsys):
    assert main(["search", str(tmp_path / "nope"), "--text", "x"]) == 2
    err = capsys.readouterr().err
    assert f"pcmr search {tmp_path / 'nope'} --build RUN_OR_MODEL" in err and "search build" not in err


def test_build_from_saved_embeddings_then_add(tmp_path, capsys):
    gen = torch.Generator().manual_seed(0)
    first = Gaussian(torch.randn(60, 8, generator=gen), 0.3 * torch.randn(60, 8, generator=gen))
    more = Gaussian(torch.randn(15, 8, generator=gen), 0.3 * torch.randn(15, 8, generator=gen))
    captions = Gaussian(torch.randn(20, 8, generator=gen), 0.3 * torch.randn(20, 8, generator=gen))
    save_file({"image_mean": first.mean, "image_logvar": first.logvar, "caption_mean": captions.mean,
               "caption_logvar": captions.logvar}, str(tmp_path / "a.safetensors"),
              metadata={"caption_texts": json.dumps([f"text {i}" for i in range(20)])})
    save_file({"image_mean": more.mean, "image_logvar": more.logvar}, str(tmp_path / "b.safetensors"))
    assert main(["search", str(tmp_path / "idx"), "--from-embeddings", str(tmp_path / "a.safetensors"),
                 "--backend", "faiss", "--index-type", "hnsw", "--modality", "image", "--shard-size", "16",
                 "--similarity", "wasserstein"]) == 0
    assert "faiss index over 60 images: hnsw (requested), score wasserstein" in capsys.readouterr().out
    assert main(["search", str(tmp_path / "idx"), "--add", str(tmp_path / "b.safetensors"), "--shard-size", "4"]) == 0
    assert "now 75 images, 20 captions" in capsys.readouterr().out
    index = GalleryIndex.load(tmp_path / "idx")
    assert index.ann["image"].ntotal == 75 and index.image_ids[-1] == 74 and "caption" not in index.ann
    whole = Gaussian(torch.cat([first.mean, more.mean]), torch.cat([first.logvar, more.logvar]))
    assert torch.equal(index.images.mean, whole.mean) and index.caption_texts[3] == "text 3"
    hits = index.search(more[:2], k=1, similarity="wasserstein")
    assert hits.indices[:, 0].tolist() == [60, 61]  # an added item is its own nearest neighbour
    assert main(["search", str(tmp_path / "idx"), "--text", "a circle"]) == 2
    assert "no model" in capsys.readouterr().err
    assert main(["search", str(tmp_path / "x"), "--from-embeddings", str(tmp_path / "a.safetensors"),
                 "--add", str(tmp_path / "b.safetensors")]) == 2
    assert "only one of" in capsys.readouterr().err


@pytest.mark.parametrize("tensor", ["image_mean", "image_logvar"])
def test_embeddings_file_with_nan_is_refused(tmp_path, capsys, tensor):
    gen = torch.Generator().manual_seed(1)
    tensors = {"image_mean": torch.randn(12, 4, generator=gen), "image_logvar": 0.3 * torch.randn(12, 4, generator=gen)}
    tensors[tensor][5, 2] = float("nan")
    save_file(tensors, str(tmp_path / "bad.safetensors"))
    assert main(["search", str(tmp_path / "idx"), "--from-embeddings", str(tmp_path / "bad.safetensors")]) == 2
    err = capsys.readouterr().err
    field = tensor.split("_")[1]
    assert f"{tmp_path / 'bad.safetensors'}: Gaussian.{field} holds 1 non-finite value(s) (NaN or inf)" in err
    assert not (tmp_path / "idx").exists()  # nothing half-built


def _small_gallery_file(path, num_images=500, num_captions=60, dim=16):
    gen = torch.Generator().manual_seed(3)
    images = Gaussian(torch.randn(num_images, dim, generator=gen), 0.3 * torch.randn(num_images, dim, generator=gen))
    captions = Gaussian(torch.randn(num_captions, dim, generator=gen),
                        0.3 * torch.randn(num_captions, dim, generator=gen))
    save_file({"image_mean": images.mean, "image_logvar": images.logvar, "caption_mean": captions.mean,
               "caption_logvar": captions.logvar}, str(path))


@pytest.mark.parametrize("opq", [False, True])
def test_ivfpq_on_a_small_gallery_prints_one_line_instead_of_faiss_kmeans_warnings(tmp_path, capfd, opq):
    _small_gallery_file(tmp_path / "e.safetensors")
    args = ["search", str(tmp_path / "idx"), "--from-embeddings", str(tmp_path / "e.safetensors"), "--backend",
            "faiss", "--index-type", "ivfpq", "--modality", "image", "--similarity", "wasserstein",
            *(["--opq"] if opq else [])]
    assert main(args) == 0
    err = capfd.readouterr().err
    assert "WARNING clustering" not in err  # faiss's own lines (one per sub-quantizer) are gone
    lines = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("warning: image index: IVF-PQ trained its 256-centroid k-means")
    assert "--index-type flat" in lines[0]


def test_quieting_faiss_kmeans_leaves_the_trained_index_unchanged(monkeypatch):
    import faiss

    import pcmr.search.ann as ann_module

    gen = torch.Generator().manual_seed(4)
    gallery = Gaussian(torch.randn(400, 16, generator=gen), 0.3 * torch.randn(400, 16, generator=gen))
    quiet = ann_module.build_ann(gallery, "wasserstein", "ivfpq", nlist=8, pq_m=8, opq=True)
    monkeypatch.setattr(ann_module, "_quiet_kmeans", lambda index, faiss: [])
    loud = ann_module.build_ann(gallery, "wasserstein", "ivfpq", nlist=8, pq_m=8, opq=True)
    assert bytes(faiss.serialize_index(quiet.index)) == bytes(faiss.serialize_index(loud.index))


def test_ivf_on_a_tiny_gallery_prints_one_line_per_cause(tmp_path, capfd):
    _small_gallery_file(tmp_path / "e.safetensors", num_images=30, num_captions=20)
    assert main(["search", str(tmp_path / "idx"), "--from-embeddings", str(tmp_path / "e.safetensors"), "--backend",
                 "faiss", "--index-type", "ivf", "--nlist", "2"]) == 0
    err = capfd.readouterr().err
    assert "WARNING clustering" not in err
    lines = [line for line in err.splitlines() if line.startswith("warning:")]
    assert lines == ["warning: image and caption indexes: IVF trained its 2-centroid k-means on fewer items than faiss "
                     "asks for (78), so its candidates are coarse; for a gallery this small use --index-type flat "
                     "(exact) or hnsw"]


def test_the_trained_similarity_is_the_default(run_dir, tmp_path, capsys):
    """A PCME run trained with match_prob (a=3, b=1): `--build` indexes for it (faiss over CSD, the ANN score
    of match_prob) and queries rank by it, with the trained a and b, unless --similarity says otherwise."""
    index_dir = tmp_path / "idx"
    assert main(["search", str(index_dir), "--build", str(run_dir), "--backend", "faiss"]) == 0
    assert "score csd" in capsys.readouterr().out
    assert main(["search", str(index_dir), "--text", "a red circle", "-k", "4", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)[0]
    index = GalleryIndex.load(index_dir)
    expected = index.search_text("a red circle", k=4, similarity="match_prob", a=3.0, b=1.0)
    assert shown["similarity"] == "match_prob"
    assert [h["index"] for h in shown["results"]] == expected.indices[0].tolist()
    assert [h["score"] for h in shown["results"]] == pytest.approx(expected.scores[0].tolist())
    assert main(["search", str(index_dir), "--text", "a red circle", "--similarity", "cosine", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["similarity"] == "cosine"


def test_option_takes_the_evaluate_form_and_the_older_one(run_dir, tmp_path, capsys):
    """``--option NAME.OPTION=VALUE`` as ``pcmr evaluate`` takes it (the re-ranker's or the score's), the
    deprecated ``OPTION=VALUE`` giving the same results; an option of an unselected owner is refused."""
    index = str(tmp_path / "idx")
    assert main(["search", index, "--build", str(run_dir)]) == 0
    capsys.readouterr()

    def results(*extra):
        assert main(["search", index, "--text", "a red circle", "-k", "4", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)[0]["results"]

    assert results("--rerank", "csls", "--option", "csls.csls_k=2") == results("--rerank", "csls", "--option", "csls_k=2")
    assert results("--rerank", "is", "--option", "is.beta=7") == results("--rerank", "is", "--option", "beta=7")
    scaled = results("--similarity", "match_prob", "--option", "match_prob.a=9.0", "--option", "match_prob.b=2.0")
    index_object = GalleryIndex.load(index)
    direct = index_object.search_text("a red circle", k=4, similarity="match_prob", a=9.0, b=2.0)
    assert [h["index"] for h in scaled] == direct.indices[0].tolist()
    for extra, message in ((["--option", "is.beta=30"], "'is' is neither the --rerank re-ranker (nns) nor the "
                                                         "--similarity score (match_prob)"),
                           (["--rerank", "csls", "--option", "csls.csl_k=3"], "has no option 'csl_k' (did you mean"),
                           (["--rerank", "is", "--option", "is.beta=abc"], "beta must be a finite number > 0"),
                           (["--option", "a.b.c=1"], "expected NAME.OPTION=VALUE"),
                           (["--option", "beta=abc"], "VALUE must be a number")):
        assert main(["search", index, "--text", "a red circle", *extra]) == 2
        assert message in capsys.readouterr().err, extra
