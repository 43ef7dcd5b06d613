"""Two Ray nodes on one machine, a script because each node needs its own processes and namespaces.

The Ray launcher across a network, losing a node, losing the trainer; docs/ray.md has the
recipe, what each phase checks and the results.

    python bench/ray_two_node.py [--minutes 1.5] [--kill-after 30] [--phases P ...]
                                 [--out docs/results/ray_two_node] [--work-dir runs/ray_two_node]

Two network namespaces joined by a veth pair, one Ray node in each (in its own PID namespace, so
one kill ends the whole node), Ray's token authentication on, ``tba-lab train`` in node 1 with
two searchers placed ``STRICT_SPREAD``. Phases, each on a fresh cluster: ``two_nodes``,
``node_loss`` (node 2 killed ``--kill-after`` s after the first update), ``trainer_killed``
(the driver SIGKILLed, then ``--resume``). Writes ``results.json`` and ``report.md`` to
``--out``. Needs Linux, root, ``ip``, ``unshare`` and Ray; says which is missing and exits 2.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, for _common
from _common import REPO, commit, sigterm_as_interrupt  # noqa: E402

from tba_lab.runlog import read_jsonl_rows  # noqa: E402

HEAD_IP, WORKER_IP, PORT = "10.77.0.1", "10.77.0.2", 6379
ADDRESS = f"{HEAD_IP}:{PORT}"
TRAINER_SAVE_SECONDS = 15.0  # training.save_seconds of the trainer_killed phase


# ---------------------------------------------------------------------------- the cluster

def missing_requirements() -> list[str]:
    """What this machine lacks to run the bench (empty: nothing)."""
    out = []
    if sys.platform != "linux":
        out.append("Linux (network and PID namespaces)")
    elif os.geteuid() != 0:
        out.append("root (ip netns add needs it)")
    out += [f"`{tool}` on PATH" for tool in ("ip", "unshare") if shutil.which(tool) is None]
    try:
        import ray  # noqa: F401
    except ImportError:
        out.append('Ray (pip install -e ".[ray]")')
    return out


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class TwoNodes:
    """Two network namespaces joined by a veth pair, each running one Ray node in its own PID
    namespace (its logs in ``work``). A context manager: ``__exit__`` kills both nodes and
    removes the namespaces."""

    def __init__(self, work: Path):
        tag = f"{os.getpid() % 100000}"
        self.ns = (f"tbalab{tag}a", f"tbalab{tag}b")
        self.veth = (f"tb{tag}a", f"tb{tag}b")
        self.work = work
        # Ray's temp dir holds Unix sockets, whose paths are limited to ~107 bytes: keep it short
        self.tmp = Path(tempfile.mkdtemp(prefix="tbr"))
        self.nodes: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_ADDRESS": ADDRESS}

    def __enter__(self) -> "TwoNodes":
        try:
            self._link()
            self._start("head", self.ns[0], ["--head", f"--node-ip-address={HEAD_IP}",
                                             f"--port={PORT}", "--include-dashboard=false"])
            self._start("worker", self.ns[1], [f"--address={ADDRESS}",
                                               f"--node-ip-address={WORKER_IP}"])
            self.wait_for_nodes(2)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _link(self) -> None:
        for ns in self.ns:
            _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1])
        for ns, dev, ip in zip(self.ns, self.veth, (HEAD_IP, WORKER_IP)):
            _sh("ip", "link", "set", dev, "netns", ns)
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _start(self, name: str, ns: str, args: list[str]) -> None:
        ray_cli = str(Path(sys.executable).parent / "ray")
        log = open(self.work / f"ray_{name}.log", "w")
        self.nodes[name] = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--kill-child",
             "--mount-proc", ray_cli, "start", "--block", "--num-cpus=1", "--disable-usage-stats",
             f"--temp-dir={self.tmp / name}", *args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)

    def python(self, code: str, timeout: float = 120) -> str:
        """Run ``code`` as a Ray driver in node 1's network namespace; the last line it printed."""
        code = "import ray; ray.init(address='auto', logging_level='ERROR'); " + code
        r = subprocess.run(["ip", "netns", "exec", self.ns[0], sys.executable, "-c", code],
                           capture_output=True, text=True, env=self.env, timeout=timeout, cwd=REPO)
        if r.returncode:
            raise RuntimeError(f"driver snippet failed ({r.returncode}): {r.stderr[-2000:]}")
        return r.stdout.strip().splitlines()[-1]

    def wait_for_nodes(self, n: int, timeout: float = 120) -> None:
        """Until ``n`` nodes are alive (a node process that ended is an error, with its log)."""
        code = "print(sum(x['Alive'] for x in ray.nodes()))"
        t0 = time.time()
        while time.time() - t0 < timeout:
            for name, p in self.nodes.items():
                if p.poll() is not None:
                    tail = (self.work / f"ray_{name}.log").read_text()[-2000:]
                    raise RuntimeError(f"Ray {name} node exited with {p.returncode}:\n{tail}")
            try:
                if int(self.python(code, timeout=60)) >= n:
                    return
            except (RuntimeError, ValueError, subprocess.TimeoutExpired):
                pass
            time.sleep(2)
        raise TimeoutError(f"{n} Ray nodes were not up within {timeout:g} s; "
                           f"see {self.work}/ray_*.log")

    def wait_until_free(self, timeout: float = 60.0) -> dict:
        """What the cluster still holds (CPUs in use, placement groups not removed), polled
        until all is free or ``timeout`` seconds passed; adds ``seconds`` (how long, from the
        call) and ``clean`` (all free)."""
        code = ("import json, time; time.sleep(2); "
                "tot, free = ray.cluster_resources(), ray.available_resources(); "
                "pgs = [g['state'] for g in ray.util.placement_group_table().values()]; "
                "print(json.dumps({'cpus_total': tot.get('CPU', 0), 'cpus_free': free.get('CPU', 0), "
                "'placement_groups_not_removed': sum(s != 'REMOVED' for s in pgs)}))")
        t0 = time.time()
        while True:
            lo = json.loads(self.python(code))
            clean = lo["cpus_free"] == lo["cpus_total"] and not lo["placement_groups_not_removed"]
            if clean or time.time() - t0 > timeout:
                return {**lo, "seconds": round(time.time() - t0, 1), "clean": clean}

    def kill(self, name: str) -> None:
        """SIGKILL the node's PID namespace: all its processes end at once."""
        p = self.nodes.get(name)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(30)

    def __exit__(self, *exc) -> None:
        for name in list(self.nodes):
            self.kill(name)
        for ns in self.ns:
            _sh("ip", "netns", "del", ns, check=False)  # takes its end of the veth pair along
        shutil.rmtree(self.tmp, ignore_errors=True)


def processes_left(prefix: str) -> list[str]:
    """Command lines of processes that mention ``prefix`` (a cluster's temp dir)."""
    out = []
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            cmd = f.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if prefix in cmd:
                out.append(cmd[:200])
    return out


# ---------------------------------------------------------------------------- one run

def run_config(work: Path, searcher_timeout: float = 120.0, save_seconds: float = 60.0) -> Path:
    """The YAML the driver gets: two searchers, one per node."""
    path = work / f"config_timeout{searcher_timeout:g}_save{save_seconds:g}.yaml"
    path.write_text(
        f"async: {{launcher: ray, num_searchers: 2, searcher_timeout: {searcher_timeout:g}}}\n"
        f"ray: {{address: \"{ADDRESS}\", placement_strategy: STRICT_SPREAD}}\n"
        f"training: {{save_seconds: {save_seconds:g}}}\n")
    return path


def train(cluster: TwoNodes, run_dir: Path, minutes: float, config: Path | None,
          kill_after: float | None = None, kill: str = "worker") -> dict:
    """``tba-lab train`` in node 1's namespace (``config=None``: ``--resume run_dir``); with
    ``kill_after``, ``kill`` ("worker": node 2; "trainer": the driver, SIGKILL) is killed that
    many seconds after the run's first update. Returns exit code, wall seconds and when
    (seconds after the first update) the kill came."""
    if config is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        args = ["--config", str(config), "--max-minutes", f"{minutes:g}",
                "--output-dir", str(run_dir)]
    else:
        args = ["--resume", str(run_dir)]
    cmd = ["ip", "netns", "exec", cluster.ns[0], sys.executable, "-m", "tba_lab", "train", *args,
           "--no-progress"]
    t0, killed = time.time(), None
    with open(run_dir.parent / f"{run_dir.name}{'' if config else '_resume'}.log", "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=cluster.env, cwd=REPO)
        try:
            first, metrics = None, run_dir / "metrics.jsonl"
            size_before = metrics.stat().st_size if metrics.exists() else 0  # a resume appends
            while p.poll() is None:
                if first is None and metrics.exists() and metrics.stat().st_size > size_before:
                    first = time.time()
                if kill_after is not None and killed is None and first is not None \
                        and time.time() - first >= kill_after:
                    if kill == "trainer":
                        p.kill()  # `ip netns exec` execs Python: this is the trainer itself
                    else:
                        cluster.kill("worker")
                    killed = round(time.time() - first, 1)
                time.sleep(0.5)
        except BaseException:
            p.send_signal(signal.SIGINT)  # the trainer saves and stops its searchers
            p.wait(120)
            raise
    return {"exit_code": p.returncode, "seconds": round(time.time() - t0, 1),
            f"{'node_2' if kill == 'worker' else 'trainer'}_killed_after_first_update_s": killed}


def per_node(rows: list[dict], wall_seconds: float) -> dict:
    """``searchers.jsonl`` rows summed up per ``node``: batches, samples per minute, weight
    syncs (count, median and max seconds over the batches that loaded a new version) and the
    policy lag at receipt (``trainer_step - version``; mean and max), over ``wall_seconds``."""
    out = {}
    for node in sorted({r.get("node", "") for r in rows}):
        mine = [r for r in rows if r.get("node", "") == node]
        syncs = [r["sync_seconds"] for r in mine if r.get("sync_seconds", 0) > 0]
        lag = [r["trainer_step"] - r["version"] for r in mine]
        out[node] = {
            "searchers": sorted({r["searcher_id"] for r in mine}), "batches": len(mine),
            "samples_per_minute": round(60 * sum(r["rollouts"] for r in mine) / wall_seconds, 1),
            "syncs": len(syncs),
            "sync_ms_median": round(1000 * statistics.median(syncs), 2) if syncs else None,
            "sync_ms_max": round(1000 * max(syncs), 2) if syncs else None,
            "lag_mean": round(statistics.mean(lag), 2) if lag else None,
            "lag_max": max(lag) if lag else None}
    return out


def describe(run_dir: Path) -> dict:
    """The run's summary, per-node table and which outputs exist."""
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    return {
        "summary": {k: summary.get(k) for k in (
            "trainer_steps", "updates_per_minute", "samples_generated", "staleness_mean",
            "staleness_max", "accuracy_before", "accuracy_after", "wall_seconds")},
        "per_node": per_node(read_jsonl_rows(run_dir / "searchers.jsonl"),
                             float(summary.get("wall_seconds") or 1.0)),
        "searcher_failures": summary.get("searcher_failures", []),
        "summary_resumes": summary.get("resumes"),
        "outputs": {name: (run_dir / name).exists() for name in
                    ("summary.json", "checkpoint.pt", "buffer.pt", "policy", "searchers.jsonl")}}


# ---------------------------------------------------------------------------- report

def report(res: dict) -> str:
    """report.md from results.json's content."""
    def free(lo: dict) -> str:
        return (f"{lo['cpus_free']:g} of {lo['cpus_total']:g} CPUs free, "
                f"{lo['placement_groups_not_removed']} placement group(s) not removed")

    lines = [f"# The Ray launcher on two nodes (network namespaces on one machine)", "",
             f"Started {res['started']}, commit {res['commit']}, {res['cores']} cores "
             f"(`os.cpu_count()`), Ray {res['ray']}, seed 0. Command: `{res['command']}`.", "",
             "Both nodes share this machine's cores and file system: the numbers show what "
             "crosses the network and that nothing is lost, not the speed of two machines.", ""]
    for phase, title in (("two_nodes", "Two nodes, one searcher each (STRICT_SPREAD)"),
                         ("node_loss", "Node 2 killed during the run"),
                         ("trainer_killed", "The trainer SIGKILLed, then resumed on the same cluster")):
        ph = res.get(phase)
        if not ph:
            continue
        d, s = ph["run"], ph["run"]["summary"]
        lines += [f"## {title}", "",
                  f"Exit code {ph['exit_code']}, {ph['seconds']:.0f} s in all; "
                  f"{s['trainer_steps']} updates ({s['updates_per_minute']} per minute) in "
                  f"{s['wall_seconds']} s of training; held-out accuracy "
                  f"{100 * (s['accuracy_before'] or 0):.1f}% -> {100 * (s['accuracy_after'] or 0):.1f}%; "
                  f"staleness mean {s['staleness_mean'] or 0:.2f}, max {s['staleness_max']}.", "",
                  "| node | searchers | batches | samples/min | weight syncs | sync ms (median, max) | lag at receipt (mean, max) |",
                  "|---|---|---|---|---|---|---|"]
        for node, r in d["per_node"].items():
            lines.append(f"| {node} | {', '.join(map(str, r['searchers']))} | {r['batches']} | "
                         f"{r['samples_per_minute']:,.0f} | {r['syncs']} | "
                         f"{r['sync_ms_median']}, {r['sync_ms_max']} | {r['lag_mean']}, {r['lag_max']} |")
        lines.append("")
        if "leftovers" in ph:
            lines += [f"After the run: {free(ph['leftovers'])}.", ""]
        if phase == "trainer_killed":
            k, lo = ph["killed"], ph["freed"]
            lines += [f"The first process was SIGKILLed {k['trainer_killed_after_first_update_s']} s "
                      f"after its first update (exit code {k['exit_code']}). Ray freed what it held "
                      f"{'within' if lo['clean'] else 'NOT within'} {lo['seconds']:g} s of its end "
                      f"({free(lo)}). `--resume` continued from the checkpoint at step {ph['checkpoint_step']} "
                      f"(summary: resumes = {ph['run']['summary_resumes']}); the table is the "
                      f"whole run's, both processes.", ""]
        if phase == "node_loss":
            lines += [f"Node 2 was killed {ph['node_2_killed_after_first_update_s']} s after the "
                      f"first update; the trainer made {ph['updates_after_kill']} updates after "
                      f"that.", "", "| when (s) | step | searcher | reason | action | error |",
                      "|---|---|---|---|---|---|"]
            for f in d["searcher_failures"]:
                lines.append(f"| {f['wall_seconds']} | {f['step']} | {f['searcher_id']} | "
                             f"{f['reason']} | {f['action']} | {f['error'][:160]} |")
            have = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in d["outputs"].items())
            lines += ["", f"Outputs: {have}.", ""]
    lines += [f"Processes of the clusters left at the end: {len(res.get('processes_left', []))}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.5, help="training minutes per run")
    ap.add_argument("--kill-after", type=float, default=30.0,
                    help="seconds after the first update at which node 2 is killed")
    phases = ["two_nodes", "node_loss", "trainer_killed"]
    ap.add_argument("--phases", nargs="+", action="extend", choices=phases, help="default: all")
    ap.add_argument("--out", type=Path, default=REPO / "docs/results/ray_two_node")
    ap.add_argument("--work-dir", type=Path, default=REPO / "runs/ray_two_node")
    args = ap.parse_args(argv)
    args.phases = args.phases or phases
    refusal = None
    if missing_requirements():
        refusal = "bench/ray_two_node.py needs " + "; ".join(missing_requirements())
    elif args.kill_after >= 60 * args.minutes:
        refusal = (f"--kill-after {args.kill_after:g} s must be shorter than the run "
                   f"(--minutes {args.minutes:g})")
    elif "trainer_killed" in args.phases and args.kill_after <= TRAINER_SAVE_SECONDS:
        refusal = (f"--kill-after {args.kill_after:g} s: the trainer_killed phase needs more than "
                   f"its checkpoint period, {TRAINER_SAVE_SECONDS:g} s")
    else:
        import fcntl

        args.work_dir.mkdir(parents=True, exist_ok=True)
        lock = open(args.work_dir / ".lock", "w")  # held until this process exits
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            refusal = (f"another bench/ray_two_node.py is using --work-dir {args.work_dir}: wait "
                       "for it or give another folder")
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    import ray

    res = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit(),
           "cores": os.cpu_count(), "ray": ray.__version__, "minutes": args.minutes,
           "command": "python bench/ray_two_node.py " + " ".join(argv or sys.argv[1:])}
    prefixes = []
    for phase in args.phases:
        print(f"[{phase}] starting two Ray nodes", flush=True)
        with TwoNodes(args.work_dir) as cluster:
            prefixes.append(str(cluster.tmp))
            run_dir = args.work_dir / phase
            if phase == "two_nodes":
                ph = train(cluster, run_dir, args.minutes, run_config(args.work_dir))
                ph["leftovers"] = cluster.wait_until_free(timeout=0)
            elif phase == "trainer_killed":
                from tba_lab.checkpoint import load_checkpoint

                killed = train(cluster, run_dir, args.minutes,
                               run_config(args.work_dir, save_seconds=TRAINER_SAVE_SECONDS),
                               kill_after=args.kill_after, kill="trainer")
                freed = cluster.wait_until_free()
                step = load_checkpoint(run_dir)["step"]
                ph = {**train(cluster, run_dir, args.minutes, None), "killed": killed,
                      "freed": freed, "checkpoint_step": step}
            else:
                ph = train(cluster, run_dir, args.minutes, run_config(args.work_dir, 20.0),
                           kill_after=args.kill_after)
                metrics = read_jsonl_rows(run_dir / "metrics.jsonl")
                t_first = metrics[0]["wall_seconds"] if metrics else 0.0
                killed_at = t_first + (ph["node_2_killed_after_first_update_s"] or 0.0)
                ph["updates_after_kill"] = sum(r.get("wall_seconds", 0) > killed_at for r in metrics)
            ph["run"] = describe(run_dir)
            res[phase] = ph
        print(f"[{phase}] exit code {ph['exit_code']}, {ph['seconds']:.0f} s", flush=True)
    time.sleep(2)
    res["processes_left"] = [c for p in prefixes for c in processes_left(p)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
    (args.out / "report.md").write_text(report(res))
    print(report(res))
    return 0


if __name__ == "__main__":
    with sigterm_as_interrupt():  # `kill` of this script cleans up as Ctrl-C does
        sys.exit(main())
