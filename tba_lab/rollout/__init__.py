"""Rollouts: generation backends and log-prob scoring.

* :mod:`tba_lab.rollout.backend` -- the :class:`GenerationBackend` interface and its
  transformers implementation (a vLLM backend plugs in behind the same interface).
* :mod:`tba_lab.rollout.scoring` -- batched, masked, temperature-scaled response log-probs.
"""
from tba_lab.rollout.backend import GenerationBackend, TransformersBackend
from tba_lab.rollout.scoring import collate, response_logprobs

__all__ = ["GenerationBackend", "TransformersBackend", "collate", "response_logprobs"]
