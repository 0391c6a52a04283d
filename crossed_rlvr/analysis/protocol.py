"""The protocol card (paper 002 §4.1): what a reader needs to reproduce a study's numbers, gathered from the
files the pipeline already writes -- the scores' manifest, each response cell's settings (``.meta.json``),
the evaluation run's ``run.json`` (item hashes, policy weight hashes, machines) -- and the analysis's own
seeds, versions and commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from crossed_rlvr.layout import ArmLayout, EvalLayout
from crossed_rlvr.machine import machine, source_commit

DECODING = ("backend", "dtype", "temperature", "top_p", "max_new_tokens", "context_limit", "base_seed", "batch_size")


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def response_files(scores_path: str | Path) -> list[Path]:
    """The response files a scores table was made from (its manifest's inputs)."""
    from crossed_rlvr.eval.score.scoring import manifest_path

    return [Path(i["path"]) for i in _read(manifest_path(Path(scores_path))).get("inputs", [])]


def collect(scores_path: str | Path, scores: pd.DataFrame, n_resamples: int, rng_seed: int) -> dict[str, Any]:
    """Everything the card states, as a JSON-able dict (also written into the analysis manifest)."""
    inputs = response_files(scores_path)
    decoding: dict[str, dict[str, Any]] = {}  # the decoding settings as JSON -> those settings and their cells
    runs: dict[str, dict[str, Any]] = {}  # an evaluation's run.json -> its content
    for f in inputs:
        meta = _read(EvalLayout.meta_of(f))
        gen = meta.get("generation") or {}
        if gen:
            key = json.dumps({k: gen.get(k) for k in DECODING}, sort_keys=True)
            decoding.setdefault(key, {"settings": {k: gen.get(k) for k in DECODING}, "samples": meta.get("samples"),
                                      "cells": 0})["cells"] += 1
        run = EvalLayout.of_response_file(f).manifest
        if run.exists():
            runs[str(run)] = _read(run)
    items = {name: sha for r in runs.values() for name, sha in r.get("items", {}).items()}
    splits = {name: sp for r in runs.values() for name, sp in r.get("splits", {}).items()}
    weights = {name: w for r in runs.values() for name, w in r.get("policies", {}).items()}
    machines = [m for r in runs.values() for m in r.get("machines", [])]
    seeds = sorted({int(s) for s in scores["train_seed"].dropna().unique()}) if "train_seed" in scores else []
    here = machine()
    return {
        "policies": sorted(scores["policy"].unique()),
        "weights": weights,
        "tasks": {t: int(g["item_id"].nunique()) for t, g in scores.groupby("task")},
        "items_sha256": items,
        "splits": splits,
        "training_rows": training_rows(weights),
        "decoding": list(decoding.values()),
        "training_seeds": seeds,
        "generation_seeds": "item seed = base_seed + item id (+ 10^7 per further sample); "
                            f"{scores['gen_seed'].nunique() if 'gen_seed' in scores else 0} distinct",
        "bootstrap": {"resamples": n_resamples, "rng_seed": rng_seed},
        "generation_machines": machines,
        "analysis_machine": here,
        "commit": source_commit(),
        "responses_from_several_machines": len({json.dumps(_kind(m), sort_keys=True) for m in machines}) > 1,
    }


def training_rows(weights: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per trained policy, the task rows its arm trained on, from the arm's config that the evaluation recorded
    beside the policy's weights (``run_config``; an evaluation written before it was recorded: the arm that holds
    the checkpoint, ``<arm>/checkpoints/step-N``): the frozen rows file and its sha256, or the split that made them
    (the arithmetic probe's seed)."""
    out: dict[str, dict[str, Any]] = {}
    for name, w in weights.items():
        arm = ArmLayout.holding(Path(str(w.get("path", ""))))
        recorded = w.get("run_config") or (arm.resolved_config if arm is not None else None)
        cfg = _read(Path(str(recorded))) if recorded else {}
        task = cfg.get("task")
        if task:
            out[name] = {"task": task.get("name"), "train_rows": task.get("train_rows"),
                         "sha256": task.get("train_rows_sha256"), "dev_items": task.get("dev_items"),
                         "seed": task.get("seed"), "items": (cfg.get("train_items") or {}).get("n")}
    return out


def _kind(m: dict[str, Any]) -> dict[str, Any]:
    """What makes two machines' float results differ: CPU kernels, threads, GPU, library versions. Under portable
    numerics the CPU model does not (every x86-64 CPU with AVX2 runs the same kernels: crossed_rlvr/numerics.py)."""
    kind = {k: m.get(k) for k in ("cpu", "threads", "gpu", "versions")}
    mode = (m.get("numerics") or {}).get("mode")
    if mode == "portable":
        kind["cpu"] = "portable"
    return kind


def _numerics(m: dict[str, Any]) -> str:
    """The CPU kernels a machine ran: portable (AVX2 on any x86-64 CPU) or the machine's own, with the
    instruction sets it offers (a native run's numbers are those of CPUs that offer the same)."""
    n = m.get("numerics")
    if not n:
        return "CPU numerics not recorded"
    offered = ", ".join(n.get("instruction_sets") or []) or "unknown"
    kernels = f"torch {n['torch_kernels']} kernels; " if n.get("torch_kernels") else ""
    if n.get("mode") == "portable":
        return f"portable CPU numerics ({kernels}AVX2 on any x86-64 CPU; this one offers {offered})"
    return f"native CPU numerics ({kernels}this CPU's own: {offered})"


def _machine_line(m: dict[str, Any]) -> str:
    gpu = m.get("gpu")
    acc = (f"{gpu['count']} × {gpu['name']} (CUDA {gpu.get('cuda')}, driver {gpu.get('driver') or 'unknown'})"
           if gpu else "no GPU")
    threads = ", ".join(f"{k}={v}" for k, v in sorted((m.get("threads") or {}).items())) or "default threads"
    return (f"{m.get('cpu', '?')} ({m.get('cpu_count', '?')} cores; {threads}); {acc}; {_numerics(m)}; "
            f"Python {m.get('python', '?')}")


def protocol_section(card: dict[str, Any]) -> str:
    if not card:
        return "_No protocol recorded (the scores' manifest and the evaluation run's files were not found)._"
    lines = []
    w = card.get("weights", {})
    lines.append("- **Policies**: " + "; ".join(
        f"`{p}`" + (f" (weights sha256 `{w[p]['weights_sha256'][:16]}…`, `{w[p]['path']}`)" if p in w else "")
        for p in card["policies"]))
    lines.append("- **Items**: " + "; ".join(f"{t}: {n} items" for t, n in card["tasks"].items()) + (
        " (" + "; ".join(f"`{k}` sha256 `{v[:16]}…`" for k, v in card["items_sha256"].items()) + ")"
        if card["items_sha256"] else ""))
    for name, sp in (card.get("splits") or {}).items():
        rows = sp.get("train_rows") or {}
        lines.append(f"- **Split of `{name}`**: {sp.get('source')} test from {sp.get('test')}; training rows from "
                     + (f"`{rows.get('file')}` (sha256 `{str(rows.get('sha256'))[:16]}…`)" if rows else
                        f"{sp.get('train')} less {sp.get('dev', {}).get('n')} dev rows (seed {sp.get('dev', {}).get('seed')})"))
    frozen: dict[tuple[str, str], list[str]] = {(r["train_rows"], r["sha256"]): [] for r in (card.get("training_rows") or {}).values() if r["train_rows"]}
    for p, r in (card.get("training_rows") or {}).items():
        if r["train_rows"]:
            frozen[(r["train_rows"], r["sha256"])].append(p)
    for (file, sha), pols in frozen.items():
        lines.append(f"- **Training rows**: `{file}` (sha256 `{str(sha)[:16]}…`), for {len(pols)} polic"
                     f"{'y' if len(pols) == 1 else 'ies'}: {', '.join(f'`{p}`' for p in sorted(pols))}")
    for d in card["decoding"] or [{}]:
        s = d.get("settings", {})
        lines.append(("- **Decoding**" + (f" ({d['cells']} cells)" if len(card["decoding"]) > 1 else "") + ": ")
                     + (f"{s.get('backend')} {s.get('dtype')}, T = {s.get('temperature')}, top-p = {s.get('top_p')}, "
                        f"max new tokens {s.get('max_new_tokens')} (context {s.get('context_limit')}), "
                        f"{d.get('samples')} sample(s) per item, base seed {s.get('base_seed')}, batch "
                        f"{s.get('batch_size')}" if s else "not recorded (imported outputs)"))
    lines.append(f"- **Seeds**: training {', '.join(map(str, card['training_seeds'])) or '—'}; generation: "
                 f"{card['generation_seeds']}; bootstrap: {card['bootstrap']['resamples']:,} resamples, RNG seed "
                 f"{card['bootstrap']['rng_seed']}")
    machines = card["generation_machines"]
    lines.append("- **Generated on**: " + ("; ".join(_machine_line(m) for m in machines) or "not recorded")
                 + (" — **the responses come from several machine configurations**; float results of sampling "
                    "differ across them" if card["responses_from_several_machines"] else ""))
    lines.append("- **Analysed on**: " + _machine_line(card["analysis_machine"]))
    v = card["analysis_machine"].get("versions", {})
    lines.append("- **Versions**: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)))
    lines.append(f"- **Commit**: `{card['commit']}`")
    if card.get("left_out"):  # crossed-analyze --allow-partial: a partial design's incomplete policies
        lines.append("- **Left out (partial design, `--allow-partial`)**: " + "; ".join(card["left_out"]))
    return "\n".join(lines)
