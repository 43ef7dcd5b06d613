"""Notebook 04 (asynchronous searchers): its exercises, the weight sync (a seqlock), the
searcher step and the trainer step (pieces of ``tba_lab/minimal.py``, their references) and the
staleness bound of recency mode; and :func:`plot_accuracy_lost`.
"""
from __future__ import annotations

import copy
import functools
import threading

import numpy as np
import torch

from tba_lab.lab.course import exercise, from_minimal
from tba_lab.lab.course.nb01 import embedded_policy
from tba_lab.lab.timeline import fresh_staleness_max


# ---------------------------------------------------------------- 04.weight_sync
class _SpyModel(torch.nn.Sequential):
    """A small seeded model whose ``parameters()`` notes the ``writes`` of ``watch`` (a channel)."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        super().__init__(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
        self.watch, self.seen = None, []

    def parameters(self, recurse: bool = True):
        if hasattr(self.watch, "writes"):
            self.seen.append(self.watch.writes.value)
        return super().parameters(recurse)


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in torch.nn.Module.parameters(model)])


def _set(model, vec):
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(vec.clone(), torch.nn.Module.parameters(model))


class _MovingCounter:
    """A ``writes`` counter that a publish overtakes during a pull's copy: first read ``start``
    (even); the second completes the publish (``done`` into ``flat``), then ``start + 2``."""

    def __init__(self, start, flat, done):
        self.start, self.flat, self.done, self.reads = start, flat, done, 0

    @property
    def value(self):
        self.reads += 1
        if self.reads == 2:
            self.flat.copy_(self.done)
        return self.start if self.reads == 1 else self.start + 2


def _pull_in_thread(sync, model, have, wait):
    """(thread, {"v": what pull returned}) of ``sync.pull(model, have)`` after ``wait`` seconds."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", sync.pull(model, have)), daemon=True)
    t.start()
    t.join(wait)
    return t, out


def _weight_sync_compare(got, want):
    if not all(hasattr(got, a) for a in ("flat", "version", "writes", "publish", "pull")):
        return "expected an object with .flat, .version, .writes, .publish and .pull (a class)"
    a, b = _SpyModel(0), _SpyModel(1)          # trainer's and searcher's models
    if got.flat.shape != (_params(a).numel(),) or not torch.equal(got.flat, _params(a)):
        return "after __init__, .flat must be every parameter, flattened, in order (one 1-D tensor)"
    if got.version.value != -1 or got.writes.value != 0:
        return f"after __init__: version {got.version.value}, writes {got.writes.value}; expected -1 and 0"
    _set(a, _params(a) + 1.0)
    a.watch = got
    got.publish(a, 5)
    a.watch = None
    if got.version.value != 5 or not torch.equal(got.flat, _params(a)):
        return "publish(model, 5): .flat must hold the model's parameters and .version be 5"
    if got.writes.value != 2 or (a.seen and not any(w % 2 for w in a.seen)):
        return (f"publish: writes must be odd while the parameters are copied and even after "
                f"(add 1 before the copy, 1 after); it read {a.seen} during the copy, "
                f"{got.writes.value} after")
    for have, copies, what in ((-1, True, "copy the weights and return 5"),
                               (5, False, "return 5 and copy nothing"),
                               (3, True, "copy and return 5 (the version now held)")):
        _set(b, torch.zeros_like(_params(b)))   # copies: then b holds a's weights, else zeros
        if got.pull(b, have) != 5 or not torch.equal(_params(b), _params(a) * copies):
            return f"pull(model, {have}) when version 5 is published must {what}"
    new = _params(a) * 3.0                       # a publish in progress: writes odd, half copied
    got.writes.value += 1
    got.flat[: len(new) // 2] = new[: len(new) // 2]
    got.version.value = 6
    t, out = _pull_in_thread(got, b, 5, 0.3)
    if not t.is_alive():
        return ("pull returned while writes was odd (a publish was copying): it read a torn copy, "
                "half old and half new weights")
    got.flat.copy_(new)
    got.writes.value += 1
    t.join(10)
    if t.is_alive() or out.get("v") != 6 or not torch.equal(_params(b), new):
        return "once the publish finished (writes even), pull must return 6 with the new weights"
    done, torn = _params(a) * 5.0, new.clone()   # a publish that starts during the pull's copy
    torn[: len(torn) // 2] = done[: len(torn) // 2]
    got.flat.copy_(torn)
    got.version.value = 7
    real, got.writes = got.writes, _MovingCounter(got.writes.value, got.flat, done)
    try:
        t, out = _pull_in_thread(got, b, 6, 10)
    finally:
        got.writes = real
    if t.is_alive() or out.get("v") != 7 or not torch.equal(_params(b), done):
        return ("a publish ran during pull's copy (writes moved from even to even + 2): pull must "
                "notice that writes changed, discard the torn copy and copy again")
    return None


@exercise("04.weight_sync",
          "the weight channel: publish with a version, pull when newer, no torn read",
          from_minimal("SharedWeights"), lambda: [((_SpyModel(0),), {})],
          compare=_weight_sync_compare)
class WeightSyncStub:
    """The weight channel between the trainer and its searchers, a seqlock: ``flat`` (every
    parameter, flattened, in shared memory), counters ``version`` (-1) and ``writes`` (0, odd
    while ``publish`` copies); ``pull(model, have)`` copies only a newer version, never a torn
    one, and returns the version held."""

    def __init__(self, model):
        # YOUR CODE HERE
        raise NotImplementedError

    def publish(self, model, version):
        raise NotImplementedError

    def pull(self, model, have):
        raise NotImplementedError


# ---------------------------------------------------------------- 04.searcher_step
def _searcher_cases():
    from tba_lab.minimal import Settings
    from tba_lab.tasks.arithmetic import ArithmeticTask

    torch.set_num_threads(1)   # generation on a shared 2-core machine: many times faster on one
    reference, tok = embedded_policy()
    policy = copy.deepcopy(reference)
    g = torch.Generator().manual_seed(401)
    with torch.no_grad():                                   # a policy that differs from pi_ref
        for p in policy.parameters():
            p.add_(0.02 * p.std() * torch.randn(p.shape, generator=g))
    task = ArithmeticTask()
    train = task.load("train")
    return [((policy, reference, tok, task, train[:3], [11, 22, 33], Settings(num_generations=4), 7), {}),
            ((policy, reference, tok, task, train[3:5], [5, 6],
              Settings(num_generations=3, max_new_tokens=6, temperature=1.0), 0), {})]


def _searcher_reference(*args):
    """The case's args: samples differ, so a batch is checked for what it must be."""
    torch.manual_seed(402)   # the answer's sampling, seeded: a reproducible check
    return args


def _searcher_compare(got, want):
    from tba_lab.minimal import sequence_logprobs

    policy, reference, tok, task, problems, prompt_ids, s, version = want
    K, eos = s.num_generations, tok.eos_token_id
    if not isinstance(got, (list, tuple)) or len(got) != len(problems) * K:
        return f"expected a list of B*K = {len(problems)}*{K} rows, got {type(got).__name__}" + (
            f" of {len(got)}" if isinstance(got, (list, tuple)) else "")
    prompts = [tok(task.format_prompt(p))["input_ids"] for p in problems]
    for i, r in enumerate(got):
        if r.prompt_id != prompt_ids[i // K] or list(r.prompt) != prompts[i // K]:
            return (f"row {i}: prompt_id {r.prompt_id}; expected {prompt_ids[i // K]} and the "
                    f"prompt's token ids (prompt-major: row i answers problem i // K)")
        if r.version != version:
            return f"row {i}: version {r.version}, expected {version} (the weights that sampled it)"
        resp = list(r.response)
        if eos in resp[:-1]:
            return (f"row {i}: the response goes on after its first EOS ({resp}): cut after the first "
                    f"EOS (generate pads the rest)")
        if not resp or len(resp) > s.max_new_tokens or (resp[-1] != eos and len(resp) != s.max_new_tokens):
            return (f"row {i}: a response of {len(resp)} tokens without a final EOS: keep the EOS "
                    f"(the model chose to stop), or all max_new_tokens = {s.max_new_tokens} tokens")
    texts = tok.batch_decode([list(r.response) for r in got], skip_special_tokens=True)
    rewards = task.rewards([problems[i // K] for i in range(len(got))], texts)
    if [float(r.reward) for r in got] != [float(x) for x in rewards]:
        return "rewards differ from task.rewards(problems, decoded responses (skip_special_tokens=True))"
    with torch.no_grad():
        ref = sequence_logprobs(reference, prompts, [list(r.response) for r in got], tok.pad_token_id,
                                s.temperature)
    gap = (torch.tensor([float(r.ref_logp) for r in got]) - ref).abs().max().item()
    if gap > 2e-3:
        return (f"ref_logp differs from log pi_ref(response | prompt) by up to {gap:.3g}: the "
                f"reference model (not the policy), the sum over the response, temperature {s.temperature}")
    if all(len({tuple(r.response) for r in got[i:i + K]}) == 1 for i in range(0, len(got), K)):
        return "every prompt's K responses are identical: sample (do_sample=True), do not decode greedily"
    return None


@exercise("04.searcher_step",
          "a searcher's batch: B x K sampled rows, cut after EOS, rewarded, ref log-probs, version",
          _searcher_reference, _searcher_cases, compare=_searcher_compare)
def searcher_step_stub(policy, reference, tokenizer, task, problems, prompt_ids, s, version):
    """B*K ``tba_lab.minimal.Row``, prompt-major: K = ``s.num_generations`` responses sampled
    by ``policy`` for each of the B ``problems``, cut after the first EOS, rewarded by ``task``,
    with log pi_ref under ``reference`` and the weights' ``version``."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 04.trainer_step
@functools.cache
def _trainer_batch():
    """12 rows (B = 3 prompts x K = 4) sampled once from the embedded model, seeded."""
    from tba_lab.minimal import Settings, searcher_step
    from tba_lab.tasks.arithmetic import ArithmeticTask

    model, tok = embedded_policy()
    task = ArithmeticTask()
    with torch.random.fork_rng():
        torch.manual_seed(403)
        rows = searcher_step(model, model, tok, task, task.load("train")[5:8], [0, 1, 2],
                             Settings(num_generations=4), 0)
    for i, r in enumerate(rows):                       # mixed rewards in every group
        r.reward = float(i % 3 == 0)
        r.ref_logp -= 0.3 * (i % 4)                    # a policy that differs from pi_ref
    return rows


def _trainer_cases():
    from tba_lab.minimal import Settings

    torch.set_num_threads(1)
    model, tok = embedded_policy()
    cases = []
    for make_opt, settings in ((lambda p: torch.optim.SGD(p, lr=0.05), Settings(num_generations=4, max_grad_norm=0.05)),
                               (lambda p: torch.optim.SGD(p, lr=0.01), Settings(num_generations=4, max_grad_norm=1e6, beta=0.5)),
                               (lambda p: torch.optim.AdamW(p, lr=1e-3, eps=1e-4, weight_decay=0.0), Settings(num_generations=4))):
        # (AdamW with a large eps: its first step, about lr x sign(gradient), would let float
        # rounding flip the sign of near-zero gradients)
        policy = copy.deepcopy(model)
        g = torch.Generator().manual_seed(404)
        for p in policy.parameters():                      # gradients left over from a last step
            p.grad = torch.randn(p.shape, generator=g)
        cases.append(((policy, make_opt(policy.parameters()), _trainer_batch(), settings, tok.pad_token_id), {}))
    return cases


def _trainer_reference(policy, optimizer, batch, s, pad_id):
    from tba_lab.minimal import trainer_step

    twin = copy.deepcopy(policy)                           # the same start, stepped by minimal.py
    for p, q in zip(policy.parameters(), twin.parameters()):
        q.grad = None if p.grad is None else p.grad.clone()
    twin_optimizer = type(optimizer)(twin.parameters(), lr=0.0)
    twin_optimizer.load_state_dict(optimizer.state_dict())   # the same settings (and state)
    return policy, twin, trainer_step(twin, twin_optimizer, batch, s, pad_id)


def _trainer_compare(got, want):
    policy, twin, want_loss = want
    try:
        loss = float(got)
    except (TypeError, ValueError):
        return f"expected the loss as a float, got {type(got).__name__}"
    if not np.isclose(loss, want_loss, rtol=1e-4, atol=1e-4):
        return f"loss {loss:.6g}, expected {want_loss:.6g} (the TB loss of Eq. 3-5 at beta and temperature of s)"
    for (name, p), q in zip(policy.named_parameters(), twin.parameters()):
        gap = (p.detach() - q.detach()).abs().max().item()
        if gap > 2e-5:
            return (f"after the step, parameter {name} differs from the reference step's by {gap:.3g}: "
                    "optimizer.zero_grad() before backward (the cases leave old gradients), "
                    "clip_grad_norm_ to s.max_grad_norm after backward and before step")
    return None


@exercise("04.trainer_step",
          "one update: sequence log-probs, TB loss, zero_grad, backward, clip, step",
          _trainer_reference, _trainer_cases, compare=_trainer_compare)
def trainer_step_stub(policy, optimizer, batch, s, pad_id):
    """One optimizer update of ``policy`` on the TB loss of ``batch`` (B*K ``Row``s,
    prompt-major): zero_grad, backward, clip to ``s.max_grad_norm``, step; returns the loss
    (a float)."""
    # YOUR CODE HERE
    raise NotImplementedError


# ---------------------------------------------------------------- 04.staleness_bound
@exercise("04.staleness_bound",
          "largest staleness of a batch drawn in recency mode, given arrival lag and k",
          fresh_staleness_max, lambda: [
              (tuple(x.reshape(-1) for x in np.meshgrid(np.arange(0, 13), np.arange(1, 6))), {}),
              ((np.array([0, 1, 2, 3]), np.array([1, 1, 1, 1])), {}),   # k = 1: staleness = lag
              ((np.array([0, 3, 4, 7, 8]), np.array([4, 4, 4, 4, 4])), {}),
              ((np.array([5]), np.array([3])), {})], rtol=0.0, atol=0.0)
def staleness_bound_stub(arrival_lag, k):
    """Largest staleness of a batch drawn in recency mode, given its arrival lag (updates) and
    the sync period k: integer arrays of one shape (or ints), the result of that shape."""
    # YOUR CODE HERE
    raise NotImplementedError


# ------------------------------------------------------------------ drawing
def plot_accuracy_lost(run_dirs: dict, kl_mean: dict, lost: dict, err: dict):
    """Three panels, returned as a Figure: each run's behaviour KL over time, accuracy lost per
    run and against the run's mean behaviour KL. Dicts by run name, in drawing order:
    ``run_dirs``, ``kl_mean`` (nats), ``lost`` (points below the on-policy run) and ``err``."""
    import matplotlib.pyplot as plt

    from tba_lab.lab.timeline import load_timeline, plot_behaviour_kl

    names = list(run_dirs)
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    for i, n in enumerate(names):
        plot_behaviour_kl(run_dirs[n], ax=axes[0], label=n, color=f"C{i}")
    axes[0].set_xlim(0.0, max(load_timeline(d)["wall_seconds"] for d in run_dirs.values()))
    axes[0].set_title("behaviour KL of each update's batch")
    axes[0].legend(fontsize=8)
    axes[1].bar(names, [lost[n] for n in names], yerr=[err[n] for n in names], capsize=4,
                color=[f"C{i}" for i in range(len(names))])
    axes[1].set(title="accuracy lost, per run (sync period k)", ylabel="points (±error bar)")
    for i, n in enumerate(names):
        axes[2].errorbar(kl_mean[n], lost[n], yerr=err[n], fmt="o", capsize=4, color=f"C{i}",
                         label=n)
    axes[2].set(title="accuracy lost against off-policyness",
                xlabel="mean behaviour KL (nats / response)", ylabel="points (±error bar)")
    axes[2].legend(fontsize=8)
    for ax in axes[1:]:
        ax.axhline(0.0, color="0.5", lw=0.6)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
