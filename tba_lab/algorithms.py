"""The algorithm table: trajectory balance and the baselines, one small class each.

An algorithm is what the trainer needs to turn a prompt-major batch into a loss:

* ``name``: the value of ``algo`` that selects it (``tba-lab train --algo NAME``);
* ``config_class`` / ``section``: its options, a dataclass read from the YAML section
  ``section`` (``cfg.tb``, ``cfg.grpo``, ...), with a ``validate()`` that names the bad field;
* ``needs_reference()``: whether the loss reads reference log-probs (searchers skip the
  reference forward pass otherwise, as TRL does at beta 0);
* ``beta(step)``: the KL coefficient (DPO: temperature) in force at trainer update ``step``;
* ``loss(batch, step)``: ``(loss, info)`` on a :class:`PolicyBatch`, which carries the current
  policy's token log-probs (with grad), the behaviour and reference log-probs the searchers
  recorded, and the raw rewards, all prompt-major (rows i*K .. i*K+K-1 answer prompt i);
* ``parameters()``: extra optimizer parameter groups the algorithm owns (a learned log Z).

The loss units themselves live in :mod:`tba_lab.losses` (one function per equation); a class
here only says how they are fed. :func:`compute_loss`, which every algorithm's batch goes
through, adds what every loss logs: ``beta`` and ``behaviour_kl`` (the batch's off-policyness,
KL(mu || pi_theta) in nats per response). Each algorithm is registered in
:data:`tba_lab.registry.ALGORITHMS` by its decorator; a new one is a loss unit plus a decorated
subclass here, or a module of its own (``tests/test_extensions.py`` adds one, tested).

| algo | loss | paper |
|---|---|---|
| ``tb`` | :func:`~tba_lab.losses.trajectory_balance_loss`, VarGrad or learned log Z | TBA Eq. 3-5 |
| ``grpo`` | :func:`~tba_lab.losses.group_advantages` + :func:`~tba_lab.losses.grpo_loss` | Shao et al. 2024 |
| ``dr_grpo`` | GRPO with no std division and the constant normaliser | Liu et al. 2025 |
| ``rloo`` | :func:`~tba_lab.losses.rloo_advantages` + :func:`~tba_lab.losses.rloo_loss` | Ahmadian et al. 2024; TBA Eq. 6 |
| ``online_dpo`` | :func:`~tba_lab.losses.online_dpo_loss` on each group's best / worst | Guo et al. 2024 |
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tba_lab.config import check, check_choice
from tba_lab.losses import (GRPO_LOSS_TYPES, KL_ESTIMATORS, SCALE_REWARDS, TB_LOSS_TYPES,
                            behaviour_kl, beta_schedule, group_advantages, grpo_loss,
                            online_dpo_loss, rloo_advantages, rloo_loss, sequence_logprobs,
                            trajectory_balance_loss)
from tba_lab.registry import ALGORITHMS, section_key
from tba_lab.rollout.scoring import response_logprobs


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    """Right-pad per-token lists with 0 to a float32 ``(len(rows), width)`` tensor."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
    return out


def check_group_layout(rollouts: list, group_size: int) -> int:
    """Check that ``rollouts`` is a prompt-major batch of whole groups; return B = N // K.

    Args:
        rollouts: N :class:`~tba_lab.buffer.Rollout` items, rows i*K .. i*K+K-1 answering
            prompt i.
        group_size: K, ``training.num_generations``.

    Raises:
        ValueError: K is not a positive int, N is 0 or not a multiple of K (the message names
            ``training.num_generations`` and N), or the rows of one group have different
            ``prompt_ids`` (the batch is not prompt-major, so the groups would be wrong).
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"training.num_generations (group size K) must be a positive int, got "
                         f"{group_size!r}")
    n = len(rollouts)
    if n == 0 or n % group_size:
        raise ValueError(
            f"a batch of {n} rollouts is not a whole number of groups of training.num_generations"
            f"={group_size} ({n} % {group_size} = {n % group_size}); a batch must hold B*K rows, "
            f"K responses per prompt in a row (as ReplayBuffer.sample returns them)")
    for start in range(0, n, group_size):
        first = rollouts[start].prompt_ids
        for j in range(start + 1, start + group_size):
            if list(rollouts[j].prompt_ids) != list(first):
                raise ValueError(
                    f"rows {start}..{start + group_size - 1} should be one group (one prompt, "
                    f"training.num_generations={group_size} responses) but row {j} answers "
                    f"another prompt; put each prompt's K rollouts next to each other "
                    f"(prompt-major, as ReplayBuffer.sample returns them)")
    return n // group_size


@dataclass
class PolicyBatch:
    """A prompt-major batch of N = B*K rollouts with the current policy's log-probs attached.

    Attributes:
        token_logps: (N, R) float32, current policy, temperature-scaled, WITH grad (0 where masked).
        mask: (N, R) bool response mask (the terminating EOS included).
        rewards: (N,) float32 raw rewards (never divided by beta here).
        behaviour_token_logps: (N, R) float32, the policy that generated each row (data).
        ref_token_logps: (N, R) float32 reference log-probs, or None when not requested.
        group_size: K.
    """
    token_logps: torch.Tensor
    mask: torch.Tensor
    rewards: torch.Tensor
    behaviour_token_logps: torch.Tensor
    ref_token_logps: torch.Tensor | None
    group_size: int

    @property
    def logps(self) -> torch.Tensor:
        """(N,) log pi_theta(y|x), the sum of masked token log-probs (TBA Eq. 3)."""
        return sequence_logprobs(self.token_logps, self.mask)

    @property
    def ref_logps(self) -> torch.Tensor:
        """(N,) log pi_ref(y|x). Raises ValueError when the batch has no reference log-probs."""
        if self.ref_token_logps is None:
            raise ValueError("this batch carries no reference log-probs; the algorithm must "
                             "return True from needs_reference()")
        return self.ref_token_logps.sum(dim=1)

    @property
    def behaviour_logps(self) -> torch.Tensor:
        """(N,) log pi_behaviour(y|x) of the policy that sampled each row."""
        return self.behaviour_token_logps.sum(dim=1)

    def behaviour_kl(self) -> float:
        """How off-policy this batch is, in nats per response: the mean over its N rows of
        log mu(y|x) - log pi_theta(y|x) (behaviour minus current policy, each summed over the
        response's tokens, no grad), the Monte Carlo estimate of KL(mu || pi_theta); see
        :func:`~tba_lab.losses.behaviour_kl`. A python float; ~0 on-policy."""
        return behaviour_kl(self.token_logps, self.behaviour_token_logps, self.mask).item()

    @classmethod
    def from_rollouts(cls, model, rollouts: list, pad_id: int, temperature: float, group_size: int,
                      with_reference: bool) -> "PolicyBatch":
        """Score ``rollouts`` (prompt-major :class:`~tba_lab.buffer.Rollout` list) under ``model``.

        Raises:
            ValueError: ``group_size`` (``training.num_generations``) is not a positive int, the
                number of rollouts is not a multiple of it, or a group of ``group_size``
                consecutive rows mixes prompts (the batch is not prompt-major);
                ``with_reference`` and a rollout carries no reference log-probs (it was
                generated by a run whose loss read none), or a bad layout (see
                :func:`~tba_lab.rollout.scoring.response_logprobs`).
        """
        check_group_layout(rollouts, group_size)
        if with_reference and any(r.ref_token_logps is None for r in rollouts):
            raise ValueError("this loss needs reference log-probs but these rollouts carry none "
                             "(they come from a run without a reference, e.g. GRPO with grpo.beta "
                             "0); generate them with this config or start with an empty buffer")
        token_logps, mask = response_logprobs(model, [r.prompt_ids for r in rollouts],
                                              [r.response_ids for r in rollouts], pad_id,
                                              temperature)  # (N, R), (N, R)
        R, device = mask.shape[1], token_logps.device  # async.trainer_device: data joins the policy
        return cls(token_logps=token_logps, mask=mask,
                   rewards=torch.tensor([r.reward for r in rollouts], dtype=torch.float32,
                                        device=device),
                   behaviour_token_logps=_pad([r.behaviour_token_logps for r in rollouts], R).to(device),
                   ref_token_logps=(_pad([r.ref_token_logps for r in rollouts], R).to(device)
                                    if with_reference else None),
                   group_size=group_size)


class Algorithm:
    """Base of the table's entries; see the module docstring for what each member means.

    Args:
        cfg: the run's :class:`~tba_lab.config.RunConfig`; ``self.options`` is its section.
    """
    name: str = ""
    config_class: type | None = None
    section: str | None = None

    def __init__(self, cfg):
        self.cfg = cfg
        self.options = cfg.section(section_key(self)) if self.config_class else None

    @classmethod
    def check_config(cls, cfg) -> None:
        """Cross-section rules, before any process starts (raise ConfigError)."""

    def needs_reference(self) -> bool:
        return True

    def beta(self, step: int) -> float:
        """The KL coefficient at ``step``: the ``beta`` option, or 0.0 for an algorithm without one."""
        return float(getattr(self.options, "beta", 0.0))

    def parameters(self) -> list[dict]:
        """Extra optimizer parameter groups (``{"params": [...], "base_lr": lr, ...}``)."""
        return []

    def loss(self, batch: PolicyBatch, step: int) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def summary(self) -> dict:
        """Values for ``summary.json`` at the end of a run (e.g. a learned log Z)."""
        return {}


def compute_loss(algorithm: Algorithm, model, rollouts: list, pad_id: int, step: int):
    """Loss of one prompt-major batch of B*K rollouts under the current ``model``.

    Every algorithm's batch goes through here, so the metrics every loss logs are added here:
    ``beta`` (the value in force at ``step``) and ``behaviour_kl``
    (:meth:`PolicyBatch.behaviour_kl`: KL(mu || pi_theta) estimated on the batch, nats per
    response, how off-policy the rows are under the weights being trained). A loss's own
    terms come from its ``loss`` (``clip_fraction`` only from the PPO-clipped GRPO, Dr. GRPO
    and RLOO).

    Returns:
        (loss, info): a 0-dim float32 tensor with grad, and a dict of finite floats for
        logging (``metrics.jsonl`` and the dashboards): the loss's terms, ``beta`` and
        ``behaviour_kl``.

    Raises:
        ValueError: the loss reads reference log-probs the rollouts do not carry, or a bad
            batch layout: a row count that is not a multiple of ``training.num_generations``,
            groups that mix prompts (see :func:`check_group_layout`,
            :meth:`PolicyBatch.from_rollouts` and the loss units).
    """
    cfg = algorithm.cfg
    batch = PolicyBatch.from_rollouts(model, rollouts, pad_id, cfg.model.temperature,
                                      cfg.training.num_generations, algorithm.needs_reference())
    loss, info = algorithm.loss(batch, step)
    info = {**info, "behaviour_kl": batch.behaviour_kl()}
    info = {k: v for k, v in info.items() if isinstance(v, float) and math.isfinite(v)}
    info["beta"] = algorithm.beta(step)
    return loss, info


def make_algorithm(cfg) -> Algorithm:
    """The algorithm ``cfg.algo`` names, built for ``cfg``. Raises KeyError for an unknown name."""
    return ALGORITHMS.get(cfg.algo)(cfg)


# ----------------------------------------------------------------------------------------------
# Trajectory balance (TBA, arXiv 2503.18929, Sec. 3)
# ----------------------------------------------------------------------------------------------

@dataclass
class TBConfig:
    beta: float = 0.1                   # KL coefficient beta at the start (paper Eq. 2)
    beta_final: float | None = None     # annealed to this value (None = constant beta)
    beta_anneal_steps: int = 0          # over this many trainer updates, then constant
    log_z: str = "vargrad"              # "vargrad": per-prompt estimate (Eq. 4); "learned": one scalar parameter
    log_z_lr: float = 0.1               # AdamW learning rate of the learned log Z (torchgfn's usual 0.1)
    loss_type: str = "sum"              # "sum": Eq. 5 (sequence log-probs); "token_mean": residual^2 / length
    scale_rewards: str = "none"         # "none": raw rewards (the paper); "group" | "batch": GRPO's std division

    def validate(self) -> None:
        check(self.beta > 0, f"tb.beta={self.beta}: the KL coefficient must be > 0")
        check(self.beta_final is None or self.beta_final > 0,
              f"tb.beta_final={self.beta_final}: must be > 0 or null")
        check(self.beta_anneal_steps >= 0, f"tb.beta_anneal_steps={self.beta_anneal_steps}: must be >= 0")
        check_choice(self.log_z, ("vargrad", "learned"), "tb.log_z")
        check(self.log_z_lr > 0, f"tb.log_z_lr={self.log_z_lr}: must be > 0")
        check_choice(self.loss_type, TB_LOSS_TYPES, "tb.loss_type")
        check_choice(self.scale_rewards, SCALE_REWARDS, "tb.scale_rewards")


@ALGORITHMS.register
class TrajectoryBalance(Algorithm):
    """TB with the VarGrad log Z (Eq. 3-5), beta annealed linearly (``beta_schedule``).

    Rewards are stored raw and divided by the CURRENT beta here. The defaults are the paper's
    loss; three options depart from it:

    * ``tb.log_z: learned`` replaces the VarGrad estimate by ONE learned scalar for all prompts
      (torchgfn's ``logZ``), where the paper's log Z depends on the prompt.
    * ``tb.scale_rewards: group`` (or ``batch``) divides each group's centred rewards by their
      std before the division by beta (:func:`~tba_lab.losses.group_advantages`, GRPO's
      scaling; a group whose rewards are all equal gets 0). The target (Eq. 2) then uses a
      per-prompt reward scale: pi_ref * exp((r - mean) / (std * beta)).
    * ``tb.loss_type: token_mean`` divides each squared residual by its response's length
      (GRPO's per-sequence token mean; the minimum, every residual zero, is unchanged).

    The last two are GRPO's two normalisations, kept as options to compare them on TB
    (docs/log.md).
    """
    name, section, config_class = "tb", "tb", TBConfig

    def __init__(self, cfg):
        super().__init__(cfg)
        self.log_z = torch.nn.Parameter(torch.zeros(())) if self.options.log_z == "learned" else None

    def beta(self, step: int) -> float:
        o = self.options
        return beta_schedule(step, o.beta, o.beta if o.beta_final is None else o.beta_final,
                             o.beta_anneal_steps)

    def parameters(self) -> list[dict]:
        if self.log_z is None:
            return []
        return [{"params": [self.log_z], "base_lr": self.options.log_z_lr, "weight_decay": 0.0}]

    def loss(self, batch: PolicyBatch, step: int):
        o, rewards, lengths = self.options, batch.rewards, None
        if o.scale_rewards != "none":  # centring alone changes nothing: log Z absorbs it
            rewards = group_advantages(rewards, batch.group_size, o.scale_rewards)
        if o.loss_type == "token_mean":
            lengths = batch.mask.sum(dim=1)                                # (N,) tokens
        return trajectory_balance_loss(batch.logps, batch.ref_logps, rewards, self.beta(step),
                                       batch.group_size, log_z=self.log_z, lengths=lengths)

    def summary(self) -> dict:
        return {} if self.log_z is None else {"learned_log_z": self.log_z.item()}


# ----------------------------------------------------------------------------------------------
# GRPO and Dr. GRPO
# ----------------------------------------------------------------------------------------------

@dataclass
class GRPOConfig:
    beta: float = 0.0                   # KL coefficient (penalty to the reference); 0 skips it
    epsilon: float = 0.2                # PPO clip range for the importance ratio
    loss_type: str = "grpo"             # "grpo" | "bnpo" | "dr_grpo" aggregation (losses.grpo_loss)
    scale_rewards: str = "group"        # "group" | "batch" | "none" std division of advantages
    kl_estimator: str = "k3"            # "k3": in the loss per token (TRL's); "k1": in the reward (REINFORCE, arXiv 2512.21852)

    inf_means_no_limit = {"epsilon": "the importance ratio is never clipped"}  # config.check_finite

    def validate(self) -> None:
        check_choice(self.loss_type, GRPO_LOSS_TYPES, "grpo.loss_type")
        check_choice(self.scale_rewards, SCALE_REWARDS, "grpo.scale_rewards")
        check_choice(self.kl_estimator, KL_ESTIMATORS, "grpo.kl_estimator")
        check(self.beta >= 0, f"grpo.beta={self.beta}: must be >= 0 (0 = no KL term)")
        check(self.epsilon >= 0, f"grpo.epsilon={self.epsilon}: must be >= 0 (the clip range)")


@ALGORITHMS.register
class GRPO(Algorithm):
    """Group-normalised advantages and the PPO-clipped ratio against the behaviour log-probs
    the searcher recorded, with an optional KL penalty (Shao et al. 2024, arXiv 2402.03300)."""
    name, section, config_class = "grpo", "grpo", GRPOConfig

    @property
    def scale_rewards(self) -> str:
        return self.options.scale_rewards

    @property
    def loss_type(self) -> str:
        return self.options.loss_type

    def needs_reference(self) -> bool:
        return self.options.beta > 0

    def loss(self, batch: PolicyBatch, step: int):
        o = self.options
        adv = group_advantages(batch.rewards, batch.group_size, self.scale_rewards)  # (N,)
        return grpo_loss(batch.token_logps, batch.behaviour_token_logps, batch.ref_token_logps,
                         adv, batch.mask, clip_eps=o.epsilon, beta=o.beta,
                         kl_estimator=o.kl_estimator, loss_type=self.loss_type,
                         max_completion_length=self.cfg.model.max_new_tokens,
                         group_size=batch.group_size)


@ALGORITHMS.register
class DrGRPO(GRPO):
    """Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): GRPO's options with ``scale_rewards`` and
    ``loss_type`` forced to "none" and "dr_grpo" (no std division, a constant normaliser)."""
    name = "dr_grpo"
    scale_rewards = "none"
    loss_type = "dr_grpo"


# ----------------------------------------------------------------------------------------------
# RLOO
# ----------------------------------------------------------------------------------------------

@dataclass
class RLOOConfig:
    beta: float = 0.05                  # KL coefficient, folded into the reward (TRL's RLOOConfig default)
    epsilon: float = 0.2                # PPO clip range of the per-token ratio (off-policy data)

    inf_means_no_limit = {"epsilon": "the importance ratio is never clipped"}  # config.check_finite

    def validate(self) -> None:
        check(self.beta >= 0, f"rloo.beta={self.beta}: must be >= 0 (0 = no KL term)")
        check(self.epsilon >= 0, f"rloo.epsilon={self.epsilon}: must be >= 0 (the clip range)")


@ALGORITHMS.register
class RLOO(Algorithm):
    """Leave-one-out advantages on r - beta * (log pi_behaviour - log pi_ref), then sequence-
    level REINFORCE, PPO-clipped per token off-policy (Ahmadian et al. 2024; TBA Eq. 6). At
    beta 0 no reference is read (and searchers skip that pass)."""
    name, section, config_class = "rloo", "rloo", RLOOConfig

    def needs_reference(self) -> bool:
        return self.options.beta > 0

    def loss(self, batch: PolicyBatch, step: int):
        kl = None
        if batch.ref_token_logps is not None:
            kl = batch.behaviour_logps - batch.ref_logps                 # (N,) sequence KL
        adv = rloo_advantages(batch.rewards, batch.group_size, kl=kl, beta=self.beta(step))
        loss, info = rloo_loss(batch.token_logps, batch.behaviour_token_logps, adv, batch.mask,
                               clip_eps=self.options.epsilon)
        if kl is not None:
            info["kl"] = kl.mean().item()
        return loss, info


# ----------------------------------------------------------------------------------------------
# Online DPO
# ----------------------------------------------------------------------------------------------

@dataclass
class OnlineDPOConfig:
    beta: float = 0.1                   # DPO temperature beta (TRL's OnlineDPOConfig default)

    def validate(self) -> None:
        check(self.beta > 0, f"online_dpo.beta={self.beta}: must be > 0")


@ALGORITHMS.register
class OnlineDPO(Algorithm):
    """Online DPO (Guo et al. 2024) on each group's best / worst response by reward."""
    name, section, config_class = "online_dpo", "online_dpo", OnlineDPOConfig

    def loss(self, batch: PolicyBatch, step: int):
        return online_dpo_loss(batch.logps, batch.ref_logps, batch.rewards, self.beta(step),
                               batch.group_size)


__all__ = ["Algorithm", "PolicyBatch", "check_group_layout", "compute_loss", "make_algorithm",
           "TrajectoryBalance", "GRPO", "DrGRPO", "RLOO", "OnlineDPO", "TBConfig", "GRPOConfig",
           "RLOOConfig", "OnlineDPOConfig"]
