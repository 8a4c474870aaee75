"""Results quoted in the docs are generated from the committed result files, and the repository's
docs agree with them (the check ``python tools/results_docs.py --check`` runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pcmr.study.doc_blocks import BlockError, check, render

ROOT = Path(__file__).resolve().parents[2]

RESULTS = """run,recipe,variant,seed,similarity,rerank,relevance,rsum,t2i_r_precision
a,pcme,exact,0,match_prob,nns,exact,170.0,60.5
b,pcme,exact,1,match_prob,nns,exact,174.5,61.0
c,pcme,exact,1,match_prob,nns,source,20.0,
"""
TABLES = """# study: every recipe

## Relevance: exact

| recipe | rsum |
|---|---:|
| pcme | 172.25 |

## Relevance: source

| recipe | rsum |
|---|---:|
| pcme | 20.00 |

Totals: holds 1, reversed 0
"""


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "results.csv").write_text(RESULTS)
    (tmp_path / "recipes.md").write_text(TABLES)
    return tmp_path


def test_blocks_render_from_the_files(root: Path) -> None:
    text = ('rsum <!-- results value="results.csv" where="recipe=pcme,relevance=exact" metric="rsum" -->0'
            '<!-- /results --> over <!-- results value="results.csv" where="relevance=exact" stat="count" -->?'
            '<!-- /results --> seeds (<!-- results value="results.csv" where="relevance=exact" metric="rsum" '
            'stat="range" digits="0" -->x<!-- /results -->)\n'
            '<!-- results table="recipes.md" heading="Relevance: source" -->\nold\n<!-- /results -->\n'
            '<!-- results line="recipes.md" prefix="Totals:" -->old<!-- /results -->\n')
    out = render(text, root)
    assert "rsum <!-- results" in out and "-->172.2<!-- /results -->" in out
    assert '-->2<!-- /results --> seeds' in out and "-->170-174<!-- /results -->" in out  # 174.5 rounds to even
    assert "-->\n\n| recipe | rsum |\n|---|---:|\n| pcme | 20.00 |\n\n<!-- /results -->" in out
    assert "-->Totals: holds 1, reversed 0<!-- /results -->" in out
    assert render(out, root) == out  # rendering is idempotent
    claims = "| claim | condition | CI |\n|---|---|---|\n| c1 | variant=a, relevance=b | [+1, +2] |\n"
    (root / "claims.md").write_text(claims)
    cell = render('<!-- results cell="claims.md" row="claim=c1;condition=variant=a, relevance=b" column="CI" -->'
                  '?<!-- /results -->', root)
    assert cell.endswith("-->[+1, +2]<!-- /results -->")
    runs = render('<!-- results value="results.csv" stat="runs" -->?<!-- /results -->', root)
    assert runs.endswith("-->3<!-- /results -->")  # distinct runs a, b, c


def test_check_names_a_stale_block(root: Path) -> None:
    doc = root / "doc.md"
    doc.write_text('x <!-- results value="results.csv" where="relevance=exact" metric="rsum" -->171.0<!-- /results -->\n')
    (stale,) = check([doc], root)
    assert "doc.md:1" in stale and "172.2" in stale
    doc.write_text(render(doc.read_text(), root))
    assert check([doc], root) == []


ANSWER = ('<!-- results answer="claims.md" claim="{claim}" holds="sigma rises" reversed="sigma falls" '
          'equal="sigma stays" -->?<!-- /results -->')
CLAIMS = """| claim | n | mean a-b | CI | verdict | Holm | cells |
|---|---:|---:|---|---|---|---|
| up | 18 | +0.20 | [+0.12, +0.28] | holds | holds | a: holds (+0.2); b: holds (+0.2) |
| down | 18 | -0.45 | [-0.52, -0.38] | reversed |  |  |
| flat | 5 | +0.01 | [-0.03, +0.05] | equal | equal |  |
| primary | 18 | +0.20 | [+0.01, +0.39] | holds | inconclusive |  |
| gated | 3 | +0.20 | [-0.20, +0.59] | not learned | not learned | a: not learned (+0.1) |
"""


@pytest.mark.parametrize("claim, lead, detail", [
    ("up", "**Yes: sigma rises**", "(verdict `holds`; mean a - b +0.20 [+0.12, +0.28]; 18 seeds; cells: a: holds"),
    ("down", "**No, the opposite: sigma falls**", "(verdict `reversed`; mean a - b -0.45 [-0.52, -0.38]; 18 seeds)"),
    ("flat", "**No: sigma stays**", "(verdict `equal`; mean a - b +0.01"),
    ("primary", "**Not decided: its interval allows both answers**",
     "(verdict `holds`, after Holm's correction `inconclusive`;"),
    ("gated", "**Not judged: a model it reads did not pass the skill gate**", "(verdict `not learned`;"),
])
def test_an_answer_block_says_the_verdict_in_words(root: Path, claim: str, lead: str, detail: str) -> None:
    """``answer``: the claim's verdict (after Holm where given) picks the phrase; the numbers follow."""
    (root / "claims.md").write_text(CLAIMS)
    out = render(ANSWER.format(claim=claim), root)
    body = out.split("-->", 1)[1].rsplit("<!--", 1)[0]
    assert body.startswith(lead + " " + detail), body
    with pytest.raises(BlockError, match="no row of claim 'other'"):
        render(ANSWER.format(claim="other"), root, "doc.md")
    with pytest.raises(BlockError, match="needs claim="):
        render('<!-- results answer="claims.md" claim="up" -->?<!-- /results -->', root, "doc.md")


BY_PAPER = """# {study}: claims by paper

| paper | judged | decided | inconclusive | other | not judged | verdicts | not judged, why | not learned |
|---|---:|---:|---:|---:|---:|---|---|---|
{rows}
"""


def test_a_papers_block_adds_up_each_papers_claims_over_the_studies(root: Path) -> None:
    (root / "a.md").write_text(BY_PAPER.format(study="uncertainty", rows=(
        "| PCME | 12 | 5 | 4 | 3 | 14 | ... | ... | - |")))
    (root / "b.md").write_text(BY_PAPER.format(study="papers", rows=(
        "| HAL/RGM | 12 | 7 | 3 | 2 | 8 | ... | ... | - |\n| PCME | 6 | 2 | 4 | 0 | 9 | ... | ... | - |\n"
        "| CalibPE | 0 | 0 | 0 | 0 | 2 | - | ... | - |")))
    out = render('<!-- results papers="a.md, b.md" -->?<!-- /results -->', root)
    table = out.split("-->", 1)[1].rsplit("<!--", 1)[0].strip().splitlines()
    assert table == ["| paper | judged | decided | inconclusive | other | not judged | studies |",
                     "|---|---:|---:|---:|---:|---:|---|",
                     "| PCME | 18 | 7 | 8 | 3 | 23 | uncertainty, papers |",
                     "| HAL/RGM | 12 | 7 | 3 | 2 | 8 | papers |",
                     "| CalibPE | 0 | 0 | 0 | 0 | 2 | papers |"]
    (root / "old.md").write_text("# x: claims by paper\n\n| paper | claims | verdicts |\n|---|---:|---|\n| PCME | 3 | - |\n")
    with pytest.raises(BlockError, match="old.md has no table with the columns paper, judged"):
        render('<!-- results papers="old.md" -->?<!-- /results -->', root, "doc.md")


@pytest.mark.parametrize("block, message", [
    ('<!-- results value="missing.csv" metric="rsum" -->x<!-- /results -->', "not found"),
    ('<!-- results value="results.csv" metric="nope" -->x<!-- /results -->', "no column 'nope'"),
    ('<!-- results value="results.csv" where="recipe=other" metric="rsum" -->x<!-- /results -->', "no row matches"),
    ('<!-- results table="recipes.md" heading="Nowhere" -->x<!-- /results -->', "no heading"),
    ('<!-- results table="recipes.md" line="recipes.md" -->x<!-- /results -->', "exactly one of"),
    ('<!-- results value="results.csv" metric="rsum" stat="median" -->x<!-- /results -->', "stat must be"),
    ('<!-- results cell="recipes.md" row="recipe=other" column="rsum" -->x<!-- /results -->', "no table row"),
])
def test_bad_blocks_name_the_file_and_line(root: Path, block: str, message: str) -> None:
    with pytest.raises(BlockError, match=message) as info:
        render("intro\n" + block, root, "doc.md")
    assert "doc.md:2" in str(info.value)


def test_the_repository_docs_agree_with_the_committed_results() -> None:
    spec = importlib.util.spec_from_file_location("results_docs", ROOT / "tools" / "results_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = check(module.documents(ROOT), ROOT)
    assert not stale, "run `python tools/results_docs.py`: " + "; ".join(stale)
    quoting = [p for p in module.documents(ROOT) if "<!-- results " in p.read_text(encoding="utf-8")]
    assert ROOT / "README.md" in quoting and ROOT / "docs" / "study.md" in quoting
