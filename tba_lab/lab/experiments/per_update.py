"""Benchmarks ``per_update`` and ``tune``: what one trainer update is worth, with staleness and
replay set by hand and no timing in it (``tune``: each loss's learning rate, seeds 100 101).

TB learns from rollouts of older weights with little loss per update (TBA, Sec. 3-4); a race
measures that against seconds, which machine load moves. This preset's own update loop
(:func:`run_variant`; the trainer cannot fix staleness): one process, no searcher, no buffer;
update t rolls out the next B x K training prompts with the weights of update t - ``stale``
and trains on that batch; with ``reuse`` r a batch is trained on r times in a row. Greedy
accuracy on ``eval_size`` held-out problems every ``eval_every`` updates; AdamW at a constant
learning rate, gradients clipped to norm 1.

A variant's name says what it changes: ``ALGO[_FACTOR...]`` with the factors ``stale<N>``,
``reuse<R>``, ``lr<X>`` (learning rate), ``beta<X>`` (the algorithm's beta), ``learned`` (one
learned log Z, ``tb.log_z``), ``len`` (``tb.loss_type: token_mean``), ``std``
(``tb.scale_rewards: group``) and ``noclip`` (``grpo.epsilon: inf``, GRPO without its PPO
clip); e.g. ``tb_stale10_lr1.25e-5`` or ``grpo_noclip_stale30``.
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import PAPER, ExperimentError, fixed, one_thread, pct, sized

NAME = "per_update"
TITLE = "What one trainer update is worth: staleness and replay set by hand"
CLAIM = (f"{PAPER}, Sec. 3-4: trajectory balance learns from off-policy rollouts (of older "
         f"weights) with little loss per update.")
DEPARTURES = [
    "Staleness is exact and constant (every batch from the weights of N updates before), "
    "where an asynchronous run's staleness varies from batch to batch.",
    "A constant learning rate and no replay buffer; tens of updates of a 1M-parameter model.",
]
FLAGS = {"learned": {"tb": {"log_z": "learned"}}, "len": {"tb": {"loss_type": "token_mean"}},
         "std": {"tb": {"scale_rewards": "group"}}, "noclip": {"grpo": {"epsilon": math.inf}}}
# Preset ``tune``: each loss's learning rate, and TB's beta, at off_policy's budget (60
# updates), chosen by accuracy on all 1000 held-out problems after the last update, on seeds
# kept apart from every reporting seed.
TUNE_GRID = [f"tb_lr{lr}_beta{b}" for b in ("0.1", "0.03")
             for lr in ("6.25e-6", "1.25e-5", "2.5e-5", "5e-5", "1e-4")] + \
            [f"grpo_lr{lr}" for lr in ("1.25e-5", "2.5e-5", "5e-5", "1e-4")]
TUNE_SEEDS = (100, 101)


def settings(smoke: bool, tune: bool = False) -> dict:
    """``variants`` (named as in the module docstring), ``updates`` per run, evaluations, the
    batch; ``tune``: the sweep of :data:`TUNE_GRID`."""
    if tune:
        return sized(smoke, variants=(["tb_lr5e-5", "grpo_lr5e-5"], list(TUNE_GRID)),
                     updates=(2, 60), eval_every=(2, 30), eval_size=(8, 1000), prompts=(8, 16),
                     generations=(4, 8))
    grid = ["tb", "grpo", "tb_stale2", "tb_stale5", "tb_reuse2", "tb_lr1e-4"]
    return sized(smoke, variants=(["tb", "tb_stale1", "tb_reuse2"], grid), updates=(2, 40),
                 eval_every=(1, 5), eval_size=(8, 200), prompts=(8, 16), generations=(4, 8))


def parse_variant(name: str) -> tuple[dict, int, int]:
    """``(config overrides, stale, reuse)`` of a variant name; :class:`ExperimentError` for a
    factor that is none of those of the module docstring."""
    algo = next((a for a in ("online_dpo", "dr_grpo") if name == a or name.startswith(a + "_")),
                name.split("_")[0])  # the two algorithm names with an underscore
    factors = [f for f in name[len(algo):].split("_") if f]
    over, stale, reuse = {"algo": algo}, 0, 1
    for f in factors:
        m = re.fullmatch(r"(stale|reuse|lr|beta)([0-9.]+(?:e-?[0-9]+)?)", f)
        if f in FLAGS:
            over = merge(over, FLAGS[f])
        elif m and m[1] in ("stale", "reuse") and m[2].isdigit():
            stale, reuse = (int(m[2]), reuse) if m[1] == "stale" else (stale, int(m[2]))
        elif m and m[1] == "lr":
            over = merge(over, {"training": {"learning_rate": float(m[2])}})
        elif m and m[1] == "beta":
            over = merge(over, {algo: {"beta": float(m[2])}})
        else:
            raise ExperimentError(f"per_update: variant {name!r}: factor {f!r} is not one of "
                                  f"stale<N>, reuse<R>, lr<X>, beta<X>, {', '.join(FLAGS)}")
    if reuse < 1:
        raise ExperimentError(f"per_update: variant {name!r}: reuse must be >= 1")
    return over, stale, reuse


def variants(s: dict) -> list[tuple[str, dict]]:
    """Each variant's config overrides, checked by :func:`tba_lab.config.from_dict`."""
    from tba_lab.config import from_dict

    if s["updates"] < s["eval_every"] or s["eval_every"] < 1:
        raise ExperimentError(f"per_update: updates ({s['updates']}) must be >= eval_every "
                              f"({s['eval_every']}) >= 1")
    batch = {"training": {"num_prompts_per_step": s["prompts"],
                          "num_generations": s["generations"]}}
    plan = [(name, merge(parse_variant(name)[0], batch)) for name in dict.fromkeys(s["variants"])]
    for _, over in plan:
        from_dict(over)
    return plan


def run_variant(name: str, seed: int, updates: int, eval_every: int, eval_size: int,
                overrides: dict | None = None, eval_at=None, kl_prompts: int = 0,
                kl_k: int = 4) -> dict:
    """One run of variant ``name`` (``overrides``: its config, default from the name).

    Evaluates the task's held-out metrics (``task.metrics`` of greedy answers to the first
    ``eval_size`` problems) at update 0 and after every ``eval_every`` updates, or after the
    updates listed in ``eval_at``; with ``kl_prompts`` > 0 each evaluation also estimates the
    policy's KL to the reference policy (``kl``, nats per response: ``kl_k`` samples of each
    of the first ``kl_prompts`` problems, :func:`tba_lab.lab.experiments.beta.kl_to_reference`,
    on a forked torch RNG so that it leaves training's samples as they are). Returns
    ``{"variant", "seed", "evals": [{"step", METRIC: value, ...}, ...], "seconds"}`` and the
    means over updates of ``behaviour_kl`` and ``clip_fraction``."""
    import collections
    import random

    import torch

    from tba_lab.algorithms import compute_loss, make_algorithm
    from tba_lab.config import from_dict
    from tba_lab.eval import evaluate
    from tba_lab.lab.experiments.beta import kl_to_reference
    from tba_lab.models import load_policy
    from tba_lab.rollout import rollout
    from tba_lab.rollout.backend import make_backend
    from tba_lab.tasks import make_task

    default, stale, reuse = parse_variant(name)
    cfg = from_dict(merge(default if overrides is None else overrides, {"seed": seed}))
    torch.manual_seed(seed)
    policy, tok = load_policy(cfg.model.path)
    sampler = load_policy(cfg.model.path)[0].eval()     # holds the (possibly stale) weights
    reference = load_policy(cfg.model.path)[0].eval()
    task, algorithm = make_task(cfg), make_algorithm(cfg)
    policy_backend, sampler_backend = (make_backend(cfg, m, tok) for m in (policy, sampler))
    held_out, train = task.load("test")[:eval_size], task.load("train")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    tr = cfg.training
    B, K = tr.num_prompts_per_step, tr.num_generations
    optimizer = torch.optim.AdamW(  # a learned log Z trains at its own (constant) rate
        [{"params": list(policy.parameters())},
         *({**g, "lr": g["base_lr"]} for g in algorithm.parameters())],
        lr=tr.learning_rate, weight_decay=0.0)
    history = collections.deque(maxlen=stale + 1)  # weights of the last stale + 1 updates
    due = set(eval_at) if eval_at is not None else set(range(eval_every, updates + 1, eval_every))

    policy.eval()  # throughout, as the trainer: dropout would make the loss's log-probs noisy

    def held_out_metrics(step: int) -> dict:
        out = {"step": step, **evaluate(task, policy_backend, held_out, cfg.model.max_new_tokens)}
        if kl_prompts:
            with torch.random.fork_rng():
                torch.manual_seed(seed * 100_003 + step)
                out["kl"] = kl_to_reference(policy, reference, policy_backend, task,
                                            held_out[:kl_prompts], kl_k, cfg.model.max_new_tokens,
                                            cfg.model.temperature)["kl"]
        return out

    evals, batch, t0 = [held_out_metrics(0)], None, time.time()
    terms = collections.defaultdict(list)  # behaviour_kl (nats per response), clip_fraction
    for step in range(updates):
        history.append({k: v.detach().clone() for k, v in policy.state_dict().items()})
        if step % reuse == 0:
            ids = order[(step // reuse) * B:(step // reuse + 1) * B]
            sampler.load_state_dict(history[0])
            with torch.no_grad():
                batch = rollout(sampler_backend, task, [train[i] for i in ids], K,
                                cfg.model.temperature, cfg.model.max_new_tokens,
                                reference=reference if algorithm.needs_reference() else None,
                                version=step, problem_ids=ids).rollouts
        loss, info = compute_loss(algorithm, policy, batch, tok.pad_token_id, step)
        for key in ("behaviour_kl", "clip_fraction"):
            if key in info:
                terms[key].append(info[key])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), tr.max_grad_norm or math.inf)
        optimizer.step()
        if step + 1 in due:
            evals.append(held_out_metrics(step + 1))
    return {"variant": name, "seed": seed, "evals": evals, "seconds": round(time.time() - t0, 1),
            **{k: sum(v) / len(v) for k, v in terms.items()}}


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """:func:`run_variant` on one torch thread with ``s``'s ``updates``, ``eval_every`` (or
    ``eval_at``), ``eval_size`` and ``kl_prompts``/``kl_k`` where given, written to ``run_dir``
    (``eval.jsonl``, ``summary.json``); ``(summary, evals)``. The summary holds each held-out
    metric ``_before`` and ``_after`` training, and ``mean_after_first``: the headline
    metric's mean over the evaluations after update 0."""
    from tba_lab.runlog import eval_metric

    with one_thread():
        r = run_variant(variant, seed, s["updates"], s["eval_every"], s["eval_size"], overrides,
                        eval_at=s.get("eval_at"), kl_prompts=s.get("kl_prompts", 0),
                        kl_k=s.get("kl_k", 4))
    evals = [{**e, "wall_seconds": None, "n": s["eval_size"]} for e in r["evals"]]
    names = [k for k in evals[0] if k not in ("step", "wall_seconds", "n", "kl")]
    head = eval_metric(evals[0])
    later = [e[head] for e in evals[1:]]  # the evaluations after update 0
    summary = {"seed": seed, "trainer_steps": s["updates"], "wall_seconds": r["seconds"],
               "held_out_metrics": [head, *(m for m in names if m != head)],
               **{f"{m}_before": evals[0][m] for m in names},
               **{f"{m}_after": evals[-1][m] for m in names},
               "mean_after_first": sum(later) / len(later) if later else None,
               **{k: r[k] for k in ("behaviour_kl", "clip_fraction") if k in r}}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary, evals


def metrics(s: dict) -> dict:
    return {"accuracy_after": (f"held-out accuracy after {s['updates']} updates", pct),
            "mean_after_first": ("held-out accuracy, mean over the evaluations after update 0",
                                 pct),
            "behaviour_kl": ("behaviour KL per response (nats, mean over updates)", fixed(3)),
            "clip_fraction": ("clip fraction (mean over updates)", fixed(3))}


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """Staleness, replay, the accuracies of :func:`metrics` and the loss's terms (no claims:
    a benchmark read from its table; ``off_policy`` tests the claim)."""
    _, stale, reuse = parse_variant(variant)
    return {"stale": stale, "reuse": reuse, **{k: summary.get(k) for k in (
        "accuracy_after", "mean_after_first", "behaviour_kl", "clip_fraction")}}
