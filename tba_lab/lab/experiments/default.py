"""Benchmark ``default``: the default ``tba-lab train`` over seeds, optionally side by side with
another commit or with ``python -m tba_lab.minimal`` (preset ``minimal``).

Claim: what a user gets from ``make demo`` (async TBA, one searcher, the 9-minute budget):
the held-out gain and the trainer's update rate quoted in the README; and, with ``other`` set
(``--set other=COMMIT``), whether a change moved the gain or the rate, measured against the
commit before it on the same machine at the same time (the log's "rate unchanged" claims).
Preset ``minimal`` (``--set minimal=true``, 3 minutes): whether the one-file TBA of
:mod:`tba_lab.minimal` gains as much as ``tba-lab train`` in the same budget, seed by seed.

Each run is ``python -m tba_lab train --seed S --task TASK --no-progress`` in a fresh process,
every other setting at its default (``minutes`` and ``eval_size``, when set, and ``--config``
go in through a config file). With ``other`` (a folder, or a commit of this repository checked
out into a temporary git worktree per run) the runs alternate between the two checkouts seed by
seed, ``other`` first, so a drift in machine load hits both alike; each checkout's package is
first on ``PYTHONPATH``. Numbers move with machine load: compare rows of one invocation.
"""
from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tba_lab.lab.experiments.common import (GAIN_DELTA, RATE_DELTA, RUN_OVERHEAD_SECONDS,
                                            ExperimentError, change, claim_lines, errorbar,
                                            paired, paper_claim, pct, points, pyplot, rng,
                                            save_figure, separated, spread)

NAME = "default"
TITLE = "The default run: `tba-lab train` over seeds"
CLAIM = ("The kit's default (async TBA with one searcher, 9 minutes) raises held-out accuracy "
         "on the embedded task at the update rate the README quotes; with another commit side by "
         "side, a change leaves that rate where it was or says how far it moved; preset `minimal`: "
         "the one-file `python -m tba_lab.minimal` gains within 3 points of `tba-lab train` in "
         "the same 3 minutes.")
DEPARTURES = [
    "Not a claim of the paper: the kit's own default run on its tiny model and synthetic task, "
    "timed on this machine's CPU cores.",
]
HERE = Path(__file__).resolve().parents[3]  # this checkout: the package's repository


def settings(smoke: bool, minimal: bool = False) -> dict:
    """``task``; ``other``: a folder or commit to run side by side ("" = none); ``minimal``:
    also run ``python -m tba_lab.minimal`` (arithmetic only) with the same budget, seed and
    held-out size; ``minutes`` and ``eval_size``: None keeps the config's (9 minutes, 500
    problems; preset ``minimal``: 3 minutes); ``report_to``: this checkout's runs only
    (``report_to=tensorboard``: does live logging cost updates?), the ``other`` one's keep the
    default, since it may predate the option. SMOKE: tiny runs."""
    if smoke:
        return {"task": "arithmetic", "other": "", "minimal": minimal, "minutes": 0.2,
                "eval_size": 20, "prompts": 8, "generations": 4, "initial_fill": 32,
                "report_to": []}
    return {"task": "arithmetic", "other": "", "minimal": minimal,
            "minutes": 3.0 if minimal else None, "eval_size": None, "report_to": []}


def variants(s: dict) -> list[tuple[str, dict]]:
    """``("other", overrides)`` (with ``other``) then ``("this", overrides)``; the overrides
    hold only what the settings change from the defaults. A commit name in ``other`` (``HEAD``,
    a branch) is resolved to its hash here, once, and written back into ``s``: a commit made
    while the experiment runs must not change what its later runs compare against.

    Raises:
        ExperimentError: ``other`` is neither a folder nor a commit of this repository."""
    if s["other"] and not Path(s["other"]).is_dir():
        found = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--verify", "--quiet",
                                f"{s['other']}^{{commit}}"], capture_output=True, text=True)
        if found.returncode != 0:
            raise ExperimentError(f"--set other={s['other']}: not a folder and not a commit of "
                                  f"{HERE}; give a checkout's folder or a commit (e.g. HEAD~1)")
        s["other"] = found.stdout.strip()
    over: dict = {}
    if s.get("minutes"):
        over["max_minutes"] = float(s["minutes"])
    if s.get("eval_size"):
        over["task"] = {"eval_size": int(s["eval_size"]), "interim_eval_size": int(s["eval_size"])}
    if s.get("prompts"):
        over["training"] = {"num_prompts_per_step": s["prompts"], "num_generations": s["generations"]}
        over["buffer"] = {"initial_fill": s["initial_fill"]}
    this = {**over, "report_to": list(s["report_to"])} if s.get("report_to") else over
    return (([("other", over)] if s["other"] else []) + [("this", this)]
            + ([("minimal", {})] if s.get("minimal") else []))


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """Budget + process start-up and the evaluations before and after, per run."""
    per_run = 60 * (s["minutes"] or 9.0) + (2 if smoke else 4) * RUN_OVERHEAD_SECONDS
    return n_seeds * len(variants(s)) * per_run


@contextlib.contextmanager
def checkout(other: str):
    """``other`` as a folder: itself if it is one, else a temporary git worktree of that commit
    of this repository (removed afterwards)."""
    if Path(other).is_dir():
        yield Path(other).resolve()
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(tree), other],
                       check=True, stdout=subprocess.DEVNULL)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)],
                           check=False)


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """One ``tba-lab train`` process of the checkout ``variant`` names; returns its
    ``(summary, eval rows)``.

    Raises:
        subprocess.CalledProcessError: the run failed (its error is on stderr above)."""
    import json

    import yaml

    from tba_lab.runlog import read_jsonl_rows

    run_dir = Path(run_dir).resolve()  # the process's working directory is its checkout
    if variant == "minimal":
        return run_minimal(run_dir, seed, s), []
    cmd = [sys.executable, "-m", "tba_lab", "train", "--seed", str(seed), "--output-dir",
           str(run_dir), "--no-progress", "--task", s["task"]]
    if overrides:
        path = run_dir.parent / f"{run_dir.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(overrides))
        cmd += ["--config", str(path)]
    with (checkout(s["other"]) if variant == "other" else contextlib.nullcontext(HERE)) as code:
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(code)}, cwd=code, check=True,
                       stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "summary.json").read_text()), read_jsonl_rows(run_dir / "eval.jsonl")


MINIMAL_LINE = re.compile(r"held-out accuracy (?P<before>[\d.]+)% -> (?P<after>[\d.]+)% in "
                          r"(?P<steps>\d+) updates, (?P<seconds>\d+) s \((?P<samples>\d+) samples, "
                          r"staleness mean (?P<staleness>[\d.]+)\)")


def run_minimal(run_dir: Path, seed: int, s: dict) -> dict:
    """One ``python -m tba_lab.minimal`` process with the run's budget, seed and held-out size
    (500 when ``eval_size`` is None); its output goes to ``run_dir/output.txt``, and the
    summary read from its last line (:data:`MINIMAL_LINE`) to ``run_dir/summary.json``.

    Raises:
        subprocess.CalledProcessError: the run failed; ValueError: ``task`` is not arithmetic
        (minimal.py trains on the arithmetic task only), or the last line cannot be read."""
    import json

    if s["task"] != "arithmetic":
        raise ValueError(f"task={s['task']!r}: tba_lab.minimal trains on arithmetic only")
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tba_lab.minimal", "--seed", str(seed),
           "--minutes", str(s["minutes"] or 3.0), "--eval-size", str(s["eval_size"] or 500)]
    done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(HERE)}, cwd=HERE, check=True,
                          capture_output=True, text=True)
    (run_dir / "output.txt").write_text(done.stdout + done.stderr)
    m = MINIMAL_LINE.search(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
    if m is None:
        raise ValueError(f"tba_lab.minimal's last line is not a summary (see {run_dir / 'output.txt'})")
    steps, seconds = int(m["steps"]), float(m["seconds"])
    summary = {"held_out_metrics": ["accuracy"], "accuracy_before": float(m["before"]) / 100,
               "accuracy_after": float(m["after"]) / 100, "trainer_steps": steps,
               "updates_per_minute": 60 * steps / seconds if seconds else None,
               "samples_generated": int(m["samples"]), "staleness_mean": float(m["staleness"]),
               "staleness_max": None, "wall_seconds": seconds}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Held-out metrics before and after (the headline first), updates, rates, staleness, and
    the trainer's median update and reference-pass seconds (``metrics.jsonl``, first left out)."""
    from tba_lab.runlog import read_jsonl_rows

    rows = read_jsonl_rows(Path(run_dir) / "metrics.jsonl")[1:]
    metrics = list(summary.get("held_out_metrics") or ["accuracy"])
    return {"metrics": metrics,
            "before": {m: summary.get(f"{m}_before") for m in metrics},
            "after": {m: summary.get(f"{m}_after") for m in metrics},
            **{k: summary.get(k) for k in ("trainer_steps", "updates_per_minute",
                                           "samples_generated", "staleness_mean", "staleness_max")},
            **{k: statistics.median(r.get(k, 0.0) for r in rows) if rows else None
               for k in ("update_seconds", "reference_seconds")}}


def analyse(runs: list[dict], s: dict) -> dict:
    """Per checkout: the spread over seeds of each metric after training, the headline's gain,
    and updates per minute; with two checkouts, whether their ranges separate."""
    metrics = runs[0]["metrics"] if runs else ["accuracy"]
    head = metrics[0]
    labels = {}
    for label in dict.fromkeys(r["variant"] for r in runs):
        rs = [r for r in runs if r["variant"] == label]
        labels[label] = {"seeds": [r["seed"] for r in rs],
                         "after": {m: spread(r["after"].get(m) for r in rs) for m in metrics},
                         "gain": spread(None if r["after"].get(head) is None else
                                        r["after"][head] - r["before"][head] for r in rs),
                         "updates_per_minute": spread(r["updates_per_minute"] for r in rs)}
    keys = ("variant", "seed", "before", "after", "trainer_steps", "updates_per_minute",
            "samples_generated", "staleness_mean", "staleness_max", "update_seconds",
            "reference_seconds")
    out = {"task": s["task"], "other": s["other"], "metrics": metrics, "labels": labels,
           "runs": [{k: r.get(k) for k in keys} for r in runs]}
    gain = {(r["variant"], r["seed"]): None if r["after"].get(head) is None
            else r["after"][head] - r["before"][head] for r in runs}
    upm = {(r["variant"], r["seed"]): r["updates_per_minute"] for r in runs}
    claims = []
    if "other" in labels and "this" in labels:  # a checkout should keep the run's gain and rate
        out["separated"] = {k: separated(labels["this"][k], labels["other"][k])
                            for k in ("updates_per_minute", "gain")}
        per = {label: {seed: v for (lab, seed), v in gain.items() if lab == label}
               for label in ("this", "other")}
        claims.append(paper_claim(
            "default.gain", f"This checkout's default run gains as much {head} as `{s['other']}`'s",
            "the kit's own claim (a change keeps the default run's learning)",
            f"{head} gain of this checkout minus the other's, per seed", paired(per["this"],
                                                                              per["other"]),
            0, GAIN_DELTA, "points", scale=100))
        rate = {label: {seed: v for (lab, seed), v in upm.items() if lab == label}
                for label in ("this", "other")}
        claims.append(paper_claim(
            "default.updates_per_minute", f"This checkout makes as many updates per minute as "
            f"`{s['other']}`", "the kit's own claim (a change keeps the default run's speed)",
            "updates per minute of this checkout over the other's, minus 1, per seed",
            paired(rate["this"], rate["other"], lambda t, o: t / o - 1), 0, RATE_DELTA, "%",
            scale=100))
    if "minimal" in labels and "this" in labels:  # gain of minimal.py minus train's, per seed
        out["minimal_gap"] = {seed: gain[("minimal", seed)] - gain[("this", seed)]
                              for seed in labels["minimal"]["seeds"]
                              if None not in (gain.get(("minimal", seed)), gain.get(("this", seed)))}
        claims.append(paper_claim(
            "minimal.gain", "`python -m tba_lab.minimal` (one file) gains as much as `tba-lab "
            "train`", "the kit's own claim (the one-file TBA learns as the library does)",
            f"{head} gain of minimal.py minus the library's, per seed", out["minimal_gap"], 0,
            GAIN_DELTA, "points", scale=100))
    out["claims"] = claims
    return out


def readings(a: dict) -> list[str]:
    """Each checkout's gain and rate over seeds; with two, whether this one moved them."""
    head, out = a["metrics"][0], []
    upm = lambda v: f"{v:.0f}"  # noqa: E731
    for label, x in a["labels"].items():
        out.append(f"`{label}` ({len(x['seeds'])} seed(s)): {head} after training "
                   f"{rng(x['after'][head])}, a gain of {rng(x['gain'], points)} points; trainer "
                   f"updates per minute {rng(x['updates_per_minute'], upm)}.")
    if "separated" in a:
        this, other = a["labels"]["this"], a["labels"]["other"]
        for key, what, fmt in (("updates_per_minute", "the update rate", upm),
                               ("gain", f"the {head} gain", points)):
            out.append(f"Against `{a['other']}`, this checkout "
                       f"{change(other[key]['mean'], this[key]['mean'], fmt, what)} "
                       f"({fmt(other[key]['mean'])} -> {fmt(this[key]['mean'])}).")
    if a.get("minimal_gap"):
        gaps = a["minimal_gap"]
        out.append(f"`minimal` (python -m tba_lab.minimal) minus `this` (tba-lab train), gain in "
                   f"{head} per seed: " + ", ".join(f"seed {k} {points(v)}" for k, v in gaps.items())
                   + ".")
    return out + claim_lines(a.get("claims", []))


def _before_after(m: str, before, after) -> str:
    if before is None or after is None:
        return "-"
    if m in ("accuracy", "win_rate", "attack_success"):  # fractions, shown in percent
        return f"{pct(before)} -> {pct(after)} ({points(after - before)})"
    return f"{before:.3g} -> {after:.3g}"


def table(a: dict) -> list[str]:
    def f(v, fmt):  # a run stopped before its first update has no rates
        return "-" if v is None else format(v, fmt)

    lines = ["| code | seed | " + " | ".join(f"{m} (before -> after)" for m in a["metrics"])
             + " | trainer updates | updates/min | samples | staleness mean / max | update s "
               "| reference s |",
             "|---|---|" + "---|" * len(a["metrics"]) + "---|---|---|---|---|---|"]
    for r in a["runs"]:
        lines.append(f"| {r['variant']} | {r['seed']} | "
                     + " | ".join(_before_after(m, r["before"].get(m), r["after"].get(m))
                                  for m in a["metrics"])
                     + f" | {f(r['trainer_steps'], ',')} | {f(r['updates_per_minute'], '.1f')} | "
                       f"{f(r['samples_generated'], ',')} | {f(r['staleness_mean'], '.1f')} / "
                       f"{f(r['staleness_max'], '')} | {f(r['update_seconds'], '.3f')} | "
                       f"{f(r['reference_seconds'], '.3f')} |")
    return lines


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    """``default.png``: the headline metric after training and updates per minute per checkout."""
    plt = pyplot()
    head, labels = a["metrics"][0], list(a["labels"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    xs = list(range(len(labels)))
    errorbar(ax1, xs, [a["labels"][k]["after"][head] for k in labels], color="C0")
    errorbar(ax2, xs, [a["labels"][k]["updates_per_minute"] for k in labels], scale=1.0, color="C1")
    ax1.set(ylabel=f"held-out {head} after training (%)", title=f"{a['task']}: {head}")
    ax2.set(ylabel="trainer updates / min", title="update rate")
    for ax in (ax1, ax2):
        ax.set_xticks(xs, [f"`{k}`" for k in labels])
        ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.grid(alpha=0.3)
    return save_figure(fig, out, "default.png", f"Held-out {head} after training and trainer "
                       "updates per minute per checkout: mean over seeds, bars from the lowest "
                       "to the highest seed.")
