"""The explorer of notebook 06: launch a short training run from a few knobs and watch its curves.

In Jupyter, :func:`explorer` (ipywidgets); without widgets (papermill, scripts),
``run_and_plot(knob_overrides(...), seconds, output_dir)``, which trains the same way and saves
the final figure. The runs on disk are the explorer's memory (:mod:`tba_lab.lab.runs`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import signal
import sys
import threading
import time
from pathlib import Path

from tba_lab.config import merge as merge_overrides  # noqa: F401  (notebook 06)
from tba_lab.config import short_run
from tba_lab.lab import live
from tba_lab.lab.reproduce import require
from tba_lab.lab.runs import (STOPPED_FILE, _mark_stopped, compare_runs, comparison_html,
                              export_config, list_runs, next_run_dir, runs_table_html)
from tba_lab.registry import ALGORITHMS, section_key
from tba_lab.runlog import draw_runs


def knob_overrides(algo: str = "tb", beta: float = 0.1, beta_final: float | None = None,
                   beta_anneal_steps: int = 0, learning_rate: float = 5e-5,
                   num_generations: int = 8, recency_prob: float = 1.0, inv_temp: float = 0.0,
                   sync_period: int = 1, num_searchers: int = 1, mode: str = "async",
                   max_steps: int = 0) -> dict:
    """Nested config overrides from the explorer's knobs. ``beta`` goes to the algorithm's own
    section (``tb.beta``, ``grpo.beta`` for grpo and dr_grpo, ...), ``beta_final`` and
    ``beta_anneal_steps`` too where it has them (TB). ValueError: an unregistered algorithm."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algo={algo!r}: choose one of {list(ALGORITHMS.names())}")
    cls = ALGORITHMS.get(algo)
    section = section_key(cls)
    options = {f.name for f in dataclasses.fields(cls.config_class)} if cls.config_class else set()
    out: dict = {"algo": algo,
                 "training": {"learning_rate": float(learning_rate),
                              "num_generations": int(num_generations), "max_steps": int(max_steps)},
                 "buffer": {"recency_prob": float(recency_prob), "inv_temp": float(inv_temp)},
                 "async": {"mode": mode, "sync_period": int(sync_period),
                           "num_searchers": int(num_searchers)}}
    if "beta" in options:
        out[section] = {"beta": float(beta)}
        if beta_final is not None and {"beta_final", "beta_anneal_steps"} <= options:
            out[section].update(beta_final=float(beta_final), beta_anneal_steps=int(beta_anneal_steps))
    return out


class _InterruptStops:
    """Stop callbacks of the active runs, called when the kernel is interrupted: a cell ends with
    ``KeyboardInterrupt`` (IPython's ``post_run_cell`` event), or the kernel is idle, where
    ipykernel restores ``kernel.saved_sigint_handler`` after each message: :meth:`install`
    puts :meth:`handle_sigint` there, which stops the runs or does what the saved one did.
    """

    def __init__(self):
        self._stops: set = set()
        self._lock = threading.Lock()
        self.previous = None   # the idle SIGINT handler replaced by install()
        self._events_of = None  # the IPython shell whose post_run_cell event we hook

    def add(self, stop):
        """Register ``stop()``; returns it, for :meth:`remove`."""
        with self._lock:
            self._stops.add(stop)
        return stop

    def remove(self, stop) -> None:
        with self._lock:
            self._stops.discard(stop)

    def stop_all(self) -> bool:
        """Call every registered ``stop()``; True if there was one."""
        with self._lock:
            stops = list(self._stops)
        for stop in stops:
            with contextlib.suppress(Exception):  # a stop must not break the others
                stop()
        return bool(stops)

    def handle_sigint(self, signum, frame) -> None:
        if self.stop_all():
            return
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.previous == signal.SIG_DFL:
            raise KeyboardInterrupt
        # SIG_IGN (an idle kernel) or unknown: keep ignoring it, as the previous handler did

    def post_run_cell(self, result) -> None:
        if isinstance(getattr(result, "error_in_exec", None), KeyboardInterrupt):
            self.stop_all()

    def install(self) -> bool:
        """Hook into this process's IPython kernel (main thread only, idempotent); True when the
        idle-kernel route is in place."""
        ipython = sys.modules.get("IPython")  # imported in a kernel (as reporting.interactive)
        ip = ipython.get_ipython() if ipython is not None else None
        if ip is None or threading.current_thread() is not threading.main_thread():
            return False
        if self._events_of is not ip:
            ip.events.register("post_run_cell", self.post_run_cell)
            self._events_of = ip
        kernel = getattr(ip, "kernel", None)
        if kernel is None or not hasattr(kernel, "saved_sigint_handler"):
            return False
        if kernel.saved_sigint_handler != self.handle_sigint:
            self.previous = kernel.saved_sigint_handler
            kernel.saved_sigint_handler = self.handle_sigint
        return True


_INTERRUPTS = _InterruptStops()


def run_and_plot(config_overrides: dict, seconds: float, output_dir: str | Path, on_update=None,
                 compare_with=None, label: str | None = None,
                 stop_event: threading.Event | None = None) -> dict:
    """Train for ``seconds`` (start-up and evaluations on top) with ``config_overrides`` into
    ``output_dir`` in a background thread, call ``on_update`` with the redrawn curves
    (:func:`~tba_lab.runlog.draw_runs`, with the runs ``compare_with``) about every second, and
    save the final figure as ``output_dir/explorer.png``.

    ``stop_event`` (also set by a kernel interrupt; a ``KeyboardInterrupt`` here is re-raised
    once the run has ended, saved) ends the run after the current update; a run it ended before
    its budget gets a :data:`STOPPED_FILE`. Returns {"summary", "run_dir", "figure" (the PNG),
    "fig", "stopped"}. Raises ConfigError for a bad knob (before any process starts), and
    RuntimeError (chained) when the run failed.
    """
    import torch

    out = Path(output_dir)
    cfg = short_run(out, seconds, config_overrides)  # validates before anything starts
    (out / STOPPED_FILE).unlink(missing_ok=True)  # an earlier run in this directory
    dirs = [Path(d) for d in (compare_with or [])] + [out]
    labels = [d.name for d in dirs[:-1]] + [label or out.name]
    stop_event = stop_event if stop_event is not None else threading.Event()
    threads = torch.get_num_threads()  # train() sets the process-wide thread count; restore it
    _INTERRUPTS.install()
    token = _INTERRUPTS.add(stop_event.set)
    try:
        run = live.BackgroundRun(cfg, stop_event=stop_event).start()
        fig = None
        try:
            while not run.wait(1.0):
                if on_update is not None and (out / "metrics.jsonl").exists():
                    fig = draw_runs(dirs, labels, fig=fig)
                    on_update(fig)
        except KeyboardInterrupt:  # Ctrl-C in this thread: end the run, then re-raise
            stop_event.set()
            run.wait(None)  # a second Ctrl-C stops waiting; the run still ends
            _mark_stopped(out, run.summary, cfg)
            raise
    finally:
        _INTERRUPTS.remove(token)
        torch.set_num_threads(threads)
    if run.error is not None:
        raise RuntimeError(f"training run in {out} failed: {run.error}") from run.error
    stopped = stop_event.is_set() and _mark_stopped(out, run.summary, cfg)
    fig = draw_runs(dirs, labels)
    fig.savefig(out / "explorer.png", dpi=110)
    if on_update is not None:
        on_update(fig)
    return {"summary": run.summary, "run_dir": out, "figure": out / "explorer.png", "fig": fig,
            "stopped": stopped}


# The values of the explorer's log-scale knobs (1-2-5 steps, picked exactly).
_BETAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_LEARNING_RATES = (1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3)


def _red(text) -> str:
    return f"<span style='color:#b00'>{html.escape(str(text))}</span>"


def _knobs(W, seconds: int) -> dict:
    """The knob controls: :func:`knob_overrides`' arguments, "anneal" and "budget". Each slider
    starts on its grid (min + k * step): the browser snaps the handle to it, and the readout
    would show another value than the run gets."""
    def knob(cls, description, value, **kw):
        return cls(value=value, description=description, style={"description_width": "150px"},
                   layout=W.Layout(width="420px"), **kw)

    def log_scale(description, value, values):  # exact values, the readout shows each as it is
        return knob(W.SelectionSlider, description, value, options=[(f"{v:g}", v) for v in values])

    return {
        "algo": knob(W.Dropdown, "algorithm", "tb", options=ALGORITHMS.names()),
        "mode": knob(W.Dropdown, "mode", "async", options=("async", "sync")),
        "beta": log_scale("beta (KL coef.)", 0.1, _BETAS),
        "anneal": knob(W.Checkbox, "anneal beta (TB only)", False),
        "beta_final": log_scale("beta_final", 0.02, _BETAS),
        "beta_anneal_steps": knob(W.IntSlider, "beta_anneal_steps", 100, min=10, max=1000, step=10),
        "learning_rate": log_scale("learning rate", 5e-5, _LEARNING_RATES),
        "num_generations": knob(W.IntSlider, "K (num_generations)", 8, min=2, max=16),
        "recency_prob": knob(W.FloatSlider, "m (recency_prob)", 1.0, min=0.0, max=1.0, step=0.05),
        "inv_temp": knob(W.FloatSlider, "inv_temp", 0.0, min=0.0, max=10.0, step=0.5),
        "sync_period": knob(W.IntSlider, "sync period k", 1, min=1, max=16),
        "num_searchers": knob(W.IntSlider, "searchers", 1, min=1, max=4),
        "budget": knob(W.IntSlider, "budget (s)", min(300, max(10, 10 * round(seconds / 10))),
                       min=10, max=300, step=10)}


def _controls(W) -> dict:
    """The explorer's buttons, pickers and outputs by name, each of CSS class
    ``tba-explorer-<name>``."""
    picker = W.Layout(width="220px")
    c = {"run": W.Button(description="Run", button_style="primary", icon="play"),
         "stop": W.Button(description="Stop", icon="stop"), "clear": W.Button(description="Clear"),
         "status": W.HTML(value="Set the knobs and press Run."),
         # hidden while empty: an Image without data shows the browser's broken-image icon
         "plot": W.Image(format="png", layout=W.Layout(width="900px", display="none")),
         "runs": W.HTML(),
         "overlay": W.SelectMultiple(options=[], description="overlay", rows=5,
                                     layout=W.Layout(width="260px")),
         "run-a": W.Dropdown(options=[], description="run A", layout=picker),
         "run-b": W.Dropdown(options=[], description="run B", layout=picker),
         "compare": W.Button(description="Compare A/B"), "diff": W.HTML(),
         "export": W.Button(description="Export A", icon="download",
                            tooltip="write run A's settings to run_A/export.yaml "
                                    "(tba-lab train --config)")}
    for name, widget in c.items():
        widget.add_class(f"tba-explorer-{name}")
    return c


class _Explorer:
    """The explorer's state and what its buttons do: one run at a time, in a worker thread."""

    def __init__(self, controls: dict, knobs: dict, root: Path, extra: dict):
        self.c, self.knobs, self.root, self.extra = controls, knobs, root, extra
        self.stop_event = threading.Event()
        self.busy, self.current, self.rows, self.quiet = False, None, [], False

    def show(self, fig=None) -> None:  # None: hide the plot
        png = io.BytesIO()
        if fig is not None:
            fig.savefig(png, format="png", dpi=90)
        self.c["plot"].value = png.getvalue()
        self.c["plot"].layout.display = "none" if fig is None else None

    def refresh(self, select: tuple | None = None, a=None, b=None) -> list[dict]:
        """Rebuild the table and the run pickers from disk (``select``: the new overlay; ``a``,
        ``b``: the runs to pick, else the same as before, else the last two)."""
        overlay, pick_a, pick_b = self.c["overlay"], self.c["run-a"], self.c["run-b"]
        rows = self.rows = list_runs(self.root)
        for r in rows:
            if self.busy and r["run"] == self.current:
                r["status"] = "running"
        names = [r["run"] for r in rows]
        keep = tuple(n for n in (overlay.value if select is None else select) if n in names)
        a, b = a or pick_a.value, b or pick_b.value
        self.quiet = True  # no redraw while the options change
        try:
            overlay.options = pick_a.options = pick_b.options = names
            overlay.value = keep
            last, before = (names[-1] if names else None), (names[-2] if len(names) > 1 else None)
            pick_a.value = a if a in names else (before or last)
            pick_b.value = b if b in names else last
        finally:
            self.quiet = False
        self.c["runs"].value = runs_table_html(rows, marked=keep)
        return rows

    def redraw(self, _=None) -> None:
        drawn = self.c["overlay"].value
        if not (self.quiet or self.busy):
            self.c["runs"].value = runs_table_html(self.rows, marked=drawn)
            self.show(draw_runs([self.root / n for n in drawn], list(drawn)) if drawn else None)

    def on_interrupt(self) -> None:
        self.stop_event.set()
        self.c["status"].value = "kernel interrupted: stopping the run after the current update..."

    def work(self, run_overrides: dict, out: Path, label: str, token: int) -> None:
        """The worker thread: train, then show the result and put the new run in the table."""
        t0, shown, first = time.time(), tuple(self.c["overlay"].value), []

        def on_update(fig):
            self.show(fig)
            if not first:  # the run's row appears in the table (status "running")
                first.append(True)
                self.refresh()

        try:
            res = run_and_plot(run_overrides, self.knobs["budget"].value, out, on_update=on_update,
                               compare_with=[self.root / n for n in shown], label=label,
                               stop_event=self.stop_event)
            s = res["summary"] or {}
            self.c["status"].value = (
                f"<b>{label}</b> {'stopped' if res['stopped'] else 'done'} after "
                f"{time.time() - t0:.0f} s: {s.get('trainer_steps')} updates, accuracy "
                f"{100 * (s.get('accuracy_before') or 0):.1f}% -> "
                f"{100 * (s.get('accuracy_after') or 0):.1f}%, staleness mean "
                f"{s.get('staleness_mean') or 0:.2f}. Figure: {res['figure']}")
        except Exception as e:  # shown, never raised into the widget's thread
            self.c["status"].value = _red(f"run failed: {type(e).__name__}: {e}")
        finally:
            _INTERRUPTS.remove(token)
            self.busy = False
            self.c["run"].disabled = False
            # the new run joins the overlay; run A = the previous run B, run B = the new run
            with contextlib.suppress(Exception):  # the table must not break the explorer
                self.refresh(select=(*shown, out.name), a=self.c["run-b"].value, b=out.name)

    def run(self, _=None) -> None:
        if self.busy:
            return
        _INTERRUPTS.install()
        budget = self.knobs["budget"].value
        values = {name: w.value for name, w in self.knobs.items() if name not in ("anneal", "budget")}
        if not self.knobs["anneal"].value:
            values["beta_final"] = None
        try:
            run_overrides = merge_overrides(knob_overrides(**values), self.extra)
            out = next_run_dir(self.root)
            short_run(out, budget, run_overrides)  # validate now: errors at once
        except ValueError as e:  # ConfigError too
            self.c["status"].value = _red(f"bad setting: {e}")
            return
        label = f"{out.name} {values['algo']} beta={values['beta']:.3g}"
        self.busy, self.current = True, out.name
        self.stop_event.clear()
        self.c["run"].disabled = True
        token = _INTERRUPTS.add(self.on_interrupt)
        self.c["status"].value = (f"running <b>{label}</b> for {budget} s (plus start-up and "
                                  f"evaluation); Stop or interrupting the kernel ends it early...")
        threading.Thread(target=self.work, args=(run_overrides, out, label, token),
                         daemon=True).start()

    def clear(self, _=None) -> None:
        if not self.busy:
            self.c["overlay"].value = ()
            self.show(None)
            self.c["status"].value = "Cleared the plot; the runs stay on disk and in the table."

    def stop(self, _=None) -> None:
        if self.busy:
            self.stop_event.set()
            self.c["status"].value = "stopping after the current update (the run so far is saved)..."

    def compare(self, _=None) -> None:
        self.refresh()
        a, b = self.c["run-a"].value, self.c["run-b"].value
        if not a or not b:
            self.c["status"].value = "pick two runs (run A, run B) to compare"
            return
        rows = {r["run"]: r for r in self.rows}
        try:
            self.c["diff"].value = comparison_html(rows[a], rows[b],
                                                   compare_runs(self.root / a, self.root / b))
        except (OSError, ValueError, KeyError) as e:
            self.c["diff"].value = _red(f"cannot compare: {e}")
            return
        if not self.busy:
            self.c["overlay"].value = (a,) if a == b else (a, b)

    def export(self, _=None) -> None:
        a = self.c["run-a"].value
        if not a:
            self.c["status"].value = "pick run A to export"
            return
        try:
            path = export_config(self.root / a)
        except Exception as e:  # a run of an older kit may not validate: say so
            self.c["status"].value = _red(f"export failed: {e}")
            return
        self.c["status"].value = (f"exported the settings of <b>{a}</b> to {path}; train with "
                                  f"<code>tba-lab train --config {path}</code>")


def explorer(output_root: str | Path = "runs/explorer", seconds: int = 60,
             overrides: dict | None = None):
    """Interactive controls for :func:`run_and_plot` (ipywidgets), returned as a ``VBox`` of CSS
    class ``tba-explorer`` whose ``controls`` are :func:`_controls`.

    "Run" trains into ``output_root/run_NN``, one run at a time, drawn over the runs ticked
    under "overlay"; "Stop" (or interrupting the kernel) ends it after the current update,
    saved. The runs table is rebuilt from disk. "Compare A/B" draws runs A and B and lists the
    settings they differ in; "Export A" writes run A's settings to ``run_A/export.yaml``.
    ``seconds``: the budget slider's start; ``overrides``: merged over every run's knobs.
    """
    W = require("ipywidgets", "the explorer")
    knobs, c = _knobs(W, seconds), _controls(W)
    ex = _Explorer(c, knobs, Path(output_root), dict(overrides or {}))
    for name in ("run", "stop", "clear", "compare", "export"):
        c[name].on_click(getattr(ex, name))
    c["overlay"].observe(ex.redraw, names="value")
    rows = ex.refresh()
    if rows:
        c["status"].value = (f"{len(rows)} earlier run(s) in {html.escape(str(ex.root))} (table "
                             f"below): tick them under overlay to draw them, pick two to compare, "
                             f"or press Run.")
    controls = list(knobs.values())
    box = W.VBox([W.HBox([W.VBox(controls[:7]), W.VBox(controls[7:])]),
                  W.HBox([c["run"], c["stop"], c["clear"]]), c["status"], c["plot"],
                  W.HTML("<b>Runs</b> (from disk; bold: drawn)"), c["runs"],
                  W.HBox([c["overlay"], W.VBox([c["run-a"], c["run-b"],
                                                W.HBox([c["compare"], c["export"]])]), c["diff"]])])
    box.add_class("tba-explorer")
    box.controls = c
    return box
