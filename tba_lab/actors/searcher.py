"""The searcher (actor) loop: generate, score, tag, push (DESIGN sec. 2).

A searcher holds a possibly stale copy of the policy and the frozen reference policy. Each
iteration it
  1. pulls new weights if the trainer published since the last iteration (:class:`SharedWeights`),
  2. samples ``num_prompts_per_step`` prompts (a seeded pass over the train split, reshuffled
     each epoch, so it never runs out of prompts),
  3. generates K = ``num_generations`` responses per prompt with the backend, keeping the
     sampler's own per-token log-probs (the behaviour policy, for importance ratios),
  4. scores them (exact-match reward) and computes reference log-probs (so the trainer needs no
     reference forward pass: TB's Eq. 3 and GRPO's KL term read them from the rollout); they
     are skipped (None) when the loss reads none (``config.needs_reference``: GRPO at beta 0),
  5. puts one message with B*K :class:`~tba_lab.buffer.Rollout` items, tagged with the policy
     version, on the queue; ``put`` uses a timeout in a loop so a stop request is always seen.

In ``sync`` mode it generates exactly one batch per published version (strict alternation).
The loop ends when ``stop`` is set or the parent process dies; SIGINT is ignored here because
the trainer process owns shutdown (a terminal's Ctrl-C reaches every process in the group).
"""
from __future__ import annotations

import multiprocessing
import queue as queue_lib
import random
import signal
import time
import traceback

import torch


def _prompt_stream(problems: list[dict], seed: int):
    """Endless seeded stream of (index, problem), reshuffled every epoch."""
    rng = random.Random(seed)
    order = list(range(len(problems)))
    while True:
        rng.shuffle(order)
        for i in order:
            yield i, problems[i]


def _put(q, msg, stop) -> bool:
    """Put ``msg`` unless ``stop`` is set first; returns whether it was put."""
    while not stop.is_set():
        try:
            q.put(msg, timeout=0.1)
            return True
        except queue_lib.Full:
            continue
    return False


def searcher_main(searcher_id: int, cfg_dict: dict, weights, out_queue, stop, seed: int) -> None:
    """Entry point of one searcher process (spawned by :class:`~tba_lab.actors.local.LocalLauncher`).

    Args:
        searcher_id: index of this searcher (0-based).
        cfg_dict: ``RunConfig.to_dict()`` (plain data, cheap to pickle).
        weights: the trainer's :class:`~tba_lab.actors.weights.SharedWeights`.
        out_queue: ``multiprocessing`` queue of messages ``{"kind": "rollouts"|"error", ...}``.
        stop: ``multiprocessing`` Event; set by the trainer to end the loop.
        seed: seed for prompts and sampling.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _loop(searcher_id, cfg_dict, weights, out_queue, stop, seed)
    except Exception:  # report, do not hang the trainer
        _put(out_queue, {"kind": "error", "searcher_id": searcher_id,
                         "traceback": traceback.format_exc()}, stop)
    finally:
        out_queue.cancel_join_thread()  # never block exit on undelivered messages


def _loop(searcher_id, cfg_dict, weights, out_queue, stop, seed):
    from tba_lab.buffer import Rollout
    from tba_lab.config import needs_reference
    from tba_lab.models import load_policy
    from tba_lab.rollout.backend import TransformersBackend
    from tba_lab.rollout.scoring import response_logprobs
    from tba_lab.tasks import format_prompt
    from tba_lab.tasks.gsm8k import exact_match_reward, read_jsonl

    a, m, tr = cfg_dict["async_"], cfg_dict["model"], cfg_dict["training"]
    sync = a["mode"] == "sync"
    threads = a["searcher_threads"] or (1 if not sync else max(1, torch.get_num_threads()))
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    use_ref = needs_reference(cfg_dict["algo"], cfg_dict["grpo"]["beta"])
    policy, tokenizer = load_policy(m["path"])
    policy.eval()
    if use_ref:
        reference, _ = load_policy(m["path"])
        reference.eval()
    backend = TransformersBackend(policy, tokenizer)
    problems = read_jsonl(cfg_dict["task"]["train_path"])
    stream = _prompt_stream(problems, seed)
    parent = multiprocessing.parent_process()
    B, K, T = tr["num_prompts_per_step"], tr["num_generations"], m["temperature"]
    version, last_generated = -1, -1
    while not stop.is_set() and (parent is None or parent.is_alive()):
        version = weights.pull(policy, version)
        if sync and version == last_generated:  # strict alternation: one batch per version
            time.sleep(0.005)
            continue
        t0 = time.time()
        batch = [next(stream) for _ in range(B)]
        prompt_ids = tokenizer([format_prompt(p["question"]) for _, p in batch])["input_ids"]
        gen = backend.generate(prompt_ids, K, temperature=T, max_new_tokens=m["max_new_tokens"])
        t1 = time.time()
        texts = tokenizer.batch_decode(gen.responses, skip_special_tokens=True)
        rows_prompts = [prompt_ids[i // K] for i in range(B * K)]  # prompt-major
        if use_ref:
            with torch.no_grad():
                ref_logps, _ = response_logprobs(reference, rows_prompts, gen.responses,
                                                 tokenizer.pad_token_id, T)
        rollouts = []
        for j, (resp, text) in enumerate(zip(gen.responses, texts)):
            pid, problem = batch[j // K]
            n = len(resp)
            rollouts.append(Rollout(
                prompt_id=pid, prompt_ids=rows_prompts[j], response_ids=resp,
                reward=exact_match_reward(text, problem["answer"]),
                ref_token_logps=ref_logps[j, :n].tolist() if use_ref else None,
                old_token_logps=gen.token_logps[j],
                version=version, created=time.time()))
        t2 = time.time()
        last_generated = version
        _put(out_queue, {"kind": "rollouts", "searcher_id": searcher_id, "version": version,
                         "rollouts": rollouts, "t_start": t0, "gen_seconds": t1 - t0,
                         "score_seconds": t2 - t1, "t_end": t2}, stop)
