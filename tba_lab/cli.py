"""Command line: ``tba-lab {train,sft,train-rm,eval,reproduce,course,experiment}`` (also ``python -m tba_lab ...``).

* ``tba-lab train``: asynchronous TBA (default) or a baseline (GRPO, Dr. GRPO, RLOO, online DPO),
  sync or async, on the embedded model.
* ``tba-lab sft [--task NAME]``: rebuild a task's embedded data and tiny model under ``data/``
  from a seed (arithmetic by default; ``preference``, ``redteam``).
* ``tba-lab train-rm``: retrain the preference task's reward model (Bradley-Terry loss).
* ``tba-lab eval``: held-out metrics (greedy accuracy) of a saved policy on a task.
* ``tba-lab reproduce [--smoke]``: execute the course notebooks with papermill, write report.md.
* ``tba-lab course {release,grade,site}``: for instructors: the students' copies without
  solutions and their grading (nbgrader), the course as a static website (mkdocs-jupyter).
* ``tba-lab experiment NAME [--smoke] [--seeds 0 1 2]``: the paper's claims in miniature
  (``off_policy``, ``buffer``, ``beta``, ``scaling`` or ``all``) and the benchmarks (``race``,
  ``race_preference``, ``race_redteam``, ``default``, ``per_update``) over seeds, with report.md.

Command-line flags override the YAML file given with ``--config``, which overrides the chosen
task's ``config_defaults`` (e.g. redteam's ``tb.beta`` 0.5), which override the defaults of
:mod:`tba_lab.config`.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import traceback
from pathlib import Path

from tba_lab.actors.lifetime import exit_with_parent_from_env


def _one_line(e: BaseException) -> str:
    """An error's message on one line (a library's message may span several)."""
    return " ".join(str(e).split())


def _with_task(data: dict, task: str, keep_model: bool) -> dict:
    """``data`` (a config file's content) with ``task.name = task``. The old task's embedded
    model cannot serve another task: a ``model.path`` naming it is dropped (the new task's
    embedded model then applies) unless ``keep_model`` (``--model`` was given)."""
    from tba_lab.config import TaskConfig
    from tba_lab.registry import TASKS
    from tba_lab.tasks import embedded_model_dir

    if not isinstance(data.get("task") or {}, dict):
        return data  # from_dict names the bad section
    data = dict(data)
    section = dict(data.get("task") or {})
    old = section.get("name", TaskConfig.name)
    section["name"] = task
    data["task"] = section
    model = data.get("model")
    if (not keep_model and old != task and old in TASKS.names() and isinstance(model, dict)
            and model.get("path") == str(embedded_model_dir(old))):
        data["model"] = {k: v for k, v in model.items() if k != "path"}
    return data


def _train(args) -> int:
    from tba_lab.config import ConfigError, from_dict, read_yaml_data, report_to_names, validate
    from tba_lab.preflight import preflight
    from tba_lab.trainer import train

    try:
        if args.resume and args.config:
            raise ConfigError("give --resume DIR or --config FILE, not both: a resumed run reads "
                              "DIR/config.yaml (flags may still override its budget)")
        if (args.resume and args.output_dir is not None
                and Path(args.output_dir).resolve() != Path(args.resume).resolve()):
            raise ConfigError(f"give --resume {args.resume} without --output-dir {args.output_dir}:"
                              f" a resumed run continues in its own folder; to keep the original, "
                              f"copy the folder and resume the copy")
        source = resume_config(args.resume) if args.resume else args.config
        data = read_yaml_data(source) if source else {}
        if args.task is not None and isinstance(data, dict):
            # the task goes in before from_dict, so the task's config_defaults apply
            data = _with_task(data, args.task, keep_model=args.model is not None)
        cfg = from_dict(data)
        if args.resume:
            cfg.output_dir = args.resume
        for flag, (section, name) in {
                "output_dir": (None, "output_dir"), "max_minutes": (None, "max_minutes"),
                "seed": (None, "seed"), "algo": (None, "algo"), "mode": ("async_", "mode"),
                "num_searchers": ("async_", "num_searchers"), "sync_period": ("async_", "sync_period"),
                "max_steps": ("training", "max_steps"), "model": ("model", "path"),
                "report_to": (None, "report_to")}.items():
            value = getattr(args, flag)
            if flag == "report_to" and value is not None:
                value = report_to_names(value)
            if value is not None:
                setattr(getattr(cfg, section) if section else cfg, name, value)
        validate(cfg)
        preflight(cfg)  # model folder, tokenizer, task data, output_dir: before anything starts
    except (ConfigError, FileNotFoundError) as e:
        print(f"tba-lab train: {_one_line(e)}", file=sys.stderr)
        return 2
    from tba_lab.actors.launcher import SearcherError

    try:
        s = train(cfg, progress=not args.no_progress, resume=bool(args.resume))
    except KeyboardInterrupt:
        print(f"\n{_interrupted_line(cfg.output_dir)}", file=sys.stderr)
        return 130
    except (ConfigError, FileNotFoundError) as e:  # a resume that does not fit its checkpoint
        print(f"tba-lab train: {_one_line(e)}", file=sys.stderr)
        return 2
    except SearcherError as e:
        print(f"tba-lab train: {e}", file=sys.stderr)
        _saved_after_error(cfg.output_dir)
        return 1
    except Exception:
        traceback.print_exc()
        _saved_after_error(cfg.output_dir)
        return 1
    print(summary_line(s, cfg.output_dir))
    return 0


def _interrupted_line(output_dir: str) -> str:
    """What ``tba-lab train`` says after Ctrl-C / SIGTERM: where the run was saved and the
    ``--resume`` command, or, when it was stopped before it wrote a checkpoint (while loading,
    say), that there is nothing to resume."""
    from tba_lab.checkpoint import checkpoint_path

    if checkpoint_path(output_dir).exists() and (Path(output_dir) / "config.yaml").exists():
        return (f"interrupted: policy, buffer, metrics and summary so far saved in {output_dir}; "
                f"continue with `tba-lab train --resume {output_dir}`")
    return (f"interrupted before the run saved a checkpoint: nothing to resume in {output_dir}; "
            f"start the run again")


def _saved_after_error(output_dir: str) -> None:
    """After a run stopped on an error: where its outputs are and how to continue it, when the
    trainer got as far as saving them (its ``summary.json`` names the error); else nothing."""
    from tba_lab.checkpoint import checkpoint_path

    try:
        saved = "error" in json.loads((Path(output_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        saved = False
    if not saved:  # the error came before the run's files existed (or they are another run's)
        return
    hint = (f"; its checkpoint continues with `tba-lab train --resume {output_dir}` once the cause "
            f"is fixed" if checkpoint_path(output_dir).exists() else "")
    print(f"tba-lab train: the run stopped on the error above; policy, buffer, metrics and "
          f"summary so far are saved in {output_dir}{hint}", file=sys.stderr)


def resume_config(run_dir: str) -> str:
    """``run_dir/config.yaml`` of a run to resume.

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``config.yaml`` (not a run's output_dir).
    """
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"--resume {run_dir}: no config.yaml there; give the output_dir "
                                f"of an earlier `tba-lab train` run")
    return str(path)


def summary_line(s: dict, output_dir: str) -> str:
    """The one line ``tba-lab train`` ends with, from a run's summary dict: the held-out
    metrics before -> after (those named in ``held_out_metrics``), updates, seconds, samples
    and staleness."""
    shown = ", ".join(f"{m} {_fmt(m, s.get(m + '_before'))} -> {_fmt(m, s.get(m + '_after'))}"
                      for m in s.get("held_out_metrics", []))
    return (f"{s['algo']}/{s['mode']} on {s['task']}: held-out {shown} in {s['trainer_steps']} "
            f"updates, {s['wall_seconds']:.0f} s ({s['samples_generated']} samples, staleness "
            f"mean {s['staleness_mean'] or 0:.2f} max {s['staleness_max'] or 0}); outputs in "
            f"{output_dir}")


def _fmt(metric: str, value) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" if metric == "accuracy" else f"{value:.3f}"


def _sft(args) -> int:
    from tba_lab.registry import TASKS

    kwargs = {k: v for k, v in dict(output_dir=args.output_dir, task_dir=args.task_dir,
                                    steps=args.steps, seed=args.seed).items() if v is not None}
    try:
        summary = TASKS.get(args.task).build_embedded(**kwargs)
    except NotImplementedError as e:
        print(f"tba-lab sft: {_one_line(e)}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


def _train_rm(args) -> int:
    from tba_lab.reward_model import train_reward_model

    kwargs = {k: v for k, v in dict(pairs_path=args.pairs, init_from=args.init_from,
                                    output_dir=args.output_dir, steps=args.steps,
                                    seed=args.seed).items() if v is not None}
    try:
        summary = train_reward_model(**kwargs)
    except (FileNotFoundError, ValueError) as e:
        print(f"tba-lab train-rm: {_one_line(e)}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


def _eval(args) -> int:
    from tba_lab.config import ConfigError, from_dict
    from tba_lab.eval import evaluate
    from tba_lab.models import load_policy
    from tba_lab.preflight import preflight
    from tba_lab.rollout.backend import make_backend
    from tba_lab.tasks import make_task

    try:
        if args.n < 1:
            raise ConfigError(f"-n {args.n}: give the number of held-out problems to score, >= 1")
        model = {"path": args.model or ""}  # "": the task's embedded model
        if args.max_new_tokens is not None:
            model["max_new_tokens"] = args.max_new_tokens
        cfg = from_dict({"model": model, "task": {"name": args.task, "test_path": args.data or ""}})
        preflight(cfg, splits=("test",), output=False)  # eval reads the test split, writes nothing
    except (ConfigError, FileNotFoundError) as e:
        print(f"tba-lab eval: {_one_line(e)}", file=sys.stderr)
        return 2
    import torch

    from tba_lab.actors.placement import available_cores

    # torch starts one thread per core of the machine; a container's CPU quota allows fewer
    torch.set_num_threads(min(torch.get_num_threads(), available_cores()))
    model, tokenizer = load_policy(cfg.model.path)
    model.eval()
    task = make_task(cfg)
    problems = task.load("test")[:args.n]
    metrics = evaluate(task, make_backend(cfg, model, tokenizer), problems, cfg.model.max_new_tokens)
    print(json.dumps({"model": cfg.model.path, "task": cfg.task.name, "n": len(problems), **metrics}))
    return 0


def _reproduce(args) -> int:
    from tba_lab.lab.reproduce import main as reproduce_main

    return reproduce_main(args)


def _course(args) -> int:
    import warnings

    from tba_lab.lab import assignments, site

    out = args.out or ("runs/site" if args.action == "site" else "runs/course")
    try:
        if args.action == "site":
            index = site.build_site(out, smoke=args.smoke, only=args.only, seed=args.seed)
            print(f"site: {index} (or serve it: python -m http.server -d {index.parent})")
            return 0
        if args.action == "release":
            for path in assignments.release(out, only=args.only, force=args.force):
                print(path)
            return 0
        with warnings.catch_warnings():  # nbgrader's gradebook sessions warn on every autograde
            warnings.filterwarnings("ignore", module="nbgrader")
            rows = assignments.grade(out, submitted=args.submitted, smoke=not args.full)
    except (FileExistsError, FileNotFoundError, ImportError) as e:  # what the user can fix
        print(f"tba-lab course {args.action}: {_one_line(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # nbgrader's or a notebook's own failure, with where its log is
        print(f"tba-lab course {args.action}: {e}", file=sys.stderr)
        return 1
    print(assignments.table(rows))
    print(f"wrote {Path(out) / 'grades.csv'}")
    not_graded = sorted({(r["student"], r["assignment"], r["status"]) for r in rows
                         if r["status"] != assignments.GRADED})
    for student, assignment, status in not_graded:  # graded 0 in grades.csv; the others were
        print(f"tba-lab course grade: {student} {assignment}: {status}", file=sys.stderr)
    return 1 if not_graded else 0


def _experiment(args) -> int:
    from tba_lab.lab.experiments import main as experiment_main

    return experiment_main(args)


def seed_arg(text: str) -> int:
    """argparse type of ``--seed``/``--seeds``: an int from 0 to ``tba_lab.config.SEED_MAX``."""
    from tba_lab.config import SEED_MAX

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{value}: give a seed from 0 to {SEED_MAX}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from tba_lab.registry import ALGORITHMS, TASKS

    p = argparse.ArgumentParser(prog="tba-lab", description=(
        "Teaching kit for asynchronous off-policy RL post-training with trajectory balance "
        "(TBA). Each command has its own --help; also runs as `python -m tba_lab`."))
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="RL post-training (async TBA by default)")
    t.add_argument("--config", help="YAML file with RunConfig fields (see tba_lab/config.py)")
    t.add_argument("--output-dir", help="where outputs go (default runs/default)")
    t.add_argument("--max-minutes", type=float, help="training wall-clock budget in minutes (default 9; evaluation before and after is extra)")
    t.add_argument("--max-steps", type=int, help="stop after this many trainer updates")
    t.add_argument("--seed", type=seed_arg)
    t.add_argument("--algo", choices=ALGORITHMS.names(), help="loss (default tb)")
    t.add_argument("--task", choices=TASKS.names(), help="task (default arithmetic)")
    t.add_argument("--mode", choices=["async", "sync"])
    t.add_argument("--num-searchers", type=int)
    t.add_argument("--sync-period", type=int, help="k: publish weights every k updates")
    t.add_argument("--model", help="starting policy folder (default: the embedded tiny model)")
    t.add_argument("--report-to", nargs="+", action="extend", metavar="NAME", help="live dashboards: tensorboard "
                   "(event files in OUTPUT_DIR/tensorboard), wandb, trackio, or none")
    t.add_argument("--no-progress", action="store_true", help="no progress bar, status lines or "
                   "interim evaluation lines: only warnings and the final summary line print")
    t.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its checkpoint.pt "
                   "(its config.yaml; flags such as --max-minutes or --max-steps extend it)")
    t.set_defaults(func=_train)
    s = sub.add_parser("sft", help="rebuild a task's embedded data and tiny model from a seed")
    s.add_argument("--task", choices=TASKS.names(), default="arithmetic",
                   help="whose embedded model to rebuild (default arithmetic)")
    s.add_argument("--output-dir", help="model folder (default: the task's, e.g. data/tiny-llama)")
    s.add_argument("--task-dir", help="task data folder (default: the task's, e.g. data/arithmetic)")
    s.add_argument("--steps", type=int)
    s.add_argument("--seed", type=seed_arg)
    s.set_defaults(func=_sft)
    m = sub.add_parser("train-rm", help="retrain the preference task's reward model "
                       "(Bradley-Terry loss on preference pairs)")
    m.add_argument("--pairs", help="pairs JSONL with prompt/chosen/rejected "
                   "(default data/preference/pairs.jsonl)")
    m.add_argument("--init-from", help="causal LM folder that starts the RM "
                   "(default data/tiny-llama-preference)")
    m.add_argument("--output-dir", help="RM folder (default data/tiny-rm-preference)")
    m.add_argument("--steps", type=int, help="optimiser steps (default: the embedded RM's)")
    m.add_argument("--seed", type=seed_arg, help="seed of the pair order and the score head (default 0)")
    m.set_defaults(func=_train_rm)
    e = sub.add_parser("eval", help="held-out metrics (greedy accuracy) of a saved policy")
    e.add_argument("--model", default=None, help="policy folder (default: the task's embedded model)")
    e.add_argument("--task", choices=TASKS.names(), default="arithmetic", help="task (default arithmetic)")
    e.add_argument("--data", help="held-out problems (default: the task's test split)")
    e.add_argument("-n", type=int, default=500, help="number of problems")
    e.add_argument("--max-new-tokens", type=int, help="response length cap (default: model.max_new_tokens)")
    e.set_defaults(func=_eval)
    r = sub.add_parser("reproduce", help="execute every course notebook with papermill, write report.md")
    r.add_argument("--smoke", action="store_true", help="each notebook's small SMOKE configuration (<= 60 s each)")
    r.add_argument("--output-dir", default="runs/reproduce", help="executed notebooks, figures, report.md")
    r.add_argument("--seed", type=seed_arg, default=0)
    r.add_argument("--only", nargs="+", action="extend", help="notebook name prefixes, e.g. 01 03")
    r.add_argument("--notebook-dir", help="folder of notebooks (default: the repository's notebooks/)")
    r.set_defaults(func=_reproduce)
    c = sub.add_parser("course", help="for instructors: release the assignments, grade "
                       "submissions (nbgrader), build the course site", description=(
                           "release: students' copies of notebooks/ without the solutions, in "
                           "OUT/release/; grade: autograde OUT/submitted/<student>/<NN_name>/ "
                           "(each run with SMOKE) and write OUT/grades.csv; site: execute the "
                           "notebooks and build a static site in OUT/html/. Needs "
                           'pip install -e ".[instructor]".'))
    c.add_argument("action", choices=["release", "grade", "site"])
    c.add_argument("--out", help="course folder (default runs/course; site: runs/site)")
    c.add_argument("--only", nargs="+", action="extend", help="release, site: notebook name prefixes, e.g. 01 02")
    c.add_argument("--force", action="store_true", help="release: overwrite OUT/release")
    c.add_argument("--submitted", help="grade: a folder <student>/<NN_name>/<NN_name>.ipynb "
                   "to copy into OUT/submitted first")
    c.add_argument("--full", action="store_true", help="grade: run submissions in full, not SMOKE")
    c.add_argument("--smoke", action="store_true", help="site: every notebook in SMOKE")
    c.add_argument("--seed", type=seed_arg, default=0, help="site: the notebooks' seed")
    c.set_defaults(func=_course)
    from tba_lab.lab.experiments import NAMES

    x = sub.add_parser("experiment", help="the paper's claims in miniature and the benchmarks, "
                       "over seeds: report.md, figures, results.json", description=(
                           "The paper's claims (off_policy, buffer, beta, scaling; all: the four) "
                           "and the benchmarks (race: async TBA against sync TB, GRPO and TRL; "
                           "race_preference, race_redteam: the trade-off races on the other "
                           "tasks; default: the default `tba-lab train`, --set other=COMMIT "
                           "beside another commit; per_update: accuracy per update at set "
                           "staleness), each over seeds into OUTPUT_DIR/NAME/."))
    x.add_argument("name", metavar="NAME", help=f"one of: {', '.join(NAMES)}")
    x.add_argument("--smoke", action="store_true", help="tiny settings (a few updates or seconds "
                   "per run; about 2-3 minutes for all four on 2 cores, 1-2 for a benchmark)")
    x.add_argument("--seeds", type=seed_arg, nargs="+", action="extend", help="seeds (default 0 1 2; off_policy 0-4, tune 100 101; with --smoke: 0)")
    x.add_argument("--output-dir", default="runs/experiments", help="NAME/report.md, figures, "
                   "results.json and runs/ go under it (default runs/experiments)")
    x.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE", help="change the "
                   "experiment's own settings (listed in its report header; --set may repeat), "
                   "e.g. eval_size=500 (held-out problems per evaluation), target=0.45 (scaling, "
                   "race: the held-out accuracy to reach), searchers=1,2,4,8 (scaling, on a "
                   "16-core machine), minutes=3 legs=a,b,c (race), "
                   "other=COMMIT (default), variants=tb,tb_stale10 updates=80 (per_update)")
    x.add_argument("--config", help="YAML of RunConfig fields applied to every run, e.g. "
                   "'training: {learning_rate: 1.25e-5}'; a field the experiment varies or "
                   "fixes itself is refused")
    x.add_argument("--report-only", action="store_true", help="run nothing: redo the analysis "
                   "and report.md of NAME from the runs in OUTPUT_DIR/NAME/results.json")
    x.set_defaults(func=_experiment)
    return p


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit code. SIGTERM (``kill``, a batch scheduler) unwinds
    like Ctrl-C while the command runs, so its cleanup runs too: ``subprocess.run`` kills the
    child it waits for (an experiment's ``tba-lab train``), papermill stops its kernel. Run by
    another kit process with ``TBA_LAB_PARENT_PID`` set (an experiment's runs), the command also
    gets SIGTERM when that process ends, SIGKILL included
    (:func:`tba_lab.actors.lifetime.exit_with_parent_from_env`)."""
    args = build_parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return args.func(args)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    exit_with_parent_from_env()
    try:
        return args.func(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
