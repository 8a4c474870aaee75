"""``pcmr evaluate RUN_OR_MODEL``: the evaluation table of a trained model (pcmr.evaluation).

``RUN_OR_MODEL`` is anything :func:`pcmr.load` opens: a run folder written by ``pcmr train``, its
``model/`` folder, or a folder written by ``Model.save_pretrained`` (which records its run's config).
Defaults for the data, split, similarities, re-rankers, batch size and device come from that run
config (:func:`pcmr.run_defaults.run_defaults`, read by the evaluation layer: :func:`pcmr.evaluation.model.selection`,
:func:`~pcmr.evaluation.model.evaluation_split` and :func:`pcmr.evaluate`); flags override them. A model folder that
records no run config (e.g. ``pcmr convert`` output) needs ``--data``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pcmr.arguments import parse_option
from pcmr.atomic import repair_folder, write_folder, writing_folder
from pcmr.evaluation.model import evaluate, evaluation_split, selection
from pcmr.evaluation.table import collapsed_recall_warning
from pcmr.hub import load
from pcmr.inference import get_reranker, list_rerankers
from pcmr.progress import phase
from pcmr.similarity import check_similarity_option_values, get_similarity, list_similarities
from pcmr.suggest import did_you_mean, name_list, unknown_name
from pcmr.termination import run_until_terminated

__all__ = ["run", "parse_names", "check_option_owners", "check_option_values", "prepare_out"]


def parse_names(values: list[str] | None) -> list[str] | None:
    """``["cosine,kl", "elk"]`` -> ``["cosine", "kl", "elk"]``; None stays None."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _parse_option(item: str) -> tuple[str, str, Any]:
    """``match_prob.a=12.5`` -> ``("match_prob", "a", 12.5)`` (the value read as in ``--set``)."""
    owner, name, value = parse_option(item, "match_prob.a=12.5 or csls.csls_k=10")
    assert owner is not None  # without bare, the form has both parts
    return owner, name, value


def check_option_owners(items: list[tuple[str, str, Any]], similarities: list[str], rerankers: list[str]) -> None:
    """Each ``--option NAME.OPTION=VALUE`` must name a selected similarity or re-ranker and one of its
    options; otherwise ValueError naming the flag, what is selected and what is accepted."""

    for owner, option, value in items:
        flag = f"--option {owner}.{option}={value}"
        if owner in list_similarities():
            kind, accepted = "similarity", sorted(get_similarity(owner).options)
            selected = similarities
        elif owner in list_rerankers():
            kind, accepted = "re-ranker", sorted(get_reranker(owner).parameters())
            selected = rerankers
        else:
            raise ValueError(f"{flag}: {unknown_name('similarity or re-ranker', owner, similarities + rerankers)}")
        if owner not in selected:
            raise ValueError(f"{flag}: {kind} '{owner}' is not evaluated (selected: {name_list(selected)}); "
                             f"add it with --{'similarity' if kind == 'similarity' else 'rerank'} {owner}")
        if not accepted:
            raise ValueError(f"{flag}: {kind} '{owner}' takes no options")
        if option not in accepted:
            raise ValueError(f"{flag}: {kind} '{owner}' has no option '{option}'{did_you_mean(option, accepted)}; "
                             f"expected one of: {name_list(accepted)}")


def check_option_values(items: list[tuple[str, str, Any]], similarity_options: dict[str, dict[str, Any]],
                        rerank_options: dict[str, dict[str, Any]]) -> None:
    """Each given ``--option`` value must be one its owner accepts (e.g. ``is.beta`` a number > 0,
    ``match_prob.a`` a number > 0): checked before any data is loaded or encoded; ValueError naming the
    flag and what is expected."""

    for owner, option, value in items:
        flag = f"--option {owner}.{option}={value}"
        try:
            if owner in rerank_options:
                get_reranker(owner, **rerank_options[owner])
            else:
                check_similarity_option_values(owner, similarity_options.get(owner, {}))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{flag}: {err}") from None


def prepare_out(out: Path, overwrite: bool) -> None:
    """Refuse to replace an earlier report in ``out`` unless ``overwrite``; never replace a folder that
    holds other files. An empty or missing folder is fine."""

    if not out.exists():
        return
    if not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file; expected a folder for the report")
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return
    if not (out / "results.json").is_file():
        raise FileExistsError(f"--out {out} holds files that are not an evaluation report "
                              f"({', '.join(entries[:3])}); choose an empty or new folder")
    if not overwrite:
        raise FileExistsError(f"{out} already holds an evaluation report; pass --overwrite to replace it "
                              f"or --out DIR to write elsewhere")


def run(args: argparse.Namespace) -> int:
    return run_until_terminated("evaluate", _run, args, args.out or "the report folder")


def _run(args: argparse.Namespace) -> int:
    if args.out:  # a report whose swap was killed between its renames is put back before anything else
        repair_folder(args.out)
    model = load(args.run_or_model, device=args.device or "cpu", vocabulary=args.vocab)
    chosen = selection(model, split=args.split, similarities=parse_names(args.similarity),
                       rerankers=parse_names(args.rerank))
    similarities, rerankers = chosen.similarities, chosen.rerankers
    given = [_parse_option(item) for item in args.option]
    check_option_owners(given, similarities, rerankers)
    rerank_options: dict[str, dict[str, Any]] = {}
    for owner, option, value in given:
        target = model.similarity_options if owner in list_similarities() else rerank_options
        target.setdefault(owner, {})[option] = value
    check_option_values(given, model.similarity_options, rerank_options)  # before loading data or encoding
    split = evaluation_split(model, chosen.split, args.data, args.data_name)
    if args.folds is not None and (args.folds < 1 or split.num_images % args.folds):  # before any work
        raise ValueError(f"--folds {args.folds}: num_folds must be a positive integer dividing the "
                         f"{split.num_images} images, got {args.folds}")
    out = Path(args.out) if args.out else (model.run_dir or Path(".")) / f"eval-{chosen.split}"
    with writing_folder(out, "writing this evaluation report"):  # one writer per report, a killed one's copies removed
        return _evaluate(args, model, split, out, similarities, rerankers, rerank_options)


def _evaluate(args: argparse.Namespace, model: Any, split: Any, out: Path, similarities: list[str],
              rerankers: list[str], rerank_options: dict[str, dict[str, Any]]) -> int:
    prepare_out(out, args.overwrite)
    result = evaluate(model, split, val_split=args.val_split, data=args.data, data_name=args.data_name,
                          similarities=similarities, rerankers=rerankers, rerank_options=rerank_options,
                          batch_size=args.batch_size, device=args.device, progress=args.progress,
                          num_folds=args.folds, corruption=args.corruption)
    collapsed = collapsed_recall_warning(result.rows)
    if not result.rows:
        reasons = "; ".join(f"{s['similarity']}/{s['rerank']}: {s['reason']}" for s in result.skipped)
        raise ValueError(f"no (similarity, re-ranker) pair could be evaluated ({reasons or 'nothing selected'}); "
                         f"nothing written to {out}")
    written: list[Path] = []

    def write(folder: Path) -> None:
        written.extend(out / path.relative_to(folder) for path in result.save(folder).values())

    with phase(f"writing the report and figures to {out}"):
        write_folder(out, write)  # the report is swapped in whole, so no figure of an older one stays
    print(result.to_markdown())
    print(f"wrote {', '.join(str(p) for p in written)}")
    if collapsed:
        print(f"warning: {collapsed}", file=sys.stderr)
    for similarity, text in dict.fromkeys((row.get("similarity"), row["warning"]) for row in result.rows
                                          if row.get("warning")):
        print(f"warning: {similarity}: {text}", file=sys.stderr)
    return 0
