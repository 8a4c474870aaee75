"""``pcmr search INDEX``: build a gallery index from a trained model, and query it.

    pcmr search INDEX --build RUN_OR_MODEL [--data NAME_OR_PATH] [--split test]   # encode once
    pcmr search INDEX --text "a red circle" -k 10                                 # text -> images
    pcmr search INDEX --image photo.png -k 10                                     # image -> captions

    pcmr search INDEX --build RUN --backend faiss [--index-type auto|flat|ivf|hnsw]  # + ANN index
    pcmr search INDEX --from-embeddings emb.safetensors --backend faiss            # saved embeddings
    pcmr search INDEX --add more.safetensors                                       # append items
    pcmr search INDEX --build RUN --index-type ivfpq --on-disk [--memory-budget 2G]  # gallery on disk

``--build`` encodes the gallery split into the folder INDEX (pcmr.search.GalleryIndex: safetensors +
JSON, with the model and vocabulary so queries can be encoded); a query option in the same call
searches the freshly built index. A query alone never enters the index-writing modules
(``pcmr.search.indexing``, ``pcmr.search.sources``): only a flag of the building group does. See
docs/search.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pcmr.arguments import checked_name
from pcmr.inference import get_reranker
from pcmr.search.indexing import (
    IndexWrite,
    check_index_write,
    check_source_target,
    default_similarity,
    write_index,
)
from pcmr.search.manifest import stored_similarity
from pcmr.search.presentation import answer_text
from pcmr.search.session import Abstention, SearchRequest, SearchSession, parse_query_options
from pcmr.search.sources import BuildSettings
from pcmr.similarity import get_similarity
from pcmr.termination import run_until_terminated

__all__ = ["run"]

def _index_write(args: argparse.Namespace) -> IndexWrite:
    """The index folder to write (``--build`` / ``--from-embeddings`` / ``--add``) as the library takes it."""
    source = BuildSettings(index_type=args.index_type, nlist=args.nlist, nprobe=args.nprobe, hnsw_m=args.hnsw_m,
                           ef_search=args.ef_search, pq_m=args.pq_m, opq=args.opq, refine=args.refine,
                           memory_budget=args.memory_budget, shard_size=args.shard_size,
                           reference_sample=args.reference_sample, uri=args.uri,
                           collection_prefix=args.collection_prefix)
    return IndexWrite(args.index, build=args.build, from_embeddings=args.from_embeddings, add=args.add,
                      data=args.data, data_name=args.data_name, split=args.split, vocab=args.vocab,
                      batch_size=args.batch_size, overwrite=args.overwrite, on_disk=args.on_disk,
                      store_dtype=args.store_dtype, backend=args.backend, ann_score=args.ann_score,
                      similarity=args.similarity, modalities=tuple(args.modalities or ("image", "caption")),
                      device=args.device, source=source)


def _writes(args: argparse.Namespace) -> bool:
    """Whether the flags write the index folder (``--build``, ``--from-embeddings``, ``--add``) or set how
    it is written (``--on-disk``, ``--store-dtype``: refused without ``--build``)."""
    return args.on_disk or any(x is not None for x in (args.build, args.from_embeddings, args.add, args.store_dtype))


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    return run_until_terminated("search", _run, args, args.index)


def _run(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise ValueError(f"-k must be a positive integer, got {args.k}")
    if [t for t in args.text if not t.strip()]:
        raise ValueError("--text must be a non-empty caption, e.g. --text 'a red circle'")
    spec = _index_write(args) if _writes(args) else None
    if spec is not None:
        check_index_write(spec)
        spec.similarity = args.similarity = args.similarity or default_similarity(spec)
    else:
        args.similarity = args.similarity or stored_similarity(args.index)
    checked_name("--similarity", args.similarity, get_similarity)
    checked_name("--rerank", args.rerank, get_reranker)
    abstention = Abstention(args.answer_coverage, args.max_risk, args.risk_curve)
    request = SearchRequest(texts=args.text, images=args.image, k=args.k, similarity=args.similarity,
                            rerank=args.rerank, abstention=abstention)
    abstention.coverages(args.similarity, request.query_modalities())  # checked before any work
    index = None
    if spec is not None:
        check_source_target(spec)
        index = write_index(spec, say=print, warn=_warn)
        args.backend = spec.backend  # an --on-disk build answers through its candidate source
    if not args.text and not args.image:
        if index is None:
            raise ValueError("nothing to do: give --text TEXT or --image PATH to search, or --build RUN_OR_MODEL")
        return 0
    settings: dict[str, Any] = {"similarity": args.similarity, "rerank": args.rerank, "backend": args.backend,
                "candidates": args.candidates}
    session = SearchSession(index, **settings) if index is not None else SearchSession.open(args.index, device=args.device,
                                                                                  **settings)
    if args.risk_curve is not None and args.max_risk is not None:
        session.check_risk_curve(args.risk_curve, args.index)
    request.rerank_options, request.similarity_options = parse_query_options(args.option, args.similarity,
                                                                             args.rerank)
    answer = session.search(request)
    entries = [query.to_json() for query in answer.queries]
    print(answer_text(entries, args.similarity, args.rerank, args.json))
    for entry in entries:
        for warning in entry["warnings"]:
            _warn(warning)
    for note in answer.notes:
        _warn(note)
    return 0
