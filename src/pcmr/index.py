"""Search over a gallery of Gaussian embeddings: encode a split once, save it, query it by text or image.

A :class:`GalleryIndex` holds both modalities of a gallery: the image Gaussians (searched by text
queries) and the caption Gaussians (searched by image queries), their ids, the caption texts and
per-image metadata, the learned similarity options of the model (e.g. PCME's match_prob ``a, b``)
and, optionally, the model and vocabulary needed to encode new queries.

Re-rankers that need a set of queries (inverted softmax, CSLS, relaxed greedy matching; SPEC §5)
use the *other modality of the gallery* as the reference query set: a text query is re-ranked
together with every stored caption (the queries the image gallery would see in an evaluation), an
image query together with every stored image. The new queries are appended as extra rows of that
reference score matrix, the re-ranker runs on the whole matrix, and the rows of the new queries are
returned, so hubness statistics come from a realistic query population rather than from the few
queries of one call.

On disk (a folder; no pickle anywhere):

- ``index.json``: format/version, sizes, ids, caption texts, image metadata, similarity options,
  uncertainty measure, provenance (model, dataset, split);
- ``embeddings.safetensors``: ``image_mean [N_img, D]``, ``image_logvar [N_img, D|1]``,
  ``caption_mean [N_cap, D]``, ``caption_logvar [N_cap, D|1]`` (log-variances absent for points),
  ``image_points`` / ``caption_points [N, K, D]`` for ``pcmr.PointSet`` embeddings (PVSE);
- ``model/`` (``pcmr.models.save_model``) and ``vocab.json`` when the index can encode queries.
"""

from __future__ import annotations

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

from pcmr.atomic import atomic_write_json, atomic_write_safetensors
from pcmr.data import Vocabulary
from pcmr.data.split import RetrievalSplit
from pcmr.evaluation.encode import (
    encode_image_files,
    encode_split,
    encode_texts,
    image_input_size,
    split_image_metadata,
)
from pcmr.evaluation.scoring import check_similarity_supported, rerank_topk, score_matrix
from pcmr.gaussian import Gaussian
from pcmr.models import load_model as load_pcmr_model
from pcmr.models import save_model
from pcmr.models.model import RetrievalModel
from pcmr.point_set import PointSet

__all__ = ["GalleryIndex", "SearchHit", "SearchResults", "INDEX_FORMAT", "INDEX_VERSION"]

INDEX_FORMAT = "pcmr-gallery-index"
INDEX_VERSION = 1
META_FILE = "index.json"
EMBEDDINGS_FILE = "embeddings.safetensors"
MODEL_DIR = "model"
VOCAB_FILE = "vocab.json"
MODALITIES = ("image", "caption")


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
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]``.
        image_ids, caption_ids: one JSON-storable id (int or str) per item.
        caption_texts: ``N_cap`` strings.
        image_metadata: ``N_img`` JSON-storable dicts (e.g. file name, scene description) or None.
        similarity_options: learned options per similarity name (e.g. ``{"match_prob": {"a": .., "b": ..}}``).
        meta: provenance (model name, dataset, split, uncertainty measure ...), stored in ``index.json``.
        model, vocab: what encodes new queries (optional; search by Gaussian works without them).
    """

    def __init__(self, images: Gaussian, captions: Gaussian, *, image_ids: Sequence[Any],
                 caption_ids: Sequence[Any], caption_texts: Sequence[str],
                 image_metadata: Sequence[dict[str, Any]] | None = None,
                 similarity_options: dict[str, dict[str, Any]] | None = None,
                 meta: dict[str, Any] | None = None, model: RetrievalModel | None = None,
                 vocab: Vocabulary | None = None) -> None:
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

    def __repr__(self) -> str:
        return (f"GalleryIndex(images={self.images.num}, captions={self.captions.num}, D={self.images.dim}, "
                f"model={'yes' if self.model is not None else 'no'})")

    # ----------------------------------------------------------------- building
    @classmethod
    def build(cls, model: RetrievalModel, split: RetrievalSplit, vocab: Vocabulary, *, batch_size: int = 256,
              device: torch.device | str | None = None, similarity_options: dict[str, dict[str, Any]] | None = None,
              meta: dict[str, Any] | None = None, progress: bool = False) -> GalleryIndex:
        """Encode every image and caption of a retrieval split with ``model`` (eval mode, no grad).

        ``split`` is a ``pcmr.data`` retrieval split (``image_ids``, ``caption_ids``, ``caption_texts``,
        loaders); ``vocab`` its vocabulary. The embeddings are kept on CPU.
        """

        images, captions = encode_split(model, split, vocab, batch_size=batch_size, device=device,
                                        progress=progress)
        meta = {"num_images": split.num_images, "num_captions": split.num_captions,
                "image_size": image_input_size(split), **(meta or {})}
        return cls(images.to("cpu"), captions.to("cpu"), image_ids=list(split.image_ids),
                   caption_ids=list(split.caption_ids), caption_texts=list(split.caption_texts),
                   image_metadata=split_image_metadata(split), similarity_options=similarity_options,
                   meta=meta, model=model, vocab=vocab)

    # ----------------------------------------------------------------- storage
    def save(self, directory: str | os.PathLike[str], include_model: bool = True) -> Path:
        """Write the index folder (see the module docstring). ``include_model=False`` stores only the
        embeddings (search by Gaussian queries still works)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for modality, g in (("image", self.images), ("caption", self.captions)):
            tensors[f"{modality}_mean"] = g.mean.detach().cpu().contiguous()
            if isinstance(g, PointSet):  # K points per item (PVSE); the mean above is their centroid
                tensors[f"{modality}_points"] = g.points.detach().cpu().contiguous()
            if g.logvar is not None:
                tensors[f"{modality}_logvar"] = g.logvar.detach().cpu().contiguous()
        atomic_write_safetensors(out / EMBEDDINGS_FILE, tensors)
        has_model = include_model and self.model is not None and self.vocab is not None
        if has_model:
            save_model(self.model, out / MODEL_DIR)
            self.vocab.save(out / VOCAB_FILE)
        meta = {
            "format": INDEX_FORMAT, "version": INDEX_VERSION,
            "num_images": self.images.num, "num_captions": self.captions.num, "dim": self.images.dim,
            "image_ids": self.image_ids, "caption_ids": self.caption_ids, "caption_texts": self.caption_texts,
            "image_metadata": self.image_metadata, "similarity_options": self.similarity_options,
            "meta": self.meta, "model": MODEL_DIR if has_model else None, "vocab": VOCAB_FILE if has_model else None,
        }
        atomic_write_json(out / META_FILE, meta, indent=1, newline=False)
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike[str], device: torch.device | str | None = None,
             load_model: bool = True) -> GalleryIndex:
        """Read an index folder written by :meth:`save`; embeddings (and model) go to ``device``
        (default CPU). Raises FileNotFoundError / ValueError naming the file and the problem."""

        root = Path(directory)
        meta_path, emb_path = root / META_FILE, root / EMBEDDINGS_FILE
        if not root.is_dir():
            raise FileNotFoundError(f"index folder not found: {root} (build one with `pcmr search build`)")
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} not found; {root} is not a pcmr gallery index")
        try:
            info = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{meta_path} is not valid JSON ({err}); the index is corrupted") from None
        if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
            raise ValueError(f"{meta_path}: field 'format' must be {INDEX_FORMAT!r}; not a pcmr gallery index")
        if info.get("version") != INDEX_VERSION:
            raise ValueError(f"{meta_path}: index version {info.get('version')!r} is not supported "
                             f"(expected {INDEX_VERSION})")
        for key in ("image_ids", "caption_ids", "caption_texts"):
            if not isinstance(info.get(key), list):
                raise ValueError(f"{meta_path}: field {key!r} must be a list")
        if not emb_path.is_file():
            raise FileNotFoundError(f"{emb_path} not found; the index is incomplete")
        try:
            tensors = load_file(str(emb_path))
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"{emb_path} cannot be read ({err}); the index is corrupted") from None
        dev = torch.device(device) if device is not None else torch.device("cpu")
        gaussians = {}
        for modality in MODALITIES:
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
        model = vocab = None
        if load_model and info.get("model"):
            model = load_pcmr_model(root / info["model"]).to(dev).eval()
            vocab = Vocabulary.load(root / info["vocab"])
        return cls(gaussians["image"], gaussians["caption"], image_ids=info["image_ids"],
                   caption_ids=info["caption_ids"], caption_texts=info["caption_texts"],
                   image_metadata=info.get("image_metadata"), similarity_options=info.get("similarity_options"),
                   meta=info.get("meta"), model=model, vocab=vocab)

    # ----------------------------------------------------------------- search
    def gallery(self, modality: str) -> Gaussian:
        """The stored Gaussians of one modality (``"image"`` or ``"caption"``)."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {list(MODALITIES)}, got {modality!r}")
        return self.images if modality == "image" else self.captions

    def search(self, query: Gaussian, k: int = 10, similarity: str = "cosine", rerank: str = "nns", *,
               modality: str = "caption", rerank_options: dict[str, Any] | None = None,
               **options: Any) -> SearchResults:
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
        """

        if modality not in MODALITIES:
            raise ValueError(f"modality (of the query) must be one of {list(MODALITIES)}, got {modality!r}")
        gallery_modality = "image" if modality == "caption" else "caption"
        gallery = self.gallery(gallery_modality)
        if query.dim != gallery.dim:
            raise ValueError(f"query has D={query.dim}, the index D={gallery.dim}")
        if not 1 <= k <= gallery.num:
            raise ValueError(f"k must be in [1, {gallery.num}] (the gallery size), got {k}")
        query = query.to(device=gallery.device, dtype=gallery.dtype)
        opts = {**self.similarity_options.get(similarity, {}), **options}
        images, captions = (gallery, query) if modality == "caption" else (query, gallery)
        check_similarity_supported(similarity, images, captions, opts)
        params = dict(rerank_options if rerank_options is not None
                      else (self.meta.get("rerank_options") or {}).get(rerank, {}))
        pair = score_matrix(similarity, images, captions, opts)  # [N_img, N_cap]
        query_scores = pair.T if modality == "caption" else pair  # [Q, G]
        if rerank == "nns":
            all_scores, offset = query_scores, 0
        else:
            reference = self._reference_scores(similarity, modality, opts)  # [R, G]
            all_scores, offset = torch.cat([reference, query_scores], dim=0), reference.shape[0]
        indices, scores = rerank_topk(rerank, all_scores, k, **params)
        indices, scores = indices[offset:], scores[offset:]  # [Q, k]
        uncertainty = None
        if not gallery.is_point:
            measure = self.meta["uncertainty_measure"]
            uncertainty = gallery.uncertainty(measure)[indices]  # [Q, k]
        query_unc = None if query.is_point else query.uncertainty(self.meta["uncertainty_measure"])
        return SearchResults(modality, gallery_modality, similarity, rerank, indices, scores, uncertainty,
                             query_unc, self._hits(gallery_modality, indices, scores, uncertainty))

    def _reference_scores(self, similarity: str, modality: str, opts: dict[str, Any]) -> Tensor:
        """Scores of the stored items of the query modality against the gallery, ``[R, G]`` (cached)."""

        try:
            key = (similarity, modality, json.dumps(opts, sort_keys=True))
        except TypeError:  # tensor or generator options: not cacheable
            key = None
        if key is not None and key in self._reference_cache:
            return self._reference_cache[key]
        pair = score_matrix(similarity, self.images, self.captions, opts)  # [N_img, N_cap]
        reference = pair if modality == "image" else pair.T
        if key is not None:
            self._reference_cache[key] = reference
        return reference

    def _hits(self, gallery_modality: str, indices: Tensor, scores: Tensor,
              uncertainty: Tensor | None) -> list[list[SearchHit]]:
        ids = self.image_ids if gallery_modality == "image" else self.caption_ids
        out = []
        for q in range(indices.shape[0]):
            row = []
            for r in range(indices.shape[1]):
                i = int(indices[q, r])
                text = self.caption_texts[i] if gallery_modality == "caption" else None
                metadata = (self.image_metadata[i] if gallery_modality == "image" and self.image_metadata
                            else {})
                unc = None if uncertainty is None else float(uncertainty[q, r])
                row.append(SearchHit(r + 1, i, ids[i], float(scores[q, r]), unc, text, metadata))
            out.append(row)
        return out

    # ----------------------------------------------------------------- queries from raw inputs
    def _require_encoder(self) -> None:
        if self.model is None or self.vocab is None:
            raise ValueError("this index holds no model/vocabulary (saved with include_model=False); "
                             "it can only be searched with Gaussian queries (GalleryIndex.search)")

    def search_text(self, texts: str | Sequence[str], k: int = 10, similarity: str = "cosine",
                    rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Encode caption text(s) with the stored model and search the image gallery."""

        self._require_encoder()
        texts = [texts] if isinstance(texts, str) else list(texts)
        query = encode_texts(self.model, self.vocab, texts, device=self.images.device)
        return self.search(query, k, similarity, rerank, modality="caption", **kwargs)

    def search_image(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], k: int = 10,
                     similarity: str = "cosine", rerank: str = "nns", **kwargs: Any) -> SearchResults:
        """Decode image file(s) with Pillow, preprocess them like the dataset, encode with the stored
        model and search the caption gallery."""

        self._require_encoder()
        paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        query = encode_image_files(self.model, paths, device=self.images.device,
                                   image_size=self.meta.get("image_size"))
        return self.search(query, k, similarity, rerank, modality="image", **kwargs)
