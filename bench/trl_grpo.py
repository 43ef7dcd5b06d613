"""TRL's GRPOTrainer on the kit's task, a script because TRL is no kit dependency: the race's leg e.

``tba-lab experiment race`` loads this file for leg (e) only; TRL comes with the ``dev`` extra.
Under a wall-clock budget it reports what ``tba-lab train`` reports (updates and samples per
minute, greedy held-out accuracy over time) on the committed tiny model, reward
``exact_match_reward``. TRL's options match the kit's sync GRPO: one optimizer step per generation batch of B*K completions
(on-policy: the ratio is 1), ``loss_type="grpo"``, ``scale_rewards="group"``, ``beta=0``,
``max_grad_norm=1``, AdamW without weight decay, plain sampling at ``temperature``, on the CPU;
the learning rate decays linearly to 0 over the wall-clock budget (a callback sets it before
every optimizer step, as ``lr_schedule: linear``). The clock starts at the first step; interim
evaluations run on it, or with ``--defer-eval`` on weight copies evaluated after the budget.

    python bench/trl_grpo.py --minutes 3 --out runs/trl_grpo [--defer-eval]
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


def run_trl_grpo(out_dir, minutes, seed=0, num_prompts_per_step=16, num_generations=8,
                 learning_rate=5e-5, temperature=0.6, max_new_tokens=40, eval_size=200,
                 eval_at_seconds=(60, 120, 180), threads=2, defer_eval=False) -> dict:
    """Train the tiny model with ``trl.GRPOTrainer`` for ``minutes`` of wall clock.

    Returns (and writes to ``out_dir/summary.json``) ``updates``, ``samples_generated``
    (updates * B * K), ``wall_seconds`` (interim evaluations included), ``updates_per_minute``,
    ``samples_per_minute``, ``evals`` (``{"wall_seconds", "step", "accuracy"}`` at 0 s, at each
    ``eval_at_seconds`` reached inside the budget, and at the end), ``accuracy_before``,
    ``accuracy_after``, ``train_reward`` (TRL's mean reward per generation batch), ``config``.
    ``defer_eval``: copy the weights at each checkpoint and evaluate the copies after the budget,
    as ``task.defer_interim_eval`` does. ValueError unless ``minutes`` > 0.
    """
    settings = {k: v for k, v in locals().items() if k != "out_dir"}  # the arguments
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from tba_lab.models import DEFAULT_MODEL_DIR, DEFAULT_TASK_DIR, load_policy
    from tba_lab.tasks.arithmetic import greedy_accuracy
    from tba_lab.tasks import format_prompt
    from tba_lab.tasks.gsm8k import exact_match_reward, gold_answer, read_jsonl
    from tba_lab.trainer import cpu_state_copy, evaluate_weight_copies

    if minutes <= 0:
        raise ValueError(f"minutes must be > 0, got {minutes!r}")
    torch.set_num_threads(threads)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = 60.0 * minutes
    batch = num_prompts_per_step * num_generations

    model, tokenizer = load_policy(DEFAULT_MODEL_DIR)
    train_rows = read_jsonl(DEFAULT_TASK_DIR / "train.jsonl")
    eval_rows = read_jsonl(DEFAULT_TASK_DIR / "test.jsonl")[:eval_size]
    dataset = Dataset.from_dict({
        "prompt": [format_prompt(r["question"]) for r in train_rows],
        "gold": [gold_answer(r["answer"]) for r in train_rows],
    })

    def exact_match(completions, gold, **_):  # TRL passes extra dataset columns by name
        return [exact_match_reward(c, g) for c, g in zip(completions, gold)]

    args = GRPOConfig(
        output_dir=str(out_dir), seed=seed, max_steps=10**7,  # the callback stops training
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=num_generations, num_iterations=1,
        learning_rate=learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        optim="adamw_torch", weight_decay=0.0, max_grad_norm=1.0,
        loss_type="grpo", scale_rewards="group", epsilon=0.2, beta=0.0,
        temperature=temperature, top_k=0, top_p=1.0, max_completion_length=max_new_tokens,
        use_vllm=False, activation_checkpointing=False, gradient_checkpointing=False,
        bf16=False, use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=exact_match, args=args,
                          train_dataset=dataset, processing_class=tokenizer)

    def accuracy() -> float:  # greedy held-out accuracy, then back to training mode
        acc = greedy_accuracy(model.eval(), tokenizer, eval_rows, max_new_tokens)
        model.train()
        return acc

    accuracy_before = accuracy()
    evals = [{"wall_seconds": 0.0, "step": 0, "accuracy": accuracy_before}]
    train_reward = []
    snapshots = []  # (step, wall seconds, weights) with defer_eval

    class Budget(TrainerCallback):
        """Wall-clock budget, linear lr decay over it, and interim held-out evaluations."""

        def __init__(self):
            self.t0 = self.t_end = None
            self.pending = sorted(float(s) for s in eval_at_seconds if 0 < s < budget)

        def elapsed(self):
            return time.time() - self.t0

        def on_step_begin(self, args, state, control, **kw):
            if self.t0 is None:  # the clock starts at the first step (generation included)
                self.t0 = time.time()

        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
            factor = max(0.0, 1.0 - self.elapsed() / budget)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate * factor

        def on_step_end(self, args, state, control, model=None, **kw):
            rewards = trainer._metrics["train"].get("reward")  # TRL's mean reward of this batch
            if rewards:
                train_reward.append(round(rewards[-1], 4))
            if self.elapsed() >= budget:
                self.t_end = time.time()
                control.should_training_stop = True
                return control
            if self.pending and self.elapsed() >= self.pending[0]:
                while self.pending and self.elapsed() >= self.pending[0]:
                    self.pending.pop(0)  # one evaluation covers every checkpoint passed
                if defer_eval:
                    snapshots.append((state.global_step, round(self.elapsed(), 1),
                                      cpu_state_copy(model)))
                    return control
                acc = accuracy()
                evals.append({"wall_seconds": round(self.elapsed(), 1), "step": state.global_step,
                              "accuracy": acc})
                print(f"[trl_grpo] step {state.global_step} t={self.elapsed():.0f}s "
                      f"held-out accuracy {acc:.3f}", flush=True)
            return control

    clock = Budget()
    trainer.add_callback(clock)
    trainer.remove_callback(PrinterCallback)  # no per-log prints (disable_tqdm=True adds it)
    with warnings.catch_warnings():
        # TRL 1.16 calls transformers' deprecated is_gradient_checkpointing on every batch
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
        trainer.train()
    wall = 0.0 if clock.t0 is None else (clock.t_end or time.time()) - clock.t0
    updates = trainer.state.global_step
    evaluate_weight_copies(model, snapshots, lambda step, at: evals.append(
        {"wall_seconds": at, "step": step, "accuracy": accuracy()}))
    accuracy_after = accuracy()
    evals.append({"wall_seconds": round(wall, 1), "step": updates, "accuracy": accuracy_after})
    samples = updates * args.generation_batch_size
    summary = {
        "updates": updates, "samples_generated": samples, "wall_seconds": round(wall, 2),
        "updates_per_minute": round(60.0 * updates / max(wall, 1e-9), 2),
        "samples_per_minute": round(60.0 * samples / max(wall, 1e-9), 1),
        "evals": evals, "accuracy_before": accuracy_before, "accuracy_after": accuracy_after,
        "train_reward": train_reward,
        "config": {**settings, "eval_size": len(eval_rows), "eval_at_seconds": list(eval_at_seconds),
                   "generation_batch_size": args.generation_batch_size,
                   "steps_per_generation": args.steps_per_generation},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/trl_grpo", help="output folder (summary.json)")
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock training budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-size", type=int, default=200, help="held-out problems per evaluation")
    p.add_argument("--eval-at-seconds", type=float, nargs="*", action="extend",
                   help="interim evaluations (default 60 120 180; none: the flag alone)")
    p.add_argument("--defer-eval", action="store_true",
                   help="copy the weights at each checkpoint, evaluate the copies after the budget")
    a = p.parse_args(argv)
    summary = run_trl_grpo(a.out, a.minutes, seed=a.seed, eval_size=a.eval_size,
                           eval_at_seconds=(60, 120, 180) if a.eval_at_seconds is None
                           else tuple(a.eval_at_seconds), defer_eval=a.defer_eval)
    print(json.dumps({k: v for k, v in summary.items() if k != "train_reward"}, indent=2))
    return summary


if __name__ == "__main__":
    main()
