"""Where the work of a run goes: torch threads per process and who runs the reference pass.

Resolved once, before any process starts, from the configuration and the machine
(:func:`plan`); the trainer prints it at start (:func:`describe`) and writes it to
``summary.json`` (``placement``). A value set in the configuration always wins; ``0`` threads
and ``reference_pass: auto`` are resolved here.

**Threads** (``async.searcher_threads``, ``async.trainer_threads``; 0 = automatic). ``cores``
is the number of cores this process may use (:func:`available_cores`): the CPUs it may run on
(``os.sched_getaffinity``, which honours ``taskset`` and container CPU sets), capped by a CFS
CPU quota (``docker --cpus``, a Kubernetes or JupyterHub CPU limit), rounded up.

* ``mode: sync``: the trainer and its searcher take turns, so each gets every core.
* ``mode: async``, searchers on this machine's CPU: they and the trainer run at once, so the
  cores are split and never oversubscribed while they last: the searchers share half of them,
  ``s = max(1, (cores // 2) // n)`` threads each, and the trainer gets the rest,
  ``t = max(1, cores - n * s)``. On 2 cores with one searcher that is 1 + 1; on 16 cores,
  8 + 8 with one searcher, 2 each + 8 with four, 1 each + 8 with eight.
* a searcher on a GPU (or a Ray actor, whose CPUs Ray reserves) uses 1 thread and counts as one
  core taken; the trainer gets the rest as above.

**Reference pass** (``async.reference_pass``; Eq. 5's log pi_ref of each response). The loss
needs it for every row it trains on; where it runs decides whose time it takes:

* ``searcher``: each searcher scores the batches it generates (the paper's layout). It costs
  the trainer nothing, and the searchers more work per batch, on rows the trainer may never
  sample.
* ``trainer``: the trainer scores the rows of each batch it samples that carry no reference
  log-probs yet (each row at most once: the scores are kept in the buffer), just before the
  loss. Its work per update is at most one batch of B*K rows whatever the number of searchers,
  and rows that are never sampled are never scored.
* ``auto`` (the default): ``searcher`` when there are two or more searchers and each has a
  device of its own (a GPU, a Ray actor, or a CPU core of its own beside the trainer's: ``cores
  >= n + 1``); ``trainer`` otherwise. Why: with one searcher, or searchers sharing the
  trainer's cores, generation is the bottleneck and the trainer has time to spare; once
  searchers have cores of their own they make more rows than the trainer can train on, and
  every second of scoring moved off the trainer is an update gained
  (docs/results/README.md#more-searchers).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")      # where cgroup v2 (or v1's controller folders) is mounted
PROC_CGROUP = Path("/proc/self/cgroup")   # this process's cgroup per hierarchy


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota(quota: str | None, period: str | None) -> float | None:
    """CPUs that ``quota`` microseconds per ``period`` allow; None for no limit ("max", -1) or an
    unreadable value."""
    try:
        q, p = int(quota), int(period)
    except (TypeError, ValueError):
        return None  # "max" (v2), a missing file
    return q / p if q > 0 and p > 0 else None  # v1 writes -1 for no limit


def _own_paths(proc_cgroup: Path) -> dict[str, str]:
    """``{"": v2 path, "cpu": v1 cpu path}`` of this process, from ``/proc/self/cgroup``
    (lines ``ID:CONTROLLERS:PATH``; the v2 line has no controllers)."""
    out = {}
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",")
        if parts[1] == "":
            out[""] = parts[2]
        elif "cpu" in controllers:
            out["cpu"] = parts[2]
    return out


def _ancestors(base: Path, path: str) -> list[Path]:
    """``base`` joined with ``path`` and each of its parents, ``base`` itself included (inside
    a container the hierarchy is mounted at the container's own cgroup, so ``path`` may not
    exist below ``base``: then only ``base`` is read)."""
    out, rel = [base], Path(path.strip("/")) if path.strip("/") else None
    while rel is not None and str(rel) not in ("", "."):
        out.append(base / rel)
        rel = rel.parent if str(rel.parent) != "." else None
    return out


def cgroup_cpu_limit(cgroup_root: str | Path | None = None,
                     proc_cgroup: str | Path | None = None) -> float | None:
    """CPUs the CFS quota allows this process, or None where no quota applies.

    Read from cgroup v2 ``cpu.max`` (``"200000 100000"`` = 2 CPUs, ``"max 100000"`` = no
    limit) and cgroup v1 ``cpu/cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1 = no limit),
    in this process's cgroup and every ancestor (a pod's limit sits above its container's);
    the smallest applies. ``docker --cpus N`` and Kubernetes CPU limits set exactly this.

    Args:
        cgroup_root: where the cgroup hierarchy is mounted (default :data:`CGROUP_ROOT`).
        proc_cgroup: this process's ``/proc/self/cgroup`` (default :data:`PROC_CGROUP`).

    Returns:
        a float number of CPUs (1.5 for ``"150000 100000"``), or None. Unreadable files count
        as no limit (macOS, Windows, a kernel without the CPU controller).
    """
    root = Path(CGROUP_ROOT if cgroup_root is None else cgroup_root)
    own = _own_paths(Path(PROC_CGROUP if proc_cgroup is None else proc_cgroup))
    limits = []
    for d in _ancestors(root, own.get("", "/")):                          # cgroup v2
        parts = (_read(d / "cpu.max") or "").split()
        if len(parts) == 2:
            limits.append(_quota(*parts))
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):                    # cgroup v1
        for d in _ancestors(root / mount, own.get("cpu", "/")):
            limits.append(_quota(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")))
    limits = [x for x in limits if x is not None]
    return min(limits) if limits else None


def available_cores(cgroup_root: str | Path | None = None,
                    proc_cgroup: str | Path | None = None) -> int:
    """Cores this process may use: the CPUs it may run on (``os.sched_getaffinity``;
    ``os.cpu_count()`` where that does not exist, e.g. macOS), capped by a CFS CPU quota
    (:func:`cgroup_cpu_limit`, rounded up); at least 1. A 32-core host under ``docker --cpus
    2`` gives 2. ``os.process_cpu_count()`` (Python 3.13) and psutil read the affinity only.

    Args:
        cgroup_root, proc_cgroup: as :func:`cgroup_cpu_limit` (tests point them at a fake tree).

    Returns:
        an int >= 1.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


@dataclass(frozen=True)
class Placement:
    """A run's resolved placement.

    Attributes:
        cores: cores this process may use (:func:`available_cores`, or as given to :func:`plan`).
        trainer_device: ``async.trainer_device``.
        searcher_devices: each searcher's device, in searcher order.
        trainer_threads: torch threads of the trainer process.
        searcher_threads: torch threads of each searcher process.
        reference_pass: ``"trainer"`` or ``"searcher"`` (``auto`` resolved).
        reason: one line on why (names the rule or the option that decided).
        mode_sync: ``async.mode`` is ``sync`` (the processes take turns on the cores).
    """
    cores: int
    trainer_device: str
    searcher_devices: tuple
    trainer_threads: int
    searcher_threads: int
    reference_pass: str
    reason: str
    mode_sync: bool = False

    def to_dict(self) -> dict:
        """Plain data for ``summary.json``."""
        d = asdict(self)
        d["searcher_devices"] = list(self.searcher_devices)
        return d


def plan(cfg, cores: int | None = None) -> Placement:
    """Resolve ``cfg``'s automatic thread counts and ``async.reference_pass: auto``.

    Args:
        cfg: a validated :class:`~tba_lab.config.RunConfig`.
        cores: cores to plan for (default: :func:`available_cores`); tests and the notebooks'
            what-if tables pass other machines' counts.

    Returns:
        a :class:`Placement`; the configuration is not changed (:func:`apply` makes the copy the
        processes use).
    """
    from tba_lab.config import searcher_device

    a = cfg.async_
    cores = int(cores or available_cores())
    n = a.num_searchers
    devices = tuple(searcher_device(cfg, i) for i in range(n))
    own_device = [d.startswith("cuda") or a.launcher != "local" for d in devices]
    cpu_searchers = n - sum(own_device)
    if a.mode == "sync":
        s_auto, t_auto = cores, cores
    else:
        s_auto = max(1, (cores // 2) // max(1, cpu_searchers)) if cpu_searchers else 1
        t_auto = max(1, cores - cpu_searchers * s_auto - (n - cpu_searchers))
    s = a.searcher_threads or s_auto
    t = a.trainer_threads or t_auto
    if a.reference_pass != "auto":
        ref, reason = a.reference_pass, f"async.reference_pass: {a.reference_pass}"
    elif n < 2:
        ref, reason = "trainer", "auto: one searcher, so the trainer scores only the rows it samples"
    elif all(own_device) or cores >= n + 1:
        ref, reason = "searcher", f"auto: {n} searchers, each with a device or core of its own"
    else:
        ref, reason = "trainer", f"auto: {n} searchers share {cores} cores with the trainer"
    return Placement(cores, a.trainer_device, devices, int(t), int(s), ref, reason,
                     a.mode == "sync")


def apply(cfg, placement: Placement):
    """A copy of ``cfg`` with ``placement``'s thread counts and reference pass written into
    ``async`` (what the searcher processes and the trainer read)."""
    from dataclasses import replace

    resolved = replace(cfg.async_, trainer_threads=placement.trainer_threads,
                       searcher_threads=placement.searcher_threads,
                       reference_pass=placement.reference_pass)
    return replace(cfg, async_=resolved)


def describe(p: Placement, needs_reference: bool = True) -> str:
    """One line for the start of a run, e.g. ``placement: 16 cores; trainer on cpu with 8
    threads; 4 searchers on cpu with 2 threads each; reference pass in the searchers (auto: ...)``."""
    devices = sorted(set(p.searcher_devices))
    n = len(p.searcher_devices)
    where = ", ".join(devices)
    ref = (f"reference pass in the {p.reference_pass}{'s' if p.reference_pass == 'searcher' else ''}"
           f" ({p.reason})" if needs_reference else "no reference pass (the loss reads none)")
    line = (f"placement: {p.cores} cores; trainer on {p.trainer_device} with {p.trainer_threads} "
            f"thread{'s' if p.trainer_threads > 1 else ''}; {n} searcher{'s' if n > 1 else ''} on "
            f"{where} with {p.searcher_threads} thread{'s' if p.searcher_threads > 1 else ''}"
            f"{' each' if n > 1 else ''}; {ref}")
    cpu_searchers = sum(d == "cpu" for d in p.searcher_devices)
    if cpu_searchers and not p.mode_sync and cpu_searchers * p.searcher_threads + p.trainer_threads > p.cores:
        line += (f"; {cpu_searchers + 1} processes share {p.cores} cores, so each added searcher "
                 f"slows every process, the trainer too")
    return line
