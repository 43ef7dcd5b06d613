"""Notebook 03 (replay buffer sampling): its exercises (per-prompt storage with dedup, the
reward-mode softmax, the recency-mode prompt probabilities, the trainer's whole sampler) and the
helpers its cells use: synthetic rollouts, exact draw probabilities, measured counts and bars of
both (the notebook's own cell runs a fake searcher/trainer loop on the real buffer).
"""
from __future__ import annotations

import random
from collections import Counter

import numpy as np

from tba_lab.buffer import ReplayBuffer, Rollout, reward_softmax
from tba_lab.lab.course import exercise

# (n,) float64 softmax(inv_temp * rewards): the buffer's reward mode, reference of 03.reward_weights
reward_probabilities = reward_softmax


# ------------------------------------------------------------------ helpers
def fake_rollout(prompt_id: int, response_ids, reward: float = 0.0, version: int = 0) -> Rollout:
    """A synthetic rollout: prompt tokens ``[100 + prompt_id]``, the given response tokens, and
    made-up log-probs (-1 per token), so the buffer can be studied without a model."""
    resp = [int(t) for t in response_ids]
    return Rollout(prompt_id=int(prompt_id), prompt_ids=[100 + int(prompt_id)], response_ids=resp,
                   reward=float(reward), ref_token_logps=[-1.0] * len(resp),
                   behaviour_token_logps=[-1.0] * len(resp), version=int(version))


def prompt_probabilities(num_prompts: int, refreshed, recency_prob: float) -> np.ndarray:
    """(num_prompts,) probability that ONE batch slot picks each prompt: with probability m
    (``recency_prob``) uniformly among the ``refreshed`` ids, otherwise uniformly among all;
    with none refreshed, always uniformly (the buffer's ``recency_fallback="reward"``)."""
    n = int(num_prompts)
    p = np.full(n, 1.0 / n)
    fresh = sorted(set(int(i) for i in refreshed))
    if fresh:
        p *= 1.0 - recency_prob
        p[fresh] += recency_prob / len(fresh)
    return p


def inclusion_probabilities(p, k: int, logits=None) -> np.ndarray:
    """(n,) exact probability that each item is among ``k`` draws without replacement (a demo's
    few items), from the sampler's own choices, every path enumerated (:func:`_exact_outcomes`):
    each draw the softmax of the ``logits`` of the items left (exact where ``p`` underflows), or
    ``p`` renormalised over them (uniform once only items with p = 0 are left)."""
    with np.errstate(divide="ignore"):  # log(0) = -inf: an item the first draw cannot take
        z = np.log(np.asarray(p, dtype=np.float64)) if logits is None else \
            np.asarray(logits, dtype=np.float64)
    low = z[np.isfinite(z)].min(initial=0.0) - 1e4  # exp(-1e4) = 0 beside any finite logit
    out = np.zeros(len(z))
    for ((_, rows),), prob in _exact_outcomes({0: _rows(0, np.maximum(z, low))}, set(), 1,
                                               min(k, len(z)), 0.0, 1.0).items():
        out[list(rows)] += prob
    return np.minimum(out, 1.0)  # a sure item sums to 1 + rounding


def single_draw_probabilities(buffer: ReplayBuffer) -> list[tuple[Rollout, float]]:
    """Every stored item with its exact probability of being ``buffer.sample(1, 1)`` (recency
    mode: the newest item of a refreshed prompt; reward mode: a uniform prompt, then
    softmax(inv_temp * reward) over its items)."""
    prompts, fresh = buffer.prompt_ids(), buffer.refreshed()
    m = buffer.recency_prob if fresh else 0.0
    out = []
    for pid in prompts:
        items = buffer.items(pid)
        w = (1.0 - m) / len(prompts) * reward_probabilities([r.reward for r in items], buffer.inv_temp)
        if pid in fresh:
            w[-1] += m / len(fresh)
        out.extend(zip(items, w.tolist()))
    return out


def draw_counts(buffer: ReplayBuffer, n_draws: int, num_prompts: int = 1, group_size: int = 1,
                key=lambda r: (r.prompt_id, tuple(r.response_ids))) -> Counter:
    """Counts of ``key(item)`` over every item of ``n_draws`` calls of
    ``buffer.sample(num_prompts, group_size)`` (default key: prompt and response)."""
    return Counter(key(r) for _ in range(n_draws) for r in buffer.sample(num_prompts, group_size))


def bar_compare(ax, labels, measured, expected, n_draws: int | None = None) -> None:
    """Measured frequencies next to expected probabilities on ``ax``; with ``n_draws`` the
    measured bars carry +-2 binomial standard errors, 2 * sqrt(p (1 - p) / n_draws)."""
    x = np.arange(len(labels))
    expected = np.asarray(expected, dtype=np.float64)
    err = None if not n_draws else 2 * np.sqrt(expected * (1 - expected) / n_draws)
    ax.bar(x - 0.2, measured, 0.4, label="measured", color="C0", yerr=err, capsize=2)
    ax.bar(x + 0.2, expected, 0.4, label="expected", color="C1", alpha=0.7)
    ax.set_xticks(x, [str(t) for t in labels])
    ax.grid(axis="y", alpha=0.3)


def gap_in_standard_errors(measured, expected, n_draws: int) -> float:
    """Largest |measured - expected| in binomial standard errors sqrt(p (1 - p) / n_draws) (a
    bar with p = 0 or 1: 0 if matched exactly, else infinity); chance gives up to about 3."""
    m = np.asarray(measured, dtype=np.float64)
    p = np.clip(np.asarray(expected, dtype=np.float64), 0.0, 1.0)  # 1 + rounding would give NaN
    se = np.sqrt(p * (1 - p) / n_draws)
    gap = np.abs(m - p)
    z = np.where(se > 0, gap / np.where(se > 0, se, 1.0), np.where(gap > 1e-12, np.inf, 0.0))
    return float(z.max()) if z.size else 0.0


# --------------------------------------------------------------- 03.dedup
def dedup_reference(rollouts, capacity):
    buf = ReplayBuffer(capacity_per_prompt=capacity, dedup=True)
    buf.add(rollouts)
    return buf.items(rollouts[0].prompt_id) if rollouts else []


def _dedup_cases():
    rng = np.random.default_rng(3)
    # hand-made: the duplicate [1, 2] arrives again with a new reward and version
    seq = [fake_rollout(0, t, r, v) for t, r, v in
           [([1, 2], 0, 0), ([3], 1, 0), ([1, 2], 1, 1), ([4, 5, 6], 0, 1)]]
    cases = [((seq, cap), {}) for cap in (8, 2, 1)]  # 2, 1: fewer than the distinct responses
    for n, cap in ((30, 5), (50, 12), (20, 64)):  # random streams with many duplicates
        seq = [fake_rollout(7, rng.integers(3, size=2), float(rng.random() < 0.5), v // 4)
               for v in range(n)]
        cases.append(((seq, cap), {}))
    return cases


def _dedup_compare(got, want):
    try:
        g = [(tuple(r.response_ids), r.reward, r.version) for r in got]
    except (TypeError, AttributeError):
        return f"expected a list of Rollout objects, got {type(got).__name__}"
    w = [(tuple(r.response_ids), r.reward, r.version) for r in want]
    if len(g) != len(w):
        return f"stored {len(g)} items, expected {len(w)} (capacity or duplicates?)"
    i = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), None)
    return None if i is None else (f"item {i} (0 = oldest) is response {list(g[i][0])} (version "
                                   f"{g[i][2]}), expected response {list(w[i][0])} (version {w[i][2]})")


@exercise("03.dedup", "per-prompt storage: newest copy wins, capacity drops the oldest",
          dedup_reference, _dedup_cases, compare=_dedup_compare)
def dedup_stub(rollouts, capacity):
    """The stored list, oldest first, of at most ``capacity`` of ``rollouts`` (one prompt, in
    arrival order): a repeated response replaces its old copy, capacity drops the oldest."""
    # YOUR CODE HERE
    raise NotImplementedError


# ------------------------------------------------------- 03.reward_weights
@exercise("03.reward_weights", "reward-mode item probabilities softmax(inv_temp * reward), stable",
          reward_probabilities, lambda: [
              ((np.array([0.0, 1.0, 1.0, 0.0]), 0.0), {}),          # inv_temp 0: uniform
              ((np.array([0.0, 1.0, 1.0, 0.0]), 2.0), {}),
              ((np.array([0.35] * 5, dtype=np.float32), 7.0), {}),  # all equal: uniform
              ((np.random.default_rng(0).random(8), 3.0), {}),
              ((np.array([0.0, 1.0, 0.5]), 1000.0), {}),            # overflows if not stabilised
              ((np.array([1.0]), 5.0), {})])                        # a single item
def reward_weights_stub(rewards, inv_temp):
    """(n,) float softmax(inv_temp * rewards) of the (n,) ``rewards``, without overflow."""
    # YOUR CODE HERE
    raise NotImplementedError


# --------------------------------------------------------- 03.prompt_probs
@exercise("03.prompt_probs", "probability that one slot picks each prompt, recency probability m",
          prompt_probabilities, lambda: [
              ((10, [2, 5], 0.8), {}), ((10, [2, 5], 0.0), {}), ((10, [2, 5], 1.0), {}),
              ((6, [], 0.8), {}), ((4, [0, 1, 2, 3], 0.5), {}),
              ((300, list(range(0, 300, 7)), 0.3), {})])
def prompt_probs_stub(num_prompts, refreshed, m):
    """(num_prompts,) probability that one batch slot picks each prompt: with probability m
    uniformly among ``refreshed``, otherwise (or with none refreshed) uniformly among all."""
    # YOUR CODE HERE
    raise NotImplementedError


# --------------------------------------------------------- 03.sample_batch
class _Draw(random.Random):
    """The ``rng`` of one of the checker's draws: seeded (so the check is deterministic), and
    carrying its scenario (``.scenario``) and whether it is the scenario's last draw."""


def _sample_batch_reference(groups, fresh, num_prompts, k, recency_prob, inv_temp, rng):
    """A draw is compared not with one reference batch (samples differ) but with the exact
    probabilities of its scenario's batches: the reference is the draw's rng."""
    return rng


def _rows(pid, rewards):
    from tba_lab.minimal import Row

    return [Row(pid, [100 + pid], [pid, j], float(r), -1.0, j) for j, r in enumerate(rewards)]


class _Branches(random.Random):
    """An rng walking one path of ``tba_lab.minimal.sample_batch``'s random choices: those in
    ``path``, then the first possible; ``steps``: each choice and the possible ones, ``prob``:
    the path's probability. ``random()`` (only compared with m): 0.0 with probability m, else 1."""

    def __init__(self, path, m):
        super().__init__(0)
        self.path, self.m, self.steps, self.prob = path, m, [], 1.0

    def _pick(self, probs):
        possible = [i for i, p in enumerate(probs) if p > 0]
        i = self.path[len(self.steps)] if len(self.steps) < len(self.path) else possible[0]
        self.steps.append((i, possible))
        self.prob *= probs[i]
        return i

    def random(self):
        return (0.0, 1.0)[self._pick([self.m, 1.0 - self.m])]

    def choices(self, population, weights=None, *, k=1):
        w = [1.0] * len(population) if weights is None else [float(x) for x in weights]
        return [population[self._pick([x / sum(w) for x in w])]]

    def choice(self, seq):
        return self.choices(seq)[0]


def _outcome(batch, groups, k):
    """A batch per slot as (prompt id, sorted indices of its rows in the prompt's group), or
    why it cannot be read so."""
    out = []
    for i in range(0, len(batch), k):
        stored = groups.get(getattr(batch[i], "prompt_id", None), [])
        index = [next((j for j, x in enumerate(stored) if x is r), None) for r in batch[i:i + k]]
        if None in index:
            return f"slot {i // k}: its rows are not all rows stored for one prompt (prompt-major)"
        out.append((batch[i].prompt_id, tuple(sorted(index))))
    return tuple(out)


def _exact_outcomes(groups, fresh, b, k, m, inv_temp) -> dict:
    """{outcome: probability} of ``tba_lab.minimal.sample_batch``, every path walked."""
    from tba_lab.minimal import sample_batch

    exact, todo = Counter(), [[]]
    while todo:
        rng = _Branches(todo.pop(), m)
        exact[_outcome(sample_batch(groups, fresh, b, k, m, inv_temp, rng), groups, k)] += rng.prob
        for depth in range(len(rng.path), len(rng.steps)):   # the other choices of new steps
            prefix = [i for i, _ in rng.steps[:depth]]
            todo += [prefix + [j] for j in rng.steps[depth][1][1:]]
    return exact


def _sample_batch_scenarios():
    """(name, groups, fresh, B, K, m, inv_temp, draws, what the scenario checks)."""
    u = [0, 1, 0, 1, 1, 0]
    return [
        ("recency (m = 1, fresh {2, 4}, B = 1, K = 3)", {p: _rows(p, [0, 1, 0, 1, 1]) for p in range(6)},
         {2, 4}, 1, 3, 1.0, 0.0, 1500, "with m = 1 a slot takes a fresh prompt and its K newest rows"),
        ("m = 0.5, fresh {2, 5}, inv_temp = 2, B = 1, K = 1", {p: _rows(p, [0, 1, 1, 0]) for p in range(10)},
         {2, 5}, 1, 1, 0.5, 2.0, 4000, "probability m: a fresh prompt's newest row; else any prompt, "
         "uniformly, and a row by softmax(inv_temp * reward)"),
        ("reward mode (no fresh prompt left, m = 0.7), 6 rows, K = 3, inv_temp = 1.5", {0: _rows(0, u)},
         set(), 1, 3, 0.7, 1.5, 2000, "reward mode draws K rows WITHOUT replacement, each by the "
         "softmax(inv_temp * reward) of the rows left"),
        *[(f"top-up (2 rows, K = 5, m = {m:g}, inv_temp = 2)", {0: _rows(0, [0, 1])}, {0}, 1, 5, m, 2.0,
           1000, "a prompt with fewer than K rows gives all of its rows, then more drawn WITH "
           "replacement by softmax(inv_temp * reward)") for m in (1.0, 0.0)],
        ("prompts distinct (3 prompts, fresh {1}, m = 1, B = 5, K = 2)", {p: _rows(p, [0, 1]) for p in range(3)},
         {1}, 5, 2, 1.0, 0.0, 1500, "a prompt appears again only once all stored prompts are in the "
         "batch (then start over); with m = 1 a fresh prompt comes first"),
        ("reward mode, 6 rows, K = 4, inv_temp = 1000 (the 0-reward rows underflow)", {0: _rows(0, u)},
         set(), 1, 4, 0.0, 1000.0, 600, "after the three 1s, the softmax of the rows left (uniform), "
         "though their weights among all rows underflow to 0"),
    ]


def _sample_batch_cases():
    cases = []
    for s, spec in enumerate(_sample_batch_scenarios()):
        groups, fresh, b, k, m, t, n = spec[1:8]
        state = {"spec": spec, "seen": Counter(), "exact": _exact_outcomes(groups, fresh, b, k, m, t)}
        for i in range(n):
            rng = _Draw(1000 * s + i)
            rng.scenario, rng.last = state, i == n - 1
            cases.append(((groups, fresh, b, k, m, t, rng), {}))
    return cases


def _sample_batch_compare(got, draw):
    """Each batch must be one the sampler can return; a scenario's batches, once all are in,
    must follow its exact probabilities (one chi-square test; chance fails it 1 in 10,000)."""
    from scipy.stats import chisquare

    state = draw.scenario
    name, groups, fresh, b, k, m, t, n, rule = state["spec"]
    if not isinstance(got, (list, tuple)) or len(got) != b * k:
        return f"scenario '{name}': expected a list of B*K = {b * k} rows, got {type(got).__name__}"
    key, exact = _outcome(got, groups, k), state["exact"]
    if isinstance(key, str):
        return f"scenario '{name}': {key}"
    if key not in exact:
        return (f"scenario '{name}': the batch (per slot: prompt, indices of its rows) {list(key)} "
                f"cannot happen: {rule}")
    state["seen"][key] += 1
    if not draw.last:
        return None
    keys = list(exact)
    seen, p = np.array([state["seen"][x] for x in keys]), np.array([exact[x] for x in keys])
    pvalue = chisquare(seen, n * p / p.sum()).pvalue if len(keys) > 1 else 1.0
    if pvalue < 1e-4:
        i = int(np.argmax(np.abs(seen - n * p) / np.sqrt(n * p)))
        return (f"scenario '{name}', {n} seeded draws: the batches do not follow the exact "
                f"probabilities (chi-square p = {pvalue:.1g}); furthest off, {list(keys[i])}: "
                f"{seen[i]} times, expected {n * p[i]:.0f} ({rule})")
    return None


@exercise("03.sample_batch",
          "the trainer's sampler: recency m, reward softmax, distinct prompts, top-up",
          _sample_batch_reference, _sample_batch_cases, compare=_sample_batch_compare)
def sample_batch_stub(groups, fresh, num_prompts, k, recency_prob, inv_temp, rng):
    """The trainer's batch, as ``tba_lab.minimal.sample_batch``: a list of B*K of the rows
    stored in ``groups`` ({prompt id: rows, oldest first}), prompt-major, every random choice
    from ``rng``: per slot a prompt not yet in the batch, either one of the ``fresh`` ones
    (probability m) with its K newest rows, or any, with K rows drawn without replacement by
    softmax(inv_temp * reward); a prompt with fewer than K rows is topped up with replacement."""
    # YOUR CODE HERE
    raise NotImplementedError
