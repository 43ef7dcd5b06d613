"""Launch searchers as ``torch.multiprocessing`` processes on this machine.

:class:`LocalLauncher` (``async.launcher: local``, the default) implements the
:class:`~tba_lab.actors.launcher.Launcher` protocol the trainer uses: ``start()``,
``publish()`` through :class:`~tba_lab.actors.weights.SharedWeights`, ``poll()`` for messages,
``alive()``, ``stop()``. A launcher for Ray actors on other machines plugs in behind the same
five methods.

Processes use the ``spawn`` start method (safe with threads and, later, CUDA); their entry point
lives in the package (:func:`tba_lab.actors.searcher.searcher_main`), never in a notebook cell.
``stop()`` sets the stop event, drains the queue while the children finish (a child blocked on a
full queue must never hang shutdown), then terminates and finally kills stragglers: no process
is left behind. It is also registered with ``atexit``.
"""
from __future__ import annotations

import atexit
import queue as queue_lib
import time

import torch.multiprocessing as mp

from tba_lab.actors.searcher import SearcherSpec, searcher_main
from tba_lab.actors.weights import SharedWeights
from tba_lab.registry import LAUNCHERS


@LAUNCHERS.register
class LocalLauncher:
    """Searcher processes on one machine.

    Args:
        cfg: the :class:`~tba_lab.config.RunConfig`.
        model: the trainer's policy (defines the shared weight buffer).
        use_reference: whether searchers compute reference log-probs (the loss reads them).
    """
    name = "local"

    def __init__(self, cfg, model, use_reference: bool = True):
        self.cfg = cfg
        self.spec = SearcherSpec.from_config(cfg, use_reference)
        self.ctx = mp.get_context("spawn")
        self.weights = SharedWeights(model, self.ctx)
        self.queue = self.ctx.Queue(maxsize=cfg.async_.queue_size)
        self.stop_event = self.ctx.Event()
        self.processes: list = []

    def start(self) -> None:
        """Spawn ``cfg.async_.num_searchers`` searcher processes (daemonic)."""
        for i in range(self.cfg.async_.num_searchers):
            p = self.ctx.Process(
                target=searcher_main, name=f"tba-searcher-{i}", daemon=True,
                args=(i, self.spec, self.weights, self.queue, self.stop_event,
                      self.cfg.seed * 1000 + i + 1))
            p.start()
            self.processes.append(p)
        atexit.register(self.stop)

    def publish(self, model, version: int) -> None:
        """Make ``model``'s weights (trainer update count ``version``) visible to searchers."""
        self.weights.publish(model, version)

    def poll(self, timeout: float = 0.0) -> list:
        """All messages waiting now (waiting up to ``timeout`` seconds for the first one):
        :class:`~tba_lab.rollout.RolloutBatch` or :class:`~tba_lab.actors.launcher.SearcherFailed`."""
        out = []
        try:
            out.append(self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait())
            while True:
                out.append(self.queue.get_nowait())
        except queue_lib.Empty:
            pass
        return out

    def alive(self) -> bool:
        """True while every searcher process is running."""
        return all(p.is_alive() for p in self.processes)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop all searchers within about ``timeout`` seconds (then terminate, then kill)."""
        if not self.processes:
            return
        self.stop_event.set()
        deadline = time.time() + timeout
        while time.time() < deadline and any(p.is_alive() for p in self.processes):
            self.poll()  # drain so no child blocks on a full queue
            for p in self.processes:
                p.join(timeout=0.05)
        for p in self.processes:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        self.poll()
        self.processes = []
