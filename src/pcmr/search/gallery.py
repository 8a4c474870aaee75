"""Search over a gallery of Gaussian embeddings: encode a split once, save it, query it by text or image.

A :class:`GalleryIndex` holds both modalities of a gallery: the image Gaussians (searched by text
queries) and the caption Gaussians (searched by image queries), their ids, the caption texts and
per-image metadata, the learned similarity options of the model (e.g. PCME's match_prob ``a, b``)
and, optionally, the model and vocabulary needed to encode new queries.

Searching is done by the searchers of :mod:`pcmr.search.searcher` (one ``search(queries, k)`` for the
exact and the faiss backend); this class stores the gallery and picks the searcher.

Re-rankers that need a set of queries (inverted softmax, CSLS, relaxed greedy matching; HAL/RGM
section 3.3) use the *other modality of the gallery* as the reference query set: a text query is
re-ranked against the stored captions (the queries the image gallery would see in an evaluation), an
image query against the stored images. Re-weightings (IS, CSLS) use a per-item statistic of at most
``meta["reference_sample"]`` (2000) of those reference queries, computed once
(:func:`pcmr.search.searcher.gallery_statistic`) and stored with the index; matchings (GM, RGM)
append the new queries as extra rows of the reference score matrix and return their rows.

On disk (a folder; no pickle anywhere):

- ``index.json``: format/version, sizes, ids, caption texts, image metadata, similarity options,
  uncertainty measure, provenance (model, dataset, split);
- ``embeddings.safetensors``: ``image_mean [N_img, D]``, ``image_logvar [N_img, D|1]``,
  ``caption_mean [N_cap, D]``, ``caption_logvar [N_cap, D|1]`` (log-variances absent for points),
  ``image_points`` / ``caption_points [N, K, D]`` for ``pcmr.PointSet`` embeddings (PVSE);
- ``model/`` (``pcmr.models.save_model``) and ``vocab.json`` when the index can encode queries;
- ``ann-image.faiss`` / ``ann-caption.faiss`` (faiss backend, :mod:`pcmr.search.ann`) and
  ``statistics.safetensors`` (the re-rankers' gallery statistics, described in ``index.json``);
- ``index.json`` lists the SHA-256 of every other file; a file that does not match gives one error.

An index built *on disk* (:meth:`GalleryIndex.build_on_disk`, ``pcmr search --build RUN --on-disk``)
has no ``embeddings.safetensors``: each modality's Gaussians are a :class:`~pcmr.search.store.GalleryStore`
folder (``store-image/``, ``store-caption/``, float16 or float32 ``.npy`` rows) written batch by batch
while encoding, and ``index.json`` records ``on_disk: true`` and the store folders; ``uncertainty.safetensors`` keeps
each item's uncertainty, so loading does not read the stores for them. Loading opens the
stores without reading them; searches answer through the faiss candidates re-scored exactly from the
rows read (:class:`~pcmr.search.searcher.CandidateSearcher`). The exact backend and the matching
re-rankers (gm, rgm), which score the whole gallery at once, are refused on such an index.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from pcmr.atomic import atomic_write_json, atomic_write_safetensors, atomic_write_via_path
from pcmr.data import ENCODE_BATCH_SIZE, Vocabulary
from pcmr.data.split import RetrievalSplit
from pcmr.evaluation.encode import (
    encode_image_files,
    encode_split,
    encode_split_chunks,
    encode_texts,
    image_input_size,
    split_image_metadata,
)
from pcmr.evaluation.scoring import check_similarity_supported, rerank_topk, score_matrix
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker, list_reweightings
from pcmr.models import load_model as load_pcmr_model
from pcmr.models import save_model
from pcmr.models.model import RetrievalModel
from pcmr.point_set import PointSet
from pcmr.search.ann import AnnIndex, ProgressCounter, build_ann
from pcmr.search.searcher import (
    DEFAULT_REFERENCE_SAMPLE,
    CandidateSearcher,
    ExactSearcher,
    Gallery,
    Scoring,
    gallery_statistic,
    reference_sample,
)
from pcmr.search.store import GalleryStore, write_store
from pcmr.search.vectordb import MilvusCandidates

__all__ = ["GalleryIndex", "SearchHit", "SearchResults", "INDEX_FORMAT", "INDEX_VERSION"]

INDEX_FORMAT = "pcmr-gallery-index"
INDEX_VERSION = 2
READABLE_VERSIONS = (1, 2)
META_FILE = "index.json"
EMBEDDINGS_FILE = "embeddings.safetensors"
MODEL_DIR = "model"
VOCAB_FILE = "vocab.json"
STATISTICS_FILE = "statistics.safetensors"
UNCERTAINTY_FILE = "uncertainty.safetensors"  # on-disk indexes: each item's uncertainty, computed once
BACKENDS = ("auto", "exact", "faiss", "milvus")
MODALITIES = ("image", "caption")
STORE_DIRS = {"image": "store-image", "caption": "store-caption"}


@dataclass(frozen=True)
class SearchHit:
    """One retrieved gallery item. ``score`` is the (re-ranked) score, higher = better;
    ``uncertainty`` the item's uncertainty (None for point embeddings)."""

    rank: int
    index: int
    id: Any
    score: float
    uncertainty: float | None
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResults:
    """Top-k results of Q queries.

    ``indices [Q, k]`` (gallery positions), ``scores [Q, k]``, ``uncertainty [Q, k]`` (None for a
    point gallery), ``query_uncertainty [Q]`` (None for point queries), ``hits[q]`` the same as
    :class:`SearchHit` objects.
    """

    query_modality: str
    gallery_modality: str
    similarity: str
    rerank: str
    indices: Tensor
    scores: Tensor
    uncertainty: Tensor | None
    query_uncertainty: Tensor | None
    hits: list[list[SearchHit]]

    def to_text(self, queries: Sequence[str] | None = None) -> str:
        """A plain-text listing: one block per query, one line per hit."""
        lines = []
        for q, hits in enumerate(self.hits):
            label = queries[q] if queries is not None else f"query {q}"
            unc = ""
            if self.query_uncertainty is not None:
                unc = f"  (query uncertainty {float(self.query_uncertainty[q]):.3f})"
            lines.append(f"{label}{unc}  [{self.similarity}, {self.rerank}]")
            lines.append(f"{'rank':>4}  {'score':>10}  {'uncert.':>9}  {'id':<12} item")
            for hit in hits:
                u = "-" if hit.uncertainty is None else f"{hit.uncertainty:.3f}"
                item = hit.text if hit.text is not None else json.dumps(hit.metadata, ensure_ascii=False)
                lines.append(f"{hit.rank:>4}  {hit.score:>10.4f}  {u:>9}  {str(hit.id):<12} {item}")
        return "\n".join(lines)


def _json_ids(ids: Sequence[Any], name: str) -> list[Any]:
    out = []
    for value in ids:
        if isinstance(value, Tensor):
            value = value.item()
        if not isinstance(value, (int, str)):
            raise ValueError(f"{name} must hold ints or strings (JSON-storable), got {type(value).__name__}")
        out.append(value)
    return out


class GalleryIndex:
    """Image and caption Gaussians of a gallery with ids, texts and metadata; see the module docstring.

    Args:
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]`` (or both a
            :class:`~pcmr.search.store.GalleryStore` on disk, see :meth:`build_on_disk`).
        image_ids, caption_ids: one JSON-storable id (int or str) per item.
        caption_texts: ``N_cap`` strings.
        image_metadata: ``N_img`` JSON-storable dicts (e.g. file name, scene description) or None.
        similarity_options: learned options per similarity name (e.g. ``{"match_prob": {"a": .., "b": ..}}``).
        meta: provenance (model name, dataset, split, uncertainty measure ...), stored in ``index.json``.
        model, vocab: what encodes new queries (optional; search by Gaussian works without them).
    """

    def __init__(self, images: Gallery, captions: Gallery, *, image_ids: Sequence[Any],
                 caption_ids: Sequence[Any], caption_texts: Sequence[str],
                 image_metadata: Sequence[dict[str, Any]] | None = None,
                 similarity_options: dict[str, dict[str, Any]] | None = None,
                 meta: dict[str, Any] | None = None, model: RetrievalModel | None = None,
                 vocab: Vocabulary | None = None) -> None:
        if isinstance(images, GalleryStore) != isinstance(captions, GalleryStore):
            raise ValueError("images and captions must both be in memory or both be gallery stores on disk")
        if images.dim != captions.dim:
            raise ValueError(f"images have D={images.dim} but captions D={captions.dim}; expected the same D")
        for name, values, n in (("image_ids", image_ids, images.num), ("caption_ids", caption_ids, captions.num),
                                ("caption_texts", caption_texts, captions.num)):
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries, expected {n} (one per embedding)")
        if image_metadata is not None and len(image_metadata) != images.num:
            raise ValueError(f"image_metadata has {len(image_metadata)} entries, expected {images.num}")
        self.images = images
        self.captions = captions
        self.image_ids = _json_ids(image_ids, "image_ids")
        self.caption_ids = _json_ids(caption_ids, "caption_ids")
        self.caption_texts = [str(t) for t in caption_texts]
        self.image_metadata = [dict(m) for m in image_metadata] if image_metadata is not None else None
        self.similarity_options = {k: dict(v) for k, v in (similarity_options or {}).items()}
        self.meta = dict(meta or {})
        self.meta.setdefault("uncertainty_measure", "log_det")
        self.model = model
        self.vocab = vocab
        self._reference_cache: dict[tuple[str, str, str], Tensor] = {}
        self._uncertainty: dict[str, Tensor] = {}
        self.ann: dict[str, Any] = {}  # gallery modality -> pcmr.search.ann.AnnIndex
        #: gallery statistics of re-rankers (CSLS, inverted softmax), by _statistic_key
        self.statistics: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        ann = ", ".join(f"{m}: {a.score}/{a.index_type}" for m, a in self.ann.items()) or "none"
        return (f"GalleryIndex(images={self.images.num}, captions={self.captions.num}, D={self.images.dim}, "
                f"model={'yes' if self.model is not None else 'no'}, ann={ann})")

    # ----------------------------------------------------------------- building
    @classmethod
    def build(cls, model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = ENCODE_BATCH_SIZE,
              device: torch.device | str | None = None, similarity_options: dict[str, dict[str, Any]] | None = None,
              meta: dict[str, Any] | None = None, progress: bool | None = False) -> GalleryIndex:
        """Encode every image and caption of a retrieval split with ``model`` (eval mode, no grad).

        ``split`` is a ``pcmr.data`` retrieval split (``image_ids``, ``caption_ids``, ``caption_texts``,
        loaders); ``vocab`` its vocabulary. The embeddings are kept on CPU.
        """

        images, captions = encode_split(model, split, vocab, batch_size=batch_size, device=device,
                                        progress=progress)
        meta = {"num_images": split.num_images, "num_captions": split.num_captions,
                "image_size": image_input_size(split), **_image_source(split), **(meta or {})}
        return cls(images.to("cpu"), captions.to("cpu"), image_ids=list(split.image_ids),
                   caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
                   image_metadata=split_image_metadata(split), similarity_options=similarity_options,
                   meta=meta, model=model, vocab=vocab)

    @classmethod
    def build_on_disk(cls, model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary,
                      folder: str | os.PathLike[str], *, dtype: str = "float16", batch_size: int = ENCODE_BATCH_SIZE,
                      device: torch.device | str | None = None,
                      similarity_options: dict[str, dict[str, Any]] | None = None,
                      meta: dict[str, Any] | None = None, progress: bool | None = False) -> GalleryIndex:
        """Like :meth:`build`, but each modality is encoded batch by batch straight into a
        :class:`~pcmr.search.store.GalleryStore` (``dtype`` float16 or float32) in ``folder``, the folder
        this index is then saved to: one encoding batch in memory, never the whole gallery. Build the
        candidates with :meth:`build_ann` (read from the stores shard by shard) before searching."""
        root = Path(folder)
        stores = {}
        for modality, total in (("image", split.num_images), ("caption", split.num_captions)):
            chunks = encode_split_chunks(model, split, vocab, modality, batch_size=batch_size, device=device,
                                         progress=progress)
            first = next(chunks, None)
            if first is None:
                raise ValueError(f"the {modality} loader yielded no batch; the split has no {modality}s")
            if isinstance(first, PointSet):
                raise ValueError("a gallery on disk holds one Gaussian per item; this model gives point sets "
                                 "(PVSE), build its index without --on-disk")
            width = None if first.logvar is None else first.logvar.shape[1]

            def all_chunks(first: Gaussian = first, rest: Any = chunks) -> Any:
                yield first
                yield from rest

            stores[modality] = write_store(root / STORE_DIRS[modality], all_chunks(), total, first.dim, width, dtype)
        meta = {"num_images": split.num_images, "num_captions": split.num_captions,
                "image_size": image_input_size(split), **_image_source(split), **(meta or {})}
        return cls(stores["image"], stores["caption"], image_ids=list(split.image_ids),
                   caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
                   image_metadata=split_image_metadata(split), similarity_options=similarity_options,
                   meta=meta, model=model, vocab=vocab)

    @property
    def on_disk(self) -> bool:
        """Whether the Gaussians are gallery stores on disk (:meth:`build_on_disk`)."""
        return isinstance(self.images, GalleryStore)

    def refuse_on_disk(self, what: str) -> None:
        """Raise one ValueError naming ``what`` and ``--on-disk`` when this index keeps its gallery on disk."""
        if self.on_disk:
            raise ValueError(f"{what} needs the whole gallery in memory, but this index keeps its Gaussians on disk "
                             "(built with --on-disk); it answers through its faiss candidates re-scored from disk. "
                             "Rebuild the index without --on-disk for this")

    # ----------------------------------------------------------------- faiss backend
    def build_ann(self, score: str = "cosine", modalities: Sequence[str] = MODALITIES, index_type: str = "auto",
                  *, shard_size: int = 65_536, progress: bool | None = False,
                  reference_sample: int = DEFAULT_REFERENCE_SAMPLE, **params: Any) -> dict[str, Any]:
        """Build a faiss index (``pcmr.search.ann.AnnIndex``) over the gallery of each modality in
        ``modalities`` for ``score`` (cosine, l2, wasserstein or csd), filled in shards of ``shard_size``.

        ``index_type``: flat, ivf, hnsw, ivfpq (compressed) or auto (by gallery size); ``params``:
        ``nlist``, ``nprobe``, ``hnsw_m``, ``ef_construction``, ``ef_search``, ``train_size``, ``pq_m``,
        ``opq``, ``memory_budget``. The gallery statistics of every re-weighting that needs one (CSLS,
        inverted softmax, default parameters) are computed for ``score`` from at most
        ``reference_sample`` stored items of the other modality, so those re-rankers work on this
        backend as built. Returns ``{modality: AnnIndex}``.
        """

        self.meta["reference_sample"] = int(reference_sample)
        for modality in modalities:
            gallery = self.gallery(modality)
            if gallery.num == 0:
                continue
            self.ann[modality] = build_ann(gallery, score, index_type, shard_size=shard_size, progress=progress,
                                           desc=f"{modality} index", **params)
            self._default_statistics(modality, score)
        return dict(self.ann)

    def build_milvus(self, uri: str, score: str = "cosine", modalities: Sequence[str] = MODALITIES,
                     index_type: str = "auto", *, collection_prefix: str = "pcmr", shard_size: int = 65_536,
                     reference_sample: int = DEFAULT_REFERENCE_SAMPLE, **params: Any) -> dict[str, Any]:
        """Write the ANN vectors of each modality in ``modalities`` to a Milvus collection
        ``<collection_prefix>_<modality>`` at ``uri`` (:mod:`pcmr.search.vectordb`: a Milvus Lite
        ``.db`` file or a server address) and use it as this index's candidate source; the Gaussians
        stay in the index's own files, candidates are re-scored exactly as on the faiss backend.
        ``params``: ``nlist``, ``nprobe`` (IVF_FLAT). Gallery statistics as in :meth:`build_ann`."""
        self.refuse_on_disk("the milvus backend")
        self.meta["reference_sample"] = int(reference_sample)
        for modality in modalities:
            gallery = self.gallery(modality)
            assert isinstance(gallery, Gaussian)
            if gallery.num == 0:
                continue
            source = MilvusCandidates.create(uri, f"{collection_prefix}_{modality}", score, gallery, gallery.num,
                                             index_type, **params)
            for start in range(0, gallery.num, shard_size):
                source.add(gallery[start:start + shard_size], first_id=start)
            source.finish()
            self.ann[modality] = source
            self._default_statistics(modality, score)
        return dict(self.ann)

    def _default_statistics(self, modality: str, score: str) -> None:
        """Gallery statistics of every re-weighting that needs one, default parameters, for ``score``."""
        other = "caption" if modality == "image" else "image"
        if self.gallery(other).num == 0:
            return
        for name in list_reweightings():
            reranker = get_reranker(name)
            if reranker.needs_gallery_statistic:
                self.statistic(modality, Scoring(score, other, self.similarity_options.get(score, {}), reranker))

    def statistic(self, gallery_modality: str, scoring: Scoring) -> Tensor | None:
        """The gallery statistic ``[G]`` of ``scoring``'s re-ranker over the ``gallery_modality`` items
        (:func:`pcmr.search.searcher.gallery_statistic`, reference queries: at most
        ``meta["reference_sample"]`` stored items of the other modality); computed once, kept, saved."""
        if not scoring.reranker.needs_gallery_statistic:
            return None
        key = _statistic_key(gallery_modality, scoring)
        entry = self.statistics.get(key) if key is not None else None
        if entry is not None and entry["value"].shape[0] == self.gallery(gallery_modality).num:
            return entry["value"]
        sample = int(self.meta.get("reference_sample", DEFAULT_REFERENCE_SAMPLE))
        reference = reference_sample(self.gallery(scoring.query_modality), sample)
        value = gallery_statistic(scoring, reference, self.gallery(gallery_modality))
        if key is not None:
            self.statistics[key] = {"modality": gallery_modality, "similarity": scoring.similarity,
                                    "reranker": scoring.reranker.name, "params": scoring.reranker.parameters(),
                                    "options": scoring.options, "sample": sample, "value": value}
        return value

    def add_images(self, images: Gaussian, image_ids: Sequence[Any],
                   image_metadata: Sequence[dict[str, Any]] | None = None, *, shard_size: int = 65_536,
                   progress: bool | None = False) -> None:
        """Append gallery images (and to the image ANN index and its CSLS terms, when built)."""
        self._add("image", images, image_ids, image_metadata, None, shard_size, progress)

    def add_captions(self, captions: Gaussian, caption_ids: Sequence[Any], caption_texts: Sequence[str], *,
                     shard_size: int = 65_536, progress: bool | None = False) -> None:
        """Append gallery captions (and to the caption ANN index and its CSLS terms, when built)."""
        self._add("caption", captions, caption_ids, None, caption_texts, shard_size, progress)

    def _add(self, modality: str, items: Gaussian, ids: Sequence[Any], metadata: Sequence[dict[str, Any]] | None,
             texts: Sequence[str] | None, shard_size: int, progress: bool | None) -> None:

        self.refuse_on_disk(f"adding {modality}s")
        old = self.gallery(modality)
        assert isinstance(old, Gaussian)
        if items.dim != old.dim:
            raise ValueError(f"new {modality}s have D={items.dim}, the index D={old.dim}")
        new_logvar, old_logvar = items.logvar, old.logvar
        if (new_logvar is None) != (old_logvar is None) or (
                new_logvar is not None and old_logvar is not None and old.num
                and new_logvar.shape[1] != old_logvar.shape[1]):
            raise ValueError(f"new {modality}s ({items!r}) must have the variance shape of the index ({old!r})")
        if len(ids) != items.num or (texts is not None and len(texts) != items.num):
            raise ValueError(f"give one id{' and one text' if texts is not None else ''} per new {modality}")
        if metadata is not None and len(metadata) != items.num:
            raise ValueError(f"give one metadata dict per new {modality} ({items.num}), got {len(metadata)}")
        items = items.to(device=old.device, dtype=old.dtype)
        if modality in self.ann:
            bar = ProgressCounter(progress, items.num, f"{modality} index")
            try:
                self.ann[modality].add(items, shard_size=shard_size, progress=bar)
            finally:
                bar.close()
        merged = Gaussian(torch.cat([old.mean, items.mean]),
                          None if old_logvar is None or new_logvar is None else torch.cat([old_logvar, new_logvar]))
        if modality == "image":
            if self.image_metadata is not None or metadata is not None:
                base = self.image_metadata or [{} for _ in range(old.num)]
                self.image_metadata = base + [dict(m) for m in (metadata or [{} for _ in range(items.num)])]
            self.images, self.image_ids = merged, self.image_ids + _json_ids(ids, "image_ids")
        else:
            self.captions, self.caption_ids = merged, self.caption_ids + _json_ids(ids, "caption_ids")
            self.caption_texts = self.caption_texts + [str(t) for t in texts or []]
        self._reference_cache.clear()
        self._uncertainty.clear()
        self.statistics.clear()  # recomputed on first use: the gallery or its reference queries changed

    # ----------------------------------------------------------------- storage
    def save(self, directory: str | os.PathLike[str], include_model: bool = True) -> Path:
        """Write the index folder (see the module docstring). ``include_model=False`` stores only the
        embeddings (search by Gaussian queries still works)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {}
        store_files = self._store_files(out)
        for modality, g in (() if self.on_disk else (("image", self.images), ("caption", self.captions))):
            assert isinstance(g, Gaussian)
            tensors[f"{modality}_mean"] = g.mean.detach().cpu().contiguous()
            if isinstance(g, PointSet):  # K points per item (PVSE); the mean above is their centroid
                tensors[f"{modality}_points"] = g.points.detach().cpu().contiguous()
            if g.logvar is not None:
                tensors[f"{modality}_logvar"] = g.logvar.detach().cpu().contiguous()
        if not self.on_disk:
            atomic_write_safetensors(out / EMBEDDINGS_FILE, tensors)
        has_model = False
        if include_model and self.model is not None and self.vocab is not None:
            has_model = True
            save_model(self.model, out / MODEL_DIR)
            self.vocab.save(out / VOCAB_FILE)
        ann_info = {}
        for modality, ann in self.ann.items():
            if ann.engine != "faiss":  # a vector database: how to reconnect
                ann_info[modality] = ann.describe()
                continue
            name = f"ann-{modality}.faiss"

            def write_ann(tmp: Path, ann: Any = ann) -> None:
                ann.write(str(tmp))

            atomic_write_via_path(out / name, write_ann)
            ann_info[modality] = {"file": name, "score": ann.score, "index_type": ann.index_type,
                                  "layout": ann.layout, "dim": ann.dim, "ntotal": ann.ntotal, "params": ann.params}
        statistics_info = []
        if self.statistics:
            atomic_write_safetensors(out / STATISTICS_FILE, {f"statistic_{i}": e["value"].detach().cpu().contiguous()
                                                             for i, e in enumerate(self.statistics.values())})
            statistics_info = [{k: v for k, v in e.items() if k != "value"} for e in self.statistics.values()]
        uncertain = [m for m in MODALITIES if self.on_disk and not self.gallery(m).is_point]
        if uncertain:  # read once here, not by every load
            atomic_write_safetensors(out / UNCERTAINTY_FILE, {m: self.item_uncertainty(m).contiguous() for m in uncertain})
        files = (([] if self.on_disk else [EMBEDDINGS_FILE]) + store_files
                 + [a["file"] for a in ann_info.values() if "file" in a]
                 + ([STATISTICS_FILE] if statistics_info else []) + ([UNCERTAINTY_FILE] if uncertain else []))
        if has_model:
            files += [VOCAB_FILE] + sorted(str(p.relative_to(out)) for p in (out / MODEL_DIR).rglob("*") if p.is_file())
        meta = {
            "format": INDEX_FORMAT, "version": INDEX_VERSION,
            "backend": next((a.get("engine", "faiss") for a in ann_info.values()), "exact"), "ann": ann_info, "statistics": statistics_info,
            "checksums": {name: _sha256(out / name) for name in files},
            **({"on_disk": True, "stores": dict(STORE_DIRS)} if self.on_disk else {}),
            **({"uncertainty": {"file": UNCERTAINTY_FILE, "measure": self.meta["uncertainty_measure"]}}
               if uncertain else {}),
            "num_images": self.images.num, "num_captions": self.captions.num, "dim": self.images.dim,
            "image_ids": self.image_ids, "caption_ids": self.caption_ids, "caption_texts": self.caption_texts,
            "image_metadata": self.image_metadata, "similarity_options": self.similarity_options,
            "meta": self.meta, "model": MODEL_DIR if has_model else None, "vocab": VOCAB_FILE if has_model else None,
        }
        meta["manifest_sha256"] = _manifest_digest(meta)
        atomic_write_json(out / META_FILE, meta, indent=1, newline=False)
        return out

    def _store_files(self, out: Path) -> list[str]:
        """The files of the stores of an on-disk index, relative to ``out`` (which must hold them)."""
        files: list[str] = []
        for modality in (MODALITIES if self.on_disk else ()):
            store = self.gallery(modality)
            assert isinstance(store, GalleryStore)
            if store.path.resolve() != (out / STORE_DIRS[modality]).resolve():
                raise ValueError(f"the {modality} store {store.path} must be the folder {STORE_DIRS[modality]!r} of "
                                 f"the index folder {out}; an on-disk index is saved where it was built")
            files += sorted(str(p.relative_to(out)) for p in store.path.iterdir() if p.is_file())
        return files

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: torch.device | str | None = None,
             load_model: bool = True) -> GalleryIndex:
        """Read an index folder written by :meth:`save`; embeddings (and model) go to ``device``
        (default CPU). Raises FileNotFoundError / ValueError naming the file and the problem."""

        root = Path(directory)
        meta_path, emb_path = root / META_FILE, root / EMBEDDINGS_FILE
        if not root.is_dir():
            raise FileNotFoundError(f"index folder not found: {root} (build one with "
                                    f"`pcmr search {root} --build RUN_OR_MODEL`)")
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} not found; {root} is not a pcmr gallery index")
        try:
            info = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{meta_path} is not valid JSON ({err}); the index is corrupted") from None
        if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
            raise ValueError(f"{meta_path}: field 'format' must be {INDEX_FORMAT!r}; not a pcmr gallery index")
        if info.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"{meta_path}: index version {info.get('version')!r} is not supported "
                             f"(expected one of {list(READABLE_VERSIONS)})")
        for key in ("image_ids", "caption_ids", "caption_texts"):
            if not isinstance(info.get(key), list):
                raise ValueError(f"{meta_path}: field {key!r} must be a list")
        on_disk = info.get("on_disk") is True
        if not on_disk and not emb_path.is_file():
            raise FileNotFoundError(f"{emb_path} not found; the index is incomplete")
        _verify_checksums(root, info, meta_path)
        dev = torch.device(device) if device is not None else torch.device("cpu")
        gaussians: dict[str, Gallery] = {}
        if on_disk:
            for modality in MODALITIES:
                try:
                    gaussians[modality] = GalleryStore.open(root / info["stores"][modality])
                except (KeyError, TypeError) as err:
                    raise ValueError(f"{meta_path}: field 'stores' must name the folder of each modality ({err})"
                                     ) from None
        tensors = {} if on_disk else _read_embeddings(emb_path)
        for modality in () if on_disk else MODALITIES:
            if f"{modality}_mean" not in tensors:
                raise ValueError(f"{emb_path} has no tensor '{modality}_mean'; the index is corrupted")
            try:
                if f"{modality}_points" in tensors:
                    gaussians[modality] = PointSet(tensors[f"{modality}_points"]).to(dev)
                else:
                    gaussians[modality] = Gaussian(tensors[f"{modality}_mean"],
                                                   tensors.get(f"{modality}_logvar")).to(dev)
            except ValueError as err:
                raise ValueError(f"{emb_path}: {err}") from None
        for modality, key in (("image", "image_ids"), ("caption", "caption_ids"), ("caption", "caption_texts")):
            if len(info[key]) != gaussians[modality].num:
                raise ValueError(f"{meta_path}: field {key!r} has {len(info[key])} entries but {emb_path.name} "
                                 f"holds {gaussians[modality].num} {modality}s; the index files do not match")
        model = vocab = None
        if load_model and info.get("model"):
            model = load_pcmr_model(root / info["model"]).to(dev).eval()
            vocab = Vocabulary.load(root / info["vocab"])
        index = cls(gaussians["image"], gaussians["caption"], image_ids=info["image_ids"],
                    caption_ids=info["caption_ids"], caption_texts=info["caption_texts"],
                    image_metadata=info.get("image_metadata"), similarity_options=info.get("similarity_options"),
                    meta=info.get("meta"), model=model, vocab=vocab)
        _load_backend(index, root, info, meta_path)
        _load_uncertainty(index, root, info, meta_path)
        return index

    # ----------------------------------------------------------------- search
    def gallery(self, modality: str) -> Gallery:
        """The stored Gaussians of one modality (``"image"`` or ``"caption"``): in memory, or a
        :class:`~pcmr.search.store.GalleryStore` for an on-disk index."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {list(MODALITIES)}, got {modality!r}")
        return self.images if modality == "image" else self.captions

    def search(self, query: Gaussian, k: int = 10, similarity: str = "cosine", rerank: str = "nns", *,
               modality: str = "caption", rerank_options: dict[str, Any] | None = None,
               backend: str = "auto", candidates: int | None = None, **options: Any) -> SearchResults:
        """Top-k gallery items for each query Gaussian.

        Args:
            query: ``Gaussian [Q, D]`` of the query modality.
            k: number of results per query (at most the gallery size).
            similarity: a ``pcmr.similarity`` name; the stored learned options of that similarity are
                used, overridden by ``**options``.
            rerank: a ``pcmr.inference`` re-ranker name; those needing a query set use the stored
                items of the query modality as reference queries (module docstring).
            modality: the modality of the query: ``"caption"`` (text query, image results) or
                ``"image"`` (image query, caption results).
            rerank_options: parameters of the re-ranker (e.g. ``{"beta": 30}``, ``{"k": 10}`` for CSLS,
                ``{"lam": 2.0}`` for RGM; default: ``meta["rerank_options"]`` of the index, then the
                library defaults).
            backend: ``"exact"`` (score the whole gallery), ``"faiss"`` (candidates from the ANN index
                built with :meth:`build_ann`, re-scored exactly) or ``"auto"`` (faiss when built for the
                gallery). Both answer through one interface (:mod:`pcmr.search.searcher`); re-rankers
                with a matching (gm, rgm) run on the exact backend only.
            candidates: ANN candidates per query re-scored exactly on the faiss backend (default 100).
        """

        if modality not in MODALITIES:
            raise ValueError(f"modality (of the query) must be one of {list(MODALITIES)}, got {modality!r}")
        gallery_modality = "image" if modality == "caption" else "caption"
        gallery = self.gallery(gallery_modality)
        if query.dim != gallery.dim:
            raise ValueError(f"query has D={query.dim}, the index D={gallery.dim}")
        if not 1 <= k <= gallery.num:
            raise ValueError(f"k must be in [1, {gallery.num}] (the gallery size), got {k}")
        opts = {**self.similarity_options.get(similarity, {}), **options}
        params = dict(rerank_options if rerank_options is not None
                      else (self.meta.get("rerank_options") or {}).get(rerank, {}))
        reranker = get_reranker(rerank, **params)
        if isinstance(gallery, GalleryStore):  # on disk: candidates re-scored from the rows read
            if backend == "exact":
                self.refuse_on_disk("the exact backend")
            if not reranker.works_on_candidates:
                self.refuse_on_disk(f"re-ranker {rerank!r} (a matching of all queries together)")
            query = query.to(device="cpu", dtype=torch.float32)
            probe = gallery.rows(torch.zeros(1, dtype=torch.long))  # one row: the variance shape the similarity checks
            images, captions = (probe, query) if modality == "caption" else (query, probe)
            check_similarity_supported(similarity, images, captions, opts)
            if not self._use_faiss(backend, gallery_modality):  # also checks the backend's name
                raise ValueError(f"this on-disk index has no faiss candidates over its {gallery_modality}s; "
                                 "build it with `pcmr search INDEX --build RUN --on-disk` without --modality")
            scoring = Scoring(similarity, modality, opts, reranker)
            indices, scores = CandidateSearcher(self.ann[gallery_modality], gallery, scoring,
                                                self.statistic(gallery_modality, scoring),
                                                candidates=candidates).search(query, k)
            return self._results(query, gallery, modality, gallery_modality, similarity, rerank, indices, scores)
        query = query.to(device=gallery.device, dtype=gallery.dtype)
        images, captions = (gallery, query) if modality == "caption" else (query, gallery)
        check_similarity_supported(similarity, images, captions, opts)
        use_faiss = self._use_faiss(backend, gallery_modality)
        if use_faiss and not reranker.works_on_candidates:
            raise ValueError(f"re-ranker {rerank!r} matches all queries together, so it cannot run on candidate "
                             "lists of the faiss backend; use backend 'exact'")
        if reranker.works_on_candidates:
            scoring = Scoring(similarity, modality, opts, reranker)
            statistic = self.statistic(gallery_modality, scoring)
            searcher: ExactSearcher | CandidateSearcher = (
                CandidateSearcher(self.ann[gallery_modality], gallery, scoring, statistic, candidates=candidates)
                if use_faiss else ExactSearcher(gallery, scoring, statistic))
            indices, scores = searcher.search(query, k)
            return self._results(query, gallery, modality, gallery_modality, similarity, rerank, indices, scores)
        pair = score_matrix(similarity, images, captions, opts)  # [N_img, N_cap]
        query_scores = pair.T if modality == "caption" else pair  # [Q, G]
        reference = self._reference_scores(similarity, modality, opts)  # [R, G]
        all_scores, offset = torch.cat([reference, query_scores], dim=0), reference.shape[0]
        indices, scores = rerank_topk(rerank, all_scores, k, **params)
        indices, scores = indices[offset:], scores[offset:]  # [Q, k]
        return self._results(query, gallery, modality, gallery_modality, similarity, rerank, indices, scores)

    def _use_faiss(self, backend: str, gallery_modality: str) -> bool:
        """Whether candidates come from the ANN source of ``gallery_modality`` (faiss or Milvus)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        source = self.ann.get(gallery_modality)
        if backend in ("faiss", "milvus") and (source is None or source.engine != backend):
            raise ValueError(f"backend {backend!r}: this index has no {backend} candidates over its "
                             f"{gallery_modality}s; build them with `pcmr search INDEX --build ... --backend {backend}`")
        return backend in ("faiss", "milvus") or (backend == "auto" and source is not None)

    def _results(self, query: Gaussian, gallery: Gallery, modality: str, gallery_modality: str, similarity: str,
                 rerank: str, indices: Tensor, scores: Tensor) -> SearchResults:
        uncertainty = None
        if not gallery.is_point:
            uncertainty = self.item_uncertainty(gallery_modality)[indices.clamp_min(0)]  # [Q, k]
        query_unc = None if query.is_point else query.uncertainty(self.meta["uncertainty_measure"])
        return SearchResults(modality, gallery_modality, similarity, rerank, indices, scores, uncertainty,
                             query_unc, self._hits(gallery_modality, indices, scores, uncertainty))

    def item_uncertainty(self, modality: str) -> Tensor:
        """Uncertainty ``[N]`` of every stored item of ``modality`` (``meta["uncertainty_measure"]``), cached."""
        cached = self._uncertainty.get(modality)
        gallery = self.gallery(modality)
        if cached is None or cached.shape[0] != gallery.num:
            measure = self.meta["uncertainty_measure"]
            cached = (torch.cat([chunk.uncertainty(measure) for _, chunk in gallery.chunks()])
                      if isinstance(gallery, GalleryStore) else gallery.uncertainty(measure))
            self._uncertainty[modality] = cached
        return cached

    def item(self, modality: str, position: int) -> Gaussian:
        """The stored Gaussian ``[1, D]`` of item ``position`` of ``modality`` (read from disk for an
        on-disk index)."""
        gallery = self.gallery(modality)
        if not 0 <= position < gallery.num:
            raise IndexError(f"{modality} {position} out of range [0, {gallery.num})")
        return gallery.rows(torch.tensor([position])) if isinstance(gallery, GalleryStore) else gallery[position]

    def _device(self) -> torch.device:
        return torch.device("cpu") if isinstance(self.images, GalleryStore) else self.images.device

    def _reference_scores(self, similarity: str, modality: str, opts: dict[str, Any]) -> Tensor:
        """Scores of the stored items of the query modality against the gallery, ``[R, G]`` (cached)."""

        try:
            key = (similarity, modality, json.dumps(opts, sort_keys=True))
        except TypeError:  # tensor or generator options: not cacheable
            key = None
        if key is not None and key in self._reference_cache:
            return self._reference_cache[key]
        assert isinstance(self.images, Gaussian) and isinstance(self.captions, Gaussian)  # in memory
        pair = score_matrix(similarity, self.images, self.captions, opts)  # [N_img, N_cap]
        reference = pair if modality == "image" else pair.T
        if key is not None:
            self._reference_cache[key] = reference
        return reference

    def _hits(self, gallery_modality: str, indices: Tensor, scores: Tensor,
              uncertainty: Tensor | None) -> list[list[SearchHit]]:
        ids = self.image_ids if gallery_modality == "image" else self.caption_ids
        out = []
        index_rows, score_rows = indices.tolist(), scores.tolist()
        unc_rows = None if uncertainty is None else uncertainty.tolist()
        for q, (index_row, score_row) in enumerate(zip(index_rows, score_rows)):
            row = []
            for r, (i, score) in enumerate(zip(index_row, score_row)):
                if i < 0:  # a slot an approximate index could not fill
                    continue
                text = self.caption_texts[i] if gallery_modality == "caption" else None
                metadata = (self.image_metadata[i] if gallery_modality == "image" and self.image_metadata
                            else {})
                unc = None if unc_rows is None else unc_rows[q][r]
                row.append(SearchHit(r + 1, i, ids[i], score, unc, text, metadata))
            out.append(row)
        return out

    # ----------------------------------------------------------------- queries from raw inputs
    def _require_encoder(self) -> tuple[RetrievalModel, Vocabulary]:
        if self.model is None or self.vocab is None:
            raise ValueError("this index holds no model/vocabulary (saved with include_model=False); "
                             "it can only be searched with Gaussian queries (GalleryIndex.search)")
        return self.model, self.vocab

    def search_text(self, texts: str | Sequence[str], k: int = 10, similarity: str = "cosine",
                    rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Encode caption text(s) with the stored model and search the image gallery."""

        model, vocab = self._require_encoder()
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError(f"text queries must be non-empty strings, got {texts!r}")
        query = encode_texts(model, vocab, texts, device=self._device())
        return self.search(query, k, similarity, rerank, modality="caption", **kwargs)

    def search_image(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], k: int = 10,
                     similarity: str = "cosine", rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Decode image file(s) with Pillow, preprocess them like the dataset, encode with the stored
        model and search the caption gallery."""

        model, _ = self._require_encoder()
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        query = encode_image_files(model, paths, device=self._device(),
                                   image_size=self.meta.get("image_size"))
        return self.search(query, k, similarity, rerank, modality="image", **kwargs)


def _read_embeddings(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read ({err}); the index is corrupted") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest_digest(info: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON without its own digest field."""
    body = {k: v for k, v in info.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _verify_checksums(root: Path, info: dict[str, Any], meta_path: Path) -> None:
    """The manifest's own digest and every file listed under ``checksums`` (version-2 indexes)."""
    if info.get("version") == 2 and info.get("manifest_sha256") != _manifest_digest(info):
        raise ValueError(f"{meta_path}: its content does not match its 'manifest_sha256'; the manifest was "
                         "edited or damaged, rebuild the index")
    checksums = info.get("checksums", {}) if info.get("version", 1) >= 2 else {}
    required = info.get("version") == 2 and info.get("on_disk") is not True
    if not isinstance(checksums, dict) or (required and EMBEDDINGS_FILE not in checksums):
        raise ValueError(f"{meta_path}: field 'checksums' must map every index file to its SHA-256")
    for name, expected in checksums.items():
        path = root / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found; the index is incomplete")
        actual = _sha256(path)
        if actual != expected:
            raise ValueError(f"{path}: SHA-256 {actual[:12]}... does not match {expected[:12]}... recorded in "
                             f"{meta_path.name}; the file was truncated or edited, rebuild the index")


def _load_backend(index: GalleryIndex, root: Path, info: dict[str, Any], meta_path: Path) -> None:
    """Read the faiss indexes and CSLS terms listed in ``index.json`` and check they fit the gallery."""
    for modality, entry in (info.get("ann") or {}).items():
        if isinstance(entry, dict) and entry.get("engine") == "milvus":
            index.ann[modality] = _open_milvus(entry, index.gallery(modality), meta_path)
            continue
        try:

            ann = AnnIndex.read(str(root / entry["file"]), entry["score"], entry["index_type"], entry["layout"],
                                int(entry["dim"]), entry.get("params") or {})
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{meta_path}: field 'ann.{modality}' is malformed ({err})") from None
        except RuntimeError as err:
            raise ValueError(f"{root / entry['file']} cannot be read by faiss ({_first_line(err)}); "
                             "the index is corrupted") from None
        gallery = index.gallery(modality)
        if ann.ntotal != gallery.num or ann.dim != gallery.dim:
            raise ValueError(f"{root / entry['file']} holds {ann.ntotal} items of D={ann.dim} but the gallery has "
                             f"{gallery.num} {modality}s of D={gallery.dim}; the index files do not match")
        index.ann[modality] = ann
    entries = info.get("statistics") or []
    if entries:
        tensors = load_file(str(root / STATISTICS_FILE))
        for i, entry in enumerate(entries):
            value = tensors.get(f"statistic_{i}")
            try:
                modality = entry["modality"]
                scoring = Scoring(entry["similarity"], "caption" if modality == "image" else "image",
                                  dict(entry["options"]), get_reranker(entry["reranker"], **entry["params"]))
                size = index.gallery(modality).num
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{meta_path}: entry {i} of field 'statistics' is malformed ({err})") from None
            if value is None or value.shape != (size,):
                raise ValueError(f"{root / STATISTICS_FILE}: 'statistic_{i}' must hold one value per {modality}")
            key = _statistic_key(modality, scoring)
            if key is not None:
                index.statistics[key] = {**entry, "value": value}


def _load_uncertainty(index: GalleryIndex, root: Path, info: dict[str, Any], meta_path: Path) -> None:
    """The items' uncertainties an on-disk index saved (``uncertainty`` of ``index.json``), if any."""
    entry = info.get("uncertainty")
    if entry is None:
        return
    if not isinstance(entry, dict) or entry.get("file") != UNCERTAINTY_FILE:
        raise ValueError(f"{meta_path}: field 'uncertainty' must be {{'file': {UNCERTAINTY_FILE!r}, 'measure': ...}}")
    if entry.get("measure") != index.meta["uncertainty_measure"]:
        return  # another measure: computed from the stores on first use
    for modality, value in _read_embeddings(root / UNCERTAINTY_FILE).items():
        if modality not in MODALITIES or value.shape != (index.gallery(modality).num,):
            raise ValueError(f"{root / UNCERTAINTY_FILE}: {modality!r} must hold one value per item of a modality")
        index._uncertainty[modality] = value


def _open_milvus(entry: dict[str, Any], gallery: Gallery, meta_path: Path) -> Any:
    """Reconnect to the Milvus collection an index names and check it holds the gallery."""
    try:
        source = MilvusCandidates.open(entry["uri"], entry["collection"])
    except KeyError as err:
        raise ValueError(f"{meta_path}: a milvus entry of field 'ann' lacks {err}") from None
    if source.ntotal != gallery.num or source.dim != gallery.dim:
        raise ValueError(f"{entry['uri']}: collection {entry['collection']!r} holds {source.ntotal} items of "
                         f"D={source.dim} but the gallery has {gallery.num} of D={gallery.dim}; rebuild it")
    source.set_search_params(nprobe=(entry.get("params") or {}).get("nprobe"))
    return source


def _statistic_key(modality: str, scoring: Scoring) -> str | None:
    """What a stored gallery statistic depends on, as a JSON string (None for uncacheable options)."""
    try:
        return json.dumps([modality, scoring.similarity, scoring.reranker.weighting.name,
                           vars(scoring.reranker.weighting), scoring.options], sort_keys=True)
    except TypeError:  # tensor or generator options
        return None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]


def _image_source(split: Any) -> dict[str, Any]:
    """How ``pcmr serve`` can show the gallery's images: the shapes generator config (re-rendered
    from the cache), else nothing (file datasets carry a ``path`` per image in the metadata)."""
    if getattr(split, "name", None) == "shapes" and "config" in getattr(split, "info", {}):
        config = {k: v for k, v in split.info["config"].items() if k != "version"}
        return {"image_source": {"kind": "shapes", "split": split.split, "config": config}}
    return {}
