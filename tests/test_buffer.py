"""Tests for tba_lab.buffer: storage rules, sampling distributions, determinism, checkpoints.

Statistical tests compare empirical counts with the intended distribution by a chi-square
goodness-of-fit test (p-value from torch.distributions.Chi2, no scipy) and each also checks that
the same test REJECTS a plausible wrong distribution, so a pass means something. Seeds are fixed,
so the tests are deterministic.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from itertools import permutations

import numpy as np
import pytest
import torch

from tba_lab.buffer import ReplayBuffer, Rollout


# ----------------------------------------------------------------- helpers
def ro(pid: int, resp, reward: float = 0.0, version: int = 0) -> Rollout:
    resp = list(resp)
    return Rollout(
        prompt_id=pid,
        prompt_ids=[100 + pid, 7],
        response_ids=resp,
        reward=float(reward),
        ref_token_logps=[-1.0] * len(resp),
        behaviour_token_logps=[-1.5] * len(resp),
        version=version,
    )


def key(r: Rollout):
    return (r.prompt_id, tuple(r.response_ids), r.reward, r.version)


def chi2_pvalue(counts, probs) -> float:
    """Pearson chi-square goodness-of-fit p-value of integer counts against probabilities."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    expected = counts.sum() * probs / probs.sum()
    assert expected.min() >= 5, "chi-square needs >= 5 expected counts per cell"
    stat = float(((counts - expected) ** 2 / expected).sum())
    dist = torch.distributions.Chi2(torch.tensor(float(len(counts) - 1), dtype=torch.float64))
    return float(1.0 - dist.cdf(torch.tensor(stat, dtype=torch.float64)))


def softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


# ------------------------------------------------------------ storage rules
def test_dedup_newest_copy_wins():
    buf = ReplayBuffer(capacity_per_prompt=8, dedup=True)
    assert buf.add([ro(0, [1, 2], 0.0, version=0), ro(0, [3], 0.5, version=0)]) == 2
    assert buf.add([ro(0, [1, 2], 1.0, version=5)]) == 0  # duplicate: replaces, not counted
    items = buf.items(0)
    assert [tuple(r.response_ids) for r in items] == [(3,), (1, 2)]  # moved to the newest end
    assert items[-1].version == 5 and items[-1].reward == 1.0
    assert len(buf) == 2
    # duplicates within one call: the later copy wins; same tokens under another prompt are kept
    assert buf.add([ro(0, [9], 0.1), ro(0, [9], 0.2), ro(1, [1, 2])]) == 2
    assert [r.reward for r in buf.items(0) if r.response_ids == [9]] == [0.2]
    assert buf.num_prompts() == 2 and len(buf) == 4


def test_capacity_keeps_newest():
    buf = ReplayBuffer(capacity_per_prompt=3, dedup=True)
    buf.add([ro(0, [i], version=i) for i in range(5)])
    assert [r.version for r in buf.items(0)] == [2, 3, 4]
    buf.add([ro(0, [2], version=9)])  # re-adding an old sequence refreshes it instead of growing
    assert [r.version for r in buf.items(0)] == [3, 4, 9]
    assert len(buf) == 3


def test_default_keeps_repeats_so_a_recency_group_is_the_searchers_sample():
    """Without de-duplication the K newest items of a prompt are the searcher's group as it
    sampled it (6 copies of the likely answer, 2 others); with it, the group is 3 distinct
    answers plus 5 uniform resamples, and the likely answer's share falls from 6/8."""
    group = [ro(0, [4, 2], 1.0)] * 6 + [ro(0, [5], 0.0), ro(0, [6, 1], 0.0)]
    buf = ReplayBuffer(capacity_per_prompt=16, recency_prob=1.0, seed=0)
    assert buf.add(group) == 8 and len(buf) == 8
    for _ in range(5):
        assert [key(r) for r in buf.sample(1, 8)] == [key(r) for r in group]
    dd = ReplayBuffer(capacity_per_prompt=16, recency_prob=1.0, seed=0, dedup=True)
    assert dd.add(group) == 3 and len(dd) == 3
    share = np.mean([sum(r.response_ids == [4, 2] for r in dd.sample(1, 8)) / 8
                     for _ in range(2000)])
    assert abs(share - (1 + 5 / 3) / 8) < 0.01  # one stored copy + 5 draws at 1/3 each


def test_reward_mode_without_dedup_draws_answers_at_their_sampled_frequency():
    """First row of a reward-mode group (inv_temp 0): P(answer) = its share of the stored
    samples (6/8 for the repeated one); a de-duplicated buffer would give 1/3."""
    buf = ReplayBuffer(capacity_per_prompt=16, recency_prob=0.0, seed=4)
    buf.add([ro(0, [4, 2])] * 6 + [ro(0, [5]), ro(0, [6, 1])])
    counts = Counter(tuple(buf.sample(1, 2)[0].response_ids) for _ in range(3000))
    observed = [counts[(4, 2)], counts[(5,)], counts[(6, 1)]]
    assert chi2_pvalue(observed, [6, 1, 1]) > 1e-3
    assert chi2_pvalue(observed, [1, 1, 1]) < 1e-6


def test_add_rejects_bad_rollouts_atomically():
    buf = ReplayBuffer()
    bad = ro(0, [1, 2])
    bad.ref_token_logps = [-1.0]
    with pytest.raises(ValueError, match="ref_token_logps"):
        buf.add([ro(0, [5]), bad])
    with pytest.raises(ValueError, match="non-finite reward"):
        buf.add([ro(0, [5], reward=float("nan"))])
    assert len(buf) == 0 and buf.num_prompts() == 0


def test_staleness():
    rs = [ro(0, [1], version=3), ro(0, [2], version=7)]
    assert ReplayBuffer.staleness(rs, 7) == [4, 0]


# ------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"capacity_per_prompt": 0}, "capacity_per_prompt"),
        ({"capacity_per_prompt": 2.5}, "capacity_per_prompt"),
        ({"recency_prob": -0.1}, "recency_prob"),
        ({"recency_prob": 1.5}, "recency_prob"),
        ({"recency_prob": float("nan")}, "recency_prob"),
        ({"inv_temp": -1.0}, "inv_temp"),
        ({"inv_temp": float("inf")}, "inv_temp"),
    ],
)
def test_bad_constructor_args(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ReplayBuffer(**kwargs)


def test_bad_sample_args():
    buf = ReplayBuffer()
    with pytest.raises(ValueError, match="initial fill"):
        buf.sample(1, 1)
    buf.add([ro(0, [1])])
    with pytest.raises(ValueError, match="num_prompts"):
        buf.sample(0, 1)
    with pytest.raises(ValueError, match="group_size"):
        buf.sample(1, 0)
    with pytest.raises(ValueError, match="format"):
        buf.load_state_dict({"format": 999})


# ------------------------------------------------------------------ layout
def test_prompt_major_layout_and_distinct_prompts():
    buf = ReplayBuffer(recency_prob=0.5, inv_temp=1.0, seed=3)
    for pid in range(6):
        buf.add([ro(pid, [pid, j], reward=j) for j in range(5)])
    B, K = 4, 3
    for _ in range(50):
        batch = buf.sample(B, K)
        assert len(batch) == B * K
        groups = [batch[i * K:(i + 1) * K] for i in range(B)]  # (B, K)
        for g in groups:
            assert len({r.prompt_id for r in g}) == 1
            assert all(r.prompt_ids == [100 + g[0].prompt_id, 7] for r in g)
            assert all(r.response_ids[0] == g[0].prompt_id for r in g)
        assert len({g[0].prompt_id for g in groups}) == B  # distinct prompts while enough exist
    # more slots than prompts: every prompt once per round, then repeats
    batch = buf.sample(8, 2)
    ids = [batch[2 * i].prompt_id for i in range(8)]
    assert sorted(ids[:6]) == list(range(6))
    assert len(batch) == 16


# ------------------------------------------------------------ recency mode
def test_recency_mode_returns_newest_of_refreshed_then_falls_back():
    buf = ReplayBuffer(capacity_per_prompt=16, recency_prob=1.0, seed=1, recency_fallback="reward")
    for pid in range(5):
        buf.add([ro(pid, [pid, j], version=0) for j in range(6)])
    buf.mark_sync()
    buf.add([ro(1, [1, 100 + j], version=1) for j in range(3)])
    buf.add([ro(3, [3, 100 + j], version=1) for j in range(3)])
    K = 4
    seen = Counter()
    for _ in range(300):
        batch = buf.sample(1, K)
        pid = batch[0].prompt_id
        assert pid in (1, 3)
        assert [key(r) for r in batch] == [key(r) for r in buf.items(pid)[-K:]]
        assert buf.last_modes == ["recency"]
        seen[pid] += 1
    assert seen[1] > 100 and seen[3] > 100  # both refreshed prompts get picked
    # two slots, two refreshed prompts: both used; a third slot falls back to reward mode
    batch = buf.sample(3, K)
    assert {batch[0].prompt_id, batch[K].prompt_id} == {1, 3}
    assert buf.last_modes == ["recency", "recency", "reward"]
    # after a sync with no new adds there is nothing recent: reward mode over all prompts
    buf.mark_sync()
    seen = Counter()
    for _ in range(300):
        seen[buf.sample(1, K)[0].prompt_id] += 1
        assert buf.last_modes == ["reward"]
    assert set(seen) == set(range(5))


def test_recency_fallback_newest_takes_the_most_recently_refreshed_unused_prompts():
    """With no prompt refreshed since the last sync (the trainer outran the searcher), a recency
    slot takes the newest unused prompt instead of a reward-mode draw over every prompt."""
    buf = ReplayBuffer(capacity_per_prompt=8, recency_prob=1.0, seed=2)  # the default: "newest"
    for pid in range(6):
        buf.add([ro(pid, [pid, j], version=pid) for j in range(4)])
    buf.add([ro(1, [1, 9], version=7)])  # prompt 1 becomes the most recently refreshed
    buf.mark_sync()
    batch = buf.sample(3, 4)
    assert [batch[4 * i].prompt_id for i in range(3)] == [1, 5, 4]
    assert buf.last_modes == ["recency"] * 3
    assert [key(r) for r in batch[:4]] == [key(r) for r in buf.items(1)[-4:]]
    # refreshed prompts still come first (uniformly), then the newest of the rest
    buf.add([ro(2, [2, 8], version=8)])
    for _ in range(200):
        b = buf.sample(2, 4)
        assert [b[0].prompt_id, b[4].prompt_id] == [2, 1]
    # the old rule: reward mode over all prompts
    old = ReplayBuffer(capacity_per_prompt=8, recency_prob=1.0, seed=2, recency_fallback="reward")
    for pid in range(6):
        old.add([ro(pid, [pid, j]) for j in range(4)])
    old.mark_sync()
    seen = Counter(old.sample(1, 4)[0].prompt_id for _ in range(600))
    assert set(seen) == set(range(6)) and old.last_modes == ["reward"]
    with pytest.raises(ValueError, match="recency_fallback"):
        ReplayBuffer(recency_fallback="oldest")


def test_recency_mode_with_fewer_items_than_k():
    buf = ReplayBuffer(recency_prob=1.0, seed=0)
    buf.add([ro(0, [1]), ro(0, [2])])
    for _ in range(20):
        batch = buf.sample(1, 5)
        got = Counter(tuple(r.response_ids) for r in batch)
        assert set(got) == {(1,), (2,)} and sum(got.values()) == 5


def test_mixing_probability():
    """P(slot lands on a refreshed prompt) = m + (1 - m) * R / N, and recency draws ~ m."""
    m, N, R, draws = 0.3, 10, 2, 20000
    buf = ReplayBuffer(recency_prob=m, seed=7)
    for pid in range(N - R):
        buf.add([ro(pid, [pid, j]) for j in range(3)])
    buf.mark_sync()
    for pid in range(N - R, N):
        buf.add([ro(pid, [pid, j]) for j in range(3)])
    hits = recency = 0
    for _ in range(draws):
        pid = buf.sample(1, 2)[0].prompt_id
        hits += pid >= N - R
        recency += buf.last_modes[0] == "recency"
    for observed, p in [(hits, m + (1 - m) * R / N), (recency, m)]:
        sd = math.sqrt(draws * p * (1 - p))
        assert abs(observed - draws * p) < 4.5 * sd, (observed, draws * p, sd)
    # power: ignoring m (pure uniform prompt choice) would give R/N = 0.2, far outside
    assert abs(hits - draws * R / N) > 20 * math.sqrt(draws * 0.2 * 0.8)


# ------------------------------------------------------------- reward mode
def test_reward_mode_matches_softmax():
    rewards = [0.0, 0.5, 1.0, 2.0, -1.0]
    beta_inv = 1.3
    buf = ReplayBuffer(recency_prob=0.0, inv_temp=beta_inv, seed=11)
    buf.add([ro(0, [j], reward=r) for j, r in enumerate(rewards)])
    counts = Counter(buf.sample(1, 1)[0].response_ids[0] for _ in range(20000))
    c = [counts[j] for j in range(len(rewards))]
    assert chi2_pvalue(c, softmax(beta_inv * np.array(rewards))) > 1e-3
    assert chi2_pvalue(c, np.ones(len(rewards))) < 1e-6  # power: uniform is rejected
    assert chi2_pvalue(c, softmax(0.5 * beta_inv * np.array(rewards))) < 1e-6  # wrong temp too


def test_reward_mode_uniform_when_inv_temp_zero():
    rewards = [0.0, 3.0, -2.0, 1.0]
    buf = ReplayBuffer(recency_prob=0.0, inv_temp=0.0, seed=12)
    buf.add([ro(0, [j], reward=r) for j, r in enumerate(rewards)])
    counts = Counter(buf.sample(1, 1)[0].response_ids[0] for _ in range(20000))
    c = [counts[j] for j in range(len(rewards))]
    assert chi2_pvalue(c, np.ones(len(rewards))) > 1e-3
    assert chi2_pvalue(c, softmax(np.array(rewards))) < 1e-6  # power


def test_reward_mode_without_replacement_is_successive_sampling():
    """K=2 ordered pairs vs the exact law P(a, b) = p_a * p_b / (1 - p_a) (slow reference)."""
    rewards = [0.0, 1.0, 2.0, 0.5]
    t = 0.7
    p = softmax(t * np.array(rewards))
    buf = ReplayBuffer(recency_prob=0.0, inv_temp=t, seed=13)
    buf.add([ro(0, [j], reward=r) for j, r in enumerate(rewards)])
    cells = list(permutations(range(4), 2))
    counts = Counter()
    for _ in range(20000):
        a, b = (r.response_ids[0] for r in buf.sample(1, 2))
        assert a != b  # without replacement when the prompt has >= K items
        counts[(a, b)] += 1
    exact = [p[a] * p[b] / (1 - p[a]) for a, b in cells]
    c = [counts[cell] for cell in cells]
    assert chi2_pvalue(c, exact) > 1e-3
    assert chi2_pvalue(c, [p[a] * p[b] for a, b in cells]) < 1e-6  # power: with-replacement law


def test_with_replacement_only_when_fewer_than_k():
    buf = ReplayBuffer(recency_prob=0.0, inv_temp=2.0, seed=5)
    buf.add([ro(0, [j], reward=j) for j in range(5)])  # 5 items
    buf.add([ro(1, [j], reward=j) for j in range(3)])  # 3 items
    for _ in range(200):
        g = buf.sample(1, 5)
        ids = [tuple(r.response_ids) for r in g]
        if g[0].prompt_id == 0:
            assert len(set(ids)) == 5  # exactly K items: never a repeat
        else:
            assert set(ids) == {(0,), (1,), (2,)} and len(ids) == 5  # all items, then repeats


def test_prompt_selection_uniform():
    N = 8
    buf = ReplayBuffer(recency_prob=0.0, inv_temp=1.0, seed=21)
    for pid in range(N):  # prompts with very different item counts and rewards
        buf.add([ro(pid, [pid, j], reward=pid * j) for j in range(1 + 3 * pid)])
    counts = Counter(buf.sample(1, 1)[0].prompt_id for _ in range(20000))
    c = [counts[pid] for pid in range(N)]
    assert chi2_pvalue(c, np.ones(N)) > 1e-3
    assert chi2_pvalue(c, [1 + 3 * pid for pid in range(N)]) < 1e-6  # power: item-weighted


# ------------------------------------------------ determinism and checkpoints
def _filled(seed: int) -> ReplayBuffer:
    buf = ReplayBuffer(capacity_per_prompt=6, recency_prob=0.5, inv_temp=0.8, seed=seed)
    for pid in range(7):
        buf.add([ro(pid, [pid, j], reward=(j * 37 % 5) / 2, version=j % 3) for j in range(9)])
    buf.mark_sync()
    buf.add([ro(2, [2, 50], reward=1.0, version=4), ro(5, [5, 50], reward=0.0, version=4)])
    return buf


def test_determinism_by_seed():
    a, b, c = _filled(0), _filled(0), _filled(1)
    sa = [[key(r) for r in a.sample(3, 4)] for _ in range(20)]
    sb = [[key(r) for r in b.sample(3, 4)] for _ in range(20)]
    sc = [[key(r) for r in c.sample(3, 4)] for _ in range(20)]
    assert sa == sb
    assert sa != sc


def test_save_load_round_trip(tmp_path):
    buf = _filled(4)
    for _ in range(5):
        buf.sample(2, 3)  # advance the rng so its state matters
    path = tmp_path / "buffer.pt"
    buf.save(path)
    restored = ReplayBuffer.load(path)
    via_dict = ReplayBuffer()
    via_dict.load_state_dict(buf.state_dict())
    assert len(restored) == len(buf) and restored.num_prompts() == buf.num_prompts()
    assert restored.refreshed() == buf.refreshed() == [2, 5]
    assert (restored.capacity_per_prompt, restored.recency_prob, restored.inv_temp) == (6, 0.5, 0.8)
    expected = [[key(r) for r in buf.sample(3, 4)] for _ in range(20)]
    assert [[key(r) for r in restored.sample(3, 4)] for _ in range(20)] == expected
    assert [[key(r) for r in via_dict.sample(3, 4)] for _ in range(20)] == expected
    assert restored.items(2)[-1] == buf.items(2)[-1]  # full Rollout equality, log-probs included


def test_loads_format_1_checkpoints():
    """Format 1 (before the rename to ``behaviour_token_logps``) still loads, values intact."""
    buf = _filled(4)
    state = buf.state_dict()
    old = {**state, "format": 1,
           "items": [[pid, [{("old_token_logps" if k == "behaviour_token_logps" else k): v
                             for k, v in r.items()} for r in rows]] for pid, rows in state["items"]]}
    assert "old_token_logps" in old["items"][0][1][0]
    restored = ReplayBuffer()
    restored.load_state_dict(old)
    assert [restored.items(p) for p in restored.prompt_ids()] == [buf.items(p) for p in buf.prompt_ids()]


def test_states_from_before_the_new_options_load_with_the_old_rules():
    state = _filled(2).state_dict()
    assert state["config"]["dedup"] is False and state["config"]["recency_fallback"] == "newest"
    del state["config"]["dedup"], state["config"]["recency_fallback"]  # older code's state
    restored = ReplayBuffer()
    restored.load_state_dict(state)
    assert restored.dedup is True and restored.recency_fallback == "reward"
    restored.add([ro(50, [1]), ro(50, [1])])
    assert len(restored.items(50)) == 1


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "buffer.pt"
    _filled(0).save(path)
    before = path.read_bytes()

    def crash(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt("simulated crash mid-write")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        _filled(1).save(path)
    assert path.read_bytes() == before  # the previous checkpoint is intact
    assert os.listdir(tmp_path) == ["buffer.pt"]  # no temporary file left behind
    monkeypatch.undo()
    assert len(ReplayBuffer.load(path)) == len(_filled(0))


def test_max_prompts_evicts_least_recently_refreshed():
    buf = ReplayBuffer(capacity_per_prompt=4, recency_prob=0.0, max_prompts=3, seed=0)
    for pid in (0, 1, 2):
        buf.add([ro(pid, [pid, 1])])
    buf.add([ro(0, [0, 2])])  # prompt 0 refreshed: now 1 is the least recently refreshed
    buf.add([ro(3, [3, 1])])  # a fourth prompt evicts prompt 1 with all its items
    assert buf.num_prompts() == 3 and len(buf) == 4
    assert {r.prompt_id for r in buf.sample(3, 1)} == {0, 2, 3}
    with pytest.raises(KeyError):
        buf.items(1)
    restored = ReplayBuffer()
    restored.load_state_dict(buf.state_dict())
    assert restored.max_prompts == 3
    restored.add([ro(4, [4, 1])])  # the bound survives a save/load round trip
    assert restored.num_prompts() == 3


def test_max_prompts_bounds_staleness_of_reward_mode():
    """With one new prompt group per version, reward-mode draws are never older than
    max_prompts versions; unbounded they reach back to version 0."""
    bounded = ReplayBuffer(capacity_per_prompt=2, recency_prob=0.0, max_prompts=10, seed=1)
    unbounded = ReplayBuffer(capacity_per_prompt=2, recency_prob=0.0, seed=1)
    for v in range(200):
        for buf in (bounded, unbounded):
            buf.add([ro(v, [v, 0], version=v), ro(v, [v, 1], version=v)])
    stale_b = [s for _ in range(50) for s in ReplayBuffer.staleness(bounded.sample(8, 2), 200)]
    stale_u = [s for _ in range(50) for s in ReplayBuffer.staleness(unbounded.sample(8, 2), 200)]
    assert max(stale_b) <= 10
    assert max(stale_u) > 100


# --------------------------------------------- softmax underflow in reward mode
UNDERFLOW_SETTINGS = [  # (rewards of one prompt, inv_temp, K)
    ([0, 1, 0, 0, 0, 0], 1000.0, 3),               # 0/1 rewards, one correct
    ([-5.0, -0.2, -4.5, -4.8, -5.0, -4.0], 200.0, 4),  # red-teaming log-rewards in [-5, 0]
    ([1, 0, 1, 1, 0, 0, 0], 1000.0, 5),            # three correct: then only zeros are left
    ([0, 1, 0], 1000.0, 5),                        # fewer items than K: all once, then the best
]


@pytest.mark.parametrize("rewards, inv_temp, k", UNDERFLOW_SETTINGS)
def test_reward_mode_survives_a_softmax_that_underflows(rewards, inv_temp, k):
    """Every weight but the best is exactly 0 in float64 (after muzero-general#111, tinygrad
    PR 7515): once the best is drawn without replacement, the next draws follow the softmax of
    the rows left, computed from their rewards (the exact successive-sampling law), so the best
    of the rest comes next and tied rows are equally likely; never a NaN probability."""
    buf = ReplayBuffer(capacity_per_prompt=16, recency_prob=0.0, inv_temp=inv_temp, seed=0)
    buf.add([ro(0, [j], reward=r) for j, r in enumerate(rewards)])
    order = sorted(range(len(rewards)), key=lambda j: -rewards[j])
    tail = Counter()
    for _ in range(600):
        got = [r.response_ids[0] for r in buf.sample(1, k)]
        if len(rewards) < k:  # all items once, then the top-up draws the best (p = 1 in float64)
            assert sorted(got[:len(rewards)]) == list(range(len(rewards)))
            assert got[len(rewards):] == [order[0]] * (k - len(rewards))
            continue
        assert len(set(got)) == k  # without replacement
        assert [rewards[j] for j in got] == sorted(rewards, reverse=True)[:k]  # best first
        tail.update(j for j in got if rewards[j] == rewards[got[-1]])
    if rewards == [1, 0, 1, 1, 0, 0, 0]:  # the 4 zeros share the last 2 rows uniformly
        zeros = [j for j, r in enumerate(rewards) if r == 0]
        assert chi2_pvalue([tail[j] for j in zeros], np.ones(len(zeros))) > 1e-3
        assert sum(tail[j] for j in zeros) == 2 * 600


def test_reward_mode_draws_are_unchanged_at_ordinary_temperatures():
    """The log-space sampler draws what successive sampling from softmax(inv_temp * r),
    renormalised over the full weight vector, draws with the same seed: one uniform per draw,
    the same item (the default run's batches do not change)."""
    rewards = [0.0, 1.0, 0.3, -0.7, 2.0, 1.0, 0.0, 0.5]
    for inv_temp in (0.0, 1.0, 3.0):
        buf = ReplayBuffer(capacity_per_prompt=16, recency_prob=0.0, inv_temp=inv_temp, seed=9)
        buf.add([ro(0, [j], reward=r) for j, r in enumerate(rewards)])
        rng = np.random.default_rng(9)
        for _ in range(300):
            got = [r.response_ids[0] for r in buf.sample(1, 4)]
            rng.random()  # the slot's recency coin
            rng.integers(1)  # the prompt (one stored)
            w = softmax(inv_temp * np.array(rewards))
            want = []
            for _ in range(4):
                i = int(rng.choice(len(rewards), p=w / w.sum()))
                want.append(i)
                w[i] = 0.0
            assert got == want


# ------------------------------------------------- the buffer owns what it stores
def test_add_stores_copies_the_producer_cannot_change():
    """A producer that reuses its Rollout, edits it after ``add`` and adds it again stores two
    responses, and the first is as it was added (after Muesli-lunarlander#1)."""
    buf = ReplayBuffer(capacity_per_prompt=8)
    r = ro(0, [1, 2], reward=0.0)
    buf.add([r])
    r.response_ids[0] = 9           # edited in place ...
    r.response_ids.append(3)
    r.behaviour_token_logps[:] = [-0.5, -0.5, -0.5]
    r.ref_token_logps.append(-1.0)
    r.prompt_ids[0] = 0
    r.reward, r.version = 1.0, 4    # ... and reassigned
    assert buf.items(0)[0].response_ids == [1, 2]  # the stored row did not move
    buf.add([r])
    got = [(x.response_ids, x.reward, x.version, x.prompt_ids, x.behaviour_token_logps,
            x.ref_token_logps) for x in buf.items(0)]
    assert got == [([1, 2], 0.0, 0, [100, 7], [-1.5, -1.5], [-1.0, -1.0]),
                   ([9, 2, 3], 1.0, 4, [0, 7], [-0.5, -0.5, -0.5], [-1.0, -1.0, -1.0])]
    r.response_ids.clear()
    assert [x.response_ids for x in buf.items(0)] == [[1, 2], [9, 2, 3]]
    # sample returns the buffer's own rows: a reference pass that fills one in place is kept
    s = ReplayBuffer(capacity_per_prompt=4, recency_prob=1.0)
    s.add([ro(3, [5])])
    row = s.sample(1, 1)[0]
    row.ref_token_logps = [-2.5]
    assert s.items(3)[0].ref_token_logps == [-2.5]
    assert s.discard([row]) == 1 and len(s) == 0
    # copy=False: a caller that made the rows for the buffer alone hands them over
    mine = ro(4, [6])
    s.add([mine], copy=False)
    assert s.items(4)[0] is mine


def test_add_copies_shared_lists_once_per_call():
    """The K rows of one prompt share their prompt's token list (a searcher's batch does); the
    stored copies share one copy of it, not K, and not the caller's."""
    prompt = [100, 7]
    rows = [ro(0, [j]) for j in range(4)]
    for r in rows:
        r.prompt_ids = prompt
    buf = ReplayBuffer(capacity_per_prompt=8)
    buf.add(rows)
    stored = buf.items(0)
    assert all(x.prompt_ids is stored[0].prompt_ids for x in stored)
    assert stored[0].prompt_ids is not prompt and stored[0].prompt_ids == [100, 7]


def test_load_state_dict_does_not_keep_the_callers_lists():
    buf = _filled(3)
    state = buf.state_dict()
    restored = ReplayBuffer()
    restored.load_state_dict(state)
    before = [key(r) for p in restored.prompt_ids() for r in restored.items(p)]
    for _, rows in state["items"]:
        for r in rows:
            r["response_ids"].append(99)
            r["behaviour_token_logps"].append(0.0)
    assert [key(r) for p in restored.prompt_ids() for r in restored.items(p)] == before
