"""The CUDA path, on a machine with a GPU (``@pytest.mark.cuda``: deselected elsewhere, see tests/conftest.py).

Every recipe trains one tiny epoch with ``--device cuda`` and its run is evaluated there; every score
in float64 on CUDA equals the CPU's; the model and its embeddings stay on the GPU. (The float32
agreement of every score, metric and re-ranker: tests/similarity/test_device_agreement.py; the fused
match_prob tiles: tests/similarity/test_match_prob_fused.py; the study's evaluation on CUDA:
tests/study/test_study_device.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pcmr.cli import main

pytestmark = pytest.mark.cuda

RECIPES = sorted((Path(__file__).resolve().parents[1] / "src" / "pcmr" / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_trains_one_tiny_epoch_on_cuda(path: Path, tmp_path: Path, tiny_training: list[str],
                                             as_set_args, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["train", str(path), "--out", str(tmp_path), "--name", "run", "--no-progress", "--device", "cuda",
                   *as_set_args(tiny_training)])
    assert status == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["status"] == "finished" and summary["global_step"] == 2
    assert all(value == value for value in summary["history"][0]["train"].values())  # no NaN


def test_evaluate_on_cuda(tmp_path: Path, tiny_training: list[str], as_set_args,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "pcme", "--out", str(tmp_path), "--name", "run", "--no-progress", "--device", "cuda",
                 *as_set_args(tiny_training)]) == 0
    capsys.readouterr()
    status = main(["evaluate", str(tmp_path / "run"), "--device", "cuda", "--similarity", "cosine,match_prob,kl",
                   "--rerank", "nns,csls,rgm"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    results = json.loads((tmp_path / "run" / "eval-test" / "results.json").read_text())
    assert "cuda" in json.dumps(results.get("meta", {}))  # encoded on the GPU


def test_model_and_embeddings_stay_on_cuda(tiny_run_factory, tmp_path: Path) -> None:
    from pcmr import load

    model = load(tiny_run_factory(tmp_path / "run"), device="cuda")
    assert model.device.type == "cuda"
    embeddings = model.encode_text(["a red circle", "two blue squares"])
    assert embeddings.mean.device.type == "cuda"


def test_float64_scores_on_cuda_equal_the_cpu() -> None:
    from pcmr import Gaussian
    from pcmr.similarity import get_similarity, list_similarities, pairwise

    gen = torch.Generator().manual_seed(0)
    images = Gaussian(torch.randn(37, 24, generator=gen, dtype=torch.float64),
                      -2 + torch.randn(37, 24, generator=gen, dtype=torch.float64))
    captions = Gaussian(torch.randn(101, 24, generator=gen, dtype=torch.float64),
                        -2 + torch.randn(101, 24, generator=gen, dtype=torch.float64))
    gpu = [Gaussian(g.mean.cuda(), g.logvar.cuda()) for g in (images, captions)]
    for name in list_similarities():
        options = {}
        if getattr(get_similarity(name), "sampled", False):
            options = {"image_samples": images.sample(5, generator=gen), "caption_samples": captions.sample(5, generator=gen)}
        want = pairwise(name, images, captions, **options)
        got = pairwise(name, *gpu, **{k: v.cuda() for k, v in options.items()})
        assert got.device.type == "cuda", name
        torch.testing.assert_close(got.cpu(), want, rtol=1e-10, atol=1e-10, msg=name)
