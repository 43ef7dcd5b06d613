"""Experiment ``buffer``: replay-buffer sampling, recency m and reward prioritisation inv_temp.

Sampling the buffer by recency (probability m of drawing prompts refreshed since the last
sync) and by reward (softmax of inv_temp * r) gives further gains and more diverse solutions
(TBA, Sec. 3-4). Here: async TB, one searcher, a grid of m at inv_temp 0 and inv_temp 1 at
m = 0.8, equal updates; after training, greedy accuracy and the distinct correct responses
among K samples per held-out prompt (:func:`measure`; the trainer does not log it). Claims,
paired by seed, predicted positive, smallest effect 3 points: accuracy at the largest m minus
at m = 0, and at inv_temp 1 minus 0 at each m run with both. The paper's gains come "as data
generation is scaled": each claim's premise is that the searchers generated at least twice the
rollouts the trainer trained on, so that the sampler had a choice to make.
"""
from __future__ import annotations

from pathlib import Path

from tba_lab.config import merge
from tba_lab.lab.experiments.common import (BATCH, FULL_UPDATES, GAIN_DELTA, PAPER, core_overrides,
                                            fixed, load_run_policy, one_thread, paired, paper_claim,
                                            pct, premise, sized)

NAME = "buffer"
TITLE = "Replay-buffer sampling: recency m and reward prioritisation inv_temp"
CLAIM = (f"{PAPER}, abstract and Sec. 3-4: recency- and reward-prioritising buffer sampling "
         f"(m, reward softmax) enable further gains and more diverse solutions.")
DEPARTURES = [
    "One CPU searcher, so the buffer holds little beyond the newest batches; the paper's gains "
    "from sampling appear when many searchers fill a large buffer.",
    "Reward prioritisation acts only on prompts holding more than K rollouts (`share_over_k`): "
    "a reward-mode slot draws K of one prompt's items without replacement.",
    "Diversity is counted on the embedded task: distinct token sequences among the correct "
    "samples of one prompt (the paper reports diversity on its red-teaming task).",
]
PAPER_SAMPLING = ("abstract and Sec. 3-4: reward- and recency-prioritising buffer sampling enable "
                  "further gains as data generation is scaled; many searchers, GSM8K and MATH")


def settings(smoke: bool) -> dict:
    """m grid, the m values also run at inv_temp 1, run length, the diversity sample."""
    return sized(smoke, recency=([0.0, 0.8], [0.0, 0.5, 0.8, 0.95]), inv_temp_at=[0.8],
                 max_steps=(4, FULL_UPDATES), eval_size=(50, 200), max_minutes=(3.0, 10.0),
                 diversity_prompts=(8, 50), diversity_k=(4, 8), **BATCH)


def _label(m: float, inv_temp: float) -> str:
    return f"m{m:g}_inv{inv_temp:g}"


def variants(s: dict) -> list[tuple[str, dict]]:
    grid = [(m, 0.0) for m in s["recency"]] + [(m, 1.0) for m in s["inv_temp_at"]]
    return [(_label(m, it), merge(core_overrides(s), {
        "algo": "tb", "async": {"mode": "async", "num_searchers": 1},
        "buffer": {"recency_prob": float(m), "inv_temp": float(it)}})) for m, it in grid]


def metrics(s: dict) -> dict:
    return {"accuracy_after": ("held-out accuracy after training", pct),
            "div_distinct_correct": (f"distinct correct of K = {s['diversity_k']} samples",
                                     fixed(2)),
            "div_pass_at_k": ("pass@K", pct),
            "share_over_k": ("share of stored prompts holding more than K rollouts", pct),
            "staleness_mean": ("staleness (updates)", fixed(1))}


def measure(run_dir: Path, summary: dict, s: dict, variant: str, runs: list) -> dict:
    """The buffer's settings and the diversity of the final policy's samples."""
    import torch

    from tba_lab.eval import sample_diversity

    cfg, _, _, backend, task, held_out = load_run_policy(run_dir)
    torch.manual_seed(int(summary["seed"]))
    with one_thread():
        div = sample_diversity(task, backend, held_out[:s["diversity_prompts"]],
                               s["diversity_k"], cfg.model.max_new_tokens, cfg.model.temperature)
    return {"recency_prob": cfg.buffer.recency_prob, "inv_temp": cfg.buffer.inv_temp,
            "share_over_k": share_over_k(run_dir / "buffer.pt", cfg.training.num_generations),
            **{f"div_{k}": v for k, v in div.items()}}


def share_over_k(buffer_path: Path, k: int) -> float | None:
    """Share of the prompts in a run's final ``buffer.pt`` holding more than ``k`` rollouts
    (where reward prioritisation can act); None without the file."""
    from tba_lab.buffer import ReplayBuffer

    if not buffer_path.exists():
        return None
    buffer = ReplayBuffer.load(buffer_path)
    ids = buffer.prompt_ids()
    return sum(len(buffer.items(i)) > k for i in ids) / max(1, len(ids))


def generation_ratio(row: dict) -> float | None:
    """Rollouts generated over rollouts trained on in one run, as its summary counted them
    (``samples_generated`` / ``samples_trained``); a row recorded before the summary had them:
    rate x seconds over updates x B x K. None if the run made no update or recorded no rate."""
    if row.get("samples_trained") and row.get("samples_generated"):
        return row["samples_generated"] / row["samples_trained"]
    batch = (row.get("overrides") or {}).get("training") or {}
    trained = row.get("trainer_steps", 0) * batch.get("num_prompts_per_step", 0) \
        * batch.get("num_generations", 0)
    made = (row.get("samples_per_minute") or 0) * row.get("wall_seconds", 0) / 60
    return made / trained if trained and made else None


def surplus(runs: list[dict]) -> dict:
    """Premise of both claims: the mean :func:`generation_ratio` over the runs is at least 2."""
    ratios = [x for x in map(generation_ratio, runs) if x is not None]
    mean = sum(ratios) / len(ratios) if ratios else None
    return premise("the searchers generate at least twice the rollouts the trainer trains on "
                   "(the paper's regime of scaled generation, where the sampler has a choice)",
                   mean is not None and mean >= 2.0,
                   "generated / trained " + ("unrecorded" if mean is None else f"{mean:.2f}"),
                   "searchers on hardware of their own that outpace the trainer (a GPU machine, "
                   "or several cores per searcher)")


def claims(runs: list[dict], s: dict) -> list[dict]:
    """The claims of the module docstring (no recency claim with one m)."""
    ms = sorted(s["recency"])
    out, scaled = [], surplus(runs)
    if len(ms) > 1:
        out.append(paper_claim(
            "buffer.recency", f"Recency-prioritised sampling (m = {ms[-1]:g}) raises held-out "
            f"accuracy over uniform sampling (m = {ms[0]:g})", PAPER_SAMPLING,
            f"mean over seeds of the accuracy at m = {ms[-1]:g} minus at m = {ms[0]:g}, inv_temp "
            f"0, same seed, equal updates",
            paired(runs, _label(ms[-1], 0), _label(ms[0], 0), "accuracy_after"), +1, GAIN_DELTA,
            "points", scale=100.0, premise=scaled))
    for m in [m for m in s["inv_temp_at"] if m in ms]:
        out.append(paper_claim(
            f"buffer.reward_m{m:g}", f"Reward-prioritised sampling (inv_temp 1) raises held-out "
            f"accuracy over inv_temp 0 at m = {m:g}", PAPER_SAMPLING, f"mean over seeds of the "
            f"accuracy at inv_temp 1 minus at inv_temp 0, m = {m:g}, same seed, equal updates",
            paired(runs, _label(m, 1), _label(m, 0), "accuracy_after"), +1, GAIN_DELTA, "points",
            scale=100.0, premise=scaled))
    return out
