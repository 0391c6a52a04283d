"""``python -m crossed_rlvr.study.code_eval``: policies evaluated crossed on code tasks, scored by execution in the
sandbox (paper 001 App. D.3).

    python -m crossed_rlvr.study.code_eval --policy initial=runs/study/models/initial --tasks 40 --samples 8 \\
        --out runs/code-smollm

A thin command over the study's code steps (``study/code_steps.py``): the same evaluate -> score -> analyze,
stage cache and run folder as a code study, over policies given by folder (``--policy NAME=PATH``) or a
finished study's (``--from-study``) instead of arms trained here. Every policy answers every task under both code
requests (``fence``: a ```` ```python ```` block; ``begin_done``: ``[BEGIN]`` ... ``[DONE]``;
:mod:`crossed_rlvr.rewards.code`), ``--samples`` samples each, stored as response records
(``eval/responses/``, the response-record contract). Each response is then read by the code readers (strict: the
first closed block in the requested delimiter; lenient: any block, else the response) and the program run on the
task's base and plus tests in the sandbox (``eval/scores.parquet``, one row per response). ``analysis/`` holds
``cells.csv`` (per policy and request: payload rate, strict and lenient pass@1, pass@k by the unbiased estimator of
Eq. 11 for k up to the samples drawn, the formatting gap γ = lenient − strict pass@1), ``contrasts.csv`` (γ per
policy, the gains and the pass@N coverage change against the initial policy, with paired bootstrap intervals over
tasks and McNemar's test) and ``report.md``. A finished stage is reused (``stages/``), and responses already on
disk are not generated again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from crossed_rlvr.analysis.report.code import report
from crossed_rlvr.conf.schema import StudyConf
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import ArmLayout, RunLayout
from crossed_rlvr.names import INITIAL, PolicyName
from crossed_rlvr.study.code_steps import CodeSteps
from crossed_rlvr.study.plan import Policy, policies_of
from crossed_rlvr.study.stamps import StageCache
from crossed_rlvr.tasks.code import CodeDataset

STAGES = ("eval", "score", "analyze")


class CodeEvaluation:
    """The study's steps' view of a run (``steps.StepState``) without a study: a config and a run folder with its
    stage cache, no initial policy to build and no arms to train."""

    def __init__(self, cfg: StudyConf, console: Console | None = None) -> None:
        self.cfg = cfg
        self.layout = RunLayout(Path(cfg.run_dir))
        self.console = console
        self.stage = StageCache(self.layout.root, STAGES, self.say)
        self.stamps = self.stage.stamps
        self.study_name = str(cfg.tracking.group or self.layout.root.resolve().name)

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)


class NoStudyPolicies(CrossedError):
    """``--from-study`` names a folder without a finished arms stage, or arms without the asked checkpoint."""


def study_policies(run_dir: str | Path, step: int | None = None) -> dict[str, str]:
    """A finished study's initial policy and every arm's final policy, as its arms stage recorded them (or, with
    ``step``, each GRPO arm's checkpoint at that update): App. D.3 evaluates the GSM8K-trained arms on code
    without training anything here."""
    from crossed_rlvr.study.stamps import Stamps

    run = RunLayout(Path(run_dir).expanduser().resolve())
    stamps = Stamps(run.root)
    initial, arms = stamps.read("initial"), stamps.read("arms")
    if initial is None or arms is None:
        raise NoStudyPolicies(f"{run.root}: no finished initial and arms stages (no {stamps.path('initial')} or "
                              f"{stamps.path('arms')}): run the study first")
    out = {INITIAL: str(initial["info"]["path"])}
    for policy in policies_of(arms["info"]):
        path = Path(policy.path)
        if step is not None:
            arm = ArmLayout.holding(path)
            if arm is None or not arm.checkpoint(step).is_dir():
                raise NoStudyPolicies(f"{run.root}: {policy.name} has no checkpoint at step {step} "
                                      f"(its checkpoints: {arm.checkpoint_steps() if arm else 'none'})")
            path = arm.checkpoint(step)
        out[policy.name] = str(path)
    missing = [p for p in out.values() if not Path(p).is_dir()]
    if missing:
        raise NoStudyPolicies(f"{run.root}: the study's policies are gone: {', '.join(missing)}")
    return out


def given_policy(name: str, path: str) -> Policy:
    """A policy named on the command line: the facts its name carries (``grpo-hash/s83``), else its own name."""
    if name == INITIAL:
        return Policy.initial(path)
    parsed = PolicyName.parse(name)
    if parsed is None:
        return Policy(name, path, name, None, name)
    return Policy(name, path, parsed.convention, parsed.seed, parsed.method)


# App. D.3 with B.4's decoding: every task, 200 samples (the paper's gaps are not multiples of 1/164 or 1/378, so
# it drew more than 64; 200 is EvalPlus's usual count), T = 0.6, top-p 0.95, an 8,192-token budget, vLLM
D3 = {"tasks": None, "samples": 200, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8192,
      "context_limit": 10240, "eval": "vllm"}


def code_eval_config(out: Path, n_tasks: int | None, samples: int, max_new_tokens: int, temperature: float,
                     seed: int, batch_size: int | None = None, dataset: str | None = None, resamples: int = 10_000,
                     top_p: float = 0.95, engine: str = "cpu", context_limit: int | None = None) -> StudyConf:
    """The study config the code steps read: the code task (HumanEval+ shipped; ``dataset``: an EvalPlus file,
    HumanEval's own or MBPP+), the ``eval`` group's settings for ``engine``, both code requests, ``seed`` for
    the samples and the bootstrap."""
    from hydra import compose, initialize_config_module

    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    task = "humaneval_plus"
    if dataset is not None:
        from crossed_rlvr.tasks.code import load_code_dataset

        task = task_name(load_code_dataset(dataset))
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name="crossed_study", overrides=[f"task={task}", f"eval={engine}"])
    cfg.run_dir = str(out)
    cfg.task.path = None if dataset is None else str(Path(dataset).expanduser().resolve())
    ev, g = cfg.evaluation, cfg.eval
    ev.requests, ev.templates, ev.samples = list(CODE_CONVENTIONS), ["original"], samples
    ev.n_items, ev.threads = n_tasks, None
    g.temperature, g.top_p, g.max_new_tokens, g.base_seed = temperature, top_p, max_new_tokens, seed
    if batch_size is not None:
        g.batch_size = batch_size
    if context_limit is not None:
        g.context_limit = context_limit
    cfg.analysis.resamples, cfg.analysis.rng_seed = resamples, seed
    return cfg  # a DictConfig typed by the StudyConf schema


def run(policies: dict[str, str], out: Path, n_tasks: int | None, samples: int, max_new_tokens: int,
        temperature: float, seed: int, slots: int, batch_size: int | None = None, dataset: str | None = None,
        cache_dir: str | None = None, resamples: int = 10_000, top_p: float = 0.95, engine: str = "cpu",
        context_limit: int | None = None, console: Console | None = None) -> pd.DataFrame:
    """Every policy under both code requests, scored in the sandbox and analysed, in ``out``; returns the cells."""
    cfg = code_eval_config(out, n_tasks, samples, max_new_tokens, temperature, seed, batch_size, dataset,
                           resamples, top_p, engine, context_limit)
    state = CodeEvaluation(cfg, console)
    steps = CodeSteps(slots, Path(cache_dir) if cache_dir else None)
    state.layout.root.mkdir(parents=True, exist_ok=True)
    steps.generate(state, [given_policy(name, path) for name, path in policies.items()])
    steps.score(state)
    steps.analyze(state, [])
    return pd.read_csv(state.layout.analysis_files.cells)


def task_name(ds: CodeDataset) -> str:
    """The code task a dataset file is: ``mbpp_plus`` by its task ids, ``humaneval`` for HumanEval's own file
    (its test scripts), else ``humaneval_plus``."""
    if ds.flavour == "mbpp":
        return "mbpp_plus"
    return "humaneval" if any(t.test for t in ds.tasks.values()) else "humaneval_plus"


def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.limits import BIG, DECODING, SEED, Parser, add_number

    ap = Parser(prog="crossed_rlvr.study.code_eval", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", default=[], help="NAME=PATH (a model folder); repeatable")
    ap.add_argument("--from-study", default=None, help="a finished study's run_dir: its initial policy and arms")
    add_number(ap, "--step", 0, BIG, default=None, why="0 is the initial weights, saved as step-0",
               help="with --from-study: the arms' checkpoint (default last)")
    ap.add_argument("--preset", choices=["d3"], default=None,
                    help="d3: App. D.3 with B.4's decoding (every task, 200 samples, T=0.6, 8192 tokens, vLLM)")
    ap.add_argument("--out", required=True, type=Path)
    add_number(ap, "--tasks", 1, BIG, default=None, help="the first N tasks (default 40; d3: all)")
    add_number(ap, "--samples", 1, 10_000, default=None, help="samples per task, policy and request (default 8)")
    add_number(ap, "--max-new-tokens", *(lambda r: (r.low, r.high))(DECODING["max_new_tokens"]), default=None)
    add_number(ap, "--temperature", *(lambda r: (r.low, r.high))(DECODING["temperature"]), integer=False,
               why=DECODING["temperature"].why, default=None)
    add_number(ap, "--top-p", 0.0, 1.0, integer=False, low_open=True, default=None)
    ap.add_argument("--eval", dest="engine", choices=["cpu", "vllm", "vllm_cpu"], default=None)
    add_number(ap, "--seed", *SEED, default=0)
    add_number(ap, "--slots", 1, 256, default=2, help="sandbox runs at once")
    add_number(ap, "--batch-size", 1, 100_000, default=None)
    ap.add_argument("--dataset", default=None, help="EvalPlus dataset file (default: the shipped HumanEval+)")
    args = ap.parse_args(argv)
    preset = D3 if args.preset == "d3" else {"tasks": 40, "samples": 8, "temperature": 0.8, "top_p": 0.95,
                                             "max_new_tokens": 384, "context_limit": None, "eval": "cpu"}

    def pick(flag: Any, key: str) -> Any:
        return preset[key] if flag is None else flag

    given = [p.split("=", 1) for p in args.policy]
    if any(len(p) != 2 or not all(p) for p in given):
        print("crossed_rlvr.study.code_eval: --policy must be NAME=PATH", file=sys.stderr)
        return 2
    try:
        policies = dict(given)
        if args.from_study:
            policies = {**study_policies(args.from_study, args.step), **policies}
        if not policies:
            raise CrossedError("name the policies: --policy NAME=PATH, or --from-study RUN_DIR")
        table = run(policies, args.out, pick(args.tasks, "tasks"), pick(args.samples, "samples"),
                    pick(args.max_new_tokens, "max_new_tokens"), pick(args.temperature, "temperature"), args.seed,
                    args.slots, args.batch_size, args.dataset, top_p=pick(args.top_p, "top_p"),
                    engine=pick(args.engine, "eval"), context_limit=pick(None, "context_limit"),
                    console=Console(stderr=True))
    except CrossedError as err:
        print(f"crossed_rlvr.study.code_eval: {err}", file=sys.stderr)
        return 2
    print(report(table, pick(args.samples, "samples"), "HumanEval+").rstrip())
    print(RunLayout(args.out).report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
