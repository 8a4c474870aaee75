"""Everything ``pcmr search`` prints for a fixed set of indexes and queries, in one file: run it with two
versions of pcmr on the same folder and compare the files byte for byte (a refactor of the search
must leave them identical).

The first run builds, in ``FOLDER``, a tiny untrained PCME run on the built-in shapes data and five
indexes over its 13 test images and 65 captions (exact; faiss flat for W2; faiss IVF for cosine;
on disk), plus two indexes from 600 + 700 random Gaussians (faiss IVF-PQ and flat). Later runs reuse
them, so both versions query the same files. Each query runs in this process (``pcmr.cli.main``) with
its standard output and error captured: text and image queries under five similarities and six
re-rankers on the exact and the index's own backend, then Gaussian queries through
``GalleryIndex.search`` with every returned index and score printed in full precision.

Usage:
    PYTHONPATH=OLD/src .venv/bin/python tools/search_outputs.py /tmp/search-fixture old.txt
    PYTHONPATH=NEW/src .venv/bin/python tools/search_outputs.py /tmp/search-fixture new.txt
    cmp old.txt new.txt
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from pcmr.cli import main
from pcmr.search import GalleryIndex

SHAPES = dict(image_size=16, num_train=24, num_val=11, num_test=13, num_test_unseen=1, num_binary_selection=1,
              cache=False)
MODEL = {"embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]}, "text_encoder": {"word_dim": 8, "hidden_dim": 8}}
RUN_INDEXES = {"exact": [], "faiss": ["--backend", "faiss", "--similarity", "kl"],
               "cos": ["--backend", "faiss", "--index-type", "ivf", "--ann-score", "cosine"],
               "disk": ["--on-disk", "--store-dtype", "float32"]}


def call(args: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return f"$ pcmr {' '.join(args)}\nrc={code}\n{out.getvalue()}--stderr--\n{err.getvalue()}\n"


def make_run(root: Path) -> Path:
    """An untrained PCME run folder on the tiny shapes data (weights from seed 0)."""
    from pcmr.data import Vocabulary, load_dataset
    from pcmr.models import create_model, save_model
    from pcmr.train.config import RunConfig, save_config

    root.mkdir(parents=True)
    raw = {"model": {"name": "pcme", **MODEL}, "loss": {"name": "pcme"}, "data": {"name": "shapes", "options": SHAPES}}
    save_config(RunConfig.from_dict(raw), root / "config.yaml")
    vocab = Vocabulary.from_split(load_dataset("shapes", "train", **SHAPES))
    vocab.save(root / "vocab.json")
    torch.manual_seed(0)
    save_model(create_model("pcme", vocab_size=len(vocab), **MODEL), root / "model")
    (root / "similarity_options.json").write_text(json.dumps({"match_prob": {"a": 3.0, "b": 1.0}}))
    return root


def build(folder: Path) -> None:
    run = make_run(folder / "run")
    for name, extra in RUN_INDEXES.items():
        assert main(["search", str(folder / name), "--build", str(run), *extra]) == 0
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for modality, num in (("image", 600), ("caption", 700)):
        tensors[f"{modality}_mean"] = torch.randn(num, 16, generator=gen)
        tensors[f"{modality}_logvar"] = 0.3 * torch.randn(num, 16, generator=gen)
    save_file(tensors, str(folder / "emb.safetensors"))
    for name, extra in (("pq", ["--index-type", "ivfpq", "--nlist", "8"]), ("emb", [])):
        assert main(["search", str(folder / name), "--from-embeddings", str(folder / "emb.safetensors"), "--backend",
                     "faiss", "--similarity", "wasserstein", *extra]) == 0
    pixels = np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(folder / "q.png")


def outputs(folder: Path) -> list[str]:
    chunks = []
    texts = ["--text", "a red circle", "--text", "two blue squares"]
    for name in RUN_INDEXES:
        index = str(folder / name)
        for similarity in ("cosine", "kl", "wasserstein", "match_prob", "csd"):
            for rerank in ("nns", "is", "csls", "gm", "rgm", "csls+rgm"):
                for backend in ("auto", "exact"):
                    chunks.append(call(["search", index, *texts, "--image", str(folder / "q.png"), "-k", "4",
                                        "--similarity", similarity, "--rerank", rerank, "--backend", backend,
                                        "--json"]))
        chunks.append(call(["search", index, *texts, "-k", "3", "--similarity", "kl", "--rerank", "csls", "--option",
                            "csls_k=3"]))
        chunks.append(call(["search", index, *texts, "-k", "3", "--rerank", "is", "--option", "beta=5",
                            "--candidates", "7"]))
    for name in ("pq", "emb"):
        index = GalleryIndex.load(folder / name)
        query = index.captions[:5]
        for similarity in ("wasserstein", "kl", "cosine", "match_prob"):
            for rerank in ("nns", "is", "csls", "rgm", "is+gm"):
                for backend in ("auto", "exact"):
                    head = f"{name} {similarity} {rerank} {backend}"
                    try:
                        found = index.search(query, k=5, similarity=similarity, rerank=rerank, backend=backend,
                                             candidates=20)
                    except ValueError as err:
                        chunks.append(f"{head} ValueError {err}\n")
                        continue
                    chunks.append(f"{head}\n{found.indices.tolist()}\n{found.scores.tolist()}\n{found.to_text()}\n")
    return chunks


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="where the fixed indexes are (built on the first run)")
    parser.add_argument("output", type=Path, help="file receiving every output")
    args = parser.parse_args()
    if not (args.folder / "emb").is_dir():
        build(args.folder)
    chunks = outputs(args.folder)
    args.output.write_text("".join(chunks), encoding="utf-8")
    print(f"{len(chunks)} outputs in {args.output}", file=sys.stderr)


if __name__ == "__main__":
    cli()
