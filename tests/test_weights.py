"""SharedWeights: the trainer -> searcher weight channel, across a real spawned process."""
import copy

import pytest
import torch
import torch.multiprocessing as mp

from tba_lab.actors.weights import SharedWeights
from tests._spawn_helpers import backend_for, weights_fingerprint, weights_puller


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
    assert weights.pull(5) == (5, None)         # already "has" version 5: nothing is copied
    version, new = weights.pull(4)              # older version: a private copy, by name
    assert version == 5
    backend_for(local).load_weights(new)
    assert weights_fingerprint(local) == weights_fingerprint(policy)
    assert weights_fingerprint(local) != before


def test_pull_gives_named_copies_not_a_module(policy):
    """The channel hands out (Hugging Face name, tensor) pairs, the form ``load_weights`` of any
    backend takes (vLLM's included): names and shapes as the trainer's parameters, tied
    embeddings once, and a copy that a later publish does not change."""
    ctx = mp.get_context("spawn")
    weights = SharedWeights(policy, ctx)
    _, new = weights.pull(-1)
    expected = list(policy.named_parameters())
    assert [n for n, _ in new] == [n for n, _ in expected]
    assert "lm_head.weight" not in dict(new)                       # tied to the embeddings
    assert all(torch.equal(t, p) for (_, t), (_, p) in zip(new, expected))
    _perturb(policy, seed=4)
    weights.publish(policy, 1)
    assert not any(torch.equal(t, p) for (_, t), (_, p) in zip(new, policy.named_parameters()))
    assert torch.equal(weights.pull(0)[1][0][1], policy.model.embed_tokens.weight)  # the new one


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
    with pytest.raises(ValueError, match="same model.path"):
        backend_for(other).load_weights(weights.pull(-1)[1])


def test_mixed_dtypes_rejected(policy):
    half = copy.deepcopy(policy)
    half.model.norm.weight.data = half.model.norm.weight.data.half()
    with pytest.raises(ValueError, match="one parameter dtype"):
        SharedWeights(half, mp.get_context("spawn"))


@pytest.mark.parametrize("channel", ["SharedWeights", "FlatWeights"])
def test_both_channels_keep_one_contract(policy, channel):
    """The CPU channel and the flat (CUDA IPC) channel, here on the CPU, answer publish/pull
    alike: same names, shapes, dtypes and values, a no-op pull when nothing is new, a private
    copy that a later publish does not touch."""
    import tba_lab.actors.weights as weights_module

    weights = getattr(weights_module, channel)(policy, mp.get_context("spawn"))
    version, first = weights.pull(-1)
    expected = list(policy.named_parameters())
    assert version == 0
    assert [(n, t.shape, t.dtype) for n, t in first] == [(n, p.shape, p.dtype) for n, p in expected]
    assert all(torch.equal(t, p) for (_, t), (_, p) in zip(first, expected))
    assert weights.pull(0) == (0, None)
    kept = [t.clone() for _, t in first]
    _perturb(policy, seed=5)
    weights.publish(policy, 7)
    version, new = weights.pull(0)
    assert version == 7
    assert all(torch.equal(t, p) for (_, t), (_, p) in zip(new, policy.named_parameters()))
    assert all(torch.equal(t, k) for (_, t), k in zip(first, kept))
    weights.close()


def test_cpu_run_keeps_the_cpu_channel(tmp_path):
    """The default placement changes nothing: CPU shared memory, no CUDA_VISIBLE_DEVICES."""
    from tba_lab.actors.local import LocalLauncher
    from tba_lab.config import from_dict
    from tba_lab.models import load_policy

    cfg = from_dict({"output_dir": str(tmp_path), "async": {"num_searchers": 2}})
    launcher = LocalLauncher(cfg, load_policy(cfg.model.path)[0], True)
    try:
        assert isinstance(launcher.weights, SharedWeights)
        assert launcher.spec.visible_devices == {}
    finally:
        launcher.stop()
