"""A tiny trained-shape run folder and gallery index shared by the search/serve tests."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY_SHAPES, make_tiny_run

SHAPES = TINY_SHAPES


def make_run(root: Path) -> Path:
    """A run folder as `pcmr train` writes it (untrained weights; the tests need shapes, not accuracy)."""
    return make_tiny_run(root, similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


def make_index(root: Path, backend: str = "faiss") -> Path:
    """Build ``root/index`` from a fresh run with the CLI (faiss flat index by default)."""
    from pcmr.cli import main

    run = make_run(root / "run")
    args = ["search", str(root / "index"), "--build", str(run)]
    if backend == "faiss":
        args += ["--backend", "faiss", "--index-type", "flat", "--ann-score", "cosine"]
    assert main(args) == 0
    return root / "index"
