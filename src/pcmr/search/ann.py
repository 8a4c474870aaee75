"""Approximate nearest-neighbour search over Gaussians with faiss (flat, IVF, HNSW).

Four scores are *exactly* nearest-neighbour problems on fixed vectors (docs/search.md):

- ``cosine``: inner product of the normalised means, ``x = m / |m|``;
- ``l2``: ``-|m1 - m2|``, Euclidean distance of the means, ``x = m``;
- ``wasserstein``: ``-W2`` with ``W2^2 = |m1 - m2|^2 + |s1 - s2|^2`` over standard deviations
  ``s = exp(logvar / 2)`` (ProbVSE eq. 7-8, GCIE eq. 17, CalibPE eq. 7): Euclidean distance of
  ``x = [m, s]``. A spherical gallery (``logvar [N, 1]``) stores ``sqrt(D) * s`` in one column; an
  ellipsoidal query against it contributes ``sqrt(D) * mean_d(s_q)`` plus the query-only constant
  ``sum_d s_qd^2 - D mean_d(s_q)^2``; a point gallery stores ``m`` and a query adds ``sum_d s_qd^2``;
- ``csd``: ``-(|m1 - m2|^2 + sum_d v1 + sum_d v2)`` (PCME++'s closed-form sampled distance, the
  expected squared distance of two samples): the squared Euclidean distance of ``x = [m, sqrt(sum_d v)]``
  (gallery) and ``y = [m, 0]`` (query) plus the query-only ``sum_d v_q``.

Each of the four says how its vectors are built in its registry entry (``Similarity.ann_vectors``,
:class:`pcmr.similarity.AnnVectors`); this module reads that, never the score's name. Every other
score uses one of these as a candidate generator (its ``ann_score``) followed by exact re-scoring
(:mod:`pcmr.search.searcher`). faiss structures are written with ``faiss.write_index`` (faiss's own
binary format, not pickle) through a Python file object, so a failed write raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.progress import progress_bar
from pcmr.search.store import GalleryStore
from pcmr.similarity import AnnVectors, get_similarity, list_similarities

__all__ = ["ANN_SCORES", "POINT_GALLERY_ANN_SCORE", "SUMMED_LAYOUT", "vector_form", "ProgressCounter", "ann_score_for", "build_ann", "INDEX_TYPES", "AnnIndex", "choose_index_type", "compressed_params", "gallery_layout",
           "gallery_vectors", "parse_memory", "query_vectors", "scores_from_distances"]

#: the scores an ANN index ranks by exactly: those whose registry entry gives its vectors (``ann_vectors``)
ANN_SCORES = tuple(name for name in list_similarities() if get_similarity(name).ann_vectors is not None)
#: the layout of a gallery whose summed variance joins its means (the stored name of an index file's layout)
SUMMED_LAYOUT = "csd"
#: the ANN score of a point gallery for a score that no ANN index ranks by exactly (no spread to index)
POINT_GALLERY_ANN_SCORE = "cosine"
INDEX_TYPES = ("flat", "ivf", "hnsw", "ivfpq")
PQ_CHOICES = (8, 16, 32, 64, 128)  # bytes per item of an IVF-PQ code (8 bits per sub-quantizer)
ID_BYTES = 8  # faiss stores one int64 id per item in an inverted list
PQ_CENTROIDS = 256  # codewords per sub-quantizer of an 8-bit PQ code (its k-means needs that many items)
REFINE_BYTES = {"SQ8": 1, "SQfp16": 2}  # bytes per column of an IVF-PQ index's optional refine code
FLAT_MAX = 50_000  # galleries up to this size get an exact flat index by default
HNSW_MAX = 300_000  # then HNSW up to this size, IVF above (cheaper to build on few cores)
_NORM_EPS = 1e-12
KMEANS_POINTS_PER_CENTROID = 39  # faiss's k-means warns below this many training items per centroid


def _small_training_note(kind: str, rows: int, centroids: int) -> str | None:
    """One line for a k-means trained on fewer items than faiss asks for (it would print one warning
    per sub-quantizer), saying what to do; None when the sample is large enough."""
    need = centroids * KMEANS_POINTS_PER_CENTROID
    if rows >= need:
        return None
    return (f"{kind} trained its {centroids}-centroid k-means on fewer items than faiss asks for ({need}), so "
            "its candidates are coarse; for a gallery this small use --index-type flat (exact) or hnsw")


def _quiet_kmeans(index: Any, faiss: Any) -> Any:
    """Silence faiss's per-k-means 'please provide at least N training points' lines (the caller reports
    a small sample once): the warning threshold is faiss's only use of ``min_points_per_centroid``, so
    the trained index is unchanged. Returns what must stay alive until training ends."""
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    ivf.cp.min_points_per_centroid = 1
    keep = []
    if hasattr(ivf, "pq"):
        ivf.pq.cp.min_points_per_centroid = 1
    if isinstance(index, faiss.IndexPreTransform):
        for i in range(index.chain.size()):
            transform = faiss.downcast_VectorTransform(index.chain.at(i))
            if isinstance(transform, faiss.OPQMatrix):  # its own PQ, re-parameterised each iteration as default
                pq = faiss.ProductQuantizer(transform.d_out, transform.M, 8)
                pq.cp.min_points_per_centroid = 1
                transform.pq = pq
                keep.append(pq)
    return keep


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise ImportError("the faiss backend needs faiss: pip install 'pcmr[search]' (faiss-cpu)") from err
    return faiss


def vector_form(score: str) -> AnnVectors:
    """The vectors of ANN score ``score`` (its registry entry's :class:`~pcmr.similarity.AnnVectors`)."""
    form = get_similarity(score).ann_vectors if score in ANN_SCORES else None
    if form is None:
        raise ValueError(f"ANN score must be one of {list(ANN_SCORES)}, got {score!r}")
    return form


def gallery_layout(score: str, gallery: Gaussian) -> str:
    """How the standard deviations enter the vectors: ``"none"`` (cosine, l2, or a point gallery
    under W2), ``"spherical"`` (one ``sqrt(D) * s`` column), ``"diagonal"`` (``D`` columns) or
    :data:`SUMMED_LAYOUT` (one column, the root of the summed variance: csd)."""
    form = vector_form(score)
    if form.spread == "variance":
        return SUMMED_LAYOUT
    if form.spread == "none" or gallery.is_point:
        return "none"
    return "spherical" if gallery.is_spherical else "diagonal"


def gallery_vectors(score: str, gallery: Gaussian, layout: str) -> np.ndarray:
    """float32 ``[N, D']`` vectors of gallery items (``D' = D``, ``D + 1`` or ``2D``)."""
    mean = gallery.mean.detach().float().cpu()
    if vector_form(score).normalised:
        out = F.normalize(mean, dim=1, eps=_NORM_EPS)
    elif layout == "none":
        out = mean
    elif layout == SUMMED_LAYOUT:
        total = gallery.var.detach().float().cpu().sum(1, keepdim=True)
        total = total * (gallery.dim if gallery.var.shape[1] == 1 and not gallery.is_point else 1)
        out = torch.cat([mean, total.sqrt()], dim=1)
    elif layout == "spherical":
        out = torch.cat([mean, math.sqrt(gallery.dim) * gallery.std.detach().float().cpu()], dim=1)
    else:
        out = torch.cat([mean, gallery.std.detach().float().cpu()], dim=1)
    return np.ascontiguousarray(out.numpy(), dtype=np.float32)


def query_vectors(score: str, query: Gaussian, layout: str) -> tuple[np.ndarray, Tensor]:
    """Query vectors ``[Q, D']`` in the gallery's layout and the query-only constant ``[Q]`` that
    completes the squared distance (zero except under W2; see the module docstring)."""
    mean = query.mean.detach().float().cpu()
    zero = torch.zeros(query.num)
    form = vector_form(score)
    if form.normalised:
        return np.ascontiguousarray(F.normalize(mean, dim=1, eps=_NORM_EPS).numpy()), zero
    if form.spread == "none":
        return np.ascontiguousarray(mean.numpy()), zero
    dim = query.dim
    if form.spread == "variance":
        var = query.var.detach().float().cpu()  # [Q, D] | [Q, 1] (zeros for points)
        total = var.sum(1) * (dim if var.shape[1] == 1 and not query.is_point else 1)
        return np.ascontiguousarray(torch.cat([mean, torch.zeros(query.num, 1)], dim=1).numpy()), total
    std = query.std.detach().float().cpu()  # [Q, D] | [Q, 1] (zeros for points)
    full_sq = std.square().sum(1) * (dim if std.shape[1] == 1 else 1)  # sum_d s_qd^2, [Q]
    if layout == "none":
        return np.ascontiguousarray(mean.numpy()), full_sq
    if layout == "diagonal":
        return np.ascontiguousarray(torch.cat([mean, std.expand(-1, dim)], dim=1).numpy()), zero
    avg = std.mean(1, keepdim=True)  # [Q, 1]
    constant = (full_sq - dim * avg.squeeze(1).square()).clamp_min(0.0)
    return np.ascontiguousarray(torch.cat([mean, math.sqrt(dim) * avg], dim=1).numpy()), constant


def scores_from_distances(score: str, distances: np.ndarray, constant: Tensor) -> Tensor:
    """pcmr scores (higher = closer) from faiss results: inner products for cosine, ``-sqrt(d + c)``
    for the squared L2 distances ``d`` of l2/W2, ``-(d + c)`` for csd."""
    values = torch.from_numpy(np.ascontiguousarray(distances, dtype=np.float32))
    form = vector_form(score)
    if form.normalised:
        return values
    if form.squared:
        return -(values + constant.unsqueeze(1))
    return -(values + constant.unsqueeze(1)).clamp_min(0.0).sqrt()


def compressed_params(num_items: int, width: int, memory_budget: int | None = None,
                      refine: str | None = None) -> dict[str, int]:
    """IVF-PQ parameters for ``num_items`` vectors of ``width`` columns that fit ``memory_budget`` bytes.

    Memory of the index: ``N (m + 8)`` bytes of codes and ids, ``4 nlist width`` of coarse centroids,
    ``4 * 256 * width`` of PQ tables, ``N width`` (SQ8) or ``2 N width`` (SQfp16) of refine codes. ``nlist`` is the power of two at most ``2 sqrt(N)`` (between 16
    and 16384, at most ``N / 39``); ``m`` the largest of :data:`PQ_CHOICES` up to ``min(64, width)``
    that fits (longer codes make each scanned item slower; 128 only when asked). A width that ``m``
    does not divide is padded with zero columns, which change no inner product or distance. Raises
    ValueError when even the smallest code does not fit.
    """
    nlist = 16
    while nlist * 2 <= min(16_384, max(16, 2 * math.isqrt(max(num_items, 1)))):
        nlist *= 2
    nlist = max(1, min(nlist, num_items // 39))
    fixed = 4 * nlist * width + 4 * 256 * width + num_items * width * REFINE_BYTES.get(refine or "", 0)
    fitting = [m for m in PQ_CHOICES if m <= min(64, width) and (memory_budget is None
               or num_items * (m + ID_BYTES) + fixed <= memory_budget)]
    if not fitting:
        need = num_items * (PQ_CHOICES[0] + ID_BYTES) + fixed
        raise ValueError(f"no IVF-PQ code fits: {num_items} items of width {width} need at least {need} bytes "
                         f"(codes of {PQ_CHOICES[0]} bytes + ids), memory budget {memory_budget}")
    return {"nlist": nlist, "pq_m": max(fitting)}


def parse_memory(text: str | int) -> int:
    """Bytes from ``"8G"``, ``"512M"``, ``"2.5GiB"`` or a plain number of bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    raw = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in units and raw[-1:] else ""
    try:
        value = float(raw[:-1] if unit else raw)
    except ValueError:
        raise ValueError(f"memory size must look like 8G, 512M or a number of bytes, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"memory size must be positive, got {text!r}")
    return int(value * units[unit])


def _padded(vectors: np.ndarray, pad: int) -> np.ndarray:
    """``vectors [N, w]`` with ``pad`` zero columns appended (a width the PQ code length divides)."""
    if not pad:
        return vectors
    return np.ascontiguousarray(np.pad(vectors, ((0, 0), (0, pad))), dtype=np.float32)


def ann_score_for(similarity: str, gallery: Gaussian | GalleryStore) -> str:
    """The ANN score that serves ``similarity`` on ``gallery``: the similarity's own ``ann_score``
    (:class:`pcmr.similarity.Similarity`), except that a point gallery gives no spread to index, so a
    score that an ANN index cannot rank by exactly takes its candidates from ``cosine`` there."""
    spec = get_similarity(similarity)
    if spec.ann_exact or not gallery.is_point:
        return spec.ann_score
    return POINT_GALLERY_ANN_SCORE


def choose_index_type(num_items: int) -> str:
    """``flat`` up to 50,000 items, ``hnsw`` up to 300,000, ``ivf`` above."""
    if num_items <= FLAT_MAX:
        return "flat"
    return "hnsw" if num_items <= HNSW_MAX else "ivf"


def default_nlist(num_items: int) -> int:
    """IVF lists: about ``4 sqrt(N)``, at most ``N / 39`` (faiss wants >= 39 training points per list)."""
    return max(1, min(int(4 * math.sqrt(max(num_items, 1))), num_items // 39))


@dataclass
class AnnIndex:
    """A faiss index over one gallery modality for one of :data:`ANN_SCORES`.

    ``layout`` (see :func:`gallery_layout`) fixes how query vectors are formed; ``params`` holds the
    construction and search parameters (``nlist``, ``nprobe``, ``hnsw_m``, ``ef_search``).
    """

    score: str
    index_type: str
    layout: str
    dim: int
    index: Any
    params: dict[str, Any]
    #: lines for the user about how the index was built (e.g. a k-means trained on few items); not saved
    notes: list[str] = field(default_factory=list, compare=False)
    engine: ClassVar[str] = "faiss"

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def create(cls, score: str, gallery: Gaussian, index_type: str = "auto", *, nlist: int | None = None,
               nprobe: int = 32, hnsw_m: int = 32, ef_construction: int = 80, ef_search: int = 64,
               train_size: int = 100_000, seed: int = 0, num_items: int | None = None, pq_m: int | None = None,
               opq: bool = False, memory_budget: int | None = None, refine: str | None = None,
               refine_factor: int = 8) -> AnnIndex:
        """An empty (trained, for IVF) index for ``gallery``'s layout. ``gallery`` supplies the layout
        and, for IVF, the k-means training sample (at most ``train_size`` rows drawn with ``seed``);
        ``num_items`` the expected size for ``index_type="auto"`` and the IVF list count.

        ``ivfpq``: IVF with product-quantised residuals (``pq_m`` bytes per item, with an OPQ rotation
        when ``opq``); ``nlist`` / ``pq_m`` default to :func:`compressed_params` for ``memory_budget``.
        ``refine="SQ8"`` (or ``"SQfp16"``) keeps a second, finer code per item (1 or 2 bytes per
        column) that re-orders the ``refine_factor * C`` best PQ candidates before ``C`` are returned,
        so fewer candidates need the exact re-scoring from disk.
        Its scores are approximate: it serves as a candidate generator whose candidates are re-scored
        exactly (:mod:`pcmr.search.searcher`)."""
        faiss = _faiss()
        total = gallery.num if num_items is None else num_items
        kind = choose_index_type(total) if index_type == "auto" else index_type
        if kind not in INDEX_TYPES:
            raise ValueError(f"index type must be 'auto' or one of {list(INDEX_TYPES)}, got {index_type!r}")
        layout = gallery_layout(score, gallery)
        metric = faiss.METRIC_INNER_PRODUCT if vector_form(score).normalised else faiss.METRIC_L2
        width = gallery_vectors(score, gallery[:1], layout).shape[1]
        params: dict[str, Any] = {}
        notes: list[str] = []
        if kind == "flat":
            index = faiss.IndexFlat(width, metric)
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(width, hnsw_m, metric)
            index.hnsw.efConstruction = ef_construction
            index.hnsw.efSearch = ef_search
            params = {"hnsw_m": hnsw_m, "ef_construction": ef_construction, "ef_search": ef_search}
        elif kind == "ivfpq":
            if refine not in (None, *REFINE_BYTES):
                raise ValueError(f"refine must be None or one of {list(REFINE_BYTES)}, got {refine!r}")
            if nlist is None or pq_m is None:  # what is not given is chosen to fit the budget
                chosen = compressed_params(total, width, memory_budget, refine)
                nlist = chosen["nlist"] if nlist is None else nlist
                pq_m = chosen["pq_m"] if pq_m is None else pq_m
            if isinstance(pq_m, bool) or not isinstance(pq_m, int) or pq_m < 1:
                raise ValueError(f"pq_m must be a positive integer (bytes per code), got {pq_m!r}")
            pad = -width % pq_m
            width += pad
            if gallery.num < max(nlist, PQ_CENTROIDS):
                raise ValueError(f"IVF-PQ with {nlist} lists needs at least {max(nlist, PQ_CENTROIDS)} training items "
                                 f"({PQ_CENTROIDS} codewords per sub-quantizer), got {gallery.num}; use a flat, "
                                 "ivf or hnsw index for a gallery this small")
            spec = f"{f'OPQ{pq_m},' if opq else ''}IVF{nlist},PQ{pq_m}x8{f',Refine({refine})' if refine else ''}"
            index = faiss.index_factory(width, spec, metric)
            ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
            ivf.pq.cp.niter = 10  # PQ k-means iterations (faiss: 25); the coarse k-means already uses 10
            ivf.do_polysemous_training = False  # the factory's default; pcmr never uses Hamming filtering
            rows = torch.randperm(gallery.num, generator=torch.Generator().manual_seed(seed))[:train_size]
            keep = _quiet_kmeans(index, faiss)
            index.train(_padded(gallery_vectors(score, gallery[rows.sort().values], layout), pad))
            del keep
            notes += [n for n in (_small_training_note("IVF-PQ", len(rows), PQ_CENTROIDS),
                                  _small_training_note("IVF", len(rows), nlist)) if n][:1]
            ivf.nprobe = min(nprobe, nlist)
            params = {"nlist": nlist, "nprobe": ivf.nprobe, "pq_m": pq_m, "opq": bool(opq), "pad": pad,
                      "refine": refine}
            if refine:
                faiss.downcast_index(index).k_factor = float(refine_factor)
                params["refine_factor"] = int(refine_factor)
        else:
            nlist = default_nlist(total) if nlist is None else nlist
            if gallery.num < nlist:
                raise ValueError(f"IVF with {nlist} lists needs at least {nlist} training items, got {gallery.num}")
            quantizer = faiss.IndexFlat(width, metric)
            index = faiss.IndexIVFFlat(quantizer, width, nlist, metric)
            rows = torch.randperm(gallery.num, generator=torch.Generator().manual_seed(seed))[:train_size]
            index.cp.min_points_per_centroid = 1  # see _quiet_kmeans
            index.train(gallery_vectors(score, gallery[rows.sort().values], layout))
            notes += [n for n in (_small_training_note("IVF", len(rows), nlist),) if n]
            index.nprobe = min(nprobe, nlist)
            params = {"nlist": nlist, "nprobe": index.nprobe}
        return cls(score, kind, layout, gallery.dim, index, params, notes)

    def add(self, gallery: Gaussian, shard_size: int = 65_536,
            progress: Callable[[int], None] | None = None) -> None:
        """Append ``gallery``'s items in shards of ``shard_size`` rows (bounded temporaries);
        ``progress(n)`` is called with the rows added per shard."""
        if gallery.dim != self.dim:
            raise ValueError(f"items have D={gallery.dim}, the index D={self.dim}")
        if gallery_layout(self.score, gallery) != self.layout and gallery.num:
            raise ValueError(f"items' variances ({gallery!r}) do not match the index layout {self.layout!r}")
        for start in range(0, gallery.num, shard_size):
            shard = gallery[start:start + shard_size]
            self.index.add(_padded(gallery_vectors(self.score, shard, self.layout), self.params.get("pad", 0)))
            if progress is not None:
                progress(shard.num)

    def set_search_params(self, nprobe: int | None = None, ef_search: int | None = None,
                          refine_factor: int | None = None) -> None:
        """Search-time accuracy/speed knobs: IVF ``nprobe`` lists, HNSW ``ef_search``, IVF-PQ's
        ``refine_factor`` (PQ candidates per returned one, with a refine code)."""
        if refine_factor is not None and self.params.get("refine"):
            _faiss().downcast_index(self.index).k_factor = float(refine_factor)
            self.params["refine_factor"] = int(refine_factor)
        if nprobe is not None and self.index_type in ("ivf", "ivfpq"):
            ivf = _faiss().extract_index_ivf(self.index)
            ivf.nprobe = min(int(nprobe), self.params["nlist"])
            self.params["nprobe"] = int(ivf.nprobe)
        if ef_search is not None and self.index_type == "hnsw":
            self.index.hnsw.efSearch = int(ef_search)
            self.params["ef_search"] = int(ef_search)

    @property
    def exact(self) -> bool:
        """Whether the index's own scores are exact (all but IVF-PQ's compressed codes)."""
        return self.index_type != "ivfpq"

    @property
    def exhaustive(self) -> bool:
        """Whether a search for ``ntotal`` items returns every item: a flat index, or an IVF index that
        visits all its lists."""
        if self.index_type in ("ivf", "ivfpq"):
            return int(self.params.get("nprobe", 0)) >= int(self.params.get("nlist", 1))
        return self.index_type == "flat"

    def search(self, query: Gaussian, k: int) -> tuple[Tensor, Tensor]:
        """``(scores [Q, k], indices [Q, k])``, best first; scores as :func:`scores_from_distances`
        (approximate for IVF-PQ).
        Slots an approximate index could not fill have index -1 and score -inf."""
        if query.dim != self.dim:
            raise ValueError(f"query has D={query.dim}, the index D={self.dim}")
        k = min(k, self.ntotal)
        vectors, constant = query_vectors(self.score, query, self.layout)
        vectors = _padded(vectors, self.params.get("pad", 0))
        distances, labels = self.index.search(vectors, k)
        scores = scores_from_distances(self.score, distances, constant)
        indices = torch.from_numpy(labels.astype(np.int64))
        scores[indices < 0] = float("-inf")
        return scores, indices

    # ----------------------------------------------------------------- storage
    def write(self, handle: IO[bytes]) -> None:
        """Write the faiss index to the open binary file ``handle`` through Python's file I/O
        (``faiss.PyCallbackIOWriter``), so a failed write (a full disk, a file-size limit) raises
        ``OSError``; faiss's own file writer only prints a failed close and reports success."""
        faiss = _faiss()
        writer = faiss.PyCallbackIOWriter(handle.write, 1 << 22)
        try:
            faiss.write_index(self.index, writer)
        finally:
            del writer

    @classmethod
    def read(cls, path: str, score: str, index_type: str, layout: str, dim: int,
             params: dict[str, Any]) -> AnnIndex:
        """Read a faiss file written by :meth:`write` (RuntimeError from faiss for unreadable files)."""
        faiss = _faiss()
        index = faiss.read_index(path)
        out = cls(score, index_type, layout, dim, index, dict(params))
        out.set_search_params(params.get("nprobe"), params.get("ef_search"), params.get("refine_factor"))
        return out


class ProgressCounter:
    """A tqdm bar on stderr: ``True`` always, ``None`` only on a terminal (pcmr.progress), ``False`` never."""

    def __init__(self, enabled: bool | None, total: int, desc: str) -> None:
        self.bar = progress_bar(total, desc, enabled=enabled)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def build_ann(gallery: Gaussian | GalleryStore, score: str, index_type: str = "auto", *, shard_size: int = 65_536,
              progress: bool | None = False, desc: str = "index", **params: Any) -> AnnIndex:
    """An :class:`AnnIndex` over ``gallery`` filled in shards of ``shard_size`` rows. A gallery on disk
    (:class:`~pcmr.search.store.GalleryStore`) is read shard by shard; its training sample (the rows
    :meth:`AnnIndex.create` would draw from the same gallery in memory, ``train_size`` and ``seed``)
    is read once, so the index equals the one built from the gallery in memory."""
    bar = ProgressCounter(progress, gallery.num, desc)
    try:
        if isinstance(gallery, GalleryStore):
            train_size, seed = int(params.pop("train_size", 100_000)), int(params.pop("seed", 0))
            rows = torch.randperm(gallery.num, generator=torch.Generator().manual_seed(seed))[:train_size]
            ann = AnnIndex.create(score, gallery.rows(rows.sort().values), index_type, num_items=gallery.num,
                                  train_size=train_size, seed=seed, **params)
            for _, shard in gallery.chunks(shard_size):
                ann.add(shard, shard_size=shard_size, progress=bar)
        else:
            ann = AnnIndex.create(score, gallery, index_type, **params)
            ann.add(gallery, shard_size=shard_size, progress=bar)
    finally:
        bar.close()
    return ann
