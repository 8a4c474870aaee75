"""docs/architecture.md (The path of one call): ``pcmr evaluate`` and ``pcmr search`` (build, then a text
and an image query) traced call by call with ``sys.setprofile`` on a tiny run, at package granularity
(``pcmr.hub``, ``pcmr.evaluation``, ...). The path runs down the layers of ``LIBRARY_LAYERS``: no call
goes from a library layer up into a later one, the evaluation never enters the search or the trainer
and the search never enters the evaluation or the trainer, and the documented packages are entered in
the documented order.

The path runs one way. The command's steps are the packages it calls into, other than those called
wherever needed (:data:`CALLED_WHEREVER_NEEDED`); each step is entered from the command in one
stretch, in the documented order, and once the flow has left a step's stretch for a later step, no
package entered so far is entered again. A method of an object an earlier step made (the
``pcmr.Model`` of ``pcmr.hub.load``), and every call under it, is the object's own: it does not
re-enter its package."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pcmr.cli import main
from test_architecture import APPLICATION_LAYERS, LIBRARY_LAYERS
from test_path_modules import COUNTS

#: the registries, the data containers and the foundations: called wherever needed (docs/architecture.md,
#: The path of one call), so neither a step of the command nor a package that a step may not re-enter
CALLED_WHEREVER_NEEDED = frozenset({
    "pcmr.cli",  # the command itself, and functions it hands down (write_folder calls them back)
    "pcmr.similarity", "pcmr.inference",  # the score and re-ranker registries
    "pcmr.data",  # RetrievalSplit, Vocabulary: the data containers
    "pcmr.ranking",  # top-k, block sizing and score checks under every ranking
    "pcmr.arguments", "pcmr.atomic", "pcmr.config", "pcmr.device", "pcmr.finite", "pcmr.gaussian", "pcmr.locking",
    "pcmr.point_set", "pcmr.progress", "pcmr.registry", "pcmr.relevance", "pcmr.report", "pcmr.suggest",
    "pcmr.termination",  # the foundations
})

#: a crossing: (caller package, callee package, callee function, whether it is a method, the packages of the
#: methods it runs under, each entered from another package)
Crossing = tuple[str, str, str, bool, frozenset[str]]


def _package(frame) -> str | None:
    """``pcmr.<package>`` of the code a frame runs (``pcmr.cli`` for ``pcmr.cli.search``), else None."""
    name = frame.f_globals.get("__name__", "")
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "pcmr" and len(parts) > 1 else None


def _rank(package: str) -> int | None:
    """Rank in LIBRARY_LAYERS (application layers above them all); None for a foundation module."""
    for rank, packages in enumerate(LIBRARY_LAYERS):
        if package in packages:
            return rank
    if package in APPLICATION_LAYERS:
        return len(LIBRARY_LAYERS) + APPLICATION_LAYERS.index(package)
    return None


def _is_method(code) -> bool:
    return code.co_argcount > 0 and code.co_varnames[0] in ("self", "cls")


def _owners(frame) -> frozenset[str]:
    """Packages of the methods on the stack of ``frame`` (itself excluded), each entered from another
    package: the objects a call runs under."""
    frames = []
    back = frame.f_back
    while back is not None:
        package = _package(back)
        if package is not None:
            frames.append((package, _is_method(back.f_code)))
        back = back.f_back
    return frozenset(package for (package, method), (caller, _) in zip(frames, frames[1:])
                     if method and caller != package)


def trace(action: Callable[[], int]) -> tuple[int, list[Crossing]]:
    """``(return code, crossings)``: every call from code of one pcmr package into another, in order, as
    ``(caller package, callee package, callee function, whether it is a method, owners)``; the caller is the
    nearest pcmr frame (torch's ``Module.__call__`` between an encoder and its ``forward`` is skipped) and
    the owners the packages of the cross-package methods it runs under (:func:`_owners`)."""
    crossings: list[Crossing] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _package(frame)
        if callee is None:
            return
        caller, back = None, frame.f_back
        while back is not None and caller is None:
            caller, back = _package(back), back.f_back
        if caller is not None and caller != callee and frame.f_code.co_name != "<module>":  # not an import
            code = frame.f_code
            crossings.append((caller, callee, code.co_name, _is_method(code), _owners(frame)))

    sys.setprofile(profile)
    try:
        code = action()
    finally:
        sys.setprofile(None)
    return code, crossings


def _upward(crossings: list[Crossing]) -> list[str]:
    """Plain functions of a later layer called from an earlier one. Methods of an object handed down are
    the object's own (the metrics driver calls a re-ranker's ``rescore``, the encoder a network's
    ``forward``), and so are calls into the command (a function it handed down, as ``write_folder`` calls
    back) and calls made by the foundations' higher-order helpers."""
    bad = []
    for caller, callee, function, method, _ in crossings:
        mine, theirs = _rank(caller), _rank(callee)
        if method or callee == "pcmr.cli" or mine is None or theirs is None:
            continue
        if theirs > mine:
            bad.append(f"{caller} -> {callee}.{function}")
    return sorted(set(bad))


def _first_entries(crossings: list[Crossing], packages: tuple[str, ...]) -> list[str]:
    order = ["pcmr.cli"]
    for _, callee, _, _, _ in crossings:
        if callee in packages and callee not in order:
            order.append(callee)
    return order


def _stretches(crossings: list[Crossing]) -> tuple[list[str], list[str]]:
    """``(steps, re-entries)``. The steps: the packages the command calls into (not those called wherever
    needed), one per stretch, in order; a method of an object that an earlier step made is not a step.
    The re-entries: ``caller -> package.function (steps)`` for each call into a package (not called
    wherever needed) that was first entered during an earlier step than the current one; a method call
    into such a package, or any call under a method of one, is the object's own (the model of
    ``pcmr.hub.load``, its network), not a re-entry."""
    steps: list[str] = []
    first: dict[str, int] = {}  # package -> the step during which it was first entered
    again = []
    for caller, callee, function, method, owners in crossings:
        if callee in CALLED_WHEREVER_NEEDED:
            continue
        current = len(steps) - 1
        handed_down = (method and first.get(callee, current) < current) or any(
            first.get(owner, current) < current for owner in owners)
        if caller == "pcmr.cli" and not handed_down and (not steps or steps[-1] != callee):
            steps.append(callee)
            current += 1
        if handed_down:
            continue
        entered = first.setdefault(callee, current)
        if entered < current:
            again.append(f"{caller} -> {callee}.{function} (entered in step {steps[entered]}, again in step "
                         f"{steps[current]})")
    return steps, sorted(set(again))


@pytest.fixture(scope="module")
def run(search_run_factory, tmp_path_factory) -> Path:
    return search_run_factory(tmp_path_factory.mktemp("path") / "run")


def test_the_path_of_pcmr_evaluate(run, tmp_path):
    code, crossings = trace(lambda: main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank",
                                          "nns,csls", "--out", str(tmp_path / "eval")]))
    assert code == 0
    _check_path(crossings, "pcmr.evaluation", {"pcmr.search", "pcmr.train", "pcmr.study"},
                ("pcmr.hub", "pcmr.evaluation"),
                ("pcmr.hub", "pcmr.models", "pcmr.evaluation", "pcmr.run_defaults", "pcmr.scoring", "pcmr.encode",
                 "pcmr.metrics"))


def test_no_module_of_the_evaluation_is_entered_twice(run, tmp_path):
    """docs/architecture.md (The path of one call): inside ``pcmr evaluate`` each module of the evaluation,
    and the modules it calls, is called from above and never calls back into a module that called it
    (producers never call back into the module that runs them, the rows never into the evaluator), as
    ``tools/call_path_counts.py`` counts it (its trace, loaded by ``tests/test_path_modules.py``)."""
    traced = COUNTS.trace(lambda: main(["evaluate", str(run), "--similarity", "cosine,match_prob",
                                        "--rerank", "nns,csls", "--out", str(tmp_path / "eval")]))
    assert traced["result"] == 0
    assert traced["twice"] == []


def _check_path(crossings: list[Crossing], step: str, never: set[str], steps: tuple[str, ...],
                documented: tuple[str, ...]) -> None:
    entered = {callee for _, callee, _, _, _ in crossings}
    assert not entered & never, sorted(entered & never)
    assert _upward(crossings) == []
    assert _first_entries(crossings, documented) == ["pcmr.cli", *documented]
    # one way: the command's steps, each in one stretch, in the documented order; no package entered again
    # once the flow has left it for a later step
    assert _stretches(crossings) == (list(steps), [])
    # the step's package is entered from the command only (or from the helper it hands a callback to):
    # once the flow has gone below it, it never comes back up into it
    callers = {caller for caller, callee, _, _, _ in crossings if callee == step}
    assert callers <= {"pcmr.cli", "pcmr.atomic"}, callers


def test_the_path_of_pcmr_search(run, tmp_path):
    index = tmp_path / "index"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(tmp_path / "q.png")
    for args, steps, documented in (
            (["search", str(index), "--build", str(run)], ("pcmr.search",),
             ("pcmr.search", "pcmr.hub", "pcmr.models", "pcmr.run_defaults", "pcmr.encode")),
            (["search", str(index), "--text", "a red circle", "--rerank", "csls", "--image", str(tmp_path / "q.png")],
             ("pcmr.search",), ("pcmr.search", "pcmr.hub", "pcmr.models", "pcmr.encode", "pcmr.scoring"))):
        code, crossings = trace(lambda args=args: main(args))
        assert code == 0
        _check_path(crossings, "pcmr.search", {"pcmr.evaluation", "pcmr.train", "pcmr.study"}, steps, documented)


def test_a_second_stretch_of_a_step_or_a_return_into_an_earlier_step_is_caught():
    """The one-way check on made-up traces: the command entering a step twice, and a later step calling a
    plain function of an earlier one, are reported; the methods of the earlier step's object are not."""
    none: frozenset[str] = frozenset()
    model = frozenset({"pcmr.hub"})
    crossings: list[Crossing] = [
        ("pcmr.cli", "pcmr.hub", "load", False, none), ("pcmr.hub", "pcmr.models", "load_model", False, none),
        ("pcmr.cli", "pcmr.atomic", "writing_folder", False, none),  # a foundation between: the same stretch
        ("pcmr.cli", "pcmr.evaluation", "evaluate", False, none),
        ("pcmr.evaluation", "pcmr.hub", "encode_split", True, none),  # the model's own method
        ("pcmr.hub", "pcmr.models", "forward", True, model),  # under it
        ("pcmr.evaluation", "pcmr.metrics", "recall", False, none)]
    assert _stretches(crossings) == (["pcmr.hub", "pcmr.evaluation"], [])
    back = [*crossings, ("pcmr.evaluation", "pcmr.hub", "read_options", False, none)]
    assert _stretches(back)[1] == ["pcmr.evaluation -> pcmr.hub.read_options (entered in step pcmr.hub, again in "
                                   "step pcmr.evaluation)"]
    twice = [*crossings, ("pcmr.cli", "pcmr.hub", "load", False, none)]
    assert _stretches(twice)[0] == ["pcmr.hub", "pcmr.evaluation", "pcmr.hub"]
