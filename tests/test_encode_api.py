"""pcmr.load / Model: encoding raw texts and images, save_pretrained / from_pretrained (offline, local folders)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import pcmr
from pcmr.data import Vocabulary
from pcmr.data.images import IMAGE_MEAN, IMAGE_STD
from pcmr.hub import Model


@pytest.fixture(scope="module")
def run_dir(search_run_factory, tmp_path_factory):
    return search_run_factory(tmp_path_factory.mktemp("api") / "run")


@pytest.fixture(scope="module")
def model(run_dir):
    return pcmr.load(run_dir)


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    paths = []
    for i, size in enumerate([(20, 20), (33, 17), (16, 16), (40, 25), (7, 9)]):
        pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
        path = folder / f"img{i}.png"
        Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


def _reference_pixels(path, size: int) -> torch.Tensor:
    """Independent preprocessing: Pillow RGB + bicubic resize, then ImageNet normalisation in float64."""
    with Image.open(path) as image:
        array = np.asarray(image.convert("RGB").resize((size, size), Image.BICUBIC), dtype=np.float64) / 255.0
    normalised = (array - np.array(IMAGE_MEAN)) / np.array(IMAGE_STD)
    return torch.from_numpy(normalised).permute(2, 0, 1).float()


def test_load_attaches_vocabulary_options_and_image_size(tiny_shapes, run_dir, model):
    assert isinstance(model, Model) and not model.training
    assert model.vocabulary.words == Vocabulary.load(run_dir / "vocab.json").words
    assert model.similarity_options == {"match_prob": {"a": 3.0, "b": 1.0}}
    assert model.similarity == "match_prob"
    assert model.image_size == tiny_shapes["image_size"]  # read from the run's data, not guessed
    assert model.device == torch.device("cpu") and model.embed_dim == 4


def test_encode_text_matches_the_token_ids_path_at_any_batch_size(model):
    texts = ["a red circle", "a blue square on the left", "zzz qqq", "a circle", "red", "a green triangle", "two"]
    vocab = model.vocabulary
    ids = [vocab.encode(t) for t in texts]
    with torch.no_grad():
        expected = []
        for seq in ids:  # one caption at a time: no padding at all
            out = model.network.encode_captions({"captions": torch.tensor([seq]), "caption_lengths": torch.tensor([len(seq)])})
            expected.append(out)
    for batch_size in (1, 3, 7, 100):
        got = model.encode_text(texts, batch_size=batch_size)
        assert got.mean.shape == (7, 4) and got.logvar.shape[0] == 7
        for row, ref in enumerate(expected):
            torch.testing.assert_close(got.mean[row], ref.mean[0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(got.logvar[row], ref.logvar[0], rtol=1e-5, atol=1e-6)
    single = model.encode_text("a red circle")
    torch.testing.assert_close(single.mean[0], expected[0].mean[0], rtol=1e-5, atol=1e-6)


def test_encode_image_paths_pil_and_tensors_agree_with_independent_preprocessing(model, image_files):
    size = model.image_size
    reference = torch.stack([_reference_pixels(p, size) for p in image_files])  # [5, 3, S, S]
    with torch.no_grad():
        expected = model.network.encode_images({"images": reference})
    pil_images = [Image.open(p) for p in image_files]
    for images in (image_files, [str(p) for p in image_files], pil_images, list(reference), reference):
        for batch_size in (2, 5):
            got = model.encode_image(images, batch_size=batch_size)
            torch.testing.assert_close(got.mean, expected.mean, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got.logvar, expected.logvar, rtol=1e-4, atol=1e-4)
    one = model.encode_image(image_files[1])
    torch.testing.assert_close(one.mean[0], expected.mean[1], rtol=1e-4, atol=1e-4)


def test_old_encode_functions_give_the_same_embeddings(model, image_files):
    from pcmr.encode import inputs as encode

    torch.testing.assert_close(encode.encode_texts(model.network, model.vocabulary, ["a red circle"]).mean,
                               model.encode_text(["a red circle"]).mean)
    torch.testing.assert_close(encode.encode_image_files(model.network, image_files, image_size=model.image_size).mean,
                               model.encode_image(image_files).mean)


def test_encode_keeps_the_training_mode_and_returns_no_graph(model):
    model.network.train()
    try:
        out = model.encode_text(["a red circle"])
        assert model.network.training and not out.mean.requires_grad
    finally:
        model.network.eval()


@pytest.mark.parametrize("bad, error, words", [
    ([], ValueError, "at least one caption"),
    ([3], ValueError, "list of strings"),
])
def test_bad_text_input_is_refused(model, bad, error, words):
    with pytest.raises(error, match=words):
        model.encode_text(bad)


def test_bad_image_input_is_refused(model, tmp_path):
    with pytest.raises(TypeError, match=r"images\[0\] is a int"):
        model.encode_image([3])
    with pytest.raises(ValueError, match="at least one image"):
        model.encode_image([])
    with pytest.raises(ValueError, match="share one shape"):
        model.encode_image([torch.zeros(3, 16, 16), torch.zeros(3, 8, 8)])
    missing = tmp_path / "missing.png"
    with pytest.raises(Exception, match="missing.png"):
        model.encode_image([missing])


def test_save_pretrained_round_trip_is_exact(model, image_files, tmp_path):
    model.save_pretrained(tmp_path / "hf")
    names = sorted(p.name for p in (tmp_path / "hf").iterdir())
    assert names == ["README.md", "config.json", "metrics.json", "model.safetensors", "preprocessor_config.json",
                     "run_config.json", "similarity_options.json", "vocabulary.json"]
    preprocessor = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert preprocessor["input"] == "pixels" and preprocessor["image_size"] == model.image_size
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["embed_dim"] == 4
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: pcmr" in card and "match_prob" in card
    call = 'scores = pcmr.similarity.pairwise("match_prob", images, captions, a=3.0, b=1.0)'
    assert call in card  # the card's usage line scores with the trained a and b
    images, captions = model.encode_image(image_files), model.encode_text(["a red circle"])
    torch.manual_seed(0)  # match_prob is sampled: the same draws for both calls
    scores = eval(call.split(" = ", 1)[1], {"pcmr": pcmr, "images": images, "captions": captions})
    torch.manual_seed(0)
    torch.testing.assert_close(scores, pcmr.similarity.pairwise("match_prob", images, captions,
                                                                **model.similarity_options["match_prob"]))
    for loaded in (Model.from_pretrained(tmp_path / "hf"), pcmr.Model.from_pretrained(str(tmp_path / "hf")),
                   pcmr.load(tmp_path / "hf")):
        assert loaded.image_size == model.image_size and loaded.similarity_options == model.similarity_options
        torch.testing.assert_close(loaded.encode_text(["a red circle"]).mean, model.encode_text(["a red circle"]).mean,
                                   rtol=0, atol=0)
        torch.testing.assert_close(loaded.encode_image(image_files).logvar, model.encode_image(image_files).logvar,
                                   rtol=0, atol=0)


def test_model_card_lists_the_runs_metrics(search_run_factory, tmp_path):
    run = search_run_factory(tmp_path / "run")
    (run / "run.json").write_text(json.dumps({
        "status": "finished", "best_epoch": 2,
        "history": [{"epoch": 1, "val": {"rsum": 100.0}}, {"epoch": 2, "val": {"rsum": 212.5, "r_precision": 31.25}}]}))
    from pcmr.report import Report

    Report(title="pcmr evaluation", rows=[{"similarity": "cosine", "reranker": "nns", "i2t R@1": 41.5}]).save(
        run / "eval-test", plots=False)
    pcmr.load(run).save_pretrained(tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "rsum = 212.5" in card and "r_precision = 31.25" in card and "epoch = 2" in card
    assert "eval-test/results.json" in card and "41.5" in card
    assert json.loads((tmp_path / "hf" / "metrics.json").read_text())["validation"]["rsum"] == 212.5


def test_feature_model_takes_feature_tensors_only(tmp_path):
    network = pcmr.create_model("pcme", vocab_size=len(Vocabulary(["red", "circle"])), embed_dim=4,
                                image_encoder={"kind": "global_features", "feature_dim": 6},
                                text_encoder={"word_dim": 8, "hidden_dim": 8})
    model = Model(network, Vocabulary(["red", "circle"]), image_size=None)
    features = torch.randn(3, 6)
    out = model.encode_image(features)
    with torch.no_grad():
        torch.testing.assert_close(out.mean, network.eval().encode_images({"images": features}).mean)
    with pytest.raises(ValueError, match="precomputed image features"):
        model.encode_image([tmp_path / "x.png"])
    model.save_pretrained(tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text()) == {"input": "features"}
    assert Model.from_pretrained(tmp_path / "hf").image_size is None


def test_model_follows_its_device(model):
    assert model.encode_text(["a red circle"]).mean.device == model.device
    assert model.to("cpu").encode_image(torch.zeros(1, 3, 16, 16)).mean.device == torch.device("cpu")


def test_bad_paths_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        pcmr.load(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no-such-user/no-such-model"):
        Model.from_pretrained("no-such-user/no-such-model", local_files_only=True)
    with pytest.raises(ValueError, match="vocabulary"):
        Model(pcmr.create_model("pcme", vocab_size=10, embed_dim=4))


def test_load_which_and_the_run_it_came_from(run_dir):
    from pcmr.train.loading import run_config

    loaded = pcmr.load(run_dir / "model")
    whole = pcmr.load(run_dir)
    torch.testing.assert_close(loaded.encode_text(["a red circle"]).mean, whole.encode_text(["a red circle"]).mean)
    assert Vocabulary.load(run_dir / "vocab.json").words == loaded.vocabulary.words
    for model in (loaded, whole):
        assert model.run_dir == run_dir and model.source == run_dir / "model"
        assert run_config(model).data.name == "shapes"


def test_each_model_of_a_run_has_its_own_similarity_options(search_run_factory, tmp_path):
    import shutil

    run = search_run_factory(tmp_path / "run")
    shutil.copytree(run / "model", run / "model_last")  # the last epoch's options saved with its weights
    (run / "model_last" / "similarity_options.json").write_text(json.dumps({"match_prob": {"a": 5.0, "b": 2.0}}))
    last = pcmr.load(run, which="model_last")
    assert last.source == run / "model_last" and last.run_dir == run
    assert last.similarity_options == {"match_prob": {"a": 5.0, "b": 2.0}}
    assert pcmr.load(run).similarity_options == {"match_prob": {"a": 3.0, "b": 1.0}}  # RUN/similarity_options.json


def test_push_to_hub_uploads_the_saved_folder(model, monkeypatch):
    """push_to_hub goes through huggingface_hub (its network calls replaced here): the uploaded folder is the
    save_pretrained layout and the model card names the repository."""
    from types import SimpleNamespace

    from huggingface_hub import HfApi

    uploaded = {}

    def create_repo(self, repo_id, **kwargs):
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        folder = Path(folder_path)
        uploaded.update(repo_id=repo_id, names=sorted(p.name for p in folder.iterdir()),
                        card=(folder / "README.md").read_text())
        return "https://huggingface.co/user/pcme-shapes/commit/0"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    assert model.push_to_hub("user/pcme-shapes", token="not-used").startswith("https://huggingface.co/")
    assert uploaded["repo_id"] == "user/pcme-shapes"
    assert {"config.json", "model.safetensors", "vocabulary.json", "preprocessor_config.json",
            "README.md"} <= set(uploaded["names"])
    assert 'pcmr.Model.from_pretrained("user/pcme-shapes")' in uploaded["card"]


def test_a_trained_model_folder_opens_on_its_own(tmp_path):
    """`pcmr train` writes the image preprocessing beside the weights, so RUN/model copied elsewhere opens
    without the run folder or its data."""
    import shutil

    from pcmr.cli import main

    argv = ["train", "vsepp_max", "--out", str(tmp_path), "--name", "run", "--no-progress"]
    for item in ["data.options={num_train: 12, num_val: 4, num_test: 4, num_test_unseen: 1, num_binary_selection: 1, "
                 "image_size: 24, cache: false}", "data.batch_size=6", "train.epochs=1", "model.embed_dim=8",
                 "model.text_encoder={word_dim: 8, hidden_dim: 8}", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]:
        argv += ["--set", item]
    assert main(argv) == 0
    preprocessor = json.loads((tmp_path / "run" / "model" / "preprocessor_config.json").read_text())
    assert preprocessor["input"] == "pixels" and preprocessor["image_size"] == 24
    shutil.copytree(tmp_path / "run" / "model", tmp_path / "copy")
    alone = pcmr.load(tmp_path / "copy")
    assert alone.image_size == 24 and alone.vocabulary is not None
    torch.testing.assert_close(alone.encode_image(torch.zeros(2, 3, 24, 24)).mean,
                               pcmr.load(tmp_path / "run").encode_image(torch.zeros(2, 3, 24, 24)).mean)


def test_asking_the_image_size_draws_no_random_number(tiny_shapes):
    """The trainer asks for the image side when it saves a model: no random stream may move."""
    from pcmr.data import load_dataset
    from pcmr.encode.inputs import image_input_size

    split = load_dataset("shapes", "train", **tiny_shapes)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    assert image_input_size(split) == tiny_shapes["image_size"]
    assert torch.equal(torch.get_rng_state(), before)
