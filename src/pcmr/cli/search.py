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
searches the freshly built index. See docs/search.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pcmr.arguments import checked_name, option_value
from pcmr.atomic import write_folder, writing_folder
from pcmr.config import ConfigError, parse_override
from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.gaussian import Gaussian
from pcmr.hub import load, trained_similarity
from pcmr.inference import get_reranker
from pcmr.progress import phase
from pcmr.relevance import I2T, T2I
from pcmr.run_defaults import default_split, load_split, run_defaults
from pcmr.search import GalleryIndex
from pcmr.search.abstain import (
    abstains,
    abstention_entry,
    answered_entry,
    check_curve_fingerprint,
    coverage_for_risk,
    read_risk_curve,
)
from pcmr.search.ann import ann_score_for, parse_memory
from pcmr.search.compose import get_backend
from pcmr.search.embeddings import read_embeddings
from pcmr.search.manifest import file_sha256, milvus_entries, not_an_index, stored_similarity
from pcmr.search.presentation import (
    UNCERTAINTY_NOTE,
    entries_text,
    fewer_lines_warning,
    result_warnings,
    score_note,
    search_distinct,
    shown_entries,
    uncertainty_percentile,
    word_vocabulary,
)
from pcmr.search.vectordb import drop_collection, resolve_uri
from pcmr.similarity import check_similarity_option_values, get_similarity
from pcmr.suggest import did_you_mean, name_list
from pcmr.termination import run_until_terminated

__all__ = ["run"]

#: --index-type of a Milvus build -> the Milvus index type
MILVUS_INDEX_TYPES = {"auto": "auto", "flat": "FLAT", "ivf": "IVF_FLAT"}


def _query_options(items: list[str], similarity: str, rerank: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--option`` items as ``(re-ranker options, similarity options)``. Every command's form is
    ``NAME.OPTION=VALUE`` with a YAML value, ``NAME`` the ``--rerank`` re-ranker or the ``--similarity``
    score; the deprecated ``OPTION=VALUE`` (a number, for the re-ranker) is still read."""
    rerank_options: dict[str, Any] = {}
    similarity_options: dict[str, Any] = {}
    owned: list[tuple[str, str, Any]] = []
    for item in items:
        try:
            path, value = parse_override(item)
        except ConfigError:
            path, value = [], None
        value = option_value(f"--option {item}", value, "is.beta=30, csls.csls_k=10 or rgm.lam=2")
        if len(path) == 1:  # the deprecated form: a re-ranker parameter, a number
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"--option {item!r}: VALUE must be a number (or write NAME.OPTION=VALUE)")
            rerank_options[path[0]] = value
            continue
        if len(path) != 2:
            raise ValueError(f"--option {item!r}: expected NAME.OPTION=VALUE, e.g. is.beta=30, csls.csls_k=10, "
                             "rgm.lam=2 or match_prob.a=12.5")
        owned.append((path[0], path[1], value))
    for owner, option, value in owned:
        flag = f"--option {owner}.{option}={value}"
        if owner not in (rerank, similarity):
            raise ValueError(f"{flag}: '{owner}' is neither the --rerank re-ranker ({rerank}) nor the --similarity "
                             f"score ({similarity})")
        accepted = sorted(get_reranker(rerank).parameters() if owner == rerank else get_similarity(similarity).options)
        if option not in accepted:
            raise ValueError(f"{flag}: '{owner}' has no option '{option}'{did_you_mean(option, accepted)}; expected "
                             f"one of: {name_list(accepted) if accepted else 'none'}")
        (rerank_options if owner == rerank else similarity_options)[option] = value
    try:  # the values, before anything is encoded
        get_reranker(rerank, **rerank_options)
        check_similarity_option_values(similarity, similarity_options)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--option {' '.join(items)}: {err}") from None
    return rerank_options, similarity_options


def _check_target(args: argparse.Namespace) -> None:
    """--build / --from-embeddings never replace an existing index without --overwrite, and never replace
    anything that is not a pcmr gallery index (a run folder, documents), even with it."""
    target = Path(args.index)
    if not os.path.lexists(target) or (target.is_dir() and not any(target.iterdir())):
        return
    problem = not_an_index(target)
    if problem is not None:
        raise FileExistsError(f"{problem}; --overwrite replaces only a whole gallery index: choose a new or "
                              "empty INDEX folder, or move those files out")
    if not args.overwrite:
        raise FileExistsError(f"{target} already exists; pass --overwrite to replace it, or --add FILE to "
                              f"append items to the index")


def _check_milvus_target(args: argparse.Namespace) -> None:
    """``--backend milvus`` with ``--build`` / ``--from-embeddings``: the ``--uri``, its folder (a Milvus
    Lite file is created in an existing folder) and ``--index-type`` are checked before any encoding."""
    if args.backend != "milvus" or not (args.build or args.from_embeddings):
        return
    if not args.uri:
        raise ValueError("--backend milvus needs --uri: a Milvus Lite file (e.g. gallery.db) or a server address "
                         "(e.g. http://localhost:19530)")
    if args.index_type not in MILVUS_INDEX_TYPES:
        raise ValueError(f"--backend milvus takes --index-type auto, flat or ivf, got {args.index_type!r}")
    uri = resolve_uri(args.uri)
    if not uri.startswith(("http://", "https://", "tcp://")):
        folder = Path(uri).parent
        if not folder.is_dir():
            raise FileNotFoundError(f"--uri {args.uri}: the folder {folder} does not exist; create it first "
                                    f"(mkdir -p {folder}) or name a .db file in an existing folder")
        try:  # Milvus Lite writes its database and lock files there: a folder that refuses a file fails now
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            raise ValueError(f"--uri {args.uri}: Milvus Lite cannot write {uri} ({err.strerror or err}); "
                                  "name a .db file in a folder you can write") from None


def _save_new(index: Any, args: argparse.Namespace) -> None:
    """Write a newly built index; the folder is swapped in whole, so a replaced one leaves no file behind.
    The Milvus collections of a replaced index are dropped once the new one is in place."""
    replaced = milvus_entries(args.index)
    write_folder(args.index, index.save)
    index.commit_sources()
    for entry in replaced:
        drop_collection(entry["uri"], entry["collection"], entry.get("build_id"))


def _build(args: argparse.Namespace) -> Any:
    _check_target(args)
    model = load(args.build, device=args.device or "cpu", vocabulary=args.vocab)
    defaults = run_defaults(model)
    args.split = args.split or default_split(args.data, defaults.data, defaults.split)
    split = load_split(args.data, args.split, defaults.data, args.data_name, model=model)
    if args.on_disk:
        return _build_on_disk(args, model, split)
    with phase(f"encoding the gallery ({split.num_images} images, {split.num_captions} captions)"):
        index = GalleryIndex.build(
            model,
            split,
            batch_size=args.batch_size,
            device=args.device,
            meta={"source": str(model.run_dir or model.source), "dataset": split.name, "split": args.split},
            progress=None,
        )
    _maybe_build_ann(index, args)
    _save_new(index, args)
    print(
        f"built {args.index}: {index.images.num} images, {index.captions.num} captions "
        f"({split.name}/{args.split}, D={index.images.dim})"
    )
    return index


def _build_on_disk(args: argparse.Namespace, model: Any, split: Any) -> Any:
    """--build --on-disk: the stores, the faiss index and the statistics are written into the new
    index folder (swapped in whole once complete), then the index is opened from there."""
    if args.backend not in ("auto", "faiss"):
        raise ValueError(f"--on-disk answers through faiss candidates; use --backend faiss (or leave --backend "
                         f"out), got --backend {args.backend}")
    args.backend = "faiss"

    def write(folder: Path) -> None:
        with phase(f"encoding the gallery to disk ({split.num_images} images, {split.num_captions} captions)"):
            index = GalleryIndex.build_on_disk(
                model, split, folder, dtype=args.store_dtype or "float16",
                batch_size=args.batch_size, device=args.device,
                meta={"source": str(model.run_dir or model.source), "dataset": split.name, "split": args.split},
                progress=None)
        _maybe_build_ann(index, args)
        index.save(folder)

    write_folder(args.index, write)
    index = GalleryIndex.load(args.index, device=args.device)
    print(f"built {args.index}: {index.images.num} images, {index.captions.num} captions "
          f"({split.name}/{args.split}, D={index.images.dim}), Gaussians on disk "
          f"({args.store_dtype or 'float16'})")
    return index


def _from_embeddings(args: argparse.Namespace) -> Any:
    _check_target(args)
    saved = read_embeddings(args.from_embeddings, shard_rows=args.shard_size, progress=None)
    present = saved.images if saved.images is not None else saved.captions
    if present is None:
        raise ValueError(f"{args.from_embeddings} holds neither image nor caption embeddings")
    empty = Gaussian(present.mean.new_zeros(0, present.dim),
                     None if present.logvar is None else present.logvar.new_zeros(0, present.logvar.shape[1]))
    index = GalleryIndex(saved.images if saved.images is not None else empty,
                         saved.captions if saved.captions is not None else empty,
                         image_ids=saved.image_ids, caption_ids=saved.caption_ids, caption_texts=saved.caption_texts,
                         image_metadata=saved.image_metadata,
                         meta={"source": str(args.from_embeddings), "source_sha256": file_sha256(args.from_embeddings)})
    _maybe_build_ann(index, args)
    _save_new(index, args)
    print(f"built {args.index}: {index.images.num} images, {index.captions.num} captions from "
          f"{args.from_embeddings} (D={present.dim})")
    return index


def _add(args: argparse.Namespace) -> Any:

    index = GalleryIndex.load(args.index, device=args.device)
    saved = read_embeddings(args.add, shard_rows=args.shard_size, progress=None,
                            first_image_id=index.images.num, first_caption_id=index.captions.num)
    digest = file_sha256(args.add)
    earlier = next((entry for entry in index.meta.get("added") or [] if isinstance(entry, dict)
                    and entry.get("sha256") == digest), None)
    if earlier is None and index.meta.get("source_sha256") == digest:
        earlier = {"file": index.meta.get("source"), "how": "built from"}
    if earlier is not None:
        raise FileExistsError(f"{args.add} (SHA-256 {digest[:12]}...) is already in {args.index}: "
                              f"{earlier.get('how', 'added')} {earlier.get('file')}; adding it again would give its "
                              "items twice (the index records the SHA-256 of every file added)")
    if saved.images is not None:
        index.add_images(saved.images, saved.image_ids, saved.image_metadata, shard_size=args.shard_size,
                         progress=None)
    if saved.captions is not None:
        index.add_captions(saved.captions, saved.caption_ids, saved.caption_texts, shard_size=args.shard_size,
                           progress=None)
    index.meta["added"] = [*(index.meta.get("added") or []),
                           {"file": str(args.add), "sha256": digest, "images": 0 if saved.images is None else
                            saved.images.num, "captions": 0 if saved.captions is None else saved.captions.num}]

    def save(folder: Path) -> None:
        index.save(folder)

    write_folder(args.index, save)  # a new folder swapped in whole: the old index or the new, never a mix
    index.commit_sources()  # Milvus: the replaced collections are dropped once the new folder is in place
    print(f"added to {args.index}: now {index.images.num} images, {index.captions.num} captions")
    return index


def _maybe_build_ann(index: Any, args: argparse.Namespace) -> None:
    """With ``--backend faiss``, build the ANN index(es) and print the structure chosen."""

    if get_backend(args.backend).engine is None:  # exact or auto: no candidate source to build
        return
    score = args.ann_score or ann_score_for(args.similarity, index.images)
    modalities = tuple(args.modalities or ("image", "caption"))
    if args.backend == "milvus":
        _check_milvus_target(args)
        kinds = MILVUS_INDEX_TYPES
        extra = {k: v for k, v in (("nlist", args.nlist), ("nprobe", args.nprobe)) if v is not None}
        built = index.build_milvus(args.uri, score, modalities, kinds[args.index_type],
                                   collection_prefix=args.collection_prefix, shard_size=args.shard_size,
                                   owner=args.index,
                                   reference_sample=args.reference_sample, **extra)
        for modality, source in built.items():
            print(f"milvus collection {source.collection} at {source.uri}: {source.ntotal} {modality}s, "
                  f"{source.index_type}, score {source.score}")
        return
    params = {name: value for name, value in (("nlist", args.nlist), ("nprobe", args.nprobe),
                                               ("hnsw_m", args.hnsw_m), ("ef_search", args.ef_search),
                                               ("pq_m", args.pq_m))
              if value is not None}
    if args.index_type == "ivfpq":
        params["opq"] = bool(args.opq)
        if args.refine is not None:
            params["refine"] = args.refine
        if args.memory_budget is not None:
            params["memory_budget"] = parse_memory(args.memory_budget)
    elif args.opq or args.memory_budget is not None or args.pq_m is not None or args.refine is not None:
        raise ValueError("--pq-m, --opq, --refine and --memory-budget apply to --index-type ivfpq only")
    with phase(f"building the faiss index ({args.index_type}, score {score})"):
        built = index.build_ann(score, modalities, args.index_type,
                                shard_size=args.shard_size, progress=None, reference_sample=args.reference_sample,
                                **params)
    notes: dict[str, list[str]] = {}
    for modality, ann in built.items():
        how = "chosen by gallery size" if args.index_type == "auto" else "requested"
        params_text = ", ".join(f"{key}={value}" for key, value in ann.params.items()) or "none"
        print(f"faiss index over {ann.ntotal} {modality}s: {ann.index_type} ({how}), score {ann.score}, "
              f"params {params_text}")
        for note in ann.notes:
            notes.setdefault(note, []).append(modality)
    for note, built_over in notes.items():  # one line per cause, not one per faiss k-means
        print(f"warning: {' and '.join(built_over)} index{'es' if len(built_over) > 1 else ''}: {note}",
              file=sys.stderr)


def _shown(index: Any, results: Any, queries: list[str], k: int) -> list[dict[str, Any]]:
    """JSON-ready blocks of one search call (pcmr.search.presentation): identical captions merged,
    uncertainty as a gallery percentile (raw value kept), warnings per query."""
    text_queries = results.query_modality == "caption"
    gallery_unc = None if index.gallery(results.gallery_modality).is_point else index.item_uncertainty(
        results.gallery_modality)
    query_unc = None if index.gallery(results.query_modality).is_point else index.item_uncertainty(
        results.query_modality)
    vocabulary = word_vocabulary(index.model) if text_queries else None
    out = []
    for q, (query, hits) in enumerate(zip(queries, results.hits)):
        entries = shown_entries(hits, k, gallery_unc)
        raw = None if results.query_uncertainty is None else float(results.query_uncertainty[q])
        out.append({"query": query, "similarity": results.similarity, "rerank": results.rerank,
                    "query_uncertainty": raw,
                    "query_uncertainty_percentile": uncertainty_percentile(raw, query_unc),
                    "results": entries, "warnings": result_warnings(entries, query, vocabulary)})
    return out


def _distinct_results(function: Any, queries: list[str], args: argparse.Namespace, options: dict[str, Any],
                      similarity_options: dict[str, Any], gallery_size: int, modality: str) -> tuple[Any, int]:
    """Search ``queries`` asking for enough results that ``-k`` distinct lines remain once identical
    captions are merged (:func:`pcmr.search.presentation.search_distinct`). Returns the results and how
    many were fetched per query."""
    def search(fetch: int) -> Any:
        return function(queries, k=fetch, similarity=args.similarity, rerank=args.rerank, rerank_options=options,
                        backend=args.backend, candidates=args.candidates, **similarity_options)
    return search_distinct(search, args.k, gallery_size, modality, args.rerank)


def _coverages(args: argparse.Namespace) -> dict[str, tuple[float, str]] | None:
    """The answered share per query modality (``caption``: text queries, ``image``: image queries) and
    why, from ``--answer-coverage`` or ``--max-risk`` with ``--risk-curve``; None: answer every query."""
    if args.answer_coverage is not None and args.max_risk is not None:
        raise ValueError("give --answer-coverage or --max-risk, not both")
    if args.answer_coverage is not None:
        if not 0.0 < args.answer_coverage <= 1.0:
            raise ValueError(f"--answer-coverage must be a share in (0, 1], got {args.answer_coverage}")
        why = f"--answer-coverage {args.answer_coverage:g}"
        return {"caption": (args.answer_coverage, why), "image": (args.answer_coverage, why)}
    if args.max_risk is None:
        if args.risk_curve is not None:
            raise ValueError("--risk-curve sets the coverage for --max-risk; add --max-risk RISK")
        return None
    if args.risk_curve is None:
        raise ValueError("--max-risk needs --risk-curve EVAL_DIR: the evaluation whose risk-coverage curve maps a "
                         "risk to the share of queries answered")
    out = {}
    for modality, direction, queries in (("caption", T2I, args.text), ("image", I2T, args.image)):
        if not queries:
            continue
        curve = read_risk_curve(args.risk_curve, args.similarity, direction)
        share = coverage_for_risk(*curve, args.max_risk, where=f"{args.risk_curve}, {args.similarity}, {direction}")
        out[modality] = (share, f"risk <= {args.max_risk:g} on {args.risk_curve}, {direction}")
    return out


def _check_risk_curve(args: argparse.Namespace, index: Any) -> None:
    """--risk-curve must come from an evaluation of this index's model on its gallery (the fingerprint
    the evaluation stores beside the curve)."""
    if args.risk_curve is None or args.max_risk is None:
        return
    if index.model is None:
        raise ValueError(f"--risk-curve: {args.index} holds no model, so its curve cannot be checked against it")
    current = gallery_fingerprint(index.model.network, index.meta.get("dataset"), index.meta.get("split"),
                                  index.images.num, index.captions.num)
    check_curve_fingerprint(args.risk_curve, current)


def _block_text(entry: dict[str, Any]) -> str:
    if entry.get("abstained"):
        return f"{entry['query']}  [{entry['similarity']}, {entry['rerank']}]\nuncertain: {entry['reason']}"
    kind = "images" if entry["results"] and entry["results"][0].get("text") is not None else "captions"
    if "coverage" in entry:  # answered under --answer-coverage / --max-risk: the share chosen, and why
        return entries_text(entry["query"], f"{entry['similarity']}, {entry['rerank']}", entry["results"], [],
                            entry["query_uncertainty_percentile"], kind) + f"\n{entry['reason']}"
    return entries_text(entry["query"], f"{entry['similarity']}, {entry['rerank']}", entry["results"], [],
                        entry["query_uncertainty_percentile"], kind)


def _default_similarity(args: argparse.Namespace) -> str:
    """The similarity the model was trained with: the one of ``--build RUN_OR_MODEL``, else the one the index
    records (small files only, nothing is loaded); cosine for ``--from-embeddings`` or when none is recorded."""
    if args.build:
        return trained_similarity(args.build)
    if args.from_embeddings:
        return "cosine"
    return stored_similarity(args.index) or "cosine"


def run(args: argparse.Namespace) -> int:
    return run_until_terminated("search", _run, args, args.index)


def _run(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise ValueError(f"-k must be a positive integer, got {args.k}")
    empty = [t for t in args.text if not t.strip()]
    if empty:
        raise ValueError("--text must be a non-empty caption, e.g. --text 'a red circle'")
    if sum(x is not None for x in (args.build, args.from_embeddings, args.add)) > 1:
        raise ValueError("give only one of --build, --from-embeddings and --add")
    if (args.on_disk or args.store_dtype is not None) and args.build is None:
        raise ValueError("--on-disk and --store-dtype apply to --build RUN_OR_MODEL only")
    if args.store_dtype is not None and not args.on_disk:
        raise ValueError("--store-dtype sets the precision of an --on-disk gallery; add --on-disk")
    if args.similarity is None:
        args.similarity = _default_similarity(args)
    checked_name("--similarity", args.similarity, get_similarity)
    checked_name("--rerank", args.rerank, get_reranker)
    coverage = _coverages(args)  # checked before any work
    _check_milvus_target(args)
    index = None
    if args.build or args.from_embeddings or args.add:
        with writing_folder(args.index, "writing this index"):  # one writer per index; a killed one's copies put right
            if args.build:
                index = _build(args)
            elif args.from_embeddings:
                index = _from_embeddings(args)
            else:
                index = _add(args)
    if not args.text and not args.image:
        if index is None:
            raise ValueError(
                "nothing to do: give --text TEXT or --image PATH to search, or --build RUN_OR_MODEL"
            )
        return 0
    if index is None:
        index = GalleryIndex.load(args.index, device=args.device)
    _check_risk_curve(args, index)
    options, similarity_options = _query_options(args.option, args.similarity, args.rerank)
    blocks: list[list[dict[str, Any]]] = []
    notes: list[str] = []
    for queries, modality, function in ((list(args.text), "image", index.search_text),
                                        (list(args.image), "caption", index.search_image)):
        if queries:
            results, fetch = _distinct_results(function, queries, args, options, similarity_options,
                                               index.gallery(modality).num,
                                               modality)
            shown = _shown(index, results, queries, args.k)
            for entry in shown:
                fewer = fewer_lines_warning(len(entry["results"]), args.k, fetch, index.gallery(modality).num,
                                            get_reranker(args.rerank).returns_scores)
                if fewer:
                    entry["warnings"].append(fewer)
            if coverage is not None:
                share, why = coverage[results.query_modality]
                shown = [abstention_entry(entry, share, why) if abstains(entry["query_uncertainty_percentile"], share)
                         else answered_entry(entry, share, why) for entry in shown]
            blocks.append(shown)
            notes += results.notes
    if args.json:
        print(json.dumps([entry for block in blocks for entry in block], indent=2, ensure_ascii=False))
    else:
        print("\n\n".join(_block_text(entry) for block in blocks for entry in block))
        print(f"\n{UNCERTAINTY_NOTE}\n{score_note(args.similarity, args.rerank)}")
    for entry in (e for block in blocks for e in block):
        for warning in entry["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
    for note in dict.fromkeys(notes):
        print(f"warning: {note}", file=sys.stderr)
    return 0
