"""Soak, a script because it runs for an hour and watches the processes, not a result: leaks.

Does a long asynchronous run hold its memory, file descriptors and shared memory flat?

    python bench/soak.py [--minutes 20] [--interval 10] [--output-dir runs/soak] [-- TRAIN FLAGS]

Runs ``tba-lab train`` (the default config: async TBA) for ``--minutes`` in a subprocess and
every ``--interval`` seconds samples the trainer's and each searcher's resident memory (RSS)
and open file descriptors (psutil), the /dev/shm entries the run's processes map, and the run's
progress (``metrics.jsonl``: updates, buffer size). Writes ``soak_summary.json`` (the samples
under ``rows``) into ``--output-dir`` (the run in ``<output-dir>/run``).

Verdict per process after a warm-up (``--warmup`` minutes; default 2, a third of runs under 6
minutes), while the searchers run: "flat" when the 95 % interval of the Theil-Sen slope of RSS
lies below ``--flat-mb`` MB per 10 minutes (default 5, about 1 % of the trainer's RSS) and its
fds grow by 2 at most; "GROWING" when the interval lies at or above it or fds grow more; else
"inconclusive". The run is flat when every process is and its /dev/shm entries do not grow. RSS
growth while the replay buffer fills is data, not a leak (the summary says when it did).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for _common
from _common import REPO, sigterm_as_interrupt  # noqa: E402  (puts the kit on the path)

from tba_lab.runlog import read_jsonl_rows  # noqa: E402

MB = 1024 * 1024


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
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and "/dev/shm/" in parts[5] and int(parts[4]) in entries:
                    held.add(int(parts[4]))
    return len(held)


def _proc_stats(p: psutil.Process) -> dict | None:
    with contextlib.suppress(psutil.Error), p.oneshot():
        return {"pid": p.pid, "rss_mb": round(p.memory_info().rss / MB, 2), "fds": p.num_fds()}
    return None


def _searchers(trainer: psutil.Process) -> list[psutil.Process]:
    out = []
    with contextlib.suppress(psutil.Error):
        for c in trainer.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                cmd = " ".join(c.cmdline())
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
    m = (read_jsonl_rows(run_dir / "metrics.jsonl") or [{}])[-1]
    return {
        "t_s": round(time.time() - t0, 1),
        "trainer_rss_mb": tr["rss_mb"], "trainer_fds": tr["fds"], "searchers": searchers,
        "searcher_fds_max": max((s["fds"] for s in searchers), default=0),
        "run_shm_entries": _shm_held([trainer.pid, *(c.pid for c in children)]),
        "updates": m.get("step", 0), "buffer_size": m.get("buffer_size", 0)}


def slope_per_10min(ts: list[float], ys: list[float]) -> tuple[float, float, float] | None:
    """Theil-Sen slope of ``ys`` over ``ts`` (seconds) and its 95 % interval (Sen 1968, through
    ``scipy.stats.theilslopes``), in units per 10 minutes: ``(slope, low, high)``; None with
    fewer than 3 distinct times. The median of pairwise slopes ignores the RSS spikes of single
    samples (the allocator, an evaluation batch) that throw a least-squares slope around."""
    from scipy.stats import theilslopes

    if len(set(ts)) < 3:
        return None
    fit = theilslopes(ys, ts, 0.95)
    return 600.0 * float(fit.slope), 600.0 * float(fit.low_slope), 600.0 * float(fit.high_slope)


def _judge(name: str, ts: list[float], rss: list[float], fds: list[int], flat_mb: float) -> dict:
    """One process's RSS and fds over the times ``ts`` (seconds), judged by the module
    docstring's rule ("inconclusive": too few samples or too much noise to tell)."""
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
    steady = [r for r in rows if r["t_s"] >= warmup_s and r["searchers"]]
    if len(steady) < 2:
        return {"error": f"fewer than 2 samples after the {warmup_s:.0f}-s warm-up "
                         f"({len(rows)} samples in all); run longer or sample more often"}
    first, last = steady[0], steady[-1]
    # (t_s, rss_mb, fds) per process: a restarted searcher is a new process, so a new key
    series = {"trainer": [(r["t_s"], r["trainer_rss_mb"], r["trainer_fds"]) for r in steady]}
    for r in steady:
        for s in r["searchers"]:
            point = (r["t_s"], s["rss_mb"], s["fds"])
            series.setdefault(f"searcher pid {s['pid']}", []).append(point)
    procs = [_judge(name, *zip(*points), flat_mb) for name, points in series.items()]
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


def _leftovers(seen: dict) -> list[str]:
    left = []
    for (pid, ct), cmd in seen.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if p.create_time() == ct and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid}: {cmd}")
    return left


def print_summary(s: dict, out: Path) -> None:
    if "error" in s:
        print(f"soak: {s['error']}")
        return
    print(f"\nsoak: {s['samples']} samples, warm-up {s['warmup_s'] / 60:.1f} min, measured window "
          f"{s['window_s'] / 60:.1f} min; flat = RSS slope < {s['flat_threshold_mb_per_10min']:g}"
          " MB/10 min and fds +2 at most")
    for p in s["processes"]:
        ci = p["slope_ci95_mb_per_10min"]
        print(f"{p['process']:<22} RSS {p['rss_start_mb']:.1f} -> {p['rss_end_mb']:.1f} MB, slope "
              f"{p['slope_mb_per_10min']} [{ci and ', '.join(map(str, ci))}] MB/10 min, fds "
              f"{p['fds_start']} -> {p['fds_max']}: {p['verdict']}")
    filling = " (still filling: RSS growth includes its data)" if s["buffer_still_filling"] else ""
    print(f"/dev/shm entries held by the run {s['shm_entries_start']} -> {s['shm_entries_end']} "
          f"(max {s['shm_entries_max']}); buffer {s['buffer_start']} -> {s['buffer_end']}{filling}; "
          f"after the run: processes left {s.get('processes_left')}, /dev/shm on the machine "
          f"{s.get('shm_before_run')} -> {s.get('shm_after_run')} (other programs' included)")
    print(f"verdict: {s['verdict']}" + (" (run longer or sample more often, --interval 5)"
                                        if s["verdict"] == "inconclusive" else "")
          + f"; {out / 'soak_summary.json'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=20.0, help="training budget (default 20)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples (10)")
    p.add_argument("--warmup", type=float, default=None,
                   help="warm-up minutes left out of start/slope (default 2; a third of runs < 6 min)")
    p.add_argument("--flat-mb", type=float, default=5.0,
                   help="flat if the RSS slope is below this many MB per 10 minutes (5)")
    p.add_argument("--output-dir", default="runs/soak")
    p.add_argument("train_args", nargs="*", help="extra `tba-lab train` flags, after --")
    args = p.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    warmup_s = 60 * (args.warmup if args.warmup is not None else min(2.0, args.minutes / 3))
    cmd = [sys.executable, "-m", "tba_lab", "train", "--output-dir", str(run_dir),
           "--max-minutes", str(args.minutes), "--no-progress", *args.train_args]
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
    interrupted = False
    try:
        next_t = t0
        while proc.poll() is None:
            for c in [trainer, *_searchers(trainer)]:
                with contextlib.suppress(psutil.Error):
                    seen[(c.pid, c.create_time())] = " ".join(c.cmdline())[:160]
            if time.time() >= next_t:
                row = sample(trainer, run_dir, t0)
                if row is not None:
                    rows.append(row)
                    mine = row["searchers"]
                    print(f"[{row['t_s'] / 60:5.1f} min] trainer {row['trainer_rss_mb']:7.1f} MB "
                          f"{row['trainer_fds']:3d} fds | searchers "
                          f"{' '.join(str(s['rss_mb']) for s in mine) or '-'} MB, fds "
                          f"{' '.join(str(s['fds']) for s in mine) or '-'} | shm "
                          f"{row['run_shm_entries']} | updates {row['updates']} buffer "
                          f"{row['buffer_size']}", flush=True)
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
        log.close()
    deadline = time.time() + 10
    while _leftovers(seen) and time.time() < deadline:
        time.sleep(0.25)
    summary = summarize(rows, warmup_s, args.flat_mb)
    summary.update({"minutes": args.minutes, "interval_s": args.interval,
                    "exit_code": proc.returncode, "interrupted": interrupted,
                    "processes_left": _leftovers(seen), "shm_before_run": shm_before,
                    "shm_after_run": _shm_count(), "rows": rows})
    (out / "soak_summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(summary, out)
    if proc.returncode not in (0, 130):
        print(f"soak: the run exited with code {proc.returncode}; see {out / 'train.log'}")
        return 1
    return 0


if __name__ == "__main__":
    with sigterm_as_interrupt():  # `kill` of this script cleans up as Ctrl-C does
        sys.exit(main())
