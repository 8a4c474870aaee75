"""``evaluate_model``: the SPEC §6 table for every requested similarity x re-ranker.

For each similarity the ``[N_img, N_cap]`` score matrix is computed once (sampled scores with a
fixed seed). Each re-ranker then works on one direction at a time: image->text on ``S``,
text->image on ``S.T`` (SPEC §1).

- Score re-weightings (``nns``, ``is``, ``csls``) give a full re-scored matrix, so every metric is
  computed by ``pcmr.metrics`` on it: R@K, R-Precision, MAP@R, PMRP (where labels exist), hubness.
- Matchings (``rgm``, ``gm`` and the ``+rgm``/``+gm`` combinations) give top-k lists only: R@K is
  computed from the run with ``k = K`` (SPEC §5) and N_k from the same lists; R-Precision, MAP@R and
  PMRP need a ranking of the whole gallery and are left empty. RGM's lambda is chosen per direction
  on the validation split (``select_lambda``, sum of R@K), or taken from ``rerank_options``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from pcmr.evaluation.encode import encode_split
from pcmr.evaluation.figures import decile_series, embeddings_2d_series, k_occurrence_histogram
from pcmr.evaluation.report import EvaluationResult
from pcmr.evaluation.scoring import check_names, get_method, matching_topk, score_matrix, unsupported_reason
from pcmr.gaussian import Gaussian
from pcmr.point_set import uncertainty_measure_for

__all__ = ["evaluate_model", "evaluate_embeddings", "DEFAULT_SIMILARITIES", "DEFAULT_RERANKERS",
           "DEFAULT_LAMBDA_GRID"]

DEFAULT_SIMILARITIES = ("cosine", "wasserstein", "match_prob", "elk", "kl")
DEFAULT_RERANKERS = ("nns", "is", "csls", "csls+rgm")
#: lambda candidates for RGM (item capacity round(lambda * k), inf = no constraint); tuned on validation data
DEFAULT_LAMBDA_GRID = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0, math.inf)
HUBNESS_KS = (1, 5, 10)


def _skew(value: float) -> float:
    """Hubness skewness with constant N_k (every item retrieved equally often: no hubs) taken as 0;
    the population skewness is undefined (NaN) there."""
    return 0.0 if math.isnan(value) else value


def _ordered(row: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """Canonical column order: ids, R@K both ways, rsum, R-P, MAP@R, PMRP, extras, hs-sum, lambdas."""
    first = ["similarity", "rerank"] + [f"{d}_R@{k}" for d in ("i2t", "t2i") for k in ks] + ["rsum"]
    first += [f"{d}_{m}" for d in ("i2t", "t2i") for m in ("r_precision", "map_at_r")]
    first += [f"{d}_pmrp_{z}" for d in ("i2t", "t2i") for z in ("0", "1", "2", "mean")]
    last = ["hs_sum", "i2t_lambda", "t2i_lambda"]
    keys = [k for k in first if k in row] + [k for k in row if k not in first and k not in last]
    return {k: row[k] for k in keys + [k for k in last if k in row]}


def _accepted_rerankers() -> list[str]:
    from pcmr.inference import list_rerankers

    return list(list_rerankers())


def _directions(scores: Tensor, relevance: Tensor, image_labels: Tensor | None,
                caption_labels: Tensor | None) -> list[tuple[str, Tensor, Tensor, Tensor | None, Tensor | None]]:
    """(name, scores [Q, G], relevant [Q, G], query labels, gallery labels) for i2t and t2i."""
    return [("i2t", scores, relevance, image_labels, caption_labels),
            ("t2i", scores.T, relevance.T, caption_labels, image_labels)]


def _select_lambda(name: str, params: dict[str, Any], val_scores: Tensor, val_relevant: Tensor,
                   ks: Sequence[int], grid: Sequence[float]) -> float:
    """``pcmr.inference.select_lambda`` (sum of R@K on the validation direction) for re-ranker ``name``."""
    from pcmr.inference import select_lambda

    method = get_method(name, params, size=tuple(val_scores.shape))
    extra = {"csls_k": method.csls_k} if method.reweighting == "csls" else {}
    if method.reweighting == "is":
        extra["beta"] = method.beta
    usable_ks = tuple(k for k in ks if k <= val_scores.shape[1])
    return float(select_lambda(val_scores, val_relevant, ks=usable_ks, grid=tuple(grid), method=name,
                               backend=method.backend, **extra).best_lam)


def _score_direction(row: dict[str, Any], direction: str, weighted: Tensor, relevant: Tensor,
                     query_labels: Tensor | None, gallery_labels: Tensor | None, ks: Sequence[int]) -> list[float]:
    """Metrics of one direction from a full (re-weighted) score matrix; returns the hubness skews."""
    from pcmr.metrics import hubness_skewness, pmrp, retrieval_metrics

    metrics = retrieval_metrics(weighted, relevant, ks=tuple(ks))
    for k in ks:
        row[f"{direction}_R@{k}"] = metrics[f"R@{k}"]
    row[f"{direction}_r_precision"] = metrics["r_precision"]
    row[f"{direction}_map_at_r"] = metrics["map_at_r"]
    if query_labels is not None and gallery_labels is not None:
        # rows of `weighted` are this direction's queries: pmrp's "i2t" half is this direction
        values = pmrp(weighted, query_labels, gallery_labels, zetas=(0, 1, 2))["i2t"]
        for zeta in (0, 1, 2):
            row[f"{direction}_pmrp_{zeta}"] = values[f"pmrp@{zeta}"]
        row[f"{direction}_pmrp_mean"] = values["pmrp"]
    return [_skew(hubness_skewness(weighted, k)) for k in HUBNESS_KS if k <= weighted.shape[1]]


def _extra_direction(row: dict[str, Any], direction: str, weighted: Tensor, relevance: Tensor,
                     extra_positives: Sequence[Any], ks: Sequence[int]) -> None:
    """R@K, R-Precision and MAP@R of one direction under extra positive sets (CxC, ECCV Caption)."""
    from pcmr.metrics import evaluate_retrieval

    matrix = weighted if direction == "i2t" else weighted.T  # evaluate_retrieval takes [N_img, N_cap]
    report = evaluate_retrieval(matrix, relevance, ks=tuple(ks), extra_positives=list(extra_positives),
                                hubness_ks=())
    for extra in extra_positives:
        values = report[f"{extra.name} {direction}"]
        key = f"{direction}_{extra.name.lower()}"
        for k in ks:
            row[f"{key}_R@{k}"] = values[f"R@{k}"]
        row[f"{key}_r_precision"] = values["r_precision"]
        row[f"{key}_map_at_r"] = values["map_at_r"]


def _fold_recall(row: dict[str, Any], rerank: str, params: dict[str, Any], scores: Tensor, relevance: Tensor,
                 num_folds: int, ks: Sequence[int]) -> None:
    """Mean R@K over ``num_folds`` consecutive image folds (the COCO 1K protocol on 5K-test).

    Each fold is the ``[N_img / F, its captions]`` submatrix (a caption belongs to the fold of
    the images it is relevant to), re-scored by the re-ranker on its own (IS and CSLS normalise
    over the fold's gallery) and evaluated both ways. Columns ``folds_{i2t,t2i}_R@k`` and
    ``folds_rsum``.
    """
    from pcmr.metrics import fold_indices, retrieval_metrics
    from pcmr.metrics._relevance import as_sparse

    folds = fold_indices(as_sparse(relevance, *relevance.shape), num_folds)
    totals = {f"folds_{d}_R@{k}": 0.0 for d in ("i2t", "t2i") for k in ks}
    for images, captions in folds:
        sub = scores[images][:, captions]  # [N_img / F, captions of the fold]
        rel = relevance[images][:, captions]
        for direction, s_dir, r_dir in (("i2t", sub, rel), ("t2i", sub.T, rel.T)):
            method = get_method(rerank, params, size=tuple(s_dir.shape))
            metrics = retrieval_metrics(method.rescore(s_dir), r_dir, ks=tuple(ks))
            for k in ks:
                totals[f"folds_{direction}_R@{k}"] += metrics[f"R@{k}"]
    for key, total in totals.items():
        row[key] = total / num_folds
    row["folds_rsum"] = sum(totals.values()) / num_folds


def _list_direction(row: dict[str, Any], direction: str, weighted: Tensor, relevant: Tensor, method: Any,
                    lam: float | None, ks: Sequence[int]) -> list[float]:
    """R@K and hubness of one direction from matching lists (one run per K); returns the skews."""
    from pcmr.metrics import recall_at_k_from_topk
    from pcmr.metrics.hubness import skewness

    skews = []
    for k in sorted(set(ks) | set(HUBNESS_KS)):
        if k > weighted.shape[1]:
            continue
        lists = matching_topk(method, weighted, k, lam=lam)  # [Q, k], the run with this k
        if k in ks:
            row[f"{direction}_R@{k}"] = recall_at_k_from_topk(lists, relevant, k=k)
        if k in HUBNESS_KS:
            counts = torch.bincount(lists.reshape(-1), minlength=weighted.shape[1])  # [G]
            skews.append(_skew(skewness(counts)))
    row[f"{direction}_r_precision"] = None
    row[f"{direction}_map_at_r"] = None
    return skews


def evaluate_embeddings(images: Gaussian, captions: Gaussian, relevance: Tensor, *,
                        similarities: Sequence[str] = DEFAULT_SIMILARITIES,
                        rerankers: Sequence[str] = DEFAULT_RERANKERS,
                        similarity_options: dict[str, dict[str, Any]] | None = None,
                        image_labels: Tensor | None = None, caption_labels: Tensor | None = None,
                        val: tuple[Gaussian, Gaussian, Tensor] | None = None,
                        rerank_options: dict[str, dict[str, Any]] | None = None,
                        ks: Sequence[int] = (1, 5, 10), lambda_grid: Sequence[float] = DEFAULT_LAMBDA_GRID,
                        uncertainty_measure: str = "log_det", extra_positives: Sequence[Any] = (),
                        num_folds: int | None = None, meta: dict[str, Any] | None = None) -> EvaluationResult:
    """The evaluation table of already encoded embeddings.

    Args:
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]``.
        relevance: BoolTensor ``[N_img, N_cap]``, the ground-truth relation.
        similarities, rerankers: names (``["all"]`` for every registered one).
        similarity_options: options per similarity (e.g. the learned ``{"match_prob": {"a": .., "b": ..}}``).
        image_labels / caption_labels: BoolTensor ``[N, C]`` class labels for PMRP (both or neither).
        val: ``(images, captions, relevance)`` of the validation split, for RGM's lambda.
        rerank_options: parameters per re-ranker name: ``beta`` (is), ``csls_k`` (csls), ``lam`` (rgm; a
            fixed lambda instead of selecting one).
        ks: cut-offs of R@K; lambda_grid: lambda candidates for RGM.
        uncertainty_measure: ``Gaussian.uncertainty`` measure for the decile analysis.
        extra_positives: ``pcmr.metrics.ExtraPositives`` sets (CxC, ECCV Caption) evaluated on the full
            re-scored matrices: columns ``{i2t,t2i}_{set}_R@k``, ``_r_precision`` (RPC² for CxC), ``_map_at_r``.
        num_folds: also report R@K and rsum averaged over this many consecutive image folds
            (``folds_*`` columns; 5 on COCO 5K-test is the COCO 1K protocol), for the re-rankers
            that re-score a full matrix (matching re-rankers get ``None``).
    """
    from pcmr.similarity import list_similarities

    similarities = check_names("similarity", similarities, list_similarities())
    rerankers = check_names("re-ranker", rerankers, _accepted_rerankers())
    if relevance.dtype != torch.bool or tuple(relevance.shape) != (images.num, captions.num):
        raise ValueError(f"relevance must be a BoolTensor [{images.num}, {captions.num}], got "
                         f"{relevance.dtype} {tuple(relevance.shape)}")
    if num_folds is not None and (isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 1
                                  or images.num % num_folds):
        raise ValueError(f"num_folds must be a positive integer dividing the {images.num} images, got {num_folds!r}")
    similarity_options = {k: dict(v) for k, v in (similarity_options or {}).items()}
    rerank_options = {k: dict(v) for k, v in (rerank_options or {}).items()}
    device = images.device
    relevance = relevance.to(device)
    if image_labels is not None and caption_labels is not None:
        image_labels, caption_labels = image_labels.to(device), caption_labels.to(device)
    else:
        image_labels = caption_labels = None
    result = EvaluationResult(meta={**(meta or {}), "num_images": images.num, "num_captions": captions.num,
                                    "uncertainty_measure": uncertainty_measure,
                                    "similarity_options": {}, "selected_lambda": {}, "notes": []})
    notes = result.meta["notes"]
    decile_data: dict[str, Any] = {}
    hub_data: dict[str, Any] = {}
    for name in similarities:
        options = similarity_options.get(name, {})
        reason = unsupported_reason(name, images, captions, options)
        if reason is not None:
            result.skipped.append({"similarity": name, "rerank": "*", "reason": reason})
            continue
        try:
            scores = score_matrix(name, images, captions, options)  # [N_img, N_cap]
            val_scores = score_matrix(name, val[0].to(device), val[1].to(device), options) if val else None
        except ValueError as err:
            result.skipped.append({"similarity": name, "rerank": "*", "reason": str(err)})
            continue
        result.meta["similarity_options"][name] = {k: v for k, v in options.items() if isinstance(v, (int, float))}
        val_dirs = _directions(val_scores, val[2].to(device), None, None) if val_scores is not None else None
        for rerank in rerankers:
            params = dict(rerank_options.get(rerank, {}))
            lam_fixed = params.get("lam")
            select_params = {k: v for k, v in params.items() if k != "lam"}
            row: dict[str, Any] = {"similarity": name, "rerank": rerank}
            skews: list[float] = []
            rescored_dirs = {}
            for i, (direction, s_dir, rel_dir, q_labels, g_labels) in enumerate(
                    _directions(scores, relevance, image_labels, caption_labels)):
                method = get_method(rerank, params, size=tuple(s_dir.shape))
                weighted = method.rescore(s_dir)  # [Q, G]
                rescored_dirs[direction] = weighted
                if method.matching == "none":
                    skews += _score_direction(row, direction, weighted, rel_dir, q_labels, g_labels, ks)
                    if extra_positives:
                        _extra_direction(row, direction, weighted, relevance, extra_positives, ks)
                    continue
                lam = lam_fixed
                if lam is None and method.matching == "rgm":
                    if val_dirs is None:
                        raise ValueError(f"re-ranker {rerank!r} needs a validation split to select lambda "
                                         f"(val_split) or a fixed rerank_options['{rerank}']['lam']")
                    lam = _select_lambda(rerank, select_params, val_dirs[i][1], val_dirs[i][2], ks, lambda_grid)
                    result.meta["selected_lambda"][f"{name}/{rerank}/{direction}"] = lam
                skews += _list_direction(row, direction, weighted, rel_dir, method, lam, ks)
                row[f"{direction}_lambda"] = lam
            row["rsum"] = sum(row[f"{d}_R@{k}"] for d in ("i2t", "t2i") for k in ks)
            if num_folds is not None:
                if method.matching == "none":
                    _fold_recall(row, rerank, params, scores, relevance, num_folds, ks)
                else:  # top-k lists of the full matrix; the fold protocol is not defined for them
                    row.update({f"folds_{d}_R@{k}": None for d in ("i2t", "t2i") for k in ks}, folds_rsum=None)
            row["hs_sum"] = sum(skews) if skews else None
            result.rows.append(_ordered(row, ks))
            if method.matching == "none" and name == result.rows[0]["similarity"]:
                hub_data[f"{name}/{rerank}"] = {d: k_occurrence_histogram(w, 10) for d, w in rescored_dirs.items()}
        measure = uncertainty_measure_for((images, captions), uncertainty_measure)  # PVSE point sets: spread
        if measure is not None:
            decile_data[name] = decile_series(scores, relevance, images, captions, measure)
    if decile_data:
        result.figures["uncertainty_r1"] = {"measure": measure, "series": decile_data}
    if hub_data and min(images.num, captions.num) > 10:
        result.figures["k_occurrence"] = {"k": 10, "series": hub_data}
    if images.dim == 2:
        result.figures["embeddings_2d"] = embeddings_2d_series(images, captions, relevance)
    if not result.rows:
        notes.append("no (similarity, re-ranker) pair could be evaluated; see Skipped")
    notes.append("hs-sum: sum of the skewness of N_k for k = 1, 5, 10 over both directions; a constant N_k "
                 "(no hubs at all) counts as skewness 0")
    if num_folds is not None:
        result.meta["num_folds"] = num_folds
        notes.append(f"folds: R@K and rsum averaged over {num_folds} consecutive folds of {images.num // num_folds} "
                     "images and their captions, each re-scored on its own (COCO 1K protocol when 5 folds of 5K-test)")
    if any(get_method(r).matching != "none" for r in rerankers):
        notes.append("matching re-rankers (gm/rgm) return top-k lists: R@K from the run with k = K; "
                     "R-Precision, MAP@R and PMRP need a full ranking and are left empty")
    return result


def evaluate_model(model: Any, split: Any, vocab: Any, *, similarities: Sequence[str] = DEFAULT_SIMILARITIES,
                   rerankers: Sequence[str] = DEFAULT_RERANKERS,
                   similarity_options: dict[str, dict[str, Any]] | None = None, val_split: Any = None,
                   batch_size: int = 256, device: torch.device | str | None = None, out_dir: Any = None,
                   progress: bool = False, ks: Sequence[int] = (1, 5, 10),
                   rerank_options: dict[str, dict[str, Any]] | None = None,
                   lambda_grid: Sequence[float] = DEFAULT_LAMBDA_GRID, uncertainty_measure: str = "log_det",
                   extra_positives: Sequence[str] | None = None, num_folds: int | None = None,
                   meta: dict[str, Any] | None = None) -> EvaluationResult:
    """Encode ``split`` (and ``val_split``) with ``model`` and build the evaluation table.

    Similarities the model cannot support are skipped with a reason; RGM's lambda is selected on
    ``val_split``; PMRP is reported where the split has class labels; the uncertainty-vs-corruption
    figure is drawn from occlusion / word-erasure series of the split's items. ``extra_positives``
    names positive sets of ``pcmr.metrics.load_extra_positives`` (``"cxc"``, ``"eccv"``); None means
    both for a COCO split whose ids are those of COCO 5K-test when the ``eccv-caption`` package is
    installed (otherwise a note says why they are absent). ``num_folds`` adds fold-averaged R@K
    (see :func:`evaluate_embeddings`); None means 5 folds for a COCO split of 5000 images (the
    COCO 1K protocol) and none otherwise. With ``out_dir`` the result is also saved there
    (Markdown, CSV, JSON, PNG). See :func:`evaluate_embeddings`.
    """
    images, captions = encode_split(model, split, vocab, batch_size=batch_size, device=device, progress=progress)
    val = None
    if val_split is not None:
        val_images, val_captions = encode_split(model, val_split, vocab, batch_size=batch_size, device=device,
                                                progress=progress)
        val = (val_images, val_captions, val_split.relevance_matrix())
    info = {"model": getattr(getattr(model, "config", None), "name", type(model).__name__),
            "dataset": getattr(split, "name", None), "split": getattr(split, "split", None),
            "val_split": getattr(val_split, "split", None), "device": str(images.device), **(meta or {})}
    extras, extra_note = _load_extra_positives(split, extra_positives)
    if num_folds is None and getattr(split, "name", "") == "coco" and images.num == 5000:
        num_folds = 5
    result = evaluate_embeddings(
        images, captions, split.relevance_matrix(), extra_positives=extras, similarities=similarities, rerankers=rerankers,
        similarity_options=similarity_options, image_labels=getattr(split, "image_labels", None),
        caption_labels=getattr(split, "caption_labels", None), val=val, rerank_options=rerank_options, ks=ks,
        lambda_grid=lambda_grid, uncertainty_measure=uncertainty_measure, num_folds=num_folds, meta=info)
    if extra_note:
        result.meta["notes"].append(extra_note)
    if not (images.is_point and captions.is_point):
        from pcmr.evaluation.figures import corruption_series

        series = corruption_series(model, split, vocab, uncertainty_measure, batch_size=batch_size, device=device)
        if series:
            result.figures["uncertainty_vs_corruption"] = series
    if out_dir is not None:
        result.save(out_dir)
    return result


def _load_extra_positives(split: Any, names: Sequence[str] | None) -> tuple[list[Any], str | None]:
    """CxC / ECCV Caption positives for ``split`` (see :func:`evaluate_model`) and a note, if any."""
    from pcmr.metrics import load_extra_positives

    requested = list(names) if names is not None else (["cxc", "eccv"] if getattr(split, "name", "") == "coco"
                                                         else [])
    extras, problems = [], []
    for name in requested:
        try:
            extra = load_extra_positives(name, split.image_ids, split.caption_ids)
        except (ImportError, ValueError, TypeError) as err:
            if names is not None:
                raise
            problems.append(f"{name}: {err}")
            continue
        if int(extra.i2t.indptr[-1]) == 0 and int(extra.t2i.indptr[-1]) == 0:
            problems.append(f"{name}: no image or caption id of the split is in COCO 5K-test")
            continue
        extras.append(extra)
    note = f"CxC / ECCV Caption metrics not reported ({'; '.join(problems)})" if problems else None
    return extras, note
