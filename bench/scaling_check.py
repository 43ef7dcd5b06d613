"""The prepared scaling check: async TBA with more searchers, against sync TB and sync GRPO, with
the trainer and searchers on one GPU and as CPU processes. Run it through
``bench/scaling_check.sh [OUT_DIR] [flags]`` (at most 6 minutes; needs only torch and
transformers, the repository on PYTHONPATH).

Legs, in the order they run (the most telling first, so a deadline cuts the least useful):

    gpu_async_tba_n3   async TB, 3 searchers   trainer and searchers on cuda:0
    gpu_async_tba_n6   async TB, 6 searchers   "
    gpu_sync_tb        sync TB (1 searcher)    "
    cpu_async_tba_n1   async TB, 1 searcher    every actor a CPU process
    cpu_async_tba_n8   async TB, 8 searchers   "
    gpu_async_tba_n1   async TB, 1 searcher    cuda:0
    gpu_sync_grpo      sync GRPO               cuda:0
    cpu_async_tba_n4   async TB, 4 searchers   CPU
    cpu_sync_tb        sync TB                 CPU
    cpu_async_tba_n2   async TB, 2 searchers   CPU

Each leg is ``tba_lab.config.short_run(run_dir, SECONDS, overrides, seed, eval_size=200,
interim_eval_size=200, eval_every_seconds=10)`` with ``task.defer_interim_eval = True`` (an
interim tick only copies the weights; the copies are scored after the budget, off the clock),
then ``tba_lab.trainer.train(cfg, progress=False)``, in a process of its own (a crash, a hang or a
CUDA error in one leg cannot stop or slow the next; a leg past its time limit is stopped with
SIGTERM, then SIGKILL). Everything else is the project's defaults: B = 16, K = 8, and the thread
counts and ``async.reference_pass`` the kit resolves for the machine (this script sets neither;
each leg records what the run used, from ``summary.json``'s ``placement`` when the trainer
writes one, and ``config.yaml``'s values as configured).

Per leg (``scaling_check.json``; ``scaling_check.md`` tabulates them):

* ``updates_per_minute``: ``summary.json``'s (updates over the training seconds, start-up in);
  ``steady_updates_per_minute``: between the first and the last update (60 * (last step - first
  step) / (their ``wall_seconds`` apart), as ``tba_lab.lab.simulate.run_timings``);
* ``samples_per_minute``: rollouts generated over the training seconds;
  ``steady_samples_per_minute``: rollouts received between the first update's start and the
  last update's end, per minute of that window (notebook 10's definition);
* ``staleness_mean`` / ``staleness_max``: ``summary.json``'s (updates minus the rollout's version);
* ``trainer_busy``: the trainer busy fraction = sum of ``update_seconds`` / sum of
  (``update_seconds`` + ``wait_seconds`` + ``reference_seconds``) over the ``metrics.jsonl`` rows
  after the first (the first update waits for the searchers' start-up and the initial fill). The
  three are disjoint in the log: time in the optimizer update, time waiting for data, time in
  the trainer's reference pass. 1.0 = the trainer never waited and scored nothing;
* ``update_seconds`` / ``reference_seconds`` / ``wait_seconds``: medians over the same rows;
  ``gen_seconds``: median of ``searchers.jsonl``'s ``gen_seconds`` (one generation batch);
* ``evals``: ``[[seconds of training, accuracy], ...]`` from ``eval.jsonl`` (before = 0 s, the
  interim copies, after = the end of the budget); ``time_to_40`` / ``time_to_45``: seconds of
  training until held-out accuracy first reached 40% / 45%, interpolated linearly between the
  evaluation below the target and the next (0.0 when the first evaluation was already there,
  None when never reached);
* ``resolved``: the run's placement as the trainer resolved it (threads, reference pass,
  cores), ``configured``: ``config.yaml``'s ``async`` values, ``cpu_count``: ``os.cpu_count()``;
* ``error`` (a traceback or why the leg's process ended) or ``skipped`` (the deadline), ``leg_seconds``
  (the whole leg: process start, model loads, evaluations).

Limits: a leg starts only if it fits before ``--deadline`` (seconds since the start; judged by
the slowest leg so far of its group, else by ``--seconds`` plus a start-up allowance) and is
stopped at the deadline; skipped legs say so in both reports. The shell wrapper adds a hard
``timeout`` of 6 minutes.

Outputs (at most 4 files, in the output folder): ``scaling_check.json`` (everything),
``scaling_check.md`` (the tables), ``scaling_runs.tgz`` (each leg's ``config.yaml``,
``summary.json``, ``metrics.jsonl``, ``searchers.jsonl`` and ``eval.jsonl``; ``--no-tar`` leaves
it out); the wrapper adds ``scaling_check.log``. The run folders themselves (policy, buffer,
checkpoint) live in a temporary folder that is removed after each leg. The JSON, Markdown and
tar are rewritten after every leg, so a stopped check keeps what it measured.

CPU dry run (``--cpu-dry-run``, or automatically without CUDA): the same code path with GPU legs
placed on the CPU, tiny budgets (2 legs, ``gpu_async_tba_n3`` and ``cpu_sync_tb``; B = K = 4,
24 new tokens, 4 updates per leg within a 20-second ceiling, as searchers may start slowly on a
busy machine; 20-problem evaluations every 2 s), in under a minute on 2 idle cores;
``tests/test_bench.py`` runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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
LOG_FILES = ("config.yaml", "summary.json", "metrics.jsonl", "searchers.jsonl", "eval.jsonl")


# ------------------------------------------------------------------------ pure bookkeeping
def merge(a: dict, b: dict) -> dict:
    """``b`` over ``a``, nested dicts merged (neither is changed)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def leg_overrides(name: str, dry: bool, max_updates: int = 0) -> dict:
    """The config overrides of leg ``name``: its algorithm and mode, the GPU placement for the
    ``gpu`` group (left out in a dry run: every actor on the CPU), the dry run's small shape."""
    group, over = LEGS[name]
    over = merge(over, {"async": GPU} if group == "gpu" and not dry else {})
    if dry:
        over = merge(over, DRY_SHAPE)
    if max_updates:
        over = merge(over, {"training": {"max_steps": int(max_updates)}})
    return over


def time_to(evals: list, target: float) -> float | None:
    """Seconds of training until accuracy first reached ``target``: interpolated linearly
    between the last evaluation below it and the next one; 0.0 when the first evaluation is
    already there; None when it never is. ``evals``: ``[[seconds, accuracy], ...]``."""
    rows = sorted((float(t), float(a)) for t, a in evals)
    if not rows:
        return None
    if rows[0][1] >= target:
        return 0.0
    for (t0, a0), (t1, a1) in zip(rows, rows[1:]):
        if a0 < target <= a1:
            return round(t0 + (target - a0) * (t1 - t0) / (a1 - a0), 1)
    return None


def _median(xs: list) -> float | None:
    return round(float(statistics.median(xs)), 4) if xs else None


def _read_rows(path: Path) -> list[dict]:
    """JSONL rows; a half-written last line (a leg stopped mid-write) is left out."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return rows


def _configured(run_dir: Path) -> dict:
    """``config.yaml``'s async values that the kit may resolve (threads, reference pass),
    read line by line (no yaml import: the file is the kit's own flat dump)."""
    path = run_dir / "config.yaml"
    out, inside = {}, False
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        if not line.startswith(" "):
            inside = line.strip() == "async:"
            continue
        key, _, value = line.strip().partition(":")
        if inside and key in ("reference_pass", "searcher_threads", "trainer_threads",
                              "trainer_device", "searcher_devices", "num_searchers", "mode"):
            out[key] = value.strip()
    return out


def leg_metrics(run_dir: str | Path) -> dict:
    """The per-leg numbers (see the module docstring) from a run folder's logs.
    ``summary.json`` may be missing (a leg that was stopped): the rates then come from
    ``metrics.jsonl`` alone and the summary's fields are None."""
    run_dir = Path(run_dir)
    summary = {}
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
    rows = _read_rows(run_dir / "metrics.jsonl")
    batches = _read_rows(run_dir / "searchers.jsonl")
    evals = [[e["wall_seconds"], e["accuracy"]] for e in _read_rows(run_dir / "eval.jsonl")
             if "accuracy" in e]
    later = rows[1:] or rows  # the first update waits for the start-up and the initial fill
    upd = [r.get("update_seconds", 0.0) for r in later]
    wait = [r.get("wait_seconds", 0.0) for r in later]
    ref = [r.get("reference_seconds", 0.0) for r in later]
    busy_den = sum(upd) + sum(wait) + sum(ref)
    steady = steady_samples = None
    if len(rows) >= 2 and rows[-1]["wall_seconds"] > rows[0]["wall_seconds"]:
        steady = 60.0 * (rows[-1]["step"] - rows[0]["step"]) / (
            rows[-1]["wall_seconds"] - rows[0]["wall_seconds"])
        t0 = rows[0]["wall_seconds"] - rows[0].get("update_seconds", 0.0)
        t1 = rows[-1]["wall_seconds"]
        got = sum(b.get("rollouts", 0) for b in batches if t0 < b.get("received", -1) <= t1)
        steady_samples = 60.0 * got / (t1 - t0)
    wall = summary.get("wall_seconds") or (rows[-1]["wall_seconds"] if rows else None)
    samples = summary.get("samples_generated", rows[-1].get("samples_generated") if rows else None)
    rnd = (lambda x, d=1: None if x is None else round(float(x), d))
    return {
        "updates": summary.get("trainer_steps", rows[-1]["step"] if rows else 0),
        "wall_seconds": wall,
        "updates_per_minute": summary.get("updates_per_minute"),
        "steady_updates_per_minute": rnd(steady),
        "samples_generated": samples,
        "samples_per_minute": rnd(60.0 * samples / wall) if samples is not None and wall else None,
        "steady_samples_per_minute": rnd(steady_samples),
        "staleness_mean": rnd(summary.get("staleness_mean"), 3),
        "staleness_max": summary.get("staleness_max"),
        "trainer_busy": round(sum(upd) / busy_den, 4) if busy_den > 0 else None,
        "update_seconds": _median(upd), "reference_seconds": _median(ref),
        "wait_seconds": _median(wait),
        "gen_seconds": _median([b["gen_seconds"] for b in batches if "gen_seconds" in b]),
        "generation_batches": len(batches),
        "accuracy_before": summary.get("accuracy_before"),
        "accuracy_after": summary.get("accuracy_after"),
        "evals": evals, "time_to_40": time_to(evals, 0.40), "time_to_45": time_to(evals, 0.45),
        "searcher_failures": summary.get("searcher_failures", []),
        "resolved": summary.get("placement"), "configured": _configured(run_dir),
    }


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
             "",
             f"{env['cpu_count']} cores (os.cpu_count()), torch {env['torch']}, transformers "
             f"{env['transformers']}, Python {env['python']}; {s['seconds']:g} s of training per "
             f"leg{cap}, "
             f"seeds {' '.join(map(str, s['seeds']))}, {s['eval_size']} held-out problems every "
             f"{s['eval_every']:g} s (deferred: scored after the budget); "
             f"{report.get('total_seconds', '?')} s in all (deadline {s['deadline']:g} s).",
             "",
             "| leg | updates/min | steady upd/min | samples/min | steady samples/min | "
             "staleness mean/max | trainer busy | ref pass, threads t/s (resolved) |",
             "|---|---|---|---|---|---|---|---|"]
    legs = report["legs"]
    for name, r in legs.items():
        if "updates" not in r:
            continue
        lines.append(f"| {name} | {_f(r['updates_per_minute'])} | "
                     f"{_f(r['steady_updates_per_minute'])} | {_f(r['samples_per_minute'], '{:,.0f}')} | "
                     f"{_f(r['steady_samples_per_minute'], '{:,.0f}')} | "
                     f"{_f(r['staleness_mean'], '{:.2f}')}/{_f(r['staleness_max'], '{}')} | "
                     f"{_f(r['trainer_busy'], '{:.2f}')} | {_resolved(r)} |")
    lines += ["", "Medians, seconds per update (trainer) and per generation batch (searcher):", "",
              "| leg | updates | update | reference (trainer) | wait | searcher generation | "
              "leg seconds (all in) |", "|---|---|---|---|---|---|---|"]
    for name, r in legs.items():
        if "updates" in r:
            lines.append(f"| {name} | {r['updates']} | {_f(r['update_seconds'], '{:.3f}')} | "
                         f"{_f(r['reference_seconds'], '{:.3f}')} | {_f(r['wait_seconds'], '{:.3f}')} "
                         f"| {_f(r['gen_seconds'], '{:.3f}')} | {_f(r.get('leg_seconds'))} |")
    lines += ["", "| leg | accuracy before -> after | time to 40% | time to 45% | "
              "evaluations (s of training: accuracy) |", "|---|---|---|---|---|"]
    for name, r in legs.items():
        if "updates" in r:
            ev = " ".join(f"{t:.0f}s:{100 * a:.1f}" for t, a in r["evals"]) or "-"
            acc = (f"{_f(r['accuracy_before'] and 100 * r['accuracy_before'])} -> "
                   f"{_f(r['accuracy_after'] and 100 * r['accuracy_after'])}")
            lines.append(f"| {name} | {acc} | {_f(r['time_to_40'], '{:.0f} s')} | "
                         f"{_f(r['time_to_45'], '{:.0f} s')} | {ev} |")
    lines += ["", "Definitions: updates/min and samples/min over the training seconds (start-up "
              "in); steady = between the first and the last update; trainer busy = update "
              "seconds / (update + wait + reference seconds) over metrics.jsonl rows after the "
              "first; times to 40%/45% interpolated linearly between evaluations (- = not "
              "reached). Short runs, one seed each: read rates, not small accuracy differences "
              "(200 problems: about 3.4 points of standard error)."]
    bad = [(n, r) for n, r in legs.items() if r.get("error") or r.get("skipped")
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
    """Run one leg in this process (``--child``); writes its metrics to ``spec["result"]``."""
    sys.path.insert(0, str(REPO))
    result: dict = {"cpu_count": os.cpu_count()}
    try:
        from tba_lab.config import short_run
        from tba_lab.trainer import train

        cfg = short_run(spec["run_dir"], spec["seconds"], spec["overrides"], seed=spec["seed"],
                        eval_size=spec["eval_size"], interim_eval_size=spec["eval_size"],
                        eval_every_seconds=spec["eval_every"])
        cfg.task.defer_interim_eval = True
        train(cfg, progress=False)
    except BaseException:  # noqa: BLE001 - the leg's failure is its result, not this script's
        result["error"] = traceback.format_exc()[-4000:]
    try:
        result.update(leg_metrics(spec["run_dir"]))
    except Exception:
        result["error"] = (result.get("error", "") + "\nreading the logs: "
                           + traceback.format_exc()[-2000:]).strip()
    Path(spec["result"]).write_text(json.dumps(result, default=str))
    return 1 if "error" in result else 0


def _stop(proc: subprocess.Popen) -> None:
    """Stop a leg's process: SIGTERM to it (the trainer saves and stops its searchers), then
    SIGKILL to its whole process group (it was started as a group of its own)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its searchers too
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_leg(spec: dict, limit: float) -> dict:
    """Start leg ``spec`` in a new process and wait at most ``limit`` seconds."""
    # a process group of its own (to stop the leg with its searchers), in this session where
    # Python allows (3.11+: a caller that ends this session's processes reaches the leg too)
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child",
                             json.dumps(spec)], **group)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        _stop(proc)
        why = f"stopped after {limit:.0f} s (its time limit: the deadline, or 2 x budget + 90 s)"
        res = leg_metrics(spec["run_dir"]) if Path(spec["run_dir"]).is_dir() else {}
        return {**res, "error": why}
    except BaseException:  # Ctrl-C / SIGTERM of this script: stop the leg, then go
        _stop(proc)
        raise
    finally:
        try:  # a searcher the leg left behind (it should not): its process group ends with it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    path = Path(spec["result"])
    if path.is_file():
        return json.loads(path.read_text())
    return {"error": f"the leg's process ended with code {proc.returncode} and wrote no result "
                     f"(see scaling_check.log)"}


# --------------------------------------------------------------------------------- main
def environment(dry: bool) -> dict:
    """Where this ran: cores, versions, GPU (the parent reads CUDA's availability only)."""
    import importlib.metadata as md

    env = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
           "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    from tba_lab.actors.placement import available_cores

    env["cores_usable"] = available_cores()  # affinity mask under any CPU quota: what a run plans for
    for pkg in ("torch", "transformers"):
        try:
            env[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            env[pkg] = None
    if not dry:
        import torch

        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    try:
        env["commit"] = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True, timeout=5).stdout.strip() or None
    except Exception:
        env["commit"] = None
    return env


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"legs (in order): {' '.join(LEGS)}; dry run: {' '.join(DRY_LEGS)}")
    ap.add_argument("--out", default=os.environ.get("OUT") or "runs/scaling_check",
                    help="output folder (default $OUT, else runs/scaling_check)")
    ap.add_argument("--seconds", type=float, help="training seconds per leg (30; dry run 20, a ceiling)")
    ap.add_argument("--legs", nargs="+", choices=list(LEGS), metavar="LEG",
                    help="a subset (names below), run in the order given")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds; legs run seed-major")
    ap.add_argument("--deadline", type=float, help="seconds for all legs (330; dry run 150)")
    ap.add_argument("--eval-size", type=int, help="held-out problems per evaluation (200; dry 20)")
    ap.add_argument("--eval-every", type=float, help="interim evaluation period, s (10; dry 2)")
    ap.add_argument("--max-updates", type=int, help="stop a leg after this many updates (0 = "
                    "time only; dry run 4, so every leg gets updates however slow its start)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny CPU run of the same code "
                    "(automatic without CUDA)")
    ap.add_argument("--no-tar", action="store_true", help="do not write scaling_runs.tgz")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        return child(json.loads(args.child))
    t_start = time.time()
    dry = args.cpu_dry_run or os.environ.get("SCALING_CHECK_CPU_DRY_RUN") == "1"
    if not dry:
        try:
            import torch

            dry = not torch.cuda.is_available()
        except ImportError:
            dry = True
        if dry:
            print("scaling_check: no CUDA device; running the CPU dry run", flush=True)
    base = DRY_DEFAULTS if dry else DEFAULTS
    s = {k: base[k] if getattr(args, k) is None else getattr(args, k) for k in base}
    legs = args.legs or (DRY_LEGS if dry else list(LEGS))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"settings": {**s, "dry_run": dry, "seeds": args.seeds, "legs": legs},
              "environment": environment(dry), "legs": {}}
    # run folders (policy, buffer, checkpoint) go to a temporary folder, never into `out`;
    # each leg's five log files are kept under tmp/logs for the tar
    tmp = Path(tempfile.mkdtemp(prefix="scaling_check_"))
    stopped = None

    def on_term(signum, frame):
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, on_term)  # the wrapper's `timeout` sends SIGTERM

    def write() -> None:
        report["total_seconds"] = round(time.time() - t_start, 1)
        (out / "scaling_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (out / "scaling_check.md").write_text(table(report))
        if not args.no_tar and (tmp / "logs").is_dir():
            with tarfile.open(out / "scaling_runs.tgz.part", "w:gz") as tar:
                tar.add(tmp / "logs", arcname="scaling_runs")
            os.replace(out / "scaling_runs.tgz.part", out / "scaling_runs.tgz")

    slowest: dict[str, float] = {}  # group -> the slowest leg so far (seconds, all in)
    running = None  # (key, run folder) of the leg in progress
    try:
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
                    write()
                    continue
                run_dir = tmp / "runs" / key
                spec = {"leg": name, "seed": seed, "run_dir": str(run_dir),
                        "result": str(tmp / f"{key}.result.json"), "seconds": s["seconds"],
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
                if run_dir.is_dir():  # keep the logs, drop the policy, buffer and checkpoint
                    keep = tmp / "logs" / key
                    keep.mkdir(parents=True, exist_ok=True)
                    for f in LOG_FILES:
                        if (run_dir / f).is_file():
                            shutil.copy2(run_dir / f, keep / f)
                    shutil.rmtree(run_dir, ignore_errors=True)
                write()
                brief = {k: res.get(k) for k in ("updates", "updates_per_minute",
                                                 "steady_updates_per_minute", "samples_per_minute",
                                                 "trainer_busy", "staleness_mean", "time_to_40")}
                print(f"scaling_check: {key} done in {res['leg_seconds']:.0f} s: {json.dumps(brief)}"
                      + (f"\n  error: {res['error'].strip().splitlines()[-1]}" if res.get("error") else ""),
                      flush=True)
    except KeyboardInterrupt:
        stopped = "stopped by a signal (Ctrl-C, or the wrapper's time limit)"
        report["stopped"] = stopped
        if running is not None:  # what the stopped leg logged so far
            key, run_dir = running
            try:
                part = leg_metrics(run_dir) if run_dir.is_dir() else {}
            except Exception:
                part = {}
            report["legs"][key] = {**part, "error": f"{stopped}, while this leg ran"}
        print(f"scaling_check: {stopped}; the reports hold the legs done so far", flush=True)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        write()
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(report))
    ok = all("error" not in r for r in report["legs"].values())
    return 0 if ok and not stopped else 1


if __name__ == "__main__":
    sys.exit(main())
