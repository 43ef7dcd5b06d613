"""Asynchronous trajectory balance (TBA) in one file: read it top to bottom.

Bartoldson et al., "Trajectory Balance with Asynchrony", arXiv 2503.18929, Sec. 3-4. Searcher
processes sample K responses per prompt with a (possibly old) copy of the policy and push them,
tagged with the version of the weights that made them, into a queue; the trainer drains the
queue into a per-prompt replay buffer, samples B prompts x K responses, takes one AdamW step on
the trajectory balance loss and, every k updates (the sync period), publishes its weights
through shared memory. TB is a regression to a fixed target (Eq. 2), so stale rows are still
valid training data: search and learning need not wait for each other.

    python -m tba_lab.minimal --minutes 3 --seed 0 [--num-searchers 1] [--sync-period 1]

ends with ``tb/async on arithmetic: held-out accuracy A% -> B% in N updates, S s``, as ``tba-lab
train`` ends. From the library come only the embedded model, the arithmetic task, the usable core
count (``models.load_policy``, ``tasks.arithmetic``, ``actors.placement.available_cores``) and a
searcher's watch on its trainer (``actors.lifetime``); the algorithm is all written out here.

Where this departs from the paper (the same choices as the library's defaults):
* one trainer process on the CPU; searchers score their rows under the reference policy;
* the replay buffer remembers at most ``max_prompts`` prompts, and a recency draw (probability
  m) takes a prompt refreshed since the last publish (the paper: its most recent rows);
* the trainer never trains on more rows than the searchers generated (``max_replay_ratio``),
  so a fast trainer waits instead of overfitting a small buffer;
* the learning rate decays linearly to 0 over the time budget; beta is constant;
* evaluation is greedy accuracy on held-out problems, before and after the budget.

What ``tba-lab train`` (``tba_lab/trainer.py``) adds: resume, failure handling, placement,
CUDA IPC and Ray, logging and dashboards, baselines, other tasks and generation backends.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import multiprocessing as mp
import queue
import random
import signal
import time
from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM

from tba_lab.actors.lifetime import exit_with_parent, raise_system_exit

# the key/value cache's argument in the embedded model (a Llama): `cache` in transformers >= 5.2x
CACHE = next(n for n in ("cache", "past_key_values")
             if n in inspect.signature(LlamaForCausalLM.forward).parameters)


@dataclass
class Settings:
    """The run's settings; names follow the paper and the library's config (docs/usage.md)."""
    minutes: float = 3.0                # training budget, wall-clock minutes (evaluation extra)
    seed: int = 0                       # seeds the trainer, the searchers and the buffer
    num_searchers: int = 1              # searcher processes
    sync_period: int = 1                # k: publish the weights every k updates
    num_prompts_per_step: int = 16      # B: prompts per update (and per searcher batch)
    num_generations: int = 8            # K: responses per prompt (VarGrad needs K >= 2)
    beta: float = 0.03                  # KL coefficient: target pi_ref * exp(r / beta) (Eq. 2)
    learning_rate: float = 2.5e-5       # AdamW peak, decayed linearly to 0 (both: docs/results/tune/)
    max_grad_norm: float = 1.0          # gradient clipping
    temperature: float = 0.6            # sampling temperature (log-probs use the same)
    max_new_tokens: int = 40            # response length cap, tokens
    recency_prob: float = 1.0           # m: chance a batch slot takes a freshly refreshed prompt
    inv_temp: float = 0.0               # reward prioritisation softmax(inv_temp * r); 0 = uniform
    capacity_per_prompt: int = 32       # newest rows kept per prompt
    max_prompts: int = 256              # prompts remembered (least recently refreshed evicted)
    initial_fill: int = 256             # rows in the buffer before the first update
    max_replay_ratio: float = 1.0       # rows trained on <= this x rows generated
    queue_size: int = 1                 # batches a searcher may have waiting in the queue
    eval_size: int = 500                # held-out problems, greedy, before and after


@dataclass
class Row:
    """One rollout: token ids of prompt and response, its reward, log pi_ref(y|x) (the sum over
    the response's tokens, nats) and the policy version (trainer updates) that sampled it."""
    prompt_id: int
    prompt: list
    response: list
    reward: float
    ref_logp: float
    version: int


# ----------------------------------------------------------------------------------------------
# 1. Log-probs of whole responses (the "log pi(y|x)" of Eq. 3)
# ----------------------------------------------------------------------------------------------
def pad(rows: list, pad_id: int, left: bool) -> tuple:
    """Token-id lists to ``(N, L)`` int64 ids and a 0/1 mask, padded on the left or right."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        at = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, at], mask[i, at] = torch.tensor(r, dtype=torch.long), 1
    return ids, mask


def prompt_pass(model, ids: torch.Tensor, mask: torch.Tensor, k: int) -> tuple:
    """Run B left-padded prompts ``(B, P)`` through ``model`` once and copy each one's key/value
    cache to its K rows. Returns the last position's logits ``(B*K, 1, V)`` and the cache,
    ready to continue K answers per prompt. Prompts are about 3x longer than answers here, so
    this is about 3x less work than K full rows; position ids count real tokens only."""
    rows = torch.arange(len(ids)).repeat_interleave(k)               # (B*K,) row -> its prompt
    out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                use_cache=True, logits_to_keep=1)
    cache = getattr(out, CACHE)
    cache.reorder_cache(rows)                                        # (B, ...) -> (B*K, ...)
    return out.logits[rows], cache


def sequence_logprobs(model, prompts: list, responses: list, pad_id: int,
                      temperature: float) -> torch.Tensor:
    """(N,) float32: log pi(y|x), the sum over each response's tokens of
    log softmax(logits / temperature) (the distribution the searchers sampled from).

    ``prompts``: B token-id lists; ``responses``: N = B*K lists, prompt-major (rows
    i*K..i*K+K-1 answer ``prompts[i]``): each prompt runs once (:func:`prompt_pass`). Prompts
    are left-padded, responses right-padded, and the mask drops padding, so padding changes
    nothing. Gradients flow.
    """
    k = len(responses) // len(prompts)
    p_ids, p_mask = pad(prompts, pad_id, left=True)                  # (B, P)
    r_ids, r_mask = pad(responses, pad_id, left=False)               # (N, R)
    logits, cache = prompt_pass(model, p_ids, p_mask, k)             # (N, 1, V): predicts token 0
    if r_ids.shape[1] > 1:
        mask = torch.cat([p_mask.repeat_interleave(k, 0), r_mask], 1)  # (N, P + R)
        rest = model(input_ids=r_ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True,
                     position_ids=(mask.cumsum(1) - 1)[:, p_ids.shape[1]:-1], **{CACHE: cache})
        logits = torch.cat([logits, rest.logits], 1)                 # (N, R, V)
    token_logps = torch.log_softmax(logits.float() / temperature, -1).gather(-1, r_ids[..., None])
    return (token_logps[..., 0] * r_mask).sum(1)                     # (N,)


# ----------------------------------------------------------------------------------------------
# 2. The trajectory balance loss with the VarGrad log Z (Eq. 3-5)
# ----------------------------------------------------------------------------------------------
def trajectory_balance_loss(logp: torch.Tensor, ref_logp: torch.Tensor, rewards: torch.Tensor,
                            beta: float, k: int) -> torch.Tensor:
    """Mean over the B*K rows of (log Z(x) + log pi(y|x) - log pi_ref(y|x) - r / beta)^2.

    Args: (N,) float tensors, prompt-major (rows i*K..i*K+K-1 answer prompt i); only ``logp``
    carries a gradient. log Z(x) is the VarGrad estimate (Eq. 4): the mean over the K rows of
    x of r / beta - log pi + log pi_ref, detached. Returns a 0-dim tensor (Eq. 5).
    """
    log_ratio = (logp - ref_logp).view(-1, k)                       # (B, K)
    target = rewards.view(-1, k) / beta                             # (B, K)
    log_z = (target - log_ratio).mean(1, keepdim=True).detach()     # (B, 1)  Eq. 4
    return ((log_z + log_ratio - target) ** 2).mean()               # Eq. 3 and 5


# ----------------------------------------------------------------------------------------------
# 3. The replay buffer: rows per prompt, sampled with recency m (Sec. 3)
# ----------------------------------------------------------------------------------------------
class ReplayBuffer:
    """Rows grouped by prompt, the newest ``capacity`` per prompt, at most ``max_prompts``
    prompts (the least recently refreshed is forgotten). ``fresh``: prompts refreshed since the
    last publish (:meth:`mark_sync` clears it)."""

    def __init__(self, capacity: int, max_prompts: int):
        self.capacity, self.max_prompts = capacity, max_prompts
        self.groups: dict[int, list[Row]] = {}  # insertion order = least recently refreshed first
        self.fresh: set[int] = set()

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            group = self.groups.pop(row.prompt_id, [])  # re-inserted last: most recent
            row = dataclasses.replace(row, prompt=list(row.prompt), response=list(row.response))
            self.groups[row.prompt_id] = (group + [row])[-self.capacity:]  # a copy (callers reuse)
            self.fresh.add(row.prompt_id)
        while len(self.groups) > self.max_prompts:              # forget the least recently refreshed
            self.fresh.discard(oldest := next(iter(self.groups)))
            del self.groups[oldest]

    def mark_sync(self) -> None:
        self.fresh.clear()

    def __len__(self) -> int:
        return sum(map(len, self.groups.values()))


def reward_weights(group: list, inv_temp: float) -> list:
    """softmax(inv_temp * reward) over the rows, max subtracted: no overflow, never all 0."""
    top = max(r.reward for r in group)
    w = [math.exp(inv_temp * (r.reward - top)) for r in group]
    return [x / sum(w) for x in w]


def sample_batch(groups: dict, fresh: set, num_prompts: int, k: int, recency_prob: float,
                 inv_temp: float, rng: random.Random) -> list:
    """B prompts x K rows, prompt-major: the trainer's batch.

    Each slot takes a prompt not yet in the batch (all used: start over): with probability
    ``recency_prob`` (m) a ``fresh`` prompt, uniformly, and its K newest rows; else (or with no
    fresh prompt left) any prompt, uniformly, and K of its rows drawn without replacement with
    :func:`reward_weights`. A group with fewer than K rows is topped up by drawing its rows
    again with replacement (:func:`reward_weights`): the VarGrad mean needs K rows.

    Args: ``groups`` {prompt id: rows with ``.reward``, oldest first}; ``fresh`` a set of
    prompt ids; ``rng`` a ``random.Random``. Returns a list of B*K rows.
    """
    batch, used = [], set()
    for _ in range(num_prompts):
        if len(used) == len(groups):
            used.clear()
        fresh_left = [p for p in groups if p in fresh and p not in used]
        if fresh_left and rng.random() < recency_prob:
            pid = rng.choice(fresh_left)
            weights, rows = reward_weights(groups[pid], inv_temp), groups[pid][-k:]  # K newest
        else:
            pid = rng.choice([p for p in groups if p not in used])
            weights, rows = reward_weights(groups[pid], inv_temp), []
            order = list(range(len(groups[pid])))
            while order and len(rows) < k:                           # without replacement
                i = rng.choices(order, reward_weights([groups[pid][j] for j in order], inv_temp))[0]
                order.remove(i)
                rows.append(groups[pid][i])
        while len(rows) < k:                                         # top the group up to K
            rows.append(rng.choices(groups[pid], weights=weights)[0])
        batch += rows
        used.add(pid)
    return batch


# ----------------------------------------------------------------------------------------------
# 4. The weight sync: publish with a version, pull when newer (shared memory, no lock)
# ----------------------------------------------------------------------------------------------
class SharedWeights:
    """All parameters in one flat float tensor in shared memory, and two counters: ``version``
    (trainer updates of the weights held) and ``writes`` (odd while a publish is copying).
    A reader copies, then checks that ``writes`` did not move (a seqlock): a torn copy is
    retried, and no process ever waits on a lock that a dead process holds."""

    def __init__(self, model):
        self.flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).share_memory_()
        self.version = mp.get_context("spawn").Value("q", -1, lock=False)
        self.writes = mp.get_context("spawn").Value("q", 0, lock=False)

    def publish(self, model, version: int) -> None:
        self.writes.value += 1                                       # odd: copying
        torch.cat([p.detach().reshape(-1) for p in model.parameters()], out=self.flat)
        self.version.value = version
        self.writes.value += 1                                       # even: consistent

    def pull(self, model, have: int) -> int:
        """Copy the weights into ``model`` if a newer version than ``have`` is published;
        returns the version ``model`` now holds."""
        while True:
            before, version = self.writes.value, self.version.value  # writes first
            if version <= have:
                return have
            if before % 2 == 0:
                torch.nn.utils.vector_to_parameters(self.flat.clone(), model.parameters())
                if self.writes.value == before:
                    return version
            time.sleep(0.001)


# ----------------------------------------------------------------------------------------------
# 5. The searcher: generate, reward, score under the reference, push
# ----------------------------------------------------------------------------------------------
def searcher_step(policy, reference, tokenizer, task, problems: list, prompt_ids: list,
                  s: Settings, version: int) -> list:
    """K sampled responses for each of the B ``problems``, as B*K ``Row``s tagged ``version``.

    A response ends after its first EOS (kept: the model chose to stop there) or at
    ``max_new_tokens``; its reward is the task's (which grades the text before any of the
    task's stop strings); ``ref_logp`` is its log-prob under the frozen reference policy.
    ``prompt_ids``: the problems' indices (the buffer groups rows by them).
    """
    prompts = [tokenizer(task.format_prompt(p))["input_ids"] for p in problems]
    ids, mask = pad(prompts, tokenizer.pad_token_id, left=True)     # (B, P)
    K = s.num_generations
    with torch.no_grad():  # prompts but their last token once, then K rows continue from there
        _, cache = prompt_pass(policy, ids[:, :-1], mask[:, :-1], K)
        out = policy.generate(input_ids=ids.repeat_interleave(K, 0), do_sample=True, top_k=0,
                              attention_mask=mask.repeat_interleave(K, 0), top_p=1.0,
                              temperature=s.temperature, max_new_tokens=s.max_new_tokens,
                              pad_token_id=tokenizer.pad_token_id, **{CACHE: cache})
        eos, new = tokenizer.eos_token_id, out[:, ids.shape[1]:].tolist()  # (B*K, <= max_new)
        responses = [r[:r.index(eos) + 1] if eos in r else r for r in new]  # cut after 1st EOS
        ref = sequence_logprobs(reference, prompts, responses, tokenizer.pad_token_id, s.temperature)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    rewards = task.rewards([p for p in problems for _ in range(K)], texts)
    return [Row(prompt_ids[i // K], prompts[i // K], r, reward, lp, version)
            for i, (r, reward, lp) in enumerate(zip(responses, rewards, ref.tolist()))]


def searcher_main(index: int, s: Settings, weights: SharedWeights, rows_out, room, stop) -> None:
    """One searcher process: wait for room in the queue, pull newer weights, generate a batch
    of B prompts, push it. ``room``: a semaphore the trainer releases per batch it takes."""
    from tba_lab.models import load_policy
    from tba_lab.tasks.arithmetic import ArithmeticTask

    signal.signal(signal.SIGINT, signal.SIG_IGN)                     # Ctrl-C is the trainer's
    exit_with_parent()            # SIGTERM (ends us) once the trainer has died, SIGKILLed too
    torch.set_num_threads(1)
    torch.manual_seed(s.seed + 1000 * (index + 1))
    rng = random.Random(s.seed + 1000 * (index + 1))
    policy, tokenizer = load_policy()
    reference = load_policy()[0].eval()
    policy.eval()
    task = ArithmeticTask()
    problems = task.load("train")
    version = -1
    try:
        while not stop.is_set():
            if not room.acquire(timeout=0.1):                        # queue full: don't generate
                continue
            version = weights.pull(policy, version)                  # newest weights, if any
            chosen = rng.sample(range(len(problems)), s.num_prompts_per_step)
            rows = searcher_step(policy, reference, tokenizer, task, [problems[i] for i in chosen],
                                 chosen, s, version)
            rows_out.put(rows)
    finally:
        rows_out.cancel_join_thread()                                # never block exit on the pipe


# ----------------------------------------------------------------------------------------------
# 6. The trainer: drain, sample, one TB step, publish every k updates
# ----------------------------------------------------------------------------------------------
def trainer_step(policy, optimizer, batch: list, s: Settings, pad_id: int) -> float:
    """One AdamW update on the TB loss of a prompt-major batch of ``Row``s; returns the loss."""
    prompts = [r.prompt for r in batch[::s.num_generations]]       # one per group
    logp = sequence_logprobs(policy, prompts, [r.response for r in batch], pad_id, s.temperature)
    ref_logp = torch.tensor([r.ref_logp for r in batch])
    rewards = torch.tensor([r.reward for r in batch])
    loss = trajectory_balance_loss(logp, ref_logp, rewards, s.beta, s.num_generations)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), s.max_grad_norm)
    optimizer.step()
    return loss.item()


def evaluate(policy, tokenizer, task, problems: list, max_new_tokens: int) -> float:
    """Greedy accuracy (mean exact-match reward) on ``problems``, 250 at a time."""
    rewards = []
    for start in range(0, len(problems), 250):
        chunk = problems[start:start + 250]
        ids, mask = pad([tokenizer(task.format_prompt(p))["input_ids"] for p in chunk],
                        tokenizer.pad_token_id, left=True)
        with torch.no_grad():
            out = policy.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                  max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
        rewards += task.rewards(chunk, tokenizer.batch_decode(out[:, ids.shape[1]:],
                                                              skip_special_tokens=True))
    return sum(rewards) / len(rewards)


def train(s: Settings) -> dict:
    """Run asynchronous TBA for ``s.minutes``; returns a summary dict. Raises RuntimeError when
    every searcher has died; every searcher is stopped and joined before it returns or raises."""
    from tba_lab.actors.placement import available_cores  # affinity and container CPU limits
    from tba_lab.models import load_policy
    from tba_lab.tasks.arithmetic import ArithmeticTask

    torch.manual_seed(s.seed)
    torch.set_num_threads(max(1, available_cores() - s.num_searchers))  # searchers: one each
    policy, tokenizer = load_policy()
    policy.eval()  # no dropout: the loss scores what the searchers sampled
    task = ArithmeticTask()
    held_out = task.load("test")[:s.eval_size]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=s.learning_rate, weight_decay=0.0)
    buffer, rng = ReplayBuffer(s.capacity_per_prompt, s.max_prompts), random.Random(s.seed)
    ctx = mp.get_context("spawn")
    weights, rows_in, stop = SharedWeights(policy), ctx.Queue(), ctx.Event()
    room = ctx.Semaphore(s.num_searchers * s.queue_size)
    weights.publish(policy, 0)
    searchers = [ctx.Process(target=searcher_main, args=(i, s, weights, rows_in, room, stop),
                             daemon=True) for i in range(s.num_searchers)]
    for p in searchers:
        p.start()                              # they load their models while we evaluate
    try:
        acc_before = evaluate(policy, tokenizer, task, held_out, s.max_new_tokens)
        print(f"held-out accuracy before: {100 * acc_before:.1f}%", flush=True)
        step, generated, staleness, last_print = 0, 0, [], time.time()
        t0 = time.time()
        while (elapsed := time.time() - t0) < 60 * s.minutes:
            try:                                                     # drain what arrived
                while True:
                    rows = rows_in.get(timeout=0.05 if len(buffer) < s.initial_fill else 0)
                    room.release()
                    buffer.add(rows)
                    generated += len(rows)
            except queue.Empty:
                pass
            if not any(p.is_alive() for p in searchers):
                codes = [p.exitcode for p in searchers]
                raise RuntimeError(f"every searcher ended (exit codes {codes}); see above")
            B, K = s.num_prompts_per_step, s.num_generations
            if len(buffer) < s.initial_fill or (step + 1) * B * K > s.max_replay_ratio * generated:
                time.sleep(0.01)                                     # wait for data
                continue
            batch = sample_batch(buffer.groups, buffer.fresh, B, K, s.recency_prob, s.inv_temp, rng)
            for group in optimizer.param_groups:                     # linear decay to 0
                group["lr"] = s.learning_rate * max(0.0, 1 - elapsed / (60 * s.minutes))
            loss = trainer_step(policy, optimizer, batch, s, tokenizer.pad_token_id)
            staleness.append(sum(step - r.version for r in batch) / len(batch))  # batch mean
            step += 1
            if step % s.sync_period == 0:
                weights.publish(policy, step)
                buffer.mark_sync()
            if time.time() - last_print > 15:
                last_print = time.time()
                print(f"{elapsed:5.0f} s  update {step}  loss {loss:.2f}  buffer {len(buffer)}  "
                      f"samples {generated}  staleness {staleness[-1]:.1f}", flush=True)
    finally:
        stop.set()
        for p in searchers:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
        rows_in.close()
    seconds = time.time() - t0
    acc_after = evaluate(policy, tokenizer, task, held_out, s.max_new_tokens)
    return {"accuracy_before": acc_before, "accuracy_after": acc_after, "trainer_steps": step,
            "wall_seconds": seconds, "samples_generated": generated,
            "staleness_mean": sum(staleness) / max(1, len(staleness))}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser("python -m tba_lab.minimal", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=Settings.minutes)
    p.add_argument("--seed", type=int, default=Settings.seed)
    p.add_argument("--num-searchers", type=int, default=Settings.num_searchers)
    p.add_argument("--sync-period", type=int, default=Settings.sync_period)
    p.add_argument("--eval-size", type=int, default=Settings.eval_size)
    args = p.parse_args(argv)
    if not 0 < args.minutes < math.inf or min(args.num_searchers, args.sync_period,
                                                  args.eval_size) < 1:  # NaN fails 0 < x too
        p.error("--minutes: finite and > 0; --num-searchers, --sync-period, --eval-size: >= 1")
    signal.signal(signal.SIGTERM, raise_system_exit)  # `kill PID`: train's finally stops searchers
    out = train(dataclasses.replace(Settings(), **vars(args)))
    print(f"tb/async on arithmetic: held-out accuracy {100 * out['accuracy_before']:.1f}% -> "
          f"{100 * out['accuracy_after']:.1f}% in {out['trainer_steps']} updates, "
          f"{out['wall_seconds']:.0f} s ({out['samples_generated']} samples, staleness mean "
          f"{out['staleness_mean']:.2f})", flush=True)
    return out


if __name__ == "__main__":
    # run the importable module: the trainer could not unpickle a searcher's __main__.Row
    from tba_lab.minimal import main as run
    run()
