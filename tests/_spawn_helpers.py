"""Entry points for processes that tests spawn.

Spawned children re-import the function they run, so it must live in an importable module
(here, the ``tests`` package), never in a test file's local scope.
"""
from __future__ import annotations

import sys

import torch

# A fixed prompt / response pair (token ids valid for any vocabulary of >= 8 tokens).
PROMPT = [1, 4, 5, 6, 7]
RESPONSE = [5, 6, 4, 2]


def weights_fingerprint(model) -> tuple[float, float]:
    """(checksum of all parameters, log-prob of RESPONSE given PROMPT at temperature 0.7).

    The checksum weights each parameter by its position, so a permutation also changes it.
    """
    from torch.nn.utils import parameters_to_vector

    from tba_lab.rollout.scoring import response_logprobs

    with torch.no_grad():
        vec = parameters_to_vector(model.parameters()).double()
        checksum = float((vec * torch.linspace(1.0, 2.0, vec.numel(), dtype=torch.float64)).sum())
        logps, mask = response_logprobs(model, [PROMPT], [RESPONSE], pad_id=0, temperature=0.7)
    return checksum, float(logps.sum())


def backend_for(model):
    """A :class:`TransformersBackend` around ``model`` (a stand-in tokenizer: ids only)."""
    from types import SimpleNamespace

    from tba_lab.rollout.backend import TransformersBackend

    return TransformersBackend(model, SimpleNamespace(pad_token_id=0, eos_token_id=2))


def weights_puller(config, weights, commands, results) -> None:
    """Child process: hold its OWN model (built from ``config`` with a different seed) inside a
    generation backend, and on each command "pull" hand the published weights to the backend's
    ``load_weights`` and report (version, checksum, log-prob). Reports its pre-pull fingerprint
    first, with version -1. Exits on "stop"."""
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(12345)  # different initial weights from the parent's model
    model = LlamaForCausalLM(config).eval()
    backend = backend_for(model)
    version = -1
    results.put((version, *weights_fingerprint(model)))
    while True:
        cmd = commands.get(timeout=120)
        if cmd == "stop":
            return
        version, new = weights.pull(version)
        if new is not None:
            backend.load_weights(new)
        results.put((version, *weights_fingerprint(model)))


# ----------------------------------------------------------------------------------------------
# Entry points for tests/test_shutdown.py (run as ``python -c`` in a subprocess, cwd = repo root)
# ----------------------------------------------------------------------------------------------


def train_with_failing_loss(config_path: str, fail_after: int) -> None:
    """``train()`` on the YAML config at ``config_path`` with the trainer's loss raising
    ``RuntimeError("injected failure in the loss")`` from update ``fail_after + 1`` on (the
    first ``fail_after`` updates are real). The exception leaves the process uncaught (exit 1)."""
    import tba_lab.trainer as trainer
    from tba_lab.config import load_yaml

    if not hasattr(trainer, "compute_loss"):
        raise AssertionError("tba_lab.trainer no longer calls compute_loss by that name; "
                             "update the failure injection in tests/_spawn_helpers.py")
    real, calls = trainer.compute_loss, [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] > fail_after:
            raise RuntimeError("injected failure in the loss")
        return real(*args, **kwargs)

    trainer.compute_loss = failing
    torch.set_num_threads(1)
    trainer.train(load_yaml(config_path), progress=False)


def _own_resources() -> dict:
    """What this process holds: its /dev/shm mappings (``shm_mappings``), those of them that are
    shared tensors (``shared_tensors``, ``torch_*``: the published weights) or still have a name
    in /dev/shm (``named``: e.g. the named semaphores of multiprocessing objects in use), open
    fds, threads, and live children (the multiprocessing resource tracker excluded: a
    per-process helper that lives as long as its parent, by design)."""
    import os
    import threading

    import psutil

    maps = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "/dev/shm/" in parts[5]:
                maps.append((int(parts[4]), parts[5].strip()))
    entries = {e.inode(): e.name for e in os.scandir("/dev/shm")}
    me = psutil.Process()
    children = [p.pid for p in me.children(recursive=True)
                if p.status() != psutil.STATUS_ZOMBIE
                and not any("resource_tracker" in part for part in p.cmdline())]
    return {"shm_mappings": sorted({path for _, path in maps}),
            "shared_tensors": sorted({path for _, path in maps if "/torch_" in path}),
            "named": sorted({entries[inode] for inode, _ in maps if inode in entries}),
            "fds": len(os.listdir("/proc/self/fd")),
            "threads": sorted(t.name for t in threading.enumerate()), "children": children}


def repeated_runs(config_path: str, runs: int) -> None:
    """Run ``train()`` ``runs`` times in this one process (as a notebook kernel does), each into
    ``<output_dir>/run<i>``, and print one JSON line per state: ``{"when": "before"|"after <i>",
    **_own_resources()}``."""
    import gc
    import json
    from dataclasses import replace
    from pathlib import Path

    from tba_lab.config import load_yaml
    from tba_lab.trainer import train

    torch.set_num_threads(1)
    cfg = load_yaml(config_path)
    print(json.dumps({"when": "before", **_own_resources()}), flush=True)
    for i in range(runs):
        train(replace(cfg, output_dir=str(Path(cfg.output_dir) / f"run{i}")), progress=False)
        gc.collect()
        print(json.dumps({"when": f"after {i}", **_own_resources()}), flush=True)


def interrupted_in_publish(config_path: str, publish: int) -> None:
    """``train()`` with Ctrl-C landing inside the ``publish``-th weight publish (the frame that
    holds the shared weights), caught and kept as a notebook kernel keeps it
    (``sys.last_traceback``); then print one JSON line, ``_own_resources()``."""
    import gc
    import json

    import tba_lab.actors.weights as weights
    from tba_lab.config import load_yaml
    from tba_lab.trainer import train

    real, calls = weights.check_finite_weights, [0]

    def interrupting(named, what):
        calls[0] += 1
        if calls[0] == publish:
            raise KeyboardInterrupt
        return real(named, what)

    weights.check_finite_weights = interrupting
    torch.set_num_threads(1)
    try:
        train(load_yaml(config_path), progress=False)
    except KeyboardInterrupt:
        sys.last_traceback = sys.exc_info()[2]
    assert calls[0] >= publish, f"only {calls[0]} publishes: the interrupt never happened"
    gc.collect()
    print(json.dumps(_own_resources()), flush=True)
