"""``make site``: the course as a static website (:mod:`tba_lab.lab.site`).

* (fast) the README's and the notebooks' links rewritten for the site;
* (slow) the site built from notebooks 01-03 in SMOKE: the front page, the notebook pages and
  the results page exist, the notebook pages carry their executed figures, no page loads
  anything from the network, mkdocs warns of no broken link and no local link is broken;
* (slow) the site in a real browser (Debian's chromium through Playwright, as in
  tests/test_browser.py), served by ``http.server`` on a free port, every request outside it
  blocked: the front page, a click to a notebook, its figure decoded, "Next" to the next notebook.
"""
from __future__ import annotations

import functools
import http.server
import re
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tba_lab.lab.site import broken_links, build_site, rewrite_links
from tests.test_browser import CHROMIUM_ARGS, _chromium_or_skip

ONLY = ["01", "02", "03"]
NOTEBOOKS = ["01_on_policy_grpo", "02_trajectory_balance", "03_replay_buffer"]
SITE_FILES = {"README.md", "notebooks/01_x.ipynb", "docs/usage.md", "docs/results/README.md",
              "docs/results/beta/report.md", "docs/results/beta/beta.png",
              "docs/results/race/race.md", "docs/results/race/claims.md"}


def test_rewrite_links_front_page():
    text = ("[01](notebooks/01_x.ipynb) [u](docs/usage.md#a) [`tba_lab/minimal.py`](tba_lab/minimal.py)"
            " [arXiv](https://arxiv.org/abs/1) [c](#the-course) [r](docs/results/README.md#the-race)\n"
            "```\n[kept](tba_lab/minimal.py)\n```\n[cfg](docs/configs/one_gpu.yaml)\n")
    assert rewrite_links(text, "README.md", SITE_FILES) == (
        "[01](notebooks/01_x.ipynb) [u](docs/usage.md#a) `tba_lab/minimal.py`"
        " [arXiv](https://arxiv.org/abs/1) [c](#the-course) [r](docs/results/README.md#the-race)\n"
        "```\n[kept](tba_lab/minimal.py)\n```\ncfg\n")


def test_rewrite_links_notebook_and_results_page():
    nb = "[r](../docs/results/README.md#the-race) [u](../docs/usage.md) [home](../README.md) [src](../tba_lab/trainer.py)"
    assert rewrite_links(nb, "notebooks/01_x.ipynb", SITE_FILES, html=True) == (
        "[r](../docs/results/index.html#the-race) [u](../docs/usage.html) [home](../index.html) src")
    res = "[beta](beta/) [race](race/) ![fig](beta/beta.png) [log](../log.md) [top](../../README.md)"
    assert rewrite_links(res, "docs/results/README.md", SITE_FILES) == (
        "[beta](beta/report.md) race ![fig](beta/beta.png) log [top](../../index.md)")


def test_failed_notebook_means_no_site(tmp_path, monkeypatch):
    """Full runs and SMOKE runs in two calls to ``reproduce`` (08 takes 570 s in full: SMOKE), one
    report of both; a failed notebook raises, naming it and the report, and builds nothing."""
    import tba_lab.lab.site as site

    calls = []

    def fake_reproduce(out, smoke, seed, only):
        calls.append((smoke, only))
        Path(out).mkdir(parents=True, exist_ok=True)
        return [{"notebook": f"{n}.ipynb", "ok": n.startswith("02"), "error": "boom", "seconds": 1.0,
                 "parameters": {"SMOKE": smoke}, "metrics": {}, "figures": []} for n in only]

    monkeypatch.setattr(site, "reproduce", fake_reproduce)
    with pytest.raises(RuntimeError, match=r"08_preference.ipynb.*report\.md"):
        site.build_site(tmp_path, only=["02", "08"])
    assert calls == [(False, ["02_trajectory_balance"]), (True, ["08_preference"])]
    report = (tmp_path / "executed" / "report.md").read_text()
    assert "02_trajectory_balance" in report and "08_preference" in report
    assert not (tmp_path / "html").exists() and not (tmp_path / "src").exists()


# ----------------------------------------------------------------------------------------------
# The site of notebooks 01-03 (SMOKE), built once
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    index = build_site(out, smoke=True, only=ONLY)
    assert index == out / "html" / "index.html"
    return out


class _Loads(HTMLParser):
    """What a page makes the browser fetch: script/img/iframe/source src, link href (stylesheets,
    icons, preloads: not a plain <a>), and ``url(...)``/``@import`` in inline styles."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self._style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "embed") and a.get("src"):
            self.urls.append(a["src"])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        self._style = tag == "style"

    def handle_data(self, data):
        if self._style:
            self.urls += re.findall(r"""(?:url\(|@import\s+)["']?([^"')\s;]+)""", data)


@pytest.mark.slow
def test_site_pages(site):
    html = site / "html"
    pages = [html / "index.html", html / "docs/results/index.html",
             *(html / "notebooks" / f"{n}.html" for n in NOTEBOOKS)]
    for p in pages:
        assert p.is_file(), p
    for n in NOTEBOOKS:
        text = (html / "notebooks" / f"{n}.html").read_text()
        assert re.search(r'<img[^>]+src="data:image/png;base64,', text), f"{n}: no executed figure"
        assert "Executed for this site" in text and "SMOKE = True" in text
        assert (html / "notebooks" / f"{n}.ipynb").is_file()  # include_source: the download
    remote = {}
    for p in html.rglob("*.html"):
        parser = _Loads()
        parser.feed(p.read_text())
        remote[p.name] = [u for u in parser.urls if re.match(r"(https?:)?//", u)]
    css = [f"{p.name}: {u}" for p in html.rglob("*.css")
           for u in re.findall(r"""url\(["']?((?:https?:)?//[^"')]+)""", p.read_text())]
    assert {k: v for k, v in remote.items() if v} == {} and css == []
    log = (site / "build.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("WARNING")] == []
    assert broken_links(html) == []
    assert "3/3 notebooks ran" in (site / "executed" / "report.md").read_text()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(site):
    """``site/html`` on a free port of 127.0.0.1; the server is shut down afterwards."""
    handler = functools.partial(_Quiet, directory=str(site / "html"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.slow
def test_site_in_browser(served):
    chromium = _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    outside: list[str] = []

    def only_local(route):
        url = route.request.url
        if url.startswith(served) or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1300, "height": 1000}).new_page()
            page.set_default_timeout(30_000)
            page.route("**/*", only_local)
            page.goto(served + "index.html")
            assert "tba-lab" in page.title()
            # the course table's link to notebook 01, clicked as a user would
            page.locator("article a[href='notebooks/01_on_policy_grpo.html']").first.click()
            page.wait_for_url("**/notebooks/01_on_policy_grpo.html")
            assert "Executed for this site" in page.locator("article").inner_text()
            fig = page.locator("article img[src^='data:image/png']").first
            fig.scroll_into_view_if_needed()
            page.wait_for_function("img => img.complete", arg=fig.element_handle())
            assert fig.evaluate("img => img.naturalWidth") > 0
            # the footer's "Next" link: the next notebook in the navigation
            page.locator("a.md-footer__link--next").click()
            page.wait_for_url("**/notebooks/02_trajectory_balance.html")
            assert page.locator("article img[src^='data:image/png']").count() > 0
            assert outside == [], f"the site asked the network for {outside}"
        finally:
            browser.close()
