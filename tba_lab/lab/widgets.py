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
``train(..., stop_event=...)`` (everything so far is saved, as at the end of the budget).
"""
from __future__ import annotations

import dataclasses
import io
import threading
import time
from pathlib import Path

from tba_lab.config import merge as merge_overrides  # noqa: F401  (notebook 06)
from tba_lab.config import short_run
from tba_lab.registry import ALGORITHMS
from tba_lab.runlog import eval_metric, moving_average, read_jsonl_rows  # noqa: F401  (moving_average: exercise 06)


# ----------------------------------------------------------------------------------------------
# Reading metrics (moving_average, from tba_lab.runlog, is the reference of exercise 06)
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
                   num_generations: int = 8, recency_prob: float = 0.8, inv_temp: float = 0.0,
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
# Plots
# ----------------------------------------------------------------------------------------------


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
            ax_r.plot(x, moving_average([r["reward_mean"] for r in m], window), color=c,
                      label=f"{lab}: trainer batch")
            sr = [(r["wall_seconds"], r["searcher_reward_mean"]) for r in m
                  if r.get("searcher_reward_mean") is not None]
            if sr:
                ax_r.plot([a for a, _ in sr], moving_average([b for _, b in sr], window), color=c,
                          ls="--", alpha=0.7, label=f"{lab}: newest rollouts")
            ax_l.plot(x, moving_average([r["loss"] for r in m], window), color=c, label=lab)
            ax_s.plot(x, [r["staleness_mean"] for r in m], color=c, label=f"{lab}: mean")
            ax_s.plot(x, [r["staleness_max"] for r in m], color=c, ls=":", alpha=0.7,
                      label=f"{lab}: max")
        ev = run["evals"]
        if ev:
            key = eval_metric(ev[0])
            scale = 100 if key == "accuracy" else 1
            full = max(e["n"] for e in ev)
            ends = [e for e in ev if e["n"] == full]
            mid = [e for e in ev if e["n"] != full]
            ax_a.plot([e["wall_seconds"] for e in ev], [scale * e[key] for e in ev],
                      color=c, alpha=0.5)
            ax_a.plot([e["wall_seconds"] for e in ends], [scale * e[key] for e in ends], "s",
                      color=c, label=f"{lab} ({full} problems)")
            if mid:
                ax_a.plot([e["wall_seconds"] for e in mid], [scale * e[key] for e in mid],
                          "o", color=c, mfc="white", label=f"{lab} (interim, {mid[0]['n']})")
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

    Returns:
        {"summary": the run's summary dict, "run_dir": Path, "figure": Path of the PNG,
         "fig": the matplotlib Figure}.

    Raises:
        tba_lab.config.ConfigError: a bad knob value (before any process starts).
        RuntimeError: the training run failed (its error is chained).
    """
    import torch

    from tba_lab.trainer import train

    out = Path(output_dir)
    cfg = make_config(config_overrides, seconds, out, seed)  # validates before anything starts
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

            run = BackgroundRun(cfg, stop_event=stop_event).start()
            fig = None
            while not run.wait(poll_seconds):
                if (out / "metrics.jsonl").exists():
                    fig = draw_runs(dirs, labels, fig=fig)
                    update(fig)
            result["summary"], result["error"] = run.summary, run.error
            if result["error"] is not None:
                raise RuntimeError(f"training run in {out} failed: {result['error']}") from result["error"]
    finally:
        torch.set_num_threads(threads)
    fig = draw_runs(dirs, labels)
    path = out / figure_name
    fig.savefig(path, dpi=110)
    if live:
        (on_update or (lambda f: None))(fig)
    return {"summary": result.get("summary"), "run_dir": out, "figure": path, "fig": fig}


def explorer(output_root: str | Path = "runs/explorer", seconds: int = 60):
    """Interactive controls for :func:`run_and_plot` (needs ipywidgets; Jupyter).

    Each press of "Run" trains into ``output_root/run_NN`` with the current knob values and
    draws it over the previous runs of this explorer ("Clear" forgets them). One run at a time.

    Returns:
        an ``ipywidgets.VBox`` (display it, or leave it as a cell's last expression).
    """
    try:
        import ipywidgets as W
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError('the explorer needs ipywidgets: pip install -e ".[course]"') from e

    style = {"description_width": "150px"}
    lay = W.Layout(width="420px")
    algo = W.Dropdown(options=ALGORITHMS.names(), value="tb", description="algorithm", style=style, layout=lay)
    mode = W.Dropdown(options=("async", "sync"), value="async", description="mode", style=style, layout=lay)
    beta = W.FloatLogSlider(value=0.1, base=10, min=-3, max=0.5, step=0.1, description="beta (KL coef.)",
                            readout_format=".3g", style=style, layout=lay)
    anneal = W.Checkbox(value=False, description="anneal beta (TB only)", style=style, layout=lay)
    beta_final = W.FloatLogSlider(value=0.02, base=10, min=-3, max=0.5, step=0.1, description="beta_final",
                                  readout_format=".3g", style=style, layout=lay)
    anneal_steps = W.IntSlider(value=100, min=1, max=1000, step=10, description="beta_anneal_steps",
                               style=style, layout=lay)
    lr = W.FloatLogSlider(value=5e-5, base=10, min=-6, max=-3, step=0.1, description="learning rate",
                          readout_format=".1e", style=style, layout=lay)
    k_gen = W.IntSlider(value=8, min=2, max=16, description="K (num_generations)", style=style, layout=lay)
    m = W.FloatSlider(value=0.8, min=0.0, max=1.0, step=0.05, description="m (recency_prob)",
                      style=style, layout=lay)
    inv_temp = W.FloatSlider(value=0.0, min=0.0, max=10.0, step=0.5, description="inv_temp",
                             style=style, layout=lay)
    sync_period = W.IntSlider(value=1, min=1, max=16, description="sync period k", style=style, layout=lay)
    searchers = W.IntSlider(value=1, min=1, max=4, description="searchers", style=style, layout=lay)
    budget = W.IntSlider(value=int(seconds), min=10, max=300, step=10, description="budget (s)",
                         style=style, layout=lay)
    run_btn = W.Button(description="Run", button_style="primary", icon="play")
    clear_btn = W.Button(description="Clear")
    stop_btn = W.Button(description="Stop", icon="stop")
    stop_event = threading.Event()
    status = W.HTML(value="Set the knobs and press Run.")
    image = W.Image(format="png", layout=W.Layout(width="900px"))
    state = {"runs": [], "busy": False}
    root = Path(output_root)

    def set_image(fig):
        image.value = _png(fig)

    def knobs() -> dict:
        return knob_overrides(algo=algo.value, beta=beta.value,
                              beta_final=beta_final.value if anneal.value else None,
                              beta_anneal_steps=anneal_steps.value, learning_rate=lr.value,
                              num_generations=k_gen.value, recency_prob=m.value,
                              inv_temp=inv_temp.value, sync_period=sync_period.value,
                              num_searchers=searchers.value, mode=mode.value)

    def work(overrides, out, label):
        t0 = time.time()
        try:
            res = run_and_plot(overrides, budget.value, out, live=True, on_update=set_image,
                               compare_with=list(state["runs"]), label=label, stop_event=stop_event)
            s = res["summary"] or {}
            state["runs"].append(out)
            status.value = (f"<b>{label}</b> done in {time.time() - t0:.0f} s: "
                            f"{s.get('trainer_steps')} updates, accuracy "
                            f"{100 * (s.get('accuracy_before') or 0):.1f}% -> "
                            f"{100 * (s.get('accuracy_after') or 0):.1f}%, staleness mean "
                            f"{s.get('staleness_mean') or 0:.2f}. Figure: {res['figure']}")
        except Exception as e:  # shown, never raised into the widget's thread
            status.value = f"<span style='color:#b00'>run failed: {type(e).__name__}: {e}</span>"
        finally:
            state["busy"] = False
            run_btn.disabled = False

    def on_run(_):
        from tba_lab.config import ConfigError

        if state["busy"]:
            return
        try:
            overrides = knobs()
            n = len(list(root.glob("run_*"))) if root.exists() else 0
            out = root / f"run_{n:02d}"
            make_config(overrides, budget.value, out)  # validate now, show errors at once
        except (ValueError, ConfigError) as e:
            status.value = f"<span style='color:#b00'>bad setting: {e}</span>"
            return
        label = f"{out.name} {algo.value} beta={beta.value:.3g}"
        state["busy"] = True
        stop_event.clear()
        run_btn.disabled = True
        status.value = f"running <b>{label}</b> for {budget.value} s (plus start-up and evaluation)..."
        threading.Thread(target=work, args=(overrides, out, label), daemon=True).start()

    def on_clear(_):
        if not state["busy"]:
            state["runs"].clear()
            image.value = b""
            status.value = "Cleared; the next run is drawn alone."

    def on_stop(_):
        if state["busy"]:
            stop_event.set()
            status.value = "stopping after the current update (the run so far is saved)..."

    run_btn.on_click(on_run)
    stop_btn.on_click(on_stop)
    clear_btn.on_click(on_clear)
    left = W.VBox([algo, mode, beta, anneal, beta_final, anneal_steps, lr])
    right = W.VBox([k_gen, m, inv_temp, sync_period, searchers, budget])
    return W.VBox([W.HBox([left, right]), W.HBox([run_btn, stop_btn, clear_btn]), status, image])


__all__ = ["moving_average", "read_run", "knob_overrides", "merge_overrides", "make_config", "draw_runs",
           "run_and_plot", "explorer"]
