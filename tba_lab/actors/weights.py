"""The weight channel from the trainer to the searchers (docs/design.md sec. 2, "weight sync").

All parameters are copied into ONE flat tensor in shared memory (``Tensor.share_memory_()``),
with a manifest of (Hugging Face name, shape, offset) per parameter and a version counter that
says which trainer update the flat tensor holds. Publishing is a memcpy under a lock; a
searcher pulls only when the version moved, gets a private copy as ``(name, tensor)`` views, and
hands them to its backend's ``load_weights``. So a sync costs two copies of the weights (4 MB
for the embedded model) and no pickling, and the channel never touches a torch module on the
searcher side: an engine with its own copy of the model (vLLM) receives the same pairs. Passed
to a spawned child, the flat tensor travels as a shared-memory handle, not as data.

Simplifications: CPU shared memory only (a CUDA channel would export one flat CUDA buffer
once, behind the same publish/pull); model *buffers* (e.g. rotary frequencies) are not synced
because they are constants; tied parameters appear once (``named_parameters`` de-duplicates
them); all parameters must share one dtype.
"""
from __future__ import annotations

import math

import torch
from torch.nn.utils import parameters_to_vector


class SharedWeights:
    """Flat shared-memory copy of a model's parameters, their names, and a version counter.

    Args:
        model: the trainer's policy; its ``named_parameters()`` define names, order and dtype.
        ctx: a ``torch.multiprocessing`` context (``get_context("spawn")``) for the lock and counter.
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
        self.lock = ctx.Lock()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters in and set the version (trainer side)."""
        with torch.no_grad(), self.lock:
            self.flat.copy_(parameters_to_vector(model.parameters()).detach().cpu())
            self.version.value = version

    def pull(self, have_version: int) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """The published weights if they are newer than ``have_version`` (searcher side).

        Returns:
            ``(version, weights)``: ``weights`` is a list of ``(name, tensor)`` views of a
            private copy, for ``backend.load_weights``; ``None`` (and ``have_version``) when
            nothing new was published.
        """
        if self.version.value == have_version:
            return have_version, None
        with self.lock:
            version = self.version.value
            vec = self.flat.clone()
        return version, [(name, vec[offset:offset + math.prod(shape)].view(shape))
                         for name, shape, offset in self.manifest]
