"""The weight channel from the trainer to the searchers (docs/design.md sec. 2, "weight sync").

Two channels with one contract, ``publish(model, version)`` on the trainer side and
``pull(have_version) -> (version, [(name, tensor)] or None)`` on the searcher side, plus a
version counter shared through a ``torch.multiprocessing`` spawn context and a readers-writer
lock (:class:`~tba_lab.actors.locks.FileLock`): ``publish`` holds it alone, ``pull`` shared
(searchers copy at the same time), and the kernel releases it when its holder's process ends,
so a searcher killed in the middle of its copy (SIGKILL, the OOM killer) never blocks the
trainer's next ``publish`` (``multiprocessing.Lock`` would stay held for good):

* :class:`SharedWeights` (CPU, the default): all parameters in ONE flat float tensor in shared
  memory (``Tensor.share_memory_()``). Publishing is a memcpy under the lock; a searcher pulls
  only when the version moved and gets a private copy. A sync costs two copies of the weights
  (4 MB for the embedded model) and no pickling. All parameters must share one dtype.
* :class:`FlatWeights` (the CUDA IPC channel, chosen by :func:`make_weight_channel` when the
  trainer and every searcher are on CUDA devices of this machine): ONE flat ``uint8`` buffer on
  the trainer's device, laid out by a :class:`Layout` (name, dtype, shape and a 256-byte aligned
  offset per parameter, so mixed dtypes are fine), exported to each searcher ONCE, when the
  channel is pickled into the spawned child with its arguments, never per sync. The child
  rebuilds the handle lazily, at its first ``pull`` (after it has set ``CUDA_VISIBLE_DEVICES``),
  and keeps it until :meth:`FlatWeights.close` or its exit. torch's own rebuild
  (``rebuild_cuda_tensor``) opens the handle on the PRODUCER's device index, which names
  another GPU (or none) in a child that sees other devices; so the channel carries the GPU's
  UUID (``torch.cuda.get_device_properties(i).uuid``) and the child replaces that index by the
  position of the same UUID among its own visible devices (:func:`local_index`).
  ``publish`` = ``torch._foreach_copy_`` of the parameters into the buffer's views,
  ``torch.cuda.synchronize``, then the version bump, all under the lock; ``pull`` = one copy of
  the whole buffer to the searcher's device and a ``synchronize`` before the lock is released.
  On a CPU device the same class runs on shared memory, which is how the tests exercise its
  layout, version protocol and pickling without a GPU.

Both channels hand out ``(Hugging Face name, tensor)`` views of a private copy, for the
backend's ``load_weights`` (an engine with its own copy of the model, vLLM, receives the same
pairs). Tied parameters appear once (``named_parameters`` de-duplicates them); model *buffers*
(e.g. rotary frequencies) are not synced because they are constants. A searcher pulls only
between generation batches (:mod:`tba_lab.actors.searcher`), so one batch never mixes two
versions.

CUDA IPC rules this follows (torch "Multiprocessing best practices: sharing CUDA tensors";
the flat-buffer pattern of OpenRLHF, verl and vLLM's IPC weight transfer): spawn (not fork);
same machine only; the producer keeps the buffer alive while consumers use it (the launcher
holds the channel for its whole life and calls :meth:`FlatWeights.close`, which runs
``torch.cuda.ipc_collect()``, when it stops); the IPC event orders only writes made before the
export, so a reused buffer needs the explicit synchronisation on both sides done here; memory
from the allocator's expandable segments does not export everywhere, so
``expandable_segments:True`` in ``PYTORCH_CUDA_ALLOC_CONF`` is refused
(:func:`check_exportable_allocator`). A searcher killed without releasing its handle leaves the
buffer referenced until the trainer process exits (the block is freed then).

Not run here: the CUDA path was written against the torch 2.13 sources
(``torch/multiprocessing/reductions.py``) and is exercised only by ``bench/gpu_check.sh`` and
the CUDA-marked tests on a GPU machine; CI has no GPU and tests the same class on CPU.
"""
from __future__ import annotations

import inspect
import math
import os
from dataclasses import dataclass

import torch
from torch.nn.utils import parameters_to_vector

from tba_lab.actors.locks import FileLock

ALIGN = 256  # bytes; every parameter's view starts at a multiple of this (enough for any dtype and vector loads)


class SharedWeights:
    """Flat shared-memory copy of a model's parameters, their names, and a version counter.

    Args:
        model: the trainer's policy; its ``named_parameters()`` define names, order and dtype.
        ctx: a ``torch.multiprocessing`` context (``get_context("spawn")``) for the counter.
    Raises:
        ValueError: if the parameters do not share one dtype.
    """

    def __init__(self, model: torch.nn.Module, ctx):
        named = list(model.named_parameters())
        dtypes = {p.dtype for _, p in named}
        if len(dtypes) != 1:
            raise ValueError(f"SharedWeights needs one parameter dtype, got {sorted(map(str, dtypes))}")
        self.manifest: list[tuple[str, tuple[int, ...], int]] = []  # (name, shape, offset)
        offset = 0
        for name, p in named:
            self.manifest.append((name, tuple(p.shape), offset))
            offset += p.numel()
        self.flat = parameters_to_vector([p for _, p in named]).detach().cpu().clone().share_memory_()  # (P,)
        self.version = ctx.Value("q", 0, lock=False)  # trainer updates the flat tensor holds
        self.lock = FileLock()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters in (from any device) and set the version (trainer side)."""
        with torch.no_grad(), self.lock.exclusive():
            self.flat.copy_(parameters_to_vector(model.parameters()).detach().cpu())
            self.version.value = version

    def pull(self, have_version: int) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """The published weights if they are newer than ``have_version`` (searcher side).

        Returns:
            ``(version, weights)``: ``weights`` is a list of ``(name, tensor)`` views of a
            private CPU copy, for ``backend.load_weights``; ``None`` (and ``have_version``)
            when nothing new was published.
        """
        if self.version.value == have_version:
            return have_version, None
        with self.lock.shared():
            version = self.version.value
            vec = self._copy_out()
        return version, [(name, vec[offset:offset + math.prod(shape)].view(shape))
                         for name, shape, offset in self.manifest]

    def _copy_out(self) -> torch.Tensor:
        """The private copy a pull makes under the lock (a seam for the fault tests)."""
        return self.flat.clone()

    def close(self) -> None:
        """Close the lock's file (the trainer also removes it); shared memory goes with the
        last reference."""
        self.lock.close()


# ------------------------------------------------------------------------------------ layout
@dataclass(frozen=True)
class Entry:
    """One parameter's place in a flat byte buffer.

    Attributes:
        name: Hugging Face parameter name (``model.layers.0.mlp.up_proj.weight``).
        dtype: its ``torch.dtype``.
        shape: its shape.
        offset: first byte, a multiple of :data:`ALIGN`.
        nbytes: ``numel * element_size``.
    """
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int


class Layout:
    """The manifest of a flat ``uint8`` buffer: where each named parameter lives.

    Device-agnostic: :meth:`views` and :meth:`pack` work on a CPU or a CUDA buffer alike.

    Args:
        named: ``(name, tensor)`` pairs, e.g. ``model.named_parameters()`` (tied parameters
            already appear once there).
        align: byte alignment of every offset (a power of two, >= the largest element size).

    Attributes:
        entries: one :class:`Entry` per parameter, in order.
        nbytes: total buffer size in bytes (the last entry's end, rounded up to ``align``).
    """

    def __init__(self, named, align: int = ALIGN):
        if align < 1 or align & (align - 1):
            raise ValueError(f"align={align}: must be a power of two")
        self.entries: list[Entry] = []
        offset = 0
        for name, t in named:
            if t.element_size() > align:
                raise ValueError(f"{name}: element size {t.element_size()} exceeds align={align}")
            offset = -(-offset // align) * align
            size = t.numel() * t.element_size()
            self.entries.append(Entry(name, t.dtype, tuple(t.shape), offset, size))
            offset += size
        self.nbytes = max(align, -(-offset // align) * align)

    def views(self, buf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` views into ``buf`` (1-D ``uint8`` of :attr:`nbytes`), each with
        its parameter's dtype and shape; writing a view writes the buffer.

        Raises:
            ValueError: ``buf`` is not a 1-D uint8 tensor of :attr:`nbytes` bytes.
        """
        if buf.dtype != torch.uint8 or buf.dim() != 1 or buf.numel() != self.nbytes:
            raise ValueError(f"expected a 1-D uint8 buffer of {self.nbytes} bytes, got "
                             f"{buf.dtype} {tuple(buf.shape)}")
        return [(e.name, buf[e.offset:e.offset + e.nbytes].view(e.dtype).view(e.shape))
                for e in self.entries]

    def pack(self, named, buf: torch.Tensor) -> None:
        """Copy ``named`` tensors (same names and order as the layout, any device) into ``buf``
        with one ``torch._foreach_copy_`` (one multi-tensor kernel on CUDA).

        Raises:
            ValueError: a name, dtype or shape differs from the layout.
        """
        tensors = []
        for e, (name, t) in zip(self.entries, named, strict=True):
            if (name, t.dtype, tuple(t.shape)) != (e.name, e.dtype, e.shape):
                raise ValueError(f"parameter {name} {t.dtype} {tuple(t.shape)} does not match the "
                                 f"channel's {e.name} {e.dtype} {e.shape}; publish the model the "
                                 f"channel was built for")
            tensors.append(t.detach())
        with torch.no_grad():
            torch._foreach_copy_([v for _, v in self.views(buf)], tensors)


# ------------------------------------------------------------------------------ CUDA helpers
def _alloc_conf() -> str:
    return ",".join(os.environ.get(v, "") for v in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))


def expandable_segments_on() -> bool:
    """True when ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``) asks the CUDA caching
    allocator for ``expandable_segments:True``."""
    return "expandable_segments:true" in _alloc_conf().replace(" ", "").lower()


def check_exportable_allocator() -> None:
    """Raise RuntimeError when CUDA memory would come from expandable segments, which cannot
    always be exported through CUDA IPC (cudaIpcGetMemHandle fails on them in containers)."""
    if expandable_segments_on():
        raise RuntimeError(
            "PYTORCH_CUDA_ALLOC_CONF asks for expandable_segments:True, whose memory the CUDA IPC "
            "weight channel cannot export to searcher processes; unset it (or set "
            "expandable_segments:False) for runs with async.trainer_device on CUDA")


def device_uuid(index: int) -> str:
    """``"GPU-<uuid>"`` of visible CUDA device ``index``, the form ``CUDA_VISIBLE_DEVICES``
    accepts (a MIG slice's UUID is returned as torch reports it)."""
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))
    if not uuid:
        raise RuntimeError(f"torch {torch.__version__} does not report device UUIDs")
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def local_index(uuid: str, uuids: list[str], fallback: int) -> int:
    """The index of the GPU ``uuid`` among this process's visible devices (``uuids``, in
    ``cuda:i`` order), or ``fallback`` (the producer's index) when it is not listed, e.g. when
    UUIDs are unavailable and both processes see the same devices."""
    return uuids.index(uuid) if uuid in uuids else fallback


def _visible_uuids() -> list[str]:
    try:
        return [device_uuid(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def _storage_device_position(fn) -> int:
    """Where ``storage_device`` sits in the arguments of torch's ``rebuild_cuda_tensor``."""
    return list(inspect.signature(fn).parameters).index("storage_device")


# -------------------------------------------------------------------------- the flat channel
class FlatWeights:
    """A model's parameters in one flat ``uint8`` buffer on ``device`` (CUDA IPC or CPU shared
    memory), with a :class:`Layout` and a version counter; the channel for CUDA trainers.

    Args:
        model: the trainer's policy; ``named_parameters()`` define names, order, dtypes (mixed
            dtypes allowed). Its current weights are published as version 0.
        ctx: a ``torch.multiprocessing`` spawn context (the version counter).
        device: where the buffer lives: the trainer's device (``"cuda:0"``), or ``"cpu"``.

    Raises:
        RuntimeError: a CUDA device with ``expandable_segments:True`` in the allocator settings.
    """

    def __init__(self, model: torch.nn.Module, ctx, device="cpu"):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            check_exportable_allocator()
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        named = list(model.named_parameters())
        self.layout = Layout(named)
        self.buf = torch.zeros(self.layout.nbytes, dtype=torch.uint8, device=self.device)  # (nbytes,)
        if self.device.type == "cpu":
            self.buf.share_memory_()
        self.layout.pack(named, self.buf)
        self._sync()
        self.version = ctx.Value("q", 0, lock=False)
        self.lock = FileLock()
        self.uuid = ""  # the buffer's GPU, as consumers look it up ("" = by index)
        if self.device.type == "cuda":
            try:
                self.uuid = device_uuid(self.device.index)
            except RuntimeError:
                pass
        self._handle = None  # consumer side: torch's rebuild function and arguments, until used

    # the producer exports the buffer when the channel is pickled into a spawned child
    def __getstate__(self):
        state = dict(self.__dict__)
        if self.buf is not None and self.device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            state["_handle"] = reduce_tensor(self.buf)  # (rebuild_cuda_tensor, args): one export
            state["buf"] = None  # rebuilt lazily, after the child chose its visible devices
        return state

    def _attach(self) -> None:
        """Consumer side, first use: open the IPC handle on the local index of the buffer's GPU."""
        fn, args = self._handle
        args = list(args)
        pos = _storage_device_position(fn)
        producer_index = args[pos]
        local = local_index(self.uuid, _visible_uuids(), producer_index)
        args[pos] = local
        self.buf = fn(*args)
        self.device = torch.device("cuda", local)
        self._handle = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters into the buffer, synchronize, set ``version`` (trainer)."""
        with self.lock.exclusive():
            self.layout.pack(model.named_parameters(), self.buf)
            self._sync()  # the copies are done before anyone sees the new version
            self.version.value = version

    def pull(self, have_version: int, device=None) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """The published weights if newer than ``have_version`` (searcher side).

        Args:
            have_version: the version the caller holds.
            device: where the private copy goes; default: the current CUDA device for a CUDA
                buffer (a searcher's own GPU, ``cuda:0`` after it narrowed its visible
                devices), the CPU for a CPU buffer.

        Returns:
            ``(version, weights)``: ``(name, tensor)`` views of a private copy (each with its
            parameter's dtype and shape), or ``None`` and ``have_version`` when nothing new.
        """
        if self.version.value == have_version:
            return have_version, None
        if self.buf is None:
            self._attach()
        if device is not None:
            target = torch.device(device)
        elif self.device.type == "cuda":
            target = torch.device("cuda", torch.cuda.current_device())
        else:
            target = self.device
        with self.lock.shared():
            version = self.version.value
            copy = self._copy_out(target)
            if target.type == "cuda":
                torch.cuda.synchronize(target)
            self._sync()  # the copy has finished reading before the trainer may write again
        return version, self.layout.views(copy)

    def _copy_out(self, target: torch.device) -> torch.Tensor:
        """The private copy a pull makes under the lock (a seam for the fault tests)."""
        return self.buf.to(target, copy=True)

    def close(self) -> None:
        """Drop this process's reference to the buffer; on CUDA also ``torch.cuda.ipc_collect()``
        (the producer frees the block once every consumer released its handle). Closes the
        lock's file (the trainer also removes it)."""
        self.lock.close()
        was_cuda = self.device.type == "cuda" and (self.buf is not None or self._handle is not None)
        self.buf, self._handle = None, None
        if was_cuda and torch.cuda.is_initialized():
            torch.cuda.ipc_collect()


def normal_device(device: str) -> str:
    """``"cuda"`` -> ``"cuda:0"``; other device strings unchanged."""
    return "cuda:0" if device == "cuda" else device


def make_weight_channel(cfg, model: torch.nn.Module, ctx):
    """The channel for ``cfg``'s placement: :class:`FlatWeights` on the trainer's GPU when
    ``async.trainer_device`` and every searcher device are CUDA devices, else
    :class:`SharedWeights` (CPU shared memory; a CUDA trainer's publish copies to the CPU, a CUDA
    searcher's ``load_weights`` copies to its GPU)."""
    from tba_lab.config import searcher_device

    a = cfg.async_
    devices = {searcher_device(cfg, i) for i in range(a.num_searchers)}
    if a.trainer_device.startswith("cuda") and all(d.startswith("cuda") for d in devices):
        return FlatWeights(model, ctx, device=normal_device(a.trainer_device))
    return SharedWeights(model, ctx)
