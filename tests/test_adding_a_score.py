"""Adding a score touches only its own module, its test and its doc page: a score defined and registered
here, and nowhere else, runs through ``pcmr evaluate`` and ``pcmr search`` (exact and faiss backends)."""

from __future__ import annotations

import csv
import json
from typing import Any

import pytest
from torch import Tensor

import pcmr.similarity._registry as registry
from pcmr.cli import main
from pcmr.gaussian import Gaussian
from pcmr.similarity import Similarity

NAME = "throwaway_sq_l2"


class ThrowawaySquaredL2(Similarity):
    """``S = -|m1 - m2|^2``: a decreasing function of the Euclidean distance, so it ranks as ``l2`` does."""

    name = NAME
    means_only = True
    ann_score = "l2"  # an ANN index over the means proposes its candidates
    reference = "a score of the tests (minus the squared distance of the means)"

    def prepare(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Any:
        return images.mean, captions.mean

    def block(self, state: Any, rows: slice, out: Tensor | None) -> Tensor:
        x, y = state
        value = -(x[rows].unsqueeze(1) - y.unsqueeze(0)).square().sum(2)  # [n, N_cap]
        if out is None:
            return value
        out.copy_(value)
        return out

    def paired(self, images: Gaussian, captions: Gaussian, options: dict[str, Any]) -> Tensor:
        return -(images.mean - captions.mean).square().sum(1)


@pytest.fixture
def registered():
    """The throw-away score registered for one test (the registry as it was afterwards)."""
    registry.register(ThrowawaySquaredL2)
    yield NAME
    registry.SIMILARITIES.unregister(NAME)


def _rows(folder) -> dict[str, dict[str, str]]:
    with open(folder / "results.csv", newline="") as handle:
        return {row["similarity"]: row for row in csv.DictReader(handle) if row["relevance"] == "exact"}


def test_a_registered_score_runs_through_evaluate_and_search(registered, tiny_run_factory, tmp_path, capsys):
    run = tiny_run_factory(tmp_path / "run")
    out = tmp_path / "eval"
    assert main(["evaluate", str(run), "--similarity", f"{registered},l2", "--rerank", "nns", "--out", str(out)]) == 0, capsys.readouterr().err
    rows = _rows(out)
    for key in ("i2t_R@1", "t2i_R@5", "rsum", "i2t_r_precision"):  # the same ranking as l2's
        assert rows[registered][key] == rows["l2"][key], key

    index = str(tmp_path / "idx")
    assert main(["search", index, "--build", str(run), "--backend", "faiss", "--ann-score", "l2"]) == 0
    capsys.readouterr()
    found = {}
    for similarity in (registered, "l2"):
        for backend in ("exact", "faiss"):
            assert main(["search", index, "--text", "a red circle", "-k", "5", "--similarity", similarity,
                         "--backend", backend, "--json"]) == 0
            found[similarity, backend] = [h["index"] for h in json.loads(capsys.readouterr().out)[0]["results"]]
    assert found[registered, "exact"] == found[registered, "faiss"] == found["l2", "exact"]


def test_the_throwaway_score_is_gone_after_its_test():
    assert NAME not in registry.list_similarities()
