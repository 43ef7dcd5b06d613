"""Benchmark ``per_update``: what one trainer update is worth, with staleness and replay set by
hand and no timing in it.

Claim (TBA, arXiv 2503.18929, Sec. 3-4): TB learns from off-policy data, rollouts of older
weights, with little loss per update, which is what lets a trainer run ahead of its searchers.
A race measures accuracy against seconds, where machine load, the searcher's pace and the
evaluation timing move the result; this takes them out. One process, no searcher, no buffer:
update t rolls out the next B x K training prompts with the policy's weights of update
t - ``stale`` (``stale`` 0 is on-policy), with reference log-probs when the loss reads them,
and trains on that batch; with ``reuse`` r a batch is trained on r times in a row before the
next is rolled out (the replay of a trainer that outruns its searcher). Greedy accuracy on
``eval_size`` held-out problems every ``eval_every`` updates. Everything else is the kit's
default (AdamW 5e-5, constant here, gradients clipped to norm 1, TB at beta 0.1, GRPO at 0).

A variant's name says what it changes: ``ALGO[_FACTOR...]`` with the factors ``stale<N>``,
``reuse<R>``, ``lr<X>`` (learning rate), ``beta<X>`` (the algorithm's beta), ``learned`` (one
learned log Z, ``tb.log_z``), ``len`` (``tb.loss_type: token_mean``) and ``std``
(``tb.scale_rewards: group``); e.g. ``tb_stale10_lr1.25e-5`` or ``grpo_stale30``.
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (PAPER, ExperimentError, errorbar, points, pyplot,
                                            rng, save_figure, separated, spread)

NAME = "per_update"
TITLE = "What one trainer update is worth: staleness and replay set by hand"
CLAIM = (f"{PAPER}, Sec. 3-4: trajectory balance learns from off-policy rollouts (of older "
         f"weights) with little loss per update.")
DEPARTURES = [
    "Staleness is exact and constant (every batch from the weights of N updates before), "
    "where an asynchronous run's staleness varies from batch to batch.",
    "A constant learning rate and no replay buffer; tens of updates of a 1M-parameter model.",
]
THREADS = 1  # torch threads: the tiny model's many small steps gain little from a second thread,
# and on a busy 2-core machine two threads mostly wait for each other (common.one_thread)
FLAGS = {"learned": {"tb": {"log_z": "learned"}}, "len": {"tb": {"loss_type": "token_mean"}},
         "std": {"tb": {"scale_rewards": "group"}}}


# The tuning sweep (preset ``tune``): each loss's learning rate, and TB's beta, on fresh data at
# the budget of experiment off_policy (60 updates), chosen by accuracy on all 1000 held-out
# problems after the last update; run on seeds 100 and 101, apart from every reporting seed.
TUNE_GRID = [f"tb_lr{lr}_beta{b}" for b in ("0.1", "0.03")
             for lr in ("6.25e-6", "1.25e-5", "2.5e-5", "5e-5", "1e-4")] + \
            [f"grpo_lr{lr}" for lr in ("1.25e-5", "2.5e-5", "5e-5", "1e-4")]


def settings(smoke: bool, tune: bool = False) -> dict:
    """``variants`` (names as in the module docstring); ``updates`` per run; an evaluation of
    ``eval_size`` problems every ``eval_every`` updates; the batch (``prompts`` x
    ``generations``). ``tune``: the sweep of :data:`TUNE_GRID` (SMOKE: two variants)."""
    if tune:
        if smoke:
            return {"variants": ["tb_lr5e-5", "grpo_lr5e-5"], "updates": 2, "eval_every": 2,
                    "eval_size": 8, "prompts": 8, "generations": 4}
        return {"variants": list(TUNE_GRID), "updates": 60, "eval_every": 30, "eval_size": 1000,
                "prompts": 16, "generations": 8}
    if smoke:
        return {"variants": ["tb", "tb_stale1", "tb_reuse2"], "updates": 2, "eval_every": 1,
                "eval_size": 8, "prompts": 8, "generations": 4}
    return {"variants": ["tb", "grpo", "tb_stale2", "tb_stale5", "tb_reuse2", "tb_lr1e-4"],
            "updates": 40, "eval_every": 5, "eval_size": 200, "prompts": 16, "generations": 8}


def parse_variant(name: str) -> tuple[dict, int, int]:
    """``(config overrides, stale, reuse)`` of a variant name.

    Raises:
        ExperimentError: a factor that is none of those of the module docstring."""
    algo, *factors = name.split("_")
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
    out = []
    for name in dict.fromkeys(s["variants"]):
        over = merge(parse_variant(name)[0], {"training": {
            "num_prompts_per_step": s["prompts"], "num_generations": s["generations"]}})
        from_dict(over)
        out.append((name, over))
    return out


def estimate_seconds(s: dict, n_seeds: int, smoke: bool) -> float:
    """About 1 s per update of B x K = 16 x 8 and 3 ms per problem evaluated, on 2 cores."""
    rows = s["prompts"] * s["generations"] / 128
    evals = (s["updates"] // s["eval_every"] + 1) * s["eval_size"] * 0.003
    return n_seeds * len(s["variants"]) * (s["updates"] * rows + evals + 3.0)


def run_variant(name: str, seed: int, updates: int, eval_every: int, eval_size: int,
                overrides: dict | None = None) -> dict:
    """One run of variant ``name`` (``overrides``: its config, default from the name).

    Returns:
        ``{"variant", "seed", "evals": [(update, accuracy), ...], "seconds"}``, the evaluation
        before training at update 0, plus the means over updates of the loss's
        ``behaviour_kl`` (nats per response) and, for clipped losses, ``clip_fraction``."""
    import collections
    import random

    import torch

    from tba_lab.algorithms import compute_loss, make_algorithm
    from tba_lab.config import from_dict
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.registry import BACKENDS
    from tba_lab.rollout import rollout
    from tba_lab.tasks import make_task

    default, stale, reuse = parse_variant(name)
    cfg = from_dict(merge(default if overrides is None else overrides, {"seed": seed}))
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
    optimizer = torch.optim.AdamW(  # a learned log Z trains at its own (constant) rate
        [{"params": list(policy.parameters())},
         *({**g, "lr": g["base_lr"]} for g in algorithm.parameters())],
        lr=tr.learning_rate, weight_decay=0.0)
    history = collections.deque(maxlen=stale + 1)  # weights of the last stale + 1 updates

    policy.eval()  # throughout, as the trainer: dropout would make the loss's log-probs noisy

    def accuracy() -> float:
        return evaluate(task, policy_backend, held_out, cfg.model.max_new_tokens)["accuracy"]

    evals, batch, t0 = [(0, accuracy())], None, time.time()
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
        if (step + 1) % eval_every == 0:
            evals.append((step + 1, accuracy()))
    return {"variant": name, "seed": seed, "evals": evals, "seconds": round(time.time() - t0, 1),
            **{k: sum(v) / len(v) for k, v in terms.items()}}


def run(variant: str, overrides: dict, run_dir: Path, seed: int, s: dict):
    """:func:`run_variant` on ``THREADS`` torch threads; writes ``eval.jsonl`` and
    ``summary.json`` to ``run_dir`` and returns ``(summary, eval rows)``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        r = run_variant(variant, seed, s["updates"], s["eval_every"], s["eval_size"], overrides)
    finally:
        torch.set_num_threads(before)
    evals = [{"step": n, "wall_seconds": None, "accuracy": a, "n": s["eval_size"]}
             for n, a in r["evals"]]
    summary = {"seed": seed, "trainer_steps": s["updates"], "wall_seconds": r["seconds"],
               "accuracy_before": evals[0]["accuracy"], "accuracy_after": evals[-1]["accuracy"],
               **{k: r[k] for k in ("behaviour_kl", "clip_fraction") if k in r}}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary, evals


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    _, stale, reuse = parse_variant(variant)
    return {"stale": stale, "reuse": reuse}


def analyse(runs: list[dict], s: dict) -> dict:
    """Per variant: accuracy at each evaluated update count and the mean over the evaluations
    after the first (a less noisy single number), each as a spread over seeds."""
    cells = []
    for name in dict.fromkeys(r["variant"] for r in runs):
        rs = [r for r in runs if r["variant"] == name]
        steps = [e["step"] for e in rs[0]["evals"]]
        at = [spread(r["evals"][i]["accuracy"] for r in rs) for i in range(len(steps))]
        later = spread(sum(e["accuracy"] for e in r["evals"][1:]) / max(1, len(r["evals"]) - 1)
                       for r in rs)
        cells.append({"variant": name, "stale": rs[0]["stale"], "reuse": rs[0]["reuse"],
                      "steps": steps, "accuracy_at": at, "mean_after_first": later})
    best = {}  # per loss: the variant with the highest mean accuracy after the last update
    for c in cells:
        algo, final = c["variant"].split("_")[0], c["accuracy_at"][-1]["mean"]
        if final is not None and (algo not in best or final > best[algo][1]):
            best[algo] = (c["variant"], final)
    return {"cells": cells, "eval_size": s["eval_size"], "updates": s["updates"],
            "best": {algo: v for algo, (v, _) in best.items()}}


def readings(a: dict) -> list[str]:
    """Each variant's mean accuracy after the first evaluation, against the on-policy run of
    its algorithm when there is one (named by the algorithm alone: ``tb``, ``grpo``)."""
    base = {c["variant"]: c for c in a["cells"]}
    out = []
    for c in a["cells"]:
        m = c["mean_after_first"]
        text = (f"`{c['variant']}`: accuracy {rng(m)} averaged over the evaluations after "
                f"update 0 ({a['eval_size']} problems)")
        ref = base.get(c["variant"].split("_")[0])
        if ref is not None and ref is not c and m["n"] and ref["mean_after_first"]["n"]:
            r = ref["mean_after_first"]
            sep = separated(m, r)
            text += (f", {points(m['mean'] - r['mean'])} points against `{ref['variant']}` "
                     + ("(one seed: no spread to judge it by)" if min(m["n"], r["n"]) < 2 else
                        "(within noise: the seed ranges overlap)" if sep == 0 else
                        "(separated: the seed ranges do not overlap)"))
        out.append(text + ".")
    for algo, name in a.get("best", {}).items():
        if sum(c["variant"].startswith(algo + "_") or c["variant"] == algo
               for c in a["cells"]) > 1:
            final = next(c for c in a["cells"] if c["variant"] == name)["accuracy_at"][-1]
            out.append(f"Best {algo.upper()} variant after {a['updates']} updates: `{name}` "
                       f"({rng(final)}).")
    return out


def table(a: dict) -> list[str]:
    cells = a["cells"]
    steps = cells[0]["steps"] if cells else []
    def f1(s):  # mean (min-max) in percent
        return "-" if not s["n"] else f"{100 * s['mean']:.1f} ({100 * s['min']:.1f}-{100 * s['max']:.1f})"

    span = f"@{steps[1]}..@{steps[-1]}" if len(steps) > 1 else "@-"
    lines = ["| variant | " + " | ".join(f"@{n}" for n in steps) + f" | mean of {span} |",
             "|" + "---|" * (len(steps) + 2)]
    for c in cells:
        lines.append(f"| {c['variant']} | " + " | ".join(f1(s) for s in c["accuracy_at"])
                     + f" | {f1(c['mean_after_first'])} |")
    return lines + ["", f"Greedy accuracy (%) on {a['eval_size']} held-out problems after N "
                        f"updates, mean over seeds (min-max)."]


def figures(a: dict, out: Path) -> list[tuple[str, str]]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, c in enumerate(a["cells"]):
        errorbar(ax, [n + 0.1 * i for n in c["steps"]], c["accuracy_at"], color=f"C{i}",
                 label=c["variant"], ms=3)
    ax.set(xlabel="trainer updates", ylabel="held-out greedy accuracy (%)",
           title=f"Accuracy per update ({a['eval_size']} problems; bars: lowest to highest seed)")
    ax.title.set_fontsize(10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out, "per_update.png", "Held-out accuracy after each evaluated update "
                       "count per variant, mean over seeds with bars from the lowest to the "
                       "highest seed.")
