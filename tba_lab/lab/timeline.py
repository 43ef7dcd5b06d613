"""Who was busy when: the searcher / trainer timeline of a run directory, and what it implies
(and :func:`format_table`, the text tables of the lab's reports).

Reads what :func:`tba_lab.trainer.train` writes (fields in :mod:`tba_lab.runlog`):
``searchers.jsonl`` (a row per generation batch), ``metrics.jsonl`` (a row per trainer update),
``config.yaml`` and ``summary.json``. Times are **seconds since training began**; the searchers
start before that clock, so their first batch can start at a negative time.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from tba_lab.actors.placement import available_cores
from tba_lab.config import read_yaml_data
from tba_lab.runlog import read_json, read_jsonl_rows, trainer_seconds

# How each part is drawn, in :func:`plot_timeline` and :func:`plot_time_per_update` alike.
_STYLES = {"update": dict(facecolor="C0"), "reference": dict(facecolor="C3"),
           "wait": dict(facecolor="0.85", edgecolor="0.6", hatch="//", linewidth=0.3),
           "generation": dict(facecolor="C1"), "scoring": dict(facecolor="C2"),
           "sync": dict(facecolor="C4")}
# The parts of :func:`time_per_update` in drawing order, each the median of a log field.
TRAINER_PARTS = {"update": "update_seconds", "reference": "reference_seconds", "wait": "wait_seconds"}
SEARCHER_PARTS = {"generation": "gen_seconds", "scoring": "score_seconds", "sync": "sync_seconds"}
# The legend's text of each part :func:`plot_timeline` draws, in legend order.
_PART_NAMES = {"update": "trainer update (and its reference pass)",
               "reference": "trainer reference pass of drained batches, no update",
               "wait": "trainer between updates (drain, sample, wait)",
               "generation": "searcher generation",
               "scoring": "searcher scoring (reward; ref log-probs when it does them)"}


def _read_run(run_dir) -> tuple[dict, dict, list[dict], list[dict]]:
    """A run's ``config.yaml`` and ``summary.json`` ({} when not written yet), its
    ``searchers.jsonl`` and ``metrics.jsonl`` rows. FileNotFoundError without ``metrics.jsonl``."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl: pass the output_dir of a "
                                "tba_lab.trainer.train run")
    cfg = run_dir / "config.yaml"
    return (read_yaml_data(cfg) if cfg.exists() else {},
            read_json(run_dir / "summary.json") or {},
            read_jsonl_rows(run_dir / "searchers.jsonl"), read_jsonl_rows(run_dir / "metrics.jsonl"))


def _by_searcher(batches: list[dict]) -> dict[int, list[dict]]:
    """``searchers.jsonl`` rows by ``searcher_id`` (0 when not logged), ids in order."""
    by: dict[int, list[dict]] = {}
    for b in batches:
        by.setdefault(int(b.get("searcher_id", 0)), []).append(b)
    return dict(sorted(by.items()))


def _median(values, digits: int | None = 4, empty=None):
    """Median (float) of the values that are not None, rounded to ``digits`` decimals (None:
    not rounded); ``empty`` when there are none."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return empty
    return statistics.median(vals) if digits is None else round(statistics.median(vals), digits)


def load_timeline(run_dir) -> dict:
    """Intervals of a run: ``searchers`` {searcher_id: {"gen": [(start, end), ...], "score":
    [...]}}, ``trainer`` {"update": [...] (reference pass included), "wait": [...],
    "behaviour_kl": [per update, None where not logged]}, ``publish`` (the end of every k-th
    update), ``mode``, ``sync_period`` (k) and ``wall_seconds``. FileNotFoundError: not a run.
    """
    cfg, summary, batches, updates = _read_run(run_dir)
    a = cfg.get("async") or {}
    k = int(a.get("sync_period", 1))
    searchers = {i: {"gen": [(r["t_start"], r["t_start"] + r["gen_seconds"]) for r in rows],
                     "score": [(r["t_start"] + r["gen_seconds"], r["t_end"]) for r in rows]}
                 for i, rows in _by_searcher(batches).items()}
    update = [(m["wall_seconds"] - trainer_seconds(m), m["wall_seconds"]) for m in updates]
    trainer = {"update": update,
               "wait": [(s - m.get("wait_seconds", 0.0), s) for (s, _), m in zip(update, updates)],
               "behaviour_kl": [m.get("behaviour_kl") for m in updates]}
    publish = [m["wall_seconds"] for m in updates if int(m["step"]) % k == 0]
    wall = summary.get("wall_seconds") or (update[-1][1] if update else 0.0)
    return {"searchers": searchers, "trainer": trainer, "publish": publish,
            "mode": a.get("mode", "async"), "sync_period": k, "wall_seconds": float(wall)}


def busy_fraction(intervals, window) -> float:
    """Fraction in [0, 1] of ``window = (t0, t1)`` covered by the union of ``intervals``
    ((start, end) pairs; overlaps count once, only the part inside the window counts).
    ValueError if t1 <= t0."""
    t0, t1 = float(window[0]), float(window[1])
    if t1 <= t0:
        raise ValueError(f"window {window!r}: the end must be after the start")
    covered, reached = 0.0, t0
    for s, e in sorted((max(s, t0), min(e, t1)) for s, e in intervals):
        if e > max(s, reached):  # sorted by start: only the part after `reached` is new
            covered += e - max(s, reached)
            reached = e
    return covered / (t1 - t0)


def fresh_staleness_max(arrival_lag, sync_period):
    """Largest staleness a generation batch can have when the trainer draws it in RECENCY mode.

    Weights are published when the update count reaches a multiple of k, so batch versions are
    multiples of k. A batch received ``a`` (``arrival_lag``) updates after its version ``v``
    stays "refreshed since the last sync" until the next multiple of k after ``v + a``; the last
    update that can draw it starts one before that, at staleness

        k * floor(a / k) + k - 1,

    at most 2k - 1 when a <= 2k - 1 (docs/design.md sec. 2); reward-mode draws of older prompts
    are bounded by ``buffer.max_prompts`` instead. Takes and returns ints or integer arrays.
    """
    a, k = np.asarray(arrival_lag), np.asarray(sync_period)
    out = k * (a // k) + k - 1
    return int(out) if out.ndim == 0 else out


def arrival_lags(run_dir) -> list[int]:
    """``trainer_step - version`` of every generation batch: trainer updates done between the
    publish of the weights a batch was generated with and the batch's arrival in the buffer."""
    return [int(r["trainer_step"]) - int(r["version"])
            for r in read_jsonl_rows(Path(run_dir) / "searchers.jsonl") if "trainer_step" in r]


def run_measurements(run_dir) -> dict:
    """Headline timings of a run (the simulator's inputs): ``mode``, ``sync_period``,
    ``num_searchers``; medians in seconds to 4 decimals, None without rows: ``gen_seconds``,
    ``score_seconds`` per batch, ``update_seconds`` per update (:func:`trainer_seconds`);
    ``batch_prompts``, ``group_size``, ``searcher_threads`` and ``trainer_threads`` (as
    placed, else as configured); ``summary.json``'s ``updates_per_minute``, ``staleness_mean``,
    ``staleness_max``, ``trainer_steps``, ``wall_seconds``, and ``samples_per_minute`` (None
    without ``samples_generated``). FileNotFoundError: not a run.
    """
    return _measurements(*_read_run(run_dir))


def _measurements(cfg: dict, summary: dict, batches: list[dict], updates: list[dict]) -> dict:
    """:func:`run_measurements` of a run already read by :func:`_read_run`."""
    a, tr = cfg.get("async") or {}, cfg.get("training") or {}
    mode = a.get("mode", "async")
    placed = summary.get("placement") or {}  # the resolved threads; absent: 1 per async process
    auto = 1 if mode == "async" else available_cores()  # the "0 = auto" rule in sync mode
    wall = summary.get("wall_seconds")
    return {"mode": mode, "sync_period": int(a.get("sync_period", 1)),
            "num_searchers": int(a.get("num_searchers", 1)),
            "gen_seconds": _median(b.get("gen_seconds") for b in batches),
            "score_seconds": _median(b.get("score_seconds") for b in batches),
            "update_seconds": _median(map(trainer_seconds, updates)),
            "batch_prompts": tr.get("num_prompts_per_step"), "group_size": tr.get("num_generations"),
            "searcher_threads": int(placed.get("searcher_threads") or a.get("searcher_threads") or auto),
            "trainer_threads": int(placed.get("trainer_threads") or a.get("trainer_threads") or auto),
            "samples_per_minute": (60.0 * summary["samples_generated"] / wall
                                   if wall and "samples_generated" in summary else None),
            **{key: summary.get(key) for key in ("updates_per_minute", "staleness_mean",
                                                 "staleness_max", "trainer_steps", "wall_seconds")}}


def plot_timeline(run, ax=None, window=None, title: str | None = None, legend: bool = True,
                  last: float | None = None):
    """Draw who was busy when on ``ax`` (new figure if None) and return it. ``run``: a run
    folder (a row per searcher: generation, scoring; one for the trainer: updates, the gaps
    before them; a tick at every weight publish) or a :class:`tba_lab.lab.simulate.SimResult`
    (a row per actor of its ``intervals``; a simulated generation includes its scoring).
    ``window``: (t0, t1), default the whole run, or with ``last`` its last ``last`` seconds;
    ``title``: default mode and k (a run folder) or "simulated"; ``legend``: below the axes
    (off for all but one of stacked panels)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    simulated = hasattr(run, "intervals")  # a SimResult: {actor: [(start, end, kind)]}
    if simulated:
        rows, publish, end = run.intervals, [], run.duration
        parts = ["update", "reference", "generation"]
        title, clock = title or "simulated", "seconds since training began (simulated)"
    else:
        tl = load_timeline(run)
        rows = {"trainer": [(s, e, "wait") for s, e in tl["trainer"]["wait"]]
                + [(s, e, "update") for s, e in tl["trainer"]["update"]]}
        for sid, s in tl["searchers"].items():
            rows[f"searcher {sid}"] = ([(a, b, "generation") for a, b in s["gen"]]
                                       + [(a, b, "scoring") for a, b in s["score"]])
        parts, publish = ["update", "wait", "generation", "scoring"], tl["publish"]
        end = tl["wall_seconds"]
        title = title or f"{tl['mode']} mode, sync period k = {tl['sync_period']}"
        clock = "seconds since training began"
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * len(rows)))
    t0, t1 = window or (max(0.0, end - last) if last else 0.0, end)
    for y, jobs in enumerate(rows.values()):
        for part in dict.fromkeys(p for _, _, p in jobs):  # in the order the jobs list them
            spans = [(s, e - s) for s, e, p in jobs if p == part and e > t0 and s < t1 and e > s]
            style = {"edgecolor": "white", "linewidth": 0.3, **_STYLES[part]}
            ax.broken_barh(spans, (y - 0.35, 0.7), **style)
    ax.vlines([t for t in publish if t0 <= t <= t1], -0.45, 0.45, colors="k", linewidth=0.8)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set(ylim=(-0.6, len(rows) - 0.4), xlim=(t0, t1), xlabel=clock, title=title)
    ax.grid(axis="x", alpha=0.3)
    if legend:
        handles = [Patch(label=text, **_STYLES[part]) for part, text in _PART_NAMES.items()
                   if part in parts]
        if not simulated:  # the simulation does not record its publishes
            handles.append(plt.Line2D([], [], color="k", linewidth=0.8, label="weights published"))
        ax.legend(handles=handles, loc="upper center",
                  bbox_to_anchor=(0.5, -0.35 if len(rows) < 3 else -0.25),
                  ncol=3, fontsize=8, frameon=False)
    return ax


def plot_behaviour_kl(run_dir, ax=None, label: str | None = None, color=None):
    """Draw each update's ``behaviour_kl`` (KL(mu || pi_theta) in nats per response) at its end,
    on :func:`plot_timeline`'s axis (``ax``: several runs can share one; ``label``, ``color``:
    the line's). Returns the Axes; rows without it draw nothing."""
    import matplotlib.pyplot as plt

    tl = load_timeline(run_dir)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.4))
    pts = [(end, kl) for (_, end), kl in zip(tl["trainer"]["update"], tl["trainer"]["behaviour_kl"])
           if kl is not None]
    if pts:
        ax.plot(*zip(*pts), ".-", ms=3, lw=0.8, label=label, color=color)
    ax.axhline(0.0, color="0.5", lw=0.6)  # on-policy
    ax.set(xlim=(0.0, tl["wall_seconds"]), xlabel="seconds since training began",
           ylabel="behaviour KL (nats / response)",
           title="off-policyness of each update's batch: KL(mu || pi_theta)")
    ax.grid(alpha=0.3)
    return ax


def time_per_update(run_dir) -> dict:
    """Where the trainer's time per update and the searchers' per batch go in one run: the
    **median** seconds (4 decimals) of each field of :data:`TRAINER_PARTS` (``trainer``) and
    :data:`SEARCHER_PARTS` (``searcher``, and ``per_searcher`` with ``batches``), None where not
    logged; with ``mode``, ``num_searchers``, ``reference_pass``, the summary's rates (None
    without one) and the rows read (``updates``, ``batches``). FileNotFoundError: not a run.
    """
    cfg, summary, batches, updates = run = _read_run(run_dir)
    a, m = cfg.get("async") or {}, _measurements(*run)

    def searcher_parts(rows):
        return {part: _median(r.get(key) for r in rows) for part, key in SEARCHER_PARTS.items()}

    by_id = _by_searcher(batches)
    return {
        "mode": m["mode"], "num_searchers": int(a.get("num_searchers", len(by_id) or 1)),
        "reference_pass": ((summary.get("placement") or {}).get("reference_pass")
                           or a.get("reference_pass")),
        **{key: m[key] for key in ("updates_per_minute", "samples_per_minute")},
        "updates": len(updates), "batches": len(batches),
        "trainer": {part: _median(r.get(key, 0.0 if part == "reference" else None) for r in updates)
                    for part, key in TRAINER_PARTS.items()},
        "searcher": searcher_parts(batches),
        "per_searcher": {sid: {**searcher_parts(rows), "batches": len(rows)}
                         for sid, rows in by_id.items()},
    }


def plot_time_per_update(legs: dict, axes=None, title: str | None = None):
    """Stacked bars of several runs' :func:`time_per_update` on two Axes (``axes``, default a
    new 1 x 2 figure), returned: trainer seconds per update, searcher seconds per batch.
    ``legs``: {label: a :func:`time_per_update` dict or a
    :data:`tba_lab.lab.recorded.H200_2026_12_04` leg}, in order; None parts are not drawn.
    ``title`` starts both titles; ``updates_per_minute`` is written above the trainer bars.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    labels = list(legs)
    x = np.arange(len(labels))
    for ax, side, parts, unit in ((axes[0], "trainer", TRAINER_PARTS, "per update"),
                                  (axes[1], "searcher", SEARCHER_PARTS, "per batch")):
        bottom = np.zeros(len(labels))
        for part in parts:
            vals = np.array([legs[k][side].get(part) for k in labels], dtype=float)  # None: nan
            name = ("weight sync" if part == "sync" else part) + (
                " (not recorded)" if np.isnan(vals).all() else "")
            ax.bar(x, np.nan_to_num(vals), 0.6, bottom=bottom, label=name, **_STYLES[part])
            bottom += np.nan_to_num(vals)
        if side == "trainer":
            for xi, k, top in zip(x, labels, bottom):
                upm = legs[k].get("updates_per_minute")
                if upm:
                    ax.annotate(f"{upm:.0f} updates/min", (xi, top), ha="center", va="bottom",
                                fontsize=7, xytext=(0, 2), textcoords="offset points")
        ax.set_ylim(0, max(bottom.max(), 1e-9) * 1.4)  # room for the legend and the rates
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel(f"seconds {unit} (medians)", fontsize=8)
        ax.set_title(f"{title + ': ' if title else ''}{side}, {unit}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", ncol=3, frameon=False)
    return axes


def format_table(rows: list[dict], columns: list[str], markdown: bool = False) -> str:
    """Rows of dicts as a fixed-width text table, or a markdown one (missing and NaN: '-')."""
    def cell(v):
        if v is None or isinstance(v, (float, np.floating)) and math.isnan(v):
            return "-"
        if isinstance(v, (float, np.floating)):
            return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
        return str(v)
    table = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    if markdown:
        table.insert(1, ["---"] * len(columns))
        return "\n".join("| " + " | ".join(row) + " |" for row in table)
    widths = [max(map(len, column)) for column in zip(*table)]
    table.insert(1, ["-" * w for w in widths])
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in table)


def format_time_per_update(legs: dict) -> str:
    """``legs`` (as in :func:`plot_time_per_update`) as a text table, a row per leg, then a line
    per searcher of a leg with several in ``per_searcher``; None prints as ``-``."""
    def sec(v):  # to 1 ms; below 10 ms to 0.1 ms, without trailing zeros
        if v is None:
            return "-"
        return f"{v:.3f}" if abs(v) >= 0.01 or v == 0 else f"{v:.4f}".rstrip("0").rstrip(".")

    head = ["leg", "searchers", "reference pass", "update", "reference", "wait",
            "generation", "scoring", "weight sync", "updates/min", "samples/min"]
    rows = []
    for label, t in legs.items():
        rates = [t.get("updates_per_minute"), t.get("samples_per_minute")]
        rows.append(dict(zip(head, [str(label), str(t.get("num_searchers", "-")),
                                    str(t.get("reference_pass") or "-")]
                             + [sec(t["trainer"].get(p)) for p in TRAINER_PARTS]
                             + [sec(t["searcher"].get(p)) for p in SEARCHER_PARTS]
                             + ["-" if r is None else f"{r:.0f}" for r in rates])))
    lines = ["trainer: median seconds per update (update, reference, wait); searchers: "
             "median seconds per batch (generation, scoring, weight sync)",
             format_table(rows, head)]
    lines += [f"  {label}, searcher {sid}: generation {sec(p['generation'])}, scoring "
              f"{sec(p['scoring'])}, weight sync {sec(p['sync'])} s per batch "
              f"({p['batches']} batches)"
              for label, t in legs.items() if len(t.get("per_searcher") or {}) > 1
              for sid, p in t["per_searcher"].items()]
    return "\n".join(lines)


def write_timeline(run_dir, batches, updates, sync_period: int = 1,
                   wall_seconds: float | None = None) -> Path:
    """Write a loop of one's own (notebook 04's, async) as the files :func:`load_timeline`
    reads: ``batches`` and ``updates`` are rows of ``searchers.jsonl`` and ``metrics.jsonl``;
    ``wall_seconds`` defaults to the last update's end. Returns ``run_dir`` (created)."""
    import yaml

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("searchers.jsonl", batches), ("metrics.jsonl", updates)):
        (run_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"async": {"mode": "async",
                                                                   "sync_period": int(sync_period)}}))
    wall = wall_seconds if wall_seconds is not None else (updates[-1]["wall_seconds"] if updates else 0.0)
    (run_dir / "summary.json").write_text(json.dumps({"wall_seconds": float(wall)}) + "\n")
    return run_dir
