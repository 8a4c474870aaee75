"""The README's own-images quickstart (train, evaluate, search), run as written on generated data: an image
folder with a captions CSV, the same images as a Hugging Face ``save_to_disk`` folder and as webdataset
shards. A tiny model and one epoch are added to the training command so that each run takes seconds."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from tests._own_data import make_folder, make_hf, make_shards, samples

from pcmr.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: a tiny model, one epoch and a batch that fits 16 training images (the recipe's 128 is for thousands)
FAST_TRAINING = ["--no-progress", "--set", "data.batch_size=8", "--set", "train.epochs=1",
                 "--set", "model.embed_dim=8", "--set", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
                 "--set", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]
#: one score and one re-ranker (the run's default list computes five scores)
FAST_EVALUATION = ["--similarity", "match_prob", "--rerank", "nns"]


def quickstart_commands() -> list[list[str]]:
    """The commands of the README's "Your own images" block, split as a shell would (comments dropped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own images"):text.index("## Supported methods")]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_readme_quickstart_is_train_evaluate_search_on_one_folder():
    commands = quickstart_commands()
    assert [c[:2] for c in commands] == [["pcmr", "train"], ["pcmr", "evaluate"], ["pcmr", "search"]]
    assert all("./myphotos" in c for c in (commands[0], commands[2]))


def _run(capsys, argv):
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out, captured.err


@pytest.mark.parametrize("make", [make_folder, make_hf, make_shards], ids=["folder_csv", "hf_save_to_disk", "webdataset"])
def test_readme_quickstart_runs(tmp_path, monkeypatch, capsys, make):
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "myphotos", 20)
    train, evaluate, build = quickstart_commands()
    out, err = _run(capsys, [*train[1:], *FAST_TRAINING])
    assert "data: images are resized to 64 x 64 pixels (the input side of the cnn image encoder)" in err
    run = tmp_path / "runs" / "myphotos"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["data"]["root"] == str((tmp_path / "myphotos").resolve())
    assert config["data"]["options"] == {"image_size": 64}  # the recipe's built-in data settings are gone
    out, err = _run(capsys, [*evaluate[1:], *FAST_EVALUATION])
    meta = json.loads((run / "eval-test" / "results.json").read_text())["meta"]
    fmt = {make_folder: "folder", make_hf: "hf", make_shards: "webdataset"}[make]
    assert (meta["dataset"], meta["split"], meta["num_images"], meta["num_captions"]) == (fmt, "test", 2, 4)
    out, err = _run(capsys, build[1:])
    assert "20 images, 40 captions" in out and "/all" in out  # every image, not one split
    out, _ = _run(capsys, ["search", "myphotos_index", "--text", "a red picture with a green square", "-k", "20"])
    written = {name: captions for name, _, captions in samples(20)}
    lines = [line for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(lines) == 20
    for line in lines:  # each result: its file name and the first caption written for it
        image_id = line.split()[3]
        assert re.search(r'"[^"]+" \(\+1 more\)$', line)
        caption = line.split('"')[1]
        file_name = line.split()[4]
        assert file_name == image_id
        if make is make_shards:  # shard keys: the file names with "/" as "_", no ending, after the shard's name
            file_name = file_name.split("/", 1)[1].replace("trip_", "trip/") + ".png"
        assert caption == written[file_name][0]
    if make is make_folder:
        _search_api_gives_file_and_caption(tmp_path / "myphotos_index", written, tmp_path / "myphotos")


def _search_api_gives_file_and_caption(index_folder: Path, written: dict[str, list[str]], images: Path) -> None:
    """The search page's API gives each result its file name and captions, and the images are served from
    the folder given to the server (``pcmr serve --images``). What the page draws from them is checked in a
    real browser: ``tests/search/test_serve_browser.py`` (``make test-browser``)."""
    from fastapi.testclient import TestClient

    from pcmr.search import GalleryIndex
    from pcmr.search.service import create_app

    client = TestClient(create_app(GalleryIndex.load(index_folder), image_folder=images))
    results = client.get("/api/search", params={"text": "a blue picture", "k": 3}).json()["results"]
    for hit in results:
        assert hit["metadata"]["file"] == hit["id"] and hit["metadata"]["captions"] == written[hit["id"]]
        assert client.get(hit["image_url"]).status_code == 200


def test_evaluate_on_the_run_folder_keeps_its_split_seed(tmp_path, monkeypatch, capsys):
    """`pcmr evaluate RUN --data DIR` on the run's own folder reads it with the run's options (here split
    seed 3), so the test split is the one held out in training, not the default seed's."""
    from pcmr import load
    from pcmr.data import load_dataset
    from pcmr.evaluation.model import evaluation_split

    monkeypatch.chdir(tmp_path)
    folder = make_folder(tmp_path / "photos", 30)
    _run(capsys, ["train", "pcme", "--data", str(folder), "--name", "seeded", *FAST_TRAINING,
                  "--set", "data.options.seed=3", "--set", "train.max_steps_per_epoch=1"])
    model = load(tmp_path / "runs" / "seeded")
    held_out = load_dataset(folder, "test", seed=3).image_ids
    assert held_out != load_dataset(folder, "test").image_ids
    assert evaluation_split(model, "test", "./photos").image_ids == held_out
    assert evaluation_split(model, "test").image_ids == held_out


def test_data_errors_are_one_line(tmp_path, capsys):
    empty = tmp_path / "myphotos"
    empty.mkdir()
    assert main(["train", "pcme", "--data", str(empty), "--out", str(tmp_path / "runs")]) != 0
    err = capsys.readouterr().err
    assert "unrecognised dataset folder" in err and "captions.csv" in err and "*.tar" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["train", "pcme", "--data", str(tmp_path / "nowhere")]) != 0
    assert f"--data {tmp_path / 'nowhere'}: no such file or folder" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path), "--data", str(empty)]) != 0
    assert "--data names the dataset of a new run" in capsys.readouterr().err


@pytest.mark.parametrize(("recipe", "data", "size"), [
    ("pcme", ["data.name=folder", "data.root=ROOT"], 64),
    ("pcme", ["data.name=ROOT"], 64),  # a folder as data.name: its format is detected
    ("pcme_coco", ["data.name=folder", "data.root=ROOT", "data.options={}"], 224),
    ("pcme", ["data.name=folder", "data.root=ROOT", "data.options={image_size: 40}"], 40),
])
def test_image_size_comes_from_the_model(tmp_path, recipe, data, size):
    from pcmr.train.config import load_config
    from pcmr.train.recipes import find_recipe
    from pcmr.train.run import resolve_image_size

    root = make_folder(tmp_path / "photos", 4)
    config = load_config(find_recipe(recipe), [item.replace("ROOT", str(root)) for item in data])
    note = resolve_image_size(config)
    assert config.data.options["image_size"] == size
    assert (note is None) == (size == 40)
    if note is not None:
        assert f"images are resized to {size} x {size} pixels" in note
