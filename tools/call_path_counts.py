"""Count the pcmr modules that one `pcmr evaluate` and one `pcmr search --text` call enter, and how often the
flow re-enters a module it had left (a module entered again after the flow went to another pcmr module).

    PYTHONPATH=src python tools/call_path_counts.py .            # this checkout
    PYTHONPATH=OLD/src python tools/call_path_counts.py OLD      # another version, to compare

Each command runs once untraced (imports, caches), then once under ``sys.setprofile`` on a tiny untrained
PCME run (the tests' ``make_tiny_run``). Counted: the modules of pcmr whose functions the call enters,
leaving out the registries, containers and foundations that docs/architecture.md calls "called wherever
needed" (``HELPERS``), and the transitions between consecutive counted modules."""
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

def trace(call):
    seq = []
    def prof(frame, event, arg):
        if event != "call":
            return
        mod = frame.f_globals.get("__name__", "")
        if mod.startswith("pcmr.") and not mod.startswith(HELPERS) and (not seq or seq[-1] != mod):
            seq.append(mod)
    sys.setprofile(prof)
    try:
        call()
    finally:
        sys.setprofile(None)
    entered = list(dict.fromkeys(seq))
    reentries = len(seq) - len(entered)
    return {"modules": len(entered), "transitions": len(seq), "re-entries": reentries, "list": entered}

tmp = Path(tempfile.mkdtemp())
run = conftest.make_tiny_run(tmp / "run", eval_section={"similarities": ["cosine", "match_prob"]})
out = {}
main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank", "nns,csls", "--out", str(tmp / "ev0")])
out["evaluate"] = trace(lambda: main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank", "nns,csls", "--out", str(tmp / "ev")]))
main(["search", str(tmp / "idx"), "--build", str(run)])
main(["search", str(tmp / "idx"), "--text", "a blue square", "--rerank", "csls", "-k", "3"])
out["search"] = trace(lambda: main(["search", str(tmp / "idx"), "--text", "a red circle", "--rerank", "csls", "-k", "3"]))
print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "list"} for k, v in out.items()}))
print(json.dumps({k: v["list"] for k, v in out.items()}))
