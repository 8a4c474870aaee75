"""A search session: one gallery index opened once (its model, stored items and candidate sources) with
the search settings of a deployment, answering :class:`~pcmr.search.request.SearchRequest` after
request. ``pcmr search`` answers one request and prints it; ``pcmr serve`` keeps one session and answers
a request per HTTP query; the Python API does either:

    session = SearchSession.open("idx/shapes-test")
    answer = session.search(SearchRequest(texts=["a red circle"], k=5))
    for query in answer.queries:
        print(query.label, [line["id"] for line in query.lines])

Each batch of queries (the texts, the images...) is encoded once and searched asking for enough results
that ``k`` distinct lines remain once identical captions are merged
(:func:`pcmr.search.presentation.search_distinct`); every answer gives its lines, the query's
uncertainty as a percentile of the stored items of its modality, its warnings and the notes of the
search, and with :class:`~pcmr.search.request.Abstention` settings, whether it was answered. One search
runs at a time (the session's lock): torch and faiss use every core themselves.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker, list_rerankers
from pcmr.search import building
from pcmr.search.abstain import abstains, abstention_entry, answered_entry, check_curve_fingerprint
from pcmr.search.compose import get_backend, trained_similarity
from pcmr.search.gallery import GalleryIndex
from pcmr.search.presentation import (
    fewer_lines_warning,
    result_warnings,
    search_distinct,
    shown_entries,
    uncertainty_percentile,
    word_vocabulary,
)
from pcmr.search.request import SearchRequest
from pcmr.similarity import get_similarity, list_similarities
from pcmr.suggest import unknown_name

__all__ = ["QueryAnswer", "SearchAnswer", "SearchSession"]


@dataclass
class QueryAnswer:
    """The answer to one query: ``lines`` (:func:`pcmr.search.presentation.shown_entries`), the query's
    uncertainty and its percentile among the stored items of its modality, ``warnings`` about the query
    (unknown words, collapsed scores), ``fewer`` when fewer than ``k`` distinct lines remain, the
    search's ``notes``, and under abstention the answered share ``coverage`` (with ``why``) and whether
    the query was answered "uncertain" (``abstained``: its lines are kept here, :meth:`to_json` drops them)."""

    label: str
    similarity: str
    rerank: str
    lines: list[dict[str, Any]]
    query_uncertainty: float | None
    query_uncertainty_percentile: float | None
    warnings: list[str]
    fewer: str | None = None
    notes: list[str] = field(default_factory=list)
    coverage: tuple[float, str] | None = None

    @property
    def abstained(self) -> bool:
        return self.coverage is not None and abstains(self.query_uncertainty_percentile, self.coverage[0])

    def all_warnings(self) -> list[str]:
        """The query's warnings and the one about fewer lines."""
        return self.warnings + ([self.fewer] if self.fewer else [])

    def to_json(self) -> dict[str, Any]:
        """The JSON block of this answer (``pcmr search --json``)."""
        entry = {"query": self.label, "similarity": self.similarity, "rerank": self.rerank,
                 "query_uncertainty": self.query_uncertainty,
                 "query_uncertainty_percentile": self.query_uncertainty_percentile,
                 "results": self.lines, "warnings": self.all_warnings()}
        if self.coverage is None:
            return entry
        share, why = self.coverage
        return abstention_entry(entry, share, why) if self.abstained else answered_entry(entry, share, why)


@dataclass
class SearchAnswer:
    """The answers to a request, one per query in search order, and the notes of its searches (each once)."""

    similarity: str
    rerank: str
    queries: list[QueryAnswer]

    @property
    def notes(self) -> list[str]:
        return list(dict.fromkeys(note for query in self.queries for note in query.notes))


@dataclass
class _Batch:
    labels: list[str]
    modality: str  # of the queries
    encode: Callable[[], Gaussian]
    texts: bool = False


class SearchSession:
    """An opened index and the settings of every request that names none (module docstring):
    ``similarity`` (None: the one the index's model was trained with), ``rerank``, ``backend`` (auto,
    exact or a candidate source's engine) and ``candidates`` per query re-scored exactly."""

    def __init__(self, index: GalleryIndex, *, similarity: str | None = None, rerank: str = "nns",
                 backend: str = "auto", candidates: int | None = None) -> None:
        self.index = index
        self.similarity = similarity or trained_similarity(index)
        self.rerank = rerank
        self.backend = backend
        self.candidates = candidates
        self.lock = threading.Lock()

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, device: str | None = None, **settings: Any) -> SearchSession:
        """A session over the index folder ``folder`` (:meth:`GalleryIndex.load`), ``settings`` as the
        constructor takes them."""
        return cls(GalleryIndex.load(folder, device=device), **settings)

    def check_settings(self) -> None:
        """Refuse the session's own settings before any request: an unknown similarity, and on an on-disk
        index the exact backend or a matching re-ranker."""
        get_similarity(self.similarity)  # an unknown name: ValueError
        if self.index.on_disk and get_backend(self.backend).exact:
            self.index.refuse_on_disk("the exact backend")
        if self.index.on_disk and not get_reranker(self.rerank).works_on_candidates:
            self.index.refuse_on_disk(f"re-ranker {self.rerank!r} (a matching of all queries together)")

    def settings(self, similarity: str | None = None, rerank: str | None = None) -> tuple[str, str]:
        """The similarity and re-ranker of a request: the session's unless it names others (checked)."""
        chosen = (similarity or self.similarity, rerank or self.rerank)
        if chosen[0] not in list_similarities():
            raise ValueError(unknown_name("similarity", chosen[0], list_similarities()))
        if chosen[1] not in list_rerankers():
            raise ValueError(unknown_name("re-ranker", chosen[1], list_rerankers()))
        if self.index.on_disk and not get_reranker(chosen[1]).works_on_candidates:
            raise ValueError(f"re-ranker {chosen[1]!r} matches all queries together and needs the whole "
                             "gallery in memory; this index keeps its Gaussians on disk")
        return chosen

    def check_risk_curve(self, risk_curve: str, where: str) -> None:
        """The risk curve of an evaluation folder must come from this index's model on its gallery (the
        fingerprint the evaluation stores beside the curve); ``where``: the index, for messages."""
        index = self.index
        if index.model is None:
            raise ValueError(f"--risk-curve: {where} holds no model, so its curve cannot be checked against it")
        current = gallery_fingerprint(index.model.network, index.meta.get("dataset"), index.meta.get("split"),
                                      index.images.num, index.captions.num)
        check_curve_fingerprint(risk_curve, current)

    def search(self, request: SearchRequest) -> SearchAnswer:
        """Answer every query of ``request`` (module docstring)."""
        similarity = request.similarity or self.similarity
        rerank = request.rerank or self.rerank
        coverage = None if request.abstention is None else request.abstention.coverages(
            similarity, request.query_modalities())
        answers: list[QueryAnswer] = []
        for batch in self._batches(request):
            found = self._answer(batch, request, similarity, rerank)
            for answer in found:
                answer.coverage = None if coverage is None else coverage[batch.modality]
            answers += found
        return SearchAnswer(similarity, rerank, answers)

    def _batches(self, request: SearchRequest) -> Iterator[_Batch]:
        index = self.index
        if request.texts:
            texts = list(request.texts)
            yield _Batch(texts, "caption", lambda: building.encode_text_queries(index, texts), texts=True)
        if request.images:
            paths = list(request.images)
            yield _Batch([str(p) for p in paths], "image", lambda: building.encode_image_queries(index, paths))
        if request.pixels is not None:
            pixels = request.pixels

            def encode() -> Gaussian:
                if index.model is None:
                    raise ValueError("this index holds no model, so it cannot encode queries")
                return index.model.encode_image(pixels)

            yield _Batch(_labels(request, pixels.shape[0]), "image", encode)
        if request.gaussian is not None:
            query = request.gaussian
            yield _Batch(_labels(request, query.num), request.modality, lambda: query)

    def _answer(self, batch: _Batch, request: SearchRequest, similarity: str, rerank: str) -> list[QueryAnswer]:
        """The answers to one batch of queries of one modality."""
        index = self.index
        gallery_modality = "image" if batch.modality == "caption" else "caption"
        gallery_size = index.gallery(gallery_modality).num
        encoded: list[Gaussian] = []  # the queries, encoded once however many times search_distinct asks

        def search(fetch: int) -> Any:
            with self.lock:  # encoding, too, uses every core
                if not encoded:
                    encoded.append(batch.encode())
                return index.search(encoded[0], k=fetch, similarity=similarity, rerank=rerank,
                                    modality=batch.modality, rerank_options=request.rerank_options,
                                    backend=self.backend, candidates=self.candidates, **request.similarity_options)

        results, fetched = search_distinct(search, request.k, gallery_size, gallery_modality, rerank)
        gallery_unc = None if index.gallery(gallery_modality).is_point else index.item_uncertainty(gallery_modality)
        query_unc = None if index.gallery(batch.modality).is_point else index.item_uncertainty(batch.modality)
        vocabulary = word_vocabulary(index.model) if batch.texts else None
        returns_scores = get_reranker(rerank).returns_scores
        answers = []
        for q, (label, hits) in enumerate(zip(batch.labels, results.hits)):
            lines = shown_entries(hits, request.k, gallery_unc)
            raw = None if results.query_uncertainty is None else float(results.query_uncertainty[q])
            answers.append(QueryAnswer(
                label, similarity, rerank, lines, raw, uncertainty_percentile(raw, query_unc),
                result_warnings(lines, label, vocabulary),
                fewer_lines_warning(len(lines), request.k, fetched, gallery_size, returns_scores),
                list(results.notes)))
        return answers


def _labels(request: SearchRequest, count: int) -> list[str]:
    labels = list(request.labels) if request.labels is not None else [""] * count
    if len(labels) != count:
        raise ValueError(f"give one label per query ({count}), got {len(labels)}")
    return labels
