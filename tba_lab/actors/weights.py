"""The weight channel from the trainer to the searchers (DESIGN sec. 2, "weight transfer").

All parameters are copied into ONE flat tensor in shared memory (``Tensor.share_memory_()``);
a version counter says which trainer update the flat tensor holds. Publishing is a memcpy under
a lock; a searcher pulls only when the version moved, so a sync costs two copies of the weights
(4 MB for the embedded model) and no pickling. Passed to a spawned child, the flat tensor travels
as a shared-memory handle, not as data.

Simplifications: CPU only (on a GPU the same interface would carry a CUDA IPC handle, and a vLLM
backend would load the flat tensor through its weight-loading API); model *buffers* (e.g. rotary
frequencies) are not synced because they are constants; all parameters must share one dtype.
"""
from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class SharedWeights:
    """Flat shared-memory copy of a model's parameters plus a version counter.

    Args:
        model: the trainer's policy; its parameters define size, order and dtype.
        ctx: a ``torch.multiprocessing`` context (``get_context("spawn")``) for the lock and counter.
    Raises:
        ValueError: if the parameters do not share one dtype.
    """

    def __init__(self, model: torch.nn.Module, ctx):
        params = list(model.parameters())
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise ValueError(f"SharedWeights needs one parameter dtype, got {sorted(map(str, dtypes))}")
        self.flat = parameters_to_vector(params).detach().cpu().clone().share_memory_()  # (P,)
        self.version = ctx.Value("q", 0, lock=False)  # trainer updates the flat tensor holds
        self.lock = ctx.Lock()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s parameters in and set the version (trainer side)."""
        with torch.no_grad(), self.lock:
            self.flat.copy_(parameters_to_vector(model.parameters()).detach().cpu())
            self.version.value = version

    def pull(self, model: torch.nn.Module, have_version: int) -> int:
        """Load the published weights into ``model`` if newer than ``have_version`` (searcher side).

        Returns:
            the version ``model`` now holds.
        Raises:
            ValueError: if ``model``'s parameter count differs from the published one.
        """
        if self.version.value == have_version:
            return have_version
        params = list(model.parameters())
        n = sum(p.numel() for p in params)
        if n != self.flat.numel():
            raise ValueError(f"searcher model has {n} parameters, trainer published "
                             f"{self.flat.numel()}: both must load the same model.path")
        with torch.no_grad(), self.lock:
            version = self.version.value
            vec = self.flat.clone()
        vector_to_parameters(vec, params)
        return version
