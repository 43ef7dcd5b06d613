"""SharedWeights: the trainer -> searcher weight channel, across a real spawned process."""
import copy

import pytest
import torch
import torch.multiprocessing as mp

from tba_lab.actors.weights import SharedWeights
from tests._spawn_helpers import weights_fingerprint, weights_puller


@pytest.fixture
def policy(tiny):
    model, _, _ = tiny
    torch.set_num_threads(1)
    return copy.deepcopy(model)  # the fixture is session-wide: never modify it in place


def _perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def test_publish_pull_across_a_spawned_process(policy):
    ctx = mp.get_context("spawn")
    weights = SharedWeights(policy, ctx)  # holds the parent's weights as version 0
    commands, results = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=weights_puller, args=(policy.config, weights, commands, results),
                        daemon=True)
    child.start()
    try:
        parent_v0 = weights_fingerprint(policy)
        version, *child_init = results.get(timeout=120)
        assert version == -1
        assert child_init[0] != pytest.approx(parent_v0[0])  # child starts from other weights
        assert child_init[1] != pytest.approx(parent_v0[1])

        commands.put("pull")
        version, *child_v0 = results.get(timeout=60)
        assert version == 0
        assert child_v0[0] == pytest.approx(parent_v0[0], rel=1e-12)  # exact copy
        assert child_v0[1] == pytest.approx(parent_v0[1], abs=1e-5)

        # the trainer updates its weights and publishes version 3
        _perturb(policy, seed=1)
        parent_v3 = weights_fingerprint(policy)
        assert parent_v3[0] != pytest.approx(parent_v0[0])
        weights.publish(policy, 3)
        commands.put("pull")
        version, *child_v3 = results.get(timeout=60)
        assert version == 3
        assert child_v3[0] != pytest.approx(child_v0[0])  # the child's weights really changed
        assert child_v3[1] != pytest.approx(child_v0[1], abs=1e-4)
        assert child_v3[0] == pytest.approx(parent_v3[0], rel=1e-12)
        assert child_v3[1] == pytest.approx(parent_v3[1], abs=1e-5)

        # nothing new published: pulling again keeps version and weights
        commands.put("pull")
        version, *child_again = results.get(timeout=60)
        assert version == 3 and child_again == child_v3

        commands.put("stop")
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join(timeout=5)


def test_pull_same_version_is_a_noop(policy):
    ctx = mp.get_context("spawn")
    weights = SharedWeights(policy, ctx)
    local = copy.deepcopy(policy)
    _perturb(policy, seed=2)
    weights.publish(policy, 5)
    before = weights_fingerprint(local)
    assert weights.pull(local, 5) == 5          # already "has" version 5: nothing is copied
    assert weights_fingerprint(local) == before
    assert weights.pull(local, 4) == 5          # older version: copies
    assert weights_fingerprint(local) == weights_fingerprint(policy)
    assert weights_fingerprint(local) != before


def test_publish_does_not_alias_the_trainer_model(policy):
    """Later in-place optimizer updates must not leak into the published copy before a publish."""
    ctx = mp.get_context("spawn")
    weights = SharedWeights(policy, ctx)
    published = weights.flat.clone()
    _perturb(policy, seed=3)
    assert torch.equal(weights.flat, published)
    assert weights.version.value == 0


def test_mismatched_parameter_count_raises(tiny, policy):
    from tba_lab.models import build_model

    _, tok, _ = tiny
    ctx = mp.get_context("spawn")
    weights = SharedWeights(policy, ctx)
    other = build_model(tok, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    with pytest.raises(ValueError, match="parameters"):
        weights.pull(other, -1)


def test_mixed_dtypes_rejected(policy):
    half = copy.deepcopy(policy)
    half.model.norm.weight.data = half.model.norm.weight.data.half()
    with pytest.raises(ValueError, match="one parameter dtype"):
        SharedWeights(half, mp.get_context("spawn"))
