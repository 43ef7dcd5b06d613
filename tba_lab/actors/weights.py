"""The weight channel from the trainer to the searchers (docs/design.md sec. 2, "weight sync").

One contract: ``publish(model, version)`` on the trainer side, ``pull(have_version) -> (version,
[(name, tensor)] or None)`` on the searcher side, and ``bind(model)`` for a searcher that samples
from its own copy of the policy. :func:`make_weight_channel` picks the channel:

* :class:`SharedWeights` (CPU, the default): all parameters in one flat float tensor in shared
  memory, in ``named_parameters()`` order; one dtype.
* :class:`FlatWeights` (trainer and every searcher on CUDA devices of this machine): one flat
  ``uint8`` buffer on the trainer's device, laid out by a :class:`Layout` (mixed dtypes), exported
  to each searcher once through CUDA IPC when the channel is pickled into the spawned child. The
  child opens it at its first ``pull`` on the local index of the same GPU UUID
  (:func:`local_index`), since torch reopens handles on the producer's index. On a CPU device the
  same class runs on shared memory, which is how CI tests it.

A sync is one copy on each side: ``publish`` copies each parameter into views made once, under a
:class:`~tba_lab.actors.locks.FileLock` held alone; a bound searcher's parameters are views of a
private buffer, so ``pull`` (lock held shared) is one copy and is the load. An unbound searcher
(vLLM, ``own_engine = True``) gets ``(name, tensor)`` views to pass to ``load_weights``: two
copies. The file lock is released by the kernel when its holder dies, so a searcher killed
mid-copy never blocks the trainer. Buffers (rotary frequencies) are constants and not synced; a
searcher pulls only between generation batches, so a batch never mixes two versions. Measured
costs: docs/log.md.

CUDA IPC rules followed (torch "Multiprocessing best practices"; the flat-buffer pattern of
OpenRLHF, verl and vLLM): spawn, same machine, the launcher keeps the buffer alive and calls
:meth:`FlatWeights.close` at the end, explicit synchronisation on both sides, and
``expandable_segments:True`` refused (:func:`check_exportable_allocator`). The CUDA path runs only
in ``bench/gpu_check.sh`` and the CUDA-marked tests.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import dataclass

import torch

from tba_lab.actors.locks import FileLock
from tba_lab.checkpoint import check_finite_weights

ALIGN = 256  # bytes; every parameter's view starts at a multiple of this (enough for any dtype and vector loads)


# ------------------------------------------------------------------------- both sides' copies
class _Packer:
    """The trainer's side of a publish: copies a model's parameters into FIXED views of a flat
    buffer, made once here rather than per publish (making ~300 views costs about a millisecond
    of Python per publish). The views are grouped by dtype so that each group is one
    ``torch._foreach_copy_`` on torch's fast path, which wants one dtype per list (on CUDA: one
    multi-tensor kernel per few dozen tensors; on the CPU: a loop of memcpys in C++).

    Args:
        specs: ``(name, dtype, shape)`` per parameter, in ``named_parameters()`` order.
        views: one tensor per spec, a view of the buffer with that dtype and shape.
    """

    def __init__(self, specs: list[tuple[str, torch.dtype, tuple[int, ...]]], views: list[torch.Tensor]):
        self.specs = specs
        groups: dict[torch.dtype, list[int]] = {}
        for i, (_, dtype, _) in enumerate(specs):
            groups.setdefault(dtype, []).append(i)
        self.group_of = [0] * len(specs)
        for g, members in enumerate(groups.values()):
            for i in members:
                self.group_of[i] = g
        self.dst = [[views[i] for i in members] for members in groups.values()]

    def gather(self, named) -> list[list[torch.Tensor]]:
        """The source tensors of ``named`` (``(name, tensor)`` pairs, e.g. the trainer's
        ``named_parameters()``, any device), grouped as the destination views.

        Raises:
            ValueError: a name, dtype or shape differs from the channel's, or the number of
                parameters differs.
        """
        named = list(named)
        if len(named) != len(self.specs):
            raise ValueError(f"the model has {len(named)} parameters, the channel {len(self.specs)}; "
                             f"publish the model the channel was built for")
        srcs: list[list[torch.Tensor]] = [[] for _ in self.dst]
        for (name, t), (e_name, e_dtype, e_shape), g in zip(named, self.specs, self.group_of):
            if name != e_name or t.dtype != e_dtype or t.shape != e_shape:
                raise ValueError(f"parameter {name} {t.dtype} {tuple(t.shape)} does not match the "
                                 f"channel's {e_name} {e_dtype} {e_shape}; publish the model the "
                                 f"channel was built for")
            srcs[g].append(t)
        return srcs

    @torch.no_grad()
    def copy(self, srcs: list[list[torch.Tensor]]) -> None:
        """Copy :meth:`gather`'s tensors into the views (asynchronous on CUDA)."""
        for dst, src in zip(self.dst, srcs):
            torch._foreach_copy_(dst, src)


@dataclass
class _Bound:
    """A searcher's model bound to a channel: ``buf`` is the private flat buffer (the channel's
    layout, on the model's device) whose views ARE the model's parameters; ``named`` lists the
    model's own ``(name, Parameter)`` pairs in the channel's order."""
    buf: torch.Tensor
    named: list[tuple[str, torch.nn.Parameter]]


def _model_device(model: torch.nn.Module) -> torch.device:
    devices = {p.device for p in model.parameters()}
    if len(devices) != 1:
        raise ValueError(f"binding needs every parameter on one device, got {sorted(map(str, devices))}")
    return devices.pop()


@torch.no_grad()
def _bind(model: torch.nn.Module, buf: torch.Tensor, views: list[tuple[str, torch.Tensor]]) -> _Bound:
    """Point ``model``'s parameters at ``views`` of ``buf`` (``param.data = view``), values kept.

    The Parameter objects stay the same, so a parameter tied between two modules (one object,
    listed once by ``named_parameters``) stays tied: both modules see the view. An optimizer or
    anything else holding those Parameter objects keeps working.

    Raises:
        ValueError: the model's parameter names differ from the channel's, or a dtype or shape
            differs (trainer and searchers must load the same ``model.path``).
    """
    params = dict(model.named_parameters())
    names = [n for n, _ in views]
    if set(params) != set(names):
        missing, extra = sorted(set(names) - set(params)), sorted(set(params) - set(names))
        raise ValueError(f"cannot bind: the channel's parameters {missing[:3]} are not in the model, "
                         f"the model's {extra[:3]} not in the channel; trainer and searchers must "
                         f"load the same model.path")
    for name, v in views:
        p = params[name]
        if p.dtype != v.dtype or p.shape != v.shape:
            raise ValueError(f"cannot bind parameter {name}: the model's {p.dtype} {tuple(p.shape)}, "
                             f"the channel's {v.dtype} {tuple(v.shape)}; same model.path needed")
    for name, v in views:
        v.copy_(params[name])  # the model computes the same until the next pull
        params[name].data = v
    return _Bound(buf, [(name, params[name]) for name in names])


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
        self.manifest: list[tuple[str, tuple[int, ...], int]] = []  # (name, shape, offset in elements)
        offset = 0
        for name, p in named:
            self.manifest.append((name, tuple(p.shape), offset))
            offset += p.numel()
        self.flat = torch.empty(offset, dtype=dtypes.pop()).share_memory_()  # (P,)
        self._packer: _Packer | None = None  # trainer side, made at first use (not pickled)
        self._bound: _Bound | None = None    # searcher side, set by bind
        packer = self._get_packer()
        packer.copy(packer.gather(named))
        self.version = ctx.Value("q", 0, lock=False)  # trainer updates the flat tensor holds
        self.lock = FileLock()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_packer"] = state["_bound"] = None  # per-process views, rebuilt where used
        return state

    def _views(self, vec: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return [(name, vec[offset:offset + math.prod(shape)].view(shape))
                for name, shape, offset in self.manifest]

    def _get_packer(self) -> _Packer:
        if self._packer is None:
            self._packer = _Packer([(n, self.flat.dtype, s) for n, s, _ in self.manifest],
                                   [v for _, v in self._views(self.flat)])
        return self._packer

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters in (from any device) and set the version (trainer side).

        One copy: each parameter straight into its place in the shared tensor.

        Raises:
            ValueError: a parameter's name, dtype or shape differs from the channel's.
            FloatingPointError: a parameter holds NaN or inf (never published; the searchers
                keep the previous version).
        """
        check_finite_weights(model.named_parameters(), f"publish weights version {version}")
        packer = self._get_packer()
        srcs = packer.gather(model.named_parameters())  # checked before the lock is taken
        with self.lock.exclusive():
            packer.copy(srcs)
            self.version.value = version

    def bind(self, model: torch.nn.Module) -> None:
        """Make ``model``'s parameters views of ONE private flat tensor (searcher side, once,
        after the model is on its device), so that every later :meth:`pull` copies the shared
        tensor straight into the model: the pull is the load.

        The model keeps its values until the next pull; pull with ``have_version=-1`` to get the
        published ones. Moving the model afterwards (``.to``) undoes the binding.

        Args:
            model: the searcher's copy of the policy (same ``model.path`` as the trainer's),
                all parameters on one device (the private tensor goes there).
        Raises:
            ValueError: names, dtypes or shapes differ from the channel's, or the parameters
                are on several devices.
        """
        device = _model_device(model)
        buf = torch.empty(self.flat.numel(), dtype=self.flat.dtype, device=device)  # (P,)
        self._bound = _bind(model, buf, self._views(buf))

    def pull(self, have_version: int) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """The published weights if they are newer than ``have_version`` (searcher side).

        Returns:
            ``(version, weights)``: ``None`` (and ``have_version``) when nothing new was
            published. Else, unbound: ``(name, tensor)`` views of a private CPU copy made for
            this pull, for ``backend.load_weights``; bound (:meth:`bind`): the model's own
            ``(name, Parameter)`` pairs, already holding the new values (loading them again is
            needless; ``TransformersBackend.load_weights`` skips them).
        """
        if self.version.value == have_version:
            return have_version, None
        bound = self._bound
        with self.lock.shared():
            version = self.version.value
            vec = self._copy_out(None if bound is None else bound.buf)
        if bound is not None:
            return version, list(bound.named)
        return version, self._views(vec)

    def _copy_out(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The copy a pull makes under the lock, into ``out`` (the bound private tensor) or a
        new private tensor (a seam for the fault tests)."""
        if out is None:
            return self.flat.clone()
        return out.copy_(self.flat)

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

    def specs(self) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
        """``(name, dtype, shape)`` per entry."""
        return [(e.name, e.dtype, e.shape) for e in self.entries]

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

    def packer(self, buf: torch.Tensor) -> _Packer:
        """A reusable copier of parameters into ``buf`` (see :meth:`pack`), views made once."""
        return _Packer(self.specs(), [v for _, v in self.views(buf)])

    def pack(self, named, buf: torch.Tensor) -> None:
        """Copy ``named`` tensors (same names and order as the layout, any device) into ``buf``
        with one ``torch._foreach_copy_`` per dtype (one multi-tensor kernel per few dozen
        tensors on CUDA). For repeated packs into one buffer keep a :meth:`packer`.

        Raises:
            ValueError: a name, dtype or shape differs from the layout.
        """
        p = self.packer(buf)
        p.copy(p.gather(named))


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
        self._packer: _Packer | None = None  # trainer side, made at first use (not pickled)
        self._bound: _Bound | None = None    # searcher side, set by bind
        packer = self._get_packer()
        packer.copy(packer.gather(named))
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
        state["_packer"] = state["_bound"] = None  # per-process views, rebuilt where used
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

    def _get_packer(self) -> _Packer:
        if self._packer is None:
            self._packer = self.layout.packer(self.buf)
        return self._packer

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters into the buffer, synchronize, set ``version`` (trainer).

        One copy: each parameter straight into its view of the buffer, one
        ``torch._foreach_copy_`` per dtype into views made once (not per publish); the
        parameters are checked against the layout before the lock is taken.

        Raises:
            ValueError: a parameter's name, dtype or shape differs from the layout.
            FloatingPointError: a parameter holds NaN or inf (never published; the searchers
                keep the previous version).
        """
        check_finite_weights(model.named_parameters(), f"publish weights version {version}")
        packer = self._get_packer()
        srcs = packer.gather(model.named_parameters())
        with self.lock.exclusive():
            packer.copy(srcs)
            self._sync()  # the copies are done before anyone sees the new version
            self.version.value = version

    def bind(self, model: torch.nn.Module) -> None:
        """Make ``model``'s parameters views of ONE private buffer of this channel's
        :class:`Layout` (searcher side, once, after the model is on its device), so that every
        later :meth:`pull` is one copy of the shared buffer into it: the pull is the load.

        The model keeps its values until the next pull; pull with ``have_version=-1`` to get the
        published ones. Moving the model afterwards (``.to``) undoes the binding.

        Args:
            model: the searcher's copy of the policy (same ``model.path`` as the trainer's),
                all parameters on one device (the private buffer goes there).
        Raises:
            ValueError: names, dtypes or shapes differ from the layout, or the parameters are
                on several devices.
        """
        device = _model_device(model)
        buf = torch.empty(self.layout.nbytes, dtype=torch.uint8, device=device)  # (nbytes,)
        self._bound = _bind(model, buf, self.layout.views(buf))

    def pull(self, have_version: int, device=None) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """The published weights if newer than ``have_version`` (searcher side).

        Args:
            have_version: the version the caller holds.
            device: where an unbound pull's private copy goes; default: the current CUDA device
                for a CUDA buffer (a searcher's own GPU, ``cuda:0`` after it narrowed its
                visible devices), the CPU for a CPU buffer. Ignored once bound (:meth:`bind`):
                the copy goes to the bound model's buffer.

        Returns:
            ``(version, weights)``: ``None`` and ``have_version`` when nothing new. Else,
            unbound: ``(name, tensor)`` views of a private copy made for this pull (each with
            its parameter's dtype and shape), for ``backend.load_weights``; bound: the model's
            own ``(name, Parameter)`` pairs, already holding the new values.
        """
        if self.version.value == have_version:
            return have_version, None
        if self.buf is None:
            self._attach()
        bound = self._bound
        if bound is not None:
            target = bound.buf.device
        elif device is not None:
            target = torch.device(device)
        elif self.device.type == "cuda":
            target = torch.device("cuda", torch.cuda.current_device())
        else:
            target = self.device
        with self.lock.shared():
            version = self.version.value
            copy = self._copy_out(target, None if bound is None else bound.buf)
            if target.type == "cuda":
                torch.cuda.synchronize(target)
            if target != self.device:
                self._sync()  # the copy has finished reading before the trainer may write again
        if bound is not None:
            return version, list(bound.named)
        return version, self.layout.views(copy)

    def _copy_out(self, target: torch.device, out: torch.Tensor | None = None) -> torch.Tensor:
        """The copy a pull makes under the lock: into ``out`` (the bound private buffer, on
        ``target``) or a new private copy on ``target`` (a seam for the fault tests)."""
        if out is None:
            return self.buf.to(target, copy=True)
        return out.copy_(self.buf)

    def close(self) -> None:
        """Drop this process's reference to the buffer; on CUDA also ``torch.cuda.ipc_collect()``
        (the producer frees the block once every consumer released its handle). Closes the
        lock's file (the trainer also removes it). A bound model keeps its private buffer."""
        self.lock.close()
        was_cuda = self.device.type == "cuda" and (self.buf is not None or self._handle is not None)
        self.buf, self._handle, self._packer, self._bound = None, None, None, None
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
