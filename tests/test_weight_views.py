"""A weight sync makes one copy on the searcher's side: after ``bind``, a searcher's parameters
are views of ONE private buffer of the channel's layout, a pull writes that buffer in place (the
pull IS the load), and the model then computes exactly what the trainer's published model does.

Both channels on the CPU (SharedWeights: one float tensor; FlatWeights: the CUDA IPC channel's
byte layout, here in shared memory), the embedded kind of model (a tiny Llama with tied
embeddings) and a tiny Qwen2 with tied embeddings built offline from its config; and the
searcher loop, which binds a transformers backend's policy and never calls ``load_weights``,
but still hands pairs to an engine with its own copy of the model (``own_engine``, vLLM).
"""
import copy
import fcntl
import os
import threading
from dataclasses import replace

import pytest
import torch
import torch.multiprocessing as mp

from tba_lab.actors.weights import FlatWeights, SharedWeights
from tests.test_cuda_weights import Mixed, bound_puller, digest, fill, in_buffer

CTX = mp.get_context("spawn")
CHANNELS = [SharedWeights, FlatWeights]
PROMPT = torch.tensor([[1, 4, 5, 6, 7, 3]])


def _qwen2_tied():
    """A tiny Qwen2ForCausalLM with tied embeddings, random weights (no download)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=50,
                      max_position_embeddings=64, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(params=["llama_embedded_kind", "qwen2_tied"])
def pair(request, tiny):
    """(trainer's model, searcher's model): same architecture, different weights."""
    torch.set_num_threads(1)
    trainer = copy.deepcopy(tiny[0]) if request.param == "llama_embedded_kind" else _qwen2_tied()
    searcher = copy.deepcopy(trainer)
    fill(searcher, 99)
    return trainer.eval(), searcher.eval()


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROMPT).logits


def _perturb(model, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def _tied(model) -> bool:
    out, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    return out is emb and out.data_ptr() == emb.data_ptr()


def _allocated_bytes(fn) -> int:
    """Bytes the CPU allocator handed out while ``fn()`` ran (torch profiler's memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(max(e.cpu_memory_usage, 0) for e in prof.events()
               if e.name in ("[memory]",) or e.name.startswith(("aten::empty", "aten::clone")))


# ------------------------------------------------------------------------ binding, one process
@pytest.mark.parametrize("cls", CHANNELS)
def test_bound_parameters_live_in_one_private_buffer_and_keep_their_ties(cls, pair):
    trainer, searcher = pair
    weights = cls(trainer, CTX)
    before = _logits(searcher)
    weights.bind(searcher)
    buf = weights._bound.buf
    assert in_buffer(searcher.named_parameters(), buf)
    assert in_buffer([("lm_head", searcher.get_output_embeddings().weight)], buf)
    assert _tied(searcher)  # embeddings and lm_head: still one parameter, now in the buffer
    assert buf.untyped_storage().data_ptr() != _storage(weights)  # private, not the shared one
    assert torch.equal(_logits(searcher), before)  # binding alone changes nothing
    weights.close()


def _storage(weights) -> int:
    shared = weights.flat if isinstance(weights, SharedWeights) else weights.buf
    return shared.untyped_storage().data_ptr()


@pytest.mark.parametrize("cls", CHANNELS)
def test_a_bound_pull_is_the_load_exactly_and_allocates_nothing(cls, pair):
    trainer, searcher = pair
    weights = cls(trainer, CTX)
    weights.bind(searcher)
    ptrs = [p.data_ptr() for p in searcher.parameters()]
    version, new = weights.pull(-1)
    assert version == 0
    assert all(t is p for (_, t), (_, p) in zip(new, searcher.named_parameters()))  # the model's own
    assert torch.equal(_logits(searcher), _logits(trainer))
    for v in (1, 2):
        _perturb(trainer, seed=v)
        weights.publish(trainer, v)
        nbytes = weights._bound.buf.numel() * weights._bound.buf.element_size()
        got = {}
        allocated = _allocated_bytes(lambda: got.update(pulled=weights.pull(v - 1)))
        assert got["pulled"][0] == v
        assert allocated < nbytes / 100, f"a bound pull allocated {allocated} bytes"
        assert [p.data_ptr() for p in searcher.parameters()] == ptrs  # written in place
        assert digest(searcher.named_parameters()) == digest(trainer.named_parameters())
        assert torch.equal(_logits(searcher), _logits(trainer))  # outputs of the published weights
        assert _tied(searcher)
    assert weights.pull(2) == (2, None)
    weights.close()


@pytest.mark.parametrize("cls", CHANNELS)
def test_an_unbound_pull_still_hands_out_private_named_copies(cls, pair):
    """The contract for callers that never bind (vLLM's engine, Ray's launcher, notebooks)."""
    trainer, searcher = pair
    weights = cls(trainer, CTX)
    version, new = weights.pull(-1)
    names = [n for n, _ in trainer.named_parameters()]
    assert version == 0 and [n for n, _ in new] == names
    assert not any(t.untyped_storage().data_ptr() == _storage(weights) for _, t in new)
    assert _allocated_bytes(lambda: weights.pull(-1)) >= sum(
        p.numel() * p.element_size() for p in trainer.parameters())  # a new copy per pull
    weights.close()


@pytest.mark.parametrize("cls", CHANNELS)
def test_bound_generation_matches_the_published_model(cls, tiny):
    """Greedy generation from a bound searcher equals generation from the trainer's model."""
    from tests._spawn_helpers import backend_for

    trainer = copy.deepcopy(tiny[0]).eval()
    _perturb(trainer, seed=7)
    searcher = copy.deepcopy(tiny[0]).eval()
    fill(searcher, 99)  # other weights: it generates like the trainer only once they arrived
    weights = cls(trainer, CTX)
    weights.bind(searcher)
    weights.pull(-1)
    prompts = [[1, 4, 5, 6], [1, 7, 7]]
    want = backend_for(trainer).generate(prompts, 2, temperature=0, max_new_tokens=6).responses
    got = backend_for(searcher).generate(prompts, 2, temperature=0, max_new_tokens=6).responses
    assert got == want
    weights.close()


@pytest.mark.parametrize("cls", CHANNELS)
def test_bind_refuses_another_model(cls, tiny):
    from tba_lab.models import build_model

    weights = cls(copy.deepcopy(tiny[0]), CTX)
    other = build_model(tiny[1], hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    with pytest.raises(ValueError, match="same model.path"):
        weights.bind(other)
    weights.close()


@pytest.mark.parametrize("cls", CHANNELS)
def test_a_bound_pull_copies_through_the_fault_seam_under_the_lock(cls, tiny, monkeypatch):
    """The fault tests replace ``_copy_out`` (positional arguments only) with a SIGKILL; a bound
    pull must go through it, holding the lock shared."""
    weights = cls(copy.deepcopy(tiny[0]), CTX)
    weights.bind(copy.deepcopy(tiny[0]))
    calls, real = [], cls._copy_out

    def seam(self, *args):
        calls.append(len(args))
        fd = os.open(self.lock.path, os.O_RDWR)  # another open file: flock excludes it as another process
        try:
            with pytest.raises(BlockingIOError):  # the lock is held shared: no writer gets it
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        return real(self, *args)

    monkeypatch.setattr(cls, "_copy_out", seam)
    assert weights.pull(-1)[0] == 0 and len(calls) == 1
    weights.close()


@pytest.mark.parametrize("cls", CHANNELS)
def test_publish_checks_the_model_before_it_takes_the_lock(cls, tiny):
    """A model that is not the channel's is refused at once, even while searchers hold the lock
    (one copy straight into the shared buffer must never leave it half written)."""
    from tba_lab.models import build_model

    weights = cls(copy.deepcopy(tiny[0]), CTX)
    other = build_model(tiny[1], hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    fd = os.open(weights.lock.path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # a searcher copying
        with pytest.raises(ValueError, match="publish the model the channel was built for"):
            weights.publish(other, 1)
    finally:
        os.close(fd)
    assert weights.version.value == 0
    weights.close()


# ------------------------------------------------------------------------ in a spawned searcher
class _Linear53(torch.nn.Linear):
    """One dtype (SharedWeights needs it); built the same way in the child."""

    def __init__(self):
        super().__init__(5, 3)


@pytest.mark.parametrize("cls,factory", [(SharedWeights, _Linear53), (FlatWeights, Mixed)],
                         ids=["SharedWeights", "FlatWeights"])
def test_a_spawned_bound_searcher_gets_every_version_in_place(cls, factory):
    """The channel pickled into a spawned searcher (as LocalLauncher hands it over), bound
    there to the searcher's own model (Mixed: three dtypes and a tied weight)."""
    model = factory()
    weights = cls(model, CTX)
    commands, results = CTX.Queue(), CTX.Queue()
    child = CTX.Process(target=bound_puller, args=(weights, factory, "cpu", commands, results),
                        daemon=True)
    child.start()
    try:
        for v in (0, 1, 2, 5):
            if v:
                fill(model, v)
                weights.publish(model, v)
            commands.put("pull")
            version, d, inside, own, _ = results.get(timeout=120)
            assert (version, d, inside, own) == (v, digest(model.named_parameters()), True, True)
        commands.put("stop")
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        weights.close()


# ------------------------------------------------------------------------ the searcher loop
class _Queue:
    def __init__(self, stop):
        self.items, self.stop = [], stop

    def put(self, msg, timeout=None):
        self.items.append(msg)
        self.stop.set()

    def full(self):
        return False


class OwnEngineBackend:
    """A TransformersBackend that claims an engine of its own (as vLLM's): never bound."""

    name = "own_engine_test"
    own_engine = True

    @classmethod
    def build(cls, cfg, model, tokenizer):
        from tba_lab.rollout.backend import TransformersBackend

        backend = TransformersBackend.build(cfg, model, tokenizer)  # wraps the policy, yet
        backend.own_engine = True  # claims an engine of its own: the loop must not bind
        return backend


def _run_loop(monkeypatch, backend_cls=None):
    """One batch of the searcher loop against a SharedWeights channel that already holds
    version 1; returns (the channel, the backend the loop built, load_weights calls, batch)."""
    from tba_lab.actors.searcher import SearcherSpec, _loop
    from tba_lab.config import from_dict
    from tba_lab.models import load_policy
    from tba_lab.rollout.backend import TransformersBackend

    cfg = from_dict({"model": {"max_new_tokens": 4},
                     "training": {"num_prompts_per_step": 2, "num_generations": 2},
                     "async": {"searcher_threads": 1, "reference_pass": "trainer"}})
    trainer = load_policy(cfg.model.path)[0]
    weights = SharedWeights(trainer, CTX)
    _perturb(trainer, seed=11)
    weights.publish(trainer, 1)
    built, loads = [], []
    real_build, real_load = TransformersBackend.build.__func__, TransformersBackend.load_weights
    monkeypatch.setattr(TransformersBackend, "build", classmethod(
        lambda cls, *a: built.append(real_build(cls, *a)) or built[-1]))
    monkeypatch.setattr(TransformersBackend, "load_weights",
                        lambda self, w: loads.append(1) or real_load(self, w))
    spec = replace(SearcherSpec.from_config(cfg, use_reference=False),
                   backend_cls=backend_cls or TransformersBackend)
    stop = threading.Event()
    out = _Queue(stop)
    try:
        _loop(0, spec, weights, out, stop, seed=0)
    finally:
        torch.set_num_threads(1)
    return weights, trainer, built[0], loads, out.items[0]


def test_the_searcher_loop_binds_its_policy_and_never_calls_load_weights(monkeypatch):
    """Fails on the copy-then-load path: the loop must pull straight into its policy."""
    weights, trainer, backend, loads, batch = _run_loop(monkeypatch)
    assert batch.version == 1
    assert loads == []  # the pull was the load
    assert weights._bound is not None
    assert in_buffer(backend.model.named_parameters(), weights._bound.buf)
    assert digest(backend.model.named_parameters()) == digest(trainer.named_parameters())
    assert _tied(backend.model)
    weights.close()


def test_the_searcher_loop_hands_pairs_to_an_engine_of_its_own(monkeypatch):
    weights, trainer, backend, loads, batch = _run_loop(monkeypatch, OwnEngineBackend)
    assert batch.version == 1 and loads == [1]
    assert weights._bound is None
    assert digest(backend.model.named_parameters()) == digest(trainer.named_parameters())
    weights.close()


def test_a_backend_whose_load_weights_does_more_keeps_getting_it(monkeypatch):
    """A subclass that overrides load_weights (say, to reset a cache of its own) is not bound:
    skipping its load_weights would skip whatever else it does there."""
    from tba_lab.rollout.backend import TransformersBackend

    hooks = []

    class HookedBackend(TransformersBackend):
        def load_weights(self, weights):
            hooks.append(1)
            super().load_weights(weights)

    weights, trainer, backend, loads, batch = _run_loop(monkeypatch, HookedBackend)
    assert isinstance(backend, HookedBackend) and backend.model is not None
    assert batch.version == 1 and hooks == [1] and loads == [1] and weights._bound is None
    assert digest(backend.model.named_parameters()) == digest(trainer.named_parameters())
    weights.close()
