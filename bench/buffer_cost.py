"""Cost of ReplayBuffer.add and sample, a script because it times two git checkouts, not a run.

This checkout's and, side by side, another commit's (a git worktree, made and removed here).

Each checkout fills a buffer (capacity 64 per prompt, m = 0.5, inv_temp 1) with 50 batches of
64 rollouts (8 prompts x 8, 16 prompt and 64 response tokens), then draws ``sample(8, 8)``;
times are the median of 7 repeats, in microseconds per call, of ``add`` (which copies the
caller's rollouts), ``add(copy=False)`` (the trainer's hand-over) and ``sample``.

    python bench/buffer_cost.py [--other COMMIT]      (about 20 s on 2 cores; docs/log.md)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMER = r'''
import inspect, random, statistics, sys, timeit
sys.path.insert(0, sys.argv[1])
from tba_lab.buffer import ReplayBuffer, Rollout
rng = random.Random(0)
batches = [[Rollout(prompt_id=p, prompt_ids=list(range(16)),
                    response_ids=[rng.randrange(100) for _ in range(64)],
                    reward=float(rng.random() < 0.5), ref_token_logps=[-1.0] * 64,
                    behaviour_token_logps=[-1.0] * 64, version=v)
            for p in range(8) for _ in range(8)] for v in range(50)]
def fill(**kw):
    b = ReplayBuffer(capacity_per_prompt=64, recency_prob=0.5, inv_temp=1.0, seed=0)
    for rows in batches:
        b.add(rows, **kw)
    return b
med = lambda f, n: statistics.median(timeit.repeat(f, number=n, repeat=7)) / n * 1e6
add = med(fill, 1) / len(batches)
hand_over = "copy" in inspect.signature(ReplayBuffer.add).parameters
add_over = med(lambda: fill(copy=False), 1) / len(batches) if hand_over else add
b = fill()
sample = med(lambda: b.sample(8, 8), 200)
print(f"add {add:.0f} us (copy=False: {add_over:.0f} us), sample(8, 8) {sample:.0f} us")
'''


def measure(root: Path) -> str:
    done = subprocess.run([sys.executable, "-c", TIMER, str(root)], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", help="a commit to time beside this checkout")
    args = ap.parse_args()
    if args.other is None:
        print(f"this: {measure(ROOT)}")
        return
    with tempfile.TemporaryDirectory(prefix="tba-lab-buffer-cost-") as tmp:
        tree = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree),
                        args.other], check=True)
        try:
            for _ in range(2):  # alternate, so a slower minute of the machine hits both
                print(f"{args.other}: {measure(tree)}")
                print(f"this: {measure(ROOT)}")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False)


if __name__ == "__main__":
    main()
