"""The paper's claims in miniature, and the benchmarks: ``tba-lab experiment NAME [--smoke]``.

Four experiments test claims of TBA (Bartoldson et al., "Trajectory Balance with
Asynchrony", arXiv 2503.18929) on the embedded tiny model and arithmetic task, each over
several seeds (default 0 1 2; ``off_policy`` 0-4), reporting the mean and the range (min to
max) over seeds, and for each claim the paired per-seed estimate, its 95% interval, the
smallest effect the run could detect and a verdict by a rule fixed before the runs
(:func:`tba_lab.lab.experiments.common.claim_test`):

=============  ===============================================================================
``off_policy``  accuracy lost to rollouts 15 updates stale, TB vs GRPO at tuned rates, paired
                over 5 seeds: D = TB's drop - GRPO's, with its interval (Table 1)
``buffer``      recency m and reward prioritisation inv_temp: accuracy and distinct correct
                responses (Sec. 3-4)
``beta``        TB's KL coefficient, constant or annealed: accuracy and KL to the reference
                (Eq. 2, Sec. 4)
``scaling``     1, 2, 4 searchers: wall-clock time to a target accuracy, throughput, and the
                simulator's prediction (Sec. 4)
=============  ===============================================================================

``all`` runs those four. The benchmarks are presets of the same runner (:data:`BENCHMARKS`):

===================  =========================================================================
``race``             async TBA vs sync TB, sync/async GRPO and TRL's GRPOTrainer at equal wall
                     clock: accuracy over time, time to target, rates (Sec. 4)
``race_preference``  TB vs GRPO vs online DPO on preference tuning: win rate against perplexity
                     (Sec. 5, Fig. 3)
``race_redteam``     the same on red-teaming, with 2 and 3 searchers: attack success against
                     diversity (Sec. 5, Table 6)
``default``          the default ``tba-lab train`` over seeds, optionally beside another commit
                     (``--set other=COMMIT``): the gain and update rate the README quotes
``minimal``          ``python -m tba_lab.minimal`` beside ``tba-lab train``, 3 minutes each, seed
                     by seed: the one-file TBA's gain against the library's
``per_update``       accuracy per trainer update with staleness and replay set by hand, no timing
                     (Sec. 3-4)
``tune``             the same loop over each loss's learning rate (and TB's beta) on fresh data,
                     seeds 100 101: the tuned settings ``off_policy`` uses
===================  =========================================================================

Each writes ``<output-dir>/<NAME>/``: ``report.md`` (date, core count, seeds and settings; each
figure with a reading GENERATED from the numbers; a table; the departures from the paper),
the figure (PNG), ``results.json`` (every run's raw numbers, rewritten after each run) and
``runs/<variant>_seed<S>/`` (each run's own files, ``checkpoint.pt`` removed).

Every run is the real trainer with a config from :func:`tba_lab.config.from_dict`, one at a
time in this process (``default``: a ``tba-lab train`` process; ``per_update``: its own
update loop; the race's TRL leg: TRL), seed-major (for each seed, every variant), so a drift
in machine load hits the variants alike. Experiments 1-3 and ``per_update`` compare at equal
trainer updates, so their results do not depend on the machine's speed; ``scaling`` and the
races are about speed and use a wall-clock budget. ``--config FILE`` (``config=`` here) gives
every run the RunConfig fields of a YAML file, e.g. another learning rate (:func:`with_config`);
``--set KEY=VALUE`` changes one of the experiment's own settings (listed in its report header,
e.g. ``minutes=3`` for a race); ``--report-only`` (:func:`rewrite_report`) runs nothing and
redoes the analysis and report of a finished experiment from its ``results.json``.

Where the miniature departs from the paper: a 1M-parameter model on synthetic two-step
arithmetic instead of 0.4-7B models on GSM8K/MATH, TL;DR and red-teaming; CPU processes
sharing a few cores instead of GPUs; tens of trainer updates per run instead of hundreds or
thousands; GRPO and RLOO as the kit implements them (off-policy with a per-token PPO clip on
the recorded behaviour log-probs); greedy exact-match accuracy on 200 held-out problems,
whose binomial standard error (about 3.5 points at 40%) is comparable to the effects measured.
Each module lists its own departures, and its report repeats them.
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

from tba_lab.actors.placement import available_cores
from tba_lab.lab.experiments import (beta, buffer_sampling, default, off_policy, per_update,
                                     race, race_tasks, scaling)
from tba_lab.lab.experiments.common import (ExperimentError, check_seeds, header, now,
                                            time_to_target, train_run, write_report,
                                            write_result)

EXPERIMENTS = {m.NAME: m for m in (off_policy, buffer_sampling, beta, scaling)}  # `all` runs these
# name -> (module, keyword arguments of its ``settings``): the benchmarks, presets of this runner
BENCHMARKS = {"race": (race, {}),
              **{name: (race_tasks, fixed) for name, fixed in race_tasks.PRESETS.items()},
              "default": (default, {}), "minimal": (default, {"minimal": True}),
              "per_update": (per_update, {}), "tune": (per_update, {"tune": True})}
NAMES = [*EXPERIMENTS, "all", *BENCHMARKS]
DEFAULT_SEEDS = (0, 1, 2)
# Experiments whose design sets their seeds: off_policy's power (5 reporting seeds), and the
# tuning sweep on seeds kept apart from every reporting seed.
SEEDS_OF = {"off_policy": off_policy.SEEDS, "tune": (100, 101)}
SMOKE_SEEDS = (0,)


def resolve(name: str) -> list[str]:
    """The experiment names ``name`` stands for (``all``: the four claims, in order).

    Raises:
        ExperimentError: an unknown name; the message lists the known ones.
    """
    if name == "all":
        return list(EXPERIMENTS)
    if name not in EXPERIMENTS and name not in BENCHMARKS:
        raise ExperimentError(f"unknown experiment {name!r}; choose one of: {', '.join(NAMES)}")
    return [name]


def module(name: str):
    """The module that runs experiment or benchmark ``name`` (:func:`resolve` raises)."""
    name = resolve(name)[0]
    return EXPERIMENTS[name] if name in EXPERIMENTS else BENCHMARKS[name][0]


def default_settings(name: str, smoke: bool = False) -> dict:
    """Experiment ``name``'s own full or SMOKE settings (a benchmark's preset applied)."""
    name = resolve(name)[0]
    if name in EXPERIMENTS:
        return EXPERIMENTS[name].settings(smoke)
    mod, fixed = BENCHMARKS[name]
    return mod.settings(smoke, **fixed)


def _typed(key: str, value, default):
    """``value`` in the type of the setting's ``default``; a string (``--set KEY=VALUE``) is
    parsed as that type, a list from comma-separated items (``legs=a,b,c``), anything as YAML
    where the default is None. Raises :class:`ExperimentError` naming the key."""
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


def experiment_settings(name: str, smoke: bool = False, settings: dict | None = None,
                        strict: bool = True) -> dict:
    """The settings experiment ``name`` runs with: its full or SMOKE defaults, updated with
    ``settings`` (e.g. ``{"eval_size": 500}``, ``{"target": 0.45}`` or ``{"searchers": [1, 2,
    4, 8]}`` for ``scaling``, ``{"minutes": 3}`` for ``race``), each converted to the type of
    the default it replaces.

    Raises:
        ExperimentError: with ``strict``, a key the experiment does not have (the message lists
            its keys); a value of another type than its default; NaN or an infinity (YAML's
            ``.nan``, ``.inf``) in a number; ``eval_size`` < 1, ``target``
            outside (0, 1], or ``searchers`` not distinct counts >= 1.
    """
    s = default_settings(name, smoke)
    for key, value in (settings or {}).items():
        if key not in s:
            if strict:
                raise ExperimentError(f"experiment {name!r} has no setting {key!r}; its settings: "
                                      f"{sorted(s)}")
            continue
        value = _typed(key, value, s[key])
        if any(isinstance(v, float) and not math.isfinite(v)
               for v in (value if isinstance(value, list) else [value])):
            raise ExperimentError(f"--set {key}={value}: give a finite number, e.g. {key}={s[key]}")
        if key == "eval_size" and (not isinstance(value, int) or value < 1):
            raise ExperimentError(f"--eval-size {value}: give the number of held-out problems, >= 1")
        if key == "target" and not 0 < value <= 1:
            raise ExperimentError(f"--target {value}: give an accuracy in (0, 1], e.g. 0.40")
        if key == "searchers":
            if (not value or any(not isinstance(n, int) or n < 1 for n in value)
                    or len(set(value)) != len(value)):
                raise ExperimentError(f"--searchers {value}: give distinct searcher counts >= 1, "
                                      f"e.g. 1 2 4 8")
            value = sorted(value)
        s[key] = value
    return s


def estimate_minutes(name: str, smoke: bool = False, seeds=None,
                     settings: dict | None = None) -> dict[str, float]:
    """Planned wall-clock minutes per experiment on a 2-core machine (``all``: each of the
    four), from the runs' count and length and the costs in
    :mod:`tba_lab.lab.experiments.common` (start-up per run, 2-core update rate)."""
    out = {}
    for n in resolve(name):
        s = experiment_settings(n, smoke, settings, strict=False)
        n_seeds = len(check_seeds(_default_seeds(seeds, smoke, n)))
        out[n] = module(n).estimate_seconds(s, n_seeds, smoke) / 60.0
    return out


def with_config(name: str, plan: list[tuple[str, dict]],
                config: dict | None) -> list[tuple[str, dict]]:
    """``plan`` (an experiment's ``(variant, overrides)`` list) with ``config``, RunConfig
    fields given by ``--config`` (e.g. ``{"training": {"learning_rate": 1.25e-5}}``), under
    every variant's own overrides: the experiment keeps its grid and run length.

    Every merged config is built with :func:`tba_lab.config.from_dict` here, so a bad field
    stops the experiment before its first run.

    Raises:
        ExperimentError: ``config`` is not a mapping, or sets a field that a variant sets
            itself (named, with the variant), or ``output_dir`` or ``seed`` (each run's own).
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


def check_config(names: list[str], smoke: bool, settings: dict | None, config: dict | None) -> None:
    """The plan of each experiment in ``names`` (a benchmark's checks its legs or variants),
    with :func:`with_config`, before any of them runs (raises as they do)."""
    for n in names:
        with_config(n, module(n).variants(experiment_settings(n, smoke, settings, False)), config)


def _default_seeds(seeds, smoke: bool, name: str | None = None) -> list:
    """``seeds`` if given, else SMOKE's, else the experiment's own (:data:`SEEDS_OF`) or 0 1 2."""
    if seeds is not None:
        return list(seeds)
    return list(SMOKE_SEEDS if smoke else SEEDS_OF.get(name, DEFAULT_SEEDS))


def run_experiment(name: str, smoke: bool = False, seeds=None,
                   output_dir: str | Path = "runs/experiments", settings: dict | None = None,
                   log=print, config: dict | None = None) -> dict:
    """Run one experiment over ``seeds`` and write its report; returns the result dict (as
    ``results.json``, plus ``"report"`` and ``"figures"`` paths).

    Args:
        name: one of :data:`EXPERIMENTS` or :data:`BENCHMARKS` (not ``all``: :func:`run_all`).
        smoke: the tiny SMOKE settings (a few updates per run, small evaluations).
        seeds: ints; default the experiment's own (:data:`SEEDS_OF`: off_policy 0-4, tune 100
            101) or 0 1 2; SMOKE: 0.
        output_dir: the experiment goes to ``output_dir/name``.
        settings: overrides of the experiment's settings (:func:`experiment_settings`).
        log: called with one line per run and the estimate (None: silent).
        config: RunConfig fields applied to every run (``--config``; :func:`with_config`),
            recorded in ``results.json`` and the report's header.

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
    seeds = check_seeds(_default_seeds(seeds, smoke, name))
    s = experiment_settings(name, smoke, settings)
    out = Path(output_dir) / name
    plan = with_config(name, mod.variants(s), config)
    est = mod.estimate_seconds(s, len(seeds), smoke)
    say(f"{name}: {len(plan) * len(seeds)} runs ({len(plan)} variants x seeds "
        f"{' '.join(map(str, seeds))}), estimated {est / 60:.1f} min on 2 cores")
    started, t0 = now(), time.time()
    result = {"experiment": name, "title": mod.TITLE, "claim": mod.CLAIM, "smoke": smoke,
              "started": started, "cores": os.cpu_count(),
              "cores_available": available_cores(), "seeds": seeds,
              "settings": s, "config": config or {}, "estimate_seconds": round(est, 1),
              "runs": []}
    runs = result["runs"]
    runner = getattr(mod, "run", None)  # a benchmark's own way to run a variant
    for seed in seeds:  # seed-major: a drift in machine load hits every variant alike
        for variant, overrides in plan:
            run_dir = out / "runs" / f"{variant}_seed{seed}"
            t_run = time.time()
            summary, evals = (runner(variant, overrides, run_dir, seed, s) if runner
                              else train_run(overrides, run_dir, seed))
            row = {"variant": variant, "seed": seed, "run_dir": str(run_dir),
                   "overrides": overrides, "summary": summary,
                   "evals": [{k: e.get(k) for k in ("step", "wall_seconds", "accuracy", "n")}
                             for e in evals]}
            row.update(mod.measure(run_dir, summary, s, variant, runs))
            row["seconds"] = round(time.time() - t_run, 1)
            runs.append(row)
            write_result(out, result)
            head = (summary.get("held_out_metrics") or ["accuracy"])[0]  # e.g. win_rate
            say(f"  [{len(runs)}/{len(plan) * len(seeds)}] {variant} seed {seed}: {head} "
                f"{_pct(summary.get(f'{head}_before'))} -> {_pct(summary.get(f'{head}_after'))}"
                f", {summary.get('trainer_steps')} updates, {row['seconds']:.0f} s")
    result.update(finished=now(), seconds=round(time.time() - t0, 1))
    result = _write_analysis(mod, out, result)
    say(f"{name}: done in {result['seconds'] / 60:.1f} min; report {result['report']}")
    return result


def _write_analysis(mod, out: Path, result: dict) -> dict:
    """Analyse ``result["runs"]``, draw the figures, generate the readings, write
    ``report.md`` and ``results.json`` under ``out``; returns the result with the paths."""
    analysis = mod.analyse(result["runs"], result["settings"])
    figures = mod.figures(analysis, out)
    result.update(analysis=analysis, readings=mod.readings(analysis),
                  figures=[f for f, _ in figures])
    report = write_report(out, _report_lines(mod, result, figures))
    write_result(out, result)
    return {**result, "report": str(report), "figures": [str(out / f) for f, _ in figures]}


def rewrite_report(name: str, output_dir: str | Path = "runs/experiments") -> dict:
    """Redo the analysis, figures, readings and ``report.md`` of a finished experiment from the
    runs stored in its ``results.json``, repeating no run (``tba-lab experiment NAME
    --report-only``): for a report written before a change to the analysis or its wording.
    The run's date, duration, seeds, settings and config stay as recorded.

    Raises:
        FileNotFoundError: no finished experiment ``name`` under ``output_dir``.
        ExperimentError: ``name`` is not one experiment (``all`` included).
    """
    if name not in EXPERIMENTS and name not in BENCHMARKS:
        raise ExperimentError(f"--report-only rewrites one experiment's report; {name!r} is not "
                              f"one of {sorted([*EXPERIMENTS, *BENCHMARKS])}")
    data = load_result(output_dir, name)
    result = {k: v for k, v in data.items() if k not in ("report", "figures", "analysis",
                                                          "readings")}
    result.setdefault("config", {})  # results written before --config existed
    return _write_analysis(module(name), Path(output_dir) / name, result)


def _report_lines(mod, result: dict, figures: list[tuple[str, str]]) -> list[str]:
    """``report.md``: header, each figure with its generated reading, the table, departures."""
    lines = header(result["experiment"], mod.TITLE, mod.CLAIM, result["seeds"], result["smoke"],
                   result["settings"], result["started"], result["seconds"],
                   len(result["runs"]), result["estimate_seconds"], result["config"],
                   (result.get("cores"), result.get("cores_available")))
    if getattr(mod, "DESIGN", None):  # the estimand and verdict rule, written before the runs
        lines += ["## Design (fixed before the runs)", "", *[f"- {d}" for d in mod.DESIGN], ""]
    for i, (fig, caption) in enumerate(figures, 1):
        lines += [f"## Figure {i}", "", f"![{caption}]({fig})", "", caption, "",
                  "**Reading (sentences generated from this run's numbers):**", ""]
        lines += [f"- {r}" for r in result["readings"]] + [""]
    capped = [f"{r['variant']} seed {r['seed']}" for r in result["runs"] if r.get("capped")]
    if capped:
        lines += [f"**Stopped by the time cap before max_steps:** {', '.join(capped)}.", ""]
    lines += ["## Numbers", "", *mod.table(result["analysis"]), "",
              "## Where this miniature departs from the paper", ""]
    lines += [f"- {d}" for d in mod.DEPARTURES]
    return lines + ["", "Every run's raw numbers are in `results.json`; each run's files in "
                        "`runs/`."]


def run_all(smoke: bool = False, seeds=None, output_dir: str | Path = "runs/experiments",
            settings: dict | None = None, log=print,
            config: dict | None = None) -> dict[str, dict]:
    """The four experiments one after another (:func:`run_experiment` each); ``settings``
    apply to the experiments that have them, ``config`` to every run (checked against all
    four plans before the first run). Prints the estimate of each before starting."""
    say = log or (lambda *a, **k: None)
    keys = set(settings or {})
    known = set().union(*(EXPERIMENTS[n].settings(smoke) for n in EXPERIMENTS))
    if keys - known:
        raise ExperimentError(f"no experiment has setting(s) {sorted(keys - known)}; "
                              f"known: {sorted(known)}")
    check_config(list(EXPERIMENTS), smoke, settings, config)
    est = estimate_minutes("all", smoke, seeds, settings)
    say("estimate: " + ", ".join(f"{n} {m:.1f} min" for n, m in est.items())
        + f"; total {sum(est.values()):.1f} min on 2 cores")
    out = {}
    for n in EXPERIMENTS:
        s = {k: v for k, v in (settings or {}).items() if k in EXPERIMENTS[n].settings(smoke)}
        out[n] = run_experiment(n, smoke, seeds, output_dir, s, log, config)
    return out


def load_result(output_dir: str | Path, name: str) -> dict:
    """``results.json`` of experiment ``name`` under ``output_dir`` (as written by a run),
    with ``"report"`` and ``"figures"`` paths added.

    Raises:
        FileNotFoundError: no finished experiment there (the message says how to run one).
    """
    import json

    out = Path(output_dir) / resolve(name)[0]
    path = out / "results.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    if "analysis" not in data:
        raise FileNotFoundError(f"{path}: no finished experiment; run `tba-lab experiment "
                                f"{name} --output-dir {output_dir}`")
    return {**data, "report": str(out / "report.md"),
            "figures": [str(out / f) for f in data.get("figures", [])]}


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(args) -> int:
    """CLI entry (``tba-lab experiment``); returns the exit code (2: bad input, 130: Ctrl-C)."""
    from tba_lab.config import ConfigError

    if getattr(args, "report_only", False):
        given = [f"--{k.replace('_', '-')}" for k in ("smoke", "seeds", "eval_size", "target",
                                                      "searchers", "set", "config")
                 if getattr(args, k, None) not in (None, False)]
        try:
            if given:
                raise ExperimentError(f"--report-only runs nothing, so {' '.join(given)} would "
                                      f"have no effect; drop it")
            results = {args.name: rewrite_report(args.name, args.output_dir)}
        except (ExperimentError, FileNotFoundError) as e:
            print(f"tba-lab experiment: {e}", file=sys.stderr)
            return 2
        return _print_results(results)
    try:
        names = resolve(args.name)
        check_seeds(_default_seeds(args.seeds, args.smoke))
        seeds = (args.seeds if args.seeds is not None  # None: each experiment's own seeds
                 else list(SMOKE_SEEDS) if args.smoke else None)
        settings = {}
        if args.eval_size is not None:
            settings["eval_size"] = args.eval_size
        for key in ("target", "searchers"):  # flags of the experiments with that setting
            value = getattr(args, key, None)
            if value is None:
                continue
            if not any(key in default_settings(n, args.smoke) for n in names):
                having = [n for n in [*EXPERIMENTS, *BENCHMARKS] if key in default_settings(n)]
                raise ExperimentError(f"--{key} applies to the {' and '.join(having)} experiment"
                                      f"{'s' if len(having) > 1 else ''} only, not {args.name!r}")
            settings[key] = value
        for item in getattr(args, "set", None) or []:  # KEY=VALUE: one of the settings
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise ExperimentError(f"--set {item!r}: write KEY=VALUE, e.g. minutes=3; the "
                                      f"settings are in a report's header")
            settings[key.strip().replace("-", "_")] = text.strip()
        for n in names:  # value checks; one experiment must have every key given
            experiment_settings(n, args.smoke, settings, strict=args.name != "all")
        config = None
        if getattr(args, "config", None):
            from tba_lab.config import read_yaml_data

            config = read_yaml_data(args.config)
        check_config(names, args.smoke, settings, config)  # a bad leg or field stops here
    except (ExperimentError, ConfigError, FileNotFoundError) as e:
        print(f"tba-lab experiment: {e}", file=sys.stderr)
        return 2
    try:
        if args.name == "all":
            results = run_all(args.smoke, seeds, args.output_dir, settings, config=config)
        else:
            results = {args.name: run_experiment(args.name, args.smoke, seeds, args.output_dir,
                                                 settings, config=config)}
    except KeyboardInterrupt:
        print(f"\ninterrupted: the runs so far are in {args.output_dir}/<NAME>/results.json",
              file=sys.stderr)
        return 130
    except (ExperimentError, ConfigError) as e:
        print(f"tba-lab experiment: {e}", file=sys.stderr)
        return 2
    return _print_results(results)


def _print_results(results: dict[str, dict]) -> int:
    for n, r in results.items():
        print(f"{n}: {r['report']}")
        for line in r["readings"]:
            print(f"  - {line}")
    return 0


__all__ = ["BENCHMARKS", "EXPERIMENTS", "NAMES", "ExperimentError", "default_settings",
           "estimate_minutes", "experiment_settings", "load_result", "main", "module", "resolve",
           "rewrite_report", "run_all", "run_experiment", "time_to_target", "with_config"]
