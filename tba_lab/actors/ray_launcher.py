"""Launch searchers as Ray actors, on this machine or on a Ray cluster (``async.launcher: ray``).

:class:`RayLauncher` implements the :class:`~tba_lab.actors.launcher.Launcher` protocol, as
:class:`~tba_lab.actors.local.LocalLauncher` does, so the trainer does not know which one runs.
Each searcher is a threaded Ray actor (``max_concurrency=2``: the loop, and new weight
references) running the unchanged loop (:func:`tba_lab.actors.searcher._loop`) with three
adapters:

* ``weights``: :class:`PushedWeights`. At each publish the trainer packs the parameters into
  one CPU byte vector (the :class:`~tba_lab.actors.weights.Layout`), ``ray.put`` s it once and
  sends each actor the reference; a searcher fetches the bytes only when its loop asks for
  newer weights (zero-copy on the trainer's node, one network copy per other node).
* ``out_queue``: one bounded ``ray.util.queue.Queue`` of ``async.queue_size *
  async.num_searchers`` batches shared by all searchers. One queue is enough here because a put
  is one remote call that arrives whole or not at all (the local launcher needs one per
  searcher, since a killed process can leave half a message in a pipe).
* ``stop``: a ``threading.Event`` inside the actor (``ray.kill`` ends it anyway).

:meth:`RayLauncher.poll` reports each searcher's end once: a traceback string
(``SearcherFailed(reason="raised")``) or a ``RayActorError`` (killed, out of memory, node
lost: ``reason="exited"``). Placement: one bundle per searcher, ``{"CPU":
ray.num_cpus_per_searcher}`` plus a GPU share when its device is CUDA (the local launcher's
device rule; the actor sees its GPU as ``cuda:0``). The trainer runs in the driver, and the
queue actor is pinned to the driver's node so that losing another node never takes the
trainer's inbox with it. A Ray already initialised in this process is used and left running;
otherwise the launcher connects to ``ray.address`` (or ``RAY_ADDRESS``) or starts a local Ray
with worker niceness 0, so that searchers and trainer share busy cores as with the local
launcher. Two-node use: docs/usage.md#gpus-vllm-and-several-machines and ``docs/ray.md``.

Limits: weights go through the object store on CPU only (no NCCL broadcast or CUDA IPC between
actors, as OpenRLHF and verl do; with GPUs the trainer copies its weights to the CPU at each
publish). The GPU bundles follow Ray 2.60's placement-group API and have not run on a GPU;
``bench/ray_two_node.py`` runs two Ray nodes in network namespaces of one machine.
"""
from __future__ import annotations

import atexit
import math
import os
import queue as queue_lib
import signal
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, replace

import torch

from tba_lab.actors.launcher import SearcherFailed
from tba_lab.actors.placement import available_cores
from tba_lab.actors.searcher import SearcherSpec
from tba_lab.actors.weights import Layout
from tba_lab.checkpoint import check_finite_weights
from tba_lab.config import ConfigError, check, check_choice
from tba_lab.registry import LAUNCHERS

# Environment that searcher actors inherit from the trainer (a `ray start` node would otherwise
# use its own shell's): the offline switches the kit relies on, and import paths.
_ENV_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE",
             "TOKENIZERS_PARALLELISM", "HF_HOME", "PYTHONPATH")
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_INSTALL_FIX = ("install the extra with pip install -e \".[ray]\" (Ray 2.60), or set "
                "async.launcher: local to run the searchers as processes on this machine")


@dataclass
class RayConfig:
    """Options of the Ray launcher (YAML section ``ray``)."""
    address: str = ""                   # "" = RAY_ADDRESS if set, else start a local Ray; "auto" = the cluster `ray start` runs here; "HOST:PORT"
    num_cpus: int = 0                   # local start only: logical CPUs (0 = max(cores, what the searchers reserve))
    num_cpus_per_searcher: float = 1.0  # CPUs each searcher's placement-group bundle reserves
    placement_strategy: str = "PACK"    # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD (ray.util.placement_group)
    start_timeout: float = 120.0        # seconds to wait for the cluster to reserve the bundles

    def validate(self) -> None:
        check(self.num_cpus >= 0, f"ray.num_cpus={self.num_cpus}: must be >= 0 (0 = automatic)")
        check(self.num_cpus_per_searcher > 0, f"ray.num_cpus_per_searcher="
                                              f"{self.num_cpus_per_searcher}: must be > 0")
        check_choice(self.placement_strategy, _STRATEGIES, "ray.placement_strategy")
        check(self.start_timeout > 0, f"ray.start_timeout={self.start_timeout}: give seconds > 0")


# ---------------------------------------------------------------------------- weights

def weight_layout(model: torch.nn.Module) -> Layout:
    """The :class:`~tba_lab.actors.weights.Layout` of ``model``'s parameters in the flat byte
    vector a publish puts in the object store (tied parameters once, as ``named_parameters``
    lists them). Offsets are aligned to the largest element size, not to the CUDA channel's 256
    bytes: with one dtype the vector is exactly ``P * itemsize`` bytes, nothing to pad."""
    named = list(model.named_parameters())
    return Layout(named, align=max((t.element_size() for _, t in named), default=1))


def flat_bytes(model: torch.nn.Module, layout: Layout | None = None):
    """The parameters packed by ``layout`` (default :func:`weight_layout`) into one contiguous
    CPU ``uint8`` vector, as a numpy array of ``layout.nbytes`` bytes (works for every dtype,
    bf16 included, which numpy lacks)."""
    layout = layout or weight_layout(model)
    buf = torch.empty(layout.nbytes, dtype=torch.uint8)
    layout.pack(list(model.named_parameters()), buf)
    return buf.numpy()


class PushedWeights:
    """The searcher's side of the weight channel: ``pull`` as
    :meth:`SharedWeights.pull <tba_lab.actors.weights.SharedWeights.pull>`.

    Args:
        layout: :func:`weight_layout` of the trainer's policy.
        version: the newest published version when the actor was built (-1: none yet).
        ref: the ObjectRef of its :func:`flat_bytes` (None: none yet).
    """

    def __init__(self, layout: Layout, version: int = -1, ref=None):
        self.layout = layout
        self.latest = (version, ref)  # replaced whole by `set`, read whole by `pull`: no lock

    def set(self, version: int, ref) -> None:
        """Record a newer publish (calls may arrive out of order in a threaded actor)."""
        if version > self.latest[0]:
            self.latest = (version, ref)

    def pull(self, have_version: int) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """``(version, [(name, tensor), ...])`` views of a private copy when a version other than
        ``have_version`` was published, else ``(have_version, None)``."""
        import ray

        version, ref = self.latest
        if ref is None or version == have_version:
            return have_version, None
        raw = ray.get(ref)  # uint8 numpy array; read-only, zero-copy from the object store
        return version, self.layout.views(torch.from_numpy(raw.copy()))  # a private, writable copy


# ---------------------------------------------------------------------------- the actor

class SearcherActor:
    """One searcher, run as a Ray actor (``ray.remote(SearcherActor)``, built by the launcher).

    Args:
        searcher_id, spec, seed: as :func:`tba_lab.actors.searcher.searcher_main`.
        layout, version, refs: the weight channel (:class:`PushedWeights`); ``refs`` is
            ``[ObjectRef]`` or ``[None]``.
        out_queue: the shared ``ray.util.queue.Queue``.
    """

    def __init__(self, searcher_id: int, spec: SearcherSpec, layout: Layout, version: int,
                 refs: list, out_queue, seed: int):
        import multiprocessing

        multiprocessing.current_process().name = f"tba-searcher-{searcher_id}"  # as local ones
        self.searcher_id, self.spec, self.queue, self.seed = searcher_id, spec, out_queue, seed
        self.weights = PushedWeights(layout, version, refs[0])
        self.stop = threading.Event()

    def run(self) -> str | None:
        """The searcher loop until stopped; an exception's traceback is returned, not raised,
        so the launcher reports it as ``SearcherFailed(reason="raised")``."""
        from tba_lab.actors.searcher import _loop

        try:
            _loop(self.searcher_id, self.spec, self.weights, self.queue, self.stop, self.seed)
        except Exception:
            return traceback.format_exc()
        return None

    def set_weights(self, version: int, refs: list) -> None:
        """A new publish (``refs == [ObjectRef]``), fetched when the loop next pulls."""
        self.weights.set(version, refs[0])

    def peek_weights(self) -> tuple[int, list[tuple[str, torch.Tensor]] | None]:
        """What a pull would load now (for tests and debugging)."""
        return self.weights.pull(-2)

    def end(self) -> None:
        """Ask the loop to stop after its current batch."""
        self.stop.set()

    def pid(self) -> int:
        return os.getpid()


def _searcher_devices(cfg) -> list[str]:
    """The device of each searcher, by the kit's placement rule
    (:func:`tba_lab.config.searcher_device`: ``async.searcher_devices[i % len]``, else
    ``async.trainer_device``)."""
    from tba_lab.config import searcher_device

    return [searcher_device(cfg, i) for i in range(cfg.async_.num_searchers)]


def _bundles(cfg) -> list[dict]:
    """One placement-group bundle per searcher: CPUs, plus a GPU share for a CUDA device."""
    devices, out = _searcher_devices(cfg), []
    for d in devices:
        b = {"CPU": float(cfg.ray.num_cpus_per_searcher)}
        if str(d).startswith("cuda"):
            b["GPU"] = 1.0 / devices.count(d)  # searchers naming one device share its GPU
        out.append(b)
    return out


def _actor_spec(spec: SearcherSpec) -> SearcherSpec:
    """The spec as an actor sees its world: Ray makes an actor's GPU visible as ``cuda:0``, so
    each searcher's CUDA device is rewritten to ``cuda:0`` (listed per searcher)."""
    devices = _searcher_devices(spec.cfg)
    if not any(str(d).startswith("cuda") for d in devices):
        return spec
    local = ["cuda:0" if str(d).startswith("cuda") else d for d in devices]
    return replace(spec, cfg=replace(spec.cfg, async_=replace(spec.cfg.async_, searcher_devices=local)))


def _death_account(error: Exception) -> str:
    """A short account of how an actor died, from Ray's ``RayActorError``."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    why = [x for x in lines if x.lower().startswith(("the actor is dead because", "the actor died"))]
    return "the searcher actor died: " + (" ".join(why) or (lines[0] if lines else type(error).__name__))


@dataclass
class _Searcher:
    actor: object       # its ActorHandle
    running: object     # ObjectRef of its `run` call
    reported: bool = False


# ---------------------------------------------------------------------------- the launcher

def start_local_ray(num_cpus: int):
    """``ray.init`` of a one-machine Ray with ``num_cpus`` logical CPUs, no dashboard, workers at
    the driver's priority (Ray's default runs them 15 nice levels lower, which hands a busy
    machine's cores to the trainer first), and a patient start: on a loaded machine Ray's
    agent processes can take longer than the raylet's default 15 s wait for them
    (``RAY_agent_register_timeout_ms``; Ray 2.60's raylet aborts after it). Settings already in
    the environment win. Returns the ``ray`` module."""
    import ray

    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    same_priority = ({} if "RAY_worker_niceness" in os.environ else
                     {"_system_config": {"worker_niceness": 0}})
    ray.init(num_cpus=num_cpus, include_dashboard=False, **same_priority)
    return ray


def cluster_address(option: str) -> tuple[str, str]:
    """The Ray address the launcher will connect to and where it came from:
    ``("ray.address", option)`` when set, else ``("RAY_ADDRESS", $RAY_ADDRESS)``; ``""`` = a
    local Ray is started."""
    if option:
        return "ray.address", option
    return "RAY_ADDRESS", os.environ.get("RAY_ADDRESS", "")


def check_reachable(address: str, field: str, timeout: float = 5.0) -> None:
    """Open (and close) a TCP connection to a Ray cluster's ``HOST:PORT`` (``ray://`` allowed),
    so that a wrong address stops the run before anything starts rather than after Ray's own
    retries (about 30 s of log lines, then a traceback).

    Args:
        address: ``HOST:PORT`` or ``ray://HOST:PORT``.
        field: the setting it came from, named in the error (``ray.address`` or ``RAY_ADDRESS``).
        timeout: seconds to wait for the connection.
    Raises:
        ConfigError: the address has no port, or nothing accepts connections there.
    """
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{field}={address!r}: give HOST:PORT of the Ray head (e.g. "
                          f"10.0.0.1:6379, printed by `ray start --head`), or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(f"{field}={address!r}: no Ray head answers there ({e}); start one "
                          f"with `ray start --head --port {port}` on that machine, fix the "
                          f"address, or leave ray.address empty (and RAY_ADDRESS unset) for a "
                          f"local Ray") from None


STOP_TIMEOUT = 30.0  # seconds stop() waits for the killed actors to be seen dead


def wait_for_exit(actors: list, timeout: float) -> list[int]:
    """Wait until each of ``actors`` (``ActorHandle`` s already given to ``ray.kill``) is seen
    dead, and return the positions of those still alive after ``timeout`` seconds in all.

    ``ray.kill`` only sends the request and returns: a call made right after it can still be
    served by the actor (about 1 time in 20 on a local Ray 2.60), so a ``stop()`` that returned
    at once could leave actors running for a moment. Each actor is probed with
    ``__ray_ready__``: an answer means it still runs (probe again 20 ms later); a
    ``RayActorError`` means the cluster has recorded its death. Typically 2-6 ms per actor.

    Args:
        actors: the killed actors' handles.
        timeout: seconds for all of them together.
    Returns:
        indices into ``actors`` of the ones that still answered, or did not answer at all
        (hung), when the time ran out; ``[]`` when all are dead.
    """
    import ray

    deadline, alive = time.monotonic() + timeout, []
    for k, actor in enumerate(actors):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                alive.append(k)
                break
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=left)
            except ray.exceptions.RayActorError:
                break
            except ray.exceptions.GetTimeoutError:
                continue  # Ray may give up up to a millisecond early: the deadline decides
            time.sleep(0.02)
    return alive


@LAUNCHERS.register
class RayLauncher:
    """Searchers as Ray actors, placed with a placement group.

    Args:
        cfg: the :class:`~tba_lab.config.RunConfig` (``async`` and ``ray`` sections).
        model: the trainer's policy (defines the layout of the published weights).
        use_reference: whether searchers compute reference log-probs.
    """
    name, section, config_class = "ray", "ray", RayConfig
    same_machine = False  # searchers may run on other machines: preflight does not count their GPUs here

    @classmethod
    def check_config(cls, cfg) -> None:
        """Ray importable (else :class:`~tba_lab.config.ConfigError` naming ``async.launcher``
        and the fix), and a cluster address (``ray.address`` or ``RAY_ADDRESS``, not ``auto``)
        that accepts connections (:func:`check_reachable`). ``mode: sync`` works (one searcher,
        strict alternation by versions)."""
        try:
            import ray  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"async.launcher=ray needs Ray, which is not installed here "
                              f"({e}); {_INSTALL_FIX}") from None
        field, address = cluster_address(cfg.ray.address)
        if address and address != "auto":
            check_reachable(address, field)

    def __init__(self, cfg, model, use_reference: bool = True):
        self.cfg, self.options = cfg, cfg.ray
        self.spec = _actor_spec(SearcherSpec.from_config(cfg, use_reference))
        self.layout = weight_layout(model)
        self.latest: tuple[int, object] = (-1, None)   # (version, ObjectRef of the flat bytes)
        self.searchers: dict[int, _Searcher] = {}
        self.starts: dict[int, int] = {}                # actors started per searcher id (seeds)
        self.queue = self.pg = None
        self.bundles: list[dict] = []
        self.owns_ray = self.stopped = self.registered = False
        self.publish_seconds: list[float] = []          # wall time of each publish (trainer side)

    # -- Ray itself
    def _ensure_ray(self):
        import ray

        if not ray.is_initialized():
            # ray.init installs Ray's own SIGTERM handler in the driver, which aborts the process
            # (no final checkpoint); the trainer's handler (SIGTERM unwinds like Ctrl-C) is put back
            on_sigterm = (signal.getsignal(signal.SIGTERM)
                          if threading.current_thread() is threading.main_thread() else None)
            field, address = cluster_address(self.options.address)
            if address:
                try:
                    ray.init(address=address)
                except ConnectionError as e:  # e.g. "auto" with no `ray start` on this machine
                    raise ConfigError(f"{field}={address!r}: {' '.join(str(e).split())}; start "
                                      f"the cluster (`ray start --head`) or fix the address"
                                      ) from None
            else:
                need = math.ceil(self.cfg.async_.num_searchers * self.options.num_cpus_per_searcher)
                start_local_ray(self.options.num_cpus or max(available_cores(), need))
            if callable(on_sigterm):
                signal.signal(signal.SIGTERM, on_sigterm)
            self.owns_ray = True
        if not self.registered:  # after ray.init: atexit runs this stop before Ray's shutdown
            self.registered = True
            atexit.register(self.stop)
        return ray

    # -- the six methods
    def start(self) -> None:
        """Reserve the placement group and start ``async.num_searchers`` actors.

        Raises:
            RuntimeError: the cluster cannot reserve the bundles within ``ray.start_timeout``
                seconds (the message lists what was asked and what is free).
        """
        ray = self._ensure_ray()
        from ray.util.placement_group import placement_group
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.bundles = bundles = _bundles(self.cfg)
        self.pg = placement_group(bundles, strategy=self.options.placement_strategy,
                                  name=f"tba-lab-searchers-{os.getpid()}")
        ready, _ = ray.wait([self.pg.ready()], timeout=self.options.start_timeout)
        if not ready:
            free = ray.available_resources()
            self.stop()
            raise RuntimeError(
                f"Ray could not reserve {len(bundles)} bundle(s) {bundles[0]} for "
                f"async.num_searchers={self.cfg.async_.num_searchers} within ray.start_timeout="
                f"{self.options.start_timeout:g} s (free now: CPU {free.get('CPU', 0):g}, GPU "
                f"{free.get('GPU', 0):g}); lower async.num_searchers or "
                f"ray.num_cpus_per_searcher, or add nodes to the cluster")
        # hard affinity: a soft one sent the queue to another node whenever the bundles took
        # every CPU here (bench/ray_two_node.py, 3 of 3 tries), and the run died with that node
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.queue = Queue(maxsize=self.cfg.async_.queue_size * len(bundles),
                           actor_options={"num_cpus": 0, "scheduling_strategy": here})
        for i in range(len(bundles)):
            self._spawn(i)

    def _spawn(self, i: int) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n = self.starts.get(i, 0)
        seed = self.cfg.seed * 1000 + i + 1 + 7919 * n  # as LocalLauncher: restarts draw anew
        bundle = self.bundles[i]
        env = {k: os.environ[k] for k in _ENV_VARS if k in os.environ}
        actor = ray.remote(SearcherActor).options(
            name=None, num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0), max_concurrency=2,
            max_restarts=0, runtime_env={"env_vars": env} if env else None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
        ).remote(i, self.spec, self.layout, self.latest[0], [self.latest[1]],
                 self.queue, seed)
        self.searchers[i] = _Searcher(actor, actor.run.remote())
        self.starts[i] = n + 1

    def publish(self, model, version: int) -> None:
        """Put ``model``'s weights (``version`` trainer updates) in the object store once and
        send every searcher the reference. Also works before :meth:`start` (new actors get the
        newest reference when they are built). Raises FloatingPointError (nothing sent) when a
        parameter holds NaN or inf."""
        if self.stopped:
            return
        check_finite_weights(model.named_parameters(), f"publish weights version {version}")
        ray = self._ensure_ray()
        t0 = time.perf_counter()
        ref = ray.put(flat_bytes(model, self.layout))
        self.latest = (version, ref)
        for s in self.searchers.values():
            s.actor.set_weights.remote(version, [ref])  # a list: fetched when the loop pulls
        self.publish_seconds.append(time.perf_counter() - t0)

    def poll(self, timeout: float = 0.0) -> list:
        """All messages waiting now (waiting up to ``timeout`` seconds for the first one):
        :class:`~tba_lab.rollout.RolloutBatch` from the queue, and one
        :class:`~tba_lab.actors.launcher.SearcherFailed` per searcher whose ``run`` call ended."""
        out = self._poll_once()
        if out or timeout <= 0 or self.queue is None:
            return out
        try:
            first = [self.queue.get(block=True, timeout=timeout)]
        except queue_lib.Empty:
            first = []
        return first + self._poll_once()

    def _poll_once(self) -> list:
        if self.queue is None or self.stopped:
            return []
        import ray

        live = {s.running: i for i, s in self.searchers.items() if not s.reported}
        ended = ray.wait(list(live), num_returns=len(live), timeout=0)[0] if live else []
        out = []
        n = self.queue.qsize()  # after `ended`: what a dead searcher put before dying is read
        if n:
            out += self.queue.get_nowait_batch(n)
        for ref in ended:
            i = live[ref]
            self.searchers[i].reported = True
            try:
                tb = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                out.append(SearcherFailed(i, _death_account(e), reason="exited"))
                continue
            if tb is not None:
                out.append(SearcherFailed(i, tb, reason="raised"))
            else:  # the loop returned without being asked to stop
                out.append(SearcherFailed(i, "the searcher's loop ended without an error",
                                          reason="exited"))
        return out

    def _end(self, i: int) -> None:
        """Kill searcher ``i``'s actor (its bundle is freed for a successor)."""
        s = self.searchers.pop(i, None)
        if s is not None:
            import ray

            ray.kill(s.actor, no_restart=True)

    def restart(self, searcher_id: int) -> None:
        """Kill searcher ``searcher_id`` and start a new actor in its bundle, with a new seed.
        Batches the old actor had queued are still delivered (real rollouts, older version)."""
        self._end(searcher_id)
        if not self.stopped:
            self._spawn(searcher_id)

    def retire(self, searcher_id: int) -> None:
        """Kill searcher ``searcher_id`` for good."""
        self._end(searcher_id)

    def stop(self) -> None:
        """Kill every actor (searchers and queue), wait until each is seen dead
        (:func:`wait_for_exit`, at most :data:`STOP_TIMEOUT` seconds), remove the placement
        group, and shut Ray down if this launcher initialised it. Idempotent; also registered
        with ``atexit``.

        Warns:
            RuntimeWarning: an actor still answered calls :data:`STOP_TIMEOUT` seconds after
                its kill (named in the message; ``ray list actors`` shows it).
        """
        if self.stopped:
            return
        self.stopped = True
        atexit.unregister(self.stop)
        try:
            import ray
        except ImportError:
            return
        if ray.is_initialized():
            from ray.util.placement_group import remove_placement_group

            killed = {f"searcher {i}": self.searchers[i].actor for i in self.searchers}
            for i in list(self.searchers):
                self._end(i)
            if self.queue is not None:
                if self.queue.actor is not None:
                    killed["the rollout queue"] = self.queue.actor
                self.queue.shutdown(force=True)
            alive = wait_for_exit(list(killed.values()), STOP_TIMEOUT)
            if alive:
                names = [name for k, name in enumerate(killed) if k in alive]
                warnings.warn(f"Ray actor(s) {names} still answered {STOP_TIMEOUT:g} s after "
                              f"ray.kill; check `ray list actors` on the cluster",
                              RuntimeWarning, stacklevel=2)
            if self.pg is not None:
                remove_placement_group(self.pg)
            self.latest = (self.latest[0], None)
            if self.owns_ray:
                ray.shutdown()
        self.searchers.clear()
