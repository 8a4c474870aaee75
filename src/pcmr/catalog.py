"""The names and defaults the command line shows before the library is loaded.

``pcmr <command> --help``, a refused argument and ``pcmr list`` answer without importing torch, so the
names they offer (every registry's entries, the search's index types and exact ANN scores) and the
defaults their help quotes are written out here. This is a copy: ``tests/test_catalog.py`` checks each
entry against the library's own (the registries' ``list_*`` functions, ``pcmr.data.ENCODE_BATCH_SIZE``,
...), so the two cannot drift apart; a new registered name fails that test until it is added here.
Standard library only: importing this module loads neither torch nor numpy.
"""

from __future__ import annotations

__all__ = ["ANN_SCORES", "COMMANDS", "DEFAULT_CANDIDATES", "DEFAULT_REFERENCE_SAMPLE", "DEFAULT_RERANKERS", "DEFAULT_SIMILARITIES",
           "DEFAULT_TOP_K", "ENCODE_BATCH_SIZE", "INDEX_TYPES", "REGISTERED", "REQUEST_TIMEOUT_S", "RESCORE_ALL_MAX"]

#: the commands: name -> (the module of ``pcmr.cli`` and of ``pcmr.cli.parsers`` implementing it, its one-line
#: help in ``pcmr --help`` and in its own parser). The table itself, not a copy
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "train a model from a recipe (a shipped recipe name or a YAML path) or resume a run"),
    "evaluate": ("evaluate", "evaluation table of a trained model (all similarities x re-rankers)"),
    "search": ("search", "build a gallery index and search it by text or image"),
    "serve": ("serve", "serve a gallery index: a search page and a JSON API"),
    "demo": ("demo", "train and compare pcme and pcme_mu_only on the built-in data (a few minutes on a CPU)"),
    "list": ("listing", "list the names a config or command may use"),
    "study": ("study", "run a study: recipes x variants x seeds, trained, evaluated and the papers' claims judged"),
    "convert": ("convert", "convert a checkpoint of a paper's official release into a pcmr model folder"),
}

#: the names of each registry, in its listing order (what ``pcmr list KIND`` prints): models
#: (``pcmr.models.list_models``), scores (``pcmr.similarity.list_similarities``), losses
#: (``pcmr.losses.list_losses``), re-rankers (``pcmr.inference.list_rerankers``: the re-weightings and
#: matchings and their combinations), datasets (``pcmr.data.list_datasets``) and search backends
#: (``pcmr.search.compose.backend_names``: the built-in ones, then one per registered candidate source) and
#: the evaluation's producers of columns and figures (``pcmr.evaluation.producers.list_producers``)
REGISTERED: dict[str, tuple[str, ...]] = {
    "models": ("gce", "gcie", "gie", "pcme", "pcme_mu_only", "probvse", "probvsrn", "pvse", "vsepp", "vsepp_wide"),
    "similarities": ("cosine", "l2", "kl", "kl_reverse", "min_kl", "js", "elk", "bhattacharyya", "wasserstein",
                     "mahalanobis_caption", "mahalanobis_image", "csd", "avg_l2", "match_prob", "max_cosine"),
    "losses": ("triplet_sum", "triplet_max", "triplet_semihard", "hal", "max_hal", "hal_released", "pcme", "pcme_csd",
               "calibpe", "pvse"),
    "rerankers": ("nns", "is", "csls", "gm", "rgm", "is+gm", "is+rgm", "csls+gm", "csls+rgm"),
    "datasets": ("coco", "cub", "flickr30k", "folder", "hf", "karpathy", "precomputed", "shapes", "webdataset"),
    "backends": ("auto", "exact", "faiss", "milvus"),
    "producers": ("uncertainty_r1", "abstention", "embeddings_pca", "k_occurrence", "embeddings_2d",
                  "uncertainty_multiplicity", "uncertainty_vs_corruption"),
}

#: the scores a faiss index answers exactly (``pcmr.search.ann.ANN_SCORES``: ``pcmr search --ann-score``)
ANN_SCORES: tuple[str, ...] = ("cosine", "l2", "wasserstein", "csd")
#: the faiss index structures (``pcmr.search.ann.INDEX_TYPES``: ``pcmr search --index-type``)
INDEX_TYPES: tuple[str, ...] = ("flat", "ivf", "hnsw", "ivfpq")

#: ``pcmr.data.ENCODE_BATCH_SIZE``: items per encoding batch
ENCODE_BATCH_SIZE = 256
#: ``pcmr.metrics.defaults.DEFAULT_SIMILARITIES`` / ``DEFAULT_RERANKERS``: what an evaluation scores by default
DEFAULT_SIMILARITIES: tuple[str, ...] = ("cosine", "wasserstein", "match_prob", "elk", "kl")
DEFAULT_RERANKERS: tuple[str, ...] = ("nns", "is", "csls", "csls+rgm")
#: ``pcmr.search.compose.DEFAULT_TOP_K``: results per query
DEFAULT_TOP_K = 10
#: ``pcmr.search.searcher.DEFAULT_CANDIDATES``: candidates per query re-scored exactly
DEFAULT_CANDIDATES = 100
#: ``pcmr.search.searcher.DEFAULT_REFERENCE_SAMPLE``: reference queries of the re-rankers' gallery statistics
DEFAULT_REFERENCE_SAMPLE = 2000
#: ``pcmr.search.compose.RESCORE_ALL_MAX``: galleries up to this size are re-scored whole by is/csls
RESCORE_ALL_MAX = 50_000
#: ``pcmr.search.service.ServiceLimits.request_timeout_s``: seconds ``pcmr serve`` waits for a whole request
REQUEST_TIMEOUT_S = 30.0
