"""The flat weight channel (tba_lab.actors.weights.FlatWeights): its layout, version protocol and
pickling into spawned searchers, on CPU shared memory here, on a GPU through CUDA IPC.

The CPU tests run the very class the CUDA channel is (same manifest, offsets, views, packing,
lock and version counter, same pickling path with the buffer's handle); only the export of
the buffer differs. The CUDA tests skip without a GPU (bench/gpu_check.sh runs them there too).
"""
import copy
import hashlib

import pytest
import torch
import torch.multiprocessing as mp

from tba_lab.actors.weights import (ALIGN, FlatWeights, Layout, SharedWeights,
                                    check_exportable_allocator, expandable_segments_on,
                                    local_index, make_weight_channel)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class Mixed(torch.nn.Module):
    """Parameters of three dtypes, odd sizes (so packed offsets would not be aligned) and a
    weight tied between two modules."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(7, 3)
        self.head = torch.nn.Linear(3, 7, bias=False)
        self.head.weight = self.emb.weight  # tied: one parameter
        self.fp16 = torch.nn.Parameter(torch.randn(5, dtype=torch.float16))
        self.bf = torch.nn.Parameter(torch.randn(3, 3, dtype=torch.bfloat16))
        self.bias = torch.nn.Parameter(torch.randn(1))


def fill(model, seed):
    """Give every parameter new values drawn from ``seed`` (in place)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g).to(p.dtype))


def digest(named) -> str:
    """sha1 of the names and raw bytes of ``(name, tensor)`` pairs (exact, any dtype/device)."""
    h = hashlib.sha1()
    for name, t in named:
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def puller(weights, commands, results) -> None:
    """Spawned child: on each command ``"pull"`` pull from ``weights`` and report
    ``(version, digest, device, bytes allocated on CUDA)``; exit on ``"stop"``."""
    torch.set_num_threads(1)
    version = -1
    while (cmd := commands.get(timeout=120)) != "stop":
        version, new = weights.pull(version)
        pulled = new if new is not None else pulled  # noqa: F821 (set by the first pull)
        results.put((version, digest(pulled), str(pulled[0][1].device),
                     torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0))
    weights.close()


def in_buffer(named, buf) -> bool:
    """Every tensor of ``named`` lies inside ``buf``'s storage (same storage, bytes in range)."""
    start, end = buf.data_ptr(), buf.data_ptr() + buf.numel() * buf.element_size()
    return all(t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
               and start <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= end
               for _, t in named)


def bound_puller(weights, model_cls, device, commands, results) -> None:
    """Spawned child, as a searcher: build ``model_cls()`` on ``device``, ``weights.bind`` it,
    then on each command ``"pull"`` pull and report ``(version, digest of the model's
    parameters, every parameter inside the bound buffer, the returned pairs are the model's
    own parameters, bytes allocated on CUDA)``; exit on ``"stop"``."""
    torch.set_num_threads(1)
    model = model_cls().to(device)
    weights.bind(model)
    version = -1
    while (cmd := commands.get(timeout=120)) != "stop":
        version, new = weights.pull(version)
        own = new is None or all(t is p for (_, t), (_, p) in zip(new, model.named_parameters()))
        results.put((version, digest(model.named_parameters()),
                     in_buffer(model.named_parameters(), weights._bound.buf), own,
                     torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0))
    weights.close()


# ------------------------------------------------------------------------------------ layout
def test_layout_aligns_every_offset_and_keeps_tied_weights_once():
    model = Mixed()
    layout = Layout(model.named_parameters())
    names = [e.name for e in layout.entries]
    assert names == ["fp16", "bf", "bias", "emb.weight"]  # head.weight is emb.weight
    assert [e.offset for e in layout.entries] == [0, 256, 512, 768]
    assert [e.nbytes for e in layout.entries] == [5 * 2, 9 * 2, 4, 7 * 3 * 4]
    assert layout.nbytes == 1024 and all(e.offset % ALIGN == 0 for e in layout.entries)
    ends = [e.offset + e.nbytes for e in layout.entries]
    assert all(end <= nxt for end, nxt in zip(ends, [e.offset for e in layout.entries][1:]))


def test_layout_views_pack_and_unpack_exactly():
    model = Mixed()
    layout = Layout(model.named_parameters())
    buf = torch.zeros(layout.nbytes, dtype=torch.uint8)
    layout.pack(model.named_parameters(), buf)
    views = layout.views(buf)
    assert [(n, v.dtype, tuple(v.shape)) for n, v in views] == [
        (n, p.dtype, tuple(p.shape)) for n, p in model.named_parameters()]
    assert all(torch.equal(v, p) for (_, v), (_, p) in zip(views, model.named_parameters()))
    assert buf[10:256].eq(0).all()  # padding between parameters stays untouched
    wrong_shape = [("fp16", torch.zeros(2))] + list(model.named_parameters())[1:]
    with pytest.raises(ValueError, match="does not match"):
        layout.pack(wrong_shape, buf)
    with pytest.raises(ValueError, match="uint8 buffer"):
        layout.views(torch.zeros(layout.nbytes))


def test_layout_of_the_embedded_model(tiny):
    model = tiny[0]
    layout = Layout(model.named_parameters())
    assert "lm_head.weight" not in [e.name for e in layout.entries]  # tied to the embeddings
    params = sum(p.numel() for p in model.parameters())
    assert params * 4 <= layout.nbytes < params * 4 + ALIGN * len(layout.entries)


# ------------------------------------------------------------------------- channel (on CPU)
def test_flat_channel_publish_pull_exact_over_100_versions():
    """Values arrive exactly for every one of 100 publishes; a copy handed out is private."""
    model = Mixed()
    weights = FlatWeights(model, mp.get_context("spawn"))
    version, first = weights.pull(-1)
    assert version == 0 and digest(first) == digest(model.named_parameters())
    assert weights.pull(0) == (0, None)
    first_digest = digest(first)
    for v in range(1, 101):
        fill(model, v)
        weights.publish(model, v)
        got_version, new = weights.pull(v - 1)
        assert got_version == v
        assert digest(new) == digest(model.named_parameters())
        assert [t.dtype for _, t in new] == [torch.float16, torch.bfloat16, torch.float32, torch.float32]
    assert digest(first) == first_digest  # later publishes did not write into an old copy


def test_flat_channel_loads_into_a_backend(tiny):
    from tests._spawn_helpers import backend_for, weights_fingerprint

    model = copy.deepcopy(tiny[0])
    other = copy.deepcopy(model)
    fill(other, 3)
    weights = FlatWeights(model, mp.get_context("spawn"))
    backend_for(other).load_weights(weights.pull(-1)[1])
    assert weights_fingerprint(other) == weights_fingerprint(model)


def test_two_spawned_pullers_see_the_same_version_and_values():
    """Two searcher processes pull at once (both hold the channel from their spawn, as
    LocalLauncher hands it over) and both get the published values exactly, version after
    version."""
    ctx = mp.get_context("spawn")
    model = Mixed()
    weights = FlatWeights(model, ctx)
    commands, results = [ctx.Queue(), ctx.Queue()], [ctx.Queue(), ctx.Queue()]
    children = [ctx.Process(target=puller, args=(weights, c, r), daemon=True)
                for c, r in zip(commands, results)]
    for c in children:
        c.start()
    try:
        for v in (0, 1, 2, 5):
            if v:
                fill(model, v)
                weights.publish(model, v)
            for c in commands:
                c.put("pull")
            got = [r.get(timeout=120) for r in results]
            assert got[0][:3] == got[1][:3] == (v, digest(model.named_parameters()), "cpu")
        for c in commands:
            c.put("stop")
        for c in children:
            c.join(timeout=30)
            assert c.exitcode == 0
    finally:
        for c in children:
            if c.is_alive():
                c.kill()


def test_channel_choice_follows_placement():
    from tba_lab.config import from_dict

    model, ctx = torch.nn.Linear(2, 3), mp.get_context("spawn")
    assert isinstance(make_weight_channel(from_dict({}), model, ctx), SharedWeights)
    # a CUDA trainer with a CPU searcher keeps the CPU channel (its publish copies to the CPU)
    cfg = from_dict({"async": {"trainer_device": "cuda:0", "searcher_devices": ["cpu"]}})
    assert isinstance(make_weight_channel(cfg, model, ctx), SharedWeights)


# --------------------------------------------------------------------------- CUDA specifics
def test_expandable_segments_refused(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64, expandable_segments:True")
    assert expandable_segments_on()
    with pytest.raises(RuntimeError, match="expandable_segments"):
        check_exportable_allocator()
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    assert not expandable_segments_on()
    check_exportable_allocator()


def test_handle_device_is_mapped_by_uuid():
    """A child that sees [its own GPU, the trainer's GPU] opens the trainer's buffer as cuda:1,
    whatever index the trainer process gave it."""
    seen = ["GPU-aaa", "GPU-ccc"]
    assert local_index("GPU-ccc", seen, fallback=2) == 1
    assert local_index("GPU-aaa", seen, fallback=2) == 0
    assert local_index("GPU-zzz", [], fallback=2) == 2  # no UUIDs: same devices, same index


def test_rebuild_replaces_only_the_device_argument():
    """The CUDA export is torch's own (rebuild_cuda_tensor, args); the child rewrites one
    argument, found by name, so a torch that reorders them still works."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    from tba_lab.actors.weights import _storage_device_position

    assert _storage_device_position(rebuild_cuda_tensor) == 6


@needs_cuda
def test_cuda_round_trip_in_two_children_exact_and_memory_flat():
    ctx = mp.get_context("spawn")
    model = Mixed().cuda()
    weights = FlatWeights(model, ctx, device="cuda:0")
    commands, results = [ctx.Queue(), ctx.Queue()], [ctx.Queue(), ctx.Queue()]
    children = [ctx.Process(target=puller, args=(weights, c, r), daemon=True)
                for c, r in zip(commands, results)]
    for c in children:
        c.start()
    try:
        child_memory = []
        allocated = None
        for v in range(0, 101):
            if v:
                fill(model, v)
                weights.publish(model, v)
            if v == 1:
                allocated = torch.cuda.memory_allocated()
            for c in commands:
                c.put("pull")
            got = [r.get(timeout=120) for r in results]
            expected = digest(model.named_parameters())
            for version, d, device, mem in got:
                assert (version, d) == (v, expected)
                assert device.startswith("cuda")
            child_memory.append(got[0][3])
        assert torch.cuda.memory_allocated() == allocated  # 100 syncs allocate nothing here
        assert child_memory[-1] == child_memory[1]  # nor in the child (its private copy is reused)
        for c in commands:
            c.put("stop")
        for c in children:
            c.join(timeout=30)
            assert c.exitcode == 0
    finally:
        for c in children:
            if c.is_alive():
                c.kill()
        weights.close()


@needs_cuda
def test_cuda_bound_pull_writes_the_model_in_place_and_allocates_nothing():
    """A child binds its own model on the GPU: every pull lands in the model's parameters (one
    device copy, no load_weights), exactly, and 50 syncs allocate nothing on either side."""
    ctx = mp.get_context("spawn")
    model = Mixed().cuda()
    weights = FlatWeights(model, ctx, device="cuda:0")
    commands, results = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=bound_puller, args=(weights, Mixed, "cuda:0", commands, results),
                        daemon=True)
    child.start()
    try:
        memory, allocated = [], None
        for v in range(0, 51):
            if v:
                fill(model, v)
                weights.publish(model, v)
            if v == 1:
                allocated = torch.cuda.memory_allocated()
            commands.put("pull")
            version, d, inside, own, mem = results.get(timeout=120)
            assert (version, d, inside, own) == (v, digest(model.named_parameters()), True, True)
            memory.append(mem)
        assert torch.cuda.memory_allocated() == allocated
        assert memory[-1] == memory[0]  # the bound buffer is the only copy, from the start
        commands.put("stop")
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        weights.close()
