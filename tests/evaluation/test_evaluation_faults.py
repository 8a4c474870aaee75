"""Evaluation refuses what it cannot trust: NaN embeddings or weights, a vocabulary that is not the model's."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from pcmr.cli import main
from pcmr.evaluation import evaluate_embeddings, evaluate_model
from pcmr.finite import check_finite_tensors
from pcmr.gaussian import Gaussian

SHAPES = dict(image_size=16, num_train=12, num_val=6, num_test=13, num_test_unseen=1, num_binary_selection=1,
              cache=False)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_run_factory):
    """A run folder as `pcmr train` writes it (untrained weights are enough here)."""
    return tiny_run_factory(tmp_path_factory.mktemp("run"), shapes=SHAPES,
                            eval_section={"similarities": ["cosine"], "rerankers": ["nns"]}, vocabulary_in_model=True)


def copy_run(run_dir, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(run_dir, target)
    return target


def error_line(capsys, argv):
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("pcmr evaluate: error: "), err
    return err


def test_the_untouched_run_passes_the_checks(run_dir):
    import pcmr

    loaded = pcmr.load(run_dir)
    assert len(loaded.vocabulary) == loaded.network.config.vocab_size


def test_nan_in_the_model_weights_file(run_dir, tmp_path, capsys):
    run = copy_run(run_dir, tmp_path)
    weights_path = run / "model" / "model.safetensors"
    tensors = load_file(str(weights_path))
    name = next(k for k, v in tensors.items() if v.is_floating_point() and v.dim() == 2)
    tensors[name][1, 0] = float("nan")
    save_file(tensors, str(weights_path))
    err = error_line(capsys, ["evaluate", str(run), "--out", str(tmp_path / "out")])
    assert f"{weights_path}: rows [1] of tensor {name!r}" in err and "holds NaN or inf" in err


def test_vocabulary_of_another_size(run_dir, tmp_path, capsys):
    from pcmr.data import Vocabulary

    run = copy_run(run_dir, tmp_path)
    saved = run / "model" / "vocabulary.json"  # the vocabulary saved with the model is the one used
    vocab = Vocabulary.load(saved)
    Vocabulary([*vocab.words[4:], "extra"]).save(saved)
    err = error_line(capsys, ["evaluate", str(run), "--out", str(tmp_path / "out")])
    assert f"{saved} holds {len(vocab) + 1} words but the model in {run / 'model'} embeds " \
           f"{len(vocab)} token ids" in err


def test_vocabulary_of_the_same_size_but_other_words(run_dir, tmp_path, capsys):
    from pcmr.data import Vocabulary

    run = copy_run(run_dir, tmp_path)
    words = Vocabulary.load(run / "vocab.json").words[4:]
    other = tmp_path / "other-vocab.json"
    Vocabulary([*words[:-1], "zzzz"]).save(other)
    err = error_line(capsys, ["evaluate", str(run), "--vocab", str(other), "--out", str(tmp_path / "out")])
    assert f"{other} differs from {run / 'model' / 'vocabulary.json'}" in err


def test_nan_embeddings_name_their_source_and_rows(run_dir):
    import pcmr
    from pcmr.data import load_dataset

    images = Gaussian(torch.zeros(3, 2), torch.zeros(3, 2))
    captions = Gaussian(torch.zeros(4, 2), torch.zeros(4, 2))
    captions.logvar[2, 1] = float("inf")
    with pytest.raises(ValueError, match=r"the embeddings given to evaluate_embeddings: rows \[2\] of tensor "
                                         r"'caption_logvar' \(4, 2\) holds NaN or inf"):
        evaluate_embeddings(images, captions, torch.eye(3, 4, dtype=torch.bool), similarities=["cosine"],
                            rerankers=["nns"])
    trained = pcmr.load(run_dir)
    model = trained.network
    encode_images = model.encode_images

    def diverged(batch):  # a model whose image means went NaN for one image
        gaussian = encode_images(batch)
        gaussian.mean[batch["image_index"] == 5] = float("nan")
        return gaussian

    model.encode_images = diverged
    split = load_dataset("shapes", "test", **SHAPES)
    with pytest.raises(ValueError, match=r"the embeddings of RetrievalSplit\(name='shapes', split='test'.* "
                                         r"encoded by the model: Gaussian.mean holds 4 non-finite value"):
        evaluate_model(trained, split, similarities=["cosine"], rerankers=["nns"])


def test_check_finite_tensors_of_scalars_and_integers():
    check_finite_tensors({"n": torch.tensor(3), "ids": torch.arange(4)}, "file")
    with pytest.raises(ValueError, match="file: tensor 'a' \\(\\) holds NaN or inf"):
        check_finite_tensors({"a": torch.tensor(float("nan"))}, "file")


def test_ids_that_are_not_coco_ids_are_never_matched_to_cxc_or_eccv():
    from pcmr.data import RetrievalSplit
    from pcmr.data.images import FeatureImages
    from pcmr.encode.checks import coco_id_problem
    from pcmr.evaluation.evaluator import _load_extra_positives

    def split(**info):
        return RetrievalSplit(name="coco", split="test", images=FeatureImages(torch.zeros(2, 3).numpy()),
                              caption_texts=["a", "b"], caption_image=torch.tensor([0, 1]).numpy(),
                              info={"extra_positive_sets": ["cxc", "eccv"], **info})  # as the COCO loaders say

    sentids = split(image_id_kind="coco", caption_id_kind="karpathy_sentid")
    assert "karpathy_sentid ids, not COCO caption annotation ids; load the split with coco_captions" in \
        coco_id_problem(sentids)
    assert "karpathy_imgid ids, not COCO image ids" in coco_id_problem(split(image_id_kind="karpathy_imgid"))
    assert coco_id_problem(split(image_id_kind="coco", caption_id_kind="coco_annotation")) is None
    extras, note = _load_extra_positives(sentids, None)  # the COCO default: reported as absent, with the reason
    assert extras == [] and note.startswith("CxC / ECCV Caption metrics not reported (the captions of")
    with pytest.raises(ValueError, match="not COCO caption annotation ids"):  # asked for explicitly: an error
        _load_extra_positives(sentids, ["cxc"])
