"""The notebooks' text: every reference to a section names one that exists, and no notebook
numbers two sections alike.

A notebook numbers its sections in markdown headings, ``## 3. Title`` (or ``## 3 Title``), and
subsections with a letter, ``### 4a. Title``; headings inside fenced code blocks do not count.
Text refers to them as "section 3" or "Section 2 above" (this notebook), "sections 5 and 6" or
"sections 5 to 7", and across notebooks as "notebook 02, section 3", "notebook 02 (section 4b)",
"notebook 02's section 3" or "section 6 of notebook 04". Markdown and code cells (comments,
printed labels) are read; so are README.md and docs/*.md for references into a notebook.
"""
import re
from pathlib import Path

import nbformat
import pytest

from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks

REPO = NOTEBOOK_DIR.parent
STEMS = [p.stem for p in find_notebooks()]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
HEADING = re.compile(r"^#{2,4}[ \t]+(\d+[a-z]?)(?:[.)]|[ \t])", re.M)
NUM = r"\d+[a-z]?"
# "sections 5 and 6", "sections 5, 6 and 7", "sections 5 to 7", "section 4b"
SECTIONS = rf"[Ss]ections?\s+(?P<ids>{NUM}(?:(?:\s*,\s*|\s+and\s+|\s+or\s+|\s*(?:-|–|to)\s*){NUM})*)"
NOTEBOOK = r"[Nn]otebook\s+(?P<nb>\d{2})"
CROSS = [re.compile(NOTEBOOK + r"(?:'s)?\s*(?:,|\()?\s*" + SECTIONS),   # notebook 02, section 3
         re.compile(SECTIONS + r"\s+of\s+" + NOTEBOOK)]                   # section 6 of notebook 04
LOCAL = re.compile(r"(?<![`\w])" + SECTIONS)


def _ids(text: str) -> list[str]:
    """The section ids of "5 and 6", "5 to 7" (a range: 5, 6, 7), "4b"."""
    out = []
    for a, dash, b in re.findall(rf"({NUM})(?:\s*(-|–|to)\s*(?=({NUM})))?", text):
        out.append(a)
        if dash and a.isdigit() and b.isdigit():
            out.extend(str(i) for i in range(int(a) + 1, int(b)))
    return out


def sections(markdown: str) -> list[str]:
    """The section numbers of a markdown text's headings, in order (repeats kept)."""
    return HEADING.findall(FENCE.sub("", markdown))


def references(text: str, here: str | None) -> list[tuple[str | None, str]]:
    """``(notebook, section)`` for every section reference of ``text``; ``notebook`` is the
    two-digit number, ``here`` for a reference without one (None: a document that is no
    notebook, whose own sections are not checked)."""
    found, spans = [], []
    for pattern in CROSS:
        for m in pattern.finditer(text):
            found += [(m.group("nb"), i) for i in _ids(m.group("ids"))]
            spans.append(m.span())
    for m in LOCAL.finditer(text):
        if here is not None and not any(a <= m.start() < b for a, b in spans):
            found += [(here, i) for i in _ids(m.group("ids"))]
    return found


def _notebook_texts() -> dict[str, tuple[str, list[str]]]:
    """stem -> (all cell text, markdown section numbers)."""
    out = {}
    for stem in STEMS:
        nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
        markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        out[stem] = ("\n\n".join(c.source for c in nb.cells), sections(markdown))
    return out


TEXTS = _notebook_texts()
BY_NUMBER = {stem[:2]: stem for stem in STEMS}


def test_the_parsers_find_every_form():
    md = "## 1. One\ntext\n### 4a. Sub\n## 6 Six\n```\n## 9. in a code block\n```\n### Exercise 1.1: x\n"
    assert sections(md) == ["1", "4a", "6"]
    text = ("as notebook 02, section 3 shows; notebook 02 (section 4b); notebook 03's section 2; "
            "section 6 of notebook 04; Section 2 above; sections 5 and 6; sections 5 to 7; "
            "the `async` section; sections 1, 2 and 4a")
    assert references(text, "07") == [
        ("02", "3"), ("02", "4b"), ("03", "2"), ("04", "6"), ("07", "2"), ("07", "5"),
        ("07", "6"), ("07", "5"), ("07", "6"), ("07", "7"), ("07", "1"), ("07", "2"), ("07", "4a")]
    assert references("see notebook 05, section 2 and section 9", None) == [("05", "2")]


@pytest.mark.parametrize("stem", STEMS)
def test_no_notebook_repeats_a_section_number(stem):
    numbers = TEXTS[stem][1]
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    assert not repeated, f"{stem}: sections numbered {repeated} more than once (headings: {numbers})"


@pytest.mark.parametrize("stem", STEMS)
def test_every_section_reference_names_a_section_that_exists(stem):
    text, _ = TEXTS[stem]
    missing = _missing(references(text, stem[:2]))
    assert not missing, f"{stem} refers to sections that do not exist: {missing}"


def test_the_docs_refer_only_to_sections_that_exist():
    missing = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        if path.name == "log.md":
            continue  # the log records history: a section it names may have moved since
        bad = _missing(references(path.read_text(), None))
        if bad:
            missing[str(path.relative_to(REPO))] = bad
    assert not missing, f"references to notebook sections that do not exist: {missing}"


def _missing(refs: list[tuple[str, str]]) -> list[str]:
    out = []
    for nb, section in refs:
        stem = BY_NUMBER.get(nb)
        if stem is None:
            out.append(f"notebook {nb} (no such notebook)")
        elif section not in TEXTS[stem][1]:
            out.append(f"notebook {nb}, section {section} (its sections: {TEXTS[stem][1]})")
    return sorted(set(out))
