"""Replay buffer for asynchronous off-policy RL post-training (TBA, arXiv 2503.18929; docs/design.md
sec. 2): searchers push scored rollouts, the trainer samples groups of K responses per prompt.

Storage: one deque per prompt, oldest at the left, at most ``capacity_per_prompt`` items (past
capacity the oldest goes). Items are kept as generated, repeats included, so a prompt's K newest
items are the searcher's own group: TB's VarGrad log Z (TBA Eq. 4) and GRPO's baseline are
averages over samples of the behaviour policy, and de-duplicating would weigh each distinct
answer the same however likely it is (docs/results/README.md#buffer-sampling). ``dedup=True``
(``buffer.dedup``, for reward-mode replay of diverse responses, as in GFlowNet red-teaming)
keeps one copy per token sequence, the newest. A prompt that receives an item is "refreshed"
until ``mark_sync()``, which the trainer calls when it publishes weights.

Sampling, ``sample(num_prompts=B, group_size=K)`` -> B*K rollouts, prompt-major (rows i*K ..
i*K+K-1 belong to slot i, the (B, K) layout every loss reshapes to). Each slot, with probability
m = ``recency_prob``, takes a prompt refreshed since the last sync (uniformly) and its K newest
items; otherwise a prompt uniformly among all and K items drawn without replacement with
probabilities softmax(inv_temp * reward) (successive draws: each draw is the softmax over the
items not yet drawn, computed from their rewards with the max subtracted, so it never underflows
to all zeros: with a large inv_temp the best remaining item comes next, tied items equally
likely).

Choices (say so if you change them):
  * Prompts in a batch are distinct while enough exist; after every prompt has been used they
    may repeat, once per round.
  * Recency fallback (a departure): with sync period 1, often no prompt is refreshed since the
    last sync; ``recency_fallback="newest"`` (default) then takes the most recently refreshed
    prompt, which keeps the batch fresh, and ``"reward"`` falls back to reward mode.
  * A prompt with n < K items gives all n once and draws the other K - n with replacement.
  * ``inv_temp`` multiplies the raw reward (the buffer never sees beta); it matters only for
    prompts holding more than K items, i.e. tasks with few prompts or long runs.
  * ``add`` stores copies: a producer may reuse and edit its ``Rollout`` objects afterwards
    (``copy=False`` hands over objects the caller made for the buffer alone). ``sample``
    raises ``ValueError`` on an empty buffer (the trainer fills it first) and returns the
    stored ``Rollout`` objects themselves: only the trainer's reference pass writes to them (it
    fills ``ref_token_logps`` once, in place, so a row replayed again is not scored again).
    ``last_modes`` records each slot's mode ("recency" / "reward") for plots and tests.
  * Checkpoints are plain containers, read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings
from collections import deque
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import numpy as np
import torch

RECENCY_FALLBACKS = ("reward", "newest")
_STATE_FORMAT = 2  # bump when state_dict's layout changes (2: old_token_logps renamed)


@dataclass
class Rollout:
    """One response to one prompt, as a searcher produced it."""

    prompt_id: int  # index of the prompt in the task's train split
    prompt_ids: list[int]  # prompt token ids (no padding)
    response_ids: list[int]  # response token ids incl. the terminating EOS if the model emitted it
    reward: float  # raw reward r(x, y) (NOT divided by beta; the trainer does that)
    ref_token_logps: list[float] | None  # per-token log pi_ref, len == len(response_ids); None when
    #                                      the algorithm needs no reference (GRPO with beta 0)
    behaviour_token_logps: list[float]  # per-token log-probs under the behaviour (generating) policy
    version: int  # policy version that generated it
    created: float = 0.0  # time.time() when generated (seconds)


_ROLLOUT_FIELDS = tuple(f.name for f in fields(Rollout))


def finite_logprobs(r: Rollout) -> bool:
    """Whether every behaviour and reference log-prob of ``r`` is finite (a reference of None
    counts as finite). A NaN there makes the loss NaN, and a NaN gradient passes
    ``clip_grad_norm_`` and AdamW into every weight: such rows are dropped where they enter
    (:func:`tba_lab.rollout.collect.drop_nonfinite_logprobs`)."""
    return (all(math.isfinite(x) for x in r.behaviour_token_logps)
            and (r.ref_token_logps is None or all(math.isfinite(x) for x in r.ref_token_logps)))


def _check_rollout(r: Rollout) -> None:
    """Raise ValueError if a rollout would corrupt sampling or the losses downstream."""
    if not math.isfinite(float(r.reward)):
        raise ValueError(
            f"rollout for prompt {r.prompt_id} has non-finite reward {r.reward!r}; "
            "fix the reward function (it must return a finite float) before pushing to the buffer"
        )
    if not finite_logprobs(r):
        raise ValueError(
            f"rollout for prompt {r.prompt_id} has a NaN or infinite behaviour or reference "
            "log-prob; drop such rows before pushing to the buffer "
            "(tba_lab.rollout.collect.drop_nonfinite_logprobs does, and counts them)"
        )
    n = len(r.response_ids)
    n_ref = n if r.ref_token_logps is None else len(r.ref_token_logps)
    if n_ref != n or len(r.behaviour_token_logps) != n:
        raise ValueError(
            f"rollout for prompt {r.prompt_id}: len(response_ids)={n} but "
            f"len(ref_token_logps)={n_ref}, "
            f"len(behaviour_token_logps)={len(r.behaviour_token_logps)}; score exactly the response "
            "tokens (one log-prob per response token, prompt excluded)"
        )


def _as_dict(r: Rollout) -> dict:
    """``dataclasses.asdict`` for a Rollout, 20x faster (its lists hold numbers only, so a
    shallow copy of each list is a full copy): checkpoints copy the whole buffer."""
    return {f: (v[:] if isinstance(v, list) else v) for f in _ROLLOUT_FIELDS
            for v in (getattr(r, f),)}


def _copied(v):
    """A copy of a mutable field value (list, numpy array, tensor); anything else as it is."""
    if type(v) is list:
        return v.copy()
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, (list, np.ndarray)):
        return v.copy()
    return v


def _owned(r: Rollout, memo: dict) -> Rollout:
    """A copy of ``r`` whose mutable fields (its lists; a tensor or array a caller put there)
    are copies. ``prompt_ids``, which a searcher's K responses to one prompt share, is copied
    once per call (``memo``: id of the caller's list -> our copy) and stays shared.
    About 1.2 us per rollout alone, most of it the list copies (``dataclasses.replace``: 5 us)."""
    if type(r) is not Rollout:  # a subclass may add fields: copy them all, through replace()
        return replace(r, **{f.name: _copied(getattr(r, f.name)) for f in fields(r)})
    c = memo.get(id(r.prompt_ids))
    if c is None:
        c = memo[id(r.prompt_ids)] = _copied(r.prompt_ids)
    return Rollout(r.prompt_id, c, _copied(r.response_ids), r.reward, _copied(r.ref_token_logps),
                   _copied(r.behaviour_token_logps), r.version, r.created)


def complete_groups(rollouts: Sequence[Rollout], group_size: int) -> list[Rollout]:
    """The rows of a prompt-major batch whose prompt still has all its ``group_size`` rows.

    ``rollout()`` drops rows with a non-finite reward; an on-policy (sync) update needs whole
    groups of K = ``group_size`` responses per prompt (GRPO advantages, TB's VarGrad log Z), so
    a prompt with a missing row is left out entirely. Rows of one prompt are consecutive; a run
    of consecutive rows of one prompt is kept when its length is a multiple of K (a prompt drawn
    twice in a batch gives two adjacent groups).

    Returns:
        list[Rollout], the kept rows in their order (possibly empty).
    """
    out: list[Rollout] = []
    i = 0
    while i < len(rollouts):
        j = i
        while j < len(rollouts) and rollouts[j].prompt_id == rollouts[i].prompt_id:
            j += 1
        if (j - i) % group_size == 0:
            out.extend(rollouts[i:j])
        i = j
    return out


def reward_softmax(rewards, inv_temp: float) -> np.ndarray:
    """softmax(inv_temp * rewards) over one prompt's items, computed as
    exp(inv_temp * (r - max r)) / sum: the best item weighs exactly 1 before normalising, so the
    result is finite and sums to 1 for any finite rewards and inv_temp >= 0 (an item whose
    weight underflows gets probability exactly 0).

    Args:
        rewards: (n,) finite floats, n >= 1 (any array-like); inv_temp: finite, >= 0 (0: uniform).
    Returns:
        (n,) float64 probabilities.
    Raises:
        ValueError: ``rewards`` is empty (numpy's, from its max).
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if inv_temp == 0:
        return np.full(r.shape, 1.0 / r.size)
    e = np.exp(inv_temp * (r - r.max()))  # exponents <= 0, the largest exactly 0
    return e / e.sum()


class ReplayBuffer:
    """Per-prompt replay buffer with recency / reward-prioritised sampling (docs/design.md section 2).

    Args:
        capacity_per_prompt (int, >= 1): items kept per prompt; the oldest is dropped beyond it.
        recency_prob (float, in [0, 1]): probability m that a prompt slot uses recency mode.
        inv_temp (float, >= 0): reward prioritisation; items of a prompt are drawn with
            probabilities softmax(inv_temp * reward). 0 gives uniform draws.
        seed (int): seed of the buffer's own numpy Generator; same seed and same adds give the
            same samples.
        max_prompts (int >= 1 or None): prompts remembered; beyond it the least recently
            refreshed prompt is evicted with all its items (None = unbounded). Bounds how stale
            a reward-mode draw can be when prompts rarely repeat (an addition to the paper's buffer).
        dedup (bool): keep one copy of a repeated response per prompt (newest wins). Off by
            default: groups must be samples of the behaviour policy (module docstring).
        recency_fallback ("newest" | "reward"): what a recency slot does when every prompt
            refreshed since the last sync is already in the batch (or none was refreshed): take
            the most recently refreshed unused prompt's K newest items (default, keeps the batch
            fresh), or draw in reward mode.

    Raises:
        ValueError: if an argument is out of range (the message names the field and the fix).
    """

    def __init__(
        self,
        capacity_per_prompt: int = 64,
        recency_prob: float = 0.5,
        inv_temp: float = 0.0,
        seed: int = 0,
        max_prompts: int | None = None,
        dedup: bool = False,
        recency_fallback: str = "newest",
    ) -> None:
        if isinstance(capacity_per_prompt, bool) \
                or not isinstance(capacity_per_prompt, numbers.Integral) or capacity_per_prompt < 1:
            raise ValueError(
                f"capacity_per_prompt must be an int >= 1 (got {capacity_per_prompt!r}); set it "
                "to how many responses to keep per prompt, at least the group size K (default 64)"
            )
        if not isinstance(recency_prob, numbers.Real) or not (0.0 <= recency_prob <= 1.0):
            raise ValueError(
                f"recency_prob must be in [0, 1] (got {recency_prob!r}); it is the probability m "
                "of drawing a prompt refreshed since the last sync (0 = reward mode only)"
            )
        if not isinstance(inv_temp, numbers.Real) or not (0.0 <= inv_temp < math.inf):
            raise ValueError(
                f"inv_temp must be a finite number >= 0 (got {inv_temp!r}); use 0 for uniform "
                "sampling within a prompt, larger values to favour high-reward responses"
            )
        if max_prompts is not None and (isinstance(max_prompts, bool)
                                        or not isinstance(max_prompts, numbers.Integral) or max_prompts < 1):
            raise ValueError(
                f"max_prompts must be an int >= 1 or None (got {max_prompts!r}); it bounds how "
                "many prompts the buffer remembers (the least recently refreshed are evicted)"
            )
        if recency_fallback not in RECENCY_FALLBACKS:
            raise ValueError(
                f"recency_fallback must be one of {RECENCY_FALLBACKS} (got {recency_fallback!r}); "
                "'reward': a recency slot with no prompt refreshed since the last sync draws in "
                "reward mode; 'newest': it takes the most recently refreshed unused prompt")
        self.max_prompts = None if max_prompts is None else int(max_prompts)
        self.dedup = bool(dedup)
        self.recency_fallback = recency_fallback
        self.capacity_per_prompt = int(capacity_per_prompt)
        self.recency_prob = float(recency_prob)
        self.inv_temp = float(inv_temp)
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        # prompt_id -> deque of Rollout, oldest left; dict order = least to most recently refreshed
        self._items: dict[int, deque[Rollout]] = {}
        # prompts refreshed since the last sync; a dict used as an insertion-ordered set
        self._refreshed: dict[int, None] = {}
        self.last_modes: list[str] = []

    # ------------------------------------------------------------------ adding
    def add(self, rollouts: Sequence[Rollout], *, copy: bool = True) -> int:
        """Store copies of the rollouts; return how many were NEW token sequences for their prompt.

        The caller keeps its objects: editing or reusing them afterwards does not change what
        the buffer holds (their lists, and a tensor or array in a field, are copied; a
        ``prompt_ids`` list shared by several rollouts of the call is copied once and stays
        shared). With ``dedup``, a rollout whose ``response_ids`` are already stored for its
        prompt (or appear earlier in the same call) replaces the old copy and is not counted;
        without it every rollout is stored and counted. Every prompt that receives a rollout
        is marked refreshed since the last sync.

        Args:
            rollouts (list[Rollout]): items from a searcher, any order, any prompts.
            copy (bool): False hands the objects themselves over, for a caller that made them
                for the buffer alone and never touches them again (the trainer's rows, unpickled
                from a searcher's queue; the simulator's); saves about 1.3 us per rollout
                (docs/log.md, 2026-12-06).

        Returns:
            int: number of rollouts stored as new items (all of them without ``dedup``).

        Raises:
            ValueError: non-finite reward or log-prob, or log-prob lists whose length differs
                from the response's (nothing from the call is stored in that case).
        """
        for r in rollouts:  # validate everything first so a bad batch leaves no partial state
            _check_rollout(r)
        memo: dict = {}  # the caller's lists -> our copies, for this call
        added = 0
        for r in rollouts:
            if copy:
                r = _owned(r, memo)  # the caller may reuse and edit its objects after this call
            dq = self._items.pop(r.prompt_id, None) or deque()
            self._items[r.prompt_id] = dq  # (re)insert at the most-recently-refreshed end
            key = tuple(r.response_ids)
            for i, old in enumerate(dq if self.dedup else ()):  # O(capacity): tens of items
                if tuple(old.response_ids) == key:
                    del dq[i]  # newest copy wins: drop the old one, append the new one below
                    break
            else:
                added += 1
            dq.append(r)
            while len(dq) > self.capacity_per_prompt:
                dq.popleft()  # drop the OLDEST
            self._refreshed[r.prompt_id] = None
        while self.max_prompts is not None and len(self._items) > self.max_prompts:
            evicted = next(iter(self._items))  # least recently refreshed prompt
            del self._items[evicted]
            self._refreshed.pop(evicted, None)
        return added

    def discard(self, rollouts: Sequence[Rollout]) -> int:
        """Remove these stored rollouts (the same objects, as :meth:`sample` returned them);
        a prompt left with none is forgotten. Returns how many were removed (one found twice
        counts once; one not stored is ignored)."""
        ids = {id(r) for r in rollouts}
        removed = 0
        for pid in {r.prompt_id for r in rollouts}:
            dq = self._items.get(pid)
            if dq is None:
                continue
            kept = deque(r for r in dq if id(r) not in ids)
            removed += len(dq) - len(kept)
            if kept:
                self._items[pid] = kept
            else:
                del self._items[pid]
                self._refreshed.pop(pid, None)
        return removed

    def mark_sync(self) -> None:
        """Forget which prompts were refreshed; call when the trainer publishes new weights."""
        self._refreshed.clear()

    # ---------------------------------------------------------------- sampling
    def sample(self, num_prompts: int, group_size: int) -> list[Rollout]:
        """Draw a batch of ``num_prompts`` groups of ``group_size`` responses.

        Args:
            num_prompts (int, >= 1): B, prompts (groups) in the batch.
            group_size (int, >= 1): K, responses per prompt.

        Returns:
            list[Rollout] of length B*K in prompt-major order: rows i*K .. i*K+K-1 share one
            prompt_id (reshape per-row tensors as (B, K)).

        Raises:
            ValueError: if the buffer is empty or num_prompts / group_size < 1.
        """
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1 (got {num_prompts!r})")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1 (got {group_size!r})")
        if not self._items:
            raise ValueError(
                "cannot sample from an empty replay buffer; wait for the initial fill "
                "(searchers must add rollouts before the trainer samples)"
            )
        prompts = list(self._items)
        used: set[int] = set()
        out: list[Rollout] = []
        self.last_modes = []
        for _ in range(num_prompts):
            if len(used) == len(prompts):
                used.clear()  # every prompt used once: start a new round, repeats allowed
            coin = self._rng.random() < self.recency_prob
            fresh = [p for p in self._refreshed if p not in used]
            if coin and not fresh and self.recency_fallback == "newest":
                fresh = [next(p for p in reversed(prompts) if p not in used)]
            if coin and fresh:
                pid = fresh[self._rng.integers(len(fresh))]
                out.extend(self._newest(pid, group_size))
                self.last_modes.append("recency")
            else:
                pool = [p for p in prompts if p not in used]
                pid = pool[self._rng.integers(len(pool))]
                out.extend(self._by_reward(pid, group_size))
                self.last_modes.append("reward")
            used.add(pid)
        return out

    def _newest(self, pid: int, k: int) -> list[Rollout]:
        """Recency mode: the k newest items of prompt ``pid`` (oldest first)."""
        items = list(self._items[pid])
        if len(items) >= k:
            return items[-k:]
        extra = self._rng.integers(len(items), size=k - len(items))  # with replacement, uniform
        return items + [items[i] for i in extra]

    def _by_reward(self, pid: int, k: int) -> list[Rollout]:
        """Reward mode: k items of ``pid`` drawn w/o replacement from softmax(inv_temp * r).

        Successive sampling: each draw is :func:`reward_softmax` over the items not drawn yet,
        from their own rewards. Renormalising the first draw's probabilities (the same law)
        would divide 0 by 0 once every item left has underflowed, e.g. 0/1 rewards at inv_temp
        1000. Each draw takes one uniform and the item that ``rng.choice`` over all n items,
        the drawn ones at probability 0, would take (the same wherever nothing underflows)."""
        items = list(self._items[pid])
        n = len(items)
        rewards = np.array([it.reward for it in items], dtype=np.float64)
        if n <= k:
            # every item once, then fill the remaining k - n rows with replacement
            p = reward_softmax(rewards, self.inv_temp)
            idx = list(range(n)) + list(self._rng.choice(n, size=k - n, p=p))
            return [items[i] for i in idx]
        alive = np.ones(n, dtype=bool)  # items not drawn yet
        idx = []
        for _ in range(k):
            left = np.flatnonzero(alive)
            p = reward_softmax(rewards[left], self.inv_temp)  # over the items left: never 0/0
            i = int(left[self._rng.choice(len(left), p=p)])
            idx.append(i)
            alive[i] = False
        return [items[i] for i in idx]

    # ------------------------------------------------------------ inspection
    def num_prompts(self) -> int:
        """Number of distinct prompts stored."""
        return len(self._items)

    def __len__(self) -> int:
        """Total number of stored items over all prompts."""
        return sum(len(dq) for dq in self._items.values())

    def prompt_ids(self) -> list[int]:
        """Ids of the prompts stored, least recently refreshed first."""
        return list(self._items)

    def items(self, prompt_id: int) -> list[Rollout]:
        """The stored items of one prompt, oldest first (a copy of the list; KeyError if unseen)."""
        return list(self._items[prompt_id])

    def refreshed(self) -> list[int]:
        """Prompt ids refreshed since the last sync, in first-refreshed order."""
        return list(self._refreshed)

    @staticmethod
    def staleness(rollouts: Sequence[Rollout], current_version: int) -> list[int]:
        """Policy lag of each rollout: ``current_version - r.version`` (list[int], one per item)."""
        return [int(current_version) - int(r.version) for r in rollouts]

    # ---------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume sampling exactly: config, items, refreshed set, rng state.

        Only plain Python containers (loadable with ``torch.load(weights_only=True)``).
        """
        return {
            "format": _STATE_FORMAT,
            "config": {
                "capacity_per_prompt": self.capacity_per_prompt,
                "recency_prob": self.recency_prob,
                "inv_temp": self.inv_temp,
                "seed": self.seed,
                "max_prompts": self.max_prompts,
                "dedup": self.dedup,
                "recency_fallback": self.recency_fallback,
            },
            "items": [[pid, [_as_dict(r) for r in dq]] for pid, dq in self._items.items()],
            "refreshed": list(self._refreshed),
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore from ``state_dict()``; replaces config, items, refreshed set and rng state.

        Raises:
            ValueError: if ``d`` is not a replay-buffer state of a known format.
        """
        if not isinstance(d, dict) or d.get("format") not in (1, _STATE_FORMAT):
            raise ValueError(
                f"not a ReplayBuffer state of format {_STATE_FORMAT} "
                f"(got format {d.get('format') if isinstance(d, dict) else type(d).__name__!r}); "
                "pass the dict returned by ReplayBuffer.state_dict()"
            )
        if d["format"] == 1:  # format 1 named the behaviour log-probs old_token_logps
            d = {**d, "items": [[pid, [{("behaviour_token_logps" if k == "old_token_logps" else k): v
                                        for k, v in r.items()} for r in rows]]
                                for pid, rows in d["items"]]}
        # re-validates the config; a state without ``dedup`` / ``recency_fallback`` keys was
        # written by a buffer that de-duplicated and fell back to reward mode
        fresh = ReplayBuffer(**{"dedup": True, "recency_fallback": "reward", **d["config"]})
        self.capacity_per_prompt = fresh.capacity_per_prompt
        self.recency_prob = fresh.recency_prob
        self.inv_temp = fresh.inv_temp
        self.seed = fresh.seed
        self.max_prompts = fresh.max_prompts
        self.dedup = fresh.dedup
        self.recency_fallback = fresh.recency_fallback
        memo: dict = {}  # the caller's lists stay the caller's: the buffer keeps copies
        self._items = {
            int(pid): deque(_owned(Rollout(**r), memo) for r in rows) for pid, rows in d["items"]
        }
        bad = sum(not finite_logprobs(r) for dq in self._items.values() for r in dq)
        if bad:  # a state saved before such rows were refused: never train on them
            warnings.warn(f"buffer state: {bad} rows with a NaN or infinite log-prob dropped",
                          RuntimeWarning, stacklevel=2)
            self._items = {pid: deque(r for r in dq if finite_logprobs(r))
                           for pid, dq in self._items.items()}
            self._items = {pid: dq for pid, dq in self._items.items() if dq}
        self._refreshed = {int(p): None for p in d["refreshed"] if int(p) in self._items}
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = d["rng"]
        self.last_modes = []

    def save(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to ``path`` atomically.

        The state goes to a temporary file in the same directory, is fsynced, then moved over
        ``path`` with ``os.replace``; a crash mid-write leaves any previous file intact.
        """
        from tba_lab.checkpoint import atomic_torch_save

        atomic_torch_save(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ReplayBuffer":
        """Read a buffer written by ``save`` (safe load: ``torch.load(weights_only=True)``)."""
        d = torch.load(os.fspath(path), weights_only=True)
        buf = cls()
        buf.load_state_dict(d)
        return buf
