"""The SFT jobs: the warm start of a tiny initial policy, or content-matched SFT arms.

- warm start (``crossed-sft mode=warmstart``): build a fresh tiny model (``model.tiny``), or take a given one (``warmstart.base``),
  and fine-tune it on arithmetic
  training items whose prompts carry the hash or boxed request (all three wordings) and whose targets
  end in the requested marker, so that the initial policy follows both requests like an instruct
  model, optionally stopped in a request-following band measured by sampling (``warmstart.band``,
  ``sft/band.py``). Written to ``model.path``.
- arms (``crossed-sft mode=arms``): from the initial policy ``model.path``, the marker arm and the unchanged-marker
  control for every seed (App. D.2.1); prompts carry no format instruction and the two target sets
  are byte-identical except the final marker (checked row by row before anything is written).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import SFTCommandConf, conf_of, given_of
from crossed_rlvr.errors import ConfigError
from crossed_rlvr.files import json_lines, settings
from crossed_rlvr.layout import SFT_SUMMARY, RunLayout
from crossed_rlvr.names import policy_name
from crossed_rlvr.rewards.conventions import PARTNER
from crossed_rlvr.sft.pairs import target, write_pairs
from crossed_rlvr.sft.trainer import SFTConfig, train_sft
from crossed_rlvr.task_sources import task_kind
from crossed_rlvr.tasks.code import load_code_dataset, train_file


@dataclass(frozen=True)
class SFTJob:
    """One crossed-sft job, typed once where it starts (``crossed-sft``, the study's initial stage, an SFT worker):
    the command's config as its schema's dataclasses, the one arm a worker trains (``only``), and the config as it
    was given, which its wandb runs record (and their ids are made from)."""

    cfg: SFTCommandConf
    given: dict[str, Any]
    only: str | None = None

    @classmethod
    def of(cls, cfg: Mapping[str, Any] | SFTJob) -> SFTJob:
        """The job of a Hydra node or of the dict a study wrote (or a worker read from its spec), read by key once,
        here; a job typed already is passed on."""
        if isinstance(cfg, SFTJob):
            return cfg
        given = given_of(cfg)
        only = given.get("only")
        return cls(conf_of(SFTCommandConf, {k: v for k, v in given.items() if k != "only"}), given,
                   None if only is None else str(only))


def train_items(cfg: SFTCommandConf) -> list[dict[str, Any]]:
    from crossed_rlvr.tasks.training import train_items as build

    return build(cfg.task, cfg.train_items.n, cfg.train_items.seed)


def warmstart_target(item: dict[str, Any], request: str, follow_rate: float, rng: random.Random) -> tuple[str, str]:
    """The target's ending: the requested marker with probability ``follow_rate``, else the partner
    request's marker or a plain sentence (half each; a request without a partner: the sentence). Returns
    (completion, ending)."""
    if rng.random() < follow_rate:
        return target(item, request), request
    if rng.random() < 0.5 and (other := PARTNER.get(request)):
        return target(item, other), other
    body = str(item.get("solution", "")).rstrip()
    return f"{body}\nThe answer is {item['reference']}.", "plain"


def sft_config(cfg: SFTCommandConf, seed: int, report_to: str = "none") -> SFTConfig:
    s = cfg.sft
    return SFTConfig(epochs=float(s.epochs), learning_rate=float(s.learning_rate), lr_scheduler=s.lr_scheduler,
                     warmup_ratio=float(s.warmup_ratio), effective_batch=int(s.effective_batch),
                     per_device_batch=int(s.per_device_batch), max_length=int(s.max_length),
                     weight_decay=float(s.weight_decay), seed=seed, deepspeed=s.deepspeed, bf16=bool(s.bf16),
                     report_to=report_to)


def tracked_sft(job: SFTJob, name: str, job_type: str, base: str | Path, rows: list[dict[str, Any]], out: Path,
                seed: int, callbacks: list[Any] | None = None) -> dict[str, Any]:
    """One SFT model in its own wandb run (name = the policy, group = the study); folders of the runs
    sit in ``run_dir/wandb``, never inside the model directory that is replaced when it is saved."""
    from crossed_rlvr.tracking import start_run

    cfg = job.cfg
    run = start_run(cfg.tracking, name=name, job_type=job_type, run_dir=Path(cfg.run_dir), study=cfg.study,
                    config={**job.given, "seed": seed})
    try:
        return train_sft(base, rows, out, sft_config(cfg, seed, "wandb" if run is not None else "none"), callbacks)
    finally:
        if run is not None:
            run.finish()


def warmstart_base(cfg: SFTCommandConf) -> str | Path:
    """The model the warm start fine-tunes: ``warmstart.base`` (a given model: local folder, converted GGUF,
    hub name), else a fresh tiny model built from ``model.tiny``."""
    if cfg.warmstart.base:
        return str(cfg.warmstart.base)
    from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model

    if not cfg.model.tiny:
        raise ConfigError(f"warmstart.base: mode=warmstart of model={cfg.model.name} needs the model to fine-tune; "
                          "only the tiny model is built from scratch")
    return build_tiny_model(RunLayout(Path(cfg.run_dir)).fresh, TinyConfig(**settings(cfg.model.tiny)))


def band_callbacks(cfg: SFTCommandConf, base: str | Path) -> list[Any]:  # Any: transformers' callbacks
    """The request-following band's stopping callback (``warmstart.band``), measured on the task's dev items."""
    band = cfg.warmstart.band
    if band.every <= 0:
        return []
    from crossed_rlvr.eval.generate.device import placed
    from crossed_rlvr.eval.generate.engines import GenParams
    from crossed_rlvr.policies.loading import load_tokenizer
    from crossed_rlvr.sft.band import band_callback
    from crossed_rlvr.tasks.build import build_items

    items = build_items(dataclasses.replace(cfg.task, split="dev"))[: band.n_items]
    if not items:
        raise ConfigError(f"warmstart.band needs dev items; task={cfg.task.name} has none")
    ev = cfg.eval  # sampled as the evaluation samples: greedy decoding overstates request-following
    params = GenParams(float(ev.temperature), float(ev.top_p), int(ev.max_new_tokens), int(ev.context_limit))
    gen = placed(ev)
    bf16 = gen.dtype == "bfloat16"  # sampled in the evaluation's precision (unset: bf16 on a GPU)
    snapshot = None
    if ev.linear == "onednn" and gen.device == "cpu":  # and through the evaluation's packed linear layers
        import torch

        from crossed_rlvr.eval.generate.snapshot import Snapshot

        snapshot = Snapshot(torch.bfloat16 if bf16 else torch.float32, pack=True, batch_hint=int(ev.batch_size),
                            attention=ev.attention)
    return [band_callback(band, items, load_tokenizer(base), list(cfg.warmstart.requests), params,
                          int(ev.base_seed), int(ev.batch_size), cfg.model.system, bf16, snapshot,
                          bool(ev.shared_prefix))]


def code_warmstart_rows(cfg: SFTCommandConf, follow: float, rng: random.Random) -> list[dict[str, Any]]:
    """A code task's warm start (paper 001 App. D.3's conventions): each training task asked for in one code
    request, in turn, with its canonical program as the target in the requested delimiter; with probability
    ``1 - follow_rate`` the target is in the partner delimiter or a bare program instead (half each), like a
    model that follows format requests only partly. Content-matched: one program, whichever delimiter wraps it."""
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS, code_request
    from crossed_rlvr.tasks.code import question

    ds = load_code_dataset(train_file(cfg.task))
    ids = list(ds.tasks)[:n] if (n := cfg.train_items.n) else list(ds.tasks)
    requests = list(cfg.warmstart.requests)
    rows = []
    for k, tid in enumerate(ids):
        task, request = ds.tasks[tid], requests[k % len(requests)]
        template = rng.choice(list(cfg.warmstart.templates))
        program = task.reference.strip("\n")
        ending = request
        if follow < 1.0 and rng.random() >= follow:
            ending = next(c for c in CODE_CONVENTIONS if c != request) if rng.random() < 0.5 else "plain"
        completion = program if ending == "plain" else CODE_CONVENTIONS[ending].wrap(program)
        content = f"{question(task.prompt)}\n{code_request(request, template)}"
        rows.append({"messages": [{"role": "user", "content": content}], "prompt": content, "request": request,
                     "template": template, "completion": completion, "ending": ending, "item_id": tid})
    return rows


def warmstart(given: Mapping[str, Any] | SFTJob) -> dict[str, Any]:
    """``crossed-sft mode=warmstart``: the initial policy at ``model.path`` (``given``: the job, or its config typed
    here by ``SFTJob.of``)."""
    job = SFTJob.of(given)
    cfg = job.cfg
    out = Path(str(cfg.model.path))
    if (out / SFT_SUMMARY).exists():
        return {"skipped": str(out)}
    base = warmstart_base(cfg)
    rng = random.Random(int(cfg.warmstart.seed))
    follow = cfg.warmstart.follow_rate
    if not 0.0 <= follow <= 1.0:
        raise ConfigError(f"warmstart.follow_rate={follow} must lie in [0, 1]")
    kind = task_kind(cfg.task)  # its rows; the band measures answer payloads only
    rows = kind.step("warmstart_rows")(cfg, follow, rng)
    return tracked_sft(job, "initial", "sft-warmstart", base, rows, out, int(cfg.warmstart.seed),
                       band_callbacks(cfg, base) if kind.band else None)


def answer_warmstart_rows(cfg: SFTCommandConf, follow: float, rng: random.Random) -> list[dict[str, Any]]:
    """An answer task's warm start: each training item asked for in one request, in turn, in a wording drawn from
    ``rng``, its target the worked solution ending in the requested convention (or, with probability
    ``1 - follow``, another ending: ``warmstart_target``)."""
    rows = []
    for k, it in enumerate(train_items(cfg)):
        request = cfg.warmstart.requests[k % len(cfg.warmstart.requests)]
        template = rng.choice(list(cfg.warmstart.templates))
        completion, ending = warmstart_target(it, request, follow, rng) if follow < 1.0 else (target(it, request), request)
        rows.append({"prompt": it["question"], "request": request, "template": template, "completion": completion,
                     "ending": ending})
    return rows


def pair_files(cfg: SFTCommandConf) -> tuple[Path, Path]:
    run = RunLayout(Path(cfg.run_dir))
    return run.sft_pairs(cfg.arm), run.sft_pairs(cfg.control)


def write_arm_pairs(cfg: SFTCommandConf) -> int:
    data_a, data_b = pair_files(cfg)
    return write_pairs(train_items(cfg), data_a, data_b, cfg.arm, cfg.control)


def arms(given: Mapping[str, Any] | SFTJob) -> dict[str, Any]:
    """Every arm x seed, or only ``only`` (one arm, e.g. ``sft-hash/s83``, from pairs already written:
    arms trained side by side in processes of their own, crossed_rlvr/sft/worker.py)."""
    job = SFTJob.of(given)
    cfg, only = job.cfg, job.only
    run = RunLayout(Path(cfg.run_dir))
    data_a, data_b = pair_files(cfg)
    if only and data_a.exists() and data_b.exists():
        n = sum(1 for _ in data_a.open())
    else:
        n = write_arm_pairs(cfg)
    results: dict[str, Any] = {"pairs": n}
    for seed in cfg.seeds:
        for conv, data in ((cfg.arm, data_a), (cfg.control, data_b)):
            name = policy_name("sft", conv, int(seed))
            if only and only != name:
                continue
            out = run.sft_policy(conv, int(seed))
            if (out / SFT_SUMMARY).exists():
                results[name] = {"skipped": str(out)}
                continue
            rows = [row for row, _where in json_lines(data)]
            results[name] = tracked_sft(job, name, "sft", str(cfg.model.path), rows, out, int(seed))
    return results


