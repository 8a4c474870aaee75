"""The README's set-up section: an install-only command, and every extra that `make` installs (and
every other extra of pyproject.toml) named with what it is for."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text[text.index("## Set-up"):text.index("## The demo")]


def test_readme_names_the_install_only_target_and_the_makefile_has_it():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^install:", makefile, re.MULTILINE)
    assert "make install" in _setup_section()


def test_readme_lists_every_extra_with_its_purpose():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    installed = re.search(r"^EXTRAS \?= (.+)$", makefile, re.MULTILINE).group(1).split(",")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras_table = pyproject[pyproject.index("[project.optional-dependencies]"):]
    extras_table = extras_table[:extras_table.index("\n[", 1)]
    declared = re.findall(r"^([a-z]+) = \[", extras_table, re.MULTILINE)
    section = _setup_section()
    assert f"`{','.join(installed)}`" in section  # the list `make` installs, as the Makefile has it
    rows = dict(re.findall(r"^\| `([a-z]+)` \| (.+) \|$", section, re.MULTILINE))
    assert set(rows) == set(declared), (sorted(set(declared) - set(rows)), sorted(set(rows) - set(declared)))
    assert all(len(purpose.split()) >= 3 for purpose in rows.values())
