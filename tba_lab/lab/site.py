"""``make site`` (``tba-lab course site``): the course as a static website, built offline.

:func:`build_site` runs the notebooks with :func:`~tba_lab.lab.reproduce.reproduce` into
``executed/`` and builds ``html/`` with mkdocs + mkdocs-jupyter from ``src/`` (README.md as
``index.md``, the notebooks, ``docs/``; links rewritten by :func:`rewrite_links`). Nothing is
downloaded, at build time or when a page is viewed: no web fonts, require.js or MathJax, and
ipywidgets outputs show as a line of text. Open ``html/index.html``, or serve it
(``python -m http.server -d runs/site/html``).
"""
from __future__ import annotations

import datetime
import os
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tba_lab.lab.reproduce import NOTEBOOK_DIR, find_notebooks, relinked, reproduce, write_report
from tba_lab.paths import REPO_DIR

#: Seconds of each notebook's full run on the 2-core development machine (README.md, "The
#: course" table: ``tba-lab reproduce``, seed 0, 2026-12-06/07).
FULL_SECONDS = {"01": 140, "02": 31, "03": 20, "04": 268, "05": 138, "06": 166, "07": 216,
                "08": 570, "09": 268, "10": 107}
#: A notebook whose full run takes longer than this (seconds) runs in SMOKE by default.
FULL_MAX_SECONDS = 180
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")       # [text](target), ![alt](target)
_EXTERNAL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")     # https:, data:, mailto:
_FENCE = re.compile(r"(^```.*?^```[^\n]*$)", re.M | re.S)  # fenced code: links left alone
_WIDGET = "application/vnd.jupyter.widget-view+json"
# nbconvert's loaders in a notebook page: MathJax (its URL is empty here) and mermaid.js (a CDN
# import, run only on a page with a mermaid diagram; the course has none): both removed
_CDN_SCRIPTS = re.compile(r'<script src=""> </script>|<script type="module">'
                          r'(?:(?!</script>).)*?cdnjs\.cloudflare\.com.*?</script>', re.S)


def rewrite_links(text: str, page: str, site_files: set[str], html: bool = False) -> str:
    """Markdown ``text`` of the repository file ``page`` with its relative links fixed for the site.

    ``page`` and ``site_files`` (every file of the site) are relative to the repository root. A
    link to a site file is kept (README.md: ``index.md``), one to a folder goes to its README.md,
    index.md, report.md or only page, any other becomes its plain text; with ``html=True``
    (notebooks) a page's link becomes its URL (``../docs/results/index.html#x``). External
    links, anchors and fenced code are left as they are.
    """
    base = posixpath.dirname(page)

    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        path, _, anchor = target.partition("#")
        if not path or _EXTERNAL.match(path):  # #anchor, or external
            return m.group(0)
        found = _site_file(posixpath.normpath(posixpath.join(base, path)), site_files)
        if found is None:
            return label
        rel = posixpath.relpath("index.md" if found == "README.md" else found, base or ".")
        return f"{bang}[{label}]({_url(rel) if html else rel}{'#' + anchor if anchor else ''})"

    parts = _FENCE.split(text)
    return "".join(p if i % 2 else _LINK.sub(fix, p) for i, p in enumerate(parts))


def _site_file(path: str, site_files: set[str]) -> str | None:
    """``path`` if the site has it; for a folder, its README.md, index.md, report.md or only page."""
    if path in site_files:
        return path
    pages = sorted(f for f in site_files if posixpath.dirname(f) == path and f.endswith(".md"))
    for name in ("README.md", "index.md", "report.md"):
        if f"{path}/{name}" in pages:
            return f"{path}/{name}"
    return pages[0] if len(pages) == 1 else None


def _url(path: str) -> str:
    """A page's URL on the site (``use_directory_urls: false``): README.md and index.md ->
    index.html, other .md and .ipynb -> .html; any other file keeps its name."""
    return re.sub(r"\.(md|ipynb)$", ".html", re.sub(r"(^|/)README\.md$", r"\1index.md", path))


def _prepare_notebook(src: Path, dst: Path, page: str, site_files: set[str], note: str) -> None:
    """Copy an executed notebook for the site: ``note`` as its first cell, links rewritten, widget
    outputs as text (their renderer would come from a CDN) and no widget state."""
    import nbformat

    nb = relinked(src, lambda text: rewrite_links(text, page, site_files, html=True))
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if _WIDGET in out.get("data", {}):
                out["data"] = {"text/plain": "(an interactive ipywidgets control: it works in "
                                             "JupyterLab, `make lab`, not on this static page)"}
    nb.metadata.pop("widgets", None)
    first = nbformat.v4.new_markdown_cell(note)
    if nb.nbformat_minor < 5:  # cell ids came with nbformat 4.5
        first.pop("id")
    nb.cells.insert(0, first)
    nbformat.write(nb, dst)


def _note(name: str, smoke: bool, seed: int, seconds: float) -> str:
    """The line at the top of notebook ``name``'s page saying how it was executed."""
    how = (f": the full run (`SMOKE = False`), seed {seed}, {seconds:.0f} s. Run it" if not smoke
           else f" with `SMOKE = True`, seed {seed}: a tiny configuration that checks the notebook "
                f"runs, so the numbers are not the lesson's. The full run takes about "
                f"{FULL_SECONDS.get(name[:2], '?')} s on 2 cores: run it")
    return (f"> **Executed for this site** on {datetime.date.today().isoformat()}{how} yourself "
            "with `make lab`. The exercise cells show their worked solutions; `make lab` opens "
            "copies without them.")


def _mkdocs_yml(stems: list[str]) -> str:
    """The site's mkdocs.yml: material without web fonts, no directory URLs (the site opens from
    file:// too), the notebooks shown as executed, no require.js."""
    import yaml

    nav = [{"Home": "index.md"}, {"Course": [f"notebooks/{s}.ipynb" for s in stems]},
           {"Results": "docs/results/README.md"}, {"Usage": "docs/usage.md"},
           {"Design": "docs/design.md"}]
    jupyter = {"execute": False, "include_source": True, "include": ["*.ipynb"],
               "include_requirejs": False, "cache": False}
    cfg = {"site_name": "tba-lab course", "docs_dir": "src", "site_dir": "html",
           "use_directory_urls": False, "nav": nav,
           "theme": {"name": "material", "font": False, "features": ["navigation.footer"]},
           "plugins": ["search", {"mkdocs-jupyter": jupyter}],
           "validation": {"links": {"not_found": "warn", "unrecognized_links": "warn",
                                          "anchors": "warn"}}}
    # heading ids as GitHub makes them ("m = 1" -> "m--1"), which the repository's links use;
    # superfences: code blocks inside list items, as GitHub shows them
    return yaml.safe_dump(cfg, sort_keys=False) + (
        "markdown_extensions:\n- toc:\n    slugify: !!python/object/apply:pymdownx.slugs.slugify "
        "{kwds: {case: lower}}\n- pymdownx.superfences\n")


def broken_links(html_dir: str | Path) -> list[str]:
    """``"page.html -> target"`` for each local ``href``/``src`` of the built site whose file, or
    the element of whose ``#anchor``, is missing."""
    html_dir, broken = Path(html_dir), []
    for page in sorted(html_dir.rglob("*.html")):
        for ref in re.findall(r'\b(?:href|src)="([^"]*)"', page.read_text(errors="replace")):
            path, _, anchor = ref.split("?")[0].partition("#")
            if not path or _EXTERNAL.match(path):
                continue  # same page, or external
            target = html_dir / path.lstrip("/") if path.startswith("/") else page.parent / path
            if not target.exists() or (anchor and target.suffix == ".html"
                                       and f'id="{anchor}"' not in target.read_text(errors="replace")):
                broken.append(f"{page.relative_to(html_dir)} -> {ref}")
    return broken


def build_site(out_dir: str | Path, smoke: bool = False, only: list[str] | None = None,
               seed: int = 0) -> Path:
    """Execute the notebooks (``only``: names starting with one of these) into
    ``out_dir/executed`` and build the site in ``out_dir/html``; return ``html/index.html``.

    A notebook runs in full when :data:`FULL_SECONDS` says it takes at most
    :data:`FULL_MAX_SECONDS`, else (or with ``smoke``) in SMOKE; about 14 minutes on 2 cores.
    Raises RuntimeError (a notebook or mkdocs failed), and ``reproduce``'s errors.
    """
    out = Path(out_dir).resolve()
    executed, src = out / "executed", out / "src"
    stems = [b.stem for b in find_notebooks(NOTEBOOK_DIR, only)]
    runs_smoke = {s: smoke or FULL_SECONDS.get(s[:2], 0) > FULL_MAX_SECONDS for s in stems}
    results = []
    for run_smoke in (False, True):
        group = [s for s in stems if runs_smoke[s] == run_smoke]
        if group:
            results += reproduce(executed, smoke=run_smoke, seed=seed, only=group)
    results.sort(key=lambda r: r["notebook"])
    write_report(results, executed, smoke=all(runs_smoke.values()))  # both calls in one report
    failed = [r["notebook"] for r in results if not r["ok"]]
    if failed:
        raise RuntimeError(f"{len(failed)} notebook(s) failed: {', '.join(failed)}; no site "
                           f"built; the errors are in {executed / 'report.md'}")

    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(REPO_DIR / "docs", src / "docs")
    site_files = {"README.md", *(f"notebooks/{s}.ipynb" for s in stems),
                  *(p.relative_to(src).as_posix() for p in (src / "docs").rglob("*") if p.is_file())}
    shutil.copy2(REPO_DIR / "README.md", src / "index.md")  # in the same folder: same links
    for p in src.rglob("*.md"):
        p.write_text(rewrite_links(p.read_text(), p.relative_to(src).as_posix(), site_files))
    (src / "notebooks").mkdir()
    for r in results:
        _prepare_notebook(executed / r["notebook"], src / "notebooks" / r["notebook"],
                          f"notebooks/{r['notebook']}", site_files,
                          _note(r["notebook"], r["parameters"]["SMOKE"], seed, r["seconds"]))

    (out / "mkdocs.yml").write_text(_mkdocs_yml(stems))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--clean", "-f",
                           str(out / "mkdocs.yml")], capture_output=True, text=True, cwd=out,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"mkdocs build failed ({proc.returncode}); its log: {out / 'build.log'}")
    for page in (out / "html" / "notebooks").glob("*.html"):
        page.write_text(_CDN_SCRIPTS.sub("", page.read_text()))
    problems = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    problems += [f"broken link: {b}" for b in broken_links(out / "html")]
    for line in problems:
        print(line, file=sys.stderr)
    return out / "html" / "index.html"
