"""The parser of ``pcmr search`` (the run side: :mod:`pcmr.cli.search`)."""

from __future__ import annotations

import argparse

from pcmr.arguments import positive_int
from pcmr.catalog import (
    ANN_SCORES,
    COMMANDS,
    DEFAULT_CANDIDATES,
    DEFAULT_REFERENCE_SAMPLE,
    DEFAULT_TOP_K,
    ENCODE_BATCH_SIZE,
    INDEX_TYPES,
    REGISTERED,
    RESCORE_ALL_MAX,
)

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "search",
        help=COMMANDS["search"][1],
        description="Search a saved gallery index (pcmr.search) by caption text (returns images) or by image "
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
        help="encode a gallery with this run folder (from `pcmr train`), its model/ folder or a folder from "
        "Model.save_pretrained into INDEX",
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
    build.add_argument("--split", default=None,
                       help="split encoded as the gallery (default: 'all' for your own images, every image of the "
                       "folder; else the run's eval.split, else test)")
    build.add_argument("--vocab", default=None,
                       help="vocab.json of the training run (default: the model folder's vocabulary.json, or the "
                       "vocab.json beside it)")
    build.add_argument("--batch-size", type=positive_int, default=ENCODE_BATCH_SIZE,
                       help=f"items per encoding batch (default {ENCODE_BATCH_SIZE})")
    build.add_argument("--from-embeddings", metavar="FILE", default=None,
                       help="build INDEX from saved embeddings (safetensors: image_mean, image_logvar, "
                       "caption_mean, caption_logvar) instead of a model; queries then need Gaussians")
    build.add_argument("--overwrite", action="store_true",
                       help="replace an existing INDEX folder with --build / --from-embeddings (the new index "
                       "is swapped in whole once complete)")
    build.add_argument("--on-disk", action="store_true",
                       help="encode the gallery batch by batch into a store on disk inside INDEX (never whole in "
                       "memory) and answer through faiss candidates (best --index-type ivfpq) re-scored exactly "
                       "from the rows read; the exact backend and gm/rgm need an index built without it")
    build.add_argument("--store-dtype", default=None, choices=["float16", "float32"],
                       help="--on-disk: precision of the stored Gaussians (default float16, half the disk)")
    build.add_argument("--add", metavar="FILE", default=None,
                       help="append the items of a saved-embeddings file to the existing INDEX")
    ann = parser.add_argument_group("faiss backend (building)")
    ann.add_argument("--index-type", default="auto", choices=["auto", *INDEX_TYPES],
                     help="ANN structure (default auto: flat up to 50k items, hnsw up to 300k, ivf above); "
                     "ivfpq: compressed codes whose candidates are re-scored exactly")
    ann.add_argument("--ann-score", default=None, choices=list(ANN_SCORES),
                     help="score the ANN index answers exactly (default: --similarity when it is one of these, "
                     "csd for match_prob/avg_l2, else wasserstein, or cosine for point embeddings); other scores "
                     "re-rank its candidates")
    ann.add_argument("--modality", dest="modalities", action="append", choices=["image", "caption"], default=None,
                     help="gallery modality to index (repeatable; default both)")
    ann.add_argument("--nlist", type=int, default=None, help="IVF lists (default ~4 sqrt(N))")
    ann.add_argument("--nprobe", type=int, default=None, help="IVF lists visited per query (default 32)")
    ann.add_argument("--hnsw-m", type=int, default=None, help="HNSW links per node (default 32)")
    ann.add_argument("--ef-search", type=int, default=None, help="HNSW search breadth (default 64)")
    ann.add_argument("--shard-size", type=int, default=65_536, help="rows per add/read shard (default 65536)")
    ann.add_argument("--pq-m", type=int, default=None,
                     help="ivfpq: bytes per item code (default: the largest that fits --memory-budget)")
    ann.add_argument("--opq", action="store_true", help="ivfpq: learn an OPQ rotation before quantising")
    ann.add_argument("--refine", default=None, choices=["SQ8", "SQfp16"],
                     help="ivfpq: a finer second code per item (1 or 2 bytes per column) that re-orders the PQ "
                     "candidates, so fewer need exact re-scoring")
    ann.add_argument("--memory-budget", default=None, metavar="SIZE",
                     help="ivfpq: memory for the index, e.g. 2G; picks the code size and lists that fit")
    ann.add_argument("--reference-sample", type=int, default=DEFAULT_REFERENCE_SAMPLE,
                     help="stored items of the other modality used as reference queries by the re-rankers' "
                     f"gallery statistics (CSLS, inverted softmax; default {DEFAULT_REFERENCE_SAMPLE})")
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
    query.add_argument("-k", "--top-k", dest="k", type=positive_int, default=DEFAULT_TOP_K,
                       help=f"results per query (default {DEFAULT_TOP_K})")
    query.add_argument(
        "--similarity",
        default=None,
        help="similarity name (see `pcmr list similarities`; default: the one the model was trained with, e.g. "
        "match_prob with its trained a and b for PCME; cosine when the index records none)",
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
        metavar="NAME.OPTION=VALUE",
        help="an option of the --rerank re-ranker or the --similarity score, as in pcmr evaluate: e.g. "
        "is.beta=30, csls.csls_k=10, rgm.lam=2, match_prob.a=12.5 (YAML value); repeatable. The older "
        "OPTION=VALUE (a number, for the re-ranker) is deprecated",
    )
    query.add_argument("--json", action="store_true", help="print the results as JSON")
    query.add_argument("--answer-coverage", type=float, default=None, metavar="SHARE",
                       help="answer 'uncertain' instead of a list when the query's uncertainty is above this share "
                       "(0-1) of the stored items of its modality, e.g. 0.8")
    query.add_argument("--max-risk", type=float, default=None, metavar="RISK",
                       help="answer 'uncertain' where the risk-coverage curve of --risk-curve says the answered "
                       "queries' risk (1 - R-Precision) would exceed RISK (0-1)")
    query.add_argument("--risk-curve", default=None, metavar="EVAL_DIR",
                       help="an evaluation folder (pcmr evaluate --out) whose risk-coverage curve sets the coverage "
                       "for --max-risk")
    parser.add_argument("--backend", default="auto", choices=list(REGISTERED["backends"]),
                        help="search backend; with --build/--from-embeddings, 'faiss' also builds the ANN index and "
                        "'milvus' writes the ANN vectors to the Milvus collection at --uri (default auto: the "
                        "candidate source the index has, else exact)")
    parser.add_argument("--uri", default=None,
                        help="milvus backend (building): a Milvus Lite file name.db (embedded) or a server address "
                        "such as http://localhost:19530")
    parser.add_argument("--collection-prefix", default="pcmr",
                        help="milvus backend (building): collections are named PREFIX_image and PREFIX_caption")
    query.add_argument("--candidates", type=int, default=None,
                       help=f"faiss/milvus backend: candidates per query re-scored exactly (default {DEFAULT_CANDIDATES}; "
                       f"is/csls: every item of a gallery of up to {RESCORE_ALL_MAX:,})")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda (default: cpu)")
    return parser
