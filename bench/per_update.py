"""What one trainer update is worth, with staleness and replay set by hand (no timing noise).

    python bench/per_update.py [--variants tb grpo tb_stale2 ...] [--seeds 0 1 2 3]
                               [--updates 40] [--eval-every 5] [--out runs/per_update]

A race or ``bench/first_minute.py`` measures accuracy against seconds, where the machine's
load, the searcher's pace and the evaluation timing all move the result. This script takes them
out: one process, no searcher, no buffer. Each update t

  1. rolls out the next B = 16 training prompts x K = 8 responses (T = 0.6) with the policy's
     weights of update ``t - stale`` (a copy kept in memory; ``stale`` = 0 is on-policy), with
     reference log-probs when the loss reads them,
  2. trains on that batch; with ``reuse`` = r, a batch is trained on r times in a row (update
     t, t + 1, ...) before the next one is rolled out: the replay of an asynchronous trainer
     that outruns its searcher,

and greedy accuracy on the first ``--eval-size`` held-out problems is measured every
``--eval-every`` updates. Everything else is the kit's default (AdamW 5e-5, constant here,
gradients clipped to norm 1, beta 0.1 for TB, GRPO at beta 0). So the variants differ only in
the loss, the learning rate, or the staleness and replay of the data, which is what separates
the legs of a race once the seconds are taken out. ``--out`` receives ``per_update.json``
(every evaluation) and ``per_update.md`` (date, cores, seeds; mean and min-max over seeds).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name -> (config overrides, staleness in updates, uses per batch, description)
# tb.* options that give TB GRPO's two normalisations (per-sequence token mean, group std)
GRPO_NORMS = {"loss_type": "token_mean", "scale_rewards": "group"}
VARIANTS = {
    "tb": ({"algo": "tb"}, 0, 1, "TB, on-policy"),
    "grpo": ({"algo": "grpo"}, 0, 1, "GRPO, on-policy"),
    "tb_lr1e-4": ({"algo": "tb", "training": {"learning_rate": 1e-4}}, 0, 1,
                  "TB, on-policy, learning rate 1e-4"),
    "tb_stale2": ({"algo": "tb"}, 2, 1, "TB, rollouts from the weights of 2 updates before"),
    "tb_stale5": ({"algo": "tb"}, 5, 1, "TB, rollouts from the weights of 5 updates before"),
    "tb_reuse2": ({"algo": "tb"}, 0, 2, "TB, each on-policy batch trained on twice"),
    "grpo_stale5": ({"algo": "grpo"}, 5, 1, "GRPO, rollouts from the weights of 5 updates before"),
    # what separates GRPO from TB per update: GRPO divides each group's advantages by its
    # reward std and averages each response's tokens; Dr. GRPO does neither (sums over a
    # constant), like TB, whose VarGrad residual is a group-centred reward over beta
    "grpo_no_std": ({"algo": "grpo", "grpo": {"scale_rewards": "none"}}, 0, 1,
                    "GRPO, on-policy, advantages not divided by the group's reward std"),
    "dr_grpo": ({"algo": "dr_grpo"}, 0, 1,
                "Dr. GRPO, on-policy: no std division, token sums over a constant 40"),
    "tb_beta0.3": ({"algo": "tb", "tb": {"beta": 0.3}}, 0, 1, "TB, on-policy, beta 0.3"),
    "tb_lr2.5e-5": ({"algo": "tb", "training": {"learning_rate": 2.5e-5}}, 0, 1,
                    "TB, on-policy, learning rate 2.5e-5"),
    # TB with GRPO's two normalisations (tb.loss_type, tb.scale_rewards), 2026-12-02
    "tb_len": ({"algo": "tb", "tb": {"loss_type": "token_mean"}}, 0, 1,
               "TB, tb.loss_type token_mean"),
    "tb_len_lr2.5e-5": ({"algo": "tb", "tb": {"loss_type": "token_mean"},
                         "training": {"learning_rate": 2.5e-5}}, 0, 1,
                        "TB, tb.loss_type token_mean, learning rate 2.5e-5"),
    "tb_len_lr1.25e-5": ({"algo": "tb", "tb": {"loss_type": "token_mean"},
                          "training": {"learning_rate": 1.25e-5}}, 0, 1,
                         "TB, tb.loss_type token_mean, learning rate 1.25e-5"),
    "tb_len_std": ({"algo": "tb", "tb": GRPO_NORMS}, 0, 1,
                   "TB, tb.loss_type token_mean and tb.scale_rewards group"),
    "tb_len_std_lr2.5e-5": ({"algo": "tb", "tb": GRPO_NORMS,
                             "training": {"learning_rate": 2.5e-5}}, 0, 1,
                            "TB, tb.loss_type token_mean and tb.scale_rewards group, learning "
                            "rate 2.5e-5"),
    "tb_noclip": ({"algo": "tb", "training": {"max_grad_norm": 0}}, 0, 1,
                  "TB, no gradient-norm clipping (training.max_grad_norm 0)"),
    # off-policy robustness per update: rollouts from the weights of 10 updates before
    "tb_stale10": ({"algo": "tb"}, 10, 1, "TB, rollouts from the weights of 10 updates before"),
    "grpo_stale10": ({"algo": "grpo"}, 10, 1,
                     "GRPO, rollouts from the weights of 10 updates before"),
    "tb_len_std_lr2.5e-5_stale10": ({"algo": "tb", "tb": GRPO_NORMS,
                                     "training": {"learning_rate": 2.5e-5}}, 10, 1,
                                    "as tb_len_std_lr2.5e-5, rollouts from the weights of 10 "
                                    "updates before"),
    # why does TB lose accuracy at staleness 10? one factor at a time (2026-12-02T04)
    "tb_stale10_beta1": ({"algo": "tb", "tb": {"beta": 1.0}}, 10, 1,
                         "tb_stale10 with beta 1.0 (rewards over beta ten times smaller)"),
    "tb_stale10_learned": ({"algo": "tb", "tb": {"log_z": "learned"}}, 10, 1,
                           "tb_stale10 with one learned scalar log Z (tb.log_z learned) instead of "
                           "VarGrad's per-prompt estimate"),
    "tb_stale10_lr1.25e-5": ({"algo": "tb", "training": {"learning_rate": 1.25e-5}}, 10, 1,
                             "tb_stale10 with learning rate 1.25e-5"),
    "tb_learned": ({"algo": "tb", "tb": {"log_z": "learned"}}, 0, 1,
                   "TB, on-policy, a learned scalar log Z (tb.log_z learned)"),
    "tb_lr1.25e-5": ({"algo": "tb", "training": {"learning_rate": 1.25e-5}}, 0, 1,
                     "TB, on-policy, learning rate 1.25e-5"),
    # more off-policy: staleness 30, and GRPO at TB's learning rate (2026-12-02T04)
    "tb_stale30_lr1.25e-5": ({"algo": "tb", "training": {"learning_rate": 1.25e-5}}, 30, 1,
                             "tb_lr1.25e-5, rollouts from the weights of 30 updates before"),
    "grpo_stale30": ({"algo": "grpo"}, 30, 1,
                     "GRPO, rollouts from the weights of 30 updates before"),
    "grpo_lr1.25e-5": ({"algo": "grpo", "training": {"learning_rate": 1.25e-5}}, 0, 1,
                       "GRPO, on-policy, learning rate 1.25e-5"),
    "grpo_stale10_lr1.25e-5": ({"algo": "grpo", "training": {"learning_rate": 1.25e-5}}, 10, 1,
                               "grpo_lr1.25e-5, rollouts from the weights of 10 updates before"),
    "grpo_stale30_lr1.25e-5": ({"algo": "grpo", "training": {"learning_rate": 1.25e-5}}, 30, 1,
                               "grpo_lr1.25e-5, rollouts from the weights of 30 updates before"),
}


def run_variant(name: str, seed: int, updates: int, eval_every: int, eval_size: int) -> dict:
    """One run of ``name``; returns ``{"variant", "seed", "evals": [(update, accuracy)], ...}``."""
    from tba_lab.algorithms import compute_loss, make_algorithm
    from tba_lab.config import from_dict
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.registry import BACKENDS
    from tba_lab.rollout import rollout
    from tba_lab.tasks import make_task

    overrides, stale, reuse, _ = VARIANTS[name]
    cfg = from_dict({**json.loads(json.dumps(overrides)), "seed": seed})
    torch.manual_seed(seed)
    policy, tok = load_policy(cfg.model.path)
    sampler = load_policy(cfg.model.path)[0].eval()     # holds the (possibly stale) weights
    reference = load_policy(cfg.model.path)[0].eval()
    task, algorithm = make_task(cfg), make_algorithm(cfg)
    backend_cls = BACKENDS.get(cfg.model.backend)
    policy_backend, sampler_backend = (backend_cls.build(cfg, m, tok) for m in (policy, sampler))
    held_out, train = task.load("test")[:eval_size], task.load("train")
    order = list(range(len(train)))
    random.Random(seed).shuffle(order)
    tr = cfg.training
    B, K = tr.num_prompts_per_step, tr.num_generations
    optimizer = torch.optim.AdamW(policy.parameters(), lr=tr.learning_rate, weight_decay=0.0)
    history = collections.deque(maxlen=stale + 1)  # weights of the last stale + 1 updates

    def accuracy() -> float:
        policy.eval()
        a = evaluate(task, policy_backend, held_out, cfg.model.max_new_tokens)["accuracy"]
        policy.train()
        return a

    evals, batch, t0 = [(0, accuracy())], None, time.time()
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
        policy.train()
        loss, _ = compute_loss(algorithm, policy, batch, tok.pad_token_id, step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), tr.max_grad_norm or math.inf)
        optimizer.step()
        if (step + 1) % eval_every == 0:
            evals.append((step + 1, accuracy()))
    return {"variant": name, "seed": seed, "evals": evals, "seconds": round(time.time() - t0, 1)}


def table(results: list[dict]) -> str:
    """Accuracy (%) at each evaluated update count, mean (min-max) over seeds, and the mean
    over every evaluation after the first (a less noisy single number per variant)."""
    steps = [s for s, _ in results[0]["evals"]]
    lines = ["| variant | " + " | ".join(f"@{s}" for s in steps) + " | mean of @"
             f"{steps[1]}..@{steps[-1]} |", "|" + "---|" * (len(steps) + 2)]
    for name in dict.fromkeys(r["variant"] for r in results):
        acc = 100 * np.array([[a for _, a in r["evals"]] for r in results if r["variant"] == name])
        cells = [f"{m:.1f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in
                 zip(acc.mean(0), acc.min(0), acc.max(0))]
        after = acc[:, 1:].mean(1)
        cells.append(f"{after.mean():.1f} ({after.min():.1f}-{after.max():.1f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--updates", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-size", type=int, default=200)
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=Path("runs/per_update"))
    args = p.parse_args(argv)
    if args.updates < args.eval_every or args.eval_every < 1 or not args.seeds:
        p.error("--updates must be >= --eval-every >= 1, and --seeds not empty")
    torch.set_num_threads(args.threads)
    started = datetime.datetime.now().isoformat(timespec="minutes")
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in args.seeds:  # seed-major, like the other bench scripts
        for name in args.variants:
            results.append(run_variant(name, seed, args.updates, args.eval_every, args.eval_size))
            (args.out / "per_update.json").write_text(json.dumps(
                {"started": started, "cores": os.cpu_count(), "seeds": args.seeds,
                 "results": results}, indent=1))
            print(name, seed, results[-1]["evals"], flush=True)
    text = (f"Accuracy per trainer update, started {started}, {os.cpu_count()} cores, "
            f"{args.threads} torch threads, seeds {args.seeds}, greedy accuracy (%) on the first "
            f"{args.eval_size} held-out problems after N updates (B = 16 prompts x K = 8); mean "
            f"over seeds (min-max). One process, no searcher: staleness and replay are set by "
            f"hand, so the seconds do not enter.\n\n" + table(results) + "\n\nVariants:\n\n"
            + "\n".join(f"* `{n}`: {VARIANTS[n][3]}" for n in dict.fromkeys(r["variant"] for r in results)))
    (args.out / "per_update.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
