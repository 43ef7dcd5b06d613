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
sample, and an Adam optimizer (or plain SGD, for sweeps of the step size).

Staleness is simulated exactly as an asynchronous searcher produces it: the batch of update t is
sampled from the policy of update t - L (``lag=L``), or from one fixed old policy
(``behaviour_logits``: an extremely stale searcher that never syncs). Staleness in updates is not
staleness in distribution (a large step makes L updates a long way), so every update also records
the behaviour KL, KL(mu || pi_theta) in nats, estimated on its batch by the trainer's own
``tba_lab.losses.behaviour_kl``.

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

from tba_lab.losses import behaviour_kl, group_advantages, grpo_loss, trajectory_balance_loss

METHODS = ("tb", "grpo_kl", "grpo")
OPTIMIZERS = ("adam", "sgd")


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
            "behaviour_logps": torch.log_softmax(behaviour_logits.detach(), dim=-1)[prompt, idx],
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
              lr: float = 0.05, clip_eps: float = 0.2, seed: int = 0,
              optimizer: str = "adam") -> dict:
    """Train the toy policy with ``method`` on (possibly stale) samples; return its history.

    The policy starts at the reference (logits = ``problem.ref_logits``), as post-training starts
    from the SFT model. At update t the batch is sampled from the policy of update
    max(0, t - ``lag``) (a searcher ``lag`` updates behind), or, when ``behaviour_logits`` is
    given, always from that fixed policy (a searcher that never syncs).

    ``optimizer="adam"`` divides each step by a running gradient scale, so a logit moves by
    about ``lr`` per update whatever the loss's gradient; ``"sgd"`` (plain gradient descent)
    moves it by ``lr`` times the gradient, so the size of a step is the loss's own doing, which
    is what a learning-rate sweep of a loss's trust region needs.

    Args:
        problem: the toy problem.
        method: ``"tb"``, ``"grpo_kl"`` or ``"grpo"``.
        lag: staleness L in updates, >= 0 (0 = on-policy).
        behaviour_logits: (P, M) a fixed behaviour policy, or None.
        steps: number of Adam updates.
        k: samples per prompt per update (K).
        lr: learning rate on the logits (of Adam or of plain SGD, see ``optimizer``).
        clip_eps: PPO clip range (GRPO methods).
        seed: seed of the sampling.
        optimizer: ``"adam"`` or ``"sgd"``.

    Returns:
        dict of lists, one entry per update (after the update): ``tv`` (TV distance to pi*),
        ``kl`` (KL(pi* || pi)), ``reward`` (expected reward of the policy), ``clip_fraction``
        (GRPO methods: fraction of samples whose clipped term was active; NaN for TB),
        ``behaviour_kl`` (the staleness of that update's batch in nats, KL(mu || pi_theta)
        estimated as the batch mean of log mu(y|x) - log pi_theta(y|x) by
        ``tba_lab.losses.behaviour_kl``, with pi_theta the policy before the update; 0.0
        exactly at ``lag=0``); and ``final_probs`` ((P, M) tensor of the final policy).

    Raises:
        ValueError: ``lag`` < 0, or ``optimizer`` not one of ``OPTIMIZERS``.
    """
    if lag < 0:
        raise ValueError(f"lag={lag}: staleness must be >= 0")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r}: choose one of {OPTIMIZERS}")
    gen = torch.Generator().manual_seed(seed)
    logits = problem.ref_logits.clone().requires_grad_(True)
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)([logits], lr=lr)
    past = deque([logits.detach().clone()], maxlen=lag + 1)  # past[0] = policy of update t - lag
    target = problem.target
    hist = {"tv": [], "kl": [], "reward": [], "clip_fraction": [], "behaviour_kl": []}
    for _ in range(steps):
        mu_logits = behaviour_logits if behaviour_logits is not None else past[0]
        batch = sample_batch(problem, mu_logits, k, gen)
        loss, info = toy_loss(method, logits, batch, problem, k, clip_eps)
        logps = torch.log_softmax(logits.detach(), dim=-1)[batch["prompt"], batch["idx"]]  # (N,)
        ones = torch.ones(len(logps), 1, dtype=torch.bool)          # one-token responses
        hist["behaviour_kl"].append(
            behaviour_kl(logps.unsqueeze(1), batch["behaviour_logps"].unsqueeze(1), ones).item())
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


def toy_sweep(problem: ToyProblem, param: str, values, methods=("tb", "grpo_kl"), seeds=(0, 1, 2),
              steps: int = 300, tail: float = 0.25, **kwargs) -> dict:
    """End-of-training numbers of :func:`train_toy` for every (method, value of one argument).

    "At the end" is the mean over the last ``tail`` fraction of the updates (a stale update can
    oscillate, so a single last value would depend on the phase of the oscillation), then the
    mean and std of that number across ``seeds``. The staleness in nats, ``behaviour_kl``, is
    the mean over ALL updates of a run (the data the run learned from), then over seeds; so is
    ``clip_fraction`` (NaN for TB, which has no clip).

    Args:
        problem: the toy problem.
        param: the :func:`train_toy` argument swept (``"lag"``, ``"lr"``, ``"clip_eps"``, ...).
        values: its values.
        methods: the methods, each run at every value.
        seeds: sampling seeds; every number is a mean (and std) over them.
        steps: updates per run.
        tail: fraction of the last updates averaged, in (0, 1].
        kwargs: the other arguments of :func:`train_toy`, the same for every run.

    Returns:
        {method: {"values": [...], "tv_mean", "tv_std", "reward_mean", "reward_std",
        "behaviour_kl_mean", "behaviour_kl_std", "clip_fraction_mean", "clip_fraction_std":
        [...]}}: lists of floats, one entry per value; TV and clip fraction in [0, 1], behaviour
        KL in nats; NaN where a run's number is not finite.
    """
    import math
    import statistics

    n_tail = max(1, int(round(tail * steps)))
    out = {}
    for method in methods:
        row = {"values": list(values), "tv_mean": [], "tv_std": [], "reward_mean": [],
               "reward_std": [], "behaviour_kl_mean": [], "behaviour_kl_std": [],
               "clip_fraction_mean": [], "clip_fraction_std": []}
        for value in values:
            runs = [train_toy(problem, method, steps=steps, seed=s, **{param: value}, **kwargs)
                    for s in seeds]
            for key, last in (("tv", n_tail), ("reward", n_tail), ("behaviour_kl", steps),
                              ("clip_fraction", steps)):
                per_run = [statistics.fmean(r[key][-last:]) for r in runs]
                finite = all(math.isfinite(v) for v in per_run)  # pstdev cannot take NaN or inf
                row[f"{key}_mean"].append(statistics.fmean(per_run) if finite else math.nan)
                row[f"{key}_std"].append(statistics.pstdev(per_run) if finite else math.nan)
        out[method] = row
    return out


def lag_sweep(problem: ToyProblem, methods=("tb", "grpo_kl"), lags=(0, 2, 8, 32), seeds=(0, 1, 2),
              steps: int = 300, tail: float = 0.25, **kwargs) -> dict:
    """TV distance to pi* and expected reward at the end of training, for every (method, lag).

    :func:`toy_sweep` over ``lag``; each method's row also lists the lags under ``"lags"``.
    """
    out = toy_sweep(problem, "lag", lags, methods, seeds, steps, tail, **kwargs)
    for row in out.values():
        row["lags"] = row["values"]
    return out


def matched_lr(method: str, lr: float, beta: float) -> float:
    """The learning rate at which ``method`` takes TB's step of learning rate ``lr`` on fresh data.

    On the same samples TB's gradient is 2 / beta times REINFORCE's with a group-mean baseline
    on the KL-regularised reward (notebook 02, section 3), which is GRPO-KL's gradient on fresh
    data (ratio 1, nothing clipped); so under plain gradient descent GRPO-KL at lr * 2 / beta
    and TB at lr follow the same trajectory on fresh data, and only stale data, through the
    ratio and its clip, tell them apart. (Adam divides out a constant factor in the gradient,
    so under Adam the matching changes little.) ``"tb"`` and ``"grpo"`` keep ``lr``.

    Raises:
        ValueError: ``method`` not one of ``METHODS``.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    return lr * 2.0 / beta if method == "grpo_kl" else lr


def lr_sweep(problem: ToyProblem, lrs, lag: int, methods=("tb", "grpo_kl"), seeds=(0, 1, 2),
             steps: int = 300, tail: float = 0.25, optimizer: str = "sgd", **kwargs) -> dict:
    """End-of-training numbers against the learning rate, at a fixed staleness of ``lag`` updates.

    Each method runs at its :func:`matched_lr` (GRPO-KL at lr * 2 / beta), so on fresh data
    (``lag=0``) TB and GRPO-KL give the same numbers and any difference at ``lag > 0`` is the
    ratio and its clip. Plain gradient descent by default (see :func:`train_toy`).

    Args:
        problem: the toy problem.
        lrs: TB's learning rates (positive floats).
        lag: staleness L in updates, >= 0.
        methods, seeds, steps, tail, kwargs: as in :func:`toy_sweep`.
        optimizer: ``"sgd"`` or ``"adam"``.

    Returns:
        as :func:`toy_sweep`, each row with ``"lrs"`` (the TB-equivalent learning rates, as
        given) and ``"lr_used"`` (the ones the method ran with).
    """
    out = {}
    for method in methods:
        used = [matched_lr(method, lr, problem.beta) for lr in lrs]
        row = toy_sweep(problem, "lr", used, (method,), seeds, steps, tail, lag=lag,
                        optimizer=optimizer, **kwargs)[method]
        row["lrs"], row["lr_used"] = list(lrs), used
        out[method] = row
    return out


__all__ = ["METHODS", "OPTIMIZERS", "ToyProblem", "make_toy_problem", "target_distribution",
           "expected_reward", "tv_distance", "kl_divergence", "sample_batch",
           "toy_loss", "train_toy", "toy_sweep", "lag_sweep", "matched_lr", "lr_sweep"]
