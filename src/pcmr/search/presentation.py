"""How search results are shown to a person: pure functions over hit lists, shared by ``pcmr search``,
the JSON API of ``pcmr serve`` and its page.

- :func:`merge_identical_texts`: captions with the same text (a gallery often holds the same sentence
  for several images) become one shown hit carrying how many there were and their ids.
- :func:`query_word_warning`: a text query none of whose words the model's vocabulary knows is
  encoded as unknown tokens only, so its results say nothing about the query; it gets a warning.
- :func:`uncertainty_percentile`: an item's raw uncertainty (e.g. ``log det Sigma``, a sum over D
  dimensions, so values like ``-1012.5`` are normal) placed as a percentile among the gallery's items
  (0 = the most certain item, 100 = the most uncertain). The raw value stays in the JSON output.
- :func:`fetch_size` / :func:`more_to_fetch`: how many results to ask for so that ``k`` distinct lines
  remain once identical captions are merged, and after each search whether, and how many, to ask for
  again (until they do or the whole gallery was read); :func:`fewer_lines_warning` says when fewer
  remain. The session (:class:`pcmr.search.session.SearchSession`) runs that loop for ``pcmr search``
  and ``pcmr serve`` alike.
- :func:`collapsed_score_warning`: a model whose scores barely differ between items (a collapsed
  embedding) ranks by ties and noise; it says so (an evaluation table's counterpart is
  ``pcmr.evaluation.table.collapsed_recall_warning``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pcmr.data.text import tokenize
from pcmr.inference import get_reranker
from pcmr.similarity import get_similarity

__all__ = [
    "ShownHit",
    "merge_identical_texts",
    "unknown_query_words",
    "query_word_warning",
    "uncertainty_percentile",
    "collapsed_score_warning",
    "fetch_size",
    "needs_more",
    "next_fetch_size",
    "fewer_lines_warning",
    "prefix_lists",
    "more_to_fetch",
    "shown_entries",
    "result_warnings",
    "entries_text",
    "UNCERTAINTY_NOTE",
]

#: relative spread of a query's top scores under which they count as one value
COLLAPSE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class ShownHit:
    """One line of shown results: the best-ranked ``hit`` (a :class:`pcmr.search.gallery.SearchHit`) of a group
    of gallery items with identical text, ``ids``/``indices`` of every item of the group (best first)
    and the shown ``rank`` (1, 2, ... over the merged list)."""

    rank: int
    hit: Any
    ids: list[Any] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many gallery items this line stands for."""
        return len(self.indices)


def merge_identical_texts(hits: Sequence[Any], limit: int | None = None) -> list[ShownHit]:
    """Group ``hits`` (ranked, best first) whose ``text`` is the same after collapsing whitespace and
    case; each group is shown once, at the place of its best hit. Hits without text (images) are never
    merged. At most ``limit`` groups are returned (all when None)."""

    groups: list[list[Any]] = []
    by_text: dict[str, list[Any]] = {}
    for hit in hits:
        text = getattr(hit, "text", None)
        key = None if text is None else " ".join(str(text).lower().split())
        if key is not None and key in by_text:
            by_text[key].append(hit)
            continue
        group = [hit]
        groups.append(group)
        if key is not None:
            by_text[key] = group
    shown = [ShownHit(rank, group[0], [h.id for h in group], [h.index for h in group])
             for rank, group in enumerate(groups, start=1)]
    return shown if limit is None else shown[:limit]


def unknown_query_words(text: str, vocabulary: Iterable[str] | Any) -> list[str]:
    """Words of ``text`` (tokenised as the captions were) that ``vocabulary`` does not hold."""
    return [word for word in tokenize(text) if word not in vocabulary]


def query_word_warning(text: str, vocabulary: Any) -> str | None:
    """A warning for a text query whose words the model mostly does not know, else None: no known word
    at all (the results do not depend on the query), or some unknown words (read as ``<unk>``)."""

    words = tokenize(text)
    unknown = unknown_query_words(text, vocabulary)
    if not words:
        return f"the query '{text}' holds no word; its results do not depend on it"
    if len(unknown) == len(words):
        return (f"no word of the query '{text}' is in the model's vocabulary; every word is read as unknown, "
                f"so the results do not depend on the query")
    if unknown:
        return f"words not in the model's vocabulary, read as unknown: {', '.join(unknown)}"
    return None


def uncertainty_percentile(value: float | None, gallery: Tensor | None) -> float | None:
    """Percentile (0 to 100, one decimal) of ``value`` among the uncertainties ``gallery [N]`` of the
    gallery items: the percentage of items strictly less uncertain, with ties counted half. None for
    point embeddings or an empty gallery."""

    if value is None or gallery is None or gallery.numel() == 0:
        return None
    values = gallery.detach().double().flatten()
    below = float((values < value).sum())
    ties = float((values == value).sum())
    return round(100.0 * (below + 0.5 * ties) / values.numel(), 1)


def collapsed_score_warning(scores: Tensor | Sequence[float], label: str = "query") -> str | None:
    """A warning when the top scores of one query ``scores [k]`` (k >= 2) are all equal up to
    :data:`COLLAPSE_TOLERANCE` of their size: the ranking among them is arbitrary."""

    row = torch.as_tensor(scores, dtype=torch.float64).flatten()
    row = row[torch.isfinite(row)]
    if row.numel() < 2:
        return None
    spread = float(row.max() - row.min())
    if spread > COLLAPSE_TOLERANCE * max(1.0, float(row.abs().max())):
        return None
    return (f"the top {row.numel()} scores of the {label} are all {float(row[0]):.6g}: the model does not tell "
            f"these items apart (collapsed embeddings?), so their order is arbitrary")


#: how many more candidates to fetch when identical captions are merged, so k distinct lines remain
MERGE_FETCH_FACTOR = 5


def fetch_size(k: int, gallery_size: int, gallery_modality: str, rerank: str) -> int:
    """How many results to ask the index for so that ``k`` lines remain after merging identical
    captions: ``MERGE_FETCH_FACTOR * k`` for a caption gallery under a re-ranker that returns scores
    (its top-k is a prefix of its top-(5k)), else ``k``; at most the gallery size."""

    if gallery_modality != "caption" or not get_reranker(rerank).returns_scores:
        return k
    return max(k, min(gallery_size, MERGE_FETCH_FACTOR * k))


def needs_more(hits: Sequence[Any], k: int, fetched: int, gallery_size: int) -> bool:
    """True when a query's ``hits`` (``fetched`` were asked for) merge into fewer than ``k`` lines and the
    gallery (``gallery_size`` items) holds more to fetch: ask again for more."""
    return fetched < gallery_size and len(merge_identical_texts(hits, limit=k)) < k


def next_fetch_size(fetched: int, gallery_size: int) -> int:
    """The next, larger request after :func:`needs_more`: ``MERGE_FETCH_FACTOR`` times as many, at most
    the whole gallery (so a few rounds reach every item)."""
    return min(gallery_size, max(fetched + 1, MERGE_FETCH_FACTOR * fetched))


def fewer_lines_warning(shown: int, k: int, fetched: int, gallery_size: int, prefix_lists: bool) -> str | None:
    """A warning when a query shows ``shown < k`` lines (identical captions merged into one line each),
    else None. ``prefix_lists``: the re-ranker's top-k is a prefix of its longer lists, so more were
    fetched until the ``gallery_size`` items were all read (``fetched``); a matching returns exactly the
    ``fetched`` items asked for."""
    if shown >= k:
        return None
    if prefix_lists and fetched >= gallery_size:
        why = f"the {gallery_size} gallery items hold only {shown} distinct items"
    elif prefix_lists:
        why = f"the first {fetched} results hold only {shown} distinct items"
    else:
        why = f"the re-ranker's {fetched} results (a matching's lists are not cut from longer ones) hold only " \
              f"{shown} distinct items"
    return f"only {shown} distinct results of the {k} asked for: {why}; identical captions are shown once, with " \
           f"their count and ids"


def prefix_lists(gallery_modality: str, rerank: str) -> bool:
    """True when asking for more results of a ``rerank`` search over a ``gallery_modality`` gallery gives a
    longer list that starts with the shorter one (a caption gallery, whose identical texts merge, under a
    re-ranker that returns scores); a matching's lists are not cut from longer ones."""
    return gallery_modality == "caption" and get_reranker(rerank).returns_scores


def more_to_fetch(hits: Sequence[Sequence[Any]], k: int, fetched: int, gallery_size: int, gallery_modality: str,
                  rerank: str) -> int | None:
    """After a search that asked for ``fetched`` results per query and found ``hits`` (one ranked hit list
    per query): how many to ask for next (:func:`next_fetch_size`) while some query's hits merge into
    fewer than ``k`` distinct lines and the gallery (``gallery_size`` items) holds more
    (:func:`needs_more`), else None. A matching (``rerank`` without scores), whose lists are not cut from
    longer ones, is asked once (:func:`prefix_lists`)."""
    if prefix_lists(gallery_modality, rerank) and any(needs_more(h, k, fetched, gallery_size) for h in hits):
        return next_fetch_size(fetched, gallery_size)
    return None


def shown_entries(hits: Sequence[Any], k: int, gallery_uncertainty: Tensor | None) -> list[dict[str, Any]]:
    """JSON-ready result lines of one query: identical captions merged (``count``, ``ids``,
    ``indices`` of the group), the raw ``uncertainty`` and its ``uncertainty_percentile`` within the
    gallery, at most ``k`` lines."""

    entries = []
    for shown in merge_identical_texts(hits, limit=k):
        hit = shown.hit
        entries.append({"rank": shown.rank, "index": hit.index, "id": hit.id, "score": hit.score,
                        "uncertainty": hit.uncertainty,
                        "uncertainty_percentile": uncertainty_percentile(hit.uncertainty, gallery_uncertainty),
                        "text": hit.text, "metadata": hit.metadata, "count": shown.count, "ids": shown.ids,
                        "indices": shown.indices})
    return entries


def result_warnings(entries: Sequence[Mapping[str, Any]], query: str, vocabulary: Any | None) -> list[str]:
    """Warnings of one shown query: unknown query words (text queries with a word vocabulary) and
    collapsed top scores."""

    warnings = []
    if vocabulary is not None:
        word_warning = query_word_warning(query, vocabulary)
        if word_warning:
            warnings.append(word_warning)
    collapsed = collapsed_score_warning([float(e["score"]) for e in entries], f"query '{query}'" if query else "query")
    if collapsed:
        warnings.append(collapsed)
    return warnings


def entries_text(query: str, header: str, entries: Sequence[Mapping[str, Any]], warnings: Sequence[str],
                 query_percentile: float | None = None, query_kind: str = "items") -> str:
    """A plain-text block of one query: a header line, one line per entry (uncertainty as a gallery
    percentile; merged captions with their count and ids), then the warnings."""

    unc = ("" if query_percentile is None
           else f"  (query uncertainty: {_ordinal(query_percentile)} percentile of the stored {query_kind})")
    lines = [f"{query}{unc}  [{header}]", f"{'rank':>4}  {'score':>10}  {'uncert.':>7}  {'id':<12} item"]
    for e in entries:
        pct = e.get("uncertainty_percentile")
        u = "-" if pct is None else f"{pct:.0f}%"
        item = e["text"] if e.get("text") is not None else _metadata_text(e.get("metadata") or {})
        if e.get("count", 1) > 1:
            item += f"  (x{e['count']}, ids {', '.join(str(i) for i in e['ids'])})"
        lines.append(f"{e['rank']:>4}  {e['score']:>10.4f}  {u:>7}  {str(e['id']):<12} {item}")
    lines += [f"warning: {w}" for w in warnings]
    return "\n".join(lines)


UNCERTAINTY_NOTE = ("uncert.: percentile of the item's uncertainty among the gallery's items "
                    "(0% most certain, 100% most uncertain); raw values with --json")


#: what a score's number is, where its registry reference does not say it in words
_SCORE_MEANINGS = {
    "match_prob": "the log of the match probability (PCME eqs. 2-3) averaged over sample pairs: 0 is a certain "
                  "match and exp(score) the probability",
    "avg_l2": "minus the average Euclidean distance between samples of the two embeddings (PCME Table 1)",
    "cosine": "the cosine of the two means, in [-1, 1]",
    "l2": "minus the Euclidean distance of the two means",
    "csd": "minus the expected squared distance of two samples (PCME++'s closed-form sampled distance)",
    "wasserstein": "minus the 2-Wasserstein distance of the two Gaussians",
    "kl": "minus the KL divergence of the two Gaussians (ProbVSE eqs. 4-5)",
}


def score_note(similarity: str, rerank: str = "nns") -> str:
    """One line saying what the ``score`` column is for ``similarity`` and ``rerank``: its meaning (the
    log match probability for ``match_prob``, ...), that higher is closer, and the re-weighting."""

    meaning = _SCORE_MEANINGS.get(similarity) or f"{similarity} ({get_similarity(similarity).reference})"
    line = f"score: {meaning}; higher is closer"
    if not get_reranker(rerank).is_identity:
        line += f"; shown after the {rerank} re-ranking (a re-weighted value, compare within one query)"
    return line


def _ordinal(value: float) -> str:
    number = int(round(value))
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _metadata_text(metadata: Mapping[str, Any]) -> str:
    file, captions = metadata.get("file"), metadata.get("captions")
    if isinstance(file, str):  # one's own images: the file name and the first caption written for it
        if isinstance(captions, list) and captions:
            more = f" (+{len(captions) - 1} more)" if len(captions) > 1 else ""
            return f"{file}  \"{captions[0]}\"{more}"
        return file
    labels = metadata.get("labels")
    if isinstance(labels, list) and labels:
        return ", ".join(str(x) for x in labels)
    return ", ".join(f"{key}={value}" for key, value in metadata.items()) or "-"


def word_vocabulary(model: Any) -> Any | None:
    """The word vocabulary that decides which query words a model (a :class:`pcmr.Model`) knows: its
    ``vocabulary`` when it reads word ids, None for a model that tokenises text itself (pretrained
    MiniLM) or a missing model."""

    vocab = getattr(model, "vocabulary", None)
    if model is None or vocab is None:
        return None
    config = getattr(model, "config", None)
    if config is not None and not getattr(getattr(config, "text_encoder", None), "reads_word_ids", True):
        return None
    return vocab


def answer_block_text(entry: Mapping[str, Any]) -> str:
    """The plain-text block of one query's JSON block (``pcmr search``): its lines, or "uncertain" and why
    when it was not answered, and why it was when answered under abstention."""
    if entry.get("abstained"):
        return f"{entry['query']}  [{entry['similarity']}, {entry['rerank']}]\nuncertain: {entry['reason']}"
    kind = "images" if entry["results"] and entry["results"][0].get("text") is not None else "captions"
    text = entries_text(entry["query"], f"{entry['similarity']}, {entry['rerank']}", entry["results"], [],
                        entry["query_uncertainty_percentile"], kind)
    return text + f"\n{entry['reason']}" if "coverage" in entry else text


def answer_text(entries: Sequence[Mapping[str, Any]], similarity: str, rerank: str, as_json: bool) -> str:
    """What ``pcmr search`` prints for the JSON blocks of a request's answers: them as JSON, or their text
    blocks followed by what the columns and the score mean."""
    if as_json:
        return json.dumps(list(entries), indent=2, ensure_ascii=False)
    return ("\n\n".join(answer_block_text(entry) for entry in entries)
            + f"\n\n{UNCERTAINTY_NOTE}\n{score_note(similarity, rerank)}")
