"""Rollouts: generation backends, log-prob scoring, and the one rollout function.

* :mod:`tba_lab.rollout.backend` -- the :class:`GenerationBackend` interface and its
  transformers implementation (registered in :data:`tba_lab.registry.BACKENDS`).
* :mod:`tba_lab.rollout.scoring` -- batched, masked, temperature-scaled response log-probs.
* :mod:`tba_lab.rollout.collect` -- :func:`rollout` (generate, decode, reward, prompt-major rows,
  reference log-probs) and :class:`RolloutBatch`, also the searchers' message to the trainer.
"""
from tba_lab.rollout.backend import GenerationBackend, Generations, TransformersBackend, make_backend
from tba_lab.rollout.collect import RolloutBatch, rollout
from tba_lab.rollout.scoring import collate, response_logprobs

__all__ = ["GenerationBackend", "Generations", "TransformersBackend", "make_backend",
           "RolloutBatch", "rollout", "collate", "response_logprobs"]
