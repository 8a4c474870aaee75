"""README.md and docs/study.md state no verdict that the committed claims files do not hold.

Verdicts and directions of the uncertainty study are quoted only through generated results blocks
(``pcmr.study.doc_blocks``; ``tools/results_docs.py --check`` keeps them equal to the files); the free
prose of its sections names no verdict and no direction; sentences of earlier versions that the
results do not support are gone; and the one free sentence of the papers study that states a verdict
is checked here against its claims file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- results [^>]*?-->.*?<!-- /results -->", re.S)
#: sentences of earlier versions that the committed results do not hold
RETIRED = ("abstaining on sigma helps", "confirms these one-seed findings", "inside 3 hours",
           "depend only on its config and its thread count.", "five seeds, 30 epochs", "beats its mu-only twin on",
           "runs the\nother way", "does rise with the")
VERDICT_WORDS = re.compile(r"\b(holds|reversed|inconclusive|unstable|no signal|helps|beats|confirms|"
                           r"rises|falls|runs against|better than|worse than)\b")


def _prose(path: str, start: str, end: str) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    section = text[text.index(start):text.index(end, text.index(start))]
    return BLOCK.sub("", section)


@pytest.mark.parametrize("path", ["README.md", "docs/study.md"])
def test_no_retired_sentence(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    for sentence in RETIRED:
        assert sentence not in text, (path, sentence)


@pytest.mark.parametrize(("path", "start", "end"), [
    ("README.md", "`studies/uncertainty.yaml` asks", "The papers study's PCME part"),
    ("docs/study.md", "## The uncertainty study", "## Seeing what the uncertainty learned"),
])
def test_uncertainty_prose_names_no_verdict_outside_generated_blocks(path: str, start: str, end: str) -> None:
    prose = _prose(path, start, end)
    found = sorted({m.group(0) for m in VERDICT_WORDS.finditer(prose)})
    assert found == [], f"{path}: verdict or direction words outside results blocks: {found}"


def test_uncertainty_docs_say_the_committed_results_are_the_previous_designs() -> None:
    for path in ("README.md", "docs/study.md"):
        assert "previous design" in (ROOT / path).read_text(encoding="utf-8"), path
    # and the results blocks of that section read the previous design's files
    section = (ROOT / "docs/study.md").read_text(encoding="utf-8")
    section = section[section.index("### Results of the uncertainty study (previous design)"):]
    section = section[:section.index("## Seeing what the uncertainty learned")]
    sources = set(re.findall(r'<!-- results \w+="([^"]+)"', section))
    assert sources and all(s.startswith("docs/uncertainty_results/") for s in sources)


def _rows(claims_md: str) -> list[dict[str, str]]:
    lines = [line for line in claims_md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_papers_sentence_on_caption_uncertainty_matches_its_claims_file() -> None:
    """docs/study.md: "every caption-side uncertainty claim of both PCME entries reads `no signal`"."""
    assert "caption-side uncertainty claim of both PCME entries reads `no signal`" in \
        (ROOT / "docs/study.md").read_text(encoding="utf-8")
    rows = _rows((ROOT / "docs/study_results/claims.md").read_text(encoding="utf-8"))
    caption = [r for r in rows if r["claim"].startswith(("pcme-", "pcme-small-init-"))
               and r["statement"].startswith("caption uncertainty")]
    assert len(caption) >= 4 and {r["verdict"] for r in caption} == {"no signal"}
