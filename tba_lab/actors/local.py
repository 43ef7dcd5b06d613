"""Launch searchers as ``torch.multiprocessing`` processes on this machine.

:class:`LocalLauncher` (``async.launcher: local``, the default) implements the
:class:`~tba_lab.actors.launcher.Launcher` protocol: ``start()``, ``publish()`` through the
channel :func:`~tba_lab.actors.weights.make_weight_channel` chooses, ``poll()`` for messages,
``restart()`` / ``retire()`` of one searcher, ``stop()``. Processes are spawned (safe with
threads and CUDA) and enter at :func:`tba_lab.actors.searcher.searcher_main`, never a notebook
cell. Each searcher's ``CUDA_VISIBLE_DEVICES`` is its own GPU, then the trainer's when it reads
the CUDA weight buffer from another GPU (:func:`visible_devices_for`); several may share a GPU.

Robust to a searcher killed mid-message (SIGKILL, the OOM killer):

* each searcher has its OWN queue of ``async.queue_size`` batches: a dead writer can leave a
  half message and the queue's write lock held, which in a shared queue would block everyone;
  the trainer closes its copy of each queue's write end, so reading a half message raises
  ``EOFError`` instead of waiting forever;
* the stop flag is a :class:`~tba_lab.actors.locks.StopFlag` (one shared byte), not a
  ``multiprocessing.Event``, whose lock a killed reader would hold for good.

``stop()`` (also registered with ``atexit``) sets the flag, drains the queues while the children
finish, then terminates and kills stragglers. A searcher also ends by itself, within moments, when
the trainer process ends without ``stop()`` (SIGKILL, SIGTERM without a handler):
:func:`tba_lab.actors.lifetime.exit_with_parent`.
"""
from __future__ import annotations

import atexit
import os
import queue as queue_lib
import signal
import threading
import time
from dataclasses import dataclass

import torch.multiprocessing as mp

from tba_lab.actors.launcher import SearcherFailed
from tba_lab.actors.locks import StopFlag
from tba_lab.actors.searcher import SearcherSpec, searcher_main
from tba_lab.actors.weights import FlatWeights, make_weight_channel, normal_device
from tba_lab.registry import LAUNCHERS


@dataclass
class _Searcher:
    process: object   # multiprocessing Process
    queue: object     # its own multiprocessing Queue
    reported: bool = False  # a SearcherFailed was already delivered for this process


def _exit_account(exitcode) -> str:
    """A one-line account of how a process ended, from ``Process.exitcode``."""
    if exitcode == 128 + signal.SIGTERM:  # its SIGTERM handler unwound it (searcher_main)
        return f"the searcher process was ended by SIGTERM (exit code {exitcode})"
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the searcher process was killed by {name} (exit code {exitcode})"
    return f"the searcher process exited with code {exitcode} without reporting an error"


def visible_devices_for(cfg, cuda_channel: bool, parent_visible: str | None) -> dict[int, str]:
    """``CUDA_VISIBLE_DEVICES`` for each searcher on a GPU: ``{searcher id: value}``.

    The value lists the searcher's own GPU first (it becomes its ``cuda:0``), then, when
    ``cuda_channel`` and the trainer is on another GPU, the trainer's GPU (the child opens the
    weight buffer there, found by UUID). GPUs are named as the trainer process's own
    ``CUDA_VISIBLE_DEVICES`` (``parent_visible``) names them, entry ``N`` for ``cuda:N``
    (indices or UUIDs), or by index when it is unset; so no CUDA call is needed here.

    Args:
        cfg: the run config (``async.trainer_device``, ``async.searcher_devices``).
        cuda_channel: the weights travel through a CUDA buffer on the trainer's GPU.
        parent_visible: this process's ``CUDA_VISIBLE_DEVICES`` (None when unset).
    """
    from tba_lab.config import searcher_device

    ids = None if parent_visible is None else [x.strip() for x in parent_visible.split(",")]

    def physical(device: str) -> str:
        n = int(device.split(":")[1])
        return ids[n] if ids is not None and n < len(ids) else str(n)

    trainer = normal_device(cfg.async_.trainer_device)
    out = {}
    for i in range(cfg.async_.num_searchers):
        device = searcher_device(cfg, i)
        if not device.startswith("cuda"):
            continue
        visible = [physical(device)]
        if cuda_channel and trainer.startswith("cuda") and trainer != device:
            visible.append(physical(trainer))
        out[i] = ",".join(visible)
    return out


def _drain(q, out: list) -> bool:
    """Move every complete message of ``q`` into ``out``; False when the queue is broken (a
    dead writer left half a message), True otherwise."""
    try:
        while True:
            out.append(q.get_nowait())
    except queue_lib.Empty:
        return True
    except (EOFError, OSError, ValueError):
        return False


@LAUNCHERS.register
class LocalLauncher:
    """Searcher processes on one machine.

    Args:
        cfg: the :class:`~tba_lab.config.RunConfig`.
        model: the trainer's policy (defines the shared weight buffer).
        use_reference: whether searchers compute reference log-probs (the loss reads them and
            ``async.reference_pass`` is ``searcher``; else the trainer does or nobody needs them).
    """
    name = "local"

    def __init__(self, cfg, model, use_reference: bool = True):
        self.cfg = cfg
        self.spec = SearcherSpec.from_config(cfg, use_reference)
        self.ctx = mp.get_context("spawn")
        self.weights = make_weight_channel(cfg, model, self.ctx)
        self.spec.visible_devices = visible_devices_for(
            cfg, isinstance(self.weights, FlatWeights), os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.stop_event = StopFlag(self.ctx)
        self.searchers: dict[int, _Searcher] = {}
        self.starts: dict[int, int] = {}  # processes started per searcher id (seeds restarts)

    def _spawn(self, i: int) -> None:
        q = self.ctx.Queue(maxsize=self.cfg.async_.queue_size)
        n = self.starts.get(i, 0)
        seed = self.cfg.seed * 1000 + i + 1 + 7919 * n  # a restarted searcher draws new prompts
        p = self.ctx.Process(target=searcher_main, name=f"tba-searcher-{i}", daemon=True,
                             args=(i, self.spec, self.weights, q, self.stop_event, seed))
        p.start()
        q._writer.close()  # the trainer only reads; see the module docstring
        self.searchers[i] = _Searcher(p, q)
        self.starts[i] = n + 1

    def start(self) -> None:
        """Spawn ``cfg.async_.num_searchers`` searcher processes (daemonic)."""
        for i in range(self.cfg.async_.num_searchers):
            self._spawn(i)
        atexit.register(self.stop)

    def publish(self, model, version: int) -> None:
        """Make ``model``'s weights (trainer update count ``version``) visible to searchers."""
        self.weights.publish(model, version)

    def poll(self, timeout: float = 0.0) -> list:
        """All messages waiting now (waiting up to ``timeout`` seconds for the first one):
        :class:`~tba_lab.rollout.RolloutBatch` or :class:`~tba_lab.actors.launcher.SearcherFailed`
        (also for a process found dead, once)."""
        deadline = time.time() + timeout
        while True:
            out = self._poll_once()
            if out or time.time() >= deadline:
                return out
            time.sleep(0.002)

    def _poll_once(self) -> list:
        out: list = []
        for i, s in self.searchers.items():
            dead = not s.process.is_alive()  # before draining: what it sent before dying is read
            mine: list = []
            _drain(s.queue, mine)
            if any(isinstance(m, SearcherFailed) for m in mine):
                s.reported = True
            out += mine
            if dead and not s.reported and not self.stop_event.is_set():
                s.reported = True
                out.append(SearcherFailed(i, _exit_account(s.process.exitcode), reason="exited"))
        return out

    def _end(self, i: int, timeout: float = 2.0) -> None:
        """Terminate searcher ``i`` (SIGTERM, then SIGKILL) and forget its queue."""
        s = self.searchers.pop(i, None)
        if s is None:
            return
        p = s.process
        if p.is_alive():
            p.terminate()
            p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join(timeout=timeout)
        s.queue.close()

    def restart(self, searcher_id: int) -> None:
        """End searcher ``searcher_id`` and spawn a fresh process with a new seed."""
        self._end(searcher_id)
        if not self.stop_event.is_set():
            self._spawn(searcher_id)

    def retire(self, searcher_id: int) -> None:
        """End searcher ``searcher_id`` for good."""
        self._end(searcher_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop all searchers within about ``timeout`` seconds (then terminate, then kill), and
        release the shared memory and named semaphores (a notebook kernel runs many runs)."""
        self.stop_event.set()  # also when a start was interrupted half-way
        deadline = time.time() + timeout
        while time.time() < deadline and any(s.process.is_alive() for s in self.searchers.values()):
            self._poll_once()  # drain so no child blocks on a full queue
            for s in self.searchers.values():
                s.process.join(timeout=0.05)
        for i in list(self.searchers):
            self._end(i)
        self._release()

    def _release(self) -> None:
        """Drop this launcher's multiprocessing objects. ``atexit`` held a reference to the
        launcher until the process exits, which kept the shared weights and the event's named
        semaphores in /dev/shm for every run a kernel ever made."""
        atexit.unregister(self.stop)
        if self.weights is not None:
            self.weights.close()  # the CUDA buffer: released, then torch.cuda.ipc_collect()
        self.weights = None
        stopped = threading.Event()  # later calls see a stopped launcher
        stopped.set()
        self.stop_event = stopped
