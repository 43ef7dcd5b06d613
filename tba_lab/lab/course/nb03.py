"""Notebook 03 (replay buffer sampling): exercises and the small helpers the notebook uses.

Exercises
    03.dedup          storage of one prompt: newest copy of a response wins, capacity drops the oldest
    03.reward_weights item probabilities softmax(inv_temp * reward), numerically stable
    03.prompt_probs   probability that one batch slot picks each prompt (recency probability m)
    03.sample_batch   the trainer's whole sampler, as tba_lab.minimal.sample_batch, checked
                      statistically against the exact probabilities of the two above

Helpers (used by the notebook's cells, so that no reusable code lives in a cell)
    fake_rollout             a synthetic :class:`~tba_lab.buffer.Rollout` (tiny token lists)
    reward_probabilities     reference of 03.reward_weights (the buffer's own softmax)
    prompt_probabilities     reference of 03.prompt_probs
    inclusion_probabilities  exact chance that each item is among K successive draws
    single_draw_probabilities exact distribution of one draw (B = 1 prompt, K = 1 item)
    draw_counts              draw many single samples from a buffer and count what came out
    gap_in_standard_errors   how far measured frequencies are from expected ones, in standard errors
    bar_compare              measured frequencies next to expected probabilities, on one Axes
    simulate_pipeline        a fake searcher/trainer loop on the real ReplayBuffer (no model):
                             staleness of what the trainer samples, per mode
"""
from __future__ import annotations

import random
from collections import Counter

import numpy as np

from tba_lab.buffer import ReplayBuffer, Rollout, reward_softmax
from tba_lab.lab.course import Exercise


# ------------------------------------------------------------------ helpers
def fake_rollout(prompt_id: int, response_ids, reward: float = 0.0, version: int = 0) -> Rollout:
    """A synthetic rollout: prompt tokens ``[100 + prompt_id]``, the given response tokens, and
    made-up log-probs (-1 per token), so the buffer can be studied without a model."""
    resp = [int(t) for t in response_ids]
    return Rollout(prompt_id=int(prompt_id), prompt_ids=[100 + int(prompt_id)], response_ids=resp,
                   reward=float(reward), ref_token_logps=[-1.0] * len(resp),
                   behaviour_token_logps=[-1.0] * len(resp), version=int(version))


def reward_probabilities(rewards, inv_temp: float) -> np.ndarray:
    """softmax(inv_temp * rewards) as the buffer's reward mode uses it (float64, sums to 1)."""
    return reward_softmax(rewards, float(inv_temp))


def prompt_probabilities(num_prompts: int, refreshed, recency_prob: float) -> np.ndarray:
    """Probability that ONE batch slot (B = 1) picks each of the prompts ``0 .. num_prompts-1``.

    With probability m (``recency_prob``) the slot picks uniformly among the ``refreshed``
    prompts (refreshed since the last sync), otherwise uniformly among all prompts. With no
    refreshed prompt, the slot always uses reward mode (uniform over all prompts): the buffer's
    ``recency_fallback="reward"`` rule (the default, ``"newest"``, would take the newest prompt).
    """
    n = int(num_prompts)
    p = np.full(n, 1.0 / n)
    fresh = sorted(set(int(i) for i in refreshed))
    if fresh:
        p *= 1.0 - recency_prob
        p[fresh] += recency_prob / len(fresh)
    return p


def inclusion_probabilities(p, k: int, logits=None) -> np.ndarray:
    """Exact probability that each item is among ``k`` successive draws without replacement
    (draw, remove the item, draw again from the items left, renormalised), by enumerating every
    ordered draw sequence. Fine for the handful of items of a demo (n!/(n-k)! sequences).

    Args:
        p: (n,) probabilities of the first draw, e.g. :func:`reward_probabilities`.
        k: number of draws.
        logits: optional (n,) ``inv_temp * reward``; each draw is then the softmax of the
            logits of the items left, as the buffer draws, exact even where ``p`` underflowed
            to 0 (``p`` is then unused). Without them a draw renormalises ``p`` over the items
            left, and when all of those have ``p == 0`` it takes them uniformly (the buffer's
            draw when their rewards tie).
    Returns:
        (n,) float64, each in [0, 1], summing to ``min(k, n)``.
    """
    with np.errstate(divide="ignore"):  # log(0) = -inf: an item the first draw cannot take
        z = np.log(np.asarray(p, dtype=np.float64)) if logits is None else \
            np.asarray(logits, dtype=np.float64)
    n = len(z)
    if k >= n:
        return np.ones(n)
    out = np.zeros(n)

    def walk(chosen: list[int], prob: float) -> None:
        if len(chosen) == k:
            out[chosen] += prob
            return
        left = [i for i in range(n) if i not in chosen]
        zl = z[left]
        q = np.full(len(left), 1.0 / len(left)) if np.isneginf(zl).all() else np.exp(zl - zl.max())
        q = q / q.sum()
        for i, qi in zip(left, q):
            if qi > 0:
                walk(chosen + [i], prob * qi)

    walk([], 1.0)
    return np.minimum(out, 1.0)  # a sure item sums to 1 + rounding


def single_draw_probabilities(buffer: ReplayBuffer) -> list[tuple[Rollout, float]]:
    """Exact distribution of ``buffer.sample(1, 1)``: every stored item with the probability
    that it is the one drawn (recency mode: the newest item of a refreshed prompt; reward mode:
    a uniform prompt, then softmax(inv_temp * reward) over its items)."""
    prompts = buffer.prompt_ids()
    fresh = buffer.refreshed()
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
    """Call ``buffer.sample(num_prompts, group_size)`` ``n_draws`` times and count ``key(item)``
    over every returned item (default key: which prompt and which response)."""
    c: Counter = Counter()
    for _ in range(n_draws):
        c.update(key(r) for r in buffer.sample(num_prompts, group_size))
    return c


def bar_compare(ax, labels, measured, expected, n_draws: int | None = None) -> None:
    """Grouped bars: measured frequencies next to expected probabilities; with ``n_draws`` the
    measured bars carry +-2 binomial standard errors, 2 * sqrt(p (1 - p) / n_draws)."""
    x = np.arange(len(labels))
    expected = np.asarray(expected, dtype=np.float64)
    err = None if not n_draws else 2 * np.sqrt(expected * (1 - expected) / n_draws)
    ax.bar(x - 0.2, measured, 0.4, label="measured", color="C0", yerr=err, capsize=2)
    ax.bar(x + 0.2, expected, 0.4, label="expected", color="C1", alpha=0.7)
    ax.set_xticks(x, [str(t) for t in labels])
    ax.grid(axis="y", alpha=0.3)


def gap_in_standard_errors(measured, expected, n_draws: int) -> float:
    """Largest |measured - expected| in units of the binomial standard error
    sqrt(p (1 - p) / n_draws) of each bar (a bar with p = 0 or 1 counts 0 if matched exactly,
    infinity otherwise). Chance alone gives values up to about 3 over a few dozen bars; a
    sampler that follows the wrong distribution gives far more with thousands of draws."""
    m = np.asarray(measured, dtype=np.float64)
    p = np.clip(np.asarray(expected, dtype=np.float64), 0.0, 1.0)  # 1 + rounding would give NaN
    se = np.sqrt(p * (1 - p) / n_draws)
    gap = np.abs(m - p)
    z = np.where(se > 0, gap / np.where(se > 0, se, 1.0), np.where(gap > 1e-12, np.inf, 0.0))
    return float(z.max()) if z.size else 0.0


def simulate_pipeline(steps: int = 300, sync_period: int = 1, gen_ticks: int = 2,
                      prompts_per_batch: int = 8, group_size: int = 4, batch_prompts: int = 8,
                      recency_prob: float = 0.8, inv_temp: float = 0.0, max_prompts=None,
                      capacity: int = 16, initial_fill: int = 64, prompt_pool=None,
                      seed: int = 0, dedup: bool = False) -> dict:
    """A fake asynchronous run on the real :class:`ReplayBuffer`, with no model, to see what the
    trainer samples. Time advances in ticks; at each tick:

    * a searcher that started generating ``gen_ticks`` ticks ago delivers ``prompts_per_batch``
      prompts x ``group_size`` responses, tagged with the policy version it pulled when it
      started (the version the trainer had published then); it starts the next batch at once;
    * once the buffer holds ``initial_fill`` rollouts, the trainer samples ``batch_prompts``
      x ``group_size`` rollouts, records their staleness (updates done minus version) and mode,
      and counts one update; every ``sync_period`` updates it publishes (version = updates
      done) and calls ``mark_sync()``.

    Prompt ids come from an endless stream (``prompt_pool=None``: every prompt new, like the
    20,000-problem train split) or cycle through ``prompt_pool`` ids (prompts repeat). A response
    is 3 tokens from a 4-token vocabulary, so repeats happen (and ``dedup=True`` removes them);
    rewards are 0/1 with a per-prompt success rate.

    Returns:
        dict with ``staleness`` (one int per sampled row), ``modes`` (one per sampled group,
        "recency"/"reward"), ``fill_ticks`` (ticks the trainer waited for the initial fill),
        ``updates``, ``duplicates`` (rollouts that replaced a stored copy), ``buffer``.
    """
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(capacity_per_prompt=capacity, recency_prob=recency_prob, inv_temp=inv_temp,
                       seed=seed, max_prompts=max_prompts, dedup=dedup)
    next_prompt, updates, published, ticks, fill_ticks, duplicates = 0, 0, 0, 0, 0, 0
    started = [(0, 0)]  # (tick started, version pulled) of the batch in progress
    staleness: list[int] = []
    modes: list[str] = []
    while updates < steps:
        tick_start, version = started[0]
        if ticks - tick_start >= gen_ticks:  # the searcher's batch is done: deliver it
            batch = []
            for _ in range(prompts_per_batch):
                pid = next_prompt if prompt_pool is None else next_prompt % prompt_pool
                next_prompt += 1
                p_ok = (pid * 0.37) % 1.0  # a fixed success rate per prompt
                for _ in range(group_size):
                    resp = rng.integers(4, size=3)
                    batch.append(fake_rollout(pid, resp, float(rng.random() < p_ok), version))
            duplicates += len(batch) - buf.add(batch)
            started = [(ticks, published)]
        if len(buf) >= max(initial_fill, 1):
            rows = buf.sample(batch_prompts, group_size)
            staleness.extend(ReplayBuffer.staleness(rows, updates))
            modes.extend(buf.last_modes)
            updates += 1
            if updates % sync_period == 0:
                published = updates
                buf.mark_sync()
        else:
            fill_ticks += 1
        ticks += 1
    return {"staleness": staleness, "modes": modes, "fill_ticks": fill_ticks,
            "updates": updates, "duplicates": duplicates, "buffer": buf}


# --------------------------------------------------------------- 03.dedup
def dedup_stub(rollouts, capacity):
    """Store ``rollouts`` (all of ONE prompt, in arrival order) in a list of at most
    ``capacity`` items, oldest first: a response whose ``response_ids`` are already stored
    replaces the old copy and goes to the newest end; beyond capacity the OLDEST item is dropped.
    Return the stored list."""
    # YOUR CODE HERE
    raise NotImplementedError


def dedup_reference(rollouts, capacity):
    buf = ReplayBuffer(capacity_per_prompt=capacity, dedup=True)
    buf.add(rollouts)
    return buf.items(rollouts[0].prompt_id) if rollouts else []


def _dedup_cases():
    rng = np.random.default_rng(3)
    cases = []
    # hand-made: the duplicate [1, 2] arrives again with a new reward and version
    seq = [fake_rollout(0, t, r, v) for t, r, v in
           [([1, 2], 0, 0), ([3], 1, 0), ([1, 2], 1, 1), ([4, 5, 6], 0, 1)]]
    cases.append(((seq, 8), {}))
    cases.append(((seq, 2), {}))  # capacity smaller than the distinct responses
    cases.append(((seq, 1), {}))
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
    for i, (a, b) in enumerate(zip(g, w)):
        if a != b:
            return (f"item {i} (0 = oldest) is response {list(a[0])} (version {a[2]}), expected "
                    f"response {list(b[0])} (version {b[2]})")
    return None


DEDUP = Exercise(
    name="03.dedup",
    description="per-prompt storage: newest copy wins, capacity drops the oldest",
    stub=dedup_stub, reference=dedup_reference, cases=_dedup_cases,
    compare=_dedup_compare)


# ------------------------------------------------------- 03.reward_weights
def reward_weights_stub(rewards, inv_temp):
    """Probabilities softmax(inv_temp * rewards) of drawing each item of one prompt in reward
    mode. ``rewards``: 1-D numpy array (n,); returns a float array (n,) that sums to 1.
    Must not overflow for large inv_temp * reward."""
    # YOUR CODE HERE
    raise NotImplementedError


def _reward_weights_cases():
    rng = np.random.default_rng(0)
    return [
        ((np.array([0.0, 1.0, 1.0, 0.0]), 0.0), {}),          # inv_temp 0: uniform
        ((np.array([0.0, 1.0, 1.0, 0.0]), 2.0), {}),
        ((np.array([0.35] * 5, dtype=np.float32), 7.0), {}),  # all equal: uniform
        ((rng.random(8), 3.0), {}),
        ((np.array([0.0, 1.0, 0.5]), 1000.0), {}),            # overflows if not stabilised
        ((np.array([1.0]), 5.0), {}),                         # a single item
    ]


REWARD_WEIGHTS = Exercise(
    name="03.reward_weights",
    description="reward-mode item probabilities softmax(inv_temp * reward), stable",
    stub=reward_weights_stub, reference=reward_probabilities,
    cases=_reward_weights_cases)


# --------------------------------------------------------- 03.prompt_probs
def prompt_probs_stub(num_prompts, refreshed, m):
    """Probability (array of shape (num_prompts,)) that one batch slot picks each prompt
    0 .. num_prompts-1: with probability m uniformly among ``refreshed`` (prompt ids refreshed
    since the last sync), otherwise uniformly among all prompts. If ``refreshed`` is empty,
    always uniformly among all prompts."""
    # YOUR CODE HERE
    raise NotImplementedError


def _prompt_probs_cases():
    return [((10, [2, 5], 0.8), {}), ((10, [2, 5], 0.0), {}), ((10, [2, 5], 1.0), {}),
            ((6, [], 0.8), {}), ((4, [0, 1, 2, 3], 0.5), {}), ((300, list(range(0, 300, 7)), 0.3), {})]


PROMPT_PROBS = Exercise(
    name="03.prompt_probs",
    description="probability that one slot picks each prompt, recency probability m",
    stub=prompt_probs_stub, reference=prompt_probabilities,
    cases=_prompt_probs_cases)



# --------------------------------------------------------- 03.sample_batch
def sample_batch_stub(groups, fresh, num_prompts, k, recency_prob, inv_temp, rng):
    """The trainer's batch, as ``tba_lab.minimal.sample_batch``: ``num_prompts`` (B) prompts x
    ``k`` (K) rows, prompt-major (a list of B*K rows; rows i*K .. i*K+K-1 share one prompt).

    ``groups``: {prompt id: list of stored rows, oldest first}; each row has ``.reward``.
    ``fresh``: set of prompt ids refreshed since the last publish. ``rng``: a ``random.Random``
    (use it for every random choice). For each of the B slots:

    * take a prompt not yet in this batch; once every stored prompt is in it, start over;
    * with probability ``recency_prob`` (m), when an unused fresh prompt exists: one of them,
      uniformly, and its K NEWEST rows;
    * otherwise: any unused prompt, uniformly, and K of its rows drawn WITHOUT replacement with
      probabilities softmax(inv_temp * reward) over its rows (draw one, remove it, draw again
      from the softmax over the rows left). ``inv_temp`` may be large: at 1000 with 0/1 rewards
      every weight but the best is exactly 0 in floating point, and the rows left after the
      best must still be drawable;
    * a prompt with fewer than K rows gives all of them, then rows drawn WITH replacement
      (softmax(inv_temp * reward)) until the group has K rows.

    Return the rows themselves (the objects stored in ``groups``), a list of B*K.
    """
    # YOUR CODE HERE
    raise NotImplementedError


class _Draw(random.Random):
    """The ``rng`` of one of the checker's draws: seeded (so the check is deterministic), and
    carrying its scenario (``.scenario``) and whether it is the scenario's last draw."""


class _Want:
    """What a draw is compared with: not one reference batch (samples differ) but the exact
    probabilities of its scenario, once its last draw is in (:func:`_sample_batch_compare`)."""

    def __init__(self, draw):
        self.draw = draw


def _sample_batch_reference(groups, fresh, num_prompts, k, recency_prob, inv_temp, rng):
    return _Want(rng)


def _rows(pid, rewards):
    from tba_lab.minimal import Row

    return [Row(pid, [100 + pid], [pid, j], float(r), -1.0, j) for j, r in enumerate(rewards)]


def _sample_batch_scenarios():
    """(name, groups, fresh, B, K, m, inv_temp, draws, expected, measure, structure)."""
    out = []
    g = {p: _rows(p, [0, 1, 0, 1, 1]) for p in range(6)}           # recency: K newest of 2 or 4
    out.append(("recency (m = 1, fresh {2, 4}, B = 1, K = 3)", g, {2, 4}, 1, 3, 1.0, 0.0, 1500,
                prompt_probabilities(6, [2, 4], 1.0), "prompt", "newest"))
    g = {p: _rows(p, [0, 1, 1, 0]) for p in range(10)}             # the two modes mixed
    n, fresh, m, t = 10, [2, 5], 0.5, 2.0
    expect = np.concatenate([(1 - m) / n * reward_probabilities([0, 1, 1, 0], t) for _ in range(n)])
    for p in fresh:
        expect[4 * p + 3] += m / len(fresh)
    out.append(("m = 0.5, fresh {2, 5}, inv_temp = 2, B = 1, K = 1", g, set(fresh), 1, 1, m, t,
                4000, expect, "row", None))
    r = [0, 1, 0, 1, 1, 0]                                          # reward mode, K of 6
    out.append(("reward mode (no fresh prompt left, m = 0.7), 6 rows, K = 3, inv_temp = 1.5",
                {0: _rows(0, r)}, set(), 1, 3, 0.7, 1.5, 2000,
                inclusion_probabilities(reward_probabilities(r, 1.5), 3), "inclusion", "distinct"))
    for m in (1.0, 0.0):                                            # top-up: 2 rows, K = 5
        out.append((f"top-up (2 rows, K = 5, m = {m:g}, inv_temp = 2)", {0: _rows(0, [0, 1])},
                    {0}, 1, 5, m, 2.0, 1000, reward_probabilities([0, 1], 2.0), "topup", "all"))
    g = {p: _rows(p, [0, 1]) for p in range(3)}                     # B > prompts: start over
    out.append(("prompts distinct (3 prompts, fresh {1}, m = 1, B = 5, K = 2)", g, {1}, 5, 2, 1.0,
                0.0, 1500, np.array([0.5, 0.5, 0.5, 0.5]), "slots", "distinct_prompts"))
    u = [0, 1, 0, 1, 1, 0]  # softmax underflow: after the three 1s, the weights left are 0
    out.append(("reward mode, 6 rows, K = 4, inv_temp = 1000 (the 0-reward rows underflow)",
                {0: _rows(0, u)}, set(), 1, 4, 0.0, 1000.0, 600,
                inclusion_probabilities(None, 4, logits=1000.0 * np.array(u, dtype=float)),
                "inclusion", "distinct"))
    return out


def _sample_batch_cases():
    cases = []
    for s, (name, groups, fresh, b, k, m, t, n, *_rest) in enumerate(_sample_batch_scenarios()):
        state = {"name": name, "spec": (name, groups, fresh, b, k, m, t, n, *_rest), "seen": []}
        for i in range(n):
            rng = _Draw(1000 * s + i)
            rng.scenario, rng.last = state, i == n - 1
            cases.append(((groups, fresh, b, k, m, t, rng), {}))
    return cases


def _sample_batch_structure(got, spec) -> str | None:
    name, groups, fresh, b, k, m, t, n, expected, measure, rule = spec
    if not isinstance(got, (list, tuple)) or len(got) != b * k:
        size = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
        return (f"returned {size} rows, expected B*K = {b}*{k} = {b * k} (a prompt with fewer than "
                f"K rows is topped up to K)")
    slots = []
    for i in range(b):
        block = got[i * k:(i + 1) * k]
        pid = getattr(block[0], "prompt_id", None)
        stored = groups.get(pid, [])
        if any(not any(r is x for x in stored) for r in block):
            return f"slot {i}: its rows are not all rows stored for one prompt (prompt-major: K rows per prompt)"
        slots.append(pid)
        if rule == "newest" and sorted(map(id, block)) != sorted(map(id, stored[-k:])):
            return (f"slot {i} (recency mode, m = 1): rows {[r.version for r in block]} of prompt {pid}, "
                    f"expected its K newest {[r.version for r in stored[-k:]]} (index in the group)")
        if rule == "distinct" and len(set(map(id, block))) < k:
            return "a row appears twice in a group of 6 rows: reward mode draws K rows WITHOUT replacement"
        if rule == "all" and set(map(id, block)) != set(map(id, stored)):
            return "a prompt with fewer than K rows must give all of its rows before the top-up"
    whole = len(groups)
    for start in range(0, b, whole):
        part = slots[start:start + whole]
        if len(set(part)) < len(part):
            return (f"prompts {slots}: a prompt appears twice while other stored prompts are unused "
                    f"(start over only when all {whole} are in the batch)")
    if rule == "distinct_prompts" and (slots[0] != 1 or slots[3] != 1):
        return (f"prompts {slots}: with m = 1, slot 0 (and slot 3, after starting over) must take "
                f"the only fresh prompt, 1")
    return None


def _sample_batch_compare(got, want):
    state = want.draw.scenario
    spec = state["spec"]
    problem = _sample_batch_structure(got, spec)
    if problem:
        return f"scenario '{state['name']}': {problem}"
    state["seen"].append(got)
    if not want.draw.last:
        return None
    name, groups, fresh, b, k, m, t, n, expected, measure, rule = spec
    seen = state["seen"]
    if measure == "prompt":
        measured = np.array([sum(g[0].prompt_id == p for g in seen) for p in range(len(groups))]) / n
    elif measure == "row":
        index = {id(r): 4 * p + j for p, rows in groups.items() for j, r in enumerate(rows)}
        measured = np.bincount([index[id(g[0])] for g in seen], minlength=len(expected)) / n
    elif measure == "inclusion":
        rows = groups[0]
        measured = np.array([sum(any(x is r for x in g) for g in seen) for r in rows]) / n
    elif measure == "topup":
        extra = [r.reward for g in seen for r in g[2:]]             # the K - 2 rows of the top-up
        n = len(extra)
        measured = np.array([extra.count(0.0), extra.count(1.0)]) / n
    else:                                                            # slots 1 and 4: prompt 0 or 2
        measured = np.array([sum(g[2].prompt_id == 0 for g in seen), sum(g[2].prompt_id == 2 for g in seen),
                             sum(g[8].prompt_id == 0 for g in seen), sum(g[8].prompt_id == 2 for g in seen)]) / n
    z = gap_in_standard_errors(measured, expected, n)
    if z > 4.5:
        if len(expected) > 8:   # many bars: name the worst one
            se = np.sqrt(expected * (1 - expected) / n)
            i = int(np.argmax(np.abs(measured - expected) / np.where(se > 0, se, 1e-12)))
            shown = f"bar {i} (prompt {i // 4}, row {i % 4}): measured {measured[i]:.3f}, exact {expected[i]:.3f}"
        else:
            shown = (f"measured frequencies {np.round(measured, 3).tolist()}, exact probabilities "
                     f"{np.round(expected, 3).tolist()}")
        return (f"scenario '{name}', {n} seeded draws: {shown}: {z:.1f} standard errors apart "
                f"(chance stays below 4.5)")
    return None


SAMPLE_BATCH = Exercise(
    name="03.sample_batch",
    description="the trainer's sampler: recency m, reward softmax, distinct prompts, top-up",
    stub=sample_batch_stub, reference=_sample_batch_reference,
    cases=_sample_batch_cases, compare=_sample_batch_compare)


EXERCISES = [DEDUP, REWARD_WEIGHTS, PROMPT_PROBS, SAMPLE_BATCH]
