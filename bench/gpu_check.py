"""GPU check, a script because only a GPU machine runs it: weight channel, log-probs, async run.

The CUDA weight channel, sync latency, log-prob agreement and a short async TBA run with the
trainer and searchers on one GPU, through ``bash bench/gpu_check.sh [OUT_DIR]`` (at most 5
minutes, torch and transformers only); without CUDA a CPU dry run of the same code (a test).

Parts (each in its own try/except, so one failure still leaves the others' results):

a. ``ipc_round_trip``: the policy through :class:`tba_lab.actors.weights.FlatWeights` to two
   spawned searcher-like children (each narrowing ``CUDA_VISIBLE_DEVICES`` to the trainer's GPU
   first), 100 versions of random values checked exactly by both; GPU memory flat.
b. ``sync_latency``: a Qwen2-0.5B-shaped bf16 model published by the parent and pulled by a child
   whose own copy is bound to the channel (the pull is one device copy), 50 timed syncs (goal:
   publish + pull under 2 ms).
c. ``logprob_agreement``: a child samples from the published policy; the trainer scores the same
   responses with ``response_logprobs``; max absolute difference per token (float32).
d. ``async_run``: ``tba_lab.trainer.train`` for 2 minutes with 3 searchers, all on ``cuda:0``;
   :func:`_common.leg_metrics`'s rates, staleness and trainer busy fraction (goal >= 0.9).

The dry run: a small Qwen2 shape, 2 searchers, 6 updates of B = K = 4 (a minute on 2 cores).
Writes ``gpu_check.json`` and ``gpu_check.md`` (rewritten after every part).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]  # the kit (nothing installed), bench/_common.py

PARTS = ("ipc_round_trip", "sync_latency", "logprob_agreement", "async_run")
QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                tie_word_embeddings=True)
QWEN_DRY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True)


def expected(named, seed: int) -> list[torch.Tensor]:
    """The values for parameters of these names, shapes and dtypes, drawn on the CPU from
    ``seed`` (reproducible anywhere): what :func:`fill` with ``seed`` puts in."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=g).to(t.dtype) for _, t in named]


def fill(model: torch.nn.Module, seed: int) -> None:
    """New values for every parameter of ``model``: :func:`expected`'s for ``seed``."""
    with torch.no_grad():
        for p, value in zip(model.parameters(), expected(model.named_parameters(), seed)):
            p.copy_(value)


def qwen(shape: dict, dtype: str, device: str):
    """A ``Qwen2ForCausalLM`` of ``shape`` (``Qwen2Config`` fields) with random weights, its
    parameters of ``dtype`` (a torch dtype's name), built on ``device``, in eval mode."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    old = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # built in dtype: no float32 copy on the GPU
    try:
        with torch.device(device):
            return Qwen2ForCausalLM(Qwen2Config(**shape)).eval()
    finally:
        torch.set_default_dtype(old)


def _mem() -> int | None:
    return torch.cuda.memory_allocated() if torch.cuda.is_initialized() else None


def _free() -> int | None:
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_initialized() else None


# ----------------------------------------------------------------------------- the child
def child(rank: int, channels: dict, visible: str | None, model_path: str, commands, results):
    """A searcher-like process: sets its visible devices first (before any CUDA call), then
    answers the parent's commands until ``("stop",)``; ends at once if the parent dies."""
    from tba_lab.actors.lifetime import exit_with_parent

    exit_with_parent()  # SIGTERM (no handler: the end) when the parent ends, however it ends
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    torch.set_num_threads(1)
    device = "cuda:0" if visible is not None else "cpu"
    have = {name: -1 for name in channels}
    backend, bound = None, {}
    while True:
        cmd = commands.get(timeout=300)
        try:
            if cmd[0] == "stop":
                break
            if cmd[0] == "check":  # pull version cmd[2] of channel cmd[1]; compare with fill(seed)
                _, name, version, seed = cmd
                have[name], new = channels[name].pull(have[name])
                exact = new is not None and all(
                    torch.equal(t.cpu(), e) for (_, t), e in zip(new, expected(new, seed)))
                results.put(("check", rank, have[name], exact, _mem(),
                             str(new[0][1].device) if new else None))
            elif cmd[0] == "bind":  # a model of this shape on this device, bound to the channel
                _, name, shape, dtype = cmd
                bound[name] = qwen(shape, dtype, device)
                channels[name].bind(bound[name])
                have[name] = -1  # the model holds its own values until the next pull
                results.put(("bind", rank, sum(p.numel() for p in bound[name].parameters())))
            elif cmd[0] == "timed_pull":
                _, name = cmd
                t0 = time.perf_counter()
                have[name], new = channels[name].pull(have[name])
                results.put(("timed_pull", rank, have[name], time.perf_counter() - t0))
                del new
            elif cmd[0] == "sample":  # pull the policy into a backend, sample K per prompt
                _, prompts, k, temperature, max_new = cmd
                from tba_lab.models import load_policy
                from tba_lab.rollout.backend import TransformersBackend

                if backend is None:  # as a searcher: the backend's policy bound to the channel
                    policy, tokenizer = load_policy(model_path)
                    backend = TransformersBackend(policy.to(device).eval(), tokenizer)
                    channels["tiny"].bind(policy)
                    have["tiny"] = -1
                have["tiny"], new = channels["tiny"].pull(have["tiny"])  # the pull is the load
                torch.manual_seed(rank)
                gen = backend.generate(prompts, k, temperature=temperature, max_new_tokens=max_new)
                results.put(("sample", rank, have["tiny"], gen.responses, gen.token_logps))
        except Exception:
            results.put(("error", rank, traceback.format_exc()))
    for ch in channels.values():
        ch.close()


class Children:
    """Two spawned children holding the channels (exported once, at spawn)."""

    def __init__(self, channels: dict, visible: str | None, model_path: str, n: int = 2):
        ctx = mp.get_context("spawn")
        self.commands = [ctx.Queue() for _ in range(n)]
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=child, daemon=True,
                                  args=(i, channels, visible, model_path, self.commands[i],
                                        self.results)) for i in range(n)]
        for p in self.procs:
            p.start()

    def ask(self, cmd, ranks, timeout: float) -> list:
        """Send ``cmd`` to the children ``ranks``; their replies, by rank. RuntimeError if a
        child replied with an error, died (checked every second: a crash opening the IPC handle
        costs a second, not ``timeout``) or ``timeout`` seconds passed without every reply."""
        import queue

        dead = [r for r in ranks if not self.procs[r].is_alive()]
        if dead:
            raise RuntimeError(f"child {dead[0]} is not running (exit code "
                               f"{self.procs[dead[0]].exitcode})")
        for r in ranks:
            self.commands[r].put(cmd)
        out, deadline = [], time.monotonic() + timeout
        while len(out) < len(ranks):
            try:
                out.append(self.results.get(timeout=1.0))
            except queue.Empty:
                waiting = set(ranks) - {o[1] for o in out}
                dead = [r for r in sorted(waiting) if not self.procs[r].is_alive()]
                if dead:
                    raise RuntimeError(f"child {dead[0]} died during {cmd[0]!r} (exit code "
                                       f"{self.procs[dead[0]].exitcode})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no reply to {cmd[0]!r} from children {sorted(waiting)} "
                                       f"in {timeout:.0f} s") from None
        errors = [o[2] for o in out if o[0] == "error"]
        if errors:
            raise RuntimeError("a child failed:\n" + errors[0])
        return sorted(out, key=lambda o: o[1])

    def stop(self) -> None:
        for q in self.commands:
            q.put(("stop",))
        for p in self.procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()


def _stats(seconds: list[float]) -> dict:
    ms = sorted(1e3 * s for s in seconds)
    return {"median": round(statistics.median(ms), 4),
            "p90": round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 4),
            "min": round(ms[0], 4), "n": len(ms)}


# ----------------------------------------------------------------------------- the parts
def part_round_trip(ctx: dict, syncs: int = 100) -> dict:
    tiny, kids, policy, t = (ctx[k] for k in ("tiny", "children", "policy", "timeout"))
    exact, agree, mem, devices = True, True, [], set()  # mem: (parent, child, device free) bytes
    for v in range(1, syncs + 1):
        fill(policy, v)
        tiny.publish(policy, v)
        got = kids.ask(("check", "tiny", v, v), [0, 1], t)
        exact &= all(g[2] == v and g[3] for g in got)
        agree &= got[0][2:4] == got[1][2:4]
        mem.append((_mem(), got[0][4], _free()))
        devices.add(got[0][5])
    (parent_1, child_1, free_1), (parent_n, child_n, free_n) = mem[0], mem[-1]
    memory = {"parent_allocated_after_sync_1": parent_1, "parent_allocated_after_last": parent_n,
              "child_allocated_after_sync_1": child_1, "child_allocated_after_last": child_n,
              "device_free_after_sync_1": free_1, "device_free_after_last": free_n}
    flat = (parent_1 == parent_n and child_1 == child_n
            and (free_1 is None or abs(free_1 - free_n) <= 2 ** 21))
    return {"ok": exact and agree and flat, "syncs": syncs, "exact": exact,
            "two_pullers_agree": agree, "memory_flat": flat, "memory_bytes": memory,
            "child_devices": sorted(d for d in devices if d), "bytes": tiny.layout.nbytes,
            "parameters": len(tiny.layout.entries)}


def part_latency(ctx: dict, syncs: int = 50, warmup: int = 5) -> dict:
    big, model, kids, t = ctx["big"], ctx["big_model"], ctx["children"], ctx["timeout"]
    kids.ask(("bind", "big", ctx["big_shape"], "bfloat16"), [0], t)
    publish, pull = [], []
    for v in range(1, warmup + syncs + 1):
        t0 = time.perf_counter()
        big.publish(model, v)
        p = time.perf_counter() - t0
        [(_, _, version, q)] = kids.ask(("timed_pull", "big"), [0], t)
        assert version == v, (version, v)
        if v > warmup:
            publish.append(p)
            pull.append(q)
    total = _stats([p + q for p, q in zip(publish, pull)])
    return {"ok": True, "model": ctx["big_name"], "dtype": str(model.dtype),
            "parameters": sum(p.numel() for p in model.parameters()), "bytes": big.layout.nbytes,
            "publish_ms": _stats(publish), "pull_ms": _stats(pull),
            "publish_pull_ms": total, "pull_path": "bound: one copy into the model",
            "goal_ms": 2.0, "meets_goal": total["median"] < 2.0}


def part_logprobs(ctx: dict) -> dict:
    from tba_lab.rollout.scoring import response_logprobs
    from tba_lab.tasks.arithmetic import ArithmeticTask

    tiny, kids, policy, tok = ctx["tiny"], ctx["children"], ctx["policy"], ctx["tokenizer"]
    with torch.no_grad():  # the real weights, one "update" away from the checkpoint
        policy.load_state_dict(ctx["state"])
        g = torch.Generator().manual_seed(7)
        for p in policy.parameters():
            p.add_((0.01 * torch.randn(p.shape, generator=g)).to(p.device, p.dtype))
    tiny.publish(policy, 1000)
    task = ArithmeticTask()
    problems = task.load("train")[:8]
    prompts = tok([task.format_prompt(p) for p in problems])["input_ids"]
    k, temperature = 4, 0.6
    [(_, _, version, responses, behaviour)] = kids.ask(
        ("sample", prompts, k, temperature, 40), [0], ctx["timeout"])
    keep = [j for j, r in enumerate(responses) if r]
    with torch.no_grad():
        logps, _ = response_logprobs(policy, [prompts[j // k] for j in keep],
                                     [responses[j] for j in keep], tok.pad_token_id, temperature)
    logps = logps.cpu()
    diffs = [abs(logps[n, i].item() - behaviour[j][i])
             for n, j in enumerate(keep) for i in range(len(responses[j]))]
    max_diff = max(diffs)
    return {"ok": version == 1000 and max_diff < 1e-3, "version_pulled": version,
            "tokens": len(diffs), "responses": len(keep), "dtype": str(policy.dtype),
            "temperature": temperature, "max_abs_diff": max_diff,
            "mean_abs_diff": sum(diffs) / len(diffs)}


def part_async_run(out: Path, device: str, seconds: float, searchers: int, dry: bool) -> dict:
    from _common import keep_logs, leg_metrics  # here: the children import no more than they use
    from tba_lab.config import short_run
    from tba_lab.trainer import train

    run_dir = Path(tempfile.mkdtemp(prefix="gpu_check_async_run_"))  # only its logs to out/
    kept = out / "async_run"
    # dry run: bounded by updates (searchers start slowly on a busy machine), seconds a ceiling
    small = {"training": {"num_prompts_per_step": 4, "num_generations": 4, "max_steps": 6},
             "model": {"max_new_tokens": 24}} if dry else {}
    cfg = short_run(run_dir, seconds, eval_size=20 if dry else 100, interim_eval_size=10,
                    eval_every_seconds=0, overrides={
                        **small,
                        "async": {"num_searchers": searchers, "trainer_device": device,
                                  "searcher_devices": [device], "sync_period": 1}})
    try:
        summary = train(cfg, progress=False)
    finally:
        keep_logs(run_dir, kept, ("summary.json", "metrics.jsonl", "searchers.jsonl"))
    m = leg_metrics(kept)
    return {"ok": summary["trainer_steps"] > 0 and not summary["searcher_failures"],
            "seconds": summary["wall_seconds"], "searchers": searchers, "trainer_device": device,
            "trainer_busy_fraction": m["trainer_busy"], "busy_goal": 0.9,
            **{k: m[k] for k in ("updates", "updates_per_minute", "samples_per_minute",
                                 "staleness_mean", "staleness_max", "accuracy_before",
                                 "accuracy_after", "searcher_failures")},
            "run_dir": str(kept)}


# ------------------------------------------------------------------------------ reporting
def write_report(out: Path, report: dict) -> None:
    """``gpu_check.json`` (everything) and ``gpu_check.md`` (a line per part, the errors)."""
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    a, b, c, d = (report.get(p, {}) for p in PARTS)
    rows = []
    if "syncs" in a:
        rows.append(("a. IPC round trip", a, f"{a['syncs']} syncs, exact: {a['exact']}, two pullers "
                     f"agree: {a['two_pullers_agree']}, memory flat: {a['memory_flat']}"))
    if "publish_pull_ms" in b:
        ms = b["publish_pull_ms"]
        rows.append(("b. sync latency", b, f"{b['model']} ({b['parameters'] / 1e6:.1f}M params, "
                     f"{b['dtype']}): publish+pull median {ms['median']:.3f} ms, p90 {ms['p90']:.3f}"
                     f" ms (publish {b['publish_ms']['median']:.3f}, pull {b['pull_ms']['median']:.3f}"
                     f" bound; goal < 2 ms: {b['meets_goal']})"))
    if "max_abs_diff" in c:
        rows.append(("c. log-prob agreement", c, f"{c['tokens']} tokens, {c['dtype']}: max abs diff "
                     f"{c['max_abs_diff']:.2e}, mean {c['mean_abs_diff']:.2e}"))
    if "updates_per_minute" in d:
        rows.append(("d. async run", d, f"{d['searchers']} searchers, {d['seconds']} s: "
                     f"{d['updates_per_minute']} updates/min, {d['samples_per_minute']} samples/min, "
                     f"trainer busy {d['trainer_busy_fraction']} (goal >= 0.9), staleness mean "
                     f"{d['staleness_mean']} max {d['staleness_max']}, accuracy "
                     f"{d['accuracy_before']} -> {d['accuracy_after']}"))
    lines = [f"# GPU check ({'CPU dry run' if report['dry_run'] else report.get('gpu', 'GPU')})", "",
             f"torch {report['torch']}, transformers {report['transformers']}, device "
             f"{report['device']}, {report.get('total_seconds', '?')} s in all.", "",
             "| part | ok | result |", "|---|---|---|"] + [
        f"| {name} | {part['ok']} | {text} |" for name, part, text in rows]
    for name in PARTS:
        if report.get(name, {}).get("error"):
            lines += ["", f"{name} failed:", "```", report[name]["error"][-2000:], "```"]
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "runs/gpu_check"))
    ap.add_argument("--cpu-dry-run", action="store_true")
    ap.add_argument("--budget", type=float, default=285.0, help="seconds for everything")
    ap.add_argument("--run-seconds", type=float, default=None)
    args = ap.parse_args(argv)
    t_start = time.time()
    dry = (args.cpu_dry_run or os.environ.get("GPU_CHECK_CPU_DRY_RUN") == "1"
           or not torch.cuda.is_available())
    device = "cpu" if dry else "cuda:0"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from _common import environment

    report = {"device": device, "dry_run": dry, **environment(gpu=not dry)}
    if not dry:
        report["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1)
    torch.set_num_threads(1 if dry else min(8, report["cores_usable"]))  # a CPU quota included
    ctx: dict = {"timeout": 120.0}
    kids = None

    def run(name, fn, *a):
        t0 = time.time()
        try:
            report[name] = fn(*a)
        except Exception:
            report[name] = {"ok": False, "error": traceback.format_exc()}
        report[name]["seconds_taken"] = round(time.time() - t0, 1)
        write_report(out, report)

    try:
        from tba_lab.actors.weights import FlatWeights, device_uuid
        from tba_lab.models import DEFAULT_MODEL_DIR, load_policy

        policy, tokenizer = load_policy(DEFAULT_MODEL_DIR)
        ctx["state"] = {k: v.clone() for k, v in policy.state_dict().items()}
        policy.to(device).eval()
        ctx.update(policy=policy, tokenizer=tokenizer)
        shape = QWEN_DRY if dry else QWEN_05B
        big = qwen(shape, "bfloat16", device)
        ctx.update(big_model=big, big_shape=shape,
                   big_name="qwen2-tiny-shaped (dry run)" if dry else "qwen2-0.5b-shaped")
        ctx["tiny"] = FlatWeights(policy, mp.get_context("spawn"), device=device)
        ctx["big"] = FlatWeights(big, mp.get_context("spawn"), device=device)
        # as LocalLauncher does (tba_lab.actors.local.visible_devices_for): the trainer's own
        # name for its GPU; the child then finds the weight buffer by UUID
        visible = None if dry else os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        report["child_visible_devices"] = visible
        if not dry:
            report["gpu_uuid"] = device_uuid(0)
        kids = Children({"tiny": ctx["tiny"], "big": ctx["big"]}, visible, str(DEFAULT_MODEL_DIR))
        ctx["children"] = kids
        report["setup_seconds"] = round(time.time() - t_start, 1)
    except Exception:
        report["setup_error"] = traceback.format_exc()
    if "setup_error" not in report:
        run("ipc_round_trip", part_round_trip, ctx)
        run("sync_latency", part_latency, ctx)
        run("logprob_agreement", part_logprobs, ctx)
    if kids is not None:
        kids.stop()
    for name in ("tiny", "big"):
        if name in ctx:
            ctx[name].close()
    ctx.clear()
    left = args.budget - (time.time() - t_start)
    seconds = args.run_seconds or (90.0 if dry else min(120.0, max(10.0, left - 75.0)))
    run("async_run", part_async_run, out, device, seconds, 2 if dry else 3, dry)
    report["total_seconds"] = round(time.time() - t_start, 1)
    write_report(out, report)
    print((out / "gpu_check.md").read_text())
    return 0 if all(report.get(p, {}).get("ok") for p in PARTS) else 1


if __name__ == "__main__":
    sys.exit(main())
