"""Who was busy when: the searcher / trainer timeline of a run directory, and what it implies.

Reads what :func:`tba_lab.trainer.train` writes:

* ``searchers.jsonl``: one row per generation batch the trainer received, with ``t_start`` /
  ``t_end`` (seconds since training began), ``gen_seconds`` (sampling the responses),
  ``score_seconds`` (reward and reference log-probs), the policy ``version`` it was generated
  with, and ``trainer_step`` (trainer updates done when the trainer drained it from the queue);
* ``metrics.jsonl``: one row per trainer update, ending at ``wall_seconds`` and lasting
  ``update_seconds`` (loss, backward, optimizer step and, every k updates, the weight publish);
  ``reference_seconds`` is the trainer's reference pass since the previous update
  (``async.reference_pass: trainer``), drawn as busy just before the update
  (it ran somewhere in the gap); ``wait_seconds`` is the rest of the gap between the previous
  update's end and this one's start (draining the queue, sampling the replay buffer, or
  waiting for data); ``behaviour_kl`` is how off-policy the update's batch was, in nats per
  response (KL(mu || pi_theta) estimated on the batch, :func:`tba_lab.losses.behaviour_kl`);
* ``config.yaml`` (mode and sync period k) and ``summary.json``.

All times are **seconds since training began** (the trainer's clock starts after the
evaluation before training; the searchers start earlier, so their first batch can start at a
negative time).

Functions: :func:`load_timeline`, :func:`plot_timeline`, :func:`plot_behaviour_kl`,
:func:`busy_fraction`, :func:`fresh_staleness_max`, :func:`arrival_lags`, :func:`run_measurements`,
:func:`trainer_seconds`, :func:`time_per_update`, :func:`format_time_per_update`, :func:`write_timeline`,
:func:`plot_time_per_update`.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from tba_lab.actors.placement import available_cores
from tba_lab.runlog import read_jsonl_rows




def _run_dir(run_dir) -> Path:
    """``run_dir`` as a Path; FileNotFoundError unless it holds a run's ``metrics.jsonl``."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{run_dir} has no metrics.jsonl: pass the output_dir of a "
                                "tba_lab.trainer.train run")
    return run_dir


def _config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def trainer_seconds(row: dict) -> float:
    """Seconds the trainer worked on one update of ``metrics.jsonl``: ``update_seconds`` plus
    ``reference_seconds`` (its reference pass, 0 or absent when the searchers do it)."""
    return row.get("update_seconds", 0.0) + row.get("reference_seconds", 0.0)


def load_timeline(run_dir) -> dict:
    """Intervals of a run, in seconds since training began.

    Returns:
        dict with
          ``searchers``: {searcher_id: {"gen": [(start, end), ...], "score": [(start, end), ...],
          "version": [policy version of each batch], "trainer_step": [updates done when received]}},
          ``trainer``: {"update": [(start, end), ...], "wait": [(start, end), ...], "step": [...],
          "behaviour_kl": [nats per response of each update's batch, None where not logged]},
          ``publish``: [seconds at which new weights were published (end of every k-th update)],
          ``mode`` ("async"/"sync"), ``sync_period`` (k), ``wall_seconds`` (training length).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.jsonl`` (not a training run).
    """
    run_dir = _run_dir(run_dir)
    cfg = _config(run_dir)
    mode = (cfg.get("async") or {}).get("mode", "async")
    k = int((cfg.get("async") or {}).get("sync_period", 1))
    searchers: dict[int, dict] = {}
    for r in read_jsonl_rows(run_dir / "searchers.jsonl"):
        s = searchers.setdefault(int(r["searcher_id"]),
                                 {"gen": [], "score": [], "version": [], "trainer_step": []})
        mid = r["t_start"] + r["gen_seconds"]
        s["gen"].append((r["t_start"], mid))
        s["score"].append((mid, r["t_end"]))
        s["version"].append(int(r["version"]))
        s["trainer_step"].append(int(r.get("trainer_step", -1)))
    trainer = {"update": [], "wait": [], "step": [], "behaviour_kl": []}
    publish = []
    for m in read_jsonl_rows(run_dir / "metrics.jsonl"):
        end = m["wall_seconds"]
        start = end - trainer_seconds(m)
        trainer["update"].append((start, end))  # the reference pass counts as busy
        trainer["wait"].append((start - m.get("wait_seconds", 0.0), start))
        trainer["step"].append(int(m["step"]))
        trainer["behaviour_kl"].append(m.get("behaviour_kl"))  # absent: a run that did not log it
        if int(m["step"]) % k == 0:
            publish.append(end)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    wall = summary.get("wall_seconds") or (trainer["update"][-1][1] if trainer["update"] else 0.0)
    return {"searchers": dict(sorted(searchers.items())), "trainer": trainer, "publish": publish,
            "mode": mode, "sync_period": k, "wall_seconds": float(wall)}


def busy_fraction(intervals, window) -> float:
    """Fraction of ``window = (t0, t1)`` covered by the union of ``intervals``.

    Args:
        intervals: iterable of (start, end) pairs in seconds; they may overlap, touch, or reach
            outside the window (only the part inside counts, overlaps count once).
        window: (t0, t1) with t1 > t0.

    Returns:
        float in [0, 1].

    Raises:
        ValueError: if t1 <= t0.
    """
    t0, t1 = float(window[0]), float(window[1])
    if t1 <= t0:
        raise ValueError(f"window {window!r}: the end must be after the start")
    clipped = sorted((max(s, t0), min(e, t1)) for s, e in intervals if min(e, t1) > max(s, t0))
    covered, cur_s, cur_e = 0.0, None, None
    for s, e in clipped:
        if cur_e is None or s > cur_e:  # a gap: close the current run of intervals
            if cur_e is not None:
                covered += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        covered += cur_e - cur_s
    return covered / (t1 - t0)


def fresh_staleness_max(arrival_lag, sync_period):
    """Largest staleness a generation batch can have when the trainer draws it in RECENCY mode.

    The kit's semantics: weights are published (and ``mark_sync`` called) when the trainer's
    update count reaches a multiple of k, and the version of a batch is the update count of the
    weights it was generated with, so versions are multiples of k. A batch received when the
    trainer has done ``v + a`` updates (``a`` = ``arrival_lag``) stays in the "refreshed since
    the last sync" set until the next multiple of k after ``v + a``; the last update that can
    draw it in recency mode starts at that multiple minus 1, so its staleness there is

        k * floor(a / k) + k - 1.

    With a <= 2k - 1 (the batch arrives within k updates of the next publish) this is at most
    2k - 1, the "about 2k - 1" of docs/design.md sec. 2. Reward-mode draws of older prompts are not
    bounded by this (``buffer.max_prompts`` bounds them).

    Args:
        arrival_lag: int or integer numpy array, updates between publish and receipt (>= 0).
        sync_period: int or integer numpy array, k >= 1.

    Returns:
        int or integer numpy array of the same shape.
    """
    a = np.asarray(arrival_lag)
    k = np.asarray(sync_period)
    out = k * (a // k) + k - 1
    return int(out) if out.ndim == 0 else out


def arrival_lags(run_dir) -> list[int]:
    """``trainer_step - version`` of every generation batch: trainer updates done between the
    publish of the weights a batch was generated with and the batch's arrival in the buffer."""
    return [int(r["trainer_step"]) - int(r["version"])
            for r in read_jsonl_rows(Path(run_dir) / "searchers.jsonl") if "trainer_step" in r]


def run_measurements(run_dir) -> dict:
    """Headline timings of a run (what notebook 05's simulator takes as inputs).

    Returns:
        dict with ``mode``, ``sync_period``, ``num_searchers``, ``gen_seconds``,
        ``score_seconds`` (medians per generation batch), ``update_seconds`` (median per trainer
        update, its reference pass included: :func:`trainer_seconds`), ``updates_per_minute``, ``staleness_mean``, ``staleness_max`` (from
        ``summary.json``), plus ``batch_prompts``, ``group_size``, ``searcher_threads``,
        ``trainer_threads`` (the torch threads each process used: ``summary.json``'s
        ``placement``), ``trainer_steps`` and
        ``wall_seconds``.
    """
    run_dir = Path(run_dir)
    cfg = _config(run_dir)
    a, tr = cfg.get("async") or {}, cfg.get("training") or {}
    summary = json.loads((run_dir / "summary.json").read_text())
    batches = read_jsonl_rows(run_dir / "searchers.jsonl")
    updates = read_jsonl_rows(run_dir / "metrics.jsonl")
    mode = a.get("mode", "async")
    placed = summary.get("placement") or {}  # the resolved threads; absent: 1 per async process
    auto = 1 if mode == "async" else available_cores()  # the "0 = auto" rule in sync mode

    def med(rows, key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.median(vals), 4) if vals else None

    return {"mode": mode, "sync_period": int(a.get("sync_period", 1)),
            "num_searchers": int(a.get("num_searchers", 1)),
            "gen_seconds": med(batches, "gen_seconds"), "score_seconds": med(batches, "score_seconds"),
            "update_seconds": round(statistics.median(map(trainer_seconds, updates)), 4) if updates else None,
            "updates_per_minute": summary.get("updates_per_minute"),
            "staleness_mean": summary.get("staleness_mean"),
            "staleness_max": summary.get("staleness_max"),
            "batch_prompts": tr.get("num_prompts_per_step"), "group_size": tr.get("num_generations"),
            "searcher_threads": int(placed.get("searcher_threads") or a.get("searcher_threads") or auto),
            "trainer_threads": int(placed.get("trainer_threads") or a.get("trainer_threads") or auto),
            "trainer_steps": summary.get("trainer_steps"), "wall_seconds": summary.get("wall_seconds")}


def plot_timeline(run_dir, ax=None, window=None, title: str | None = None, legend: bool = True):
    """Draw who was busy when: one row per searcher (generation, then scoring) and one for the
    trainer (updates; the gaps before them as waiting/draining/sampling), with a tick at every
    weight publish.

    Args:
        run_dir: a :func:`tba_lab.trainer.train` output directory.
        ax: a matplotlib Axes to draw on (a new figure when None).
        window: (t0, t1) in seconds since training began (default: the whole run).
        title: axes title (default: mode and sync period).
        legend: draw the legend below the axes (turn off for all but one of stacked panels).

    Returns:
        the Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tl = load_timeline(run_dir)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * (1 + len(tl["searchers"]))))
    t0, t1 = window if window is not None else (0.0, tl["wall_seconds"])

    def bars(intervals, y, color, **kw):
        spans = [(s, e - s) for s, e in intervals if e > t0 and s < t1 and e > s]
        if spans:
            ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=color, **kw)

    labels = ["trainer"]
    bars(tl["trainer"]["wait"], 0, "0.85", edgecolor="0.6", hatch="//", linewidth=0.3)
    bars(tl["trainer"]["update"], 0, "C0", edgecolor="white", linewidth=0.3)  # + reference pass
    pubs = [t for t in tl["publish"] if t0 <= t <= t1]
    if pubs:
        ax.vlines(pubs, -0.45, 0.45, colors="k", linewidth=0.8)
    for i, (sid, s) in enumerate(tl["searchers"].items(), start=1):
        bars(s["gen"], i, "C1", edgecolor="white", linewidth=0.3)
        bars(s["score"], i, "C2", edgecolor="white", linewidth=0.3)
        labels.append(f"searcher {sid}")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlim(t0, t1)
    ax.set_xlabel("seconds since training began")
    ax.set_title(title or f"{tl['mode']} mode, sync period k = {tl['sync_period']}")
    ax.grid(axis="x", alpha=0.3)
    if not legend:
        return ax
    ax.legend(handles=[Patch(color="C0", label="trainer update (and its reference pass)"),
                       Patch(facecolor="0.85", edgecolor="0.6", hatch="//",
                             label="trainer between updates (drain, sample, wait)"),
                       Patch(color="C1", label="searcher generation"),
                       Patch(color="C2", label="searcher scoring (reward; ref log-probs when it does them)"),
                       plt.Line2D([], [], color="k", linewidth=0.8, label="weights published")],
              loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(labels) < 3 else -0.25),
              ncol=3, fontsize=8, frameon=False)
    return ax


def plot_behaviour_kl(run_dir, ax=None, window=None, label: str | None = None, color=None):
    """Draw off-policyness over time: each update's ``behaviour_kl`` (``metrics.jsonl``: the
    batch's mean of log mu(y|x) - log pi_theta(y|x), an estimate of KL(mu || pi_theta) in nats
    per response) at the end of the update, on the seconds axis of :func:`plot_timeline`.

    Args:
        run_dir: a :func:`tba_lab.trainer.train` output directory.
        ax: a matplotlib Axes to draw on (a new figure when None); several runs can share one.
        window: (t0, t1) in seconds since training began (default: the whole run).
        label: the line's legend label (default: none).
        color: the line's color (default: the Axes' next).

    Returns:
        the Axes. A run whose rows have no ``behaviour_kl`` draws nothing.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.jsonl`` (not a training run).
    """
    import matplotlib.pyplot as plt

    tl = load_timeline(run_dir)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.4))
    t0, t1 = window if window is not None else (0.0, tl["wall_seconds"])
    pts = [(end, kl) for (_, end), kl in zip(tl["trainer"]["update"], tl["trainer"]["behaviour_kl"])
           if kl is not None and t0 <= end <= t1]
    if pts:
        ax.plot(*zip(*pts), ".-", ms=3, lw=0.8, label=label, color=color)
    ax.axhline(0.0, color="0.5", lw=0.6)  # on-policy
    ax.set_xlim(t0, t1)
    ax.set(xlabel="seconds since training began", ylabel="behaviour KL (nats / response)",
           title="off-policyness of each update's batch: KL(mu || pi_theta)")
    ax.grid(alpha=0.3)
    return ax


# The parts of :func:`time_per_update`, in drawing order, with the log field each is the median of.
TRAINER_PARTS = {"update": "update_seconds", "reference": "reference_seconds", "wait": "wait_seconds"}
SEARCHER_PARTS = {"generation": "gen_seconds", "scoring": "score_seconds", "sync": "sync_seconds"}


def _median(rows: list[dict], key: str, absent=None):
    """Median of ``key`` over the rows that have it (``absent`` stands in for a missing key when
    not None); None when no row has it."""
    vals = [r.get(key, absent) for r in rows]
    vals = [float(v) for v in vals if v is not None]
    return float(statistics.median(vals)) if vals else None


def time_per_update(run_dir) -> dict:
    """Where the trainer's time per update and each searcher's time per batch go in one run.

    Reads a :func:`tba_lab.trainer.train` output directory:

    * ``metrics.jsonl``, one row per logged trainer update: ``update_seconds`` (loss, backward,
      optimizer step, publish), ``reference_seconds`` (the trainer's reference pass on the rows
      of that update's batch; a row without the field counts 0, as in :func:`trainer_seconds`)
      and ``wait_seconds`` (draining the queue, sampling the buffer, waiting for data; the
      first update's wait includes the initial fill);
    * ``searchers.jsonl``, one row per generation batch the trainer received: ``gen_seconds``
      (sampling the responses), ``score_seconds`` (rewards, and reference log-probs when the
      searchers do the reference pass) and ``sync_seconds`` (pulling and loading new weights
      before the batch; 0.0 when none were published since its previous batch);
    * ``summary.json`` (``updates_per_minute``, ``samples_generated``, ``wall_seconds``,
      ``placement.reference_pass``) and
      ``config.yaml`` (``async.mode``, ``async.num_searchers``, ``async.reference_pass``), when
      they exist.

    Every part is the **median** of its field, in **seconds** (per update for the trainer, per
    batch for the searchers), so one slow update (the first one, which waits for the initial
    fill) does not move it. Stacked parts are medians of each part, not the median of their sum.

    Returns:
        dict with ``mode``, ``num_searchers``, ``reference_pass`` (the resolved one from
        ``summary.json``'s placement, else the configured one, else None),
        ``updates_per_minute`` (``summary.json``'s) and ``samples_per_minute`` (rollouts
        generated per minute of ``wall_seconds``; both None without a summary), ``updates``
        and ``batches`` (rows read), ``trainer`` {"update", "reference", "wait"} (seconds per update; a part
        no row logged is None), ``searcher`` {"generation", "scoring", "sync"} (seconds per
        batch over all searchers' batches) and ``per_searcher`` {searcher_id: the same three
        and ``batches``}.

    Raises:
        FileNotFoundError: ``run_dir`` has no ``metrics.jsonl`` (not a training run).
    """
    run_dir = _run_dir(run_dir)
    a = _config(run_dir).get("async") or {}
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    updates = read_jsonl_rows(run_dir / "metrics.jsonl")
    batches = read_jsonl_rows(run_dir / "searchers.jsonl")

    def searcher_parts(rows):
        return {part: _median(rows, key) for part, key in SEARCHER_PARTS.items()}

    by_id: dict[int, list[dict]] = {}
    for b in batches:
        by_id.setdefault(int(b.get("searcher_id", 0)), []).append(b)
    return {
        "mode": a.get("mode", "async"), "num_searchers": int(a.get("num_searchers", len(by_id) or 1)),
        "reference_pass": ((summary.get("placement") or {}).get("reference_pass")
                           or a.get("reference_pass")),
        "updates_per_minute": summary.get("updates_per_minute"),
        "samples_per_minute": (60.0 * summary["samples_generated"] / summary["wall_seconds"]
                               if summary.get("wall_seconds") and "samples_generated" in summary
                               else None),
        "updates": len(updates), "batches": len(batches),
        "trainer": {part: _median(updates, key, absent=0.0 if part == "reference" else None)
                    for part, key in TRAINER_PARTS.items()},
        "searcher": searcher_parts(batches),
        "per_searcher": {sid: {**searcher_parts(rows), "batches": len(rows)}
                         for sid, rows in sorted(by_id.items())},
    }


def plot_time_per_update(legs: dict, axes=None, title: str | None = None, rate: bool = True):
    """Stacked bars of :func:`time_per_update` for several runs side by side: the trainer's
    seconds per update (update, reference pass, wait) on the left, the searchers' seconds per
    batch (generation, scoring, weight sync) on the right.

    Args:
        legs: {label: a :func:`time_per_update` dict, or any dict with its ``trainer`` and
            ``searcher`` parts (e.g. a :data:`tba_lab.lab.recorded.H200_2026_12_04` leg)}, in
            the order to draw. A part that is None (not logged or not recorded) is not drawn.
        axes: two matplotlib Axes (trainer, searcher); a new 1 x 2 figure when None.
        title: the start of both panels' titles (e.g. which machine).
        rate: write each leg's ``updates_per_minute`` above its trainer bar when it has one.

    Returns:
        the two Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    styles = {"update": dict(color="C0"), "reference": dict(color="C3"),
              "wait": dict(facecolor="0.85", edgecolor="0.6", hatch="//", linewidth=0.3),
              "generation": dict(color="C1"), "scoring": dict(color="C2"), "sync": dict(color="C4")}
    labels = list(legs)
    x = np.arange(len(labels))
    for ax, side, parts, unit in ((axes[0], "trainer", TRAINER_PARTS, "per update"),
                                  (axes[1], "searcher", SEARCHER_PARTS, "per batch")):
        bottom = np.zeros(len(labels))
        handles = []
        for part in parts:
            vals = np.array([legs[k][side].get(part) if legs[k][side].get(part) is not None
                             else np.nan for k in labels], dtype=float)
            ax.bar(x, np.nan_to_num(vals), 0.6, bottom=bottom, **styles[part])
            bottom += np.nan_to_num(vals)
            missing = " (not recorded)" if np.isnan(vals).all() else ""
            name = "weight sync" if part == "sync" else part
            handles.append(Patch(label=name + missing, **styles[part]))
        if side == "trainer" and rate:
            for xi, k, top in zip(x, labels, bottom):
                upm = legs[k].get("updates_per_minute")
                if upm:
                    ax.annotate(f"{upm:.0f} updates/min", (xi, top), ha="center", va="bottom",
                                fontsize=7, xytext=(0, 2), textcoords="offset points")
        ax.set_ylim(0, max(bottom.max(), 1e-9) * 1.4)  # room for the legend and the rates
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel(f"seconds {unit} (medians)", fontsize=8)
        ax.set_title(f"{title}: {side}, {unit}" if title else f"{side}, {unit}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(handles=handles, fontsize=7, loc="upper left", ncol=3, frameon=False)
    return axes


def format_time_per_update(legs: dict) -> str:
    """:func:`time_per_update` results as a text table, one row per leg: the trainer's medians
    (seconds per update: update, reference, wait), the searchers' medians over all their batches
    (seconds per batch: generation, scoring, sync), who ran the reference pass,
    ``updates_per_minute`` and ``samples_per_minute``; then, for a leg with more than one
    searcher in ``per_searcher``, one line per searcher. None (not logged or not recorded)
    prints as ``-``.

    Args:
        legs: {label: :func:`time_per_update` dict, or a dict with its ``trainer`` and
            ``searcher`` parts, e.g. a :data:`tba_lab.lab.recorded.H200_2026_12_04` leg}.
    """
    def sec(v):
        if v is None:
            return "-"
        if abs(v) >= 0.01 or v == 0:
            return f"{v:.3f}"
        text = f"{v:.4f}".rstrip("0")  # below 10 ms: to 0.1 ms, no trailing zeros
        return text + "0" if text.endswith(".") else text

    head = ["leg", "searchers", "reference pass", "update", "reference", "wait",
            "generation", "scoring", "weight sync", "updates/min", "samples/min"]
    rows = [head]
    for label, t in legs.items():
        rates = [t.get("updates_per_minute"), t.get("samples_per_minute")]
        rows.append([str(label), str(t.get("num_searchers", "-")), str(t.get("reference_pass") or "-")]
                    + [sec(t["trainer"].get(p)) for p in TRAINER_PARTS]
                    + [sec(t["searcher"].get(p)) for p in SEARCHER_PARTS]
                    + ["-" if r is None else f"{r:.0f}" for r in rates])
    widths = [max(len(r[j]) for r in rows) for j in range(len(head))]
    lines = ["  ".join(x.ljust(w) if j < 3 else x.rjust(w) for j, (x, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(0, "trainer: median seconds per update (update, reference, wait); searchers: "
                    "median seconds per batch (generation, scoring, weight sync)")
    for label, t in legs.items():
        per = t.get("per_searcher") or {}
        if len(per) > 1:
            for sid, p in per.items():
                lines.append(f"  {label}, searcher {sid}: generation {sec(p['generation'])}, "
                             f"scoring {sec(p['scoring'])}, weight sync {sec(p['sync'])} s per batch "
                             f"({p['batches']} batches)")
    return "\n".join(lines)


def write_timeline(run_dir, batches, updates, sync_period: int = 1, wall_seconds: float | None = None,
                   mode: str = "async") -> Path:
    """Write the records of a loop of one's own (notebook 04's) as the files
    :func:`load_timeline` reads, so that :func:`plot_timeline` and :func:`arrival_lags` draw it.

    Args:
        run_dir: folder to write ``searchers.jsonl``, ``metrics.jsonl``, ``config.yaml`` and
            ``summary.json`` into (created).
        batches: one dict per generation batch: ``searcher_id``, ``t_start``, ``t_end``,
            ``gen_seconds``, ``score_seconds``, ``version``, ``trainer_step`` (seconds since
            training began; ``trainer_step``: updates done when the trainer drained the batch).
        updates: one dict per trainer update: ``step`` (1, 2, ...), ``wall_seconds`` (its end),
            ``update_seconds``, ``wait_seconds``, and any other numbers (e.g. staleness).
        sync_period: k, weights published after every k-th update.
        wall_seconds: the training length (default: the last update's end).

    Returns:
        ``run_dir`` as a Path.
    """
    import yaml

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("searchers.jsonl", batches), ("metrics.jsonl", updates)):
        (run_dir / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"async": {"mode": mode,
                                                                   "sync_period": int(sync_period)}}))
    wall = wall_seconds if wall_seconds is not None else (updates[-1]["wall_seconds"] if updates else 0.0)
    (run_dir / "summary.json").write_text(json.dumps({"wall_seconds": float(wall)}) + "\n")
    return run_dir
