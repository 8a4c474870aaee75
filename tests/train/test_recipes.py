"""Every shipped recipe (src/pcmr/recipes/) trains one tiny epoch on a tiny built-in split, end to end via the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pcmr.cli import main
from pcmr.train.config import RunConfig

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "src" / "pcmr" / "recipes").glob("*.yaml"))
EXPECTED = (
    [
        "pcme",
        "pcme_mu_only",
        "pcmepp_csd",
        "gce",
        "gie",
        "vsepp_sum",
        "vsepp_max",
        "hal",
        "max_hal",
        "calibpe",
        "pvse",
    ]
    + [
        f"probvse_{s}_{c}"
        for s in ("kl", "min_kl", "wasserstein")
        for c in ("ellipsoidal", "spherical_avgpool", "spherical_one_value")
    ]
    + [f"gcie_{s}" for s in ("kl", "min_kl", "wasserstein")]
)


def test_every_method_has_a_recipe():
    assert set(EXPECTED) <= {p.stem for p in CONFIGS}  # the papers' methods; further recipes are tested alike


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_recipe_is_valid_and_documented(path):
    text = path.read_text()
    config = RunConfig.from_dict(yaml.safe_load(text))
    assert config.data.name == "shapes"
    for dataset in ("COCO", "Flickr30k", "CUB"):
        assert dataset in text, f"{path.name} does not document {dataset} overrides"
    assert "Paper:" in text


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_recipe_trains_one_tiny_epoch(path, tmp_path, tiny_training, as_set_args, capsys):
    argv = ["train", str(path), "--out", str(tmp_path), "--name", "run", "--no-progress", *as_set_args(tiny_training)]
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 0, err
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "finished" and summary["global_step"] == 2
    train_terms = summary["history"][0]["train"]
    assert all(value == value for value in train_terms.values())  # no NaN
    assert (run_dir / "model" / "model.safetensors").is_file()
    options = json.loads((run_dir / "similarity_options.json").read_text())
    assert list(options) == [summary["trained_similarity"]]


def test_recipes_are_package_data_and_user_folders_shadow_them(tmp_path, monkeypatch):
    """Shipped recipes resolve from the package (no checkout or cwd needed); ./configs and
    $PCMR_CONFIGS come first, in that order of precedence."""
    from pcmr.train.config import ConfigError
    from pcmr.train.recipes import find_recipe, list_recipes, shipped_recipe_dir

    root = Path(__file__).resolve().parents[2]
    package_data = [line for line in (root / "pyproject.toml").read_text().splitlines() if line.startswith("pcmr = [")]
    assert len(package_data) == 1 and '"recipes/*.yaml"' in package_data[0]
    assert shipped_recipe_dir() == root / "src" / "pcmr" / "recipes"

    monkeypatch.chdir(tmp_path)  # no ./configs here
    monkeypatch.delenv("PCMR_CONFIGS", raising=False)
    real_data = sorted((shipped_recipe_dir() / "real_data").glob("*.yaml"))
    assert '"recipes/real_data/*.yaml"' in package_data[0] and {p.stem for p in real_data} == {"pcme_coco", "pcme_cub"}
    assert sorted(list_recipes()) == sorted(p.stem for p in CONFIGS + real_data) and set(EXPECTED) <= set(list_recipes())
    assert find_recipe("pcme") == shipped_recipe_dir() / "pcme.yaml"

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "pcme.yaml").write_text("model: {}\n")
    assert find_recipe("pcme") == tmp_path / "configs" / "pcme.yaml"
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "pcme.yaml").write_text("model: {}\n")
    (env_dir / "mine.yaml").write_text("model: {}\n")
    monkeypatch.setenv("PCMR_CONFIGS", str(env_dir))
    assert find_recipe("pcme") == env_dir / "pcme.yaml"
    assert "mine" in list_recipes() and "vsepp_max" in list_recipes()
    with pytest.raises(ConfigError, match="unknown recipe 'nope'"):
        find_recipe("nope")
