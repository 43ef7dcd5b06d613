"""Entry points for processes that tests spawn.

Spawned children re-import the function they run, so it must live in an importable module
(here, the ``tests`` package), never in a test file's local scope.
"""
from __future__ import annotations

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
