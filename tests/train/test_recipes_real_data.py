"""The real-data recipes (recipes/real_data/pcme_coco.yaml, pcme_cub.yaml) trained through `pcmr train` on
small generated folders in the COCO and CUB layouts: both phases show in log.jsonl (the pretrained
image backbone and the GloVe word vectors frozen in the warm-up, trained after it), the backbone's
weights stay the pretrained ones through the warm-up and change in the fine-tune."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from _real_layouts import GLOVE_FIXTURE, write_coco_folder, write_cub_folder
from pcmr.cli import main
from pcmr.models.text_encoders import read_word_vectors
from pcmr.train.checkpoint import list_checkpoints, load_checkpoint
from pcmr.train.recipes import find_recipe, list_recipes, shipped_recipe_dir

#: a tiny run of a real-data recipe: 2 epochs (1 warm-up), 2 steps each, small sizes
TINY = ["model.embed_dim=8", "model.text_encoder.word_dim=6", "model.image_encoder.input_size=32",
        "data.options.image_size=32", "data.options.resize_size=36", "data.eval_batch_size=8",
        "train.epochs=2", "train.warmup_epochs=1", "train.cosine_epochs=2", "train.max_steps_per_epoch=2",
        "train.validate_every=2", "train.keep_checkpoints=4", "loss.num_samples=2", "eval.similarities=[cosine]"]
CUB_LAYOUT = {f"00{c}.Bird_{c}": [f"Bird_{c}_{n:04d}.jpg" for n in range(3)] for c in range(1, 6)}
CUB_SEEN = ["001.Bird_1/Bird_1_0000.jpg", "002.Bird_2/Bird_2_0001.jpg"]


def set_args(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def records(run_dir, event: str) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return [line for line in lines if line.get("event") == event]


def image_backbone(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The backbone's trained weights (not BatchNorm's running statistics, which move in train mode)."""
    return {k: v for k, v in weights.items() if k.startswith("model.image_tower.encoder.backbone.")
            and "running_" not in k and "num_batches" not in k}


def train_recipe(tmp_path, recipe: str, root, extra: list[str], capsys) -> tuple:
    argv = ["train", recipe, "--out", str(tmp_path), "--name", "run", "--no-progress",
            *set_args([f"data.root={root}", f"train.word_vectors={GLOVE_FIXTURE}", *TINY, *extra])]
    status = main(argv)
    assert status == 0, capsys.readouterr().err
    run_dir = tmp_path / "run"
    checkpoints = [load_checkpoint(path) for path in list_checkpoints(run_dir / "checkpoints")]
    return run_dir, {c.state["progress"]["global_step"]: c.weights for c in checkpoints}


def check_two_phases(run_dir, weights_by_step: dict[int, dict[str, torch.Tensor]]) -> None:
    phases = records(run_dir, "phase")
    assert [(p["phase"], p["epoch"]) for p in phases] == [("warmup", 1), ("finetune", 2)]
    warmup, finetune = phases
    for part in ("image_backbone", "word_embedding"):  # frozen, then trained
        assert warmup[part]["trainable"] == 0 and warmup[part]["frozen"] > 0, part
        assert finetune[part]["frozen"] == 0 and finetune[part]["trainable"] == warmup[part]["frozen"], part
    for part in ("caption_backbone", "heads"):  # the GRU and the heads train in both phases
        assert warmup[part]["frozen"] == 0 and finetune[part]["frozen"] == 0, part
    found = records(run_dir, "word_vectors")
    assert len(found) == 1 and found[0]["found"] > 0 and found[0]["match"] == "release"
    start, end_of_warmup, end = (weights_by_step[step] for step in (2, 2, 4))
    from pcmr.models.pretrained import EfficientNetLite0Backbone

    pretrained = {f"model.image_tower.encoder.backbone.{k}": v
                  for k, v in EfficientNetLite0Backbone(input_size=32).state_dict().items()}
    frozen = image_backbone(end_of_warmup)
    assert frozen and all(torch.equal(value, pretrained[key]) for key, value in frozen.items())
    trained = image_backbone(end)
    changed = [key for key, value in trained.items() if not torch.equal(value, pretrained[key])]
    assert len(changed) > len(trained) // 2  # the fine-tune moved the backbone
    vocab = json.loads((run_dir / "vocab.json").read_text())["words"]
    vectors, hit = read_word_vectors(GLOVE_FIXTURE, vocab, 6, match="release")
    embedding = "model.caption_tower.encoder.backbone.embedding.weight"
    assert torch.equal(start[embedding][hit], vectors[hit])  # GloVe rows, untouched through the warm-up
    assert not torch.equal(end[embedding][hit], vectors[hit])  # trained in the fine-tune


def test_real_data_recipes_are_listed_and_say_where_each_value_comes_from():
    names = {name for name, path in list_recipes().items() if path.parent == shipped_recipe_dir() / "real_data"}
    assert names == {"pcme_coco", "pcme_cub"}
    for name in names:
        text = find_recipe(name).read_text()
        raw = yaml.safe_load(text)
        assert raw["model"]["image_encoder"]["finetune"] is True and raw["train"]["warmup_epochs"] > 0
        assert raw["train"]["word_vectors"].endswith("glove.840B.300d.txt")
        for line in text.splitlines():  # every value line names its source
            if ":" in line and not line.lstrip().startswith("#") and not line.rstrip().endswith(":"):
                key = line.split(":")[0].strip()
                if key not in ("name", "seed", "similarities", "rerankers", "erase_aspect", "resize_size",
                               "image_size", "word_dropout_rule", "root"):
                    assert "#" in line or "grad_clip" in key, f"{name}: {line.strip()} names no source"


def test_pcme_coco_trains_both_phases_through_the_command(tmp_path, capsys):
    root = write_coco_folder(tmp_path / "coco")
    run_dir, weights = train_recipe(tmp_path, "pcme_coco", root, ["data.batch_size=4"], capsys)
    check_two_phases(run_dir, weights)
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "finished" and summary["history"][-1]["val"] is not None


def test_pcme_cub_trains_both_phases_with_the_release_protocol(tmp_path, capsys):
    root = write_cub_folder(tmp_path / "cub", CUB_LAYOUT, list(CUB_LAYOUT)[:3], list(CUB_LAYOUT)[3:], CUB_SEEN)
    run_dir, weights = train_recipe(tmp_path, "pcme_cub", root, ["data.batch_size=3"], capsys)
    check_two_phases(run_dir, weights)
    summary = json.loads((run_dir / "run.json").read_text())
    history = summary["history"]
    assert history[0]["val"] is None and history[1]["val"] is not None  # validated once, at the end, on test
    start = records(run_dir, "start")[0]
    assert start["steps_per_epoch"] == 2


def test_word_vectors_errors_name_the_key(tmp_path, capsys):
    root = write_coco_folder(tmp_path / "coco", {"train": 2, "val": 1, "test": 1})
    argv = ["train", "pcme_coco", "--out", str(tmp_path), "--name", "run", "--no-progress",
            *set_args([f"data.root={root}", *TINY])]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "train.word_vectors" in err and "glove.840B.300d.txt" in err and "does not exist" in err


@pytest.mark.parametrize("line", ["the 0.1 0.2\n", "the 0.1 0.2 x 0.4 0.5 0.6\n"])
def test_bad_word_vector_file_names_file_and_line(tmp_path, line):
    path = tmp_path / "vectors.txt"
    path.write_text("a 1 2 3 4 5 6\n" + line)
    with pytest.raises(ValueError, match=r"vectors.txt' line 2"):
        read_word_vectors(path, ["<pad>", "the"], 6)


def test_glove_words_with_spaces_and_headers_are_read(tmp_path):
    """glove.840B.300d.txt has a few words with spaces; word2vec-style files start with 'count dim'."""
    path = tmp_path / "vectors.txt"
    path.write_text("3 2\n. . . 1 2\nthe 3 4\nat name 5 6\n")
    vectors, found = read_word_vectors(path, ["<pad>", "the", ". . .", "at name"], 2)
    assert found.tolist() == [False, True, True, True] and vectors[2].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("recipe", ["pcme_coco", "pcme_cub"])
def test_a_missing_dataset_folder_names_data_root(tmp_path, capsys, recipe):
    assert main(["train", recipe, "--out", str(tmp_path), "--name", "run", "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "data.root" in err and "--set data.root=" in err
