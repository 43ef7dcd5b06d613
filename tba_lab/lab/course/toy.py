"""A toy "language model" for notebook 02: trajectory balance vs GRPO on stale data.

Why a toy: with a real language model the target distribution of TBA's Eq. 2,

    pi*(y|x) = pi_ref(y|x) exp(r(x, y) / beta) / Z(x),

is a distribution over all token sequences and cannot be written down, so "how far is the policy
from pi*" cannot be measured. Here every prompt x has only M candidate responses, the policy is
a softmax over M logits per prompt (the logits are the parameters), and pi* is computed exactly.
Everything else is the same as in the language-model kit: K samples per prompt in a prompt-major
batch (rows i*K .. i*K+K-1 belong to prompt i), the SAME loss functions of
:mod:`tba_lab.losses` (a response is a one-token "sequence", so its sequence log-prob is the log
of one softmax entry), raw rewards, reference log-probs and behaviour log-probs stored with each
sample, and an Adam optimizer.

Staleness is simulated exactly as an asynchronous searcher produces it: the batch of update t is
sampled from the policy of update t - L (``lag=L``), or from one fixed old policy
(``behaviour_logits``: an extremely stale searcher that never syncs).

Methods (``method`` argument):

* ``"tb"``: ``trajectory_balance_loss`` (Eq. 3-5, VarGrad log Z). No importance ratio.
* ``"grpo_kl"``: GRPO's clipped-ratio update (``grpo_loss``, ratio against the behaviour
  log-probs, clip eps) on the KL-regularised reward r - beta (log mu - log pi_ref) with a
  group-mean baseline (``group_advantages(..., scale_rewards="none")``; mu = behaviour policy).
  On fresh data its expected gradient is the policy gradient of E[r] - beta KL(pi || pi_ref),
  whose maximiser is the same pi* (Eq. 2), so it chases the same target as TB.
* ``"grpo"``: the kit's default GRPO (group-std advantages of the raw reward, no KL): it
  maximises reward alone, so its on-policy limit is the argmax, not pi*.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from tba_lab.losses import group_advantages, grpo_loss, trajectory_balance_loss

METHODS = ("tb", "grpo_kl", "grpo")


def target_distribution(ref_logprobs: torch.Tensor, rewards: torch.Tensor,
                        beta: float) -> torch.Tensor:
    """pi*(y|x) proportional to pi_ref(y|x) exp(r(x, y) / beta) (TBA Eq. 2), over the last dim.

    Computed in log space, softmax(log pi_ref + r / beta), so a small beta cannot overflow.

    Args:
        ref_logprobs: (..., M) log pi_ref of M candidate responses (normalised over M).
        rewards: (..., M) rewards of those candidates.
        beta: KL coefficient, > 0.

    Returns:
        (..., M) probabilities summing to 1 over the last dim.
    """
    return torch.softmax(ref_logprobs + rewards / beta, dim=-1)


@dataclass
class ToyProblem:
    """P prompts with M candidate responses each.

    Attributes:
        ref_logits: (P, M) logits of the reference policy pi_ref.
        rewards: (P, M) reward of each candidate (1 = correct answer, 0 = wrong).
        beta: KL coefficient.
    """
    ref_logits: torch.Tensor
    rewards: torch.Tensor
    beta: float

    @property
    def ref_logprobs(self) -> torch.Tensor:
        """(P, M) log pi_ref."""
        return torch.log_softmax(self.ref_logits, dim=-1)

    @property
    def target(self) -> torch.Tensor:
        """(P, M) the exact pi* of Eq. 2."""
        return target_distribution(self.ref_logprobs, self.rewards, self.beta)


def make_toy_problem(num_prompts: int = 4, num_candidates: int = 8, num_correct: int = 2,
                     beta: float = 0.5, ref_scale: float = 1.0, seed: int = 0) -> ToyProblem:
    """A seeded toy problem.

    Each prompt has ``num_correct`` candidates with reward 1 (the others 0), never pi_ref's most
    likely one, so the reference policy is mostly wrong (about a fifth of its mass on correct
    answers with the defaults) and RL has something to fix.

    Args:
        num_prompts: P.
        num_candidates: M.
        num_correct: candidates per prompt with reward 1 (1 <= num_correct < M).
        beta: KL coefficient of the target pi* (Eq. 2).
        ref_scale: std of the reference logits (larger = more peaked pi_ref).
        seed: seed of the problem.
    """
    if not 1 <= num_correct < num_candidates:
        raise ValueError(f"num_correct={num_correct}: need 1 <= num_correct < num_candidates")
    g = torch.Generator().manual_seed(seed)
    ref_logits = ref_scale * torch.randn(num_prompts, num_candidates, generator=g)
    rewards = torch.zeros(num_prompts, num_candidates)
    order = ref_logits.argsort(dim=1, descending=True)  # most likely first
    for i in range(num_prompts):
        others = order[i, 1:]                             # all but pi_ref's favourite
        pick = others[torch.randperm(len(others), generator=g)[:num_correct]]
        rewards[i, pick] = 1.0
    return ToyProblem(ref_logits, rewards, float(beta))


def expected_reward(probs: torch.Tensor, rewards: torch.Tensor) -> float:
    """Mean over prompts of E_{y ~ probs}[r(x, y)]; probs and rewards (P, M)."""
    return (probs * rewards).sum(-1).mean().item()


def tv_distance(p: torch.Tensor, q: torch.Tensor) -> float:
    """Mean over prompts of the total-variation distance 0.5 * sum_y |p - q| (0 = equal,
    1 = disjoint); p, q (P, M)."""
    return 0.5 * (p - q).abs().sum(-1).mean().item()


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> float:
    """Mean over prompts of KL(p || q) = sum_y p log(p / q), in nats; p, q (P, M), full support."""
    return (p * (p.clamp_min(1e-30).log() - q.clamp_min(1e-30).log())).sum(-1).mean().item()


def sample_batch(problem: ToyProblem, behaviour_logits: torch.Tensor, k: int,
                 generator: torch.Generator) -> dict:
    """What a searcher sends: K samples per prompt from the behaviour policy, prompt-major.

    Returns:
        dict of (P*K,) tensors: ``idx`` (candidate index), ``prompt`` (prompt index),
        ``behaviour_logps`` (log mu(y|x), the sampler's own log-prob), ``ref_logps``
        (log pi_ref(y|x)), ``rewards`` (raw r(x, y)).
    """
    mu = torch.softmax(behaviour_logits.detach(), dim=-1)                      # (P, M)
    idx = torch.multinomial(mu, k, replacement=True, generator=generator)      # (P, K)
    prompt = torch.arange(mu.shape[0]).repeat_interleave(k)                    # (P*K,)
    idx = idx.reshape(-1)                                                      # (P*K,)
    return {"idx": idx, "prompt": prompt,
            "behaviour_logps": torch.log(mu[prompt, idx]),
            "ref_logps": problem.ref_logprobs[prompt, idx],
            "rewards": problem.rewards[prompt, idx]}


def toy_loss(method: str, logits: torch.Tensor, batch: dict, problem: ToyProblem, k: int,
             clip_eps: float = 0.2):
    """Loss of one batch under the current logits, through the kit's own loss functions.

    Args:
        method: ``"tb"``, ``"grpo_kl"`` or ``"grpo"`` (see the module docstring).
        logits: (P, M) current policy logits (with grad).
        batch: from :func:`sample_batch`.
        problem: the toy problem (beta).
        k: K samples per prompt.
        clip_eps: PPO clip range of the GRPO methods.

    Returns:
        (loss, info) as the kit's losses return them.
    """
    logps = torch.log_softmax(logits, dim=-1)[batch["prompt"], batch["idx"]]   # (N,) log pi(y|x)
    if method == "tb":
        return trajectory_balance_loss(logps, batch["ref_logps"], batch["rewards"], problem.beta, k)
    if method == "grpo_kl":
        shaped = batch["rewards"] - problem.beta * (batch["behaviour_logps"] - batch["ref_logps"])
        adv = group_advantages(shaped, k, scale_rewards="none")
    elif method == "grpo":
        adv = group_advantages(batch["rewards"], k, scale_rewards="group")
    else:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    ones = torch.ones(len(logps), 1, dtype=torch.bool)              # one-token responses
    return grpo_loss(logps.unsqueeze(1), batch["behaviour_logps"].unsqueeze(1), None, adv, ones,
                     clip_eps=clip_eps, beta=0.0, loss_type="grpo")


def _one_thread(fn):
    """Run ``fn`` with one torch thread (restored after): the toy's tensors are tiny, and extra
    threads only spin, which is slow on a busy 2-core machine."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
    return wrapper


@_one_thread
def train_toy(problem: ToyProblem, method: str, lag: int = 0,
              behaviour_logits: torch.Tensor | None = None, steps: int = 300, k: int = 16,
              lr: float = 0.05, clip_eps: float = 0.2, seed: int = 0) -> dict:
    """Train the toy policy with ``method`` on (possibly stale) samples; return its history.

    The policy starts at the reference (logits = ``problem.ref_logits``), as post-training starts
    from the SFT model. At update t the batch is sampled from the policy of update
    max(0, t - ``lag``) (a searcher ``lag`` updates behind), or, when ``behaviour_logits`` is
    given, always from that fixed policy (a searcher that never syncs).

    Args:
        problem: the toy problem.
        method: ``"tb"``, ``"grpo_kl"`` or ``"grpo"``.
        lag: staleness L in updates, >= 0 (0 = on-policy).
        behaviour_logits: (P, M) a fixed behaviour policy, or None.
        steps: number of Adam updates.
        k: samples per prompt per update (K).
        lr: Adam learning rate on the logits.
        clip_eps: PPO clip range (GRPO methods).
        seed: seed of the sampling.

    Returns:
        dict of lists, one entry per update (after the update): ``tv`` (TV distance to pi*),
        ``kl`` (KL(pi* || pi)), ``reward`` (expected reward of the policy), ``clip_fraction``
        (GRPO methods: fraction of samples whose clipped term was active; NaN for TB); and
        ``final_probs`` ((P, M) tensor of the final policy).
    """
    if lag < 0:
        raise ValueError(f"lag={lag}: staleness must be >= 0")
    gen = torch.Generator().manual_seed(seed)
    logits = problem.ref_logits.clone().requires_grad_(True)
    opt = torch.optim.Adam([logits], lr=lr)
    past = deque([logits.detach().clone()], maxlen=lag + 1)  # past[0] = policy of update t - lag
    target = problem.target
    hist = {"tv": [], "kl": [], "reward": [], "clip_fraction": []}
    for _ in range(steps):
        mu_logits = behaviour_logits if behaviour_logits is not None else past[0]
        batch = sample_batch(problem, mu_logits, k, gen)
        loss, info = toy_loss(method, logits, batch, problem, k, clip_eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        past.append(logits.detach().clone())
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
        hist["tv"].append(tv_distance(probs, target))
        hist["kl"].append(kl_divergence(target, probs))
        hist["reward"].append(expected_reward(probs, problem.rewards))
        hist["clip_fraction"].append(info.get("clip_fraction", float("nan")))
    hist["final_probs"] = torch.softmax(logits.detach(), dim=-1)
    return hist


def lag_sweep(problem: ToyProblem, methods=("tb", "grpo_kl"), lags=(0, 2, 8, 32), seeds=(0, 1, 2),
              steps: int = 300, tail: float = 0.25, **kwargs) -> dict:
    """TV distance to pi* and expected reward at the end of training, for every (method, lag).

    "At the end" is the mean over the last ``tail`` fraction of the updates (a stale update can
    oscillate, so a single last value would depend on the phase of the oscillation), then the
    mean and std of that number across ``seeds``.

    Returns:
        {method: {"lags": [...], "tv_mean": [...], "tv_std": [...], "reward_mean": [...],
        "reward_std": [...]}}, one entry per lag.
    """
    import statistics

    n_tail = max(1, int(round(tail * steps)))
    out = {}
    for method in methods:
        row = {"lags": list(lags), "tv_mean": [], "tv_std": [], "reward_mean": [], "reward_std": []}
        for lag in lags:
            runs = [train_toy(problem, method, lag=lag, steps=steps, seed=s, **kwargs)
                    for s in seeds]
            tvs = [statistics.fmean(r["tv"][-n_tail:]) for r in runs]
            rews = [statistics.fmean(r["reward"][-n_tail:]) for r in runs]
            row["tv_mean"].append(statistics.fmean(tvs))
            row["tv_std"].append(statistics.pstdev(tvs))
            row["reward_mean"].append(statistics.fmean(rews))
            row["reward_std"].append(statistics.pstdev(rews))
        out[method] = row
    return out


__all__ = ["METHODS", "ToyProblem", "make_toy_problem", "target_distribution", "expected_reward",
           "tv_distance", "kl_divergence", "sample_batch", "toy_loss", "train_toy", "lag_sweep"]
