"""The course in a real browser, as a student uses it: JupyterLab from this virtual environment,
driven by headless Chromium through Playwright.

* notebook 02 runs top to bottom ("Run All Cells" from the Run menu) with SMOKE settings, no cell
  shows an error and every figure is rendered;
* notebook 06's explorer renders its controls (no "Error displaying widget", no stuck "Loading
  widget..."), "Run" starts a short run whose plot updates while it runs, "Stop" ends it within
  seconds and no searcher process is left; interrupting the kernel during a run leaves no process
  behind either, and "Run" works again afterwards;
* a second JupyterLab on the same machine (another port, token and runtime directory) does not
  collide with the first.

Everything happens in a temporary copy of ``notebooks/`` with fresh Jupyter runtime, config and
data directories: nothing in the repository is written except the screenshots, which go to
``runs/test-artifacts/browser/`` (``$TBA_LAB_TEST_ARTIFACTS`` overrides it; ``runs/`` is
git-ignored). The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or
``$TBA_LAB_CHROMIUM``), which ``.ci/run`` installs when it is missing; Playwright never downloads
one. The tests are skipped, saying so, only when that browser is not installed.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from tba_lab.paths import REPO_DIR

CHROMIUM = os.environ.get("TBA_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("TBA_LAB_TEST_ARTIFACTS", REPO_DIR / "runs" / "test-artifacts")) / "browser"
EXPLORER_BUDGET = 60  # seconds: the explorer's budget slider (each run here is ended by Stop)
STOP_BOUND = 30       # seconds from "Stop" to the run's end (one update, the final evaluation)


def _chromium_or_skip() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"chromium cannot be installed here: {CHROMIUM} is missing "
                    "(.ci/run installs Debian's `chromium` package with apt-get; it failed or was not run)")
    return CHROMIUM


# ----------------------------------------------------------------------------------------------
# A JupyterLab server of its own: free port, token, runtime/config/data directories in tmp
# ----------------------------------------------------------------------------------------------


class LabServer:
    """``python -m jupyter lab`` from this interpreter's environment on ``root``, in its own
    process group, with Jupyter's runtime, config, data and IPython directories under ``home``."""

    def __init__(self, root: Path, home: Path):
        self.root, self.home = Path(root), Path(home)
        self.token = secrets.token_hex(24)
        self.runtime_dir = self.home / "runtime"
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log_path = self.home / "server.log"

    def start(self, timeout: float = 120.0) -> "LabServer":
        for d in ("runtime", "config/labconfig", "data", "ipython"):
            (self.home / d).mkdir(parents=True, exist_ok=True)
        # no "official Jupyter news?" toast over the notebook (it would also try the network)
        (self.home / "config/labconfig/page_config.json").write_text(json.dumps(
            {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
        # every cell in the page (JupyterLab 4 attaches off-screen cells lazily by default, so a
        # busy machine can show fewer input prompts than the notebook has code cells)
        tracker = self.home / "config/lab/user-settings/@jupyterlab/notebook-extension"
        tracker.mkdir(parents=True, exist_ok=True)
        (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.runtime_dir),
               "JUPYTER_CONFIG_DIR": str(self.home / "config"), "JUPYTER_DATA_DIR": str(self.home / "data"),
               "IPYTHONDIR": str(self.home / "ipython"), "JUPYTER_TOKEN": self.token,
               "JUPYTER_PLATFORM_DIRS": "1"}
        env.pop("JUPYTER_PATH", None)
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               "--ServerApp.port=0", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}",
               "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log()}")
            info = [json.loads(p.read_text()) for p in self.runtime_dir.glob("jpserver-*.json")
                    if p.stat().st_size]
            if info:
                self.url = info[0]["url"]
                if self.get("api/status")[0] == 200:
                    return self
            time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer within {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def get(self, path: str, token: str | None = None, method: str = "GET") -> tuple[int, object]:
        """HTTP ``method`` on ``path`` with a token: (status, its JSON or None); status 0: no answer."""
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {token or self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                body = r.read()
                is_json = "json" in r.headers.get("Content-Type", "")
                return r.status, (json.loads(body) if body and is_json else None)
        except urllib.error.HTTPError as e:
            return e.code, None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None

    def page_url(self, notebook: str) -> str:
        return f"{self.url}lab/tree/{notebook}?reset&token={self.token}"

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kernels(self) -> list[psutil.Process]:
        return [p for p in self.descendants() if "ipykernel_launcher" in " ".join(_cmdline(p))]

    def run_processes(self) -> list[str]:
        """Command lines of processes a training run started (searchers: multiprocessing spawn
        children, anything running tba_lab); the resource tracker is not one of them."""
        out = []
        for p in self.descendants():
            cmd = " ".join(_cmdline(p))
            if ("spawn_main" in cmd or "--multiprocessing-fork" in cmd or "tba_lab" in cmd) \
                    and "resource_tracker" not in cmd:
                out.append(f"pid {p.pid}: {cmd[:160]}")
        return out

    def stop(self) -> None:
        """SIGTERM to the server (it shuts its kernels down), then SIGKILL to whatever of its
        process tree is left, kernels' own process groups included."""
        if self.proc is None:
            return
        tree = self.descendants()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        for p in [*tree, psutil.Process(self.proc.pid) if self.proc.poll() is None else None]:
            if p is None:
                continue
            try:
                if p.is_running():
                    p.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        self._log.close()


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _copy_notebooks(dst: Path, budget: int = EXPLORER_BUDGET) -> Path:
    """The students' copies (``tba-lab course release``: no solutions, what ``make lab`` opens)
    in ``dst``, with SMOKE = True (and the explorer's budget) in each parameters cell, as a
    student would set it before "Run All"."""
    from tba_lab.lab.assignments import release

    dst.mkdir(parents=True)
    for path in release(dst.parent / f"{dst.name}_course"):
        shutil.copy2(path, dst / path.name)
    for path in dst.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        src, n = re.subn(r"^SMOKE = \w+", "SMOKE = True", cell.source, flags=re.M)
        assert n == 1, f"{path.name}: no `SMOKE = ...` line in the parameters cell"
        cell.source = re.sub(r"^BUDGET_SECONDS = \d+", f"BUDGET_SECONDS = {budget}", src, flags=re.M)
        nbformat.write(nb, path)
    return dst


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("lab")
    server = LabServer(_copy_notebooks(home / "notebooks"), home)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    chromium = _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture
def page(browser, lab, request):
    """A fresh browser page on ``lab``; afterwards its kernels are shut down."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    try:
        yield pg
    finally:
        try:  # the page as the test left it (on a failure: what went wrong)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}-last.png"))
        except Exception:
            pass
        ctx.close()
        for s in lab.get("api/sessions")[1] or []:
            lab.get(f"api/sessions/{s['id']}", method="DELETE")


# ----------------------------------------------------------------------------------------------
# What a student does in the page
# ----------------------------------------------------------------------------------------------


def _open(page, lab: LabServer, notebook: str, timeout: float = 120) -> None:
    """Open ``notebook`` and wait until its kernel is started, connected and idle (a "Run All"
    before that finds no kernel and asks which one to start)."""
    page.goto(lab.page_url(notebook))
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-CodeCell")
    t0 = time.time()
    while time.time() - t0 < timeout:
        sessions = lab.get("api/sessions")[1] or []
        if any(s["name"] == notebook and s["kernel"]["execution_state"] == "idle"
               and s["kernel"]["connections"] > 0 for s in sessions) \
                and page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count():
            return
        time.sleep(0.5)
    pytest.fail(f"the kernel of {notebook} did not start within {timeout:.0f} s:\n{lab.log()}")


def _menu(page, menu: str, item: str) -> None:
    """Click ``menu`` in the menu bar, then its item labelled ``item``."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(rf"^\s*{menu}\s*$")).click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                 has_text=re.compile(rf"^\s*{item}\s*$")).first.click()


def _prompts(page) -> list[str]:
    return page.eval_on_selector_all(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt",
                                     "els => els.map(e => e.textContent.trim())")


def _errors(page) -> list[str]:
    """Error outputs, tracebacks on stderr, failed widgets: what a student would see as broken."""
    return page.evaluate("""() => {
        const out = [];
        for (const e of document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')) {
            const mime = e.getAttribute('data-mime-type') || '';
            const t = e.textContent || '';  // innerText skips cells out of view
            if (mime === 'application/vnd.jupyter.error' || /Traceback|\\b[A-Z]\\w*Error\\b|Error displaying widget/.test(t))
                out.push(`${mime}: ${t.slice(0, 600)}`);
        }
        return out;
    }""")


def _output_text(page) -> str:
    return "\n".join(page.locator(".jp-NotebookPanel .jp-OutputArea").all_text_contents())


def _run_all_and_wait(page, timeout: float) -> float:
    """"Run All Cells" from the Run menu; wait until every code cell has run and the kernel is
    idle. Returns the seconds it took; fails at once on a cell that raised."""
    n_code = len(_prompts(page))
    t0 = time.time()
    _menu(page, "Run", "Run All Cells")
    idle_since = None
    while time.time() - t0 < timeout:
        prompts = _prompts(page)
        done = all(re.fullmatch(r"\[\d+\]:", p) for p in prompts) and len(prompts) == n_code
        idle = page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count() > 0
        if done and idle:
            return time.time() - t0
        if idle and not any("*" in p for p in prompts):
            idle_since = idle_since or time.time()
            errors = _errors(page)
            if errors or time.time() - idle_since > 10:  # Run All stops at a cell that raised
                pytest.fail(f"Run All stopped: prompts {prompts}\nerrors: {errors}")
        else:
            idle_since = None
        time.sleep(0.5)
    pytest.fail(f"Run All did not finish in {timeout:.0f} s: prompts {_prompts(page)}")


def _figure_count(path: Path, drawn_only: bool = False) -> int:
    """Figures the notebook shows; with ``drawn_only``, those it draws itself (and saves under
    its OUTPUT_DIR), not the recorded ones it displays from ``docs/results/``."""
    nb = nbformat.read(path, as_version=4)
    return sum(c.source.count("plt.show()") + (0 if drawn_only else c.source.count("display(Image("))
               for c in nb.cells if c.cell_type == "code")


def _shot(page, name: str, locator=None) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    if locator is not None:  # in the middle of the view, with what is around it; twice, as
        for _ in range(2):   # cells coming into view take their real height and move it
            locator.evaluate("e => e.scrollIntoView({block: 'center'})")
            time.sleep(0.5)
    page.screenshot(path=str(path))
    return path


def _assert_project_kernel(lab: LabServer) -> None:
    kernels = lab.kernels()
    assert kernels, "no kernel process under the server"
    for k in kernels:  # the notebooks' `python3` kernel resolves to this environment's python
        exe = Path(_cmdline(k)[0])
        assert exe.parent == Path(sys.prefix) / "bin", f"the kernel is not this environment's: {_cmdline(k)}"


# ----------------------------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------------------------


def test_notebook_02_runs_top_to_bottom_in_the_browser(lab, page):
    """As a student first meets it: SMOKE, exercise stubs not filled in (the checkers print FAIL,
    nothing raises), Run > Run All Cells."""
    name = "02_trajectory_balance.ipynb"
    _open(page, lab, name)
    seconds = _run_all_and_wait(page, timeout=240)
    _assert_project_kernel(lab)
    assert _errors(page) == []
    assert "not implemented yet" in _output_text(page), "the exercise checkers printed nothing"
    want = _figure_count(lab.root / name)
    assert want >= 3
    imgs = page.locator(".jp-NotebookPanel .jp-RenderedImage img")
    assert imgs.count() >= want, f"{imgs.count()} figures rendered, {want} expected"
    for i in range(imgs.count()):  # decoded, not a broken image
        assert imgs.nth(i).evaluate("img => img.complete && img.naturalWidth > 100"), f"figure {i}"
    figures = sorted(p.name for p in (lab.root / "runs/course/02_trajectory_balance").glob("*.png"))
    assert len(figures) >= _figure_count(lab.root / name, drawn_only=True) >= 3, figures
    _shot(page, "02_trajectory_balance.png", imgs.last)
    print(f"notebook 02: Run All took {seconds:.0f} s, {imgs.count()} figures")


# The explorer's widgets carry CSS classes for this (``tba_lab.lab.widgets.explorer``):
# tba-explorer (the box), tba-explorer-run / -stop / -clear (buttons), -status, -plot (the image).
def _control(page, name: str):
    return page.locator(f".jp-OutputArea-output .tba-explorer-{name}")


def _status(page) -> str:
    return (_control(page, "status").text_content() or "").strip()


def _image_src(page) -> str:
    return _control(page, "plot").get_attribute("src") or ""


def _metrics_rows(lab: LabServer, run: str) -> int:
    """Trainer updates written so far by the explorer run ``run`` (its ``metrics.jsonl``)."""
    return sum(len(f.read_text().splitlines()) for f in lab.root.rglob(f"{run}/metrics.jsonl"))


def _click_run(page) -> str:
    """Press Run; returns the run's name (``run_NN``) from the status line."""
    run = _control(page, "run")
    assert run.is_enabled(), f"Run is disabled: {_status(page)}"
    run.click()
    t0 = time.time()
    while time.time() - t0 < 30:
        m = re.search(r"running\s+(run_\d+)", _status(page))
        if m:
            return m.group(1)
        if re.search(r"failed|bad setting", _status(page)):
            pytest.fail(f"Run did not start: {_status(page)}")
        time.sleep(0.2)
    pytest.fail(f"Run did not start within 30 s: {_status(page)}")


def _wait_for(what: str, cond, page, timeout: float) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return time.time() - t0
        if re.search(r"run failed", _status(page)):
            pytest.fail(f"the run failed while waiting for {what}: {_status(page)}")
        time.sleep(0.25)
    pytest.fail(f"no {what} within {timeout:.0f} s: {_status(page)}")


def _wait_run_ended(page, timeout: float) -> float:
    run = _control(page, "run")
    return _wait_for("end of the run", lambda: run.is_enabled() and not re.search(
        r"running|stopping", _status(page)), page, timeout)


def _assert_no_run_processes(lab, grace: float = 5.0) -> None:
    t0 = time.time()
    while lab.run_processes() and time.time() - t0 < grace:
        time.sleep(0.5)
    assert lab.run_processes() == [], "processes left behind by the run"


def test_notebook_06_explorer_runs_stops_and_survives_an_interrupt(lab, page):
    name = "06_explorer.ipynb"
    _open(page, lab, name)
    seconds = _run_all_and_wait(page, timeout=300)
    _assert_project_kernel(lab)
    try:  # the widget manager renders the explorer (not "Loading widget...", not an error)
        _control(page, "run").wait_for(state="visible", timeout=30_000)
    except Exception:
        pytest.fail(f"the explorer's controls did not render; the outputs read:\n{_output_text(page)[-2000:]}")
    outputs = _output_text(page)
    assert "Error displaying widget" not in outputs and "Loading widget" not in outputs
    assert _errors(page) == []
    box = page.locator(".jp-OutputArea-output .tba-explorer")
    assert box.locator(".widget-slider").count() >= 5
    assert box.locator(".widget-dropdown").count() >= 2
    for label in ("Run", "Stop", "Clear"):
        assert box.locator("button", has_text=re.compile(rf"^\s*{label}\s*$")).count() == 1, label
        assert (_control(page, label.lower()).text_content() or "").strip() == label
    _shot(page, "06_explorer_controls.png", _control(page, "run"))

    # Run: the plot is redrawn with the run's trainer updates while it runs; Stop ends it
    # within seconds (after the current update and the final evaluation); no process is left
    run = _click_run(page)
    first = {}
    _wait_for("searcher process", lambda: lab.run_processes(), page, 60)

    def redrawn_after_updates() -> bool:  # two new images once two updates are on disk: the
        src = _image_src(page)                # second was drawn from both (curves, not points)
        if not first and _metrics_rows(lab, run) >= 2:
            first["srcs"] = [src]
        elif first and src != first["srcs"][-1]:
            first["srcs"].append(src)
        return len(first.get("srcs", ())) >= 3

    updates_after = _wait_for("redraw after two trainer updates", redrawn_after_updates, page, 150)
    assert not _control(page, "run").is_enabled(), "Run is enabled while a run is going"
    _shot(page, "06_explorer_running.png", _control(page, "plot"))
    _control(page, "stop").click()
    stopped = _wait_run_ended(page, STOP_BOUND)
    assert re.search(rf"{run}.*(stopped|done)", _status(page)), _status(page)
    _assert_no_run_processes(lab)
    _shot(page, "06_explorer_stopped.png", _control(page, "plot"))

    # Interrupt the kernel (Kernel menu) during a run: the run ends, no process is left, the
    # kernel is alive, and the explorer runs again
    run = _click_run(page)
    _wait_for("searcher process", lambda: lab.run_processes(), page, 60)
    _wait_for("first trainer update", lambda: _metrics_rows(lab, run) >= 1, page, 120)
    kernels = [k.pid for k in lab.kernels()]
    _menu(page, "Kernel", "Interrupt Kernel")
    interrupted = _wait_run_ended(page, STOP_BOUND)
    assert "run failed" not in _status(page), _status(page)
    _assert_no_run_processes(lab)
    assert [k.pid for k in lab.kernels()] == kernels, "the kernel was restarted"
    assert page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').count()
    assert _errors(page) == []
    run = _click_run(page)
    before = _image_src(page)
    _wait_for("redraw after the interrupt", lambda: _image_src(page) not in ("", before), page, 60)
    _control(page, "stop").click()
    _wait_run_ended(page, STOP_BOUND)
    _assert_no_run_processes(lab)
    _shot(page, "06_explorer_after_interrupt.png", _control(page, "status"))
    print(f"notebook 06: Run All {seconds:.0f} s; two updates drawn {updates_after:.0f} s after Run; "
          f"Stop -> end {stopped:.1f} s; interrupt -> end {interrupted:.1f} s")


def test_a_second_lab_on_the_same_machine_does_not_collide(lab, tmp_path):
    """Another user's JupyterLab: its own port, token, runtime directory and kernels."""
    other = LabServer(_copy_notebooks(tmp_path / "notebooks"), tmp_path)
    try:
        other.start()
        assert other.url != lab.url and other.token != lab.token
        assert lab.get("api/status")[0] == 200 and other.get("api/status")[0] == 200
        assert other.get("api/status", token=lab.token)[0] == 403, "one server accepts the other's token"
        assert lab.get("api/status", token=other.token)[0] == 403
        code, kernel = other.get("api/kernels", method="POST")
        assert code == 201, code
        assert (other.runtime_dir / f"kernel-{kernel['id']}.json").exists()
        assert not (lab.runtime_dir / f"kernel-{kernel['id']}.json").exists()
        assert kernel["id"] not in [k["id"] for k in lab.get("api/kernels")[1]]
        code, listing = other.get("api/contents")
        assert code == 200 and "06_explorer.ipynb" in [c["name"] for c in listing["content"]]
        assert other.get(f"lab?token={other.token}")[0] == 200
    finally:
        other.stop()
    assert lab.get("api/status")[0] == 200, "stopping the second server stopped the first"
