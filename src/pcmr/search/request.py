"""One search request (:class:`SearchRequest`): the queries (caption texts, image files, decoded images
or Gaussians), ``k``, the similarity and re-ranker with their options, and when to answer "uncertain"
(:class:`Abstention`). ``pcmr search``, ``pcmr serve`` and the Python API fill one in and hand it to a
:class:`pcmr.search.session.SearchSession`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from pcmr.arguments import parse_option
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker
from pcmr.relevance import I2T, T2I
from pcmr.search.abstain import coverage_for_risk, read_risk_curve
from pcmr.search.compose import DEFAULT_TOP_K
from pcmr.similarity import check_similarity_option_values, get_similarity
from pcmr.suggest import did_you_mean, name_list

__all__ = ["Abstention", "SearchRequest", "parse_query_options"]


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
