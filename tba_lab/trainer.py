"""The trainer (learner): the whole training loop of asynchronous TBA in one place.

What it does (Bartoldson et al., "Trajectory Balance with Asynchrony", arXiv 2503.18929, Sec. 3-4):

    searchers --(rollouts tagged with policy version)--> queue --> replay buffer
    trainer: sample B prompts x K responses from the buffer, one optimizer update on
             the TB loss (Eq. 5) or GRPO, and every k updates publish weights to the searchers.

* ``algo="tb"``: trajectory balance with the VarGrad log Z (Eq. 3-5). Rewards are stored raw and
  divided by the CURRENT (annealed) beta here; reference log-probs come with each rollout.
* ``algo="grpo"``: group-normalised advantages and the PPO-clipped ratio against the behaviour
  log-probs the searcher's sampler recorded (Shao et al. 2024). ``dr_grpo``, ``rloo`` and
  ``online_dpo`` are the other baselines, all in ``compute_loss`` on the same log-prob code.
* ``mode="async"``: the trainer never waits for generation once the buffer holds
  ``buffer.initial_fill`` rollouts. Fresh data is up to about 2k-1 updates stale; replayed data
  can be older, bounded by ``buffer.max_prompts``. The measured staleness (trainer updates minus
  the rollout's version) is logged per batch.
* ``mode="sync"``: strict alternation with k = 1 through the same code: the searcher generates
  one batch per published version and the trainer trains on exactly that batch (on-policy).

Departures from the paper's setup, stated plainly: a single trainer process on CPU (no
DeepSpeed/FSDP), exact-match reward only, a replay buffer bounded in prompts
(``buffer.max_prompts``), a learning rate decayed linearly to 0 over the budget
(``training.lr_schedule``), searchers that also compute the reference log-probs, and greedy
accuracy on a synthetic task as the evaluation.

Outputs in ``output_dir``: ``metrics.jsonl`` (one object per update, with the update's
``update_seconds`` and the ``wait_seconds`` before it), ``searchers.jsonl`` (one object per
generation batch: searcher, policy version, start / end seconds since training began, generation
and scoring seconds), ``eval.jsonl`` (held-out accuracy over time), ``summary.json``,
``config.yaml``, ``curves.png``, ``buffer.pt``, and the final policy (``save_pretrained``).
Ctrl-C stops it within seconds, saving all of these so far.
"""
from __future__ import annotations

import json
import math
import random
import signal
import threading
import time
from pathlib import Path

import torch

from tba_lab.buffer import ReplayBuffer, Rollout
from tba_lab.config import RunConfig, needs_reference
from tba_lab.losses import (beta_schedule, group_advantages, grpo_loss, online_dpo_loss,
                            rloo_advantages, rloo_loss, sequence_logprobs, trajectory_balance_loss)
from tba_lab.rollout.scoring import response_logprobs


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def current_beta(cfg: RunConfig, step: int) -> float:
    """KL coefficient (DPO: temperature) in force at trainer update ``step``; TB's is annealed
    (``beta_schedule``), the baselines' are constant."""
    if cfg.algo == "tb":
        final = cfg.tb.beta if cfg.tb.beta_final is None else cfg.tb.beta_final
        return beta_schedule(step, cfg.tb.beta, final, cfg.tb.beta_anneal_steps)
    return {"grpo": cfg.grpo.beta, "dr_grpo": cfg.grpo.beta, "rloo": cfg.rloo.beta,
            "online_dpo": cfg.online_dpo.beta}[cfg.algo]


def compute_loss(cfg: RunConfig, model, batch: list[Rollout], pad_id: int, step: int,
                 log_z: torch.Tensor | None = None):
    """Loss of one prompt-major batch of B*K rollouts under the current ``model``.

    Every algorithm starts from the same temperature-scaled token log-probs and response mask
    (``response_logprobs``); the reference and behaviour log-probs come with each rollout.

    * tb: ``trajectory_balance_loss`` (Eq. 5); ``log_z`` is the learned scalar when
      ``tb.log_z == "learned"``, else None (VarGrad, Eq. 4).
    * grpo: ``group_advantages`` + ``grpo_loss`` with the options of ``cfg.grpo``.
    * dr_grpo: the same with ``scale_rewards="none"`` and ``loss_type="dr_grpo"`` forced.
    * rloo: ``rloo_advantages`` on rewards minus beta * (behaviour - reference) sequence
      log-prob, then ``rloo_loss``.
    * online_dpo: ``online_dpo_loss`` on each group's best / worst response.

    Returns:
        (loss, info): scalar tensor with grad, and a dict of finite floats for logging.
    """
    K = cfg.training.num_generations
    prompts = [r.prompt_ids for r in batch]
    responses = [r.response_ids for r in batch]
    token_logps, mask = response_logprobs(model, prompts, responses, pad_id,
                                          cfg.model.temperature)  # (N, R), (N, R)
    rewards = torch.tensor([r.reward for r in batch], dtype=torch.float32)  # (N,)
    beta = current_beta(cfg, step)
    ref_seq = None  # (N,) reference sequence log-probs, when the loss reads them
    if needs_reference(cfg.algo, cfg.grpo.beta):
        if any(r.ref_token_logps is None for r in batch):
            raise ValueError(f"algo={cfg.algo!r} needs reference log-probs but these rollouts carry "
                             "none (they come from a run without a reference: GRPO with grpo.beta "
                             "0); generate them with this config or start with an empty buffer")
        ref_seq = torch.tensor([sum(r.ref_token_logps) for r in batch], dtype=torch.float32)
    if cfg.algo == "tb":
        loss, info = trajectory_balance_loss(sequence_logprobs(token_logps, mask), ref_seq,
                                             rewards, beta, K, log_z=log_z)
    elif cfg.algo == "online_dpo":
        loss, info = online_dpo_loss(sequence_logprobs(token_logps, mask), ref_seq, rewards, beta, K)
    else:
        R = mask.shape[1]
        old = _pad([r.old_token_logps for r in batch], R)  # behaviour policy, (N, R)
        if cfg.algo == "rloo":
            kl = torch.tensor([sum(r.old_token_logps) for r in batch]) - ref_seq  # (N,)
            adv = rloo_advantages(rewards, K, kl=kl, beta=beta)
            loss, info = rloo_loss(token_logps, old, adv, mask, clip_eps=cfg.rloo.epsilon)
            info["kl"] = kl.mean().item()
        else:
            g = cfg.grpo
            dr = cfg.algo == "dr_grpo"
            adv = group_advantages(rewards, K, "none" if dr else g.scale_rewards)  # (N,)
            ref = _pad([r.ref_token_logps for r in batch], R) if g.beta > 0 else None
            loss, info = grpo_loss(token_logps, old, ref, adv, mask, clip_eps=g.epsilon, beta=g.beta,
                                   kl_estimator=g.kl_estimator,
                                   loss_type="dr_grpo" if dr else g.loss_type,
                                   max_completion_length=cfg.model.max_new_tokens)
    info = {k: v for k, v in info.items() if isinstance(v, float) and math.isfinite(v)}
    info["beta"] = beta
    return loss, info


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


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def train(cfg: RunConfig, progress: bool = True, stop_event: threading.Event | None = None) -> dict:
    """Run one training job (``tba-lab train``); returns the summary dict.

    ``stop_event``: when set (e.g. by a notebook's Stop button while ``train`` runs in a
    thread), training ends after the current update and saves as at the end of the budget.

    Raises:
        KeyboardInterrupt: re-raised after saving everything when interrupted (Ctrl-C or SIGTERM).
        RuntimeError: when a searcher fails (its traceback is in the message) or dies.
    """
    from tqdm.auto import tqdm

    from tba_lab.actors.local import LocalLauncher
    from tba_lab.eval import greedy_accuracy
    from tba_lab.models import load_policy, quiet_progress
    from tba_lab.plots import plot_curves
    from tba_lab.tasks.gsm8k import read_jsonl

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_config(cfg, out / "config.yaml")
    sync = cfg.async_.mode == "sync"
    caller_threads = torch.get_num_threads()  # restored at the end (a notebook kernel keeps it)
    torch.set_num_threads(cfg.async_.trainer_threads or (1 if not sync else max(1, torch.get_num_threads())))
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    model, tokenizer = load_policy(cfg.model.path)
    test = read_jsonl(cfg.task.test_path)
    eval_set, interim_set = test[:cfg.task.eval_size], test[:cfg.task.interim_eval_size]
    buffer = ReplayBuffer(cfg.buffer.capacity_per_prompt, cfg.buffer.recency_prob,
                          cfg.buffer.inv_temp, seed=cfg.seed,
                          max_prompts=cfg.buffer.max_prompts or None)
    groups = [{"params": list(model.parameters()), "base_lr": cfg.training.learning_rate}]
    log_z = None  # learned log-partition (tb.log_z == "learned"): one scalar for all prompts
    if cfg.algo == "tb" and cfg.tb.log_z == "learned":
        log_z = torch.nn.Parameter(torch.zeros(()))
        groups.append({"params": [log_z], "base_lr": cfg.tb.log_z_lr, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=cfg.training.learning_rate,
                            weight_decay=cfg.training.weight_decay)
    launcher = LocalLauncher(cfg, model)
    summary: dict = {"algo": cfg.algo, "mode": cfg.async_.mode, "seed": cfg.seed,
                     "accuracy_before": None, "accuracy_after": None, "trainer_steps": 0,
                     "samples_generated": 0, "staleness_mean": None, "staleness_max": None,
                     "wall_seconds": 0.0, "interrupted": False}
    metrics_f = open(out / "metrics.jsonl", "w")
    searchers_f = open(out / "searchers.jsonl", "w")  # one row per generation batch received
    eval_f = open(out / "eval.jsonl", "w")
    step, samples, stale_sum, stale_n, stale_max = 0, 0, 0, 0, 0
    searcher_reward = None  # mean reward of the newest generated rollouts
    t_start = time.time()
    bar = None
    # Ctrl-C and SIGTERM both end the run through the same saving path. SIGINT is set
    # explicitly because a shell starts background jobs with SIGINT ignored.
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        old_handlers = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_interrupt),
                        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        launcher.start()  # searchers load their models while the trainer evaluates
        model.eval()
        t0 = time.time()
        summary["accuracy_before"] = greedy_accuracy(model, tokenizer, eval_set)
        summary["eval_seconds_before"] = round(time.time() - t0, 1)
        eval_f.write(json.dumps({"step": 0, "wall_seconds": 0.0,
                                 "accuracy": summary["accuracy_before"], "n": len(eval_set)}) + "\n")
        eval_f.flush()
        model.train()
        t_start = time.time()  # the training budget starts now
        deadline = t_start + 60 * cfg.max_minutes
        next_eval = t_start + cfg.task.eval_every_seconds if cfg.task.eval_every_seconds else math.inf
        bar = tqdm(total=cfg.training.max_steps or None, disable=not progress, unit="step",
                   desc=f"{cfg.algo}/{cfg.async_.mode}")
        fresh: list[Rollout] = []  # sync mode: the batch generated by the current version
        t_free = time.time()  # when the trainer last finished an update (for wait_seconds)
        searcher_timing: dict = {}  # gen/score seconds of the newest searcher batch
        while (time.time() < deadline and not (cfg.training.max_steps and step >= cfg.training.max_steps)
               and not (stop_event is not None and stop_event.is_set())):
            # 1. Drain everything the searchers produced into the replay buffer.
            msgs = launcher.poll(timeout=0.05 if (sync or len(buffer) < cfg.buffer.initial_fill) else 0.0)
            fresh_rewards = [r.reward for msg in msgs if msg["kind"] == "rollouts" for r in msg["rollouts"]]
            if fresh_rewards:  # what the searchers' current policy earns (on-policy reward)
                searcher_reward = sum(fresh_rewards) / len(fresh_rewards)
            for msg in msgs:
                if msg["kind"] == "rollouts":
                    searcher_timing = {"gen_seconds": msg["gen_seconds"],
                                       "score_seconds": msg["score_seconds"]}
                    searchers_f.write(json.dumps({
                        "searcher_id": msg["searcher_id"], "version": msg["version"],
                        "t_start": round(msg["t_start"] - t_start, 4),
                        "t_end": round(msg["t_end"] - t_start, 4),
                        "received": round(time.time() - t_start, 4), "trainer_step": step,
                        "gen_seconds": msg["gen_seconds"], "score_seconds": msg["score_seconds"],
                        "rollouts": len(msg["rollouts"])}) + "\n")
                if msg["kind"] == "error":
                    raise RuntimeError(f"searcher {msg['searcher_id']} failed:\n{msg['traceback']}")
                buffer.add(msg["rollouts"])
                samples += len(msg["rollouts"])
                if sync and msg["version"] == step:
                    fresh = msg["rollouts"]
            if not launcher.alive():
                raise RuntimeError("a searcher process died; see its output above")
            # 2. Wait for data: async until the initial fill, sync until this version's batch.
            if sync:
                if not fresh:
                    continue
                batch, fresh = fresh, []
            else:
                if len(buffer) < max(cfg.buffer.initial_fill, 1):
                    continue
                batch = buffer.sample(cfg.training.num_prompts_per_step, cfg.training.num_generations)
            # 3. One optimizer update.
            t_ready = time.time()
            factor = lr_factor(cfg, step, time.time() - t_start)
            lr = cfg.training.learning_rate * factor
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * factor
            loss, info = compute_loss(cfg, model, batch, tokenizer.pad_token_id, step, log_z)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(  # the policy's; log Z is not clipped
                model.parameters(), cfg.training.max_grad_norm or float("inf"))
            opt.step()
            staleness = ReplayBuffer.staleness(batch, step)
            step += 1
            # 4. Publish weights every k updates (sync: every update).
            if step % cfg.async_.sync_period == 0:
                launcher.publish(model, step)
                buffer.mark_sync()
            t_free, wait_seconds = time.time(), t_ready - t_free
            stale_sum += sum(staleness)
            stale_n += len(staleness)
            stale_max = max(stale_max, max(staleness))
            reward_mean = sum(r.reward for r in batch) / len(batch)
            row = {"step": step, "wall_seconds": round(time.time() - t_start, 3),
                   "loss": loss.item(), "reward_mean": reward_mean,
                   "staleness_mean": sum(staleness) / len(staleness), "staleness_max": max(staleness),
                   "searcher_reward_mean": searcher_reward,
                   "buffer_size": len(buffer), "samples_generated": samples,
                   "grad_norm": float(grad_norm), "lr": lr,
                   "wait_seconds": round(wait_seconds, 4), "update_seconds": round(t_free - t_ready, 4),
                   **searcher_timing, **info}
            if step % cfg.log_every == 0:
                metrics_f.write(json.dumps(row) + "\n")
                metrics_f.flush()
            bar.update(1)
            bar.set_postfix(reward=f"{reward_mean:.2f}", stale=f"{row['staleness_mean']:.1f}",
                            buf=len(buffer), refresh=False)
            # 5. Interim held-out evaluation (counts against the wall-clock budget).
            if time.time() >= next_eval:
                acc = greedy_accuracy(model, tokenizer, interim_set)
                model.train()
                eval_f.write(json.dumps({"step": step, "wall_seconds": round(time.time() - t_start, 1),
                                         "accuracy": acc, "n": len(interim_set)}) + "\n")
                eval_f.flush()
                bar.write(f"step {step}: held-out accuracy {acc:.3f} ({len(interim_set)} problems)")
                next_eval = time.time() + cfg.task.eval_every_seconds
                t_free = time.time()  # evaluation is not waiting for data
        summary["wall_seconds"] = round(time.time() - t_start, 1)  # before the searchers stop
        launcher.stop()
        summary["accuracy_after"] = greedy_accuracy(model, tokenizer, eval_set)
        eval_f.write(json.dumps({"step": step, "wall_seconds": summary["wall_seconds"],
                                 "accuracy": summary["accuracy_after"], "n": len(eval_set)}) + "\n")
    except KeyboardInterrupt:
        summary["interrupted"] = True
        raise
    finally:
        launcher.stop()  # idempotent; no searcher survives the trainer
        torch.set_num_threads(caller_threads)
        if main_thread:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
        if bar is not None:
            bar.close()
        if not summary["wall_seconds"]:
            summary["wall_seconds"] = round(time.time() - t_start, 1)
        summary.update(trainer_steps=step, samples_generated=samples,
                       staleness_mean=(stale_sum / stale_n) if stale_n else None,
                       staleness_max=stale_max if stale_n else None,
                       updates_per_minute=round(60 * step / max(summary["wall_seconds"], 1e-9), 2))
        if log_z is not None:
            summary["learned_log_z"] = log_z.item()
        metrics_f.close()
        searchers_f.close()
        eval_f.close()
        with quiet_progress():
            model.save_pretrained(out / "policy")
        tokenizer.save_pretrained(out / "policy")
        buffer.save(out / "buffer.pt")
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        try:
            plot_curves(out)
        except Exception as e:  # a plot must never lose a run
            print(f"warning: could not draw curves.png: {e}")
    return summary


def _write_config(cfg: RunConfig, path: Path) -> None:
    import yaml

    data = cfg.to_dict()
    data["async"] = data.pop("async_")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
