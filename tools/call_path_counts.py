"""Count the pcmr modules that one `pcmr evaluate` and one `pcmr search --text` call enter, how often the
flow re-enters a module it had left (a module entered again after the flow went to another pcmr module),
and which calls enter a module twice.

    PYTHONPATH=src python tools/call_path_counts.py .            # this checkout
    PYTHONPATH=OLD/src python tools/call_path_counts.py OLD      # another version, to compare

Each command runs once untraced (imports, caches), then once under ``sys.setprofile`` on a tiny untrained
PCME run (the tests' ``make_tiny_run``). Counted: the modules of pcmr whose functions the call enters,
leaving out the registries, containers and foundations that docs/architecture.md calls "called wherever
needed" (``HELPERS``), and the transitions between consecutive counted modules. "Entered twice" counts the
distinct calls into a module that is already on the call stack below another counted module (a callee
calling back into its caller's module); the last output lists them. Module bodies run by an import are
not calls.

The tests (``tests/test_call_path.py``, ``tests/test_path_modules.py``) load this file and trace with
:func:`trace`, so the measurement and the checks count the same way.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HELPERS = ("pcmr.atomic", "pcmr.config", "pcmr.finite", "pcmr.gaussian", "pcmr.progress", "pcmr.registry",
           "pcmr.report", "pcmr.suggest", "pcmr.similarity", "pcmr.inference", "pcmr.data", "pcmr.ranking",
           "pcmr.locking", "pcmr.termination", "pcmr.device", "pcmr.relevance", "pcmr.arguments", "pcmr.catalog",
           "pcmr.models", "pcmr.metrics", "pcmr.encode", "pcmr.scoring", "pcmr.model_files")


def counted(module: str) -> bool:
    """Whether the count counts ``module``: a pcmr module other than the helpers."""
    return module.startswith("pcmr.") and not module.startswith(HELPERS)


def counted_stack(frame: Any) -> list[str]:
    """The counted modules on the call stack from ``frame`` down, innermost first, each run of one module once."""
    stack: list[str] = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if counted(module) and (not stack or stack[-1] != module):
            stack.append(module)
        frame = frame.f_back
    return stack


def trace(call: Callable[[], Any]) -> dict[str, Any]:
    """Run ``call`` under ``sys.setprofile``: ``modules`` (how many counted modules it enters), ``list`` (them,
    in order), ``transitions``, ``re-entries``, ``entered twice`` and ``twice`` (each call into a module already
    on the stack below another counted module, as ``outer <- ... <- caller -> module.function``), and
    ``result`` (what ``call`` returned)."""
    seq: list[str] = []
    twice: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "<module>":
            return
        module = frame.f_globals.get("__name__", "")
        if not counted(module):
            return
        if not seq or seq[-1] != module:
            seq.append(module)
        below = counted_stack(frame.f_back)
        if below and below[0] != module and module in below:
            twice.add(f"{' <- '.join(reversed(below[:below.index(module) + 1]))} -> {module}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    entered = list(dict.fromkeys(seq))
    return {"modules": len(entered), "transitions": len(seq), "re-entries": len(seq) - len(entered),
            "entered twice": len(twice), "list": entered, "twice": sorted(twice), "result": result}


def main(checkout: str) -> None:
    sys.path.insert(0, checkout + "/tests")
    conftest = importlib.import_module("conftest")
    command = importlib.import_module("pcmr.cli").main
    tmp = Path(tempfile.mkdtemp())
    run = conftest.make_tiny_run(tmp / "run", eval_section={"similarities": ["cosine", "match_prob"]})
    evaluate = ["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank", "nns,csls", "--out"]
    command([*evaluate, str(tmp / "ev0")])
    out = {"evaluate": trace(lambda: command([*evaluate, str(tmp / "ev")]))}
    command(["search", str(tmp / "idx"), "--build", str(run)])
    command(["search", str(tmp / "idx"), "--text", "a blue square", "--rerank", "csls", "-k", "3"])
    out["search"] = trace(lambda: command(["search", str(tmp / "idx"), "--text", "a red circle", "--rerank", "csls",
                                           "-k", "3"]))
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk not in ("list", "twice", "result")}
                      for k, v in out.items()}))
    print(json.dumps({k: v["list"] for k, v in out.items()}))
    print(json.dumps({k: v["twice"] for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
