"""Every relative link and ``#anchor`` in README.md, docs/ and the notebooks' markdown resolves.

Anchors follow GitHub's rule for headings: lower case, punctuation other than ``-`` and ``_``
dropped, spaces to ``-``, and ``-1``, ``-2`` ... appended to repeats. Headings inside code
fences are not headings.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _strip_fenced(text: str) -> list[str]:
    """The lines of ``text`` outside code fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = heading.strip().replace("`", "").replace("*", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every ``#anchor`` the headings of markdown ``text`` define."""
    seen: dict[str, int] = {}
    out = set()
    for line in _strip_fenced(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _markdown_sources(root: Path) -> list[Path]:
    """README.md, docs/**/*.md and every notebook under ``root``."""
    return ([root / "README.md"] + sorted((root / "docs").rglob("*.md"))
            + sorted((root / "notebooks").glob("*.ipynb")))


def _text_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text()


def broken_links(root: Path = ROOT) -> list[str]:
    """``"file: target (why)"`` for every relative link or anchor under ``root`` that does not
    resolve (a notebook's links are those of its markdown cells)."""
    bad = []
    for src in _markdown_sources(root):
        body = "\n".join(_strip_fenced(_text_of(src)))
        body = re.sub(r"`[^`\n]*`", "", body)  # inline code is not a link
        for m in _LINK.finditer(body):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            dest = src if not path_part else (src.parent / unquote(path_part)).resolve()
            where = f"{src.relative_to(root)}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix in (".md", ".ipynb") and anchor not in anchors(_text_of(dest)):
                bad.append(f"{where} (no heading with this anchor)")
    return bad


def test_every_relative_link_and_anchor_resolves(tmp_path):
    # The checker first, on a fake tree: good links pass, a missing file and anchor are caught.
    (tmp_path / "docs").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "docs" / "usage.md").write_text("# Usage\n## `tba-lab train`\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/usage.md#tba-lab-train) [top](#readme) `[code](nowhere.md)`\n# README\n"
        "[gone](docs/gone.md) [bad anchor](docs/usage.md#training) [web](https://x.org/y)\n")
    nb = {"cells": [{"cell_type": "markdown", "source": ["[up](../README.md#nope)"]}]}
    (tmp_path / "notebooks" / "01.ipynb").write_text(json.dumps(nb))
    assert broken_links(tmp_path) == [
        "README.md: docs/gone.md (no such file)",
        "README.md: docs/usage.md#training (no heading with this anchor)",
        "notebooks/01.ipynb: ../README.md#nope (no heading with this anchor)"]
    assert slug("`tba-lab train`") == "tba-lab-train"
    assert slug("GPUs, vLLM and several machines") == "gpus-vllm-and-several-machines"
    assert slug("**`max_replay_ratio`**: a bound") == "max_replay_ratio-a-bound"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}
    assert broken_links() == []
