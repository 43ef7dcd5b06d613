"""Losses for RL post-training of language models: trajectory balance (TBA) and its baselines.

What is here (pure tensor functions, no model calls, all differentiable where they should be):

* Log-prob utilities shared by every loss: ``token_logprobs`` (temperature-scaled, like the
  sampler), ``masked_sum``, ``masked_mean``, ``sequence_logprobs``; and ``behaviour_kl``, how
  off-policy a batch is in nats per response (an estimate of KL(mu || pi_theta), logged for
  every loss by :func:`tba_lab.algorithms.compute_loss`).
* Trajectory balance for off-policy post-training, following Bartoldson et al., "Trajectory
  Balance with Asynchrony" (TBA, arXiv 2503.18929), Sec. 3:
    - target distribution          pi*(y|x) ~ pi_ref(y|x) exp(r(x, y) / beta)        (Eq. 2)
    - trajectory balance residual  log Z(x) + log pi(y|x) - log pi_ref(y|x) - r/beta (Eq. 3)
    - VarGrad log-partition         log Z_hat(x_i) = mean_j [r_ij/beta - log pi + log pi_ref]
                                                                                     (Eq. 4)
    - batch loss                    mean over B*K rows of sg[log Z_hat] + ... squared (Eq. 5)
  implemented as ``vargrad_log_z`` and ``trajectory_balance_loss``; ``beta_schedule`` gives the
  linear KL-coefficient anneal used in the paper's experiments.
* The GRPO family (Shao et al. 2024, arXiv 2402.03300; Dr. GRPO, Liu et al. 2025,
  arXiv 2503.20783): ``group_advantages``, ``kl_penalty`` (Schulman's k1 / k3 estimators),
  ``grpo_loss`` with PPO clipping and the "grpo" / "bnpo" / "dr_grpo" aggregations; its KL
  term is k3 in the loss or k1 in the reward (never k1 in the loss: its gradient is zero in
  expectation, Shah et al., "A Comedy of Estimators", arXiv 2512.21852).
* RLOO (Ahmadian et al. 2024, arXiv 2402.14740; TBA paper's RLOO baseline, KL folded into the
  reward as in its Eq. 6): ``rloo_advantages`` and ``rloo_loss``.
* Online DPO (Guo et al. 2024, arXiv 2402.04792): ``dpo_pairs`` (best / worst response of each
  group) and ``online_dpo_loss``.

Layout convention (every function taking ``group_size``): B prompts with K = ``group_size``
responses each, N = B * K rows, PROMPT-MAJOR (rows i*K .. i*K+K-1 belong to prompt i). A
response-major batch silently mixes prompts and cannot be detected from the tensors.

Choices and departures:

* log pi(y|x) is the SUM of masked token log-probs, never length-normalised (Eq. 3).
* log Z_hat is the per-prompt VarGrad estimate from the batch's K rows under the current policy,
  detached (the mean-reduced gradient is the same either way, since residuals sum to zero within
  a group; the detach keeps per-row gradients local). ``trajectory_balance_loss(..., log_z=...)``
  takes a learned log Z instead; the trainer's learned option is ONE scalar for all prompts, a
  departure from the paper (log Z depends on x).
* TB uses raw rewards divided by the current beta: no importance ratio, clipping or whitening.
* GRPO's ``behaviour_token_logps`` are the behaviour policy's log-probs, supplied as data. Never
  pass ``token_logps.detach()`` off-policy: the ratio would always be 1 and never clip.
* Everything is computed in the caller's dtype except ``token_logprobs`` (float32).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "token_logprobs",
    "masked_sum",
    "masked_mean",
    "sequence_logprobs",
    "behaviour_kl",
    "vargrad_log_z",
    "trajectory_balance_loss",
    "group_advantages",
    "kl_penalty",
    "grpo_loss",
    "rloo_advantages",
    "rloo_loss",
    "dpo_pairs",
    "online_dpo_loss",
    "beta_schedule",
]

TB_REDUCTIONS = ("mean", "sum", "none")
TB_LOSS_TYPES = ("sum", "token_mean")
SCALE_REWARDS = ("group", "batch", "none")
KL_ESTIMATORS = ("k1", "k3")
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo")


# ----------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------

def _check_group_layout(n: int, group_size: int) -> int:
    """Return B = n // group_size, or raise ValueError naming `group_size`."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive int (K responses per prompt), got {group_size!r}")
    if n % group_size != 0:
        raise ValueError(
            f"batch of {n} rows is not a whole number of groups of group_size={group_size} "
            f"(training.num_generations; {n} % {group_size} = {n % group_size}); rows must be "
            "prompt-major (rows i*K..i*K+K-1 belong to prompt i) with N = B * K"
        )
    return n // group_size


def _grouped_rewards(rewards, group_size: int) -> tuple[torch.Tensor, int]:
    """``rewards`` as a 1-D float tensor (float32 if integer/bool) and B = N // group_size;
    ValueError if not 1-D or not a whole number of prompt-major groups."""
    rewards = torch.as_tensor(rewards)
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    return rewards, _check_group_layout(rewards.shape[0], group_size)


def _check_beta(beta) -> float:
    beta = float(beta)
    if not beta > 0 or not math.isfinite(beta):  # also rejects NaN
        raise ValueError(f"beta (KL coefficient) must be a finite number > 0, got {beta!r}")
    return beta


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"shape mismatch: {shapes}; these tensors must have the same shape")


# ----------------------------------------------------------------------------------------------
# Log-prob utilities
# ----------------------------------------------------------------------------------------------

def token_logprobs(logits: torch.Tensor, target_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each target token under softmax(logits / temperature).

    Args:
        logits: (N, T, V) float, the model logits already aligned with the targets (i.e. the
            logits at position t predict ``target_ids[:, t]``; shift before calling).
        target_ids: (N, T) long token ids.
        temperature: sampling temperature, > 0. Use the SAME value the sampler used (docs/design.md
            sec. 1) for both policy and reference, otherwise the log-probs describe a different
            distribution from the one the data came from.

    Returns:
        (N, T) float32 log-probs. Padding positions are computed too; mask them downstream.

    Raises:
        ValueError: temperature <= 0, logits not 3-D, or target_ids shape != logits.shape[:2].

    Computed as logit[target] - logsumexp(logits) in float32 (one (N, T, V) float32 copy of
    the logits; chunk over N outside this function if that does not fit in memory).
    """
    temperature = float(temperature)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if logits.dim() != 3:
        raise ValueError(f"logits must be (N, T, V), got shape {tuple(logits.shape)}")
    if tuple(target_ids.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"target_ids shape {tuple(target_ids.shape)} must equal logits.shape[:2] = {tuple(logits.shape[:2])}"
        )
    scaled = logits.float() / temperature                                   # (N, T, V)
    picked = scaled.gather(-1, target_ids.long().unsqueeze(-1)).squeeze(-1)  # (N, T)
    return picked - torch.logsumexp(scaled, dim=-1)                        # (N, T)


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``values * mask`` over the last dim.

    Args:
        values: (N, T) float.
        mask: (N, T) bool or float (float entries act as weights).

    Returns:
        (N,) in the dtype of ``values``. Masked-out entries contribute exactly 0 even when they
        hold inf/NaN (e.g. log-probs of padding), because they are selected away, not multiplied.

    Raises:
        ValueError: shapes differ.
    """
    _check_same_shape(values=values, mask=mask)
    m = mask.to(values.dtype)
    return torch.where(m != 0, values * m, torch.zeros_like(values)).sum(dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is set.

    Args:
        values: float tensor, any shape.
        mask: bool or float tensor of the same shape (float entries act as weights).
        dim: None to average over all masked entries (returns a 0-dim tensor), or a dim / tuple
            of dims to reduce.

    Returns:
        sum(values * mask) / sum(mask) over ``dim``; 0 where the mask is empty (no NaN).

    Raises:
        ValueError: shapes differ.
    """
    _check_same_shape(values=values, mask=mask)
    m = mask.to(values.dtype)
    num = torch.where(m != 0, values * m, torch.zeros_like(values))
    if dim is None:
        num, den = num.sum(), m.sum()
    else:
        num, den = num.sum(dim=dim), m.sum(dim=dim)
    return num / torch.where(den != 0, den, torch.ones_like(den))  # num is 0 where den is 0


def sequence_logprobs(token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(y|x) = sum of masked token log-probs (TBA Eq. 3; no length normalisation).

    Args:
        token_logps: (N, T) float token log-probs (from ``token_logprobs``).
        mask: (N, T) bool/float response mask (1 on response tokens including the final EOS,
            0 on prompt and padding). Use the same mask for policy and reference.

    Returns:
        (N,) sequence log-probs.

    Raises:
        ValueError: shapes differ.
    """
    return masked_sum(token_logps, mask)


def behaviour_kl(token_logps: torch.Tensor, behaviour_token_logps: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
    """Off-policyness of a batch in nats: a Monte Carlo estimate of KL(mu || pi_theta).

        behaviour_kl = 1/N sum_i [ log mu(y_i|x_i) - log pi_theta(y_i|x_i) ],   y_i ~ mu(.|x_i)

    mu is the behaviour policy that sampled row i (a searcher's weights, ``version`` updates
    old), pi_theta the policy being trained; each log-prob is the sum over the response's
    masked tokens (:func:`sequence_logprobs`), so the unit is **nats per response**. Rows are
    drawn from mu, so the mean is the unbiased single-sample ("k1") estimator of
    KL(mu || pi_theta) (Schulman, "Approximating KL Divergence", 2020): the behaviour-policy
    KL that PPO implementations log as ``approx_kl`` (OpenAI Spinning Up's PPO: the mean of
    logp_old - logp), summed here over a response's tokens. One row may be negative; the mean
    is >= 0 in expectation, and 0 on-policy (mu = pi_theta, sync mode). With a replay buffer
    each row has its own mu (its version), so this is the mean over rows of each row's KL.

    Args:
        token_logps: (N, T) float current-policy token log-probs (a grad, if any, is not used).
        behaviour_token_logps: (N, T) float behaviour-policy token log-probs (data).
        mask: (N, T) bool/float response mask, the same for both.

    Returns:
        0-dim tensor, dtype of ``token_logps``, detached: nats per response.

    Raises:
        ValueError: shapes differ.
    """
    _check_same_shape(token_logps=token_logps, behaviour_token_logps=behaviour_token_logps,
                      mask=mask)
    with torch.no_grad():
        log_mu = sequence_logprobs(behaviour_token_logps.to(token_logps.dtype), mask)  # (N,)
        return (log_mu - sequence_logprobs(token_logps.detach(), mask)).mean()


# ----------------------------------------------------------------------------------------------
# Trajectory balance (TBA)
# ----------------------------------------------------------------------------------------------

def vargrad_log_z(logps: torch.Tensor, ref_logps: torch.Tensor, rewards: torch.Tensor,
                  beta: float, group_size: int) -> torch.Tensor:
    """VarGrad estimate of the log-partition per prompt (TBA Eq. 4), detached.

        log Z_hat(x_i) = mean_j [ r_ij / beta - log pi(y_ij|x_i) + log pi_ref(y_ij|x_i) ]

    Args:
        logps: (N,) float sequence log-probs under the CURRENT policy.
        ref_logps: (N,) float sequence log-probs under the reference policy.
        rewards: (N,) raw rewards (cast to ``logps.dtype``).
        beta: KL coefficient, > 0 (the current, possibly annealed, value).
        group_size: K responses per prompt; N = B * K, prompt-major rows.

    Returns:
        (B,) log Z_hat, detached (no grad flows through it).

    Raises:
        ValueError: group_size < 1 or N % group_size != 0 (message names `group_size`);
            beta <= 0; inputs not 1-D of equal shape.
    """
    beta = _check_beta(beta)
    rewards = torch.as_tensor(rewards, device=logps.device).to(logps.dtype)
    _check_same_shape(logps=logps, ref_logps=ref_logps, rewards=rewards)
    if logps.dim() != 1:
        raise ValueError(f"logps must be 1-D (N,) sequence log-probs, got shape {tuple(logps.shape)}")
    b = _check_group_layout(logps.shape[0], group_size)
    with torch.no_grad():
        terms = rewards / beta - logps + ref_logps       # (N,)
        return terms.view(b, group_size).mean(dim=1)    # (B,)


def trajectory_balance_loss(logps: torch.Tensor, ref_logps: torch.Tensor, rewards: torch.Tensor,
                            beta: float, group_size: int, reduction: str = "mean",
                            log_z: torch.Tensor | None = None,
                            lengths: torch.Tensor | None = None):
    """Trajectory balance loss with the VarGrad log Z (TBA Eqs. 3-5).

        residual_ij = sg[log Z_hat(x_i)] + log pi(y_ij|x_i) - log pi_ref(y_ij|x_i) - r_ij / beta
        loss        = reduction over rows of residual_ij ** 2            (lengths None: Eq. 5)
        loss        = reduction over rows of residual_ij ** 2 / T_ij     (lengths given)

    Off-policy safe: rows may come from any (stale) policy; no importance ratio is needed. The
    residuals of a group sum to zero, and the loss is zero exactly when log pi - log pi_ref equals
    r / beta up to a per-prompt constant, i.e. when pi is the target pi* of Eq. 2 on these samples.

    Args:
        logps: (N,) float sequence log-probs under the current policy (carries the grad).
        ref_logps: (N,) float reference sequence log-probs (data; no grad expected).
        rewards: (N,) raw rewards, finite.
        beta: current KL coefficient, > 0 (see ``beta_schedule``).
        group_size: K; N = B * K, prompt-major rows.
        reduction: 'mean' (Eq. 5), 'sum', or 'none' for the (N,) squared residuals.
        log_z: None for the VarGrad estimate (Eq. 4, detached); or a learned log-partition,
            a 0-dim tensor (one value for every prompt) or (B,) (one per prompt), which keeps
            its grad so the loss trains it (Eq. 3 with a parameterised Z, as in torchgfn).
        lengths: None for Eq. 5 as the paper writes it; or (N,) response lengths T_ij in tokens
            (> 0; ``tb.loss_type: token_mean``). Each squared residual is divided by its row's
            length, so a row's gradient is 2 * residual * the MEAN over its tokens of
            grad log pi (GRPO's per-sequence token mean) rather than their sum. A departure from
            the paper: the loss is still zero exactly at the target (every residual zero); only
            the weight of each row on the way there changes.

    Returns:
        (loss, info): loss is a 0-dim tensor ('mean'/'sum') or (N,) ('none'); info is a dict of
        python floats: 'log_z' (mean log Z_hat over prompts), 'residual_abs_mean',
        'kl' (mean of log pi - log pi_ref, a sequence-level KL(pi || pi_ref) estimate when the
        rows are on-policy).

    Raises:
        ValueError: shapes differ or are not 1-D; non-finite rewards; group_size < 1 or
            N % group_size != 0; beta <= 0; unknown reduction; log_z neither 0-dim nor (B,);
            a length that is not > 0.
    """
    rewards, lengths, log_z = _tb_inputs(logps, ref_logps, rewards, beta, group_size,
                                         reduction, log_z, lengths)
    if log_z is None:
        log_z = vargrad_log_z(logps, ref_logps, rewards, beta, group_size)  # Eq. 4: (B,), detached
    log_ratio = logps - ref_logps                                           # (N,)
    residual = log_z.repeat_interleave(group_size) + log_ratio - rewards / float(beta)  # Eq. 3
    sq = residual ** 2 if lengths is None else residual ** 2 / lengths      # (N,)
    loss = sq.mean() if reduction == "mean" else sq.sum() if reduction == "sum" else sq  # Eq. 5
    info = {
        "log_z": log_z.detach().mean().item(),
        "residual_abs_mean": residual.detach().abs().mean().item(),
        "kl": log_ratio.detach().mean().item(),
    }
    return loss, info


def _tb_inputs(logps, ref_logps, rewards, beta, group_size, reduction, log_z, lengths):
    """:func:`trajectory_balance_loss`'s argument checks: ``rewards`` and ``lengths`` as
    tensors in ``logps``'s dtype and a given ``log_z`` as (B,); ValueError as listed there."""
    if reduction not in TB_REDUCTIONS:
        raise ValueError(f"reduction must be one of {TB_REDUCTIONS}, got {reduction!r}")
    rewards = torch.as_tensor(rewards, device=logps.device)
    _check_same_shape(logps=logps, ref_logps=ref_logps, rewards=rewards)
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(
            "non-finite rewards (inf/NaN) passed to trajectory_balance_loss; non-finite rewards "
            "usually mean a broken reward function (e.g. log of 0, a failed parse returning NaN)"
        )
    if lengths is not None:
        lengths = torch.as_tensor(lengths, device=logps.device).to(logps.dtype)
        _check_same_shape(logps=logps, lengths=lengths)
        if not bool((lengths > 0).all()):
            raise ValueError("lengths (response lengths in tokens) must all be > 0; a row with "
                             "an empty response has no tokens to average over")
    b = _check_group_layout(logps.shape[0], group_size)
    _check_beta(beta)
    if log_z is not None:
        if log_z.dim() == 0:
            log_z = log_z.expand(b)
        if tuple(log_z.shape) != (b,):
            raise ValueError(f"log_z must be 0-dim or ({b},) (one per prompt), got {tuple(log_z.shape)}")
    return rewards.to(logps.dtype), lengths, log_z


def beta_schedule(step: int, beta_0: float, beta_final: float, anneal_steps: int) -> float:
    """KL coefficient at a trainer update: linear from beta_0 to beta_final, then constant.

        beta(step) = beta_0 + min(step / anneal_steps, 1) * (beta_final - beta_0)

    TBA anneals beta so that early training stays near the reference and later training
    trusts the reward more (docs/design.md sec. 1; reference GSM8K setting 0.014 -> 0.004 over 500
    updates, TL;DR 1.0 -> 0.05).

    Args:
        step: trainer update count, >= 0.
        beta_0: initial beta, > 0.
        beta_final: final beta, > 0 (may be larger than beta_0).
        anneal_steps: updates over which to anneal, >= 0; 0 means beta_final from the start.

    Returns:
        beta as a python float.

    Raises:
        ValueError: beta_0 or beta_final <= 0, anneal_steps < 0, or step < 0.
    """
    beta_0, beta_final = _check_beta(beta_0), _check_beta(beta_final)
    if anneal_steps < 0:
        raise ValueError(f"anneal_steps must be >= 0, got {anneal_steps!r}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step!r}")
    if anneal_steps == 0:
        return beta_final
    frac = min(step / anneal_steps, 1.0)
    return beta_0 + frac * (beta_final - beta_0)


# ----------------------------------------------------------------------------------------------
# GRPO family
# ----------------------------------------------------------------------------------------------

def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str = "group",
                     eps: float = 1e-4) -> torch.Tensor:
    """Group-relative advantages (GRPO, Shao et al. 2024 Sec. 4.1.2; Dr. GRPO for 'none').

        A_ij = (r_ij - mean_j r_ij) / (s + eps)
        s = std of group i ('group'), std of all N rewards ('batch'), or no division ('none').

    std is torch.std (unbiased, Bessel-corrected), as in TRL. A group whose rewards are all
    equal gets advantage EXACTLY 0 in every mode (set explicitly, not left to eps: float
    rounding can make r - mean ~1e-8 and a tiny std would blow it up). K = 1 therefore gives
    all zeros.

    Args:
        rewards: (N,) rewards, N = B * K prompt-major.
        group_size: K.
        scale_rewards: 'group', 'batch' or 'none'.
        eps: added to the std before dividing.

    Returns:
        (N,) advantages (float dtype of rewards; float32 if rewards are integer/bool).

    Raises:
        ValueError: rewards not 1-D, group_size < 1, N % group_size != 0, or scale_rewards not
            one of 'group', 'batch', 'none'.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    rewards, b = _grouped_rewards(rewards, group_size)
    if group_size == 1:
        return torch.zeros_like(rewards)
    grouped = rewards.view(b, group_size)                          # (B, K)
    centered = grouped - grouped.mean(dim=1, keepdim=True)         # (B, K)
    if scale_rewards == "group":
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + eps)
    all_equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # (B, 1)
    adv = torch.where(all_equal, torch.zeros_like(centered), centered)
    return adv.reshape(-1)                                          # (N,)


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL
    divergence", 2020).

        k1 = log pi - log pi_ref                                (unbiased, can be negative)
        k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1  (unbiased, always >= 0)

    Args:
        logps: (N, T) policy token log-probs (any shape works, elementwise).
        ref_logps: same shape, reference token log-probs.
        estimator: 'k1' or 'k3'.

    Both are unbiased VALUES of the KL; their gradients differ. Added to a loss on samples of
    pi, k1's gradient is grad log pi, zero in expectation: it does not pull pi to pi_ref. k1
    belongs in the reward, detached (REINFORCE; an unbiased gradient of KL(pi || pi_ref)), as
    ``grpo_loss`` and ``rloo_advantages`` use it; k3 in a loss pulls pi to pi_ref (its gradient
    is that of KL(pi_ref || pi), Shah et al. 2025, arXiv 2512.21852).

    Returns:
        Tensor of the input shape. Not masked: apply the response mask downstream.

    Raises:
        ValueError: unknown estimator or shapes differ.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    _check_same_shape(logps=logps, ref_logps=ref_logps)
    if estimator == "k1":
        return logps - ref_logps
    d = ref_logps - logps
    return torch.exp(d) - d - 1


def grpo_loss(token_logps: torch.Tensor, behaviour_token_logps: torch.Tensor, ref_token_logps,
              advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float = 0.2,
              beta: float = 0.04, kl_estimator: str = "k3", loss_type: str = "grpo",
              max_completion_length=None, group_size: int | None = None):
    """GRPO loss with PPO clipping (Shao et al. 2024, Eq. 3) and its aggregation variants.

        ratio     = exp(log pi_theta - log pi_behaviour)                     per token
        per_token = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A) + beta * k3_token  (k3)
        per_token = -min(ratio * A', clip(ratio, 1 - eps, 1 + eps) * A')                  (k1)
        A'_i      = A_i - beta * (k1_i - b_i),   k1_i = sum_t sg[log pi_theta - log pi_ref]

    ``behaviour_token_logps`` are the BEHAVIOUR policy's log-probs (the policy that sampled the
    data), given as data and detached here. The KL term is skipped when beta == 0 or
    ``ref_token_logps`` is None.

    Where the KL goes depends on the estimator (Shah et al. 2025, "A Comedy of Estimators",
    arXiv 2512.21852). k3 is added to the loss per token, as TRL does. k1 goes into the reward:
    its sequence sum under the current policy, detached, with a leave-one-out baseline b_i
    (the mean k1 of the other rows of row i's group of ``group_size``, or of the whole batch
    when ``group_size`` is None), so the term's gradient is the REINFORCE estimate of
    grad KL(pi || pi_ref) (unbiased on-policy, importance-weighted by the ratio off-policy). As
    a loss k1 would give grad log pi, zero in expectation: no pull to the reference.

    Aggregation (``loss_type``):
        'grpo'    mean over sequences of each sequence's masked token mean (original GRPO;
                  short answers weigh more per token).
        'bnpo'    masked token mean over the whole batch (every token weighs the same).
        'dr_grpo' masked token sum / (N * max_completion_length) (Dr. GRPO; a constant
                  normaliser, so no length bias).

    Args:
        token_logps: (N, T) current-policy token log-probs (carries the grad).
        behaviour_token_logps: (N, T) behaviour-policy token log-probs.
        ref_token_logps: (N, T) reference token log-probs, or None.
        advantages: (N,) per-sequence advantages (``group_advantages``).
        mask: (N, T) bool/float response mask.
        clip_eps: PPO clip range eps, >= 0.
        beta: KL coefficient, >= 0.
        kl_estimator: 'k1' or 'k3'.
        loss_type: 'grpo', 'bnpo' or 'dr_grpo'.
        max_completion_length: normaliser for 'dr_grpo'; defaults to T.
        group_size: K, for k1's leave-one-out baseline within each prompt's group (rows
            prompt-major); None = over the whole batch.

    Returns:
        (loss, info): loss is a 0-dim tensor; info holds python floats
        'clip_fraction' (masked fraction of tokens whose clipped term is active, i.e. ratio
        outside [1-eps, 1+eps] on the side that zeroes the gradient), 'kl' (masked mean
        token KL with the chosen estimator, computed whenever ref_token_logps is given, even if
        beta == 0; NaN when ref_token_logps is None), 'ratio_mean' (masked mean ratio).

    Raises:
        ValueError: unknown loss_type or kl_estimator (lists allowed values); shapes differ;
            advantages not (N,); clip_eps < 0, beta < 0; max_completion_length < 1; N not a
            multiple of ``group_size``.
    """
    n, t = _grpo_inputs(token_logps, behaviour_token_logps, ref_token_logps, advantages, mask,
                        clip_eps, beta, kl_estimator, loss_type, max_completion_length)
    in_reward = kl_estimator == "k1"
    kl = None
    if ref_token_logps is not None:
        kl = kl_penalty(token_logps.detach() if in_reward else token_logps,
                        ref_token_logps.detach(), kl_estimator)            # (N, T)
    adv = advantages.to(token_logps.dtype)                                 # (N,)
    if kl is not None and beta != 0 and in_reward:
        seq_kl = masked_sum(kl, mask)                                      # (N,), detached
        adv = adv - beta * (seq_kl - _leave_one_out_mean(seq_kl, group_size or n))
    adv = adv.unsqueeze(1)                                                 # (N, 1)
    ratio = torch.exp(token_logps - behaviour_token_logps.detach())        # (N, T)
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    per_token = -torch.min(ratio * adv, clipped * adv)                     # (N, T)
    if kl is not None and beta != 0 and not in_reward:
        per_token = per_token + beta * kl

    if loss_type == "grpo":
        loss = masked_mean(per_token, mask, dim=1).mean()
    elif loss_type == "bnpo":
        loss = masked_mean(per_token, mask)
    else:  # dr_grpo
        loss = masked_sum(per_token, mask).sum() / (n * (max_completion_length or t))

    with torch.no_grad():
        is_clipped = ((ratio < 1 - clip_eps) & (adv < 0)) | ((ratio > 1 + clip_eps) & (adv > 0))
        info = {
            "clip_fraction": masked_mean(is_clipped.to(ratio.dtype), mask).item(),
            "kl": masked_mean(kl, mask).item() if kl is not None else float("nan"),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
    return loss, info


def _grpo_inputs(token_logps, behaviour_token_logps, ref_token_logps, advantages, mask,
                 clip_eps, beta, kl_estimator, loss_type, max_completion_length) -> tuple[int, int]:
    """:func:`grpo_loss`'s argument checks; returns (N, T). ValueError as listed there."""
    if loss_type not in GRPO_LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {loss_type!r}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if clip_eps < 0:
        raise ValueError(f"clip_eps must be >= 0, got {clip_eps!r}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    _check_same_shape(token_logps=token_logps, behaviour_token_logps=behaviour_token_logps, mask=mask)
    if ref_token_logps is not None:
        _check_same_shape(token_logps=token_logps, ref_token_logps=ref_token_logps)
    if token_logps.dim() != 2:
        raise ValueError(f"token_logps must be (N, T), got shape {tuple(token_logps.shape)}")
    n, t = token_logps.shape
    if tuple(advantages.shape) != (n,):
        raise ValueError(f"advantages must have shape ({n},), got {tuple(advantages.shape)}")
    if max_completion_length is not None and max_completion_length < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {max_completion_length!r}")
    return n, t


def _leave_one_out_mean(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) mean of the OTHER rows of each row's group of ``group_size`` (prompt-major); 0 for
    a group of one (no other row). ValueError if N is not a multiple of ``group_size``."""
    b = _check_group_layout(x.shape[0], group_size)
    if group_size < 2:
        return torch.zeros_like(x)
    grouped = x.view(b, group_size)                                        # (B, K)
    return ((grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)).reshape(-1)


# ----------------------------------------------------------------------------------------------
# RLOO
# ----------------------------------------------------------------------------------------------

def rloo_advantages(rewards: torch.Tensor, group_size: int, kl: torch.Tensor | None = None,
                    beta: float = 0.0) -> torch.Tensor:
    """Leave-one-out advantages with the KL folded into the reward (RLOO, Ahmadian et al. 2024;
    TBA paper Eq. 6).

        R_ij = r_ij - beta * kl_ij                       (shaped reward; kl is data, detached)
        A_ij = R_ij - 1/(K-1) * sum_{l != j} R_il  =  K/(K-1) * (R_ij - mean_l R_il)

    ``kl_ij`` is the sequence-level log pi_behaviour(y|x) - log pi_ref(y|x) of each rollout
    (what the behaviour policy paid in KL), as in TRL's RLOO. A group whose shaped rewards are
    all equal gets advantage EXACTLY 0 (set explicitly, as in ``group_advantages``).

    Args:
        rewards: (N,) raw rewards, N = B * K prompt-major.
        group_size: K >= 2 (the leave-one-out mean needs another sample).
        kl: (N,) sequence KL estimates, or None (no shaping).
        beta: KL coefficient, >= 0.

    Returns:
        (N,) advantages, float dtype of rewards (float32 for integer/bool rewards), detached.

    Raises:
        ValueError: rewards not 1-D, group_size < 2, N % group_size != 0, beta < 0, kl shape.
    """
    rewards, b = _grouped_rewards(rewards, group_size)
    if group_size < 2:
        raise ValueError(f"group_size={group_size}: RLOO's leave-one-out baseline needs K >= 2")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    shaped = rewards.detach()
    if kl is not None and beta != 0:
        _check_same_shape(rewards=rewards, kl=kl)
        shaped = shaped - beta * kl.detach().to(shaped.dtype)
    adv = (shaped - _leave_one_out_mean(shaped, group_size)).view(b, group_size)  # (B, K)
    grouped = shaped.view(b, group_size)
    all_equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    return torch.where(all_equal, torch.zeros_like(adv), adv).reshape(-1)  # (N,)


def rloo_loss(token_logps: torch.Tensor, behaviour_token_logps: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2):
    """RLOO policy-gradient loss: REINFORCE on the whole response, PPO-clipped off-policy.

        loss = -1/N * sum_i sum_t min(ratio_it * A_i, clip(ratio_it, 1-eps, 1+eps) * A_i)

    On-policy (ratio 1) its gradient is -1/N sum_i A_i grad log pi(y_i|x_i), the RLOO estimator
    with the SEQUENCE log-prob (no length normalisation). Off-policy the per-token ratio against
    the behaviour log-probs is clipped as in PPO, the usual way RLOO is run asynchronously
    (Noukhovitch et al. 2024). It is ``grpo_loss`` with beta 0 (the KL is already in the reward)
    and ``loss_type='dr_grpo'`` with normaliser 1, i.e. one code path for the clipped surrogate.

    Args:
        token_logps: (N, T) current-policy token log-probs (with grad).
        behaviour_token_logps: (N, T) behaviour-policy token log-probs (data).
        advantages: (N,) from ``rloo_advantages``.
        mask: (N, T) response mask.
        clip_eps: PPO clip range, >= 0.

    Returns:
        (loss, info) as ``grpo_loss`` (info 'kl' is NaN: the KL lives in the reward).

    Raises:
        ValueError: as ``grpo_loss``.
    """
    return grpo_loss(token_logps, behaviour_token_logps, None, advantages, mask, clip_eps=clip_eps,
                     beta=0.0, loss_type="dr_grpo", max_completion_length=1)


# ----------------------------------------------------------------------------------------------
# Online DPO
# ----------------------------------------------------------------------------------------------

def dpo_pairs(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Preference pairs for online DPO: in each group the best response is chosen, the worst
    rejected (first index on ties). Groups whose rewards are all equal give NO pair (no
    preference, so no gradient), the DPO counterpart of a zero advantage.

    Args:
        rewards: (N,) rewards, N = B * K prompt-major.
        group_size: K >= 2.

    Returns:
        (chosen, rejected): two (P,) long tensors of row indices, P <= B.

    Raises:
        ValueError: rewards not 1-D, group_size < 2 or N % group_size != 0.
    """
    rewards = torch.as_tensor(rewards)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    b = _check_group_layout(rewards.shape[0], group_size)
    if group_size < 2:
        raise ValueError(f"group_size={group_size}: a preference pair needs K >= 2")
    grouped = rewards.view(b, group_size)
    has_pair = grouped.max(dim=1).values > grouped.min(dim=1).values      # (B,)
    offset = torch.arange(b, device=rewards.device) * group_size
    chosen = (grouped.argmax(dim=1) + offset)[has_pair]
    rejected = (grouped.argmin(dim=1) + offset)[has_pair]
    return chosen, rejected


def online_dpo_loss(logps: torch.Tensor, ref_logps: torch.Tensor, rewards: torch.Tensor,
                    beta: float, group_size: int):
    """Online DPO on the best / worst response of each group (Rafailov et al. 2023 Eq. 7 on
    pairs drawn from the policy's own samples, as in Guo et al. 2024).

        h_p  = (log pi - log pi_ref)(y_w) - (log pi - log pi_ref)(y_l)     (sequence log-probs)
        loss = mean_p -log sigmoid(beta * h_p)

    Args:
        logps: (N,) sequence log-probs under the current policy (with grad).
        ref_logps: (N,) reference sequence log-probs (data).
        rewards: (N,) rewards, used only to pick the pairs (``dpo_pairs``).
        beta: DPO temperature, > 0.
        group_size: K >= 2.

    Returns:
        (loss, info): a 0-dim loss (exactly 0, still connected to ``logps``, when no group has a
        pair); info floats 'pairs' (P), 'margin' (mean beta * h_p) and 'pair_accuracy'
        (fraction with h_p > 0); NaN for the last two when P = 0.

    Raises:
        ValueError: shapes differ or are not 1-D; beta <= 0; group layout as ``dpo_pairs``.
    """
    beta = _check_beta(beta)
    rewards = torch.as_tensor(rewards, device=logps.device)
    _check_same_shape(logps=logps, ref_logps=ref_logps, rewards=rewards)
    if logps.dim() != 1:
        raise ValueError(f"logps must be 1-D (N,) sequence log-probs, got shape {tuple(logps.shape)}")
    chosen, rejected = dpo_pairs(rewards, group_size)
    if chosen.numel() == 0:
        return logps.sum() * 0.0, {"pairs": 0.0, "margin": float("nan"), "pair_accuracy": float("nan")}
    log_ratio = logps - ref_logps.detach()
    h = log_ratio[chosen] - log_ratio[rejected]                             # (P,)
    loss = -F.logsigmoid(beta * h).mean()
    info = {"pairs": float(chosen.numel()), "margin": (beta * h).detach().mean().item(),
            "pair_accuracy": (h > 0).float().mean().item()}
    return loss, info
