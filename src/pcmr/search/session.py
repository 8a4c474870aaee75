"""A search request and the session that answers it.

:class:`SearchRequest` is one request: the queries (caption texts, image files, decoded images or
Gaussians), ``k``, the similarity and re-ranker with their options, and when to answer "uncertain"
(:class:`Abstention`). A :class:`SearchSession` is one gallery index opened once (its model, stored items
and candidate sources) with the search settings of a deployment, answering request after request.
``pcmr search`` answers one request and prints it; ``pcmr serve`` keeps one session and answers a request
per HTTP query; the Python API does either:

    session = SearchSession.open("idx/shapes-test")
    answer = session.search(SearchRequest(texts=["a red circle"], k=5))
    for query in answer.queries:
        print(query.label, [line["id"] for line in query.lines])

Each batch of queries (the texts, the images...) is encoded once by the model the index keeps and
searched, asking again for more results while fewer than ``k`` distinct lines remain once identical
captions are merged (:func:`pcmr.search.presentation.more_to_fetch` says how many); every answer gives
its lines, the query's uncertainty as a percentile of the stored items of its modality, its warnings and
the notes of the search, and with :class:`Abstention` settings, whether it was answered. One search runs
at a time (the session's lock): torch and faiss use every core themselves.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from pcmr.arguments import parse_option
from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker, list_rerankers
from pcmr.relevance import I2T, T2I
from pcmr.search.abstain import (
    abstains,
    abstention_entry,
    answered_entry,
    check_curve_fingerprint,
    coverage_for_risk,
    read_risk_curve,
)
from pcmr.search.compose import DEFAULT_TOP_K, SearchResults, get_backend, trained_similarity
from pcmr.search.gallery import GalleryIndex
from pcmr.search.presentation import (
    fetch_size,
    fewer_lines_warning,
    more_to_fetch,
    result_warnings,
    shown_entries,
    uncertainty_percentile,
    word_vocabulary,
)
from pcmr.similarity import check_similarity_option_values, get_similarity, list_similarities
from pcmr.suggest import did_you_mean, name_list, unknown_name

__all__ = ["Abstention", "QueryAnswer", "SearchAnswer", "SearchRequest", "SearchSession", "parse_query_options"]


# ----------------------------------------------------------------- the request
@dataclass(frozen=True)
class Abstention:
    """Answer "uncertain" instead of a list for a query whose uncertainty lies outside an answered share
    of the stored items of its modality: ``answer_coverage`` (0-1), or the share at which the
    risk-coverage curve of the evaluation folder ``risk_curve`` keeps the risk within ``max_risk``."""

    answer_coverage: float | None = None
    max_risk: float | None = None
    risk_curve: str | None = None

    def coverages(self, similarity: str, modalities: Sequence[str]) -> dict[str, tuple[float, str]] | None:
        """The answered share per query modality in ``modalities`` (``caption``: text queries, ``image``:
        image queries) and why; None: answer every query. ValueError for settings that do not fit."""
        if self.answer_coverage is not None and self.max_risk is not None:
            raise ValueError("give --answer-coverage or --max-risk, not both")
        if self.answer_coverage is not None:
            if not 0.0 < self.answer_coverage <= 1.0:
                raise ValueError(f"--answer-coverage must be a share in (0, 1], got {self.answer_coverage}")
            why = f"--answer-coverage {self.answer_coverage:g}"
            return {"caption": (self.answer_coverage, why), "image": (self.answer_coverage, why)}
        if self.max_risk is None:
            if self.risk_curve is not None:
                raise ValueError("--risk-curve sets the coverage for --max-risk; add --max-risk RISK")
            return None
        if self.risk_curve is None:
            raise ValueError("--max-risk needs --risk-curve EVAL_DIR: the evaluation whose risk-coverage curve maps "
                             "a risk to the share of queries answered")
        out = {}
        for modality, direction in (("caption", T2I), ("image", I2T)):
            if modality not in modalities:
                continue
            curve = read_risk_curve(self.risk_curve, similarity, direction)
            share = coverage_for_risk(*curve, self.max_risk, where=f"{self.risk_curve}, {similarity}, {direction}")
            out[modality] = (share, f"risk <= {self.max_risk:g} on {self.risk_curve}, {direction}")
        return out


@dataclass
class SearchRequest:
    """What to search for, and how.

    Queries (any of them; each kind is one batch, searched in this order): ``texts`` (captions, search the
    images), ``images`` (image files, search the captions), ``pixels`` (decoded model-ready images
    ``[Q, 3, S, S]``, search the captions) and ``gaussian`` (``Gaussian [Q, D]`` of the query modality
    ``modality``, ``"caption"`` or ``"image"``). ``labels``: how ``pixels`` / ``gaussian`` queries are
    named in the results and warnings (default: empty). ``similarity`` / ``rerank``: None for the
    session's; ``rerank_options``: None for the index's stored ones; ``similarity_options`` override
    the stored learned options; ``abstention``: None answers every query.
    """

    texts: Sequence[str] = ()
    images: Sequence[str | os.PathLike[str]] = ()
    pixels: Tensor | None = None
    gaussian: Gaussian | None = None
    modality: str = "caption"
    labels: Sequence[str] | None = None
    k: int = DEFAULT_TOP_K
    similarity: str | None = None
    rerank: str | None = None
    rerank_options: dict[str, Any] | None = None
    similarity_options: dict[str, Any] = field(default_factory=dict)
    abstention: Abstention | None = None

    def query_modalities(self) -> list[str]:
        """The modalities of the request's queries (``caption`` for texts), in search order."""
        found = (["caption"] if self.texts else []) + (["image"] if self.images or self.pixels is not None else [])
        if self.gaussian is not None:
            found.append(self.modality)
        return found


def parse_query_options(items: Sequence[str], similarity: str, rerank: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--option`` items as ``(re-ranker options, similarity options)``. Every command's form is
    ``NAME.OPTION=VALUE`` with a YAML value, ``NAME`` the re-ranker ``rerank`` or the score ``similarity``;
    the deprecated ``OPTION=VALUE`` (a number, for the re-ranker) is still read."""
    rerank_options: dict[str, Any] = {}
    similarity_options: dict[str, Any] = {}
    owned: list[tuple[str, str, Any]] = []
    for item in items:
        owner, name, value = parse_option(item, "is.beta=30, csls.csls_k=10, rgm.lam=2 or match_prob.a=12.5",
                                          bare=True)
        if owner is None:  # the deprecated form: a re-ranker parameter, a number
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"--option {item!r}: VALUE must be a number (or write NAME.OPTION=VALUE)")
            rerank_options[name] = value
            continue
        owned.append((owner, name, value))
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


# ----------------------------------------------------------------- the session and its answers
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
            yield _Batch(texts, "caption", lambda: index.encode_texts(texts), texts=True)
        if request.images:
            paths = list(request.images)
            yield _Batch([str(p) for p in paths], "image", lambda: index.encode_images(paths))
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
        results, fetched = self._search(batch, request, similarity, rerank, gallery_modality, gallery_size)
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

    def _search(self, batch: _Batch, request: SearchRequest, similarity: str, rerank: str, gallery_modality: str,
                gallery_size: int) -> tuple[SearchResults, int]:
        """The results of one batch, searched asking for :func:`~pcmr.search.presentation.fetch_size` results
        per query, then for as many more as :func:`~pcmr.search.presentation.more_to_fetch` says, and how
        many were asked for per query last. The queries are encoded once, by the first search."""
        fetch = fetch_size(request.k, gallery_size, gallery_modality, rerank)
        encoded: Gaussian | None = None
        while True:
            with self.lock:  # encoding, too, uses every core
                if encoded is None:
                    encoded = batch.encode()
                results = self.index.search(encoded, k=fetch, similarity=similarity, rerank=rerank,
                                            modality=batch.modality, rerank_options=request.rerank_options,
                                            backend=self.backend, candidates=self.candidates,
                                            **request.similarity_options)
            more = more_to_fetch(results.hits, request.k, fetch, gallery_size, gallery_modality, rerank)
            if more is None:
                return results, fetch
            fetch = more


def _labels(request: SearchRequest, count: int) -> list[str]:
    labels = list(request.labels) if request.labels is not None else [""] * count
    if len(labels) != count:
        raise ValueError(f"give one label per query ({count}), got {len(labels)}")
    return labels
