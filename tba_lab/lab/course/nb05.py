"""Notebook 05 (scaling out): exercises, and the notebook's measuring and plotting helpers.

Exercises
    05.sync_throughput   updates per minute of strict alternation (the sync pipeline)
    05.async_throughput  updates and batches per minute with n searchers sharing c cores

The references live in :mod:`tba_lab.lab.simulate` (the simulator refines both with events, a
queue and the replay buffer). The helpers below run the notebook's three short runs, compare
them with the simulator and draw its figures; each prints what it measured.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tba_lab.lab.course import Exercise
from tba_lab.lab.simulate import (async_throughput, format_table, load_measured, measure_run,
                                  plot_sim_timeline, simulate_run, sync_updates_per_minute)

SMOKE_NOTE = "SMOKE: start-up dominated (3 updates per run), these rates are not results"

# the three measured runs: TB, default settings, one in sync mode and two in async mode
RUNS = {"sync": {"async": {"mode": "sync"}},
        "async_1": {"async": {"mode": "async", "num_searchers": 1}},
        "async_2": {"async": {"mode": "async", "num_searchers": 2}}}

TABLE_COLUMNS = ["run", "gen_seconds", "score_seconds", "update_seconds", "updates_in_budget",
                 "budget_updates_per_minute", "steady_updates_per_minute", "samples_per_minute",
                 "staleness_mean", "staleness_max"]
COMPARISON_COLUMNS = ["case", "meas_budget", "sim_budget", "err_budget_%", "meas_steady",
                      "sim_steady", "err_steady_%", "closed_form", "meas_stale", "sim_stale",
                      "meas_stale_max", "sim_stale_max"]


@dataclass
class Setup:
    """The notebook's settings.

    Attributes:
        out: the output folder (figures, metrics.json, ``runs/<name>/``).
        smoke: the tiny configuration (3 updates per run on B = 8 prompts x K = 4).
        seed: every run's and every simulation's seed.
        cores: ``os.cpu_count()``.
        run_seconds: training budget of each measured run, seconds (start-up and the
            50-problem evaluations before and after come on top).
        run_overrides: config overrides every measured run adds (SMOKE's small batches).
        sim_seconds: simulated seconds per what-if point.
    """
    out: Path
    smoke: bool
    seed: int
    cores: int
    run_seconds: float
    run_overrides: dict = field(default_factory=dict)
    sim_seconds: float = 120.0


def setup(output_dir, smoke: bool, seed: int) -> Setup:
    """Create the output folder, print the machine, return the notebook's :class:`Setup`."""
    import torch

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    smoke_run = {"training": {"max_steps": 3, "num_prompts_per_step": 8, "num_generations": 4},
                 "buffer": {"initial_fill": 32}}
    s = Setup(out=out, smoke=smoke, seed=seed, cores=os.cpu_count() or 1,
              run_seconds=60 if smoke else 40, run_overrides=smoke_run if smoke else {},
              sim_seconds=30 if smoke else 120)
    print(f"{s.cores} CPU cores, torch {torch.__version__}, CUDA available: "
          f"{torch.cuda.is_available()}; runs of {s.run_seconds} s of training"
          + (" (SMOKE: 3 updates each)" if smoke else ""))
    return s


# ---------------------------------------------------------------- section 2: measure
def measure_runs(s: Setup) -> tuple[dict, dict]:
    """Train :data:`RUNS` one after another and print their medians and rates.

    Returns:
        (measured, loads): :func:`tba_lab.lab.simulate.run_timings` of each run by name, and
        the machine's 1-minute load average just before each run.
    """
    measured, loads = {}, {}
    for name, overrides in RUNS.items():
        t0, loads[name] = time.time(), os.getloadavg()[0]
        measured[name] = measure_run({**overrides, **s.run_overrides}, s.out / "runs" / name,
                                     s.run_seconds, seed=s.seed)
        print(f"{name}: {time.time() - t0:.0f} s including start-up and evaluation "
              f"(1-minute load average before it: {loads[name]:.1f} on {s.cores} cores)")
    print()
    print(format_table([{"run": n, **m} for n, m in measured.items()], TABLE_COLUMNS))
    if s.smoke:
        print(SMOKE_NOTE)
    return measured, loads


def contention(measured: dict, cores: int, smoke: bool = False) -> dict:
    """Compare the slowdown a second searcher brought with processor sharing's prediction.

    Prints the predicted and measured ratios of the median durations (``async_2`` over
    ``async_1``), and the steady trainer updates and samples generated per minute of both.

    Returns:
        {"predicted": processor sharing's slowdown (float), "batch_ratio": searcher batch
        (gen + score) ratio, "update_ratio": trainer update ratio}.
    """
    m1, m2 = measured["async_1"], measured["async_2"]
    predicted = max(1.0, 3 / cores) / max(1.0, 2 / cores)
    batch = (m2["gen_seconds"] + m2["score_seconds"]) / (m1["gen_seconds"] + m1["score_seconds"])
    update = m2["update_seconds"] / m1["update_seconds"]
    print(f"processor sharing predicts: every job {predicted:.2f}x slower with 2 searchers than "
          f"with 1 ({cores} cores)")
    print(f"measured: searcher batch {batch:.2f}x, trainer update {update:.2f}x")
    excess = {"searcher batch": batch / predicted, "trainer update": update / predicted}
    if all(abs(x - 1) <= 0.15 for x in excess.values()):
        verdict = "both within 15% of the prediction"
    elif any(x > 1.15 for x in excess.values()):
        verdict = "slower than processor sharing explains: other programs were probably competing"
    else:
        verdict = "less slowdown than predicted"
    print("measured / predicted slowdown: " + ", ".join(f"{k} {x:.2f}" for k, x in excess.items())
          + f" ({verdict})")
    u1, u2 = m1["steady_updates_per_minute"], m2["steady_updates_per_minute"]
    s1, s2 = m1["samples_per_minute"], m2["samples_per_minute"]
    print(f"trainer updates/min (steady): {u1:.0f} -> {u2:.0f} "
          f"({'fewer' if u2 < u1 else 'not fewer'} with the second searcher)")
    print(f"samples generated per minute: {s1:.0f} -> {s2:.0f} "
          f"({'more' if s2 > s1 else 'not more'} with the second searcher)")
    print(f"staleness mean: {m1['staleness_mean'] or 0:.2f} -> {m2['staleness_mean'] or 0:.2f}")
    if smoke:
        print(SMOKE_NOTE)
    return {"predicted": predicted, "batch_ratio": batch, "update_ratio": update}


def time_split(s: Setup) -> dict:
    """Split each run's time per update into its parts, draw and print them.

    Returns:
        :func:`tba_lab.lab.timeline.time_per_update` of each run in :data:`RUNS`, by name.
    """
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import format_time_per_update, plot_time_per_update, time_per_update

    split = {name: time_per_update(s.out / "runs" / name) for name in RUNS}
    axes = plot_time_per_update(split, title=f"this machine ({s.cores} cores)")
    axes[0].figure.tight_layout()
    axes[0].figure.savefig(s.out / "time_per_update.png", dpi=110)
    plt.show()
    print(format_time_per_update(split))
    if s.smoke:
        print(SMOKE_NOTE)
    return split


def plot_recorded(out: Path) -> None:
    """Draw and print the time per update recorded on one H200 with 16 cores
    (:mod:`tba_lab.lab.recorded`, the kit before ``reference_pass: auto``)."""
    import matplotlib.pyplot as plt

    from tba_lab.lab import recorded
    from tba_lab.lab.timeline import format_time_per_update, plot_time_per_update

    print("recorded:", recorded.SOURCE)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4))
    plot_time_per_update(recorded.legs(recorded.CPU_LEGS), axes=axes[0],
                         title="16 CPU cores, async TB")
    plot_time_per_update(recorded.legs(recorded.GPU_LEGS), axes=axes[1], title="one H200")
    fig.suptitle(f"recorded {recorded.DATE}, {recorded.MACHINE}, kit at {recorded.COMMIT} "
                 f"(old default), seed {recorded.SEED}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "time_per_update_h200.png", dpi=110)
    plt.show()
    print(format_time_per_update(recorded.H200_2026_12_04))


# ---------------------------------------------------------------- sections 3 and 4: simulate
def plot_sim_timelines(measured: dict, s: Setup) -> dict:
    """Simulate each run from its own durations (``cores=None``: they already include the run's
    contention) and draw the last three cycles of each.

    Returns:
        the :class:`tba_lab.lab.simulate.SimResult` of each run, by name.
    """
    import matplotlib.pyplot as plt

    sims = {name: simulate_run(m, cores=None, seed=s.seed) for name, m in measured.items()}
    fig, axes = plt.subplots(len(sims), 1, figsize=(10, 6.8))
    for ax, (name, res) in zip(axes, sims.items()):
        m = measured[name]
        end = m["budget_seconds"]
        span = max(4.0, 3 * (m["gen_seconds"] + m["score_seconds"] + m["update_seconds"]))
        plot_sim_timeline(res, ax=ax, window=(max(0.0, end - span), end),
                          title=f"simulated {name}: {res.updates_per_minute:.0f} updates/min, "
                                f"staleness mean {res.staleness_mean:.2f}")
    fig.tight_layout()
    fig.savefig(s.out / "sim_timeline.png", dpi=110)
    plt.show()
    return sims


def _error(pred, meas):
    """(pred - meas) / meas in percent, or None when the measurement is missing or zero."""
    return 100 * (pred - meas) / meas if meas else None


def comparison(case: str, m: dict, res, closed) -> dict:
    """One row of the comparison table: measured and simulated rates (budget and steady,
    updates per minute), their relative errors (%), the closed form, and staleness."""
    meas_b, meas_s = m.get("budget_updates_per_minute"), m.get("steady_updates_per_minute")
    return {"case": case, "meas_budget": meas_b, "sim_budget": res.updates_per_minute,
            "err_budget_%": _error(res.updates_per_minute, meas_b),
            "meas_steady": meas_s, "sim_steady": res.steady_updates_per_minute,
            "err_steady_%": _error(res.steady_updates_per_minute, meas_s),
            "closed_form": closed,
            "meas_stale": m["staleness_mean"], "sim_stale": res.staleness_mean,
            "meas_stale_max": m["staleness_max"], "sim_stale_max": res.staleness_max}


def closed_form(m: dict, num_searchers: int | None = None, cores: int | None = None) -> float:
    """Updates per minute of section 1's closed form for the durations of run ``m``."""
    if m["mode"] == "sync":
        return float(sync_updates_per_minute(m["gen_seconds"], m["score_seconds"],
                                             m["update_seconds"]))
    return async_throughput(m["gen_seconds"], m["score_seconds"], m["update_seconds"],
                            num_searchers or m["num_searchers"], cores)[0]


def predictions(measured: dict, sims: dict, s: Setup) -> list[dict]:
    """The comparison rows: each run from its own durations (consistency), then the real
    prediction, ``async_2`` from the durations of ``async_1`` with processor sharing on
    ``s.cores`` cores (last row). Prints the table."""
    rows = [comparison(f"{name} (own timings)", m, sims[name], closed_form(m))
            for name, m in measured.items()]
    pred = simulate_run(measured["async_2"], timings=measured["async_1"], cores=s.cores,
                        seed=s.seed)
    rows.append(comparison("async_2 from async_1 timings", measured["async_2"], pred,
                           closed_form(measured["async_1"], 2, s.cores)))
    print("updates per minute (measured, simulated, closed form) and staleness mean / max")
    print(format_table(rows, COMPARISON_COLUMNS))
    return rows


def largest_error(rows: list[dict], key: str) -> str:
    """The relative error (%, with its sign) of largest magnitude among ``rows``, or "-"."""
    errs = [r[key] for r in rows if r.get(key) is not None and not np.isnan(r[key])]
    return f"{max(errs, key=abs):+.1f}%" if errs else "-"


def print_errors(rows: list[dict], loads: dict, c: dict, cores: int, smoke: bool) -> None:
    """The lines under the comparison table: the load before each run, the second searcher's
    slowdown (``c``: :func:`contention`), the prediction's error and the consistency rows'."""
    pred = rows[-1]
    print("load average before each run: " + ", ".join(f"{n} {v:.1f}" for n, v in loads.items())
          + f" (on {cores} cores)")
    print(f"second searcher: jobs {c['batch_ratio']:.2f}x (searcher batch) and "
          f"{c['update_ratio']:.2f}x (trainer update) slower; processor sharing predicts "
          f"{c['predicted']:.2f}x")
    steady, budget = pred["err_steady_%"], pred["err_budget_%"]
    print(f"prediction of async_2 from async_1: steady rate "
          + (f"{steady:+.1f}%" if steady is not None else "-") + ", budget rate "
          + (f"{budget:+.1f}%" if budget is not None else "-")
          + f" (the trainer's measured / predicted slowdown alone would give "
            f"{100 * (c['update_ratio'] / c['predicted'] - 1):+.1f}%)")
    own = rows[:-1]
    print(f"consistency rows, largest error: async steady {largest_error(own[1:], 'err_steady_%')}, "
          f"budget {largest_error(own[1:], 'err_budget_%')}; sync steady "
          f"{largest_error(own[:1], 'err_steady_%')}, budget {largest_error(own[:1], 'err_budget_%')}")
    if smoke:
        print(SMOKE_NOTE)


def notebook04_rows(out: Path, seed: int) -> list[dict]:
    """Simulate notebook 04's runs (``../04_async_searchers/measured.json``) from their own
    durations and print the comparison; [] (with a note) when notebook 04 has not run."""
    rows04 = load_measured(out.parent / "04_async_searchers" / "measured.json")
    if not rows04:
        print("no ../04_async_searchers/measured.json: run notebook 04 first (or tba-lab "
              "reproduce); the comparison above uses this notebook's own runs only")
        return []
    table = []
    for r in rows04:
        res = simulate_run(r, cores=None, seed=seed)
        name = f"04 {r['mode']} k={r['sync_period']} ({r['source']})"
        if "budget_updates_per_minute" in r:
            table.append(comparison(name, r, res, None))
        else:  # measured.json only: summary's rate over wall_seconds, simulated likewise
            meas = r["updates_per_minute"]
            table.append({"case": name, "meas_budget": meas, "sim_budget": res.updates_per_minute,
                          "err_budget_%": _error(res.updates_per_minute, meas),
                          "meas_stale": r["staleness_mean"], "sim_stale": res.staleness_mean,
                          "meas_stale_max": r["staleness_max"], "sim_stale_max": res.staleness_max})
    print(format_table(table, COMPARISON_COLUMNS))
    return table


# ---------------------------------------------------------------- section 5: what if
@dataclass
class WhatIf:
    """The simulated sweeps of section 5.

    Attributes:
        ns: searcher counts; sweep: {label: [SimResult per n]} on this machine's cores and
        with one device per actor; ks: sync periods; k_runs: {publish seconds: [SimResult per
        k]} (0.0: free publish; one update: the hypothetical costly one); sync_ref: the sync
        run simulated from its own durations.
    """
    ns: list
    sweep: dict
    ks: list
    k_runs: dict
    sync_ref: object
    here: str


def what_if(measured: dict, s: Setup) -> WhatIf:
    """Simulate n = 1..6 searchers (1..4 in SMOKE) and sync periods k = 1..16 (1..8) from the
    durations of ``async_1``, ``s.sim_seconds`` each, searchers starting at once."""
    base = measured["async_1"]
    common = dict(duration=s.sim_seconds, searcher_start_seconds=0.0, max_steps=0, seed=s.seed)
    sync_ref = simulate_run(measured["sync"], cores=None, duration=s.sim_seconds, max_steps=0,
                            seed=s.seed)
    ns = list(range(1, 5 if s.smoke else 7))
    here = f"{s.cores} cores (this machine)"
    sweep = {label: [simulate_run({**base, "num_searchers": n}, timings=base, cores=cores, **common)
                     for n in ns]
             for cores, label in ((s.cores, here), (None, "one device per actor"))}
    ks = [1, 2, 4, 8] if s.smoke else [1, 2, 4, 8, 16]
    k_runs = {p: [simulate_run({**base, "sync_period": k}, timings=base, cores=s.cores,
                               publish_seconds=p, **common) for k in ks]
              for p in (0.0, base["update_seconds"])}
    return WhatIf(ns=ns, sweep=sweep, ks=ks, k_runs=k_runs, sync_ref=sync_ref, here=here)


def plot_what_if(w: WhatIf, base: dict, s: Setup) -> None:
    """Four panels: (a) trainer updates per minute and (b) fresh rollouts per minute against n,
    (c) the staleness distribution at k = 1 and 4, (d) updates per minute against k."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    ax = axes[0, 0]
    for i, (label, runs) in enumerate(w.sweep.items()):
        ax.plot(w.ns, [r.steady_updates_per_minute for r in runs], "o-", color=f"C{i}",
                label=f"simulated, {label}")
        closed = [async_throughput(base["gen_seconds"], base["score_seconds"],
                                   base["update_seconds"], n, s.cores if label == w.here else None)[0]
                  for n in w.ns]
        ax.plot(w.ns, closed, "--", color=f"C{i}", alpha=0.6, label="closed form (all busy)")
    ax.axhline(w.sync_ref.steady_updates_per_minute, color="0.4", lw=1.5, ls=":",
               label="sync (simulated)")
    ax.set(xlabel="searchers n", ylabel="trainer updates / min", xticks=w.ns, ylim=(0, None),
           title="(a) trainer updates per minute")
    ax = axes[0, 1]
    rollouts = base["num_prompts"] * base["num_generations"]
    for i, (label, runs) in enumerate(w.sweep.items()):
        ax.plot(w.ns, [r.batches_per_minute * rollouts for r in runs], "o-", color=f"C{i}",
                label=label)
    ax.axhline(w.sync_ref.batches_per_minute * rollouts, color="0.4", lw=1.5, ls=":",
               label="sync (simulated)")
    ax.set(xlabel="searchers n", ylabel="rollouts / min reaching the trainer", xticks=w.ns,
           ylim=(0, None), title="(b) fresh rollouts per minute")
    ax = axes[1, 0]
    for i, k in enumerate([1, 4]):
        st = w.k_runs[0.0][w.ks.index(k)].staleness
        ax.hist(st, bins=np.arange(st.max() + 2) - 0.5, density=True, alpha=0.55, color=f"C{i}",
                label=f"simulated, k = {k} (mean {st.mean():.1f}, max {st.max()})")
    ax.axvline(base["staleness_mean"], color="k", ls="--",
               label=f"measured mean, async_1 (k = 1): {base['staleness_mean']:.1f}")
    ax.set(xlabel="staleness (updates)", ylabel="fraction of trained rollouts",
           title="(c) staleness distribution, 1 searcher")
    ax = axes[1, 1]
    for i, (p, runs) in enumerate(w.k_runs.items()):
        label = "publish free (this kit)" if p == 0 else f"hypothetical publish = {p:.2f} s"
        ax.plot(w.ks, [r.steady_updates_per_minute for r in runs], "o-", color=f"C{i}", label=label)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="sync period k", ylabel="trainer updates/min (simulated)",
           title="(d) sync period vs throughput")
    for a in axes.flat:
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(s.out / "scaling.png", dpi=110)
    plt.show()


def print_what_if(w: WhatIf, measured: dict, s: Setup) -> None:
    """The sync-period table, the searchers' blocked fractions, and the two "(a)" lines: the
    searcher count at which the simulated trainer is fastest, and 2 searchers against sync."""
    free, costly = w.k_runs.values()
    print(format_table([{"k": k, "staleness_mean": r0.staleness_mean,
                         "staleness_max": r0.staleness_max,
                         "updates/min free publish": r0.steady_updates_per_minute,
                         "updates/min costly publish": r1.steady_updates_per_minute}
                        for k, r0, r1 in zip(w.ks, free, costly)],
                       ["k", "staleness_mean", "staleness_max", "updates/min free publish",
                        "updates/min costly publish"]))
    blocked = w.sweep[w.here][-1].blocked_fraction
    print(f"\nwith {w.ns[-1]} searchers on {s.cores} cores, time each searcher spends blocked on "
          "a full queue: " + ", ".join(f"{b:.0%}" for b in blocked))

    def versus(rate, sync_rate):
        if np.isnan(rate) or np.isnan(sync_rate):
            return "not measured"
        return "below" if rate < sync_rate else "not below"

    sim_n = [r.steady_updates_per_minute for r in w.sweep[w.here]]
    sync_sim = w.sync_ref.steady_updates_per_minute
    print(f"(a) simulated on {s.cores} cores, the trainer is fastest with "
          f"{w.ns[int(np.argmax(sim_n))]} searcher(s)")
    sync_meas = measured["sync"]["steady_updates_per_minute"]
    two_meas = measured["async_2"]["steady_updates_per_minute"]
    print(f"(a) trainer updates/min, steady, 2 searchers vs sync: measured {two_meas:.0f} vs "
          f"{sync_meas:.0f} ({versus(two_meas, sync_meas)} sync), simulated {sim_n[1]:.0f} vs "
          f"{sync_sim:.0f} ({versus(sim_n[1], sync_sim)} sync)")
    if s.smoke:
        print("SMOKE: the durations come from start-up dominated runs, so these are not results")


# ---------------------------------------------------------------- section 7: launchers
def print_launcher_protocol() -> None:
    """Print the six methods of the :class:`tba_lab.actors.launcher.Launcher` protocol, the
    launchers registered under ``async.launcher``, and whether Ray is installed here."""
    from tba_lab.actors.launcher import Launcher
    from tba_lab.registry import LAUNCHERS

    for name in ("start", "publish", "poll", "restart", "retire", "stop"):
        fn = getattr(Launcher, name)
        print(f"launcher.{name}{inspect.signature(fn)}\n    {inspect.getdoc(fn).splitlines()[0]}")
    print("\nregistered launchers (async.launcher):", LAUNCHERS.names())
    print("Ray installed here:", importlib.util.find_spec("ray") is not None)


def ray_run(measured: dict, s: Setup) -> dict | None:
    """``async_2`` again through the Ray launcher (a local Ray with 2 logical CPUs), printed
    beside the local launcher's run; None when skipped (SMOKE, or Ray not installed)."""
    if s.smoke:  # Ray's start alone takes longer than a SMOKE run; notebook 10 runs Ray in SMOKE
        print("SMOKE: the Ray run is skipped here (set SMOKE = False to run it; notebook 10's "
              "SMOKE and tests/test_ray_launcher.py run the Ray launcher)")
        return None
    if importlib.util.find_spec("ray") is None:
        print('Ray is not installed here (pip install -e ".[ray]"): skipping the Ray run')
        return None
    import ray

    # the launcher starts a local Ray with 2 logical CPUs, one searcher per CPU, and kills its
    # actors, removes its placement group and shuts Ray down when the run ends
    overrides = {"async": {"mode": "async", "num_searchers": 2, "launcher": "ray"},
                 "ray": {"num_cpus": 2}}
    t0 = time.time()
    got = measure_run({**overrides, **s.run_overrides}, s.out / "runs" / "ray_2", s.run_seconds,
                      seed=s.seed)
    print(f"ray_2: {time.time() - t0:.0f} s including Ray's start, the actors' start-up and "
          f"evaluation; Ray still running after the run: {ray.is_initialized()}\n")
    print(format_table([{"run": "async_2 (local launcher)", **measured["async_2"]},
                        {"run": "ray_2 (Ray launcher)", **got}],
                       ["run", "num_searchers", "gen_seconds", "score_seconds", "update_seconds",
                        "updates_in_budget", "steady_updates_per_minute", "samples_per_minute",
                        "staleness_mean", "staleness_max"]))
    files = {name: sorted(p.name for p in (s.out / "runs" / name).iterdir() if p.is_file())
             for name in ("async_2", "ray_2")}
    print("\nfiles written by async_2:", files["async_2"])
    print("same files written by ray_2:", files["ray_2"] == files["async_2"])
    return got


def summary_metrics(measured: dict, c: dict, rows: list[dict], ray_measured: dict | None,
                    split: dict, seconds: float) -> dict:
    """The notebook's ``metrics.json``: measured and predicted updates per minute, the
    contention ratios, the largest relative error, the Ray run's rate and the reference pass
    per update of each run; ``seconds``: the notebook's wall time."""
    real = rows[len(measured)]  # "async_2 from async_1 timings"
    rate = (lambda m: round(m["steady_updates_per_minute"], 1))
    errors = [abs(r["err_steady_%"]) for r in rows if r.get("err_steady_%") is not None]
    return {
        "sync_updates_per_minute": rate(measured["sync"]),
        "async1_updates_per_minute": rate(measured["async_1"]),
        "async2_updates_per_minute": rate(measured["async_2"]),
        "contention_batch_ratio": round(c["batch_ratio"], 3),
        "contention_update_ratio": round(c["update_ratio"], 3),
        "predicted_async2_updates_per_minute": round(real["sim_steady"], 1),
        "predicted_async2_rel_error_pct": (round(real["err_steady_%"], 1)
                                           if real["err_steady_%"] is not None else None),
        "max_abs_rel_error_pct": round(max(errors), 1) if errors else None,
        "ray2_steady_updates_per_minute": rate(ray_measured) if ray_measured else None,
        "reference_seconds_per_update": {n: t["trainer"]["reference"] for n, t in split.items()},
        "notebook_seconds": round(seconds, 1),
    }


# ---------------------------------------------------------------- 05.sync_throughput
def sync_throughput_stub(gen_seconds, score_seconds, update_seconds):
    """Trainer updates per minute when the searcher and the trainer strictly alternate.

    Args:
        gen_seconds, score_seconds: one searcher batch (generate, then score), seconds.
        update_seconds: one trainer update, seconds.
        (floats, or numpy arrays of the same shape)
    Returns:
        updates per minute (float or array).
    """
    # YOUR CODE HERE
    raise NotImplementedError


def sync_throughput_solution(gen_seconds, score_seconds, update_seconds):
    # one cycle: generate + score, then update; nothing overlaps
    cycle = gen_seconds + score_seconds + update_seconds
    return 60.0 / cycle


def _sync_cases():
    rng = np.random.default_rng(5)
    return [
        ((0.26, 0.09, 0.20), {}),
        ((1.0, 0.0, 1.0), {}),
        ((rng.uniform(0.1, 2, 6), rng.uniform(0, 0.5, 6), rng.uniform(0.05, 1, 6)), {}),
    ]


SYNC_THROUGHPUT = Exercise(
    name="05.sync_throughput",
    description="updates per minute of strict alternation: 60 / (gen + score + update)",
    stub=sync_throughput_stub, solution=sync_throughput_solution,
    reference=sync_updates_per_minute, cases=_sync_cases)


# ---------------------------------------------------------------- 05.async_throughput
def async_throughput_stub(gen_seconds, score_seconds, update_seconds, num_searchers, cores):
    """Steady-state rates of the asynchronous pipeline: n searchers and one trainer, all busy
    all the time, sharing ``cores`` cores (``cores=None``: one device per actor).

    Each actor slows down by s = max(1, (n + 1) / cores) (s = 1 when cores is None).
    Returns:
        (trainer updates per minute, searcher batches per minute), two floats:
        the trainer needs update_seconds * s per update; each of the n searchers needs
        (gen_seconds + score_seconds) * s per batch.
    """
    # YOUR CODE HERE
    raise NotImplementedError


def async_throughput_solution(gen_seconds, score_seconds, update_seconds, num_searchers, cores):
    busy = num_searchers + 1  # the searchers plus the trainer
    if cores is None or busy <= cores:
        slowdown = 1.0
    else:
        slowdown = busy / cores
    updates = 60.0 / (update_seconds * slowdown)
    batches = num_searchers * 60.0 / ((gen_seconds + score_seconds) * slowdown)
    return updates, batches


def _async_cases():
    return [
        ((0.26, 0.09, 0.20), {"num_searchers": 1, "cores": 2}),   # fits: no slowdown
        ((0.26, 0.09, 0.20), {"num_searchers": 2, "cores": 2}),   # 3 busy on 2 cores
        ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": 2}),
        ((0.5, 0.1, 0.3), {"num_searchers": 7, "cores": None}),   # one GPU each
        ((2.0, 0.5, 1.0), {"num_searchers": 3, "cores": 8}),
    ]


ASYNC_THROUGHPUT = Exercise(
    name="05.async_throughput",
    description="async updates and batches per minute with n searchers on c cores",
    stub=async_throughput_stub, solution=async_throughput_solution, reference=async_throughput,
    cases=_async_cases)


EXERCISES = [SYNC_THROUGHPUT, ASYNC_THROUGHPUT]
