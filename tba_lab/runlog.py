"""The run log: everything a training run writes besides the model, apart from the algorithm.

:class:`RunLog` owns the output files, the counters and the summary of one ``train()`` call, so
the training loop itself stays a screen long (CleanRL's separation of logging from the
algorithm). Files in ``cfg.output_dir``:

* ``config.yaml``: the exact configuration (reloads with ``tba_lab.config.load_yaml``);
* ``metrics.jsonl``: one object per trainer update (``step``, ``wall_seconds`` since training
  began, ``loss``, ``reward_mean`` of the batch, ``searcher_reward_mean`` of the newest
  rollouts, ``staleness_mean``/``staleness_max`` in updates, ``buffer_size``,
  ``samples_generated``, ``grad_norm``, ``lr``, ``wait_seconds`` (waiting for data before the
  update), ``reference_seconds`` (the trainer's reference pass on the rows of this update's
  batch that had none yet, ``async.reference_pass: trainer``; 0 otherwise; not part of
  ``wait_seconds``), ``update_seconds``, the newest searcher batch's ``gen_seconds``/``score_seconds``,
  ``behaviour_kl`` (every loss: the batch's mean of log mu(y|x) - log pi_theta(y|x), behaviour
  minus current policy summed over each response's tokens, an estimate of KL(mu || pi_theta)
  in nats per response; :func:`tba_lab.algorithms.compute_loss`), and the loss's own terms
  such as ``beta``, ``log_z``, ``kl``, ``clip_fraction`` (only the PPO-clipped losses: GRPO,
  Dr. GRPO, RLOO));
* ``searchers.jsonl``: one object per generation batch received (``searcher_id``, ``version``,
  ``t_start``/``t_end``/``received`` in seconds since training began, ``trainer_step``,
  ``gen_seconds``, ``score_seconds``, ``rollouts``, ``nonfinite_rewards``,
  ``nonfinite_logprobs`` (rows dropped for a NaN/inf behaviour or reference log-prob),
  ``sync_seconds`` (the weight sync before the batch) and ``node`` (where the searcher ran));
* ``eval.jsonl``: held-out metrics over time (``step``, ``wall_seconds``, ``n``, and the task's
  metrics, e.g. ``accuracy``);
* ``summary.json`` and ``curves.png`` at the end (also after Ctrl-C); its counters include
  ``nonfinite_rewards``, ``nonfinite_logprobs`` (rows dropped) and ``nonfinite_updates``
  (updates skipped for a NaN/inf loss or gradient norm: no optimizer step, no metrics row);
* ``tensorboard/`` with ``report_to: [tensorboard]``: the same numbers live, a metrics row's
  ``*_seconds`` as ``time/<key>`` and the rest as ``train/<key>``, e.g. ``train/behaviour_kl``
  and ``train/clip_fraction`` (:mod:`tba_lab.reporting`, which also draws the console's bar or
  status lines).

A new run starts these files afresh, also in a folder an earlier run used (that run's
``summary.json``, ``curves.png`` and ``tensorboard/`` are removed, and W&B and trackio get a new
run). A resumed run (``RunLog(cfg, resume=state)``) keeps exactly the rows written before its
checkpoint (a checkpoint at update S is written before the next poll, so rows logged after it
with trainer step S are dropped with those of the later updates: the resumed process does them
again), appends to the same files, and continues the counters, the summary and the dashboards'
runs (:func:`~tba_lab.reporting.make_reporters`). Rows of earlier steps written after the
checkpoint (the deferred interim evaluations of a finished run) are kept.

Also here: :func:`read_jsonl_rows` (the reader of these files, tolerant of a line being
written), :func:`read_json` (a JSON file that may be missing or half-written), :func:`read_run`,
:func:`write_text_atomic`, :func:`moving_average` and :func:`draw_runs` (the training curves of
``curves.png`` and of notebook 06's explorer), which the experiments and the course's analysis
tools share.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tba_lab.buffer import ReplayBuffer
from tba_lab.reporting import (RATE_SECONDS, Console, folder_tracker_runs, make_reporters,
                               update_scalars)

LOG_FILES = {"metrics": "step", "searchers": "trainer_step", "eval": "step"}  # file -> step key


def read_jsonl_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL file, or ``[]`` when it does not exist (a run that stopped early).

    A run still in progress may be writing its last line: an undecodable LAST line is left out.
    An undecodable line anywhere else raises ``json.JSONDecodeError`` (a corrupt file).
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return rows


def read_json(path: str | Path):
    """The JSON value in the file ``path``, or None when it is missing or half-written (a run
    still writing it, or one killed while it did)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: to ``path`` + ``.tmp`` first, then renamed over
    ``path``, so a reader never sees a half-written file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def trainer_seconds(row: dict) -> float:
    """Seconds the trainer worked on one ``metrics.jsonl`` update: ``update_seconds`` plus
    ``reference_seconds`` (its reference pass; 0 or absent when the searchers do it)."""
    return row.get("update_seconds", 0.0) + row.get("reference_seconds", 0.0)


def moving_average(values, window: int):
    """Trailing moving average: ``out[i] = mean(values[max(0, i - window + 1) : i + 1])``.

    The first ``window - 1`` points average over what exists so far (no padding), so the output
    has the input's length.

    Args:
        values: 1-D sequence of numbers.
        window: number of points averaged, >= 1.

    Returns:
        float64 numpy array of ``len(values)``.

    Raises:
        ValueError: window < 1.
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if window < 1:
        raise ValueError(f"window={window}: must be >= 1")
    if x.size == 0:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def eval_metric(row: dict) -> str:
    """The held-out metric an ``eval.jsonl`` row is drawn by: ``accuracy`` when the task
    reports it, else its first metric."""
    keys = [k for k in row if k not in ("step", "wall_seconds", "n")]
    return "accuracy" if "accuracy" in keys else keys[0]


class RunLog:
    """Output files, counters and the summary of one training run.

    Args:
        cfg: the run's :class:`~tba_lab.config.RunConfig` (``output_dir``, ``log_every``, ...).
        progress: show the run's progress (:class:`~tba_lab.reporting.Console`: a bar over the
            budget in a terminal or notebook, else a status line every
            ``status_every_seconds``); False: warnings only.
        resume: :meth:`state_dict` of the run being resumed (its checkpoint's ``log``), or None
            for a new run (the files are started afresh).
    Raises:
        tba_lab.config.ConfigError: ``output_dir`` cannot be created (naming it and the fix).
    """

    _COUNTERS = ("samples", "trained", "stale_sum", "stale_n", "stale_max", "searcher_reward",
                 "nonfinite", "elapsed_saved")

    def __init__(self, cfg, progress: bool = True, resume: dict | None = None):
        from tba_lab.config import ConfigError, write_yaml

        self.cfg = cfg
        self.out = Path(cfg.output_dir)
        try:  # the preflight's check cannot foresee every file system (/proc, say, even as root)
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"output_dir={str(cfg.output_dir)!r} cannot be created ({e.strerror});"
                              f" fix: choose a folder you can write (--output-dir DIR)") from None
        write_yaml(cfg, self.out / "config.yaml")
        self.progress = progress
        self.summary: dict = {"algo": cfg.algo, "task": cfg.task.name, "mode": cfg.async_.mode,
                              "seed": cfg.seed, "accuracy_before": None, "accuracy_after": None,
                              "trainer_steps": 0, "samples_generated": 0, "staleness_mean": None,
                              "staleness_max": None, "wall_seconds": 0.0, "interrupted": False,
                              "resumes": 0, "nonfinite_rewards": 0, "nonfinite_logprobs": 0,
                              "nonfinite_updates": 0, "searcher_failures": []}
        self.samples, self.stale_sum, self.stale_n, self.stale_max = 0, 0, 0, 0
        self.trained = 0              # rows trained on, summed over the updates made (resumes too)
        self.searcher_reward = None   # mean reward of the newest generated rollouts
        self.nonfinite = 0            # rewards dropped because they were NaN or infinite
        self.elapsed_saved = 0.0      # training seconds before this (resumed) process
        mode, self.first_step, evals = "w", 0, []
        self.rows = dict.fromkeys(LOG_FILES, 0)  # rows in each file (a resume's kept ones too)
        self.recent: tuple[int, list[dict]] = (-1, [])  # dashboard values at the newest step
        reporting = {}  # make_reporters' arguments of a resumed run
        if resume is not None:
            self.first_step = step = resume["step"]
            for k in self._COUNTERS:
                setattr(self, k, resume[k])
            self.summary.update(resume["summary"], interrupted=False,
                                resumes=resume["summary"].get("resumes", 0) + 1)
            self.summary.pop("error", None)  # the error that stopped the previous process
            written = resume.get("rows")  # None: a checkpoint that did not count its rows
            sent = step
            for name, key in LOG_FILES.items():
                kept, last = _keep_rows(self.out / f"{name}.jsonl", key, step,
                                        None if written is None else written[name])
                self.rows[name], sent = len(kept), max(sent, last)
                evals = kept if name == "eval" else evals
            resent = resume.get("reports")  # None: no such record, the events of `step` stay
            reporting = {"purge_step": step if resent is not None else step + 1,
                         "tracker_runs": resume.get("trackers", folder_tracker_runs(self.out)),
                         "sent_through": sent}
            mode = "a"
        else:
            self._forget_previous_run()
        self.metrics_f = open(self.out / "metrics.jsonl", mode)
        self.searchers_f = open(self.out / "searchers.jsonl", mode)
        self.eval_f = open(self.out / "eval.jsonl", mode)
        self.searcher_timing: dict = {}  # gen/score seconds of the newest searcher batch
        self.t_start = time.time()
        self.t_free = self.t_start    # when the trainer last finished an update (wait_seconds)
        self.reference_seconds = 0.0  # the trainer's reference pass since the last update
        self.next_eval = float("inf")
        self.console = Console(cfg, progress, self.first_step)
        if evals:  # a resumed run shows its last held-out metric until it evaluates again
            key = eval_metric(evals[-1])
            self.console.evaluated(evals[-1]["step"], key, evals[-1][key])
        self.reporters = make_reporters(cfg, self.out, self.first_step, **reporting)
        for values in (resume or {}).get("reports") or []:  # the events of its step it keeps
            self._report(values, self.first_step)
        self.rates: dict = {}  # throughput/* of the last full window (RATE_SECONDS)
        self.window = (self.t_start, self.first_step, self.samples, 0.0)  # t, step, samples, busy s

    def state_dict(self, step: int) -> dict:
        """The counters and summary so far at trainer ``step``, for a checkpoint (plain types).

        Also what a resume needs to keep exactly what was logged before this checkpoint:
        ``rows`` (rows written to each JSONL file), ``reports`` (the dashboard values sent at
        ``step``, sent again after TensorBoard purges the step) and ``trackers`` (``{report_to
        name: run id}`` of W&B and trackio, the runs a resume continues)."""
        for r in self.reporters:  # the events up to the checkpoint are on disk before it is
            r.flush()
        state = {k: getattr(self, k) for k in self._COUNTERS}
        at, values = self.recent
        state.update(elapsed_saved=self.elapsed(), step=step, summary=dict(self.summary),
                     rows=dict(self.rows), reports=[dict(v) for v in values] if at == step else [],
                     trackers={name: r.run_id for name, r in zip(self.cfg.report_to, self.reporters)
                               if getattr(r, "run_id", None) is not None})
        return state

    def _forget_previous_run(self) -> None:
        """A new run in a folder an earlier run used: the files it does not rewrite at once go
        (its summary would stand for this run's, e.g. to ``check_budget_left``; its
        TensorBoard events would mix with this run's at the same steps)."""
        for name in ("summary.json", "curves.png"):
            (self.out / name).unlink(missing_ok=True)
        if (self.out / "tensorboard").is_dir():
            shutil.rmtree(self.out / "tensorboard")

    # -------------------------------------------------------------------- clock
    def start_clock(self) -> float:
        """The training budget starts now (a resumed run: its used seconds ago); returns that
        time (``time.time()`` seconds)."""
        self.t_free = time.time()
        self.t_start = self.t_free - self.elapsed_saved
        every = self.cfg.task.eval_every_seconds
        self.next_eval = self.t_start + every if every else float("inf")
        self.window = (self.t_free, self.first_step, self.samples, 0.0)
        self.console.start(self.elapsed_saved)
        return self.t_start

    def elapsed(self) -> float:
        """Seconds since training began."""
        return time.time() - self.t_start

    def stop_clock(self) -> None:
        """The training budget ends now (before the searchers stop and the final evaluation)."""
        self.summary["wall_seconds"] = round(self.elapsed(), 1)

    def placement(self, placement, line: str) -> None:
        """The run's resolved :class:`~tba_lab.actors.placement.Placement`: printed (``line``)
        when ``progress`` is on, and kept in the summary as ``placement``."""
        self.summary["placement"] = placement.to_dict()
        if self.progress:
            print(line, flush=True)

    # ----------------------------------------------------------------- messages
    def reference_pass(self, seconds: float) -> None:
        """The trainer spent ``seconds`` scoring the rows of its next batch under the reference
        policy (``async.reference_pass: trainer``); logged with the next update."""
        self.reference_seconds += seconds

    def received(self, batches: list, step: int) -> None:
        """:class:`~tba_lab.rollout.RolloutBatch` messages drained together while the trainer
        was at ``step``; ``searcher_reward_mean`` becomes their mean reward."""
        rewards = [r for batch in batches for r in batch.rewards]
        if rewards:  # what the searchers' current policy earns (on-policy reward)
            self.searcher_reward = sum(rewards) / len(rewards)
        for batch in batches:
            self.samples += len(batch.rollouts)
            dropped = getattr(batch, "nonfinite_rewards", 0)
            self.nonfinite += dropped
            dropped_lp = getattr(batch, "nonfinite_logprobs", 0)
            self.summary["nonfinite_logprobs"] += dropped_lp
            self.searcher_timing = {"gen_seconds": batch.gen_seconds,
                                    "score_seconds": batch.score_seconds}
            self._report({f"searcher/{k}/s{batch.searcher_id}": v for k, v in (
                ("gen_seconds", batch.gen_seconds), ("score_seconds", batch.score_seconds),
                ("sync_seconds", batch.sync_seconds), ("version_lag", step - batch.version))}, step)
            self.rows["searchers"] += 1
            self.searchers_f.write(json.dumps({
                "searcher_id": batch.searcher_id, "version": batch.version,
                "t_start": round(batch.t_start - self.t_start, 4),
                "t_end": round(batch.t_end - self.t_start, 4),
                "received": round(self.elapsed(), 4), "trainer_step": step,
                "gen_seconds": batch.gen_seconds, "score_seconds": batch.score_seconds,
                "rollouts": len(batch.rollouts), "nonfinite_rewards": dropped,
                "nonfinite_logprobs": dropped_lp,
                "sync_seconds": round(batch.sync_seconds, 6), "node": batch.node}) + "\n")
        if batches:
            self.searchers_f.flush()

    def dropped_logprobs(self, rows: int, where: str) -> None:
        """``rows`` buffered rows got a NaN or infinite log-prob from ``where`` (the trainer's
        reference pass) and were dropped: counted in the summary's ``nonfinite_logprobs``,
        and a warning."""
        self.summary["nonfinite_logprobs"] += rows
        self._warn(f"warning: {rows} rows got a NaN or infinite log-prob from {where}; dropped")

    def skipped_update(self, step: int, loss: float, grad_norm: float) -> None:
        """Update ``step`` had a NaN or infinite loss or gradient norm and was skipped (no
        optimizer step, no metrics row): counted in the summary's ``nonfinite_updates``, and a
        warning."""
        self.summary["nonfinite_updates"] += 1
        self._warn(f"warning: update {step} skipped: loss {loss}, gradient norm {grad_norm} "
                   f"(not finite); the weights are unchanged")

    def _warn(self, msg: str) -> None:
        self.console.write(msg)

    def _report(self, values: dict, step: int) -> None:
        if not self.reporters:
            return
        at, sent = self.recent
        if step > at:
            self.recent = (step, [values])
        elif step == at:
            sent.append(values)
        for r in self.reporters:
            r.scalars(values, step)

    def searcher_failed(self, step: int, failure, action: str) -> None:
        """A searcher failed at trainer ``step`` (a
        :class:`~tba_lab.actors.launcher.SearcherFailed`) and was ``action`` ("restarted" or
        "retired"): a warning with the traceback's last line, and an entry in the summary's
        ``searcher_failures``."""
        last = failure.traceback.strip().splitlines()[-1] if failure.traceback.strip() else ""
        self.summary["searcher_failures"].append(
            {"searcher_id": failure.searcher_id, "reason": failure.reason, "step": step,
             "wall_seconds": round(self.elapsed(), 1), "action": action, "error": last})
        self._warn(f"warning: searcher {failure.searcher_id} {failure.reason} ({last}); {action}")

    # ------------------------------------------------------------------ updates
    def update(self, step: int, batch: list, loss: float, info: dict, grad_norm: float, lr: float,
               t_ready: float, buffer_size: int) -> None:
        """Trainer update ``step`` (counted after it) finished; ``batch`` is what it trained on,
        ``t_ready`` when its data was ready (``time.time()``)."""
        now = time.time()
        self.trained += len(batch)
        staleness = ReplayBuffer.staleness(batch, step - 1)  # updates before this one - version
        self.stale_sum += sum(staleness)
        self.stale_n += len(staleness)
        self.stale_max = max(self.stale_max, max(staleness))
        reward_mean = sum(r.reward for r in batch) / len(batch)
        row = {"step": step, "wall_seconds": round(now - self.t_start, 3), "loss": loss,
               "reward_mean": reward_mean, "staleness_mean": sum(staleness) / len(staleness),
               "staleness_max": max(staleness), "searcher_reward_mean": self.searcher_reward,
               "buffer_size": buffer_size, "samples_generated": self.samples,
               "grad_norm": grad_norm, "lr": lr,
               "wait_seconds": round(max(0.0, t_ready - self.t_free - self.reference_seconds), 4),
               "reference_seconds": round(self.reference_seconds, 4),
               "update_seconds": round(now - t_ready, 4), **self.searcher_timing, **info}
        self.t_free, self.reference_seconds = now, 0.0
        if step % self.cfg.log_every == 0:
            self.metrics_f.write(json.dumps(row) + "\n")
            self.metrics_f.flush()
            self.rows["metrics"] += 1
            self._report(update_scalars(row), step)
        self._rates(step, now, trainer_seconds(row))
        self.console.update(step, now - self.t_start,
                            {**self.rates, **row, "staleness_max": self.stale_max})

    def _rates(self, step: int, now: float, busy: float) -> None:
        """Updates and samples per minute and the trainer's busy fraction over the last
        :data:`~tba_lab.reporting.RATE_SECONDS` (reported, and shown by the console)."""
        t0, step0, samples0, busy0 = self.window
        busy += busy0
        if now - t0 < RATE_SECONDS:
            self.window = (t0, step0, samples0, busy)
            return
        minutes = (now - t0) / 60
        self.rates = {"updates_per_minute": (step - step0) / minutes,
                      "samples_per_minute": (self.samples - samples0) / minutes,
                      "trainer_busy": min(1.0, busy / (now - t0))}
        self._report({f"throughput/{k}": v for k, v in self.rates.items()}, step)
        self.window = (now, step, self.samples, 0.0)

    # --------------------------------------------------------------- evaluation
    def eval_due(self) -> bool:
        """Time for an interim held-out evaluation (every ``task.eval_every_seconds``)."""
        return time.time() >= self.next_eval

    def evaluation(self, step: int, metrics: dict, n: int, when: str, seconds: float,
                   wall: float | None = None) -> None:
        """Record held-out ``metrics`` on ``n`` problems, which took ``seconds``; ``when`` is
        "before", "interim" or "after" (the first and last also go to the summary as
        ``<metric>_before/_after`` and ``eval_seconds_before/_after``, with the metric names
        in ``held_out_metrics``). ``wall``: the row's training seconds when not now (an
        interim evaluation of a weight copy taken then, ``task.defer_interim_eval``)."""
        if wall is None:
            wall = {"before": 0.0, "after": self.summary["wall_seconds"]}.get(when, round(self.elapsed(), 1))
        self.eval_f.write(json.dumps({"step": step, "wall_seconds": wall, **metrics, "n": n}) + "\n")
        self.eval_f.flush()
        self.rows["eval"] += 1
        self._report({f"eval/{k}": v for k, v in metrics.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}, step)
        if metrics:
            key = eval_metric(metrics)
            self.console.evaluated(step, key, metrics[key])
        if when in ("before", "after"):
            self.summary["held_out_metrics"] = list(metrics)
            self.summary.update({f"{k}_{when}": v for k, v in metrics.items()})
            self.summary[f"eval_seconds_{when}"] = round(seconds, 1)
        if when == "interim":
            shown = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
            self.console.info(f"step {step}: held-out {shown} ({n} problems)")
        if when != "before":
            self.next_eval_from_now()
            self.t_free = time.time()  # evaluation is not waiting for data

    def next_eval_from_now(self) -> None:
        """The next interim tick is ``task.eval_every_seconds`` from now (after an evaluation, or
        after a tick that only copied the weights, ``task.defer_interim_eval``)."""
        self.next_eval = time.time() + (self.cfg.task.eval_every_seconds or float("inf"))

    # -------------------------------------------------------------------- close
    def close(self, step: int, extra: dict | None = None) -> dict:
        """Close the files, write ``summary.json`` and ``curves.png``; returns the summary."""
        self.console.close()
        if not self.summary["wall_seconds"]:
            self.summary["wall_seconds"] = round(self.elapsed(), 1)
        wall = self.summary["wall_seconds"]
        self.summary.update(trainer_steps=step, samples_generated=self.samples,
                            samples_trained=self.trained, nonfinite_rewards=self.nonfinite,
                            staleness_mean=(self.stale_sum / self.stale_n) if self.stale_n else None,
                            staleness_max=self.stale_max if self.stale_n else None,
                            updates_per_minute=round(60 * step / max(wall, 1e-9), 2), **(extra or {}))
        for f in (self.metrics_f, self.searchers_f, self.eval_f):
            f.close()
        for r in self.reporters:
            try:
                r.close()
            except Exception as e:  # a dashboard must never lose a run
                print(f"warning: could not close report_to's {type(r).__name__}: {e}")
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        try:
            plot_curves(self.out)
        except Exception as e:  # a plot must never lose a run
            print(f"warning: could not draw curves.png: {e}")
        return self.summary


def _keep_rows(path: Path, key: str, step: int, written: int | None) -> tuple[list[dict], int]:
    """Rewrite the JSONL file ``path`` for a resume from a checkpoint at update ``step``: keep
    the rows whose ``key`` is below ``step``, and those at ``step`` among its first ``written``
    rows (written before the checkpoint; the resumed process logs that step's later ones
    again); rows of later steps go. ``written`` None (a checkpoint that did not count its rows):
    every row at ``step`` is kept. A torn last line from a killed process is dropped too; the
    rewrite is atomic (temporary file, rename).

    Returns:
        (the rows kept, the largest ``key`` in the file before the rewrite, -1 when empty).
    """
    rows = read_jsonl_rows(path)
    kept = [r for i, r in enumerate(rows) if r.get(key, 0) < step
            or (r.get(key, 0) == step and (written is None or i < written))]
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
    return kept, max((r.get(key, 0) for r in rows), default=-1)


def time_to_target(evals: list[dict], target: float, key: str = "accuracy") -> float | None:
    """Seconds of training until held-out ``key`` first reaches ``target``, by LINEAR
    INTERPOLATION between the two evaluations around the crossing (TBA, Sec. 4, compares
    methods by wall-clock time to an accuracy); 0.0 when the first evaluation reaches it,
    None when none does. ``evals``: ``eval.jsonl`` rows with ``wall_seconds``, in any order.

    Raises:
        ValueError: ``evals`` is empty.
    """
    if not evals:
        raise ValueError("evals is empty: a run writes at least the evaluation before training")
    rows = sorted(evals, key=lambda e: e["wall_seconds"])
    if rows[0][key] >= target:
        return float(rows[0]["wall_seconds"])
    for prev, cur in zip(rows, rows[1:]):
        if cur[key] >= target:
            t0, t1, a0, a1 = prev["wall_seconds"], cur["wall_seconds"], prev[key], cur[key]
            return float(t0 + (target - a0) * (t1 - t0) / (a1 - a0))
    return None


def split_evals(evals: list[dict], summary: dict | None = None) -> tuple[list, list, list]:
    """``eval.jsonl`` rows as ``(before, interim, after)`` lists, for curves.png.

    The rows do not say which kind they are, and the sizes may coincide (``task.eval_size``
    and ``task.interim_eval_size`` are separate settings), so: the before-evaluation is the
    first row when it is at step 0 and 0 s; the after-evaluation is the last row when the run's
    ``summary`` (summary.json) reports one (``<metric>_after``, at the summary's
    ``wall_seconds``), or, without a summary, when that row has the before-row's size and the
    rows between have another (or there are none). An interrupted run has no after row.
    """
    rows = list(evals)
    before = [rows.pop(0)] if rows and rows[0]["step"] == 0 and rows[0]["wall_seconds"] == 0 else []
    after = []
    if rows:
        last = rows[-1]
        if summary is not None:
            is_after = (summary.get(f"{eval_metric(last)}_after") is not None
                        and not summary.get("interrupted")
                        and last["wall_seconds"] == summary.get("wall_seconds"))
        else:
            is_after = bool(before) and last["n"] == before[0]["n"] and (
                len(rows) == 1 or all(e["n"] != last["n"] for e in rows[:-1]))
        if is_after:
            after = [rows.pop()]
    return before, rows, after


def read_run(run_dir: str | Path) -> dict:
    """``{"metrics": [...], "evals": [...], "summary": dict | None}`` of a (maybe running) run:
    the rows of ``metrics.jsonl`` and ``eval.jsonl`` (``[]`` before they exist) and
    ``summary.json`` (None before the run ends). Raises ``json.JSONDecodeError`` for a corrupt
    line before a file's last (:func:`read_jsonl_rows`)."""
    run_dir = Path(run_dir)
    return {"metrics": read_jsonl_rows(run_dir / "metrics.jsonl"),
            "evals": read_jsonl_rows(run_dir / "eval.jsonl"),
            "summary": read_json(run_dir / "summary.json")}


def _line(ax, rows: list[dict], key: str, window: int = 1, **kw) -> None:
    """Plot ``key`` of the rows that have it against ``wall_seconds``, as a trailing moving
    average over ``window`` rows; a single point gets a dot (a one-point line draws nothing)."""
    pts = [(r["wall_seconds"], r[key]) for r in rows if r.get(key) is not None]
    if pts:
        x, y = zip(*pts)
        ax.plot(x, moving_average(y, window), marker="." if len(pts) == 1 else None, **kw)


def draw_runs(run_dirs, labels=None, fig=None, window: int | None = None):
    """The training curves of one or several runs against training seconds, on a 2x2
    matplotlib ``Figure`` (``fig``, cleared, or a new one; no pyplot state): the reward of the
    trainer's batch and of the newest rollouts and the loss, as moving averages over ``window``
    updates (None: a thirtieth of the longest run's); the staleness of the trained batch (mean
    and max); the held-out metric (diamonds: before and after training; circles joined by a
    line: the interim evaluations, a smaller and noisier subset of the held-out set).
    ``labels``: one per run (default the folder names; a single run's curves are unlabelled)."""
    from matplotlib.figure import Figure

    run_dirs = [Path(d) for d in ([run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs)]
    labels = labels or [d.name for d in run_dirs]
    runs = [read_run(d) for d in run_dirs]
    window = window or max(1, max((len(r["metrics"]) for r in runs), default=0) // 30)
    fig = fig or Figure(figsize=(11, 6.5))
    fig.clear()
    (ax_r, ax_l), (ax_s, ax_a) = fig.subplots(2, 2)
    key = next((eval_metric(r["evals"][0]) for r in runs if r["evals"]), "accuracy")
    scale = 100 if key == "accuracy" else 1

    def sizes(rows):  # the held-out set sizes of these evaluations
        return "/".join(str(n) for n in sorted({e["n"] for e in rows}))

    for i, (run, lab) in enumerate(zip(runs, labels)):
        m, c, name = run["metrics"], f"C{i}", f"{lab}: " if len(runs) > 1 else ""
        _line(ax_r, m, "reward_mean", window, color=c, label=f"{name}trainer batch")
        _line(ax_r, m, "searcher_reward_mean", window, color=c, ls="--", alpha=0.7,
              label=f"{name}newest rollouts")
        _line(ax_l, m, "loss", window, color=c, label=lab if name else None)
        _line(ax_s, m, "staleness_mean", color=c, label=f"{name}mean")
        _line(ax_s, m, "staleness_max", color=c, ls=":", alpha=0.7, label=f"{name}max")
        before, interim, after = split_evals(run["evals"], run["summary"])
        if interim:
            ax_a.plot([e["wall_seconds"] for e in interim], [scale * e[key] for e in interim],
                      "o-", color=c, ms=4, lw=1.2, label=f"{name}interim, {sizes(interim)} problems")
        if before + after:
            which = "/".join(w for w, rows in (("before", before), ("after", after)) if rows)
            ax_a.plot([e["wall_seconds"] for e in before + after],
                      [scale * e[key] for e in before + after], "D", color=c, ms=9, mec="black",
                      zorder=3, label=f"{name}{which}, {sizes(before + after)} problems")
    for ax, ylabel, what in (
            (ax_r, "mean reward", f"reward (moving average of {window} updates)"),
            (ax_l, "loss", f"loss (moving average of {window})"),
            (ax_s, "updates", "staleness of the trained batch"),
            (ax_a, f"held-out greedy {key}{' (%)' if scale == 100 else ''}", f"held-out {key}")):
        ax.set(xlabel="training wall-clock (s)", ylabel=ylabel, title=what)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def plot_curves(run_dir: str | Path, path: str | Path | None = None):
    """Draw ``curves.png``, the run's :func:`draw_runs`, from the files in ``run_dir``.

    Returns:
        the matplotlib Figure (also saved to ``path``, default ``run_dir/curves.png``).
    """
    fig = draw_runs(run_dir)
    fig.savefig(path or Path(run_dir) / "curves.png", dpi=110)
    return fig
