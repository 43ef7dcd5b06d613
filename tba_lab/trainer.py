"""The trainer (learner): the whole training loop of asynchronous TBA in one place.

What it does (Bartoldson et al., "Trajectory Balance with Asynchrony", arXiv 2503.18929, Sec. 3-4):

    searchers --(RolloutBatch: rollouts tagged with policy version)--> launcher --> replay buffer
    trainer: 1. sample B prompts x K responses from the buffer, 2. the loss (TB, Eq. 5, or a
             baseline), 3. one optimizer update, 4. every k updates publish weights to the
             searchers, 5. now and then the held-out metrics.

The same loop without anything else is :mod:`tba_lab.minimal` (one file, about 450 lines):
read it first. What this module and its imports add to it: resume from a checkpoint
(:mod:`tba_lab.checkpoint`); failure handling (searchers restarted or retired, non-finite rows
and updates dropped or skipped, Ctrl-C and SIGTERM saving everything); placement of threads,
devices and the reference pass (:mod:`tba_lab.actors.placement`); CUDA IPC and Ray launchers;
logging, dashboards and interim evaluations (:mod:`tba_lab.runlog`); the baselines' losses
(:mod:`tba_lab.algorithms`); other tasks and generation backends (vLLM).

Entry points: :func:`train` (one run from a :class:`~tba_lab.config.RunConfig`) and
:class:`Feed` (draining the searchers, the reference pass, restarting failed searchers). The
loss comes from :mod:`tba_lab.algorithms` (TB with the VarGrad log Z, Eq. 3-5, rewards stored
raw and divided by the current annealed beta; or a baseline); the task from
:mod:`tba_lab.tasks`; the searchers run under a launcher from :mod:`tba_lab.actors`.

* ``mode="async"``: once the buffer holds ``buffer.initial_fill`` rollouts the trainer never
  waits for generation (except under the replay bound ``buffer.max_replay_ratio``). Fresh data
  is up to about 2k-1 updates stale; replayed data can be older (logged per batch, bounded in
  reach by ``buffer.max_prompts``).
* ``mode="sync"``: strict alternation with k = 1 through the same code (on-policy).

The policy, a learned log Z and the optimizer state live on ``async.trainer_device`` (CPU or one
GPU). Departures from the paper: one trainer process on one device (no DeepSpeed/FSDP), a
replay buffer bounded in prompts, a learning rate decayed linearly to 0 over the budget, recency
m = 1 with the replay bound by default, reference log-probs computed by the trainer on the rows
it samples or by the searchers (``async.reference_pass``), and greedy accuracy on a synthetic
task as the evaluation.

Outputs in ``output_dir`` (docs/usage.md#what-a-run-writes): the :class:`~tba_lab.runlog.RunLog`
files, ``buffer.pt``, ``policy/`` and the resumable ``checkpoint.pt`` (:mod:`tba_lab.checkpoint`).
Ctrl-C stops it within seconds, saving all of these; ``train(cfg, resume=True)`` continues.
"""
from __future__ import annotations

import contextlib
import math
import random
import shutil
import signal
import threading
import time
import traceback
import warnings
from dataclasses import replace
from pathlib import Path

import torch

from tba_lab.actors import placement
from tba_lab.actors.launcher import SearcherError, SearcherFailed, make_launcher
from tba_lab.algorithms import compute_loss, make_algorithm
from tba_lab.buffer import ReplayBuffer, Rollout, complete_groups, finite_logprobs
from tba_lab.checkpoint import (check_budget_left, check_finite_weights, check_same_run,
                                 checkpoint_path, load_checkpoint, save_checkpoint)
from tba_lab.config import RunConfig, unused_sections
from tba_lab.eval import evaluate
from tba_lab.rollout.collect import drop_nonfinite_logprobs, fill_reference
from tba_lab.runlog import RunLog
from tba_lab.tasks import make_task


def lr_factor(cfg: RunConfig, step: int, elapsed_seconds: float) -> float:
    """Learning-rate multiplier in [0, 1]: 1 for ``constant``; for ``linear``, 1 - progress,
    where progress is ``step / max_steps`` when ``max_steps`` is set, else the fraction of the
    wall-clock budget used. Decaying to 0 damps the step-to-step noise of the final policy
    (a common RL fine-tuning schedule; not part of the TBA paper)."""
    if cfg.training.lr_schedule == "constant":
        return 1.0
    if cfg.training.max_steps:
        progress = step / cfg.training.max_steps
    else:
        progress = elapsed_seconds / (60 * cfg.max_minutes)
    return max(0.0, 1.0 - progress)


STALE_GRACE_SECONDS = 2.0  # a batch begun this long after a newer publish should carry it
MAX_NONFINITE_UPDATES = 5  # updates in a row with a NaN/inf loss or gradient that stop the run


class NonFiniteUpdateError(FloatingPointError):
    """:data:`MAX_NONFINITE_UPDATES` updates in a row had a NaN or infinite loss or gradient
    norm (each was skipped); the run stopped, saving its last finite state."""


def finite_update(loss: torch.Tensor, grad_norm: torch.Tensor, optimizer) -> bool:
    """Whether an update may be applied: the loss (a scalar tensor), the policy's gradient norm
    (``clip_grad_norm_``'s total, before clipping) and every gradient outside the clipped
    policy (a learned log Z, any optimizer parameter whose gradient is set) are finite. One
    device sync."""
    checks = [torch.isfinite(loss.detach()).all(), torch.isfinite(grad_norm.detach()).all()]
    checks += [torch.isfinite(p.grad).all() for g in optimizer.param_groups[1:]
               for p in g["params"] if p.grad is not None]
    return bool(torch.stack([c.to(checks[0].device) for c in checks]).all())


class Feed:
    """Drains the launcher's messages into the replay buffer, hands the trainer its batches,
    publishes weights, and applies the searcher failure policy.

    * async: a B x K sample of the buffer (recency m / reward softmax) once it holds
      ``buffer.initial_fill`` rollouts, else None (keep waiting); with
      ``buffer.max_replay_ratio`` = rho > 0 also None while one more batch would make the rows
      trained on exceed rho times the rows generated (``rows trained + B * K > rho * samples
      generated``, whole run): a rate limiter, as Reverb's samples-per-insert, that makes a
      trainer faster than its searchers wait for new data instead of replaying the buffer
      ever more often;
    * sync: exactly the batch generated by the current version (on-policy; prompts that lost a
      row to a non-finite reward are left out), else None.

    ``score_reference``: a :class:`ReferenceScorer` (None when no loss reads reference
    log-probs) that fills in the reference log-probs of the rows of a sampled batch that carry
    none, in place: the rows are the buffer's own objects, so a row replayed later is not scored
    again, and a row never sampled is never scored. With ``async.reference_pass: trainer`` the
    trainer's reference work per update is thus at most one batch, however many searchers feed
    it; with ``searcher`` every row arrives scored, except rows a resumed buffer kept from a run
    whose trainer did the pass.

    Failure policy: a searcher that raises, whose process ends, that sends no usable rollout
    for ``async.searcher_timeout`` seconds (in sync mode: counted from the last publish), or
    whose weights stopped advancing (``async.stale_batches`` batches in a row begun on old
    weights more than :data:`STALE_GRACE_SECONDS` after a newer version was published; it
    pulls before every batch, so its weight channel is broken: reason ``"stale"``) is
    restarted, at most ``async.max_restarts`` times per searcher; after that it is retired and
    the run goes on with the others. Each failure is a warning and an entry in the summary's
    ``searcher_failures``.

    Rows with a NaN or infinite behaviour or reference log-prob are dropped as messages arrive
    (and rows the trainer's reference pass scores so are removed from the buffer), with a
    warning; the summary's ``nonfinite_logprobs`` counts them.

    Raises (from :meth:`next_batch`):
        SearcherError: no searcher is left (its last traceback is in the message).
    """

    def __init__(self, cfg: RunConfig, launcher, buffer: ReplayBuffer, log: RunLog,
                 score_reference=None):
        self.cfg, self.launcher, self.buffer, self.log = cfg, launcher, buffer, log
        self.score_reference = score_reference  # rollouts -> rollouts with ref log-probs, or None
        self.sync = cfg.async_.mode == "sync"
        self.fresh: list[Rollout] | None = None  # sync: the batch of the current version
        self.active = set(range(cfg.async_.num_searchers))
        self.restarts = dict.fromkeys(self.active, 0)
        self.heard: dict[int, float] = {}  # searcher id -> when it last sent a message
        self.published_at = 0.0
        self.publishes: list[tuple[int, float]] = []  # (version, time.time()) of recent publishes
        self.stale_run: dict[int, int] = {}  # searcher id -> batches in a row begun on old weights

    def start(self) -> None:
        """Start the searchers (they load their models while the trainer evaluates)."""
        self.launcher.start()
        self.heard = dict.fromkeys(self.active, time.time())

    def publish(self, policy, step: int) -> None:
        """Publish the policy after ``step`` updates; the buffer's recency marks restart."""
        self.launcher.publish(policy, step)
        self.buffer.mark_sync()
        self.published_at = time.time()
        self.publishes.append((step, self.published_at))
        del self.publishes[:-1000]  # a batch older than 1,000 publishes is judged by the oldest kept

    def next_batch(self, step: int) -> list[Rollout] | None:
        """The prompt-major B*K batch for update ``step``, or None while there is none yet."""
        waiting = (self.sync or len(self.buffer) < self.cfg.buffer.initial_fill
                   or self._replay_bound(step))
        batches = []
        for msg in self.launcher.poll(timeout=0.05 if waiting else 0.0):
            if isinstance(msg, SearcherFailed):
                self._failed(msg, step)
            elif msg.searcher_id in self.active:
                # a row with a NaN/inf log-prob is dropped and counted here, wherever it was made
                drop_nonfinite_logprobs(msg, f"searcher {msg.searcher_id}, version {msg.version}")
                if msg.rollouts:  # a batch whose every reward was dropped is not progress
                    self.heard[msg.searcher_id] = time.time()
                batches.append(msg)
        self._check_silence(step)
        self._check_stale(batches, step)
        self.log.received(batches, step)
        for msg in batches:
            self.buffer.add(msg.rollouts, copy=False)  # unpickled from the queue: ours alone
            if self.sync and msg.version == step:
                self.fresh = complete_groups(msg.rollouts, self.cfg.training.num_generations) or None
        if self.sync:
            batch, self.fresh = self.fresh, None
        elif len(self.buffer) < max(self.cfg.buffer.initial_fill, 1) or self._replay_bound(step):
            return None
        else:
            batch = self.buffer.sample(self.cfg.training.num_prompts_per_step,
                                       self.cfg.training.num_generations)
        if batch and self.score_reference is not None:  # rows without reference log-probs
            t0 = time.time()
            if self.score_reference(batch):  # only rows never scored; the buffer keeps the scores
                self.log.reference_pass(time.time() - t0)
                bad = [r for r in batch if not finite_logprobs(r)]
                if bad:  # the trainer's own reference pass gave NaN/inf: never train on the rows
                    self.buffer.discard(bad)
                    self.log.dropped_logprobs(len({id(r) for r in bad}),
                                              "the trainer's reference pass")
                    if not self.sync:
                        return None  # the next call samples again
                    batch = complete_groups([r for r in batch if finite_logprobs(r)],
                                            self.cfg.training.num_generations) or None
        return batch

    def _replay_bound(self, step: int) -> bool:
        """True while update ``step + 1`` would train on more than ``buffer.max_replay_ratio``
        rows per row generated (counted over the whole run, resumes included). The rows
        already trained on are the run log's count of what the updates took, not ``step``
        times today's B x K: a resume may change ``training.num_prompts_per_step``."""
        rho, tr = self.cfg.buffer.max_replay_ratio, self.cfg.training
        rows_after = self.log.trained + tr.num_prompts_per_step * tr.num_generations
        return bool(rho) and rows_after > rho * self.log.samples

    def _check_silence(self, step: int) -> None:
        timeout = self.cfg.async_.searcher_timeout
        if not timeout:
            return
        now = time.time()
        for i in sorted(self.active):
            since = max(self.heard[i], self.published_at if self.sync else 0.0)
            if now - since > timeout:
                self._failed(SearcherFailed(
                    i, f"no usable rollouts for {now - since:.0f} s (async.searcher_timeout="
                       f"{timeout:g} s): the searcher hangs, is far too slow, or every reward it "
                       f"computes is NaN or fails", "hung"), step)

    def missed_version(self, msg) -> int | None:
        """The newest version published at least :data:`STALE_GRACE_SECONDS` before ``msg``
        (a :class:`~tba_lab.rollout.RolloutBatch`) began, if it is newer than ``msg.version``
        (the searcher should have pulled it), else None."""
        newest = None
        for version, at in self.publishes:
            if at + STALE_GRACE_SECONDS > msg.t_start:
                break
            newest = version
        return newest if newest is not None and newest > msg.version else None

    def _check_stale(self, batches: list, step: int) -> None:
        """Count each searcher's batches in a row begun on old weights (:meth:`missed_version`);
        at ``async.stale_batches`` the searcher is reported as ``SearcherFailed(reason="stale")``
        to the failure policy. Its batches are kept: each is honestly tagged with the version
        that generated it, and TB trains on off-policy data."""
        limit = self.cfg.async_.stale_batches
        for msg in batches if limit else ():
            i = msg.searcher_id
            if i not in self.active:
                continue
            missed = self.missed_version(msg)
            self.stale_run[i] = 0 if missed is None else self.stale_run.get(i, 0) + 1
            if self.stale_run[i] >= limit:
                self.stale_run[i] = 0
                self._failed(SearcherFailed(
                    i, f"its weights stopped advancing: {limit} batches in a row generated with "
                       f"version {msg.version} or older although version {missed} was published "
                       f"before they began (async.stale_batches={limit}); its weight channel is "
                       f"broken", "stale"), step)

    def _failed(self, failure: SearcherFailed, step: int) -> None:
        i = failure.searcher_id
        if i not in self.active:
            return
        if self.restarts[i] < self.cfg.async_.max_restarts:
            self.restarts[i] += 1
            self.launcher.restart(i)
            self.heard[i] = time.time()
            self.log.searcher_failed(step, failure, f"restarted ({self.restarts[i]} of "
                                                    f"async.max_restarts={self.cfg.async_.max_restarts})")
            return
        self.launcher.retire(i)
        self.active.discard(i)
        self.log.searcher_failed(step, failure, f"retired, {len(self.active)} searcher(s) left")
        if not self.active:
            raise SearcherError(
                f"searcher {i} failed ({failure.reason}) after {self.restarts[i]} restart(s) "
                f"(async.max_restarts={self.cfg.async_.max_restarts}) and no searcher is left; "
                f"the run stopped and saved what it had. Last failure:\n{failure.traceback}")


class ReferenceScorer:
    """The trainer's reference pass: fills in log pi_ref (Eq. 5) of the rows that carry none.

    Args:
        load: returns the frozen reference policy on the trainer's device (called once).
        pad_id: the tokenizer's pad id; temperature: the sampling temperature (> 0).
        load_now: load the reference at construction (``async.reference_pass: trainer``);
            otherwise only when a row first needs it (with ``searcher``, rows of a buffer resumed
            from a run whose trainer did the pass), so a run whose searchers do the pass keeps
            no second model on the trainer's device.

    Calling it with a list of :class:`~tba_lab.buffer.Rollout` scores the rows without
    reference log-probs in place (:func:`~tba_lab.rollout.collect.fill_reference`) and returns
    how many it scored.
    """

    def __init__(self, load, pad_id: int, temperature: float, load_now: bool = True):
        self.load, self.pad_id, self.temperature = load, pad_id, temperature
        self.reference = load() if load_now else None

    def __call__(self, rollouts: list) -> int:
        if all(r.ref_token_logps is not None for r in rollouts):
            return 0
        if self.reference is None:
            self.reference = self.load()
        return fill_reference(self.reference, rollouts, self.pad_id, self.temperature)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def _trainer_process(cfg: RunConfig):
    """Torch threads for the trainer (``async.trainer_threads``, resolved) and Ctrl-C / SIGTERM
    as KeyboardInterrupt (main thread only), both restored on exit (a notebook kernel keeps them). SIGINT is set explicitly
    because a shell starts background jobs with SIGINT ignored."""
    caller_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.async_.trainer_threads)  # resolved by placement.plan
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        old = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_interrupt),
               signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        yield
    finally:
        torch.set_num_threads(caller_threads)
        if main_thread:
            for signum, handler in old.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM are ignored inside the block (main thread only): the final saves
    run to the end even if the user presses Ctrl-C again or Jupyter's restart sends SIGTERM
    while they run. SIGKILL still ends the process; the checkpoint is written atomically."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def train(cfg: RunConfig, progress: bool = True, stop_event: threading.Event | None = None,
          resume: bool = False) -> dict:
    """Run one training job (``tba-lab train``, Sec. 3-4); returns the summary dict.

    ``stop_event``: once set (e.g. by a notebook's Stop button), training ends after the
    current update and saves as at the end of the budget. ``resume``: continue the run whose
    ``checkpoint.pt`` is in ``cfg.output_dir``; the budget counts its whole training time and
    updates. Checkpoints: every ``training.save_seconds`` / ``save_steps``, and when the run
    ends, is interrupted or stops on an error (the summary holds ``error``; it is re-raised).
    An options section the run does not read (``grpo`` with ``algo: tb``) is a UserWarning.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM, re-raised after saving everything.
        tba_lab.config.ConfigError: bad input (nothing written); a resume of another run or of
            one with no budget left.
        FileNotFoundError: ``resume`` and no checkpoint in ``cfg.output_dir``.
        SearcherError: every searcher failed beyond ``async.max_restarts``.
        NonFiniteUpdateError: :data:`MAX_NONFINITE_UPDATES` updates in a row had a NaN or inf
            loss or gradient norm (one is skipped: no optimizer step, no metrics row).
        FloatingPointError: NaN or inf weights about to be published or saved.
    """
    where, as_given, cfg, state = _prepare(cfg, resume)  # bad input stops here: nothing written
    with _trainer_process(cfg):
        run = _Run(cfg, as_given, where, state, progress)  # policy, buffer, searchers, logs
        step, tr, log = run.step, cfg.training, run.log
        try:
            deadline = run.begin()  # searchers load their models while the trainer evaluates
            while (time.time() < deadline and not (tr.max_steps and step >= tr.max_steps)
                   and not (stop_event is not None and stop_event.is_set())):
                batch = run.feed.next_batch(step)                  # 1. sample (or wait for data)
                if batch is None:
                    continue
                t_ready = time.time()
                run.set_learning_rate(step)
                loss, info = compute_loss(run.algorithm, run.policy, batch, run.pad_id, step)  # 2.
                run.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(  # the policy's; log Z is not clipped
                    run.policy.parameters(), tr.max_grad_norm or math.inf)
                finite = run.step_if_finite(loss, grad_norm, step)  # 3. one optimizer update
                step += 1  # a skipped update still counts: versions advance, sync gets new data
                if step % cfg.async_.sync_period == 0:             # 4. publish every k updates
                    run.feed.publish(run.policy, step)
                if finite:  # a skipped update has no metrics row; lr: as applied
                    log.update(step, batch, loss.item(), info, float(grad_norm),
                               run.optimizer.param_groups[0]["lr"], t_ready, len(run.buffer))
                if log.eval_due():                                 # 5. interim held-out metrics
                    run.interim_evaluation(step)
                if run.saver.due(step):                            # 6. resumable checkpoint
                    run.saver.save(step)
            run.finish(step)  # checkpoint, searchers stopped, held-out metrics after
        except KeyboardInterrupt as e:
            run.interrupted(step, e)
            raise
        except Exception as e:  # the run stops on an error: keep what it learned, resumable
            run.failed(step, e)
            raise
        finally:
            run.close(step)  # no searcher survives; policy/, buffer.pt, logs and summary written
    return log.summary


def _prepare(cfg: RunConfig, resume: bool) -> tuple:
    """:func:`train`'s checks before anything starts: preflight (ConfigError), a warning per
    unused options section, the checkpoint to resume (FileNotFoundError, ConfigError) and the
    placement. Returns (placement, the config as given, the config resolved, checkpoint state
    or None)."""
    from tba_lab.preflight import preflight

    preflight(cfg)
    for message in unused_sections(cfg):  # a value the run would ignore without a word
        warnings.warn(message, stacklevel=3)
    state = None
    if resume:
        state = load_checkpoint(cfg.output_dir)
        check_same_run(state["config"], cfg)
        check_budget_left(state, cfg)
    where = placement.plan(cfg)
    return where, cfg, placement.apply(cfg, where), state  # threads and reference pass resolved


class _Run:
    """What one :func:`train` call holds, and the steps of its loop that are not the algorithm.

    Built in the order the run needs: the policy (and a learned log Z) on
    ``async.trainer_device``, the task and its held-out split, the replay buffer, AdamW, a
    resumed checkpoint's state, the searchers' launcher (publishing the starting weights), the
    reference scorer, the evaluation backend, the :class:`~tba_lab.runlog.RunLog`, the
    :class:`Feed` and the checkpoint :class:`_Saver`.
    """

    def __init__(self, cfg: RunConfig, as_given: RunConfig, where, state: dict | None,
                 progress: bool):
        from tba_lab.models import load_policy

        self.cfg, self.state = cfg, state
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        device = torch.device(cfg.async_.trainer_device)
        self.policy, self.tokenizer = load_policy(cfg.model.path)
        self.pad_id = self.tokenizer.pad_token_id
        # eval mode throughout, the loss's forward pass included (gradients still flow): with
        # dropout on, a checkpoint that ships it (GPT-2, OPT: 0.1) would score other log-probs
        # than the searchers sampled with, and the same batch differently each time
        self.policy.to(device).eval()
        self.task, self.algorithm = make_task(cfg), make_algorithm(cfg)
        with torch.no_grad():  # the algorithm's own parameters (a learned log Z) join the policy
            for group in self.algorithm.parameters():
                for p in group["params"]:
                    p.data = p.data.to(device)
        self.held_out = self.task.load("test")
        b = cfg.buffer
        self.buffer = ReplayBuffer(b.capacity_per_prompt, b.recency_prob, b.inv_temp,
                                   seed=cfg.seed, max_prompts=b.max_prompts or None, dedup=b.dedup)
        tr = cfg.training
        self.optimizer = torch.optim.AdamW(
            [{"params": list(self.policy.parameters()), "base_lr": tr.learning_rate},
             *self.algorithm.parameters()], lr=tr.learning_rate, weight_decay=tr.weight_decay)
        self.step = 0
        if state is not None:
            self.step = _restore(state, self.policy, self.optimizer, self.algorithm, self.buffer)
        self.start_step = self.step
        launcher_cfg = cfg if state is None else replace(  # new searcher seeds after a resume
            cfg, seed=cfg.seed + 100_003 * (state["log"]["summary"].get("resumes", 0) + 1))
        needs_reference = self.algorithm.needs_reference()
        score_reference = None  # None: no loss reads reference log-probs
        if needs_reference:
            score_reference = ReferenceScorer(
                lambda: load_policy(cfg.model.path)[0].to(device).eval(), self.pad_id,
                cfg.model.temperature, load_now=cfg.async_.reference_pass == "trainer")
        self.launcher = make_launcher(launcher_cfg, self.policy, needs_reference
                                      and cfg.async_.reference_pass == "searcher")
        self.launcher.publish(self.policy, self.step)  # searchers start from these weights
        self.eval_backend = _eval_backend(cfg, self.policy, self.tokenizer)
        self.log = RunLog(as_given, progress, resume=None if state is None else state["log"])
        self.log.placement(where, placement.describe(where, needs_reference))
        self.feed = Feed(cfg, self.launcher, self.buffer, self.log, score_reference)
        self.saver = _Saver(cfg, self.policy, self.optimizer, self.algorithm, self.buffer, self.log)
        self.snapshots = []  # (step, wall seconds, CPU weights) when task.defer_interim_eval
        self.nonfinite_run = 0  # updates skipped in a row (MAX_NONFINITE_UPDATES stops the run)

    def held_out_metrics(self, step: int, n: int, when: str, wall: float | None = None) -> None:
        """Evaluate the policy on the first ``n`` held-out problems and log it as ``when``."""
        t0 = time.time()
        self.policy.eval()
        self.eval_backend.load_weights(self.policy.named_parameters())  # no-op if it wraps it
        metrics = evaluate(self.task, self.eval_backend, self.held_out[:n],
                           self.cfg.model.max_new_tokens)
        self.log.evaluation(step, metrics, min(n, len(self.held_out)), when, time.time() - t0,
                            wall)

    def begin(self) -> float:
        """Start the searchers, evaluate the starting policy; returns the budget's deadline
        (``time.time()`` seconds)."""
        self.feed.start()
        if self.state is None:
            self.saver.forget_previous_run()
        if self.state is None or (self.step == 0 and "eval_seconds_before" not in self.log.summary):
            # (a run stopped during its first evaluation still has the starting policy)
            self.held_out_metrics(0, self.cfg.task.eval_size, "before")
        deadline = self.log.start_clock() + 60 * self.cfg.max_minutes
        self.saver.start_clock(self.step)
        return deadline

    def set_learning_rate(self, step: int) -> None:
        """Each parameter group's rate: its base rate times :func:`lr_factor`."""
        factor = lr_factor(self.cfg, step, self.log.elapsed())
        for group in self.optimizer.param_groups:
            group["lr"] = group["base_lr"] * factor

    def step_if_finite(self, loss: torch.Tensor, grad_norm: torch.Tensor, step: int) -> bool:
        """``optimizer.step()`` if :func:`finite_update`, else skip and log the update (a
        NaN/inf gradient passes clip_grad_norm_ and AdamW into every weight); returns whether
        it stepped. Raises NonFiniteUpdateError at MAX_NONFINITE_UPDATES skips in a row."""
        if finite_update(loss, grad_norm, self.optimizer):
            self.optimizer.step()
            self.nonfinite_run = 0
            return True
        self.nonfinite_run += 1
        self.log.skipped_update(step + 1, loss.item(), float(grad_norm))
        if self.nonfinite_run >= MAX_NONFINITE_UPDATES:
            raise NonFiniteUpdateError(
                f"{self.nonfinite_run} updates in a row (up to step {step + 1}) had a NaN or "
                f"infinite loss or gradient norm and were skipped; the run stopped and saved its "
                f"last finite weights. Fix: lower training.learning_rate, set "
                f"training.max_grad_norm, or check the task's rewards and the backend's log-probs")
        return False

    def interim_evaluation(self, step: int) -> None:
        """Interim held-out metrics now, or (``task.defer_interim_eval``) a weight copy
        evaluated after the budget."""
        if self.cfg.task.defer_interim_eval:
            self.snapshots.append((step, round(self.log.elapsed(), 1), cpu_state_copy(self.policy)))
            self.log.next_eval_from_now()
        else:
            self.held_out_metrics(step, self.cfg.task.interim_eval_size, "interim")

    def finish(self, step: int) -> None:
        """The budget is spent: checkpoint, stop the clock and the searchers, evaluate the
        deferred weight copies and the final policy."""
        self.saver.save(step)
        self.log.stop_clock()  # before the searchers stop
        self.launcher.stop()
        evaluate_weight_copies(self.policy, self.snapshots, lambda s, wall: self.held_out_metrics(
            s, self.cfg.task.interim_eval_size, "interim", wall))
        self.held_out_metrics(step, self.cfg.task.eval_size, "after")

    def interrupted(self, step: int, e: KeyboardInterrupt) -> None:
        """Ctrl-C or SIGTERM: mark the summary and checkpoint."""
        self.log.summary["interrupted"] = True
        # the interrupted frames below train's (a publish, a pull of a message) may hold the
        # shared weights; a notebook keeps the traceback (sys.last_traceback), which would
        # keep them mapped after the run: their locals go, the traceback stays
        traceback.clear_frames(e.__traceback__)
        self.saver.save(step)

    def failed(self, step: int, e: Exception) -> None:
        """An error stops the run: the summary names it, and what it learned is checkpointed
        (not before the first update of this process: a failed start must not replace the
        checkpoint of an earlier run)."""
        self.log.summary["error"] = f"{type(e).__name__}: {(str(e).strip() or '-').splitlines()[0]}"
        if step > self.start_step:
            try:
                self.saver.save(step)
            except Exception as save_error:  # never hide the run's own error
                print(f"warning: could not write checkpoint.pt after the error: {save_error}")

    def close(self, step: int) -> None:
        """Always, last: stop the searchers and write policy/, buffer.pt, the logs and the
        summary; a second Ctrl-C / SIGTERM cannot cut this short."""
        with _signals_held():
            self.launcher.stop()  # idempotent
            try:
                _save_policy_and_buffer(self.log.out, self.policy, self.tokenizer, self.buffer)
            finally:  # the logs and summary are written even if saving the model fails
                self.log.close(step, self.algorithm.summary())


def cpu_state_copy(policy) -> dict[str, torch.Tensor]:
    """A CPU copy of ``policy.state_dict()``: name -> tensor of the same shape and dtype, one
    model's worth of host memory (4 MB for the embedded model)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in policy.state_dict().items()}


def evaluate_weight_copies(policy, snapshots: list, evaluate_at) -> None:
    """Evaluate the weight copies of ``task.defer_interim_eval``, in order, after the budget.

    ``snapshots``: ``(step, wall_seconds, state_dict)`` tuples (update count, training
    seconds, a :func:`cpu_state_copy`); ``evaluate_at(step, wall_seconds)`` is called with each
    copy loaded into ``policy``. The policy's own (final) weights are back in place afterwards,
    also when an evaluation raises (the error propagates), so what ``train`` saves is the
    trained policy. Copies are lost if the run is interrupted before its end (they are
    measurements, not training state: a resumed run takes new ones from its resume on).
    ``bench/trl_grpo.py --defer-eval`` uses the same two functions for TRL's leg of the race.
    """
    if not snapshots:
        return
    final = cpu_state_copy(policy)
    try:
        for step, wall, weights in snapshots:
            policy.load_state_dict(weights)
            evaluate_at(step, wall)
    finally:
        policy.load_state_dict(final)


def _eval_backend(cfg: RunConfig, policy, tokenizer):
    """The backend the trainer's held-out evaluation decodes with: ``model.backend``'s, or the
    transformers backend around the trainer's own policy when that backend keeps its own copy of
    the model (``own_engine``, e.g. vLLM): a second engine in the trainer process would take its
    own GPU memory and start-up time to evaluate weights the trainer already holds."""
    from tba_lab.registry import BACKENDS

    cls = BACKENDS.get(cfg.model.backend)
    if getattr(cls, "own_engine", False):
        cls = BACKENDS.get("transformers")
    return cls.build(cfg, policy, tokenizer)


def _restore(state: dict, policy, optimizer, algorithm, buffer: ReplayBuffer) -> int:
    """Load a checkpoint's trainer state into freshly built objects; returns its step.

    Raises:
        ConfigError: the checkpoint's policy does not fit the model at ``model.path``.
    """
    from tba_lab.config import ConfigError

    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as e:
        raise ConfigError(f"--resume: the checkpoint's policy does not fit the model at "
                          f"model.path (were its files replaced?): {str(e).splitlines()[0]}") from e
    # AdamW's moments and step counts come back; its hyperparameters (learning_rate and
    # weight_decay, log Z's tb.log_z_lr) stay the resuming config's, as config.yaml and the
    # logs say, instead of the values stored in the checkpoint's param groups
    settings = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state["optimizer"])
    for group, setting in zip(optimizer.param_groups, settings):
        group.update(setting)
    with torch.no_grad():
        for p, saved in zip((p for g in algorithm.parameters() for p in g["params"]),
                            state["algorithm"]):
            p.copy_(saved)
    buffer.load_state_dict(state["buffer"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    return int(state["step"])


class _Saver:
    """When and what to checkpoint (:mod:`tba_lab.checkpoint`): every ``training.save_steps``
    updates and/or ``training.save_seconds`` seconds (0 turns either off), and at the end."""

    def __init__(self, cfg, policy, optimizer, algorithm, buffer, log):
        self.cfg, self.policy, self.optimizer = cfg, policy, optimizer
        self.algorithm, self.buffer, self.log = algorithm, buffer, log
        self.saved_step, self.next_time = -1, float("inf")

    def forget_previous_run(self) -> None:
        """A new run in an output_dir that holds another run's checkpoint, saved policy and
        buffer replaces them, so nothing in the folder is left over from the other run."""
        out = Path(self.cfg.output_dir)
        checkpoint_path(out).unlink(missing_ok=True)
        (out / "buffer.pt").unlink(missing_ok=True)
        shutil.rmtree(out / "policy", ignore_errors=True)

    def start_clock(self, step: int) -> None:
        self.saved_step = step
        every = self.cfg.training.save_seconds
        self.next_time = time.time() + every if every else float("inf")

    def due(self, step: int) -> bool:
        every = self.cfg.training.save_steps
        return bool(every and step % every == 0) or time.time() >= self.next_time

    def save(self, step: int) -> None:
        if step == self.saved_step and checkpoint_path(self.cfg.output_dir).exists():
            return
        params = [p.detach().clone() for g in self.algorithm.parameters() for p in g["params"]]
        save_checkpoint(self.cfg.output_dir, {
            "step": step, "config": self.cfg.to_dict(), "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(), "algorithm": params,
            "buffer": self.buffer.state_dict(), "log": self.log.state_dict(step),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}})
        self.saved_step = step
        every = self.cfg.training.save_seconds
        self.next_time = time.time() + every if every else float("inf")


def _save_policy_and_buffer(out, policy, tokenizer, buffer: ReplayBuffer) -> None:
    from tba_lab.models import quiet_progress

    check_finite_weights(policy.state_dict().items(), "save policy/")  # FloatingPointError
    with quiet_progress():
        policy.save_pretrained(out / "policy")
    tokenizer.save_pretrained(out / "policy")
    buffer.save(out / "buffer.pt")
