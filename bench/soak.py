"""Soak test: does a long asynchronous run hold its memory, file descriptors and shared memory flat?

    python bench/soak.py [--minutes 20] [--interval 10] [--output-dir runs/soak]

Runs ``tba-lab train`` with the default config (default model, task and algorithm: async TBA)
for ``--minutes`` of training in a subprocess, and every ``--interval`` seconds samples, with
psutil and /proc:

* the resident memory (RSS, MB) and open file descriptors of the trainer and of each searcher
  (the trainer's children running multiprocessing's ``spawn_main``; the resource tracker is not
  counted), and their thread counts;
* the number of /dev/shm entries the run's processes hold (named semaphores of the launcher's
  queues, event and lock), and of all /dev/shm entries on the machine (for reference: other
  programs come and go);
* the run's progress from its ``metrics.jsonl``: updates, replay-buffer size (rollouts) and
  samples generated.

Writes ``soak.csv`` (one row per sample), ``soak.png`` (memory curves above; fds, /dev/shm and
buffer below) and ``soak_summary.json`` into ``--output-dir`` (the run itself goes to
``<output-dir>/run``), and prints a summary: RSS after the warm-up (the first ``--warmup``
minutes of the process's life; default 2, shortened to a third of the run for runs under 6
minutes) against the last sample taken while the searchers ran (the evaluation after training
is left out), the Theil-Sen slope of RSS over the samples after the warm-up in MB per 10
minutes with its 95 % interval, the largest fd counts, /dev/shm at start and end, and a verdict.

Verdict: a process's memory is "flat" when its RSS slope after the warm-up is below
``--flat-mb`` MB per 10 minutes (default 5 MB / 10 min: about 1 % of the trainer's RSS, and a
leak of 1 KB per update at ~1000 updates per 10 minutes would exceed it) AND its fd count after
the warm-up never exceeds the count at the end of the warm-up by more than 2; the run is "flat"
when every process is and the run's /dev/shm entries never exceed their count after the warm-up. The replay buffer
grows until it holds ``buffer.max_prompts`` x ``buffer.capacity_per_prompt`` rollouts, so RSS
growth while ``buffer_size`` still grows is data, not a leak; the summary says when the buffer
was still filling during the measured window. The RSS of these processes wobbles by some
10-20 MB from sample to sample (allocator, batch sizes), so the slope is the median of pairwise
slopes (robust to single spikes) and the verdict reads its 95 % interval: "flat" when the
interval lies below ``--flat-mb``, "GROWING" when it lies at or above, "inconclusive" when it
straddles the threshold (a 3-minute run usually is). After the run ends, the script also checks that no
process of the run is left and /dev/shm is back to its starting count.

Ctrl-C stops the run (SIGINT to its process group, as a terminal does) and still writes the
outputs for the samples taken so far.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("tba-lab")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tba_lab"]


def _shm_count() -> int:
    try:
        return len(os.listdir("/dev/shm"))
    except OSError:
        return -1


def _shm_held(pids: list[int]) -> int:
    """/dev/shm entries mapped by any of ``pids`` (by inode: a named semaphore's creator maps
    glibc's temporary name, so names do not match)."""
    try:
        entries = {e.inode() for e in os.scandir("/dev/shm")}
    except OSError:
        return -1
    held = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) == 6 and "/dev/shm/" in parts[5] and int(parts[4]) in entries:
                        held.add(int(parts[4]))
        except (OSError, ValueError):
            continue
    return len(held)


def _last_metrics(path: Path) -> dict:
    """The last complete row of ``metrics.jsonl`` and the number of rows ({} if none)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        row["_rows"] = len(lines)
        return row
    return {}


def _proc_stats(p: psutil.Process) -> dict | None:
    try:
        with p.oneshot():
            return {"pid": p.pid, "rss_mb": p.memory_info().rss / MB, "fds": p.num_fds(),
                    "threads": p.num_threads()}
    except psutil.Error:
        return None


def _searchers(trainer: psutil.Process) -> list[psutil.Process]:
    out = []
    try:
        children = trainer.children(recursive=True)
    except psutil.Error:
        return out
    for c in children:
        try:
            cmd = " ".join(c.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in cmd and "resource_tracker" not in cmd:
            out.append(c)
    return sorted(out, key=lambda c: c.pid)


def sample(trainer: psutil.Process, run_dir: Path, t0: float) -> dict | None:
    """One row: trainer and searcher stats, /dev/shm, progress. None once the trainer is gone."""
    tr = _proc_stats(trainer)
    if tr is None:
        return None
    children = _searchers(trainer)
    searchers = [s for s in (_proc_stats(c) for c in children) if s]
    m = _last_metrics(run_dir / "metrics.jsonl")
    return {
        "t_s": round(time.time() - t0, 1),
        "trainer_rss_mb": round(tr["rss_mb"], 2), "trainer_fds": tr["fds"],
        "trainer_threads": tr["threads"],
        "searchers": len(searchers),
        "searcher_pids": " ".join(str(s["pid"]) for s in searchers),
        "searcher_rss_mb": " ".join(f"{s['rss_mb']:.2f}" for s in searchers),
        "searcher_rss_total_mb": round(sum(s["rss_mb"] for s in searchers), 2),
        "searcher_fds": " ".join(str(s["fds"]) for s in searchers),
        "searcher_fds_max": max((s["fds"] for s in searchers), default=0),
        "run_shm_entries": _shm_held([trainer.pid, *(c.pid for c in children)]),
        "shm_entries": _shm_count(),
        "updates": m.get("step", 0), "buffer_size": m.get("buffer_size", 0),
        "samples_generated": m.get("samples_generated", 0),
        "train_wall_s": m.get("wall_seconds", 0.0),
    }


def slope_per_10min(ts: list[float], ys: list[float]) -> tuple[float, float, float] | None:
    """Theil-Sen slope of ``ys`` over ``ts`` (seconds) with its 95 % confidence interval
    (Sen 1968: ranks of the pairwise slopes), all in units per 10 minutes; None with fewer than
    3 points. The median of pairwise slopes ignores the RSS spikes of single samples (the
    allocator, an evaluation batch) that throw a least-squares slope around.

    Returns:
        ``(slope, low, high)``.
    """
    import numpy as np

    t, y = np.asarray(ts, dtype=float), np.asarray(ys, dtype=float)
    n = len(t)
    if n < 3:
        return None
    i, j = np.triu_indices(n, k=1)
    keep = t[j] != t[i]
    slopes = np.sort((y[j] - y[i])[keep] / (t[j] - t[i])[keep])
    if slopes.size == 0:
        return None
    m = slopes.size
    c = 1.96 * np.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo = int(np.clip(np.floor((m - c) / 2), 0, m - 1))
    hi = int(np.clip(np.ceil((m + c) / 2), 0, m - 1))
    return 600.0 * float(np.median(slopes)), 600.0 * float(slopes[lo]), 600.0 * float(slopes[hi])


def _searcher_series(rows: list[dict]) -> dict[str, list[tuple[float, float, int]]]:
    """``(t_s, rss_mb, fds)`` per searcher process, keyed "pid <n>" (a restarted searcher is a
    new process, so a new key)."""
    out: dict[str, list[tuple[float, float, int]]] = {}
    for r in rows:
        for pid, mb, fds in zip(r["searcher_pids"].split(), r["searcher_rss_mb"].split(),
                                r["searcher_fds"].split()):
            out.setdefault(f"pid {pid}", []).append((r["t_s"], float(mb), int(fds)))
    return out


def _judge(name: str, ts: list[float], rss: list[float], fds: list[int], flat_mb: float) -> dict:
    """flat: the slope's 95 % interval lies below flat_mb and fds grew by 2 at most; GROWING:
    the interval lies at or above flat_mb, or fds grew by more; inconclusive: the interval
    straddles flat_mb (too few samples or too much noise to tell)."""
    fit = slope_per_10min(ts, rss)
    if max(fds) - fds[0] > 2:
        verdict = "GROWING"
    elif fit is None or fit[1] < flat_mb <= fit[2]:
        verdict = "inconclusive"
    else:
        verdict = "flat" if fit[2] < flat_mb else "GROWING"
    return {"process": name, "rss_start_mb": round(rss[0], 1), "rss_end_mb": round(rss[-1], 1),
            "rss_change_mb": round(rss[-1] - rss[0], 1),
            "slope_mb_per_10min": None if fit is None else round(fit[0], 2),
            "slope_ci95_mb_per_10min": None if fit is None else [round(fit[1], 2), round(fit[2], 2)],
            "fds_start": fds[0], "fds_max": max(fds), "verdict": verdict}


def summarize(rows: list[dict], warmup_s: float, flat_mb: float) -> dict:
    """Start (first sample after the warm-up) vs end, slopes, max fds, /dev/shm, verdict."""
    # training only: after the warm-up, while searchers run (not the held-out evaluation after)
    steady = [r for r in rows if r["t_s"] >= warmup_s and r["searchers"] > 0]
    if len(steady) < 2:
        return {"error": f"fewer than 2 samples after the {warmup_s:.0f}-s warm-up "
                         f"({len(rows)} samples in all); run longer or sample more often"}
    first, last = steady[0], steady[-1]
    procs = [_judge("trainer", [r["t_s"] for r in steady], [r["trainer_rss_mb"] for r in steady],
                    [r["trainer_fds"] for r in steady], flat_mb)]
    for key, series in _searcher_series(steady).items():
        procs.append(_judge(f"searcher {key}", [t for t, _, _ in series],
                            [mb for _, mb, _ in series], [f for _, _, f in series], flat_mb))
    shm = [r["run_shm_entries"] for r in steady]
    buffers = [r["buffer_size"] for r in steady]
    return {
        "samples": len(rows), "samples_after_warmup": len(steady),
        "warmup_s": warmup_s, "window_s": round(last["t_s"] - first["t_s"], 1),
        "flat_threshold_mb_per_10min": flat_mb,
        "processes": procs,
        "trainer_fds_max": max(r["trainer_fds"] for r in rows),
        "searcher_fds_max": max(r["searcher_fds_max"] for r in rows),
        "shm_entries_start": shm[0], "shm_entries_end": shm[-1], "shm_entries_max": max(shm),
        "updates_start": first["updates"], "updates_end": last["updates"],
        "buffer_start": first["buffer_size"], "buffer_end": last["buffer_size"],
        "buffer_still_filling": max(buffers[len(buffers) // 2:]) > 1.05 * max(buffers[:len(buffers) // 2 + 1]),
        "verdict": "GROWING" if any(p["verdict"] == "GROWING" for p in procs) or max(shm) > shm[0]
        else "inconclusive" if any(p["verdict"] == "inconclusive" for p in procs) else "flat",
    }


def plot(rows: list[dict], warmup_s: float, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t_s"] / 60 for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.plot(t, [r["trainer_rss_mb"] for r in rows], label="trainer", lw=2)
    for key, series in _searcher_series(rows).items():
        top.plot([a / 60 for a, _, _ in series], [b for _, b, _ in series], label=f"searcher ({key})")
    top.axvspan(0, warmup_s / 60, color="0.9", label="warm-up")
    top.set_ylabel("RSS (MB)")
    top.set_title("Soak: resident memory of the trainer and the searchers")
    top.legend(fontsize=8, loc="lower right")
    bottom.plot(t, [r["trainer_fds"] for r in rows], label="trainer fds")
    bottom.plot(t, [r["searcher_fds_max"] for r in rows], label="searcher fds (max)")
    bottom.plot(t, [r["run_shm_entries"] for r in rows], label="/dev/shm entries held by the run")
    bottom.plot(t, [r["shm_entries"] for r in rows], label="/dev/shm entries (machine)", lw=0.8,
                color="0.6")
    bottom.set_ylabel("count")
    bottom.set_xlabel("minutes since launch")
    ax2 = bottom.twinx()
    ax2.plot(t, [r["buffer_size"] for r in rows], color="0.5", ls="--", label="buffer (rollouts)")
    ax2.set_ylabel("buffer size (rollouts)")
    lines = bottom.get_legend_handles_labels()
    extra = ax2.get_legend_handles_labels()
    bottom.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _leftovers(seen: dict) -> list[str]:
    left = []
    for (pid, ct), cmd in seen.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == ct and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid}: {cmd}")
        except psutil.Error:
            continue
    return left


def print_summary(s: dict, rows: list[dict], out: Path) -> None:
    if "error" in s:
        print(f"soak: {s['error']}")
        return
    print(f"\nsoak summary ({s['samples']} samples, warm-up {s['warmup_s'] / 60:.1f} min, "
          f"measured window {s['window_s'] / 60:.1f} min; flat = slope < "
          f"{s['flat_threshold_mb_per_10min']:g} MB/10 min and fds +2 at most)")
    print(f"{'process':<22}{'RSS start':>11}{'RSS end':>10}{'change':>9}{'MB/10min [95%]':>22}"
          f"{'fds':>9}  verdict")
    for p in s["processes"]:
        ci = p["slope_ci95_mb_per_10min"]
        slope = ("n/a" if p["slope_mb_per_10min"] is None else
                 f"{p['slope_mb_per_10min']:+.2f} [{ci[0]:+.1f},{ci[1]:+.1f}]")
        print(f"{p['process']:<22}{p['rss_start_mb']:>9.1f}MB{p['rss_end_mb']:>8.1f}MB"
              f"{p['rss_change_mb']:>+8.1f}M{slope:>22}{p['fds_start']:>4}->{p['fds_max']:<4}"
              f"  {p['verdict']}")
    print(f"max fds: trainer {s['trainer_fds_max']}, searcher {s['searcher_fds_max']}; /dev/shm "
          f"entries held by the run {s['shm_entries_start']} -> {s['shm_entries_end']} "
          f"(max {s['shm_entries_max']})")
    print(f"updates {s['updates_start']} -> {s['updates_end']}; buffer {s['buffer_start']} -> "
          f"{s['buffer_end']} rollouts"
          + (" (still filling: RSS growth in this window includes the buffer's data)"
             if s["buffer_still_filling"] else " (no longer growing)"))
    print(f"after the run: processes left {s.get('processes_left', 'n/a')}; /dev/shm on the "
          f"machine {s.get('shm_before_run')} entries before -> {s.get('shm_after_run')} after "
          f"(other programs' entries included)")
    print(f"verdict: {s['verdict']}" + (" (the slope's 95 % interval straddles the threshold: "
                                        "run longer or sample more often, --interval 5)"
                                        if s["verdict"] == "inconclusive" else ""))
    print(f"outputs: {out / 'soak.csv'}, {out / 'soak.png'}, {out / 'soak_summary.json'}")


def _reanalyse(out: Path, warmup_s: float, flat_mb: float) -> int:
    """Summary and plot again from ``out/soak.csv`` (e.g. with another --flat-mb or --warmup);
    the run-level fields (exit code, processes left, /dev/shm) come from the old summary."""
    text_fields = {"searcher_pids", "searcher_rss_mb", "searcher_fds"}

    def value(k: str, v: str):
        if k in text_fields:
            return v
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                return v

    with open(out / "soak.csv", newline="") as f:
        rows = [{k: value(k, v) for k, v in r.items()} for r in csv.DictReader(f)]
    old_path = out / "soak_summary.json"
    old = json.loads(old_path.read_text()) if old_path.exists() else {}
    summary = summarize(rows, warmup_s, flat_mb)
    summary.update({k: old[k] for k in ("minutes", "interval_s", "exit_code", "interrupted",
                                        "processes_left", "shm_before_run", "shm_after_run")
                    if k in old})
    old_path.write_text(json.dumps(summary, indent=2))
    plot(rows, warmup_s, out / "soak.png")
    print_summary(summary, rows, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20.0, help="training budget (default 20)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples (10)")
    p.add_argument("--warmup", type=float, default=None,
                   help="warm-up minutes left out of start/slope (default 2; a third of runs < 6 min)")
    p.add_argument("--flat-mb", type=float, default=5.0,
                   help="flat if the RSS slope is below this many MB per 10 minutes (5)")
    p.add_argument("--output-dir", default="runs/soak")
    p.add_argument("--reanalyse", action="store_true",
                   help="no run: read OUTPUT_DIR/soak.csv again and rewrite the summary and plot")
    p.add_argument("train_args", nargs="*", help="extra `tba-lab train` flags, after --")
    args = p.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    warmup_s = 60 * (args.warmup if args.warmup is not None else min(2.0, args.minutes / 3))
    if args.reanalyse:
        return _reanalyse(out, warmup_s, args.flat_mb)
    cmd = [*_cli(), "train", "--output-dir", str(run_dir), "--max-minutes", str(args.minutes),
           "--no-progress", *args.train_args]
    print(f"soak: {' '.join(cmd)}\nsampling every {args.interval:g} s; warm-up "
          f"{warmup_s / 60:.1f} min", flush=True)
    shm_before = _shm_count()
    log = open(out / "train.log", "w")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    trainer = psutil.Process(proc.pid)
    t0 = time.time()
    rows: list[dict] = []
    seen: dict = {}
    csv_f = open(out / "soak.csv", "w", newline="")
    writer = None
    interrupted = False
    try:
        next_t = t0
        while proc.poll() is None:
            for c in [trainer, *_searchers(trainer)]:
                try:
                    seen[(c.pid, c.create_time())] = " ".join(c.cmdline())[:160]
                except psutil.Error:
                    pass
            if time.time() >= next_t:
                row = sample(trainer, run_dir, t0)
                if row is not None:
                    rows.append(row)
                    if writer is None:
                        writer = csv.DictWriter(csv_f, fieldnames=list(row))
                        writer.writeheader()
                    writer.writerow(row)
                    csv_f.flush()
                    print(f"[{row['t_s'] / 60:5.1f} min] trainer {row['trainer_rss_mb']:7.1f} MB "
                          f"{row['trainer_fds']:3d} fds | searchers {row['searcher_rss_mb'] or '-'}"
                          f" MB, fds {row['searcher_fds'] or '-'} | shm {row['shm_entries']} | "
                          f"updates {row['updates']} buffer {row['buffer_size']}", flush=True)
                next_t += args.interval
            time.sleep(0.5)
    except KeyboardInterrupt:
        interrupted = True
        print("soak: interrupted; stopping the run (SIGINT to its group)", flush=True)
        os.killpg(proc.pid, signal.SIGINT)
    finally:
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        csv_f.close()
        log.close()
    deadline = time.time() + 10
    while _leftovers(seen) and time.time() < deadline:
        time.sleep(0.25)
    summary = summarize(rows, warmup_s, args.flat_mb)
    summary.update({"minutes": args.minutes, "interval_s": args.interval,
                    "exit_code": proc.returncode, "interrupted": interrupted,
                    "processes_left": _leftovers(seen), "shm_before_run": shm_before,
                    "shm_after_run": _shm_count()})
    (out / "soak_summary.json").write_text(json.dumps(summary, indent=2))
    if rows:
        plot(rows, warmup_s, out / "soak.png")
    print_summary(summary, rows, out)
    if proc.returncode not in (0, 130):
        print(f"soak: the run exited with code {proc.returncode}; see {out / 'train.log'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
