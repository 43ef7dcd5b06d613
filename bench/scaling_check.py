"""Scaling check, a script because only a GPU machine runs it: async TBA with 1-8 searchers.

Async TBA with 1-8 searchers against sync TB and sync GRPO, on one GPU and as CPU processes,
through ``bash bench/scaling_check.sh`` (its header has the flags and the time limit).

Each leg (:data:`LEGS`, most telling first, so a deadline cuts the least useful) is a
``short_run`` of ``--seconds`` with the kit's defaults otherwise and deferred interim
evaluations, trained in a process of its own (a crash, hang or CUDA error cannot stop the next;
past its limit SIGTERM, then SIGKILL); its numbers are :func:`_common.leg_metrics`'s. A leg
starts only if it fits before ``--deadline`` (judged by the slowest of its group so far).
Writes ``scaling_check.json``, ``.md`` and ``scaling_runs.tgz`` (each leg's logs) after every
leg. The CPU dry run (``--cpu-dry-run``, or no CUDA; a test) runs :data:`DRY_LEGS` with
B = K = 4, 24 new tokens, 4 updates per leg: under a minute on 2 idle cores.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for _common
from _common import environment, keep_logs, leg_metrics, sigterm_as_interrupt  # noqa: E402

from tba_lab.config import merge  # noqa: E402

GPU = {"trainer_device": "cuda:0", "searcher_devices": ["cuda:0"]}


def _leg(algo: str, mode: str, searchers: int = 1) -> dict:
    return {"algo": algo, "async": {"mode": mode, "num_searchers": searchers}}


# name -> (group, overrides); the order here is the order they run in
LEGS = {
    "gpu_async_tba_n3": ("gpu", _leg("tb", "async", 3)),
    "gpu_async_tba_n6": ("gpu", _leg("tb", "async", 6)),
    "gpu_sync_tb": ("gpu", _leg("tb", "sync")),
    "cpu_async_tba_n1": ("cpu", _leg("tb", "async", 1)),
    "cpu_async_tba_n8": ("cpu", _leg("tb", "async", 8)),
    "gpu_async_tba_n1": ("gpu", _leg("tb", "async", 1)),
    "gpu_sync_grpo": ("gpu", _leg("grpo", "sync")),
    "cpu_async_tba_n4": ("cpu", _leg("tb", "async", 4)),
    "cpu_sync_tb": ("cpu", _leg("tb", "sync")),
    "cpu_async_tba_n2": ("cpu", _leg("tb", "async", 2)),
}
DRY_LEGS = ["gpu_async_tba_n3", "cpu_sync_tb"]  # one leg per group: async (3 searchers) and sync

# settings of a real check and of the CPU dry run; flags given on the command line win
DEFAULTS = {"seconds": 30.0, "eval_size": 200, "eval_every": 10.0, "deadline": 330.0,
            "max_updates": 0}
DRY_DEFAULTS = {"seconds": 20.0, "eval_size": 20, "eval_every": 2.0, "deadline": 150.0,
                "max_updates": 4}
DRY_SHAPE = {"training": {"num_prompts_per_step": 4, "num_generations": 4},
             "model": {"max_new_tokens": 24}}
STARTUP_ALLOWANCE = 25.0  # seconds a leg takes beyond its budget when none of its group ran yet


def leg_overrides(name: str, dry: bool, max_updates: int = 0) -> dict:
    """The config overrides of leg ``name``: its algorithm and mode, the GPU placement for the
    ``gpu`` group (left out in a dry run: every actor on the CPU), the dry run's small shape,
    and ``max_updates`` (0: time only) as ``training.max_steps``."""
    group, over = LEGS[name]
    over = merge(over, {"async": GPU} if group == "gpu" and not dry else {})
    if dry:
        over = merge(over, DRY_SHAPE)
    if max_updates:
        over = merge(over, {"training": {"max_steps": int(max_updates)}})
    return over


# ------------------------------------------------------------------------------ reporting
def _f(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _resolved(r: dict) -> str:
    """'trainer, 8/1' style: the reference pass and trainer/searcher threads the run used."""
    p = r.get("resolved") or {}
    c = r.get("configured") or {}
    ref = p.get("reference_pass") or (c.get("reference_pass", "?") + " (configured)")
    th = (f"{p['trainer_threads']}/{p['searcher_threads']}" if "trainer_threads" in p
          else f"{c.get('trainer_threads', '?')}/{c.get('searcher_threads', '?')} (configured)")
    return f"{ref}, {th}"


def table(report: dict) -> str:
    """``scaling_check.md``: a header, three tables (rates, times, accuracy), the definitions
    and the errors."""
    s = report["settings"]
    env = report["environment"]
    cap = f" (at most {s['max_updates']} updates)" if s["max_updates"] else ""
    lines = [f"# Scaling check ({'CPU dry run' if s['dry_run'] else env.get('gpu') or 'no GPU'})",
             "", f"{env['cpu_count']} cores (os.cpu_count()), torch {env['torch']}, transformers "
             f"{env['transformers']}, Python {env['python']}; {s['seconds']:g} s of training per "
             f"leg{cap}, seeds {' '.join(map(str, s['seeds']))}, {s['eval_size']} held-out "
             f"problems every {s['eval_every']:g} s (deferred: scored after the budget); "
             f"{report.get('total_seconds', '?')} s in all (deadline {s['deadline']:g} s).", "", ""]
    done = {n: r for n, r in report["legs"].items() if "updates" in r}

    def block(head: str, cells) -> list[str]:
        """A table: ``head``, its rule, and one row per leg that ran, ``cells(leg)`` after its name."""
        return [head, "|---" * head.count(" | ") + "|---|"] + [
            f"| {name} | " + " | ".join(cells(r)) + " |" for name, r in done.items()]

    lines += block("| leg | updates/min | steady upd/min | samples/min | steady samples/min | "
                   "staleness mean/max | trainer busy | ref pass, threads t/s (resolved) |",
                   lambda r: [_f(r["updates_per_minute"]), _f(r["steady_updates_per_minute"]),
                              _f(r["samples_per_minute"], "{:,.0f}"),
                              _f(r["steady_samples_per_minute"], "{:,.0f}"),
                              f"{_f(r['staleness_mean'], '{:.2f}')}/{_f(r['staleness_max'], '{}')}",
                              _f(r["trainer_busy"], "{:.2f}"), _resolved(r)])
    lines += ["", "Medians, seconds per update (trainer) and per generation batch (searcher):", ""]
    lines += block("| leg | updates | update | reference (trainer) | wait | searcher generation | "
                   "leg seconds (all in) |",
                   lambda r: [str(r["updates"])] + [_f(r[k], "{:.3f}") for k in (
                       "update_seconds", "reference_seconds", "wait_seconds", "gen_seconds")]
                   + [_f(r.get("leg_seconds"))])
    pct = (lambda x: _f(x and 100 * x))  # noqa: E731
    lines += [""] + block("| leg | accuracy before -> after | time to 40% | time to 45% | "
                          "evaluations (s of training: accuracy) |",
                          lambda r: [f"{pct(r['accuracy_before'])} -> {pct(r['accuracy_after'])}",
                                     _f(r["time_to_40"], "{:.0f} s"), _f(r["time_to_45"], "{:.0f} s"),
                                     " ".join(f"{t:.0f}s:{100 * a:.1f}" for t, a in r["evals"]) or "-"])
    lines += ["", "Definitions: rates over the training seconds (start-up in); steady = between "
              "the first and the last update; trainer busy = update / (update + wait + reference)"
              " seconds after the first update; times to 40%/45% interpolated between evaluations"
              " (- = not reached). Short runs, one seed each: read rates, not small accuracy "
              "differences (200 problems: about 3.4 points of standard error)."]
    bad = [(n, r) for n, r in report["legs"].items() if r.get("error") or r.get("skipped")
           or r.get("searcher_failures")]
    if bad:
        lines += ["", "## Skipped, failed or with searcher failures", ""]
        for name, r in bad:
            if r.get("skipped"):
                lines.append(f"- {name}: skipped: {r['skipped']}")
            if r.get("searcher_failures"):
                lines.append(f"- {name}: searcher failures: {json.dumps(r['searcher_failures'])[:500]}")
            if r.get("error"):
                lines += [f"- {name}: failed:", "", "```", r["error"][-2000:].rstrip(), "```"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- one leg (child)
def child(spec: dict) -> int:
    """Train one leg in this process (``--child``); a failure's traceback goes to
    ``spec["error_file"]``."""
    try:
        from tba_lab.config import short_run
        from tba_lab.trainer import train

        cfg = short_run(spec["run_dir"], spec["seconds"], spec["overrides"], seed=spec["seed"],
                        eval_size=spec["eval_size"], interim_eval_size=spec["eval_size"],
                        eval_every_seconds=spec["eval_every"])
        cfg.task.defer_interim_eval = True
        train(cfg, progress=False)
    except BaseException:  # noqa: BLE001 - the leg's failure is its result, not this script's
        Path(spec["error_file"]).write_text(traceback.format_exc()[-4000:])
        return 1
    return 0


def run_leg(spec: dict, limit: float) -> dict:
    """Leg ``spec`` in a process of its own for at most ``limit`` seconds: its
    :func:`leg_metrics`, with ``error`` (its traceback, or why it was stopped) when it failed."""
    # a process group of its own, to stop the leg with its searchers
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                             json.dumps(spec)], process_group=0)
    error = None
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        error = f"stopped after {limit:.0f} s (its time limit: the deadline, or 2 x budget + 90 s)"
    finally:  # past its limit, or Ctrl-C / SIGTERM of this script: SIGTERM (the trainer saves
        # and stops its searchers), then SIGKILL to the group (a searcher left behind too)
        if proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    path = Path(spec["error_file"])
    if error is None and path.is_file():
        error = path.read_text()
    elif error is None and proc.returncode:
        error = f"the leg's process ended with code {proc.returncode} (see scaling_check.log)"
    res = leg_metrics(spec["run_dir"]) if Path(spec["run_dir"]).is_dir() else {}
    return {**res, "error": error} if error else res


# --------------------------------------------------------------------------------- main
def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"legs (in order): {' '.join(LEGS)}; dry run: {' '.join(DRY_LEGS)}")
    ap.add_argument("--out", default=os.environ.get("OUT") or "runs/scaling_check",
                    help="output folder (default $OUT, else runs/scaling_check)")
    ap.add_argument("--seconds", type=float, help="training seconds per leg (30; dry run 20, a ceiling)")
    ap.add_argument("--legs", nargs="+", action="extend", choices=list(LEGS), metavar="LEG",
                    help="a subset (names below), run in the order given")
    ap.add_argument("--seeds", nargs="+", action="extend", type=int,
                    help="seeds (default 0); legs run seed-major")
    ap.add_argument("--deadline", type=float, help="seconds for all legs (330; dry run 150)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny CPU run of the same code "
                    "(automatic without CUDA)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.seeds = args.seeds or [0]
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        return child(json.loads(args.child))
    import torch

    t_start = time.time()
    dry = args.cpu_dry_run or not torch.cuda.is_available()
    if dry and not args.cpu_dry_run:
        print("scaling_check: no CUDA device; running the CPU dry run", flush=True)
    s = dict(DRY_DEFAULTS if dry else DEFAULTS)
    s.update({k: getattr(args, k) for k in ("seconds", "deadline") if getattr(args, k) is not None})
    legs = args.legs or (DRY_LEGS if dry else list(LEGS))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"settings": {**s, "dry_run": dry, "seeds": args.seeds, "legs": legs},
              "environment": environment(gpu=not dry), "legs": {}}
    # run folders (policy, buffer, checkpoint) go to a temporary folder, never into `out`;
    # each leg's log files are kept under tmp/logs for the tar
    tmp = Path(tempfile.mkdtemp(prefix="scaling_check_"))
    stopped = None

    def write() -> None:
        report["total_seconds"] = round(time.time() - t_start, 1)
        (out / "scaling_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (out / "scaling_check.md").write_text(table(report))
        if (tmp / "logs").is_dir():
            with tarfile.open(out / "scaling_runs.tgz.part", "w:gz") as tar:
                tar.add(tmp / "logs", arcname="scaling_runs")
            os.replace(out / "scaling_runs.tgz.part", out / "scaling_runs.tgz")

    slowest: dict[str, float] = {}  # group -> the slowest leg so far (seconds, all in)
    running = None  # (key, run folder) of the leg in progress
    try:
        with sigterm_as_interrupt():  # the wrapper's `timeout` sends SIGTERM
            for seed in args.seeds:
                for name in legs:
                    key = name if len(args.seeds) == 1 else f"{name}_s{seed}"
                    group = LEGS[name][0]
                    left = s["deadline"] - (time.time() - t_start)
                    need = slowest.get(group) or max(slowest.values(), default=0.0) or (
                        s["seconds"] + STARTUP_ALLOWANCE)
                    if left < need:
                        report["legs"][key] = {"skipped": f"{max(0.0, left):.0f} s left before the deadline "
                                                          f"({s['deadline']:g} s), a leg of this group "
                                                          f"takes about {need:.0f} s"}
                        print(f"scaling_check: {key} skipped: {report['legs'][key]['skipped']}", flush=True)
                        continue
                    run_dir = tmp / "runs" / key
                    spec = {"leg": name, "seed": seed, "run_dir": str(run_dir),
                            "error_file": str(tmp / f"{key}.error"), "seconds": s["seconds"],
                            "eval_size": s["eval_size"], "eval_every": s["eval_every"],
                            "overrides": leg_overrides(name, dry, s["max_updates"])}
                    print(f"scaling_check: {key} ({group}, {s['seconds']:g} s), "
                          f"{time.time() - t_start:.0f} s in", flush=True)
                    t0 = time.time()
                    running = (key, run_dir)
                    res = run_leg(spec, min(left, 2 * s["seconds"] + 90))
                    running = None
                    res.update(group=group, seed=seed, leg_seconds=round(time.time() - t0, 1),
                               overrides=spec["overrides"])
                    slowest[group] = max(slowest.get(group, 0.0), res["leg_seconds"])
                    report["legs"][key] = res
                    if run_dir.is_dir():
                        keep_logs(run_dir, tmp / "logs" / key)
                    write()
                    error = res["error"].strip().splitlines()[-1] if res.get("error") else None
                    print(f"scaling_check: {key} done in {res['leg_seconds']:.0f} s: "
                          f"{res.get('updates')} updates, {res.get('updates_per_minute')} per minute"
                          + (f"\n  error: {error}" if error else ""), flush=True)
    except KeyboardInterrupt:
        stopped = "stopped by a signal (Ctrl-C, or the wrapper's time limit)"
        report["stopped"] = stopped
        if running is not None:  # what the stopped leg logged so far
            key, run_dir = running
            part = {}
            with contextlib.suppress(Exception):
                part = leg_metrics(run_dir) if run_dir.is_dir() else {}
            report["legs"][key] = {**part, "error": f"{stopped}, while this leg ran"}
        print(f"scaling_check: {stopped}; the reports hold the legs done so far", flush=True)
    finally:
        write()
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(report))
    ok = all("error" not in r for r in report["legs"].values())
    return 0 if ok and not stopped else 1


if __name__ == "__main__":
    sys.exit(main())
