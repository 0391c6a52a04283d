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

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_text
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.names import PolicyName, policy_name
from crossed_rlvr.rewards.code import (
    CODE_CONVENTIONS,
    code_request,
    lenient_block,
    payload_present,
    solution,
    strict_block,
)
from crossed_rlvr.rewards.conventions import pair_label

REQUESTS = tuple(CODE_CONVENTIONS)  # fence, begin_done
QUESTION = "Complete the following Python function.\n\n{prompt}"
READERS = ("strict", "lenient")


def question(prompt: str) -> str:
    """The task as the user turn states it: the prompt's code as it stands, no delimiter around it (so the
    question itself asks for no convention; the request suffix does)."""
    return QUESTION.format(prompt=prompt.strip("\n"))


def gen_seed(task_id: str, request: str, sample: int, base: int) -> int:
    return int(hashlib.sha256(f"{base}/{task_id}/{request}/{sample}".encode()).hexdigest()[:8], 16)


def generate(policy: str, path: str, tasks: dict[str, Any], samples: int, params: Any, seed: int,
             gen: Any) -> list[dict[str, Any]]:
    """``gen``: the ``eval`` settings (conf/eval/*.yaml) that choose the engine (transformers or vLLM)."""
    from tqdm import tqdm

    from crossed_rlvr.eval.generate.engines import load_backend, release
    from crossed_rlvr.prompts import render

    name = PolicyName.parse(policy)
    if policy == "initial":
        convention, train_seed = "initial", None
    elif name is not None and (not name.checkpoint or name.step is not None):
        convention, train_seed = name.convention, name.seed
    else:
        raise CrossedError(f"policy name {policy!r}: expected initial or <method>-<convention>/s<seed>")
    backend, tok = load_backend(path, gen)
    batch_size = int(gen.batch_size)
    jobs = []
    for tid, task in tasks.items():
        for request in REQUESTS:
            msgs = [{"role": "user", "content": f"{question(task.prompt)}\n{code_request(request)}"}]
            _text, ids, sha = render(tok, msgs)
            for s in range(samples):
                jobs.append((tid, request, s, ids, sha))
    out: list[dict[str, Any]] = []
    step = max(1, batch_size)
    with tqdm(total=len(jobs), desc=f"code eval: {policy}", unit="resp") as bar:
        for start in range(0, len(jobs), step):
            chunk = jobs[start:start + step]
            seeds = [gen_seed(tid, req, s, seed) for tid, req, s, _, _ in chunk]
            gens = backend.generate([ids for *_, ids, _ in chunk], seeds, params)
            for (tid, request, s, _ids, sha), g, sd in zip(chunk, gens, seeds):
                out.append({"item_id": tid, "task": "humaneval_plus", "policy": policy,
                            "training_convention": convention, "train_seed": train_seed, "request": request, "template": "original", "sample_idx": s,
                            "gen_seed": sd, "prompt_sha256": sha, "response": g.text,
                            "finish_reason": g.finish_reason, "prompt_tokens": g.prompt_tokens,
                            "response_tokens": g.response_tokens, "reference": tid})
            bar.update(len(chunk))
    release({policy: (backend, tok)})
    return out


def score(records: list[dict[str, Any]], ds: Any, slots: int, cache_dir: Path | None) -> pd.DataFrame:
    """One row per response: payloads of both conventions, each reader's program and whether it passed base and
    plus (``<reader>.correct``) and base alone (``<reader>.base``)."""
    from tqdm import tqdm

    from crossed_rlvr.eval.score.execution import Executor, code_sha256
    from crossed_rlvr.sandbox.bwrap import Sandbox

    rows, programs = [], []
    for r in records:
        task = ds.tasks[r["item_id"]]
        row = {k: r[k] for k in ("item_id", "task", "policy", "request", "template", "sample_idx", "finish_reason")}
        for conv in REQUESTS:
            row[f"payload.{conv}"] = payload_present(conv, r["response"])
        blocks = {"strict": strict_block(r["request"], r["response"]),
                  "lenient": lenient_block(r["request"], r["response"])}
        for reader, code in blocks.items():
            program = None if code is None else solution(task.prompt, task.entry_point, code)
            row[f"{reader}.answer"] = None if program is None else code_sha256(program)
            if program is not None:
                programs.append((r["item_id"], program))
            row[f"_{reader}_program"] = program
        rows.append(row)
    unique = list(dict.fromkeys(programs))
    with Sandbox(slots=slots) as box:
        ex = Executor(ds, box, cache_dir)
        with tqdm(total=2 * len(unique), desc="code eval: sandbox", unit="part") as bar:
            verdicts = dict(zip(unique, ex.score(unique, progress=bar.update)))
    for row in rows:
        for reader in READERS:
            program = row.pop(f"_{reader}_program")
            v = verdicts.get((row["item_id"], program)) if program is not None else None
            row[f"{reader}.base"] = bool(v and v["base"].status == "pass")
            row[f"{reader}.correct"] = bool(v and v["base"].status == "pass" and v["plus"].status == "pass")
            row[f"{reader}.status"] = "none" if v is None else f"{v['base'].status}/{v['plus'].status}"
        req, other = row["request"], next(c for c in REQUESTS if c != row["request"])
        row["requested_payload"] = row[f"payload.{req}"]
        row["category"] = {(True, True): "both", (True, False): "requested_only", (False, True): "other_only",
                           (False, False): "neither"}[(row[f"payload.{req}"], row[f"payload.{other}"])]
    return pd.DataFrame(rows)


def cells(scores: pd.DataFrame, samples: int) -> pd.DataFrame:
    """Per (policy, request): payload rate, strict and lenient pass@1 (base + plus; and base alone), pass@k for
    k = 1, 2, 4, ... up to the samples drawn (Eq. 11, averaged over tasks), and γ = lenient − strict pass@1."""
    from crossed_rlvr.analysis.coverage import pass_at_k_items

    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 100, 200) if k <= samples} | {samples})
    out = []
    for (policy, request), g in scores.groupby(["policy", "request"], sort=True):
        row: dict[str, Any] = {"policy": policy, "request": request, "n_tasks": g["item_id"].nunique(),
                               "n_responses": len(g), "payload": g["requested_payload"].mean()}
        for cat in ("requested_only", "other_only", "both", "neither"):
            row[f"cat.{cat}"] = (g["category"] == cat).mean()
        per_task = g.groupby("item_id").agg(n=("sample_idx", "size"), strict=("strict.correct", "sum"),
                                            lenient=("lenient.correct", "sum"), strict_base=("strict.base", "sum"),
                                            lenient_base=("lenient.base", "sum"))
        for reader in READERS:
            for k in ks:
                row[f"{reader}.pass@{k}"] = float(np.mean(pass_at_k_items(per_task[reader], per_task["n"], k)))
            row[f"{reader}.base.pass@1"] = float(np.mean(pass_at_k_items(per_task[f"{reader}_base"], per_task["n"], 1)))
        row["gamma"] = row["lenient.pass@1"] - row["strict.pass@1"]
        out.append(row)
    return pd.DataFrame(out)


def contrasts(scores: pd.DataFrame, samples: int, resamples: int = 10_000, rng_seed: int = 0) -> pd.DataFrame:
    """Paper 001 App. D.3's quantities, per request, with paired item-bootstrap intervals over tasks:

    - ``gamma``: the formatting gap of each policy, lenient − strict pass@1 (γ₀ for the initial policy);
    - ``gain_strict`` / ``gain_lenient``: a policy's pass@1 minus the initial policy's, on the same tasks;
    - ``coverage``: the change in pass@N (N the samples drawn) against the initial policy, with the tasks lost
      and gained and the exact McNemar test on those two counts (App. C.3);
    - ``interaction_payload`` / ``interaction_strict`` / ``interaction_lenient``: the crossed interaction (paper 001
      eq. 1) of arms trained on the two code conventions (``<method>-fence/s<seed>`` and
      ``<method>-begin_done/s<seed>``, same checkpoint), 100 × [(F_f − B_f) − (F_b − B_b)] in percentage points
      per task, for the payload rate and strict and lenient pass@1.
    """
    from crossed_rlvr.analysis.bootstrap import paired_mean_intervals
    from crossed_rlvr.analysis.coverage import coverage_change, pass_at_k_items

    per = scores.groupby(["policy", "request", "item_id"]).agg(
        n=("sample_idx", "size"), strict=("strict.correct", "sum"), lenient=("lenient.correct", "sum"),
        payload=("requested_payload", "sum"))
    rows: list[dict[str, Any]] = []

    def add(name: str, policy: str, request: str, diffs: np.ndarray, **extra: Any) -> None:
        est, lo, hi = paired_mean_intervals(diffs[None, :], np.ones((1, len(diffs))), resamples, rng_seed)
        rows.append({"name": name, "policy": policy, "request": request, "estimate": float(est[0]),
                     "ci_low": float(lo[0]), "ci_high": float(hi[0]), "n_items": len(diffs),
                     "n_resamples": resamples, "rng_seed": rng_seed, **extra})

    for (policy, request), cell in per.groupby(level=["policy", "request"]):
        g = cell.droplevel(["policy", "request"])
        add("gamma", policy, request, ((g["lenient"] - g["strict"]) / g["n"]).to_numpy(float))
        if policy == "initial" or ("initial", request) not in per.index.droplevel("item_id"):
            continue
        base = per.loc[("initial", request)]
        tasks = g.index.intersection(base.index)
        for reader in READERS:
            diff = (g.loc[tasks, reader] / g.loc[tasks, "n"] - base.loc[tasks, reader] / base.loc[tasks, "n"])
            add(f"gain_{reader}", policy, request, diff.to_numpy(float))
        cov = (pass_at_k_items(g.loc[tasks, "strict"], g.loc[tasks, "n"], samples)
               - pass_at_k_items(base.loc[tasks, "strict"], base.loc[tasks, "n"], samples))
        lost, gained, p = coverage_change(base.loc[tasks, "strict"].to_numpy(), g.loc[tasks, "strict"].to_numpy())
        add("coverage", policy, request, np.asarray(cov, float), lost=lost, gained=gained, mcnemar_p=p)
    for pair, (fence, begin_done) in code_pairs(per.index.get_level_values("policy").unique()).items():
        cells = {(pol, req): per.loc[(pol, req)] for pol in (fence, begin_done) for req in REQUESTS
                 if (pol, req) in per.index.droplevel("item_id")}
        if len(cells) < 4:
            continue
        tasks = sorted(set.intersection(*(set(c.index) for c in cells.values())))
        for measure in ("payload", "strict", "lenient"):
            rate = {key: (c.loc[tasks, measure] / c.loc[tasks, "n"]).to_numpy(float) for key, c in cells.items()}
            diff = 100 * ((rate[(fence, "fence")] - rate[(begin_done, "fence")])
                          - (rate[(fence, "begin_done")] - rate[(begin_done, "begin_done")]))
            add(f"interaction_{measure}", pair, pair_label("fence", "begin_done"), diff)
    return pd.DataFrame(rows)


def code_pairs(policies: Any) -> dict[str, tuple[str, str]]:
    """The crossed pairs among ``policies``: {``grpo/s1``: (``grpo-fence/s1``, ``grpo-begin_done/s1``)}, matched on
    method, seed and checkpoint."""
    named = {p: PolicyName.parse(str(p)) for p in policies}
    slots: dict[tuple[str, int, str], dict[str, str]] = {}
    for policy, name in named.items():
        if name is not None and name.convention in REQUESTS:
            slots.setdefault((name.method, name.seed, name.checkpoint), {})[name.convention] = str(policy)
    return {PolicyName(method, "fence", seed, ckpt).pair: (convs["fence"], convs["begin_done"])
            for (method, seed, ckpt), convs in sorted(slots.items()) if len(convs) == 2}


def report(table: pd.DataFrame, samples: int, dataset: str) -> str:
    lines = ["# Code tasks evaluated crossed", "",
             f"HumanEval+ tasks ({dataset}), {samples} samples per task, policy and request; programs run in the "
             "sandbox on the base and plus tests (EvalPlus's rules). Strict: the first closed block in the "
             "requested delimiter; lenient: any block, else the response. γ = lenient − strict pass@1.", "",
             "| policy | request | payload | strict pass@1 | lenient pass@1 | γ | strict pass@" + str(samples)
             + " | lenient pass@" + str(samples) + " |", "|---|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['policy']} | {r['request']} | {r['payload']:.3f} | {r['strict.pass@1']:.4f} | "
                     f"{r['lenient.pass@1']:.4f} | {r['gamma']:+.4f} | {r[f'strict.pass@{samples}']:.4f} | "
                     f"{r[f'lenient.pass@{samples}']:.4f} |")
    return "\n".join(lines) + "\n"


def contrast_section(con: pd.DataFrame) -> str:
    lines = ["## Gaps, gains and coverage (App. D.3)", "",
             "Paired bootstrap over tasks (95% percentile intervals). gamma: lenient − strict pass@1; gain: pass@1 "
             "minus the initial policy's; coverage: pass@N minus the initial policy's, with the tasks lost and "
             "gained and McNemar's exact p; interaction_*: the crossed interaction of arms trained on the two code "
             "conventions, in percentage points.", "",
             "| contrast | policy | request | estimate | 95% interval | lost / gained (p) |", "|---|---|---|---|---|---|"]
    for r in con.to_dict("records"):
        cov = f"{r['lost']} / {r['gained']} ({r['mcnemar_p']:.3g})" if r["name"] == "coverage" else ""
        lines.append(f"| {r['name']} | {r['policy']} | {r['request']} | {r['estimate']:+.4f} | "
                     f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] | {cov} |")
    return "\n".join(lines) + "\n"


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
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.records import read_responses, write_responses
    from crossed_rlvr.tasks.code import HUMANEVAL_PLUS, load_code_dataset, subset

    ds = load_code_dataset(dataset or HUMANEVAL_PLUS)
    tasks = subset(ds, list(ds.tasks)[:n_tasks] if n_tasks else list(ds.tasks))
    out.mkdir(parents=True, exist_ok=True)
    gen = eval_settings(engine, batch_size=batch_size, context_limit=context_limit)
    params = GenParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                       context_limit=int(gen.context_limit))
    records: list[dict[str, Any]] = []
    for name, path in policies.items():
        target = out / "responses" / f"{name.replace('/', '_')}.jsonl"
        if not target.exists():  # a finished policy's responses are kept, never generated again
            target.parent.mkdir(parents=True, exist_ok=True)
            write_responses(target, generate(name, path, tasks.tasks, samples, params, seed, gen))
        records += read_responses([target], prompt_names=True).records  # code requests are prompt names here
    scores = score(records, tasks, slots, Path(cache_dir) if cache_dir else None)
    scores.to_parquet(out / "scores.parquet", index=False)
    table = cells(scores, samples)
    table.to_csv(out / "cells.csv", index=False, float_format="%.10g")
    con = contrasts(scores, samples, resamples, seed)
    con.to_csv(out / "contrasts.csv", index=False, float_format="%.10g")
    atomic_write_text(out / "report.md", report(table, samples, Path(ds.path).name) + "\n" + contrast_section(con))
    (out / "summary.json").write_text(json.dumps({"tasks": list(tasks.tasks), "dataset_sha256": ds.sha256,
                                                  "samples": samples, "max_new_tokens": max_new_tokens,
                                                  "temperature": temperature, "top_p": top_p, "seed": seed,
                                                  "engine": engine,
                                                  "policies": policies}, indent=1))
    return table


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
                    engine=pick(args.engine, "eval"), context_limit=preset["context_limit"])
    except ValueError:
        print("crossed_rlvr.study.code_eval: --policy must be NAME=PATH", file=sys.stderr)
        return 2
    except CrossedError as err:
        print(f"crossed_rlvr.study.code_eval: {err}", file=sys.stderr)
        return 2
    print(report(table, pick(args.samples, "samples"), "HumanEval+").rstrip())
    print(args.out / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
