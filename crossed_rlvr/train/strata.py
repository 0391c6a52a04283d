"""Frozen difficulty strata of the training rows, for the stratified prompt proposal (paper 001 App. D.1).

App. D.1 samples training prompts from three frozen difficulty strata with stratum weights t and v;
it does not say how difficulty was measured. Ours, documented and frozen before training: each
training item is answered ``k`` times by the *initial* policy (the evaluator's backend: transformers
on a CPU, vLLM on a GPU; T and top-p of the ``eval`` group, per-item seeds), every response is read by
Math-Verify (convention-neutral: it reads the whole response, so neither arm's marker is favoured),
half of the samples under each of the hash and boxed requests, and the item's pass rate places it in

    ``s1_easy``  (every sample correct),  ``s2_medium`` (some),  ``s3_hard`` (none),

named so that their sorted order is the order of App. D.1's vectors t = (2302, 3282, 1912) and
v = (24334, 34693, 40973): the frozen proposal over-samples the hard stratum (v_3/t_3 = 1.6 x) and
the importance weight P_i/Q_i undoes it.

A user who has their own strata gives a file (``recipe.proposal.strata_file``): JSON Lines with
``item_id`` and ``stratum`` for every training item. Either way the file is frozen into the arm's
data and its sha256 is part of both arms' configs, so the matched-arm check covers it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import atomic_write_jsonl, json_lines, sha256_file
from crossed_rlvr.rewards.conventions import MARKER_PAIR

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import EvalConf

NAMES = ("s1_easy", "s2_medium", "s3_hard")


class StrataError(CrossedError, ValueError):
    pass


def stratum_of(correct: int, k: int) -> str:
    return NAMES[0] if correct == k else NAMES[2] if correct == 0 else NAMES[1]


def read_strata(path: Path) -> dict[str, str]:
    """item_id -> stratum from a JSON Lines file; every bad line is refused with file, line and field."""
    out: dict[str, str] = {}
    if not Path(path).is_file():
        raise StrataError(f"{path}: no such strata file (recipe.proposal.strata_file)")
    for row, where in json_lines(path, StrataError):
        n = where.line
        if not isinstance(row, dict):
            raise StrataError(f"{path}:{n}: expected an object with item_id and stratum")
        for field in ("item_id", "stratum"):
            if not isinstance(row.get(field), str | int) or isinstance(row.get(field), bool) or row[field] == "":
                raise StrataError(f"{path}:{n}: field {field!r} is missing or not a string")
        iid = str(row["item_id"])
        if iid in out and out[iid] != str(row["stratum"]):
            raise StrataError(f"{path}:{n}: item_id {iid!r} repeated with another stratum")
        out[iid] = str(row["stratum"])
    if not out:
        raise StrataError(f"{path}: empty strata file")
    return out


def attach_strata(items: list[dict[str, Any]], strata: dict[str, str], source: str) -> list[dict[str, Any]]:
    missing = [str(it["item_id"]) for it in items if str(it["item_id"]) not in strata]
    if missing:
        raise StrataError(f"{source}: no stratum for {len(missing)} of {len(items)} training items "
                          f"(first: {', '.join(missing[:3])})")
    return [{**it, "stratum": strata[str(it["item_id"])]} for it in items]


def estimate_strata(items: list[dict[str, Any]], policy: str, gen: EvalConf, k: int, out: Path,
                    system: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Answer every item ``k`` times with the initial policy, read each answer with Math-Verify, and
    write the strata file (``item_id``, ``stratum``, ``correct``, ``k``). Returns counts per stratum."""
    from tqdm import tqdm

    from crossed_rlvr.eval.generate.engines import GenParams, load_backend, release
    from crossed_rlvr.eval.generate.plan import generate
    from crossed_rlvr.eval.score.panel import Item, score_many

    if k < 2 or k % 2:
        raise StrataError(f"recipe.proposal.estimate.samples={k}: needs an even number >= 2 (half per request)")
    params = GenParams(float(gen.temperature), float(gen.top_p), int(gen.max_new_tokens), int(gen.context_limit))
    loaded = {policy: load_backend(policy, gen)}
    backend, tokenizer = loaded[policy]
    jobs = [(j, it, s, MARKER_PAIR[s % 2]) for j, it in enumerate(items) for s in range(k)]
    texts: dict[tuple[int, int], str] = {}
    try:
        bs = int(gen.batch_size)
        with tqdm(total=len(jobs), desc="strata: initial policy samples", unit="resp", disable=not progress) as bar:
            for request in MARKER_PAIR:  # even samples under the hash request, odd under the boxed one
                todo = [(j, it, s) for j, it, s, req in jobs if req == request]
                for outs in generate(backend, tokenizer, todo, request, "original", system, int(gen.base_seed), bs,
                                     params):
                    for at, _seed, _sha, made in outs:  # as the engine finishes them: ``at`` is the todo's position
                        j, _it, s = todo[at]
                        texts[(j, s)] = made.text
                    bar.update(len(outs))
    finally:
        release(loaded)
    rows = score_many([Item(texts[(j, s)], str(it["reference"]), req) for j, it, s, req in jobs],
                      progress=progress)
    correct: dict[str, int] = {}
    for row, (_, it, _, _) in zip(rows, jobs, strict=True):
        correct[str(it["item_id"])] = correct.get(str(it["item_id"]), 0) + bool(row.get("math_verify.correct"))
    records = [{"item_id": str(it["item_id"]), "stratum": stratum_of(correct[str(it["item_id"])], k),
                "correct": correct[str(it["item_id"])], "k": k} for it in items]
    atomic_write_jsonl(out, records)
    counts = {name: sum(r["stratum"] == name for r in records) for name in NAMES}
    return {"file": str(out), "sha256": sha256_file(out), "counts": counts, "k": k, "policy": policy}
