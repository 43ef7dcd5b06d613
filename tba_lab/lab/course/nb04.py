"""Notebook 04 (asynchronous searchers): exercises, and a helper that draws. The first three
exercises are pieces of ``tba_lab/minimal.py`` (their references are its functions), which the
notebook assembles into a running loop with searcher threads.

Exercises
    04.weight_sync      publish with a version, pull when newer, no torn read (a seqlock)
    04.searcher_step    K sampled responses per prompt, cut after the first EOS, rewarded, scored
                        under the reference, tagged with the version
    04.trainer_step     one update on the TB loss of a batch of rows: zero_grad, backward, clip, step
    04.staleness_bound  largest staleness of a batch drawn in recency mode, given its arrival lag

Drawing
    plot_accuracy_lost  accuracy lost to off-policy data against the sync period k and against
                        the runs' behaviour KL (off-policyness in nats per response)
"""
from __future__ import annotations

import copy
import threading

import numpy as np
import torch

from tba_lab.lab.course import Exercise
from tba_lab.lab.course.nb01 import embedded_policy
from tba_lab.lab.timeline import fresh_staleness_max


# --------------------------------------------------------- 04.weight_sync
class WeightSyncStub:
    """The weight channel between the trainer and its searchers (a seqlock, no lock to hold).

    ``__init__(self, model)``: ``self.flat``, ONE flat float tensor holding every tensor of
    ``model.parameters()``, flattened, in order (``.share_memory_()`` so that spawned processes
    map it); ``self.version`` and ``self.writes``, counters with a ``.value``
    (``mp.get_context("spawn").Value("q", 0, lock=False)``): version -1 (nothing published yet),
    writes 0.

    ``publish(self, model, version)``: add 1 to ``writes`` (odd: a copy is under way), copy the
    parameters of ``model`` into ``flat`` (read them with ``model.parameters()``), set
    ``version``, add 1 to ``writes`` again (even: consistent).

    ``pull(self, model, have) -> int``: if the published version is not newer than ``have``,
    copy nothing and return ``have``. Otherwise, when ``writes`` is even, copy ``flat`` into the
    parameters of ``model``; if ``writes`` did not change during the copy, return the version
    read; else (odd, or it moved: a torn copy) sleep 1 ms and try again.
    """

    def __init__(self, model):
        # YOUR CODE HERE
        raise NotImplementedError

    def publish(self, model, version):
        raise NotImplementedError

    def pull(self, model, have):
        raise NotImplementedError


class _SpyModel(torch.nn.Sequential):
    """A small model whose ``parameters()`` notes the channel's ``writes`` when it is read."""
    watch = None

    def parameters(self, recurse: bool = True):
        if self.watch is not None and hasattr(self.watch, "writes"):
            self.seen.append(self.watch.writes.value)
        return super().parameters(recurse)


def _spy_model(seed):
    torch.manual_seed(seed)
    m = _SpyModel(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    m.seen = []
    return m


def _weight_sync_cases():
    return [((_spy_model(0),), {})]


def _weight_sync_reference(model):
    from tba_lab.minimal import SharedWeights

    return SharedWeights(model)


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in torch.nn.Module.parameters(model)])


def _set(model, vec):
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(vec.clone(), torch.nn.Module.parameters(model))


class _MovingCounter:
    """A ``writes`` counter that a publish overtakes during a pull's copy: its first read
    returns ``start`` (even); its second read first completes the publish (writes ``done`` into
    ``flat``) and from then on it returns ``start + 2``."""

    def __init__(self, start, flat, done):
        self.start, self.flat, self.done, self.reads = start, flat, done, 0

    @property
    def value(self):
        self.reads += 1
        if self.reads == 2:
            self.flat.copy_(self.done)
        return self.start if self.reads == 1 else self.start + 2

    @value.setter
    def value(self, v):
        self.start = v


def _pull_in_thread(sync, model, have):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", sync.pull(model, have)), daemon=True)
    t.start()
    return t, out


def _weight_sync_compare(got, want):
    if not all(hasattr(got, a) for a in ("flat", "version", "writes", "publish", "pull")):
        return "expected an object with .flat, .version, .writes, .publish and .pull (a class)"
    a, b = _spy_model(0), _spy_model(1)          # trainer's and searcher's models
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
    if got.pull(b, -1) != 5 or not torch.equal(_params(b), _params(a)):
        return "pull(model, -1) after publish(..., 5) must copy the weights and return 5"
    _set(b, torch.zeros_like(_params(b)))
    if got.pull(b, 5) != 5 or _params(b).abs().sum() != 0:
        return "pull(model, 5) when version 5 is published must return 5 and copy nothing"
    if got.pull(b, 3) != 5 or not torch.equal(_params(b), _params(a)):
        return "pull(model, 3) when version 5 is published must copy and return 5 (the version now held)"
    new = _params(a) * 3.0                       # a publish in progress: writes odd, half copied
    got.writes.value += 1
    got.flat[: len(new) // 2] = new[: len(new) // 2]
    got.version.value = 6
    t, out = _pull_in_thread(got, b, 5)
    t.join(0.3)
    if not t.is_alive():
        got.writes.value += 1
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
        t, out = _pull_in_thread(got, b, 6)
        t.join(10)
    finally:
        got.writes = real
    if t.is_alive() or out.get("v") != 7 or not torch.equal(_params(b), done):
        return ("a publish ran during pull's copy (writes moved from even to even + 2): pull must "
                "notice that writes changed, discard the torn copy and copy again")
    return None


WEIGHT_SYNC = Exercise(
    name="04.weight_sync",
    description="the weight channel: publish with a version, pull when newer, no torn read",
    stub=WeightSyncStub, reference=_weight_sync_reference,
    cases=_weight_sync_cases, compare=_weight_sync_compare)


# --------------------------------------------------------- 04.searcher_step
def searcher_step_stub(policy, reference, tokenizer, task, problems, prompt_ids, s, version):
    """K = ``s.num_generations`` sampled responses for each of the B ``problems``: a list of
    B*K ``tba_lab.minimal.Row``, prompt-major (rows i*K .. i*K+K-1 answer ``problems[i]``).

    Prompts: ``tokenizer(task.format_prompt(p))["input_ids"]``. Sample with ``policy.generate``
    (``do_sample=True``, ``temperature=s.temperature``, ``top_k=0``, ``top_p=1.0``,
    ``max_new_tokens=s.max_new_tokens``, ``num_return_sequences=K``, left-padded prompts with
    their attention mask, ``pad_token_id=tokenizer.pad_token_id``), under ``torch.no_grad()``.
    A response is the generated tokens up to and INCLUDING the first EOS
    (``tokenizer.eos_token_id``; what ``generate`` puts after it is padding), or all
    ``max_new_tokens`` of them when there is no EOS. Each Row: ``prompt_id`` =
    ``prompt_ids[i]``, ``prompt`` (token ids), ``response`` (token ids), ``reward`` =
    ``task.rewards`` of the decoded response (``skip_special_tokens=True``), ``ref_logp`` =
    log pi_ref(response | prompt) under ``reference`` at ``s.temperature`` (01.sequence_logprobs),
    ``version``.
    """
    # YOUR CODE HERE
    raise NotImplementedError


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


class _Context:
    def __init__(self, args, result):
        self.args, self.result = args, result


def _searcher_reference(policy, reference, tokenizer, task, problems, prompt_ids, s, version):
    from tba_lab.minimal import searcher_step

    torch.manual_seed(402)   # sampling is random: seeded, so that the check is reproducible
    args = (policy, reference, tokenizer, task, problems, prompt_ids, s, version)
    return _Context(args, searcher_step(*args))


def _searcher_compare(got, want):
    from tba_lab.minimal import sequence_logprobs

    policy, reference, tok, task, problems, prompt_ids, s, version = want.args
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


SEARCHER_STEP = Exercise(
    name="04.searcher_step",
    description="a searcher's batch: B x K sampled rows, cut after EOS, rewarded, ref log-probs, version",
    stub=searcher_step_stub, reference=_searcher_reference,
    cases=_searcher_cases, compare=_searcher_compare)


# --------------------------------------------------------- 04.trainer_step
def trainer_step_stub(policy, optimizer, batch, s, pad_id):
    """One optimizer update of ``policy`` on the TB loss of ``batch``; return the loss (a float).

    ``batch``: B*K ``Row``s, prompt-major (K = ``s.num_generations``): log pi(y|x) of each row
    under ``policy`` at ``s.temperature`` (01.sequence_logprobs, with gradients), the TB loss
    with the VarGrad log Z (02.tb_loss, ``s.beta``) against the rows' ``ref_logp`` and
    ``reward``; then clear the old gradients, backward, clip the gradient norm to
    ``s.max_grad_norm`` (``torch.nn.utils.clip_grad_norm_``), ``optimizer.step()``.
    """
    # YOUR CODE HERE
    raise NotImplementedError


_BATCH = {}


def _trainer_batch():
    """12 rows (B = 3 prompts x K = 4) sampled once from the embedded model, seeded."""
    if not _BATCH:
        from tba_lab.minimal import Settings, searcher_step
        from tba_lab.tasks.arithmetic import ArithmeticTask

        model, tok = embedded_policy()
        task = ArithmeticTask()
        state = torch.random.get_rng_state()
        torch.manual_seed(403)
        _BATCH["rows"] = searcher_step(model, model, tok, task, task.load("train")[5:8], [0, 1, 2],
                                       Settings(num_generations=4), 0)
        torch.random.set_rng_state(state)
        for i, r in enumerate(_BATCH["rows"]):             # mixed rewards in every group
            r.reward = float(i % 3 == 0)
            r.ref_logp -= 0.3 * (i % 4)                    # a policy that differs from pi_ref
    return _BATCH["rows"]


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
    loss = trainer_step(twin, twin_optimizer, batch, s, pad_id)
    tol = 2e-5
    return _Context((policy, twin, tol), loss)


def _trainer_compare(got, want):
    policy, twin, tol = want.args
    try:
        loss = float(got)
    except (TypeError, ValueError):
        return f"expected the loss as a float, got {type(got).__name__}"
    if not np.isclose(loss, want.result, rtol=1e-4, atol=1e-4):
        return f"loss {loss:.6g}, expected {want.result:.6g} (the TB loss of Eq. 3-5 at beta and temperature of s)"
    for (name, p), q in zip(policy.named_parameters(), twin.parameters()):
        gap = (p.detach() - q.detach()).abs().max().item()
        if gap > tol:
            return (f"after the step, parameter {name} differs from the reference step's by {gap:.3g}: "
                    "optimizer.zero_grad() before backward (the cases leave old gradients), "
                    "clip_grad_norm_ to s.max_grad_norm after backward and before step")
    return None


TRAINER_STEP = Exercise(
    name="04.trainer_step",
    description="one update: sequence log-probs, TB loss, zero_grad, backward, clip, step",
    stub=trainer_step_stub, reference=_trainer_reference,
    cases=_trainer_cases, compare=_trainer_compare)


# ------------------------------------------------------- 04.staleness_bound
def staleness_bound_stub(arrival_lag, k):
    """Largest staleness a generation batch can have when the trainer draws it in recency mode.

    Versions are multiples of k (weights are published when the update count reaches a multiple
    of k). A batch generated with version v arrives when the trainer has done v + arrival_lag
    updates; it stays "refreshed since the last sync" until the update count reaches the next
    multiple of k, so the last update that can draw it in recency mode begins one update before
    that. Return that update count minus v. Inputs are integer numpy arrays of one shape
    (or plain ints); return the same shape."""
    # YOUR CODE HERE
    raise NotImplementedError


def _bound_cases():
    a, k = np.meshgrid(np.arange(0, 13), np.arange(1, 6))
    return [((a.reshape(-1), k.reshape(-1)), {}),
            ((np.array([0, 1, 2, 3]), np.array([1, 1, 1, 1])), {}),   # k = 1: staleness = lag
            ((np.array([0, 3, 4, 7, 8]), np.array([4, 4, 4, 4, 4])), {}),
            ((np.array([5]), np.array([3])), {})]


STALENESS_BOUND = Exercise(
    name="04.staleness_bound",
    description="largest staleness of a batch drawn in recency mode, given arrival lag and k",
    stub=staleness_bound_stub, reference=fresh_staleness_max,
    cases=_bound_cases, rtol=0.0, atol=0.0)


EXERCISES = [WEIGHT_SYNC, SEARCHER_STEP, TRAINER_STEP, STALENESS_BOUND]


# ------------------------------------------------------------------ drawing
def plot_accuracy_lost(run_dirs: dict, kl_mean: dict, lost: dict, err: dict):
    """Three panels: each run's ``behaviour_kl`` over training time (its ``metrics.jsonl``,
    :func:`tba_lab.lab.timeline.plot_behaviour_kl`); accuracy lost per run, i.e. against the
    sync period k; and accuracy lost against the run's mean ``behaviour_kl``.

    Args:
        run_dirs: {run name: its output directory}, in drawing order.
        kl_mean: {run name: mean behaviour_kl over its updates}, nats per response.
        lost: {run name: held-out accuracy lost}, points (the on-policy run's accuracy minus
            this run's; positive: off-policy data cost accuracy).
        err: {run name: the error bar of ``lost``}, points (e.g. 2 standard errors).

    Returns:
        the matplotlib Figure (not saved, not shown).
    """
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
