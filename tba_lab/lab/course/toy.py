"""A toy "language model" for notebook 02: trajectory balance vs GRPO on stale data.

Every prompt has M candidate responses and the policy is a softmax over M logits per prompt
(the parameters), so the target of TBA's Eq. 2, pi* = pi_ref exp(r / beta) / Z, is exact. The
rest is the kit's: K samples per prompt, prompt-major, the losses of :mod:`tba_lab.losses` (a
response is a one-token "sequence"), stored reference and behaviour log-probs, Adam or SGD.
Staleness is simulated: update t samples from the policy of update t - L (``lag=L``) or from
one fixed old policy, and records its batch's behaviour KL(mu || pi_theta) in nats.

Methods: ``"tb"`` (Eq. 3-5, VarGrad log Z, no importance ratio); ``"grpo_kl"``, GRPO's clipped
ratio on the KL-regularised reward r - beta (log mu - log pi_ref) with a group-mean baseline
(on-policy maximiser pi* too); ``"grpo"``, the kit's default GRPO (limit: the argmax).
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

import torch

from tba_lab.lab.experiments.common import one_thread
from tba_lab.losses import behaviour_kl, group_advantages, grpo_loss, trajectory_balance_loss

METHODS = ("tb", "grpo_kl", "grpo")
OPTIMIZERS = ("adam", "sgd")


def target_distribution(ref_logprobs: torch.Tensor, rewards: torch.Tensor,
                        beta: float) -> torch.Tensor:
    """(..., M) pi* proportional to pi_ref exp(r / beta) (TBA Eq. 2) over the last dim, as
    softmax(log pi_ref + r / beta) so that a small beta cannot overflow."""
    return torch.softmax(ref_logprobs + rewards / beta, dim=-1)


@dataclass
class ToyProblem:
    """P prompts with M candidates: ``ref_logits`` (P, M) of pi_ref, ``rewards`` (P, M) in
    {0, 1}, KL coefficient ``beta``."""
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
    """A seeded toy problem: P = ``num_prompts``, M = ``num_candidates``, ``num_correct``
    candidates per prompt with reward 1, never pi_ref's favourite (so RL has something to fix);
    ``ref_scale``: the std of the reference logits. ValueError unless 1 <= num_correct < M."""
    if not 1 <= num_correct < num_candidates:
        raise ValueError(f"num_correct={num_correct}: need 1 <= num_correct < num_candidates")
    g = torch.Generator().manual_seed(seed)
    ref_logits = ref_scale * torch.randn(num_prompts, num_candidates, generator=g)
    rewards = torch.zeros(num_prompts, num_candidates)
    order = ref_logits.argsort(dim=1, descending=True)    # most likely first
    for i in range(num_prompts):
        others = order[i, 1:]                             # all but pi_ref's favourite
        rewards[i, others[torch.randperm(len(others), generator=g)[:num_correct]]] = 1.0
    return ToyProblem(ref_logits, rewards, float(beta))


def expected_reward(probs: torch.Tensor, rewards: torch.Tensor) -> float:
    """Mean over prompts of E_{y ~ probs}[r(x, y)]; probs and rewards (P, M)."""
    return (probs * rewards).sum(-1).mean().item()


def tv_distance(p: torch.Tensor, q: torch.Tensor) -> float:
    """Mean over prompts of 0.5 * sum_y |p - q| (0 = equal, 1 = disjoint); p, q (P, M)."""
    return 0.5 * (p - q).abs().sum(-1).mean().item()


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> float:
    """Mean over prompts of KL(p || q) in nats; p, q (P, M), full support."""
    return (p * (p.clamp_min(1e-30).log() - q.clamp_min(1e-30).log())).sum(-1).mean().item()


def sequence_behaviour_kl(logps: torch.Tensor, behaviour_logps: torch.Tensor) -> float:
    """Staleness of a batch in nats, KL(mu || pi_theta) estimated on samples from mu: the
    trainer's ``tba_lab.losses.behaviour_kl`` on (N,) sequence log-probs (one-token responses)."""
    ones = torch.ones(len(logps), 1, dtype=torch.bool)
    return behaviour_kl(logps.unsqueeze(1), behaviour_logps.unsqueeze(1), ones).item()


def sample_batch(problem: ToyProblem, behaviour_logits: torch.Tensor, k: int,
                 generator: torch.Generator) -> dict:
    """What a searcher sends, K samples per prompt from softmax(``behaviour_logits``): (P*K,)
    tensors, prompt-major, ``idx`` (candidate), ``prompt``, ``behaviour_logps``, ``ref_logps``
    and ``rewards``."""
    mu = torch.softmax(behaviour_logits.detach(), dim=-1)                      # (P, M)
    idx = torch.multinomial(mu, k, replacement=True, generator=generator).reshape(-1)
    prompt = torch.arange(mu.shape[0]).repeat_interleave(k)                    # (P*K,)
    mu_logps = torch.log_softmax(behaviour_logits.detach(), dim=-1)
    return {"idx": idx, "prompt": prompt, "behaviour_logps": mu_logps[prompt, idx],
            "ref_logps": problem.ref_logprobs[prompt, idx], "rewards": problem.rewards[prompt, idx]}


def toy_loss(method: str, logits: torch.Tensor, batch: dict, problem: ToyProblem, k: int,
             clip_eps: float = 0.2):
    """(loss, info) of one :func:`sample_batch` under the current (P, M) ``logits``, from the
    kit's loss functions; ``method`` one of ``METHODS`` (else ValueError), ``clip_eps`` GRPO's."""
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


@one_thread()  # the toy's tensors are tiny: extra threads only spin
def train_toy(problem: ToyProblem, method: str, lag: int = 0,
              behaviour_logits: torch.Tensor | None = None, steps: int = 300, k: int = 16,
              lr: float = 0.05, clip_eps: float = 0.2, seed: int = 0,
              optimizer: str = "adam") -> dict:
    """Train the toy policy from pi_ref with ``method`` on (possibly stale) samples: update t
    samples from the policy of update max(0, t - ``lag``), or from ``behaviour_logits`` (P, M)
    when given. ``optimizer="adam"`` moves a logit by about ``lr`` per update whatever the
    gradient, ``"sgd"`` by ``lr`` times the gradient. ``k`` samples per prompt, ``seed``.

    Returns lists, one entry per update: ``tv`` (to pi*), ``kl`` (KL(pi* || pi)), ``reward``,
    ``clip_fraction`` (NaN for TB), ``behaviour_kl`` (nats; 0.0 at ``lag=0``); and
    ``final_probs`` (P, M). ValueError: ``lag`` < 0, or ``optimizer`` not in ``OPTIMIZERS``.
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
        batch = sample_batch(problem, past[0] if behaviour_logits is None else behaviour_logits,
                             k, gen)
        loss, info = toy_loss(method, logits, batch, problem, k, clip_eps)
        logps = torch.log_softmax(logits.detach(), dim=-1)[batch["prompt"], batch["idx"]]
        hist["behaviour_kl"].append(sequence_behaviour_kl(logps, batch["behaviour_logps"]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        past.append(logits.detach().clone())
        probs = torch.softmax(logits.detach(), dim=-1)
        hist["tv"].append(tv_distance(probs, target))
        hist["kl"].append(kl_divergence(target, probs))
        hist["reward"].append(expected_reward(probs, problem.rewards))
        hist["clip_fraction"].append(info.get("clip_fraction", float("nan")))
    hist["final_probs"] = torch.softmax(logits.detach(), dim=-1)
    return hist


def toy_sweep(problem: ToyProblem, param: str, values, methods=("tb", "grpo_kl"), seeds=(0, 1, 2),
              steps: int = 300, **kwargs) -> dict:
    """End-of-training numbers of :func:`train_toy` (``kwargs``: its other arguments) for every
    (method, value of ``param``): TV and reward averaged over the last quarter of the updates (a
    stale run can oscillate), behaviour KL and clip fraction over all; then mean and std over
    ``seeds``. Returns {method: {"values", "tv_mean", "tv_std", "reward_mean", ...,
    "clip_fraction_std"}}, lists by value; NaN where a run's number is not finite."""
    n_tail = max(1, round(steps / 4))
    out = {}
    for method in methods:
        row = {"values": list(values)}
        for value in values:
            runs = [train_toy(problem, method, steps=steps, seed=s, **{param: value}, **kwargs)
                    for s in seeds]
            for key, last in (("tv", n_tail), ("reward", n_tail), ("behaviour_kl", steps),
                              ("clip_fraction", steps)):
                per_run = [statistics.fmean(r[key][-last:]) for r in runs]
                finite = all(math.isfinite(v) for v in per_run)  # pstdev cannot take NaN or inf
                row.setdefault(f"{key}_mean", []).append(
                    statistics.fmean(per_run) if finite else math.nan)
                row.setdefault(f"{key}_std", []).append(
                    statistics.pstdev(per_run) if finite else math.nan)
        out[method] = row
    return out


def matched_lr(method: str, lr: float, beta: float) -> float:
    """The learning rate at which ``method`` takes TB's step of learning rate ``lr`` on fresh
    data: ``lr * 2 / beta`` for ``"grpo_kl"`` (TB's gradient is 2 / beta times REINFORCE's on
    the KL-regularised reward, notebook 02, section 3), ``lr`` otherwise (ValueError: unknown)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: choose one of {METHODS}")
    return lr * 2.0 / beta if method == "grpo_kl" else lr


def lr_sweep(problem: ToyProblem, lrs, lag: int, methods=("tb", "grpo_kl"), seeds=(0, 1, 2),
             steps: int = 300, optimizer: str = "sgd", **kwargs) -> dict:
    """:func:`toy_sweep` over TB's learning rates ``lrs`` at staleness ``lag``, each method at
    its :func:`matched_lr`, so that on fresh data TB and GRPO-KL agree and any difference at
    ``lag > 0`` is the ratio and its clip. Each row adds ``"lrs"`` (as given) and
    ``"lr_used"`` (what the method ran with)."""
    out = {}
    for method in methods:
        used = [matched_lr(method, lr, problem.beta) for lr in lrs]
        row = toy_sweep(problem, "lr", used, (method,), seeds, steps, lag=lag,
                        optimizer=optimizer, **kwargs)[method]
        row["lrs"], row["lr_used"] = list(lrs), used
        out[method] = row
    return out
