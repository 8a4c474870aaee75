"""Regenerate the results quoted in README.md and docs/*.md from the committed result files.

    python tools/results_docs.py            # rewrite every results block
    python tools/results_docs.py --check    # exit 1 and list the blocks that differ

The blocks and their syntax: ``pcmr.study.doc_blocks``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pcmr.study.doc_blocks import check, render

ROOT = Path(__file__).resolve().parents[1]


def documents(root: Path = ROOT) -> list[Path]:
    """The Markdown files that may quote results: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report blocks that differ (exit 1)")
    args = parser.parse_args(argv)
    if args.check:
        stale = check(documents(), ROOT)
        for line in stale:
            print(line, file=sys.stderr)
        return 1 if stale else 0
    for path in documents():
        text = path.read_text(encoding="utf-8")
        fresh = render(text, ROOT, str(path.relative_to(ROOT)))
        if fresh != text:
            path.write_text(fresh, encoding="utf-8")
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
