"""The paper's claims in miniature and the benchmarks: ``tba-lab experiment NAME [--smoke]``.

One sweep runner (:func:`run_experiment`) runs every preset of :data:`EXPERIMENTS` (the
paper's claims; ``all`` runs the five) and :data:`BENCHMARKS`: for each seed every variant,
one run at a time, so a drift in machine load hits the variants alike. One analysis
(:func:`analyse`) gives per variant the mean and range over seeds of each metric the preset
declares, and each claim's paired per-seed estimate, 95% interval and verdict by the rule
fixed before the runs (``common.VERDICT_RULE``); ``<output-dir>/<NAME>/`` gets
``report.md``, ``NAME.png``, ``results.json`` (rewritten after every run) and ``runs/``.

A preset declares ``TITLE``, ``CLAIM``, ``DEPARTURES`` (optionally ``DESIGN``) and
``settings(smoke)``, ``variants(s)`` (``[(label, config overrides)]``), ``metrics(s)`` (``{row
key: (words, formatter)}``), ``measure(run_dir, summary, s, variant, runs)`` (a row's own
numbers) and optionally ``claims(runs, s)``, and ``run(variant, overrides, run_dir, seed, s)``
where a run is not the kit's trainer. Every row gets ``common.basic_numbers`` of the run's
summary, its evaluations and, with a ``target`` setting, its ``time_to_target``.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

from tba_lab.actors.placement import available_cores
from tba_lab.lab.experiments import (asynchrony, beta, buffer_sampling, default, off_policy,
                                     per_update, race, scaling, tradeoff)
from tba_lab.lab.experiments.common import (ExperimentError, basic_numbers, check_seeds,
                                            claim_lines, header, now, pct, rng, run_seconds,
                                            spread, time_to_target, train_run, write_result)
from tba_lab.runlog import eval_metric

EXPERIMENTS = {m.NAME: m for m in (off_policy, asynchrony, buffer_sampling, beta, scaling)}  # `all`
# name -> (preset, keyword arguments of its ``settings``)
BENCHMARKS = {"race": (race, {}),
              **{f"tradeoff_{task}": (tradeoff, {"task": task}) for task in tradeoff.TASKS},
              **{name: (race.TASK_RACE, fixed) for name, fixed in race.PRESETS.items()},
              "default": (default, {}), "minimal": (default, {"minimal": True}),
              "per_update": (per_update, {}), "tune": (per_update, {"tune": True})}
PRESETS = {**{name: (m, {}) for name, m in EXPERIMENTS.items()}, **BENCHMARKS}
NAMES = [*EXPERIMENTS, "all", *BENCHMARKS]
DEFAULT_SEEDS, SMOKE_SEEDS = (0, 1, 2), (0,)
# Presets whose design sets their seeds: off_policy's power (4 seeds), and the tuning sweep on
# seeds kept apart from every reporting seed.
SEEDS_OF = {"off_policy": off_policy.SEEDS, "tune": per_update.TUNE_SEEDS}
# Settings checked beyond their type: key -> (test of the value, message)
CHECKS = {"eval_size": (lambda v: isinstance(v, int) and v >= 1,
                        "--set eval_size={v}: give the number of held-out problems, >= 1"),
          "target": (lambda v: 0 < v <= 1,
                     "--set target={v}: give an accuracy in (0, 1], e.g. target=0.40"),
          "searchers": (lambda v: v and len(set(v)) == len(v)
                        and all(isinstance(n, int) and n >= 1 for n in v),
                        "--set searchers={v}: give distinct searcher counts >= 1, "
                        "e.g. searchers=1,2,4,8")}


def resolve(name: str) -> list[str]:
    """The experiment names ``name`` stands for (``all``: the five claims, in order).

    Raises:
        ExperimentError: an unknown name; the message lists the known ones.
    """
    if name == "all":
        return list(EXPERIMENTS)
    if name not in PRESETS:
        raise ExperimentError(f"unknown experiment {name!r}; choose one of: {', '.join(NAMES)}")
    return [name]


def module(name: str):
    """The preset of experiment or benchmark ``name`` (:func:`resolve` raises)."""
    return PRESETS[resolve(name)[0]][0]


def default_settings(name: str, smoke: bool = False) -> dict:
    """Experiment ``name``'s own full or SMOKE settings (a benchmark's preset applied)."""
    mod, fixed = PRESETS[resolve(name)[0]]
    return mod.settings(smoke, **fixed)


def _typed(key: str, value, default):
    """``value`` in the type of the setting's ``default``: a string (``--set KEY=VALUE``) is
    parsed as that type, a list from comma-separated items (``legs=a,b,c``), as YAML where the
    default is None. Raises :class:`ExperimentError` naming the key."""
    if isinstance(value, str) and not isinstance(default, str):
        import yaml

        try:
            if default is None:
                return yaml.safe_load(value)
            if isinstance(default, list):
                kind = type(default[0]) if default else str
                return [kind(v.strip()) for v in value.split(",") if v.strip()]
            if isinstance(default, bool):
                return {"true": True, "yes": True, "1": True, "false": False, "no": False,
                        "0": False}[value.lower()]
            return type(default)(value)
        except (ValueError, KeyError):
            raise ExperimentError(f"--set {key}={value}: {key} takes a {type(default).__name__}, "
                                  f"e.g. {key}={default}") from None
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, str) and isinstance(value, (int, float)):  # e.g. a commit 1234567
        return str(value)
    if isinstance(default, list) and not isinstance(value, list):
        return list(value) if isinstance(value, tuple) else [value]
    return value


def experiment_settings(name: str, smoke: bool = False, settings: dict | None = None) -> dict:
    """Experiment ``name``'s full or SMOKE settings updated with ``settings`` (e.g.
    ``{"minutes": 3}``), each converted to the type of the default it replaces.

    Raises:
        ExperimentError: a key the experiment does not have (the message lists its keys); a
            value of another type; NaN or an infinity; a value :data:`CHECKS` refuses.
    """
    s = default_settings(name, smoke)
    for key, value in (settings or {}).items():
        if key not in s:
            raise ExperimentError(f"experiment {name!r} has no setting {key!r}; its settings: "
                                  f"{sorted(s)}")
        value = _typed(key, value, s[key])
        if any(isinstance(v, float) and not math.isfinite(v)
               for v in (value if isinstance(value, list) else [value])):
            raise ExperimentError(f"--set {key}={value}: give a finite number, e.g. {key}={s[key]}")
        ok, message = CHECKS.get(key, (None, ""))
        if ok and not ok(value):  # a list shown as --set takes it, comma-separated
            raise ExperimentError(message.format(
                v=",".join(map(str, value)) if isinstance(value, list) else value))
        s[key] = sorted(value) if key == "searchers" else value
    return s


def with_config(name: str, plan: list[tuple[str, dict]],
                config: dict | None) -> list[tuple[str, dict]]:
    """``plan`` (``[(variant, overrides)]``) with ``config`` (``--config``) under every
    variant's own overrides, each merged config built here: a bad field stops the sweep early.

    Raises:
        ExperimentError: ``config`` is not a mapping, or sets a field that a variant sets
            itself (named, with the variant), or ``output_dir`` or ``seed``.
        tba_lab.config.ConfigError: a merged config is invalid (unknown key, bad value).
    """
    from tba_lab.config import from_dict, merge
    from tba_lab.lab.runs import flatten_config

    if not config:
        return plan
    if not isinstance(config, dict):
        raise ExperimentError(f"--config: give a YAML mapping of RunConfig fields (e.g. "
                              f"training: {{learning_rate: 1.25e-5}}), not {type(config).__name__}")
    given, out = flatten_config(config).keys(), []
    for variant, overrides in plan:
        clash = sorted(given & (flatten_config(overrides).keys() | {"output_dir", "seed"}))
        if clash:
            raise ExperimentError(f"--config sets {', '.join(clash)}, which experiment {name!r} "
                                  f"sets itself (variant {variant!r}); remove it from the file")
        merged = merge(config, overrides)
        from_dict(merged)
        out.append((variant, merged))
    return out


def _plan(name: str, smoke: bool, seeds, settings: dict | None, config: dict | None):
    """Experiment ``name``'s checked ``(seeds, settings, [(variant, overrides)], estimated
    seconds on 2 cores)``; ``seeds`` None: SMOKE's, else the preset's own (:data:`SEEDS_OF`)
    or 0 1 2; :func:`experiment_settings`, :func:`with_config`."""
    if seeds is None:
        seeds = SMOKE_SEEDS if smoke else SEEDS_OF.get(name, DEFAULT_SEEDS)
    seeds = check_seeds(seeds)
    s = experiment_settings(name, smoke, settings)
    plan = with_config(name, module(name).variants(s), config)
    return seeds, s, plan, len(plan) * len(seeds) * run_seconds(s, smoke)


def run_experiment(name: str, smoke: bool = False, seeds=None,
                   output_dir: str | Path = "runs/experiments", settings: dict | None = None,
                   log=print, config: dict | None = None) -> dict:
    """Run one sweep of ``name`` over ``seeds`` (default :func:`_plan`'s) into
    ``output_dir/name`` with ``settings`` (:func:`experiment_settings`) and ``config`` for
    every run (:func:`with_config`); ``log`` gets a line per run. Returns ``results.json``'s
    dict plus ``"report"`` and ``"figures"`` paths.

    Raises:
        ExperimentError: unknown name, empty or repeated seeds, unknown setting, a ``config``
            field the experiment sets itself.
        tba_lab.config.ConfigError: a setting or ``config`` that makes an invalid run config.
        KeyboardInterrupt: re-raised after ``results.json`` holds the runs so far.
    """
    say = log or (lambda *a, **k: None)
    if name == "all":
        raise ExperimentError("run_experiment runs one experiment; use run_all for 'all'")
    mod = module(name)
    seeds, s, plan, est = _plan(name, smoke, seeds, settings, config)
    out, total = Path(output_dir) / name, len(plan) * len(seeds)
    say(f"{name}: {total} runs ({len(plan)} variants x seeds {' '.join(map(str, seeds))}), "
        f"estimated {est / 60:.1f} min on 2 cores")
    t0 = time.time()
    result = {"experiment": name, "title": mod.TITLE, "claim": mod.CLAIM, "smoke": smoke,
              "design": list(getattr(mod, "DESIGN", [])), "departures": list(mod.DEPARTURES),
              "started": now(), "cores": os.cpu_count(), "cores_available": available_cores(),
              **design_commit(mod),
              "seeds": seeds, "settings": s, "config": config or {},
              "estimate_seconds": round(est, 1), "runs": []}
    runs = result["runs"]
    runner = getattr(mod, "run", None) or (  # the kit's trainer unless the preset runs its own
        lambda variant, over, path, seed, s: train_run(over, path, seed))
    for seed in seeds:  # seed-major: a drift in machine load hits every variant alike
        for variant, overrides in plan:
            run_dir = out / "runs" / f"{variant}_seed{seed}"
            t_run = time.time()
            summary, evals = runner(variant, overrides, run_dir, seed, s)
            row = {"variant": variant, "seed": seed, "run_dir": str(run_dir),
                   "cores_available": result["cores_available"],
                   "overrides": overrides, "summary": summary, **basic_numbers(summary, s)}
            head = row["metrics"][0]  # accuracy, win_rate ..
            row["evals"] = [{k: e.get(k) for k in ("step", "wall_seconds", "n", *row["metrics"])}
                            | ({"kl": e["kl"]} if "kl" in e else {}) for e in evals]
            if "target" in s and evals:  # the presets about speed (race, scaling)
                row["time_to_target"] = time_to_target(evals, s["target"])
                if s.get("target_high"):
                    row["time_to_target_high"] = time_to_target(evals, s["target_high"])
            row.update(mod.measure(run_dir, summary, s, variant, runs))
            row["seconds"] = round(time.time() - t_run, 1)
            runs.append(row)
            write_result(out, result)
            say(f"  [{len(runs)}/{total}] {variant} seed {seed}: {head} "
                f"{pct(row['before'][head])} -> {pct(row['after'][head])}"
                f", {summary.get('trainer_steps')} updates, {row['seconds']:.0f} s")
    result.update(finished=now(), seconds=round(time.time() - t0, 1))
    result = _write_analysis(mod, out, result)
    say(f"{name}: done in {result['seconds'] / 60:.1f} min; report {result['report']}")
    return result


def design_commit(mod) -> dict:
    """``{"commit": HEAD, "design_commit": the last commit of the preset's file, "design_dirty":
    whether the file differs from it}`` of the checkout the runs use (all None outside a git
    checkout): the report cites the design commit, which must precede the runs."""
    import subprocess

    path = Path(mod.__file__).resolve()

    def git(*args):
        try:
            with subprocess.Popen(["git", *args], cwd=path.parent, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) as proc:
                return proc.communicate(timeout=30)[0].strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    head = git("rev-parse", "HEAD")
    design = git("log", "-1", "--format=%H", "--", str(path)) if head else None
    dirty = bool(git("status", "--porcelain", "--", str(path))) if head else None
    return {"commit": head, "design_commit": design, "design_dirty": dirty}


# ---------------------------------------------------------------------------------- analysis
def analyse(name: str, runs: list[dict], s: dict) -> dict:
    """Per variant (in run order) the :func:`spread` over seeds of each metric of the preset
    (``cells``), its ``metrics`` (key -> words) and ``claims``."""
    mod = module(name)
    metrics = mod.metrics(s)
    cells = [{"variant": v, **{k: spread(r[k] for r in runs if r["variant"] == v and k in r)
                               for k in metrics}}  # a key a row lacks is not a missing value
             for v in dict.fromkeys(r["variant"] for r in runs)]
    return {"cells": cells, "metrics": {k: words for k, (words, _) in metrics.items()},
            "claims": mod.claims(runs, s) if hasattr(mod, "claims") else []}


def _formats(name: str, s: dict) -> dict:
    return {k: fmt for k, (_, fmt) in module(name).metrics(s).items()}


def readings(name: str, a: dict, s: dict) -> list[str]:
    """One sentence per metric (each variant's mean and range over seeds) and one per claim
    (estimate, interval, verdict), generated from the numbers of :func:`analyse`."""
    fmts = _formats(name, s)
    out = [f"{words}: " + "; ".join(f"{c['variant']} {rng(c[key], fmts[key])}" for c in a["cells"])
           + "." for key, words in a["metrics"].items()
           if any(c[key]["n"] or c[key]["missing"] for c in a["cells"])]
    return out + claim_lines(a["claims"])


def table(name: str, a: dict, s: dict) -> list[str]:
    """The report's table: a row per variant, a column per metric, mean (min to max)."""
    fmts = _formats(name, s)
    lines = ["| variant | " + " | ".join(a["metrics"].values()) + " |",
             "|---|" + "---|" * len(a["metrics"])]
    return lines + [f"| {c['variant']} | " + " | ".join(rng(c[k], fmts[k]) for k in a["metrics"])
                    + " |" for c in a["cells"]]


def figure(name: str, a: dict, runs: list[dict], out: Path) -> str:
    """``NAME.png``: the held-out headline metric of every run over training (seconds, or
    updates where a run has no clock), then a panel per metric (the first three): each
    variant's mean, a bar from the lowest to the highest seed. Returns the file name."""
    from matplotlib.figure import Figure

    keys = [k for k in a["metrics"] if any(c[k]["n"] for c in a["cells"])][:3]
    fig = Figure(figsize=(4.5 * (1 + len(keys)), 4))
    axes = fig.subplots(1, 1 + len(keys), squeeze=False)
    variants = [c["variant"] for c in a["cells"]]
    color = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    ax = axes[0][0]
    head = next((eval_metric(e) for r in runs for e in r.get("evals") or []), "accuracy")
    clock = all(e.get("wall_seconds") is not None for r in runs for e in r.get("evals") or [])
    x = "wall_seconds" if clock else "step"  # one axis for all runs
    for r in runs:
        ev = sorted((e for e in r.get("evals") or [] if e.get(head) is not None),
                    key=lambda e: e[x] or 0)
        first = r is next(q for q in runs if q["variant"] == r["variant"])
        ax.plot([e[x] for e in ev], [e[head] for e in ev], "o-", ms=3, alpha=0.7,
                color=color[r["variant"]], label=r["variant"] if first else None)
    ax.set(xlabel="training seconds" if clock else "trainer updates", ylabel=f"held-out {head}",
           title=f"{head} per run")
    ax.legend(fontsize=7)
    for ax, key in zip(axes[0][1:], keys):
        for i, sp in enumerate(c[key] for c in a["cells"]):
            if sp["n"]:  # the mean, a bar from the lowest to the highest seed
                ax.errorbar([i], [sp["mean"]], [[sp["mean"] - sp["min"]], [sp["max"] - sp["mean"]]],
                            capsize=4, marker="o", color=f"C{i % 10}")
        ax.set_xticks(range(len(variants)), variants, fontsize=7, rotation=30)
        ax.set(xlim=(-0.5, len(variants) - 0.5))
        ax.set_title(a["metrics"][key], fontsize=9)
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=110)
    return f"{name}.png"


def _write_analysis(mod, out: Path, result: dict) -> dict:
    """Analyse ``result["runs"]``, draw the figure, write ``report.md`` and ``results.json``
    under ``out``; returns the result with the paths."""
    name, s = result["experiment"], result["settings"]
    a = analyse(name, result["runs"], s)
    fig = figure(name, a, result["runs"], out)
    result.update(analysis=a, readings=readings(name, a, s))
    # the words the runs were designed under (results.json), else the preset's today
    title, design = result.get("title", mod.TITLE), result.get("design") or getattr(mod, "DESIGN", [])
    lines = header(name, title, result.get("claim", mod.CLAIM), result["seeds"], result["smoke"], s,
                   result["started"], result["seconds"], len(result["runs"]),
                   result["estimate_seconds"], result["config"],
                   (result.get("cores"), result.get("cores_available")), result.get("note", ""))
    if design:  # the estimand and verdict rule, written before the runs
        lines += ["## Design (fixed before the runs)", "", design_line(result), "",
                  *[f"- {d}" for d in design], ""]
    elif result.get("design_commit"):  # a preset whose design is its module docstring
        lines += [design_line(result), ""]
    figs = [fig] + ([mod.extra_figure(result["runs"], s, out)]
                    if hasattr(mod, "extra_figure") else [])
    lines += ["## Figure", "", *[f"![{title}]({f})" for f in figs], "",
              "**Reading (sentences generated from this run's numbers):**", "",
              *[f"- {r}" for r in result["readings"]], ""]
    if hasattr(mod, "extra_table"):
        lines += mod.extra_table(result["runs"], s)
    capped = [f"{r['variant']} seed {r['seed']}" for r in result["runs"] if r.get("capped")]
    if capped:
        lines += [f"**Stopped by the time cap before max_steps:** {', '.join(capped)}.", ""]
    lines += ["## Numbers", "", *table(name, a, s), "",
              "## Where this miniature departs from the paper", "",
              *[f"- {d}" for d in result.get("departures") or mod.DEPARTURES], "",
              "Every run's raw numbers are in `results.json`; each run's files in `runs/`."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    result["figures"] = figs
    write_result(out, result)
    return {**result, "report": str(out / "report.md"), "figures": [str(out / f) for f in figs]}


def design_line(result: dict) -> str:
    """Which commit held the design the runs used, and whether it was committed unchanged."""
    commit = result.get("design_commit")
    if not commit:
        return ("Design commit: not recorded (the runs predate the record, or ran outside a "
                "git checkout).")
    text = (f"Design commit: `{commit[:10]}` (the last commit of the preset's file before the "
            f"runs; the runs used `{(result.get('commit') or '?')[:10]}`).")
    return text + (" **The preset's file had uncommitted changes when the runs started.**"
                   if result.get("design_dirty") else "")


def rewrite_report(name: str, output_dir: str | Path = "runs/experiments") -> dict:
    """Redo the analysis and ``report.md`` of a finished sweep from its ``results.json``
    (``--report-only``); the recorded date, seeds, settings and config stay.

    Raises:
        FileNotFoundError: no finished experiment ``name`` under ``output_dir``.
        ExperimentError: ``name`` is not one experiment (``all`` included).
    """
    if name not in PRESETS:
        raise ExperimentError(f"--report-only rewrites one experiment's report; {name!r} is not "
                              f"one of {sorted(PRESETS)}")
    path = Path(output_dir) / name / "results.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    if "analysis" not in data:
        raise FileNotFoundError(f"{path}: no finished experiment; run `tba-lab experiment "
                                f"{name} --output-dir {output_dir}`")
    result = {k: v for k, v in data.items() if k not in ("analysis", "readings", "figures")}
    result.setdefault("config", {})  # results written before --config existed
    for r in result["runs"]:  # rows written before they carried the cores (scaling's premise);
        # results older still recorded only os.cpu_count()
        if r.get("cores_available") is None:
            r["cores_available"] = result.get("cores_available") or result.get("cores")
    return _write_analysis(module(name), path.parent, result)


def run_all(smoke: bool = False, seeds=None, output_dir: str | Path = "runs/experiments",
            settings: dict | None = None, log=print,
            config: dict | None = None) -> dict[str, dict]:
    """The five claims one after another (:func:`run_experiment`); ``settings`` apply to the
    experiments that have them, ``config`` to every run (checked against all five plans first)."""
    say = log or (lambda *a, **k: None)
    own = {n: default_settings(n, smoke) for n in EXPERIMENTS}
    unknown = set(settings or {}) - set().union(*own.values())
    if unknown:
        raise ExperimentError(f"no experiment has setting(s) {sorted(unknown)}; "
                              f"known: {sorted(set().union(*own.values()))}")
    mine = {n: {k: v for k, v in (settings or {}).items() if k in own[n]} for n in EXPERIMENTS}
    plans = {n: _plan(n, smoke, seeds, mine[n], config) for n in EXPERIMENTS}  # before any run
    say("estimate: " + ", ".join(f"{n} {p[3] / 60:.1f} min" for n, p in plans.items())
        + f"; total {sum(p[3] for p in plans.values()) / 60:.1f} min on 2 cores")
    return {n: run_experiment(n, smoke, plans[n][0], output_dir, mine[n], log, config)
            for n in EXPERIMENTS}


def main(args) -> int:
    """CLI entry (``tba-lab experiment``); returns the exit code (2: bad input, 130: Ctrl-C)."""
    from tba_lab.config import ConfigError

    try:
        if args.report_only:
            given = [f"--{k}" for k in ("smoke", "seeds", "set", "config")
                     if getattr(args, k) not in (None, False)]
            if given:
                raise ExperimentError(f"--report-only runs nothing, so {' '.join(given)} would "
                                      f"have no effect; drop it")
            results = {args.name: rewrite_report(args.name, args.output_dir)}
        else:
            results = _run_from_args(args)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the runs so far are in {args.output_dir}/<NAME>/results.json",
              file=sys.stderr)
        return 130
    except (ExperimentError, ConfigError, FileNotFoundError) as e:
        print(f"tba-lab experiment: {e}", file=sys.stderr)
        return 2
    for n, r in results.items():
        print(f"{n}: {r['report']}")
        print("".join(f"  - {line}\n" for line in r["readings"]), end="")
    return 0


def _run_from_args(args) -> dict[str, dict]:
    """Check every flag and the plans (before any run), then run; ``{name: result}``."""
    resolve(args.name)  # an unknown name stops here, listing the known ones
    settings = {}
    for item in args.set or []:  # KEY=VALUE: one of the preset's settings
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ExperimentError(f"--set {item!r}: write KEY=VALUE, e.g. minutes=3; the "
                                  f"settings are in a report's header")
        settings[key.strip().replace("-", "_")] = text.strip()
    config = None
    if args.config:
        from tba_lab.config import read_yaml_data

        config = read_yaml_data(args.config)
    if args.name == "all":  # checks every plan before its first run
        return run_all(args.smoke, args.seeds, args.output_dir, settings, config=config)
    _plan(args.name, args.smoke, args.seeds, settings, config)  # a bad leg or field stops here
    return {args.name: run_experiment(args.name, args.smoke, args.seeds, args.output_dir,
                                      settings, config=config)}


__all__ = ["BENCHMARKS", "EXPERIMENTS", "NAMES", "ExperimentError", "analyse", "default_settings",
           "experiment_settings", "main", "module", "readings", "resolve", "rewrite_report",
           "run_all", "run_experiment", "time_to_target", "with_config"]
