"""Predict async TB/TBA's updates and samples per minute on a machine from its 1-searcher runs.

    python bench/predict_scaling.py [--measurements DIR] [--calibration FILE.json]
                                    [--out docs/results/scaling_prediction.md]
    python bench/predict_scaling.py --measure FILE.json [--device cpu|cuda] [--threads 1 2]

Default mode (no ``--measure``): :func:`tba_lab.lab.predict.predict_scaling` calibrates the
event simulator (:func:`tba_lab.lab.simulate.simulate`) from the 1-searcher runs of the
2026-12-04 measurements (one NVIDIA H200 and 16 CPU cores: ``cpu_async_tb_n1`` for the CPU
legs, ``gpu_sync_tb`` for the GPU legs), checks it against the runs with more searchers (the
validation table: prediction, measurement, error), and predicts the kit's NEW defaults on that
machine (``async.reference_pass: auto``, automatic thread counts, as
:func:`tba_lab.actors.placement.plan` resolves them). The numbers it needs are embedded
(:data:`tba_lab.lab.predict.CALIBRATION_2026_12_04`, and the validation targets
:data:`tba_lab.lab.predict.MEASURED_2026_12_04`, read from :mod:`tba_lab.lab.recorded`);
``--measurements DIR`` re-reads the 1-searcher timings from a measurements folder instead
(``DIR/runs/<leg>/``, via :func:`tba_lab.lab.simulate.run_timings`), and its multi-searcher
runs for the validation.
``--calibration FILE`` takes the thread-scaling and device-sharing parameters from a
``--measure`` JSON (else the embedded ones). It prints both tables and writes them, with the
date, the machine and the command, to ``--out``.

``--measure FILE.json``: the micro-benchmarks that give the simulator's parameters the run
logs lack (one process, or a few at once; no training run):

* thread scaling: seconds of one generation batch (B x K = 16 x 8 rows, T = 0.6, up to 40 new
  tokens, rewards included), one TB update (loss, backward, clip, AdamW) and one reference
  pass (128, 64 and 32 rows) of the embedded model at each ``--threads`` count, on ``--device``;
* device sharing (``--contention``): several processes at once, one doing TB updates and the
  others generating, all on ``--device`` with 1 torch thread each; the median job time of each
  process in each phase (which processes are busy) gives the slowdown per extra busy process.

Medians of repeated jobs after a warm-up; the first and the last job of each contention phase
are dropped (they overlap the phase's start and end).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

B, K, MAX_NEW_TOKENS, TEMPERATURE = 16, 8, 40, 0.6


# ----------------------------------------------------------------------------------------------
# Micro-benchmarks (--measure)
# ----------------------------------------------------------------------------------------------


class _Kit:
    """The embedded model's three jobs on one device: generate a batch, update on a batch,
    score a batch under the reference policy."""

    def __init__(self, device: str, algo: str = "tb"):
        import torch

        from tba_lab.algorithms import make_algorithm
        from tba_lab.config import from_dict
        from tba_lab.models import DEFAULT_MODEL_DIR, load_policy
        from tba_lab.rollout import TransformersBackend, rollout
        from tba_lab.tasks.arithmetic import ArithmeticTask

        self.torch, self.device = torch, torch.device(device)
        torch.manual_seed(0)
        self.model, self.tok = load_policy(DEFAULT_MODEL_DIR)
        self.model.to(self.device).eval()
        self.reference = load_policy(DEFAULT_MODEL_DIR)[0].to(self.device).eval()
        cfg = from_dict({"algo": algo,
                         "training": {"num_prompts_per_step": B, "num_generations": K}})
        self.task, self.algorithm = ArithmeticTask(cfg), make_algorithm(cfg)
        with torch.no_grad():
            for group in self.algorithm.parameters():
                for p in group["params"]:
                    p.data = p.data.to(self.device)
        self.backend = TransformersBackend(self.model, self.tok)
        self.problems = self.task.load("train")
        self.pos = 0
        self.rollout = rollout
        self.batch = self._rollout(reference=self.reference)
        self.optimizer = torch.optim.AdamW(
            [{"params": list(self.model.parameters())}, *self.algorithm.parameters()], lr=1e-6)

    def _rollout(self, reference=None):
        problems = [self.problems[(self.pos + i) % len(self.problems)] for i in range(B)]
        self.pos += B
        return self.rollout(self.backend, self.task, problems, K, TEMPERATURE, MAX_NEW_TOKENS,
                            reference=reference).rollouts

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def generate(self) -> float:
        t0 = time.perf_counter()
        self.model.eval()
        self._rollout()
        self._sync()
        return time.perf_counter() - t0

    def update(self) -> float:
        from tba_lab.algorithms import compute_loss

        t0 = time.perf_counter()
        self.model.eval()  # as the trainer's update (no dropout)
        loss, _ = compute_loss(self.algorithm, self.model, self.batch, self.tok.pad_token_id, 0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self._sync()
        return time.perf_counter() - t0

    def reference_pass(self, rows: int = B * K) -> float:
        from tba_lab.rollout.collect import reference_logprobs

        part = self.batch[:rows]
        t0 = time.perf_counter()
        reference_logprobs(self.reference, [r.prompt_ids for r in part],
                           [r.response_ids for r in part], self.tok.pad_token_id, TEMPERATURE)
        self._sync()
        return time.perf_counter() - t0

    def job(self, role: str) -> float:
        return self.update() if role == "update" else self.generate()


def measure_threads(device: str, threads: list[int], repeats: int = 3) -> dict:
    """Median seconds of each job at each torch thread count, one process. The thread counts
    take turns job by job (``repeats`` rounds after a warm-up round), so a load that comes and
    goes on a shared machine weighs on all of them alike.

    Returns:
        {"device", "threads": {t: {"generate", "update", "reference_128", "reference_64",
        "reference_32"}}, "fastest": the same with the fastest of the repeats} (seconds;
        on a machine others share, the fastest is the better estimate of an idle machine).
    """
    import torch

    kit = _Kit(device)
    jobs = {"generate": kit.generate, "update": kit.update,
            **{f"reference_{n}": (lambda n=n: kit.reference_pass(n)) for n in (128, 64, 32)}}
    times: dict = {t: {name: [] for name in jobs} for t in threads}
    for round_ in range(repeats + 1):
        for name, job in jobs.items():
            for t in threads:
                torch.set_num_threads(t)
                seconds = job()
                if round_:  # round 0 warms up
                    times[t][name].append(seconds)
    out = {t: {name: round(statistics.median(v), 4) for name, v in row.items()}
           for t, row in times.items()}
    fastest = {t: {name: round(min(v), 4) for name, v in row.items()} for t, row in times.items()}
    for t, row in out.items():
        print(f"  {device} {t:>2} threads: median {row}; fastest {fastest[t]}", flush=True)
    return {"device": device, "threads": out, "fastest": fastest}


def _contention_worker(rank, role, device, phases, barrier, window, out_q):
    import torch

    torch.set_num_threads(1)
    kit = _Kit(device)
    for _ in range(2):
        kit.job(role)  # warm-up
    results = []
    for active in phases:
        barrier.wait()
        t0 = time.perf_counter()
        times = []
        if rank in active:
            while time.perf_counter() - t0 < window:
                times.append(kit.job(role))
        results.append(times)
    barrier.wait()
    out_q.put((rank, role, results))


def measure_contention(device: str, generators: int, phases: list[list[int]],
                       window: float = 4.0) -> dict:
    """Processes at once on ``device``, 1 torch thread each: rank 0 runs TB updates, ranks
    1..``generators`` generate batches. In each phase only the ranks listed work, for
    ``window`` seconds; the others wait at a barrier.

    Returns:
        {"device", "phases": [{"active": [...], "busy": k, "update": median s or None,
        "generate": median s over the generating ranks or None}]}.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    n = generators + 1
    barrier, out_q = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_contention_worker,
                         args=(r, "update" if r == 0 else "generate", device, phases, barrier,
                               window, out_q)) for r in range(n)]
    for p in procs:
        p.start()
    got = [out_q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    rows = []
    for i, active in enumerate(phases):
        per_role = {"update": [], "generate": []}
        for rank, role, results in got:
            kept = results[i][1:-1] if len(results[i]) > 2 else results[i]
            per_role[role] += kept
        rows.append({"active": active, "busy": len(active),
                     **{role: (round(statistics.median(v), 4) if v else None)
                        for role, v in per_role.items()}})
        print(f"  {device} phase {active}: {rows[-1]}", flush=True)
    return {"device": device, "phases": rows}


def measure(path: Path, devices: list[str], threads: list[int], contention: bool,
            repeats: int = 3) -> dict:
    """Run the micro-benchmarks and write them as JSON to ``path``."""
    import torch

    result = {"date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "cores": os.cpu_count(), "gpu": (torch.cuda.get_device_name(0)
                                               if torch.cuda.is_available() else None),
              "threads": {}, "contention": {}}
    for device in devices:
        t0 = time.time()
        result["threads"][device] = measure_threads(device, threads if device == "cpu" else [1],
                                                    repeats)
        print(f"threads on {device}: {time.time() - t0:.0f} s", flush=True)
        if contention:
            t0 = time.time()
            if device == "cpu":
                from tba_lab.actors.placement import available_cores

                gens = min(8, max(1, available_cores() - 1))  # one core left for the trainer
                phases = [[1], [0], [0, 1], list(range(min(5, gens + 1))), list(range(gens + 1))]
            else:
                gens = 6
                phases = [[1], [0], [0, 1], [1, 2], [0, 1, 2, 3], list(range(1, 7)), list(range(7))]
            result["contention"][device] = measure_contention(device, gens, phases)
            print(f"contention on {device}: {time.time() - t0:.0f} s", flush=True)
        path.write_text(json.dumps(result, indent=1))
    return result


# ----------------------------------------------------------------------------------------------
# Prediction (default mode)
# ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--measurements", type=Path, default=None,
                   help="a measurements folder with runs/<leg>/ (default: the embedded constants "
                        "of the 2026-12-04 H200 + 16-core measurements)")
    p.add_argument("--calibration", type=Path, default=None,
                   help="a --measure JSON for thread scaling and device sharing "
                        "(default: the embedded values)")
    p.add_argument("--out", type=Path, default=None,
                   help="markdown file to write (default: print only)")
    p.add_argument("--seed", type=int, default=0, help="first simulator seed (default 0)")
    p.add_argument("--no-sensitivity", action="store_true",
                   help="skip the sensitivity tables (GPU slowdown, thread scaling)")
    p.add_argument("--measure", type=Path, default=None,
                   help="run the micro-benchmarks instead and write their JSON here")
    p.add_argument("--device", nargs="+", default=["cpu"], help="--measure: devices (cpu, cuda)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="--measure: torch thread counts for the CPU scaling (default 1 2)")
    p.add_argument("--repeats", type=int, default=3,
                   help="--measure: rounds of each job per thread count (default 3)")
    p.add_argument("--contention", action="store_true",
                   help="--measure: also run several processes at once on each device")
    args = p.parse_args(argv)
    if args.measure:
        measure(args.measure, args.device, args.threads, args.contention, args.repeats)
        return 0
    from tba_lab.lab.predict import prediction_report, predict_scaling

    result = predict_scaling(measurements=args.measurements, calibration=args.calibration,
                             seed=args.seed, sensitivity=not args.no_sensitivity)
    args_given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python bench/predict_scaling.py", *map(shlex.quote, args_given)])
    text = prediction_report(result, command=command.strip(),
                             host=f"{platform.node()}, {os.cpu_count()} cores")
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
