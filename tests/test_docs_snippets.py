"""Every ```python block of README.md and docs/*.md runs.

Convention (also in docs/architecture.md, "Documentation snippets"):

- each block runs in a fresh namespace, in a temporary working folder holding ``runs/demo-tiny``:
  a run trained by ``pcmr train pcme`` on a small built-in shapes set (64-pixel images) and
  evaluated by ``pcmr evaluate``, so snippets can open it like a user's run;
- an HTML comment on the line before a block, ``<!-- snippet-setup: NAME -->``, first runs the named
  setup of ``SETUPS`` below in the block's namespace (it defines the inputs the block takes, e.g.
  ``images``/``captions`` Gaussians); ``<!-- snippet-setup: NAME1, NAME2 -->`` runs several;
- the blocks of one file run in one child process (so a registration in a snippet stays out of the
  test process); a failure names the file and line of the failing block and its traceback points at
  the line of the Markdown file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SETUP_COMMENT = re.compile(r"^<!--\s*snippet-setup:\s*([\w, -]+?)\s*-->\s*$")

SHAPES_TINY = {"num_train": 60, "num_val": 20, "num_test": 20, "num_test_unseen": 1, "num_binary_selection": 1,
               "cache": False}

SETUPS = {
    # Gaussians, score matrices and relevance for the score / loss / metric / re-ranker snippets
    "gaussians": """
import torch
from pcmr import Gaussian
torch.manual_seed(0)
images = Gaussian(torch.randn(20, 16, requires_grad=True), torch.randn(20, 16) - 3)      # [N_img, D]
captions = Gaussian(torch.randn(100, 16, requires_grad=True), torch.randn(100, 16) - 3)  # [N_cap, D]
image_gaussians, caption_gaussians = images, captions
relevance = torch.zeros(20, 100, dtype=torch.bool)
relevance[torch.arange(100) // 5, torch.arange(100)] = True                  # 5 captions per image
S = torch.randn(20, 100)
scores, relevant = S, relevance
val_scores, val_relevant = torch.randn(20, 100), relevance
topk = S.topk(10, dim=1).indices
image_labels = torch.randint(0, 2, (20, 6)).bool()
caption_labels = image_labels.repeat_interleave(5, dim=0)
uncertainty = torch.rand(20)
positive_scores, negative_scores = torch.randn(50), torch.randn(50)
""",
    # the COCO 5K-test protocol on a few of its images (eccv-caption ships the ids and positive sets)
    "coco": """
import torch
from pcmr.metrics import coco_5k_test_ids
all_image_ids, all_caption_ids = coco_5k_test_ids()
image_ids = list(all_image_ids[:10]); caption_ids = list(all_caption_ids[:50])
S_coco = torch.randn(10, 50)
""",
    # a model, a vocabulary and one batch for the model snippets
    "model": """
import pathlib
import torch
import pcmr
from pcmr.data import Vocabulary, load_dataset
from pcmr.data.batching import caption_loader, image_loader
from pcmr.models import create_model
split = load_dataset("shapes", "train", num_train=8, cache=False)
vocab = Vocabulary.from_split(split)
vocab_dict = vocab.to_dict()
batch = {**next(iter(image_loader(split, 4))), **next(iter(caption_loader(split, vocab, 4)))}
pixels, ids, lengths = batch["images"], batch["captions"], batch["caption_lengths"]
words = vocab.words
model = create_model("pcme", vocab_size=len(vocab), text_encoder={"word_dim": 300})   # GloVe 300-d
pathlib.Path("glove.840B.300d.txt").write_text("red " + " ".join(["0.1"] * 300) + "\\n")
pathlib.Path("configs").mkdir(exist_ok=True)
pathlib.Path("configs/my_model.yaml").write_text("embed_dim: 32\\nimage_head: {kind: pcme}\\n")
""",
    # the trained demo run, its test split, and query inputs for the search snippets
    "search": """
import torch
import pcmr
from PIL import Image
from pcmr import Gaussian
from pcmr.data import load_dataset
model = pcmr.load("runs/demo-tiny")
test_split = load_dataset("shapes", "test", num_test=20, cache=False)
Image.new("RGB", (64, 64), "red").save("query.png")
query_gaussian = pcmr.load("runs/demo-tiny").encode_text(["a red circle"])
new_gaussians = Gaussian(torch.randn(3, model.embed_dim), torch.randn(3, model.embed_dim) - 3)
new_ids = ["new-0", "new-1", "new-2"]
""",
}

# run in the child: execute each block with its setups; a failure prints FILE:LINE and the traceback
RUNNER = r"""
import json, sys, traceback
blocks, setups = json.load(sys.stdin)
for block in blocks:
    namespace = {"__name__": "__main__"}
    try:
        for name in block["setups"]:
            exec(compile(setups[name], f"<snippet-setup {name}>", "exec"), namespace)
        code = "\n" * block["line"] + block["code"]  # tracebacks show the Markdown line numbers
        exec(compile(code, block["file"], "exec"), namespace)
    except BaseException:
        print(f"SNIPPET FAILED: {block['file']}:{block['line']}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def extract_blocks(path: Path) -> list[dict]:
    """The ```python blocks of ``path``: ``{"file", "line" (the fence line), "code", "setups"}``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            setups: list[str] = []
            previous = index - 1
            while previous >= 0 and not lines[previous].strip():
                previous -= 1
            match = SETUP_COMMENT.match(lines[previous].strip()) if previous >= 0 else None
            if match:
                setups = [name.strip() for name in match.group(1).split(",") if name.strip()]
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            blocks.append({"file": str(path.relative_to(ROOT)), "line": index + 1,
                           "code": "\n".join(lines[index + 1:end]) + "\n", "setups": setups})
            index = end
        index += 1
    return blocks


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """``runs/demo-tiny``: pcme trained for 2 short epochs on a small shapes set, then evaluated."""
    from pcmr.cli import main

    out = tmp_path_factory.mktemp("docs-runs")
    data = "data.options=" + json.dumps(SHAPES_TINY)
    argv = ["train", "pcme", "--out", str(out), "--name", "demo-tiny", "--set", data, "--set", "data.batch_size=20",
            "--set", "train.epochs=2", "--set", "model.embed_dim=8",
            "--set", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
            "--set", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
            "--set", "eval.similarities=[cosine, match_prob]", "--set", "eval.rerankers=[nns]"]
    assert main(argv) == 0
    assert main(["evaluate", str(out / "demo-tiny")]) == 0
    return out / "demo-tiny"


def test_every_block_names_known_setups():
    for path in DOC_FILES:
        for block in extract_blocks(path):
            unknown = [name for name in block["setups"] if name not in SETUPS]
            assert not unknown, f"{block['file']}:{block['line']}: unknown snippet setup(s) {unknown}; known: {list(SETUPS)}"


@pytest.mark.parametrize("path", [p for p in DOC_FILES if extract_blocks(p)], ids=lambda p: p.name)
def test_documented_python_snippets_run(path, demo_run, tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "demo-tiny").symlink_to(demo_run, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    blocks = extract_blocks(path)
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps([blocks, SETUPS]), text=True,
                            capture_output=True, cwd=tmp_path, env=env, timeout=600)
    if result.returncode != 0:
        where = re.search(r"SNIPPET FAILED: (\S+)", result.stderr)
        pytest.fail(f"a Python snippet of {where.group(1) if where else path.name} failed:\n{result.stderr[-4000:]}",
                    pytrace=False)
