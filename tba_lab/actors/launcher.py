"""The launcher protocol: how the trainer starts searchers, sends weights and receives rollouts.

A launcher is registered in :data:`tba_lab.registry.LAUNCHERS` under the ``async.launcher``
value that selects it, and built with ``cls(cfg, model, use_reference)``. The trainer uses
five methods and nothing else, so a launcher for Ray actors or other machines plugs in beside
:class:`~tba_lab.actors.local.LocalLauncher` without touching the trainer.

Messages (docs/design.md sec. 3), typed, never plain dicts:

* :class:`~tba_lab.rollout.RolloutBatch`: one generation batch of B*K prompt-major rollouts,
  with the searcher id, the policy version that generated it and its timings;
* :class:`SearcherFailed`: a searcher's exception, with its traceback.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tba_lab.registry import LAUNCHERS


@dataclass
class SearcherFailed:
    """A searcher raised; the trainer stops the run with this traceback in its error."""
    searcher_id: int
    traceback: str


class Launcher(Protocol):
    """What the trainer needs from the searchers, wherever they run.

    Built as ``cls(cfg, model, use_reference)``: the run's config, the trainer's policy (it
    defines the weights to publish) and whether searchers compute reference log-probs.
    """
    name: str

    def start(self) -> None:
        """Start ``cfg.async_.num_searchers`` searchers (they load their models meanwhile)."""
        ...

    def publish(self, model, version: int) -> None:
        """Make ``model``'s weights, after ``version`` trainer updates, visible to searchers."""
        ...

    def poll(self, timeout: float = 0.0) -> list:
        """Every message waiting now (:class:`~tba_lab.rollout.RolloutBatch` or
        :class:`SearcherFailed`), waiting up to ``timeout`` seconds for the first one."""
        ...

    def alive(self) -> bool:
        """True while every searcher is running."""
        ...

    def stop(self) -> None:
        """Stop every searcher within seconds; idempotent; no process is left behind."""
        ...


def make_launcher(cfg, model, use_reference: bool) -> Launcher:
    """The launcher ``cfg.async_.launcher`` names, built for this run. Raises KeyError for an
    unknown name."""
    return LAUNCHERS.get(cfg.async_.launcher)(cfg, model, use_reference)
