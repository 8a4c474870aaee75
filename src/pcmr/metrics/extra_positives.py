"""Extra positive sets of COCO 5K-test: CxC and ECCV Caption, from the ``eccv-caption`` package.

The MIT-licensed PyPI package ``eccv-caption`` (optional extra ``pcmr[eccv]``) ships JSON files
mapping COCO image ids to caption ids and back: the original COCO pairs, CxC (Parekh et al. 2021,
used for RPC², ProbVSE §4.3) and ECCV Caption (Chun et al. 2022), and the 25,000 test caption
ids in its order. They are read straight from the package's data folder (the package itself is
not imported) and mapped onto the user's image / caption id order.

eccv-caption's conventions kept here: its positive lists are used as shipped (e.g. CxC lists of
29 images lack one original caption, 28 captions have no CxC entry and are not queries), and a
positive that is not in the gallery still counts in R (``missing="count"``; two ECCV i2t positives
are not among the 25K test captions). ``missing="drop"`` ignores such positives instead.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pcmr.metrics._relevance import SparseRelevance, from_pairs
from pcmr.suggest import unknown_name

# name -> (i2t file, t2i file) in eccv_caption/data
POSITIVE_SETS = {
    "coco": ("original_image_to_caption.json", "original_caption_to_image.json"),
    "cxc": ("cxc_image_to_caption.json", "cxc_caption_to_image.json"),
    "eccv": ("eccv_image_to_caption.json", "eccv_caption_to_image.json"),
}
DISPLAY_NAMES = {"coco": "COCO", "cxc": "CxC", "eccv": "ECCV"}


def eccv_caption_data_dir() -> Path:
    """The data folder of the installed ``eccv-caption`` package (ImportError if absent)."""
    spec = importlib.util.find_spec("eccv_caption")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the CxC / ECCV Caption positives and the COCO 5K-test ids come from the 'eccv-caption' "
            "package; install it with `pip install eccv-caption` (or `pip install pcmr[eccv]`)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    if not folder.is_dir():
        raise ImportError(f"the eccv-caption package has no data folder at {folder}")
    return folder


@functools.lru_cache(maxsize=8)
def _read_id_lists(file_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One eccv-caption JSON file as (query ids [n], indptr [n + 1], positive ids [nnz])."""
    path = eccv_caption_data_dir() / file_name
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: expected a JSON object of id -> list of ids ({error})") from error
    keys = np.fromiter((int(k) for k in raw), dtype=np.int64, count=len(raw))
    lengths = np.fromiter((len(v) for v in raw.values()), dtype=np.int64, count=len(raw))
    values = np.fromiter((int(x) for v in raw.values() for x in v), dtype=np.int64, count=int(lengths.sum()))
    indptr = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return keys, indptr, values


def coco_5k_test_ids() -> tuple[list[int], list[int]]:
    """COCO 5K-test (Karpathy split) image and caption ids in eccv-caption's order.

    Captions: ``coco_test_ids.npy`` (25,000 ids, five consecutive captions per image); images:
    order of first appearance there, so images ``1000 f .. 1000 f + 999`` with their captions
    form eccv-caption's COCO 1K fold f.
    """
    caption_ids = np.load(eccv_caption_data_dir() / "coco_test_ids.npy", allow_pickle=False)
    keys, indptr, values = _read_id_lists(POSITIVE_SETS["coco"][1])
    first_image = dict(zip(keys.tolist(), values[indptr[:-1]].tolist()))
    image_ids = list(dict.fromkeys(first_image[int(c)] for c in caption_ids))
    return image_ids, [int(c) for c in caption_ids]


def _index_of(ids: Sequence[int], name: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted user ids and the user position of each, for ``searchsorted`` look-ups."""
    array = np.asarray(list(ids), dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of integer ids")
    order = np.argsort(array, kind="stable")
    sorted_ids = array[order]
    if sorted_ids.size > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
        dup = int(sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]][0])
        raise ValueError(f"{name} holds id {dup} more than once; ids must be unique")
    return sorted_ids, order


def _lookup(ids: np.ndarray, sorted_ids: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Position of each id in the user's order, -1 when absent."""
    if sorted_ids.size == 0:
        return np.full(ids.shape, -1, dtype=np.int64)
    where = np.clip(np.searchsorted(sorted_ids, ids), 0, sorted_ids.size - 1)
    return np.where(sorted_ids[where] == ids, order[where], -1)


@dataclass(frozen=True)
class ExtraPositives:
    """A positive set in both directions, in the user's index order.

    i2t: ``[N_img, N_cap]`` relation; t2i: ``[N_cap, N_img]``; i2t_missing / t2i_missing: ``[N]``
    positives of each query absent from the gallery (counted in R; zeros under ``missing="drop"``).
    Queries the set does not define have no positives and are skipped.
    """

    name: str
    i2t: SparseRelevance
    t2i: SparseRelevance
    i2t_missing: Tensor
    t2i_missing: Tensor


def _map_relation(file_name: str, query_ids: tuple[np.ndarray, np.ndarray], num_queries: int,
                  gallery_ids: tuple[np.ndarray, np.ndarray], num_gallery: int,
                  missing: str) -> tuple[SparseRelevance, Tensor]:
    keys, indptr, values = _read_id_lists(file_name)
    query_pos = _lookup(keys, *query_ids)  # [n]
    row = np.repeat(query_pos, np.diff(indptr))  # [nnz]
    col = _lookup(values, *gallery_ids)  # [nnz]
    known = row >= 0
    present = known & (col >= 0)
    relation = from_pairs(torch.from_numpy(row[present]), torch.from_numpy(col[present]), num_queries, num_gallery)
    absent = torch.from_numpy(np.bincount(row[known & (col < 0)], minlength=num_queries).astype(np.int64))
    if missing == "drop":
        absent = torch.zeros_like(absent)
    return relation, absent


def load_extra_positives(name: str, image_ids: Sequence[int], caption_ids: Sequence[int], *,
                         missing: str = "count") -> ExtraPositives:
    """Load eccv-caption's ``"coco"`` (original), ``"cxc"`` or ``"eccv"`` positives for the user's ids.

    Args:
        name: which set.
        image_ids: COCO image id of each score-matrix row ``[N_img]``.
        caption_ids: COCO caption id of each column ``[N_cap]``.
        missing: ``"count"`` (eccv-caption's convention: a positive absent from the gallery still
            counts in R and can never be retrieved) or ``"drop"`` (ignore it).
    """
    if name not in POSITIVE_SETS:
        raise ValueError(unknown_name("positive set", str(name), sorted(POSITIVE_SETS)))
    if missing not in ("count", "drop"):
        raise ValueError(f"missing must be 'count' or 'drop', got {missing!r}")
    images = _index_of(image_ids, "image_ids")
    captions = _index_of(caption_ids, "caption_ids")
    num_images, num_captions = images[0].size, captions[0].size
    i2t_file, t2i_file = POSITIVE_SETS[name]
    i2t, i2t_missing = _map_relation(i2t_file, images, num_images, captions, num_captions, missing)
    t2i, t2i_missing = _map_relation(t2i_file, captions, num_captions, images, num_images, missing)
    return ExtraPositives(DISPLAY_NAMES[name], i2t, t2i, i2t_missing, t2i_missing)
