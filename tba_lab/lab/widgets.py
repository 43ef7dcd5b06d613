"""The explorer: launch a short training run from a few knobs and watch its curves live.

Two ways in, one code path:

* interactive (Jupyter): ``explorer()`` returns ipywidgets controls (algorithm, KL coefficient
  beta and its annealing, learning rate, K, recency m, inv_temp, sync period k, searchers,
  budget). "Run" starts :func:`run_and_plot` in a background thread; the figure (reward, loss,
  staleness, held-out accuracy) is redrawn about every second from the run's ``metrics.jsonl``
  and ``eval.jsonl`` while ``tba_lab.trainer.train`` writes them.
* headless (papermill, scripts): ``run_and_plot(knob_overrides(...), seconds, output_dir,
  live=False)`` trains in the calling thread and saves the final figure.

``train()`` installs its Ctrl-C / SIGTERM handlers only on the main thread, so running it in a
background thread is supported; the explorer's "Stop" button ends a run early through
``train(..., stop_event=...)`` (everything so far is saved, as at the end of the budget;
:func:`run_and_plot` marks the run directory so that the runs table says "stopped", not "done").
Interrupting the kernel (Ctrl-C, Jupyter's "interrupt kernel") during a run does the same: a
``KeyboardInterrupt`` in the main thread, or a SIGINT while the kernel is idle, sets the stop
event of every active explorer run (:func:`run_and_plot` live, or a run started by "Run"), so
the searchers end with the run and the explorer is ready for the next one.

Runs on disk are the explorer's memory: every run is a directory ``output_root/run_NN`` with
the ``config.yaml`` and ``summary.json`` the trainer writes. :mod:`tba_lab.lab.runs` reads them
(``list_runs``, ``compare_runs``, ``export_config``; re-exported here).
"""
from __future__ import annotations

import dataclasses
import html
import io
import signal
import threading
import time
from pathlib import Path

from tba_lab.config import merge as merge_overrides  # noqa: F401  (notebook 06)
from tba_lab.config import short_run
from tba_lab.registry import ALGORITHMS
from tba_lab.lab.runs import (  # noqa: F401  (re-exported: notebook 06, tests)
    SETTING_COLUMNS, RESULT_COLUMNS, _RUN_NAME, flatten_config, read_settings, _read_summary,
    STOPPED_FILE, _stopped_early, _mark_stopped, _was_stopped, _algo_section, _natural,
    list_runs, compare_runs, export_config, next_run_dir, _fmt_cell, _TABLE_COLUMNS,
    runs_table_html, comparison_html)
from tba_lab.runlog import eval_metric, moving_average, read_jsonl_rows, split_evals  # noqa: F401


# ----------------------------------------------------------------------------------------------
# Reading metrics
# ----------------------------------------------------------------------------------------------


def read_run(run_dir: str | Path) -> dict:
    """``{"metrics": [...], "evals": [...], "summary": dict | None}`` of a (possibly running) run.

    Tolerates a half-written last line (the trainer may be writing it right now)."""
    import json

    run_dir = Path(run_dir)

    s = run_dir / "summary.json"
    summary = None
    if s.exists():
        try:
            summary = json.loads(s.read_text())
        except json.JSONDecodeError:
            summary = None
    return {"metrics": read_jsonl_rows(run_dir / "metrics.jsonl"),
            "evals": read_jsonl_rows(run_dir / "eval.jsonl"), "summary": summary}


# ----------------------------------------------------------------------------------------------
# Configuration from knobs
# ----------------------------------------------------------------------------------------------


def knob_overrides(algo: str = "tb", beta: float = 0.1, beta_final: float | None = None,
                   beta_anneal_steps: int = 0, learning_rate: float = 5e-5,
                   num_generations: int = 8, recency_prob: float = 1.0, inv_temp: float = 0.0,
                   sync_period: int = 1, num_searchers: int = 1, mode: str = "async",
                   max_steps: int = 0) -> dict:
    """Nested config overrides (for :func:`tba_lab.config.from_dict`) from the explorer's knobs.

    ``beta`` goes to the chosen algorithm's own section, as the algorithm table declares it
    (``tb.beta``, ``grpo.beta`` for grpo and dr_grpo, ``rloo.beta``, ``online_dpo.beta``);
    ``beta_final`` / ``beta_anneal_steps`` (the linear annealing) go there too when that section
    has them (TB), and are ignored otherwise.

    Raises:
        ValueError: an algorithm that is not registered.
    """
    if algo not in ALGORITHMS:
        raise ValueError(f"algo={algo!r}: choose one of {list(ALGORITHMS.names())}")
    cls = ALGORITHMS.get(algo)
    section = cls.section or cls.name
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


def make_config(config_overrides: dict, seconds: float, output_dir: str | Path, seed: int = 0):
    """A validated :class:`~tba_lab.config.RunConfig` for a short explorer run
    (:func:`tba_lab.config.short_run`: held-out accuracy on 200 problems before and after, 100
    every 20 s in between, a first update after one generation batch); overrides win."""
    return short_run(output_dir, seconds, config_overrides, seed=seed)


# ----------------------------------------------------------------------------------------------
# Interrupting the kernel stops the active runs
# ----------------------------------------------------------------------------------------------


class _InterruptStops:
    """Stop callbacks of the active runs, called when the kernel is interrupted.

    Two routes, both through documented hooks of this process's IPython kernel:

    * a cell that was executing ends with ``KeyboardInterrupt``: IPython's ``post_run_cell``
      event sees it in ``result.error_in_exec``;
    * the kernel was idle (the usual case: a run started by the explorer's "Run" button):
      ipykernel ignores SIGINT between messages and restores the handler it saved in
      ``kernel.saved_sigint_handler`` after every message; :meth:`install` puts
      :meth:`handle_sigint` there, which stops the active runs, or else does what the saved
      handler did (ignore, or raise ``KeyboardInterrupt``).
    """

    def __init__(self):
        self._stops: dict[int, object] = {}
        self._lock = threading.Lock()
        self._next = 0
        self.previous = None   # the idle SIGINT handler replaced by install()
        self._events_of = None  # the IPython shell whose post_run_cell event we hook

    def add(self, stop) -> int:
        """Register ``stop()`` (called on an interrupt); returns a token for :meth:`remove`."""
        with self._lock:
            self._next += 1
            self._stops[self._next] = stop
            return self._next

    def remove(self, token: int) -> None:
        with self._lock:
            self._stops.pop(token, None)

    def stop_all(self) -> bool:
        """Call every registered ``stop()``; True if there was one."""
        with self._lock:
            stops = list(self._stops.values())
        for stop in stops:
            try:
                stop()
            except Exception:  # pragma: no cover - a stop must not break the others
                pass
        return bool(stops)

    def handle_sigint(self, signum, frame) -> None:
        if self.stop_all():
            return
        previous = self.previous
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt
        # SIG_IGN (an idle kernel) or unknown: keep ignoring it, as the previous handler did

    def post_run_cell(self, result) -> None:
        if isinstance(getattr(result, "error_in_exec", None), KeyboardInterrupt):
            self.stop_all()

    def install(self) -> bool:
        """Hook into the IPython kernel of this process, if there is one (main thread only);
        True when the idle-kernel SIGINT route is in place. Idempotent."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover
            return False
        ip = get_ipython()
        if ip is None:
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


# ----------------------------------------------------------------------------------------------
# Plots
# ----------------------------------------------------------------------------------------------


def _dot(points) -> str | None:
    """The marker of a line through ``points``: a dot when there is one point (a one-point line
    draws nothing), none otherwise."""
    return "." if len(points) == 1 else None


def draw_runs(run_dirs, labels=None, fig=None, window: int = 10, title: str | None = None):
    """Draw reward, loss, staleness and held-out accuracy of one or more runs on a 2x2 figure.

    x axes: seconds since training began. Rewards and losses are trailing moving averages over
    ``window`` updates (:func:`moving_average`); staleness is the per-update mean (solid) and
    max (dotted) of the trained batch; accuracy is greedy exact match on held-out problems
    (squares: the before/after sets, circles: the smaller interim sets).

    Returns:
        the matplotlib Figure (a plain ``Figure``: nothing shows until you display or save it).
    """
    from matplotlib.figure import Figure

    run_dirs = [Path(d) for d in ([run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs)]
    labels = labels or [d.name for d in run_dirs]
    if fig is None:
        fig = Figure(figsize=(11, 6.5))
    fig.clear()
    axes = fig.subplots(2, 2)
    (ax_r, ax_l), (ax_s, ax_a) = axes
    for i, (d, lab) in enumerate(zip(run_dirs, labels)):
        run = read_run(d)
        c = f"C{i}"
        m = run["metrics"]
        if m:
            x = [r["wall_seconds"] for r in m]
            dot = _dot(x)
            ax_r.plot(x, moving_average([r["reward_mean"] for r in m], window), color=c,
                      marker=dot, label=f"{lab}: trainer batch")
            sr = [(r["wall_seconds"], r["searcher_reward_mean"]) for r in m
                  if r.get("searcher_reward_mean") is not None]
            if sr:
                ax_r.plot([a for a, _ in sr], moving_average([b for _, b in sr], window), color=c,
                          ls="--", alpha=0.7, marker=_dot(sr), label=f"{lab}: newest rollouts")
            ax_l.plot(x, moving_average([r["loss"] for r in m], window), color=c, marker=dot,
                      label=lab)
            ax_s.plot(x, [r["staleness_mean"] for r in m], color=c, marker=dot, label=f"{lab}: mean")
            ax_s.plot(x, [r["staleness_max"] for r in m], color=c, ls=":", alpha=0.7, marker=dot,
                      label=f"{lab}: max")
        ev = run["evals"]
        if ev:
            key = eval_metric(ev[0])
            scale = 100 if key == "accuracy" else 1
            before, mid, after = split_evals(ev, run["summary"])
            ends = before + after  # full held-out set; interim points are a noisier subset
            if ends:
                ax_a.plot([e["wall_seconds"] for e in ends], [scale * e[key] for e in ends], "s",
                          color=c, label=f"{lab} (before/after, {ends[0]['n']} problems)")
            if mid:
                ax_a.plot([e["wall_seconds"] for e in mid], [scale * e[key] for e in mid],
                          "o-", color=c, mfc="white", alpha=0.8,
                          label=f"{lab} (interim, {mid[0]['n']} problems)")
    ax_r.set(ylabel="mean reward", title=f"reward (moving average of {window} updates)")
    ax_l.set(ylabel="loss", title=f"loss (moving average of {window})")
    ax_s.set(ylabel="updates", title="staleness of the trained batch")
    ax_a.set(ylabel="accuracy (%)", title="held-out greedy accuracy")
    for ax in axes.flat:
        ax.set_xlabel("training wall-clock (s)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def _ipython_updater():
    """``on_update(fig)`` that shows the figure once and then updates it in place (IPython)."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover
        return None
    if get_ipython() is None:
        return None
    handle = {}

    def update(fig):
        img = Image(data=_png(fig), format="png")
        if "h" not in handle:
            handle["h"] = display(img, display_id=True)
        else:
            handle["h"].update(img)
    return update


# ----------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------


def run_and_plot(config_overrides: dict, seconds: float, output_dir: str | Path, live: bool = True,
                 poll_seconds: float = 1.0, on_update=None, compare_with=None, label: str | None = None,
                 seed: int = 0, figure_name: str = "explorer.png",
                 stop_event: threading.Event | None = None) -> dict:
    """Train for ``seconds`` with ``config_overrides`` into ``output_dir`` and plot the curves.

    Args:
        config_overrides: nested overrides for ``from_dict`` (e.g. from :func:`knob_overrides`).
        seconds: training budget (``max_minutes = seconds / 60``); evaluations and process
            start-up come on top (about 5-10 s here).
        output_dir: the run directory (``metrics.jsonl``, ``summary.json``, ... and the figure).
        live: True: train in a background thread and redraw every ``poll_seconds`` (calling
            ``on_update(fig)``; default: show/update the figure in the notebook). False: train
            in this thread, draw once at the end (headless, papermill).
        compare_with: earlier run directories drawn on the same axes (list of paths), with
            labels from their directory names.
        label: legend label of this run (default: the directory name).
        seed: run seed.
        figure_name: the PNG written into ``output_dir``.
        stop_event: set it to end the run after the current update (passed to ``train``).
            With ``live=True`` an interrupt of the kernel sets it too (a ``KeyboardInterrupt``
            in the calling thread, or a SIGINT while the kernel is idle, the way a run started
            from another thread sees it): the run ends, saved, its searchers stop, and the
            ``KeyboardInterrupt`` is re-raised once it has. A run the stop event ended before
            its budget gets a :data:`STOPPED_FILE` (the runs table says "stopped", not "done").

    Returns:
        {"summary": the run's summary dict, "run_dir": Path, "figure": Path of the PNG,
         "fig": the matplotlib Figure, "stopped": True when the stop event ended the run early}.

    Raises:
        tba_lab.config.ConfigError: a bad knob value (before any process starts).
        RuntimeError: the training run failed (its error is chained).
    """
    import torch

    from tba_lab.trainer import train

    out = Path(output_dir)
    cfg = make_config(config_overrides, seconds, out, seed)  # validates before anything starts
    (out / STOPPED_FILE).unlink(missing_ok=True)  # an earlier run in this directory
    dirs = [Path(d) for d in (compare_with or [])] + [out]
    labels = [d.name for d in dirs[:-1]] + [label or out.name]
    threads = torch.get_num_threads()  # train() sets the process-wide thread count; restore it
    result: dict = {}
    try:
        if not live:
            result["summary"] = train(cfg, progress=False, stop_event=stop_event)
        else:
            update = on_update or _ipython_updater() or (lambda fig: None)

            from tba_lab.lab.live import BackgroundRun

            stop_event = stop_event if stop_event is not None else threading.Event()
            _INTERRUPTS.install()
            token = _INTERRUPTS.add(stop_event.set)
            try:
                run = BackgroundRun(cfg, stop_event=stop_event).start()
                fig = None
                try:
                    while not run.wait(poll_seconds):
                        if (out / "metrics.jsonl").exists():
                            fig = draw_runs(dirs, labels, fig=fig)
                            update(fig)
                except KeyboardInterrupt:  # Ctrl-C in this thread: end the run, then re-raise
                    stop_event.set()
                    run.wait(None)  # a second Ctrl-C stops waiting; the run still ends
                    if _stopped_early(run.summary, cfg):
                        _mark_stopped(out, run.summary, cfg)
                    raise
            finally:
                _INTERRUPTS.remove(token)
            result["summary"], result["error"] = run.summary, run.error
            if result["error"] is not None:
                raise RuntimeError(f"training run in {out} failed: {result['error']}") from result["error"]
    finally:
        torch.set_num_threads(threads)
    stopped = (stop_event is not None and stop_event.is_set()
               and _stopped_early(result.get("summary"), cfg))
    if stopped:
        _mark_stopped(out, result["summary"], cfg)
    fig = draw_runs(dirs, labels)
    path = out / figure_name
    fig.savefig(path, dpi=110)
    if live:
        (on_update or (lambda f: None))(fig)
    return {"summary": result.get("summary"), "run_dir": out, "figure": path, "fig": fig,
            "stopped": stopped}


#: The values of the explorer's log-scale knobs (1-2-5 steps).
_BETAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_LEARNING_RATES = (1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3)


def _options(values) -> list[tuple[str, float]]:
    """(readout label, value) pairs of a ``SelectionSlider``."""
    return [(f"{v:g}", v) for v in values]


def explorer(output_root: str | Path = "runs/explorer", seconds: int = 60,
             overrides: dict | None = None):
    """Interactive controls for :func:`run_and_plot` (needs ipywidgets; Jupyter).

    Each press of "Run" trains into ``output_root/run_NN`` (:func:`next_run_dir`) with the
    current knob values and draws it over the runs ticked under "overlay"; "Stop" (or
    interrupting the kernel) ends it after the current update, saved. One run at a time.

    Every run under ``output_root`` is a row of the runs table (:func:`list_runs`: settings and
    results), rebuilt from disk when the explorer is built, so a restarted kernel finds its
    earlier runs. "overlay" picks the runs drawn together ("Clear" empties it; the runs stay on
    disk). "Compare A/B" draws runs A and B together and lists the settings they differ in
    (:func:`compare_runs`); "Export A" writes run A's settings to ``run_A/export.yaml`` for
    ``tba-lab train --config`` (:func:`export_config`).

    Args:
        output_root: the folder of the explorer's runs.
        seconds: the budget slider's start value (rounded to its 10-s steps, 10 to 300).
        overrides: nested config overrides merged over every run's knobs (e.g. smaller held-out
            evaluations for a quick demo: ``{"task": {"eval_size": 20}}``).

    Returns:
        an ``ipywidgets.VBox`` (display it, or leave it as a cell's last expression), with CSS
        classes for tests and styling: ``tba-explorer`` on the box; ``tba-explorer-run``,
        ``-stop``, ``-clear`` (the buttons), ``-status``, ``-plot`` (the figure), ``-runs`` (the
        runs table), ``-overlay``, ``-run-a``, ``-run-b``, ``-compare``, ``-diff``, ``-export``.
        Its ``controls`` attribute maps those names (without the prefix) to the widgets.
    """
    try:
        import ipywidgets as W
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError('the explorer needs ipywidgets: pip install -e ".[course]"') from e

    style = {"description_width": "150px"}
    lay = W.Layout(width="420px")
    algo = W.Dropdown(options=ALGORITHMS.names(), value="tb", description="algorithm", style=style, layout=lay)
    mode = W.Dropdown(options=("async", "sync"), value="async", description="mode", style=style, layout=lay)
    # Every slider's start value lies on its grid (min + k * step): the browser snaps the handle
    # to the grid, and the readout would show another value than the run gets (100 read "101"
    # on a min=1, step=10 slider). The log-scale knobs pick from 1-2-5 values, exactly.
    beta = W.SelectionSlider(options=_options(_BETAS), value=0.1, description="beta (KL coef.)",
                             style=style, layout=lay)
    anneal = W.Checkbox(value=False, description="anneal beta (TB only)", style=style, layout=lay)
    beta_final = W.SelectionSlider(options=_options(_BETAS), value=0.02, description="beta_final",
                                   style=style, layout=lay)
    anneal_steps = W.IntSlider(value=100, min=10, max=1000, step=10, description="beta_anneal_steps",
                               style=style, layout=lay)
    lr = W.SelectionSlider(options=_options(_LEARNING_RATES), value=5e-5, description="learning rate",
                           style=style, layout=lay)
    k_gen = W.IntSlider(value=8, min=2, max=16, description="K (num_generations)", style=style, layout=lay)
    m = W.FloatSlider(value=1.0, min=0.0, max=1.0, step=0.05, description="m (recency_prob)",
                      style=style, layout=lay)
    inv_temp = W.FloatSlider(value=0.0, min=0.0, max=10.0, step=0.5, description="inv_temp",
                             style=style, layout=lay)
    sync_period = W.IntSlider(value=1, min=1, max=16, description="sync period k", style=style, layout=lay)
    searchers = W.IntSlider(value=1, min=1, max=4, description="searchers", style=style, layout=lay)
    budget = W.IntSlider(value=min(300, max(10, 10 * round(seconds / 10))), min=10, max=300, step=10,
                         description="budget (s)", style=style, layout=lay)
    run_btn = W.Button(description="Run", button_style="primary", icon="play")
    clear_btn = W.Button(description="Clear")
    stop_btn = W.Button(description="Stop", icon="stop")
    status = W.HTML(value="Set the knobs and press Run.")
    # hidden while empty: an Image without data shows the browser's broken-image icon
    image = W.Image(format="png", layout=W.Layout(width="900px", display="none"))
    table = W.HTML()
    overlay = W.SelectMultiple(options=[], description="overlay", rows=5,
                               layout=W.Layout(width="260px"))
    pick_a = W.Dropdown(options=[], description="run A", layout=W.Layout(width="220px"))
    pick_b = W.Dropdown(options=[], description="run B", layout=W.Layout(width="220px"))
    compare_btn = W.Button(description="Compare A/B")
    export_btn = W.Button(description="Export A", icon="download",
                          tooltip="write run A's settings to run_A/export.yaml (tba-lab train --config)")
    diff = W.HTML()
    controls = {"run": run_btn, "stop": stop_btn, "clear": clear_btn, "status": status,
                "plot": image, "runs": table, "overlay": overlay, "run-a": pick_a,
                "run-b": pick_b, "compare": compare_btn, "diff": diff, "export": export_btn}
    for name, widget in controls.items():
        widget.add_class(f"tba-explorer-{name}")
    stop_event = threading.Event()
    state = {"busy": False, "current": None, "rows": []}
    root = Path(output_root)
    extra = dict(overrides or {})
    _INTERRUPTS.install()

    def set_image(fig):
        image.value = _png(fig)
        image.layout.display = None

    def clear_image():
        image.value = b""
        image.layout.display = "none"

    def refresh(select: tuple | None = None):
        """Rebuild the table and the run pickers from disk (``select``: the new overlay)."""
        rows = list_runs(root)
        for r in rows:
            if state["busy"] and r["run"] == state["current"]:
                r["status"] = "running"
        state["rows"] = rows
        names = [r["run"] for r in rows]
        keep = tuple(n for n in (overlay.value if select is None else select) if n in names)
        a, b = pick_a.value, pick_b.value
        state["quiet"] = True  # no redraw while the options change
        try:
            overlay.options = names
            overlay.value = keep
            pick_a.options = names
            pick_b.options = names
            last, before = (names[-1] if names else None), (names[-2] if len(names) > 1 else None)
            pick_a.value = a if a in names else (before or last)
            pick_b.value = b if b in names else last
        finally:
            state["quiet"] = False
        table.value = runs_table_html(rows, marked=keep)
        return rows

    def redraw(_=None):
        if state.get("quiet") or state["busy"]:
            return
        table.value = runs_table_html(state["rows"], marked=overlay.value)
        if overlay.value:
            set_image(draw_runs([root / n for n in overlay.value], list(overlay.value)))
        else:
            clear_image()

    def knobs() -> dict:
        return knob_overrides(algo=algo.value, beta=beta.value,
                              beta_final=beta_final.value if anneal.value else None,
                              beta_anneal_steps=anneal_steps.value, learning_rate=lr.value,
                              num_generations=k_gen.value, recency_prob=m.value,
                              inv_temp=inv_temp.value, sync_period=sync_period.value,
                              num_searchers=searchers.value, mode=mode.value)

    def on_interrupt():
        stop_event.set()
        status.value = "kernel interrupted: stopping the run after the current update..."

    def work(overrides, out, label, token):
        t0 = time.time()
        shown = tuple(overlay.value)
        first = []

        def on_update(fig):
            set_image(fig)
            if not first:  # the run's row appears in the table (status "running")
                first.append(True)
                refresh()

        try:
            res = run_and_plot(overrides, budget.value, out, live=True, on_update=on_update,
                               compare_with=[root / n for n in shown], label=label,
                               stop_event=stop_event)
            s = res["summary"] or {}
            ended = "stopped" if res["stopped"] else "done"  # as the runs table says
            status.value = (f"<b>{label}</b> {ended} after {time.time() - t0:.0f} s: "
                            f"{s.get('trainer_steps')} updates, accuracy "
                            f"{100 * (s.get('accuracy_before') or 0):.1f}% -> "
                            f"{100 * (s.get('accuracy_after') or 0):.1f}%, staleness mean "
                            f"{s.get('staleness_mean') or 0:.2f}. Figure: {res['figure']}")
        except Exception as e:  # shown, never raised into the widget's thread
            status.value = f"<span style='color:#b00'>run failed: {type(e).__name__}: {e}</span>"
        finally:
            _INTERRUPTS.remove(token)
            state["busy"] = False
            run_btn.disabled = False
            try:  # the new run joins the overlay; run A = the previous run B, run B = the new run
                previous_b = pick_b.value
                refresh(select=(*shown, out.name))
                if out.name in pick_b.options:
                    pick_b.value = out.name
                    if previous_b in pick_a.options and previous_b != out.name:
                        pick_a.value = previous_b
            except Exception:  # pragma: no cover - the table must not break the explorer
                pass

    def on_run(_):
        from tba_lab.config import ConfigError

        if state["busy"]:
            return
        _INTERRUPTS.install()
        try:
            overrides = merge_overrides(knobs(), extra)
            out = next_run_dir(root)
            make_config(overrides, budget.value, out)  # validate now, show errors at once
        except (ValueError, ConfigError) as e:
            status.value = f"<span style='color:#b00'>bad setting: {html.escape(str(e))}</span>"
            return
        label = f"{out.name} {algo.value} beta={beta.value:.3g}"
        state["busy"], state["current"] = True, out.name
        stop_event.clear()
        run_btn.disabled = True
        token = _INTERRUPTS.add(on_interrupt)
        status.value = (f"running <b>{label}</b> for {budget.value} s (plus start-up and "
                        f"evaluation); Stop or interrupting the kernel ends it early...")
        threading.Thread(target=work, args=(overrides, out, label, token), daemon=True).start()

    def on_clear(_):
        if not state["busy"]:
            overlay.value = ()
            clear_image()
            status.value = "Cleared the plot; the runs stay on disk and in the table."

    def on_stop(_):
        if state["busy"]:
            stop_event.set()
            status.value = "stopping after the current update (the run so far is saved)..."

    def on_compare(_):
        refresh()
        a, b = pick_a.value, pick_b.value
        if not a or not b:
            status.value = "pick two runs (run A, run B) to compare"
            return
        rows = {r["run"]: r for r in state["rows"]}
        try:
            diff.value = comparison_html(rows[a], rows[b], compare_runs(root / a, root / b))
        except (OSError, ValueError, KeyError) as e:
            diff.value = f"<span style='color:#b00'>cannot compare: {html.escape(str(e))}</span>"
            return
        if not state["busy"]:
            overlay.value = (a,) if a == b else (a, b)

    def on_export(_):
        a = pick_a.value
        if not a:
            status.value = "pick run A to export"
            return
        try:
            path = export_config(root / a)
        except Exception as e:  # a run of an older kit may not validate: say so
            status.value = f"<span style='color:#b00'>export failed: {html.escape(str(e))}</span>"
            return
        status.value = (f"exported the settings of <b>{a}</b> to {path}; train with "
                        f"<code>tba-lab train --config {path}</code>")

    run_btn.on_click(on_run)
    stop_btn.on_click(on_stop)
    clear_btn.on_click(on_clear)
    compare_btn.on_click(on_compare)
    export_btn.on_click(on_export)
    overlay.observe(redraw, names="value")
    rows = refresh()
    if rows:
        status.value = (f"{len(rows)} earlier run(s) in {html.escape(str(root))} (table below): "
                        f"tick them under overlay to draw them, pick two to compare, or press Run.")
    left = W.VBox([algo, mode, beta, anneal, beta_final, anneal_steps, lr])
    right = W.VBox([k_gen, m, inv_temp, sync_period, searchers, budget])
    runs_box = W.HBox([overlay, W.VBox([pick_a, pick_b, W.HBox([compare_btn, export_btn])]), diff])
    box = W.VBox([W.HBox([left, right]), W.HBox([run_btn, stop_btn, clear_btn]), status, image,
                  W.HTML("<b>Runs</b> (from disk; bold: drawn)"), table, runs_box])
    box.add_class("tba-explorer")
    box.controls = controls
    return box


__all__ = ["STOPPED_FILE", "moving_average", "read_run", "knob_overrides", "merge_overrides", "make_config", "draw_runs",
           "run_and_plot", "explorer", "list_runs", "compare_runs", "export_config", "next_run_dir",
           "read_settings", "flatten_config", "runs_table_html", "comparison_html"]
