"""The searcher (actor) loop: pull weights, roll out, push (docs/design.md sec. 2).

A searcher holds a possibly stale copy of the policy (inside its generation backend) and, with
``async.reference_pass: searcher``, the frozen reference policy. Each iteration it

  0. waits until its queue (``async.queue_size`` batches) has room (:func:`wait_for_room`), so
     the batch it generates next carries the newest weights instead of aging behind a full
     queue,
  1. pulls new weights if the trainer published since (:mod:`tba_lab.actors.weights`; a bound
     policy's pull is its load, an engine of its own such as vLLM gets ``load_weights``),
  2. takes the next ``num_prompts_per_step`` problems of the task's train split (a seeded pass,
     reshuffled each epoch),
  3. calls :func:`tba_lab.rollout.rollout`: K responses per prompt with their behaviour
     log-probs, the task's rewards, and reference log-probs (None when the trainer computes
     them or no loss reads them),
  4. puts the :class:`~tba_lab.rollout.RolloutBatch`, tagged with the policy version, on the
     queue, with a timeout in a loop so a stop request is always seen.

Weights change only at step 1, so every row of a batch comes from the version it is tagged with.
In ``sync`` mode it generates exactly one batch per published version. The loop ends when
``stop`` is set or the parent dies; SIGINT is ignored (the trainer owns shutdown). A searcher
process also ends as soon as its trainer process ends, however it ends, mid-batch too
(:func:`tba_lab.actors.lifetime.exit_with_parent`: SIGTERM, which raises ``SystemExit`` here,
so the ``finally`` cleanup runs). An exception is reported as
:class:`~tba_lab.actors.launcher.SearcherFailed` and the process exits with 1.

Placement: searcher i runs on ``async.searcher_devices[i % len]`` (:func:`searcher_device`;
empty = the trainer's device). A local launcher passes ``CUDA_VISIBLE_DEVICES`` in
``SearcherSpec.visible_devices`` (its own GPU first, then the trainer's, by UUID), which
:func:`_loop` sets before CUDA starts, so the searcher works on ``cuda:0``; under Ray the
configured device is used as given. Messages carry plain CPU lists.
"""
from __future__ import annotations

import multiprocessing
import os
import queue as queue_lib
import random
import signal
import time
import traceback
from dataclasses import dataclass, field, replace

import torch

from tba_lab.config import searcher_device  # noqa: F401  (the placement rule; re-exported here)


@dataclass
class SearcherSpec:
    """What a searcher process builds, picklable: the typed config and the classes to build.

    Classes travel by reference (their module is imported in the child), so a task or backend
    registered outside the package works in spawned searchers too. The config keeps only the
    options sections of that task and backend: another registered class's options (say, an
    algorithm defined in a notebook cell) never has to be unpickled in a searcher.
    """
    cfg: object                 # the run's RunConfig
    task_cls: type              # tba_lab.registry.TASKS entry of cfg.task.name
    backend_cls: type           # tba_lab.registry.BACKENDS entry of cfg.model.backend
    use_reference: bool         # compute reference log-probs (the algorithm reads them and async.reference_pass is "searcher")
    visible_devices: dict = field(default_factory=dict)  # searcher id -> CUDA_VISIBLE_DEVICES value (set by a local launcher)

    @classmethod
    def from_config(cls, cfg, use_reference: bool) -> "SearcherSpec":
        """The spec of ``cfg``'s task and backend.

        Raises:
            tba_lab.config.ConfigError: the task or backend class (or an options dataclass)
                cannot be imported by a spawned process: defined in ``__main__`` (a notebook
                cell, a script) or inside a function.
        """
        from tba_lab.registry import BACKENDS, TASKS

        task_cls, backend_cls = TASKS.get(cfg.task.name), BACKENDS.get(cfg.model.backend)
        for c in (task_cls, backend_cls, getattr(task_cls, "config_class", None),
                  getattr(backend_cls, "config_class", None)):
            if c is not None:
                _check_importable(c)
        keep = {getattr(c, "section", None) or c.name for c in (task_cls, backend_cls)
                if getattr(c, "config_class", None) is not None}
        searcher_cfg = replace(cfg, sections={k: v for k, v in cfg.sections.items() if k in keep})
        return cls(searcher_cfg, task_cls, backend_cls, use_reference)


def narrow_visible_devices(spec: "SearcherSpec", searcher_id: int) -> str:
    """Set ``CUDA_VISIBLE_DEVICES`` for this searcher process (from ``spec.visible_devices``) and
    return the device it then works on: ``"cuda:0"`` when narrowed, else
    :func:`searcher_device` as configured.

    Raises:
        RuntimeError: CUDA was initialised in this process before (the setting would be ignored).
    """
    visible = spec.visible_devices.get(searcher_id)
    device = searcher_device(spec.cfg, searcher_id)
    if visible is None or not device.startswith("cuda"):
        return device
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in this searcher process before its visible "
                           "devices were set; nothing may touch CUDA before searcher_main runs")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return "cuda:0"


def _check_importable(c: type) -> None:
    """Searchers are spawned processes: they import each class by module and name."""
    from tba_lab.config import ConfigError

    where = ("in a notebook cell or the script being run (module __main__)"
             if c.__module__ == "__main__" else
             "inside a function" if "<locals>" in c.__qualname__ else None)
    if where:
        raise ConfigError(
            f"{c.__qualname__} is defined {where}, so the searcher processes cannot import "
            f"it (they are spawned, not forked); move it into a .py module (e.g. my_task.py "
            f"next to the notebook), import it from there, and run again")


def _prompt_stream(problems: list, seed: int):
    """Endless seeded stream of (index, problem), reshuffled every epoch."""
    rng = random.Random(seed)
    order = list(range(len(problems)))
    while True:
        rng.shuffle(order)
        for i in order:
            yield i, problems[i]


def _running(stop, parent) -> bool:
    """Neither ``stop`` is set nor the trainer process (``parent``; None: no parent to watch,
    e.g. a Ray actor) has ended."""
    return not stop.is_set() and (parent is None or parent.is_alive())


def _put(q, msg, stop) -> bool:
    """Put ``msg`` unless ``stop`` is set or the trainer process is gone first; returns whether
    it was put."""
    parent = multiprocessing.parent_process()
    while _running(stop, parent):
        try:
            q.put(msg, timeout=0.1)
            return True
        except queue_lib.Full:
            continue
    return False


ROOM_POLL_SECONDS = (0.001, 0.01)  # wait_for_room's first and longest sleep between checks


def wait_for_room(q, stop) -> bool:
    """Wait until ``q`` (a ``multiprocessing`` or Ray queue) is not full; False if ``stop`` was
    set or the trainer process ended first.

    Why before generating, not at the ``put``: with the trainer as fast as its searcher (on 2
    cores, async TBA's trainer with the reference pass), a batch generated while the queue is
    full waits there a whole trainer update and is trained on two versions after the weights
    that generated it, for good: the backlog never drains. Waiting here instead, the searcher
    generates from the weights published just before the trainer takes its previous batch, and
    ``async.queue_size: 1`` keeps the staleness of fresh rollouts at 1
    (measured: docs/log.md).

    Checks ``q.full()`` (portable; ``qsize`` is not on macOS) with sleeps growing from 1 to
    10 ms: a few ms of added latency per batch, and few remote calls to a Ray queue's actor.
    """
    parent = multiprocessing.parent_process()
    pause = ROOM_POLL_SECONDS[0]
    while q.full():
        if not _running(stop, parent):
            return False
        time.sleep(pause)
        pause = min(2 * pause, ROOM_POLL_SECONDS[1])
    return True


def this_node() -> str:
    """Where this searcher runs, for ``searchers.jsonl``'s ``node``: the node's IP address inside a
    Ray worker (as ``ray status`` and ``ray.nodes()`` name nodes), else the host name."""
    import socket
    import sys

    ray = sys.modules.get("ray")  # never imports Ray: a Ray worker has it loaded already
    if ray is not None and ray.is_initialized():
        return ray.util.get_node_ip_address()
    return socket.gethostname()


def searcher_main(searcher_id: int, spec: SearcherSpec, weights, out_queue, stop, seed: int) -> None:
    """Entry point of one searcher process (spawned by :class:`~tba_lab.actors.local.LocalLauncher`).

    Args:
        searcher_id: index of this searcher (0-based).
        spec: the :class:`SearcherSpec` (config, task and backend classes).
        weights: the trainer's weight channel (:mod:`tba_lab.actors.weights`): anything with
            ``pull(have_version) -> (version, [(name, tensor)] or None)``.
        out_queue: ``multiprocessing`` queue of :class:`~tba_lab.rollout.RolloutBatch` and
            :class:`~tba_lab.actors.launcher.SearcherFailed` messages.
        stop: anything with ``is_set()`` (the launcher's :class:`~tba_lab.actors.locks.StopFlag`);
            set by the trainer to end the loop.
        seed: seed for prompts and sampling.
    """
    from tba_lab.actors.launcher import SearcherFailed
    from tba_lab.actors.lifetime import exit_with_parent, raise_system_exit

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, raise_system_exit)  # SIGTERM unwinds: the finally below runs
    exit_with_parent()  # SIGTERM as soon as the trainer ends, even mid-batch or by SIGKILL
    try:
        _loop(searcher_id, spec, weights, out_queue, stop, seed)
    except Exception:  # report, do not hang the trainer
        if _put(out_queue, SearcherFailed(searcher_id, traceback.format_exc()), stop):
            _flush(out_queue, seconds=10.0)  # the report must reach the pipe before we exit
        raise SystemExit(1)
    finally:
        out_queue.cancel_join_thread()  # never block exit on undelivered messages
        weights.close()  # its lock's file: removed here when the trainer died first


def _flush(q, seconds: float) -> None:
    """Wait up to ``seconds`` until everything put on ``q`` is written to its pipe."""
    import threading

    q.close()
    t = threading.Thread(target=q.join_thread, daemon=True)
    t.start()
    t.join(seconds)


def _loop(searcher_id: int, spec: SearcherSpec, weights, out_queue, stop, seed: int) -> None:
    from tba_lab.buffer import complete_groups
    from tba_lab.models import load_policy
    from tba_lab.rollout import rollout
    from tba_lab.rollout.backend import TransformersBackend

    device = narrow_visible_devices(spec, searcher_id)  # first: before anything touches CUDA
    cfg = spec.cfg
    sync = cfg.async_.mode == "sync"
    torch.set_num_threads(cfg.async_.searcher_threads or 1)  # resolved by placement.plan
    torch.manual_seed(seed)
    policy, tokenizer = load_policy(cfg.model.path)
    policy.to(device).eval()
    reference = load_policy(cfg.model.path)[0].to(device).eval() if spec.use_reference else None
    backend = spec.backend_cls.build(cfg, policy, tokenizer)
    task = spec.task_cls(cfg)
    problems = task.load("train")
    if not problems:
        raise ValueError(f"task {task.name!r} has no train problems (task.train_path="
                         f"{cfg.task.train_path!r}); searchers need prompts")
    stream = _prompt_stream(problems, seed)
    parent = multiprocessing.parent_process()
    node = this_node()
    B, K = cfg.training.num_prompts_per_step, cfg.training.num_generations
    # A backend that samples from `policy` itself with the plain copying load_weights: the
    # policy's parameters become views of the channel's private buffer, so a pull writes them
    # directly (one copy, no load_weights). An engine with its own copy of the model
    # (own_engine: vLLM), a load_weights with more to do (an override), or a channel without
    # bind (Ray's) gets the pulled (name, tensor) pairs through load_weights instead.
    bound = (hasattr(weights, "bind") and not getattr(backend, "own_engine", False)
             and getattr(backend, "model", None) is policy
             and getattr(type(backend), "load_weights", None) is TransformersBackend.load_weights)
    if bound:
        weights.bind(policy)
    version, last_generated = -1, -1
    while _running(stop, parent):
        if not wait_for_room(out_queue, stop):  # 0. room, then weights
            break
        t_sync = time.perf_counter()
        version, new_weights = weights.pull(version)  # only here, between batches
        if new_weights is not None and not bound:
            backend.load_weights(new_weights)
        sync_seconds = time.perf_counter() - t_sync if new_weights is not None else 0.0
        if sync and version == last_generated:  # strict alternation: one batch per version
            time.sleep(0.005)
            continue
        ids, problems = zip(*[next(stream) for _ in range(B)])
        batch = rollout(backend, task, list(problems), K, cfg.model.temperature,
                        cfg.model.max_new_tokens, reference=reference, version=version,
                        problem_ids=list(ids))
        batch.searcher_id, batch.sync_seconds, batch.node = searcher_id, sync_seconds, node
        if not sync or complete_groups(batch.rollouts, K):
            last_generated = version
        _put(out_queue, batch, stop)
