"""``pcmr search INDEX``: build a gallery index from a trained model, and query it.

    pcmr search INDEX --build RUN_OR_MODEL [--data NAME_OR_PATH] [--split test]   # encode once
    pcmr search INDEX --text "a red circle" -k 10                                 # text -> images
    pcmr search INDEX --image photo.png -k 10                                     # image -> captions

``--build`` encodes the gallery split into the folder INDEX (pcmr.index.GalleryIndex: safetensors +
JSON, with the model and vocabulary so queries can be encoded); a query option in the same call
searches the freshly built index. See docs/search.md.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pcmr.cli.evaluate import load_run_or_model, load_split
from pcmr.config import ConfigError, parse_override
from pcmr.index import GalleryIndex

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "search",
        help="build a gallery index and search it by text or image",
        description="Search a saved gallery index (pcmr.index) by caption text (returns images) or by image "
        "file (returns captions), printing the top-k with score and each item's uncertainty. "
        "With --build, first encode a split with a trained model into the index folder. "
        "See docs/search.md.",
    )
    parser.add_argument("index", metavar="INDEX", help="index folder (written by --build)")
    build = parser.add_argument_group("building (--build)")
    build.add_argument(
        "--build",
        metavar="RUN_OR_MODEL",
        default=None,
        help="encode a gallery with this run folder (from `pcmr train`) or model folder into INDEX",
    )
    build.add_argument(
        "--data",
        metavar="NAME_OR_PATH",
        default=None,
        help="dataset name or folder of the gallery (default: the run's data)",
    )
    build.add_argument(
        "--data-name",
        metavar="NAME",
        default=None,
        help="dataset format of a --data folder (default: detected from its files)",
    )
    build.add_argument("--split", default="test", help="split encoded as the gallery (default: test)")
    build.add_argument("--vocab", default=None, help="vocab.json of the training run (model folders only)")
    build.add_argument("--batch-size", type=int, default=256, help="items per encoding batch (default 256)")
    query = parser.add_argument_group("querying")
    query.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="TEXT",
        help="caption query (searches the images); repeatable",
    )
    query.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="PATH",
        help="image file query (searches the captions); repeatable",
    )
    query.add_argument("-k", "--top-k", dest="k", type=int, default=10, help="results per query (default 10)")
    query.add_argument(
        "--similarity",
        default="cosine",
        help="similarity name (see `pcmr list similarities`; default cosine)",
    )
    query.add_argument(
        "--rerank",
        default="nns",
        help="re-ranker name (see `pcmr list rerankers`; default nns). is/csls/rgm use the "
        "index's stored items of the query modality as the reference query set",
    )
    query.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="re-ranker option, e.g. beta=30 (is), csls_k=10 (csls), lam=2 (rgm); repeatable",
    )
    query.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda (default: cpu)")
    return parser


def _rerank_options(items: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        try:
            path, value = parse_override(item)
        except ConfigError:
            path, value = [], None
        if len(path) != 1:
            raise ValueError(f"--option {item!r}: expected NAME=VALUE, e.g. beta=30, csls_k=10 or lam=2")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"--option {item!r}: VALUE must be a number")
        options[path[0]] = value
    return options


def _build(args: argparse.Namespace) -> Any:
    loaded = load_run_or_model(args.build, args.vocab, args.device or "cpu")
    split = load_split(args.data, args.split, loaded.config, args.data_name)
    index = GalleryIndex.build(
        loaded.model,
        split,
        loaded.vocab,
        batch_size=args.batch_size,
        device=args.device,
        similarity_options=loaded.similarity_options,
        meta={"source": str(loaded.source), "dataset": split.name, "split": args.split},
    )
    index.save(args.index)
    print(
        f"built {args.index}: {index.images.num} images, {index.captions.num} captions "
        f"({split.name}/{args.split}, D={index.images.dim})"
    )
    return index


def _as_json(results: Any, queries: list[str]) -> list[dict[str, Any]]:
    out = []
    for query, hits in zip(queries, results.hits):
        out.append(
            {
                "query": query,
                "similarity": results.similarity,
                "rerank": results.rerank,
                "results": [
                    {
                        "rank": h.rank,
                        "index": h.index,
                        "id": h.id,
                        "score": h.score,
                        "uncertainty": h.uncertainty,
                        "text": h.text,
                        "metadata": h.metadata,
                    }
                    for h in hits
                ],
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise ValueError(f"-k must be a positive integer, got {args.k}")
    index = _build(args) if args.build else None
    if not args.text and not args.image:
        if index is None:
            raise ValueError(
                "nothing to do: give --text TEXT or --image PATH to search, or --build RUN_OR_MODEL"
            )
        return 0
    if index is None:
        index = GalleryIndex.load(args.index, device=args.device)
    options = _rerank_options(args.option)
    blocks = []
    if args.text:
        results = index.search_text(
            args.text, k=args.k, similarity=args.similarity, rerank=args.rerank, rerank_options=options
        )
        blocks.append((results, list(args.text)))
    if args.image:
        results = index.search_image(
            args.image, k=args.k, similarity=args.similarity, rerank=args.rerank, rerank_options=options
        )
        blocks.append((results, list(args.image)))
    if args.json:
        print(
            json.dumps([entry for r, q in blocks for entry in _as_json(r, q)], indent=2, ensure_ascii=False)
        )
    else:
        print("\n\n".join(r.to_text(q) for r, q in blocks))
    return 0
