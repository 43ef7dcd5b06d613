"""Where the time goes on this machine: generation throughput and the trainer's step split.

    python bench/throughput.py [--threads 2] [--batch-sizes 64 128 256 512]

* Generation: ``TransformersBackend.generate`` on the embedded model at T = 0.6, up to 40 new
  tokens, for several batch sizes (rows = prompts x K). Throughput is generated response tokens
  (EOS included, padding after EOS excluded) per second of wall clock.
* Trainer step: one TB update on a B x K = 16 x 8 batch of real rollouts, split into forward
  (log-probs of the batch + loss), backward, and optimizer (clip + AdamW), median of repeats,
  with the default scoring (one prompt pass per group, and each repeated (prompt, response)
  pair scored once) and with full rows side by side.
* Generation is measured with the shared prompt prefill and with plain ``generate`` side by side.

Medians over repeats, measured in this one process; numbers depend on the machine and on what
else runs, so compare the ratios printed side by side, not absolute seconds across machines.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tba_lab.algorithms as algorithms_module  # noqa: E402
from tba_lab.algorithms import compute_loss, make_algorithm  # noqa: E402
from tba_lab.config import from_dict  # noqa: E402
from tba_lab.models import DEFAULT_MODEL_DIR, load_policy  # noqa: E402
from tba_lab.rollout import TransformersBackend, rollout  # noqa: E402
from tba_lab.tasks.arithmetic import ArithmeticTask  # noqa: E402


def _prompts(tokenizer, n: int) -> list[list[int]]:
    """Token ids of the first ``n`` training prompts of the embedded task."""
    task = ArithmeticTask()
    return [tokenizer(task.format_prompt(r))["input_ids"] for r in task.load("train")[:n]]


def generation_throughput(batch_sizes=(64, 128, 256, 512), num_generations: int = 8,
                          max_new_tokens: int = 40, repeats: int = 2) -> list[dict]:
    """Tokens per second of ``TransformersBackend.generate`` at each batch size (rows), with the
    shared prompt prefill (the default) and without it (plain ``num_return_sequences``),
    measured alternately in this process.

    Returns:
        one dict per batch size: ``batch`` (rows), ``seconds`` (median per call, shared),
        ``tokens`` (generated tokens per call), ``tokens_per_s``, ``rows_per_s``,
        ``plain_tokens_per_s`` and ``speedup`` (shared / plain).
    """
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    model.eval()
    backends = {"shared": TransformersBackend(model, tok),
                "plain": TransformersBackend(model, tok, share_prompts=False)}
    out = []
    for rows in batch_sizes:
        prompts = _prompts(tok, max(1, rows // num_generations))
        times = {name: [] for name in backends}
        tokens = {}
        for i in range(repeats + 1):
            for name, backend in backends.items():
                torch.manual_seed(i)
                t0 = time.perf_counter()
                gen = backend.generate(prompts, num_generations, temperature=0.6,
                                       max_new_tokens=max_new_tokens)
                if i:  # the first call warms up
                    times[name].append(time.perf_counter() - t0)
                    tokens[name] = sum(len(r) for r in gen.responses)
        s, p = statistics.median(times["shared"]), statistics.median(times["plain"])
        out.append({"batch": rows, "seconds": round(s, 3), "tokens": tokens["shared"],
                    "tokens_per_s": round(tokens["shared"] / s, 1), "rows_per_s": round(rows / s, 1),
                    "plain_tokens_per_s": round(tokens["plain"] / p, 1),
                    "speedup": round((tokens["shared"] / s) / (tokens["plain"] / p), 2)})
    return out


def step_time_split(num_prompts: int = 16, num_generations: int = 8, algo: str = "tb",
                    repeats: int = 5) -> dict:
    """Median seconds of the trainer's forward (log-probs + loss), backward and optimizer step
    on one real B x K batch (sampled at T = 0.6 from the embedded model)."""
    model, tok = load_policy(DEFAULT_MODEL_DIR)
    model.eval()
    cfg = from_dict({"algo": algo, "training": {"num_prompts_per_step": num_prompts,
                                                "num_generations": num_generations}})
    task, algorithm = ArithmeticTask(cfg), make_algorithm(cfg)
    torch.manual_seed(0)
    batch = rollout(TransformersBackend(model, tok), task, task.load("train")[:num_prompts],
                    num_generations, temperature=0.6, max_new_tokens=40, reference=model).rollouts
    model.eval()  # as the trainer's update (no dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    result = {"rows": len(batch), "response_tokens": sum(len(r.response_ids) for r in batch),
              "distinct_rows": len({(tuple(r.prompt_ids), tuple(r.response_ids)) for r in batch})}
    original = algorithms_module.response_logprobs
    for tag, share in (("", True), ("full_", False)):  # with and without shared scoring
        algorithms_module.response_logprobs = functools.partial(original, share_prompts=share)
        parts = {"forward": [], "backward": [], "optimizer": []}
        try:
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                loss, _ = compute_loss(algorithm, model, batch, tok.pad_token_id, step=0)
                t1 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                t2 = time.perf_counter()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                t3 = time.perf_counter()
                if i:
                    parts["forward"].append(t1 - t0)
                    parts["backward"].append(t2 - t1)
                    parts["optimizer"].append(t3 - t2)
        finally:
            algorithms_module.response_logprobs = original
        med = {k: statistics.median(v) for k, v in parts.items()}
        total = sum(med.values())
        result.update({f"{tag}{k}_s": round(v, 4) for k, v in med.items()})
        result.update({f"{tag}{k}_share": round(v / total, 3) for k, v in med.items()})
        result[f"{tag}total_s"] = round(total, 4)
    return result


def print_report(gen_rows: list[dict], split: dict) -> str:
    lines = ["Generation throughput (TransformersBackend, T=0.6, <= 40 new tokens, K=8 per prompt):",
             "| batch (rows) | s per call | tokens | tokens/s | rows/s | plain generate tokens/s | shared prefill speedup |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {r['seconds']:.2f} | {r['tokens']} | {r['tokens_per_s']:.0f} | "
              f"{r['rows_per_s']:.1f} | {r['plain_tokens_per_s']:.0f} | {r['speedup']:.2f}x |"
              for r in gen_rows]
    lines += ["", f"Trainer step split, TB loss ({split['rows']} rows, {split['response_tokens']} "
              f"response tokens, {split['distinct_rows']} distinct rows), with the default scoring (shared "
              "prompt pass, repeated responses scored once) and with full rows:",
              "| part | seconds | share | full rows: seconds | full rows: share |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {split[k + '_s']:.3f} | {100 * split[k + '_share']:.0f}% | "
              f"{split['full_' + k + '_s']:.3f} | {100 * split['full_' + k + '_share']:.0f}% |"
              for k in ("forward", "backward", "optimizer")]
    lines += [f"| total | {split['total_s']:.3f} | 100% | {split['full_total_s']:.3f} | 100% |",
              f"shared scoring speedup of the whole step: {split['full_total_s'] / split['total_s']:.2f}x"]
    text = "\n".join(lines)
    print(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128, 256, 512])
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print_report(generation_throughput(args.batch_sizes), step_time_split())
    return 0


if __name__ == "__main__":
    sys.exit(main())
