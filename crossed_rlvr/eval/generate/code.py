"""Responses to code tasks under both code requests (paper 001 App. D.3): every policy answers every task under
``fence`` (a ```` ```python ```` block) and ``begin_done`` (``[BEGIN]`` ... ``[DONE]``), ``samples`` samples each,
stored as response records, one file per policy and request (a finished file is kept, never generated again).

The question is the task's prompt as it stands, with no delimiter around it, so the question asks for no
convention; the request suffix does (:func:`crossed_rlvr.rewards.code.code_request`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.layout import EvalLayout
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.rewards.code import CODE_CONVENTIONS, code_request

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import EvalCommandConf, EvalConf
    from crossed_rlvr.eval.generate.engines import Generation, GenParams
    from crossed_rlvr.tasks.code import CodeTask

REQUESTS = tuple(CODE_CONVENTIONS)  # fence, begin_done
QUESTION = "Complete the following Python function.\n\n{prompt}"


def question(prompt: str) -> str:
    """The task as the user turn states it: the prompt's code as it stands, no delimiter around it (so the
    question itself asks for no convention; the request suffix does)."""
    return QUESTION.format(prompt=prompt.strip("\n"))


def gen_seed(task_id: str, request: str, sample: int, base: int) -> int:
    return int(hashlib.sha256(f"{base}/{task_id}/{request}/{sample}".encode()).hexdigest()[:8], 16)


def generate(policy: Policy, tasks: dict[str, CodeTask], samples: int, params: GenParams, seed: int,
             gen: EvalConf, task_name: str = "humaneval_plus", requests: tuple[str, ...] = REQUESTS
             ) -> dict[str, list[dict[str, Any]]]:
    """One policy's records per request. ``gen``: the ``eval`` settings (conf/eval/*.yaml) that choose the engine
    (transformers or vLLM)."""
    from tqdm import tqdm

    from crossed_rlvr.eval.generate.engines import load_backend, release
    from crossed_rlvr.prompts import render

    backend, tok = load_backend(policy.path, gen)
    jobs = []
    for tid, task in tasks.items():
        for request in requests:
            msgs = [{"role": "user", "content": f"{question(task.prompt)}\n{code_request(request)}"}]
            _text, ids, sha = render(tok, msgs)
            jobs += [(tid, request, s, ids, sha) for s in range(samples)]
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in requests}
    seeds = [gen_seed(tid, req, s, seed) for tid, req, s, _, _ in jobs]
    made: dict[int, Generation] = {}
    with tqdm(total=len(jobs), desc=f"code eval: {policy.name}", unit="resp") as bar:
        # every job to the engine at once: it keeps eval.batch_size rows decoding, refilled as rows end
        for k, finished in backend.stream([ids for *_, ids, _ in jobs], seeds, params):
            made[k] = finished
            bar.update(1)
    for k, ((tid, request, s, _ids, sha), sd) in enumerate(zip(jobs, seeds, strict=True)):
        g = made[k]  # the stream hands over every job
        out[request].append({
            "item_id": tid, "task": task_name, **policy.facts(), "request": request, "template": "original",
            "sample_idx": s,
            "gen_seed": sd, "prompt_sha256": sha, "response": g.text, "finish_reason": g.finish_reason,
            "prompt_tokens": g.prompt_tokens, "response_tokens": g.response_tokens, "reference": tid})
    release({policy.name: (backend, tok)})
    return out


def response_files(layout: EvalLayout, policy: str, requests: tuple[str, ...] = REQUESTS) -> dict[str, Path]:
    """A policy's response file per code request."""
    from crossed_rlvr.eval.generate.plan import cell_name

    return {r: layout.response_file(cell_name(policy, r, "original")) for r in requests}


def generate_missing(policies: list[Policy], layout: EvalLayout, tasks: dict[str, CodeTask], samples: int,
                     params: GenParams, seed: int, gen: EvalConf, task_name: str, requests: tuple[str, ...] = REQUESTS,
                     settings: dict[str, Any] | None = None) -> list[Path]:
    """Every policy's response files, generating those not on disk, made with other settings or changed since
    (each file's ``.meta.json`` holds the sha256 of what made it: policy name, request, tasks, samples, decoding,
    seed, ``settings`` and the policy's ``weights`` hash where it was taken, not its path: the same weights moved
    elsewhere are the same policy; and the file's own sha256, so a file edited or cut since is made again);
    returns them all. An interrupted run keeps the files it finished."""
    from crossed_rlvr.eval.generate.plan import RECORDS_SHA256, cell_name
    from crossed_rlvr.files import atomic_write_json, config_sha256, sha256_file
    from crossed_rlvr.records import write_responses

    files: list[Path] = []
    for policy in policies:
        name = policy.name
        targets = response_files(layout, name, requests)
        metas = {r: {"policy": name, "request": r, "task": task_name, "tasks": list(tasks),
                     "samples": int(samples), "seed": int(seed), "params": dict(vars(params)),
                     "weights": policy.weights or None, **(settings or {})} for r in requests}
        for meta in metas.values():
            meta["sha256"] = config_sha256(meta)
        missing = tuple(r for r in requests if not _made_with(targets[r], layout.response_meta(
            cell_name(name, r, "original")), metas[r]["sha256"]))
        if missing:
            layout.responses.mkdir(parents=True, exist_ok=True)
            for request, records in generate(policy, tasks, samples, params, seed, gen, task_name, missing).items():
                targets[request].unlink(missing_ok=True)
                write_responses(targets[request], records)
                atomic_write_json(layout.response_meta(cell_name(name, request, "original")),
                                  {**metas[request], RECORDS_SHA256: sha256_file(targets[request])})
        files += targets.values()
    return files


def _made_with(records: Path, meta: Path, sha256: str) -> bool:
    """Whether ``records`` is on disk, made with these settings, with the bytes it was written with (a file changed
    since is said, and made again)."""
    from crossed_rlvr.eval.generate.plan import changed_since_written, read_meta, say_redone

    made = read_meta(meta)
    if not records.exists() or made.get("sha256") != sha256:
        return False
    if changed_since_written(records, made):
        say_redone(records)
        return False
    return True


def run_code_eval(cfg: EvalCommandConf) -> dict[str, Any]:
    """``crossed-eval`` on a code task (``task.source=evalplus``): every policy under every code request, into
    ``run_dir/responses``; ``run.json`` names the dataset file and its sha256, so ``crossed-score`` runs the
    programs on that dataset's tests. Returns a summary per response file."""
    from dataclasses import replace

    from crossed_rlvr.eval.generate.device import resolved
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.eval.generate.plan import config_policies
    from crossed_rlvr.files import atomic_write_json
    from crossed_rlvr.tasks.code import task_dataset

    layout = EvalLayout(Path(cfg.run_dir))
    ds = task_dataset(cfg.task)
    here = resolved(cfg.eval)
    gen = replace(cfg.eval, device=str(here.device), dtype=str(here.dtype))
    policies = config_policies(cfg)  # read once, here
    params = GenParams(float(gen.temperature), float(gen.top_p), int(gen.max_new_tokens), int(gen.context_limit))
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(layout.manifest, {"task": str(cfg.task.name), "code_dataset": str(Path(ds.path).resolve()),
                                        "dataset_sha256": ds.sha256, "tasks": list(ds.tasks)})
    files = generate_missing(policies, layout, ds.tasks, int(cfg.samples), params,
                             int(gen.base_seed), gen, str(cfg.task.name), tuple(cfg.requests),
                             settings={"dataset_sha256": ds.sha256})
    summary = {f.stem: {"records": sum(1 for _ in f.open())} for f in files}
    layout.summary.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary

