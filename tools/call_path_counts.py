"""Count the pcmr modules that one `pcmr evaluate` and one `pcmr search --text` call enter, and how often the
flow re-enters a module it had left (a module entered again after the flow went to another pcmr module).

    PYTHONPATH=src python tools/call_path_counts.py .            # this checkout
    PYTHONPATH=OLD/src python tools/call_path_counts.py OLD      # another version, to compare

Each command runs once untraced (imports, caches), then once under ``sys.setprofile`` on a tiny untrained
PCME run (the tests' ``make_tiny_run``). Counted: the modules of pcmr whose functions the call enters,
leaving out the registries, containers and foundations that docs/architecture.md calls "called wherever
needed" (``HELPERS``), and the transitions between consecutive counted modules. "Entered twice" counts the distinct calls into a module that is
already on the call stack below another counted module (a callee calling back into its caller's module); the last
output lists them."""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, sys.argv[1] + "/tests")
import conftest  # noqa: E402
from pcmr.cli import main  # noqa: E402

HELPERS = ("pcmr.atomic", "pcmr.config", "pcmr.finite", "pcmr.gaussian", "pcmr.progress", "pcmr.registry",
           "pcmr.report", "pcmr.suggest", "pcmr.similarity", "pcmr.inference", "pcmr.data", "pcmr.ranking",
           "pcmr.locking", "pcmr.termination", "pcmr.device", "pcmr.relevance", "pcmr.arguments", "pcmr.catalog",
           "pcmr.models", "pcmr.metrics", "pcmr.encode", "pcmr.scoring", "pcmr.model_files")

def counted(module):
    return module.startswith("pcmr.") and not module.startswith(HELPERS)


def counted_stack(frame):
    """The counted modules on the call stack below ``frame``, innermost first, each run of one module once."""
    stack = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if counted(module) and (not stack or stack[-1] != module):
            stack.append(module)
        frame = frame.f_back
    return stack


def trace(call):
    seq, twice = [], []
    def prof(frame, event, arg):
        if event != "call":
            return
        mod = frame.f_globals.get("__name__", "")
        if not counted(mod):
            return
        if not seq or seq[-1] != mod:
            seq.append(mod)
        below = counted_stack(frame.f_back)
        # entered twice: the module is already on the stack, below a call into another counted module
        if below and below[0] != mod and mod in below:
            twice.append(f"{' <- '.join(reversed(below[:below.index(mod) + 1]))} -> {mod}.{frame.f_code.co_name}")
    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    entered = list(dict.fromkeys(seq))
    reentries = len(seq) - len(entered)
    return {"modules": len(entered), "transitions": len(seq), "re-entries": reentries,
            "entered twice": len(set(twice)), "list": entered, "twice": sorted(set(twice))}

tmp = Path(tempfile.mkdtemp())
run = conftest.make_tiny_run(tmp / "run", eval_section={"similarities": ["cosine", "match_prob"]})
out = {}
main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank", "nns,csls", "--out", str(tmp / "ev0")])
out["evaluate"] = trace(lambda: main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank", "nns,csls", "--out", str(tmp / "ev")]))
main(["search", str(tmp / "idx"), "--build", str(run)])
main(["search", str(tmp / "idx"), "--text", "a blue square", "--rerank", "csls", "-k", "3"])
out["search"] = trace(lambda: main(["search", str(tmp / "idx"), "--text", "a red circle", "--rerank", "csls", "-k", "3"]))
print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk not in ("list", "twice")} for k, v in out.items()}))
print(json.dumps({k: v["list"] for k, v in out.items()}))
print(json.dumps({k: v["twice"] for k, v in out.items()}, indent=1))
