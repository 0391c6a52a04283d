"""``python -m crossed_rlvr.study.code_eval``: policies evaluated crossed on code tasks, scored by execution in the
sandbox (paper 001 App. D.3).

    python -m crossed_rlvr.study.code_eval --policy initial=runs/study/models/initial --tasks 40 --samples 8 \\
        --out runs/code-smollm

Every policy answers every task under both code requests (``fence``: a ```` ```python ```` block;
``begin_done``: ``[BEGIN]`` ... ``[DONE]``; :mod:`crossed_rlvr.rewards.code`), ``--samples`` samples each,
stored as response records (``responses.jsonl``, the response-record contract). Each response is then read by the
code readers (strict: the first closed block in the requested delimiter; lenient: any block, else the response)
and the program run on the task's base and plus tests in the sandbox. Written beside: ``scores.parquet`` (one row
per response), ``cells.csv`` (per policy and request: payload rate, strict and lenient pass@1, pass@k by the
unbiased estimator of Eq. 11 for k up to the samples drawn, the formatting gap γ = lenient − strict pass@1) and
``contrasts.csv`` (γ per policy, the gains and the pass@N coverage change against the initial policy, with
paired bootstrap intervals over tasks and McNemar's test) and ``report.md``. A finished stage is reused: responses already on disk are not generated again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.analysis.report.code import report
from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import AnalysisLayout, EvalLayout, RunLayout
from crossed_rlvr.names import policy_name
from crossed_rlvr.tasks.code import CodeDataset


def eval_settings(name: str = "cpu", **changes: Any) -> Any:
    """The ``eval`` config group's settings (``cpu``: transformers; ``vllm``: vLLM on GPUs) with changes."""
    from omegaconf import OmegaConf

    from crossed_rlvr.conf import group_file

    base = OmegaConf.load(group_file("eval", name))
    return OmegaConf.merge(base, {k: v for k, v in changes.items() if v is not None})


def study_policies(run_dir: str | Path, step: int | None = None) -> dict[str, str]:
    """A finished study's initial policy and every GRPO arm's final (or ``step``'s) checkpoint: App. D.3 evaluates
    the GSM8K-trained arms on code without training anything here."""
    run = RunLayout(Path(run_dir).expanduser().resolve())
    out = {"initial": str(run.initial)}
    for arm in run.arms():
        steps = arm.checkpoint_steps()
        chosen = [k for k in steps if k == step] if step is not None else steps[-1:]
        if chosen:
            out[policy_name("grpo", arm.convention, arm.seed)] = str(arm.checkpoint(chosen[0]))
    missing = [p for p in out.values() if not Path(p).is_dir()]
    if missing or len(out) == 1:
        raise CrossedError(f"{run}: no initial policy or no arm checkpoint {'at step ' + str(step) if step else ''} "
                           f"({', '.join(missing) or 'train/<convention>/s<seed>/checkpoints/step-N'})")
    return out


# App. D.3 with B.4's decoding: every task, 200 samples (the paper's gaps are not multiples of 1/164 or 1/378, so
# it drew more than 64; 200 is EvalPlus's usual count), T = 0.6, top-p 0.95, an 8,192-token budget, vLLM
D3 = {"tasks": None, "samples": 200, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8192,
      "context_limit": 10240, "eval": "vllm"}


def run(policies: dict[str, str], out: Path, n_tasks: int | None, samples: int, max_new_tokens: int,
        temperature: float, seed: int, slots: int, batch_size: int | None = None, dataset: str | None = None,
        cache_dir: str | None = None, resamples: int = 10_000, top_p: float = 0.95, engine: str = "cpu",
        context_limit: int | None = None) -> pd.DataFrame:
    from crossed_rlvr.analysis.report.code import write_code_analysis
    from crossed_rlvr.eval.generate.code import generate_missing
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.eval.score.code import score_code
    from crossed_rlvr.records import read_responses
    from crossed_rlvr.tasks.code import HUMANEVAL_PLUS, load_code_dataset, subset

    ds = load_code_dataset(dataset or HUMANEVAL_PLUS)
    tasks = subset(ds, list(ds.tasks)[:n_tasks] if n_tasks else list(ds.tasks))
    layout = EvalLayout(out)
    gen = eval_settings(engine, batch_size=batch_size, context_limit=context_limit)
    params = GenParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                       context_limit=int(gen.context_limit))
    files = generate_missing(policies, layout, tasks.tasks, samples, params, seed, gen, task_name(ds))
    records = read_responses(files, prompt_names=True).records  # code requests are prompt names here
    scores = score_code(records, tasks, slots, Path(cache_dir) if cache_dir else None)
    scores.to_parquet(layout.scores, index=False)
    return write_code_analysis(scores, out, Path(ds.path).name, resamples, seed, about={
        "tasks": list(tasks.tasks), "dataset_sha256": ds.sha256, "max_new_tokens": max_new_tokens,
        "temperature": temperature, "top_p": top_p, "seed": seed, "engine": engine, "policies": policies})


def task_name(ds: CodeDataset) -> str:
    """The records' task: ``mbpp_plus`` by the dataset's task ids, ``humaneval`` for HumanEval's own file (its
    test scripts), else ``humaneval_plus``."""
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

    try:
        policies = dict(p.split("=", 1) for p in args.policy)
        if args.from_study:
            policies = {**study_policies(args.from_study, args.step), **policies}
        if not policies:
            raise CrossedError("name the policies: --policy NAME=PATH, or --from-study RUN_DIR")
        table = run(policies, args.out, pick(args.tasks, "tasks"), pick(args.samples, "samples"),
                    pick(args.max_new_tokens, "max_new_tokens"), pick(args.temperature, "temperature"), args.seed,
                    args.slots, args.batch_size, args.dataset, top_p=pick(args.top_p, "top_p"),
                    engine=pick(args.engine, "eval"), context_limit=pick(None, "context_limit"))
    except ValueError:
        print("crossed_rlvr.study.code_eval: --policy must be NAME=PATH", file=sys.stderr)
        return 2
    except CrossedError as err:
        print(f"crossed_rlvr.study.code_eval: {err}", file=sys.stderr)
        return 2
    print(report(table, pick(args.samples, "samples"), "HumanEval+").rstrip())
    print(AnalysisLayout(args.out).report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
