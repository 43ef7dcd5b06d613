"""Benchmarks ``default`` and ``minimal``: the default ``tba-lab train`` over seeds, beside
another commit (``--set other=COMMIT``) or ``python -m tba_lab.minimal`` (preset ``minimal``).

Claims of no change, paired by seed: with ``other``, this checkout's gain and update rate
against the other's (the log's "rate unchanged" claims); ``minimal``: the one-file TBA gains as
much as ``tba-lab train`` in the same 3 minutes.

Each run is ``python -m tba_lab train --seed S --task TASK --no-progress`` in a fresh process,
its checkout's package first on ``PYTHONPATH`` (``other``: a folder, or a commit checked out
into a temporary git worktree per run), every other setting at its default. The checkouts
alternate seed by seed, ``other`` first, so a drift in machine load hits both alike; compare
rows of one invocation only. A run gets SIGTERM when the experiment's process ends, however it
ends (``TBA_LAB_PARENT_PID``, :mod:`tba_lab.actors.lifetime`; an ``other`` checkout older than
that module does not watch it).
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tba_lab.actors.lifetime import child_env
from tba_lab.lab.experiments.common import (BATCH, GAIN_DELTA, RATE_DELTA, ExperimentError, fixed,
                                            held_out, paired, paper_claim, pct, points,
                                            premise, sized)
from tba_lab.lab.experiments.race import TASKS
from tba_lab.paths import REPO_DIR

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


def settings(smoke: bool, minimal: bool = False) -> dict:
    """``task``; ``other``: a folder or commit beside this one ("" = none); ``minimal``: also
    ``python -m tba_lab.minimal`` (arithmetic only); ``minutes`` and ``eval_size``: None keeps
    the config's (9 minutes, 500 problems); ``report_to``: this checkout's runs only (the other
    may predate the option)."""
    return {"task": "arithmetic", "other": "", "minimal": minimal,
            "minutes": 0.2 if smoke else 3.0 if minimal else None,
            "eval_size": 20 if smoke else None, **(sized(True, **BATCH) if smoke else {}),
            "report_to": []}


def variants(s: dict) -> list[tuple[str, dict]]:
    """``other`` (if set), ``this`` and ``minimal`` (if set) with only what the settings change
    from the defaults. A commit name in ``other`` is resolved to its hash here, once, into
    ``s``: a commit made while the experiment runs must not change what it compares against.

    Raises:
        ExperimentError: ``other`` is neither a folder nor a commit of this repository."""
    if s["other"] and not Path(s["other"]).is_dir():
        found = subprocess.run(["git", "-C", str(REPO_DIR), "rev-parse", "--verify", "--quiet",
                                f"{s['other']}^{{commit}}"], capture_output=True, text=True)
        if found.returncode != 0:
            raise ExperimentError(f"--set other={s['other']}: not a folder and not a commit of "
                                  f"{REPO_DIR}; give a checkout's folder or a commit (e.g. HEAD~1)")
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


@contextlib.contextmanager
def checkout(other: str):
    """``other`` as a folder: itself, or a temporary git worktree of that commit."""
    if Path(other).is_dir():
        yield Path(other).resolve()
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(REPO_DIR), "worktree", "add", "--detach", str(tree),
                        other], check=True, stdout=subprocess.DEVNULL)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO_DIR), "worktree", "remove", "--force", str(tree)],
                           check=False)


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """One ``tba-lab train`` process of the checkout ``variant`` names (or :func:`run_minimal`);
    returns its ``(summary, eval rows)``. Raises subprocess.CalledProcessError if it fails."""
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
    with (checkout(s["other"]) if variant == "other" else contextlib.nullcontext(REPO_DIR)) as code:
        subprocess.run(cmd, env=child_env({**os.environ, "PYTHONPATH": str(code)}), cwd=code,
                       check=True, stdout=subprocess.DEVNULL)
    return json.loads((run_dir / "summary.json").read_text()), read_jsonl_rows(run_dir / "eval.jsonl")


def run_minimal(run_dir: Path, seed: int, s: dict) -> dict:
    """One ``python -m tba_lab.minimal`` process with the run's budget, seed and held-out size;
    its output to ``run_dir/output.txt``, the dict its ``main`` returns (its last line, as JSON)
    as the run's ``summary.json``.

    Raises:
        subprocess.CalledProcessError: the run failed; ValueError: ``task`` is not arithmetic."""
    if s["task"] != "arithmetic":
        raise ValueError(f"task={s['task']!r}: tba_lab.minimal trains on arithmetic only")
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", "import json, sys; from tba_lab.actors.lifetime import "
           "exit_with_parent_from_env; exit_with_parent_from_env(); from tba_lab.minimal import "
           "main; print(json.dumps(main(sys.argv[1:])))", "--seed", str(seed),
           "--minutes", str(s["minutes"] or 3.0), "--eval-size", str(s["eval_size"] or 500)]
    done = subprocess.run(cmd, env=child_env({**os.environ, "PYTHONPATH": str(REPO_DIR)}),
                          cwd=REPO_DIR, check=True, capture_output=True, text=True)
    (run_dir / "output.txt").write_text(done.stdout + done.stderr)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    summary = {**out, "held_out_metrics": ["accuracy"], "staleness_max": None,
               "updates_per_minute": 60 * out["trainer_steps"] / out["wall_seconds"]}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def metrics(s: dict) -> dict:
    head = TASKS.get(s["task"], ("accuracy",))[0]  # the task race's headline; arithmetic: accuracy
    return {"headline_after": (f"held-out {head} after training", pct),
            "gain": (f"{head} gain (points)", points),
            "updates_per_minute": ("trainer updates per minute", fixed(1)),
            "update_seconds": ("median update seconds (first left out)", fixed(3)),
            "reference_seconds": ("median reference-pass seconds", fixed(3)),
            "staleness_mean": ("staleness (updates)", fixed(1))}


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """The headline metric after training and the median update and reference-pass seconds
    (the first left out); held-out metrics, the headline's gain, rates: the runner's."""
    from tba_lab.runlog import read_jsonl_rows

    rows = read_jsonl_rows(Path(run_dir) / "metrics.jsonl")[1:]
    h = held_out(summary)
    return {"headline_after": h["after"][h["metrics"][0]],
            **{k: statistics.median(r.get(k, 0.0) for r in rows) if rows else None
               for k in ("update_seconds", "reference_seconds")}}


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of no change of the module docstring (gains from each row's summary: the
    rows stored before the runner recorded ``gain`` have none)."""
    head = TASKS.get(s["task"], ("accuracy",))[0]  # the task race's headline; arithmetic: accuracy
    ran = {r["variant"] for r in runs}

    def gain(r):
        return held_out(r["summary"])["gain"]

    alternating = premise("the two arms ran alternately, seed by seed, in one sweep on one "
                          "machine (by design)", True, "one sweep")
    out = []
    if {"this", "other"} <= ran:  # a checkout should keep the run's gain and rate
        out.append(paper_claim(
            "default.gain", f"This checkout's default run gains as much {head} as `{s['other']}`'s",
            "the kit's own claim (a change keeps the default run's learning)",
            f"{head} gain of this checkout minus the other's, per seed",
            paired(runs, "this", "other", gain), 0, GAIN_DELTA, "points", scale=100,
            premise=alternating))
        out.append(paper_claim(
            "default.updates_per_minute", f"This checkout makes as many updates per minute as "
            f"`{s['other']}`", "the kit's own claim (a change keeps the default run's speed)",
            "updates per minute of this checkout over the other's, minus 1, per seed",
            paired(runs, "this", "other", "updates_per_minute", lambda t, o: t / o - 1),
            0, RATE_DELTA, "%", scale=100, premise=alternating))
    if {"this", "minimal"} <= ran:
        out.append(paper_claim(
            "minimal.gain", "`python -m tba_lab.minimal` (one file) gains as much as `tba-lab "
            "train`", "the kit's own claim (the one-file TBA learns as the library does)",
            f"{head} gain of minimal.py minus the library's, per seed",
            paired(runs, "minimal", "this", gain), 0, GAIN_DELTA, "points", scale=100,
            premise=alternating))
    return out
