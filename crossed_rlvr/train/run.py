"""One GRPO arm, start to finish: the config checked and resolved, the training stream written, the engine run
(TRL in this process; verl prepared and, with ``engine.launch``, launched), the arm's summary written.

A finished arm with the same resolved config is not trained again; a finished arm of another config is refused
unless ``overwrite=true``.
"""


from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import TrainConf, conf_of
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import config_sha256, json_lines, settings
from crossed_rlvr.layout import ArmLayout
from crossed_rlvr.tracking import untracked
from crossed_rlvr.train.checks import CheckedTrainConf
from crossed_rlvr.train.recipe import training_rows, write_rows


def resolved(cfg: CheckedTrainConf) -> dict[str, Any]:
    """The arm's settings as ``resolved_config.json`` and its hash hold them."""
    data = untracked(settings(cfg))
    # TRL with validation off: its settings change nothing (verl always validates, at the start and the end)
    if cfg.engine.name == "trl" and not cfg.validation.every:
        data.pop("validation", None)
        data.pop("eval", None)
    # when SLURM warns before a time limit: a launch setting, which changes no weights
    engine = data.get("engine") or {}
    if "slurm_warning_s" in engine:
        data["engine"] = {k: v for k, v in engine.items() if k != "slurm_warning_s"}
    return data


def read_resolved(path: Path) -> TrainConf:
    """An arm's ``resolved_config.json`` typed again (a launch's door): the settings it holds, each other field at the
    schema's default (a file written before a setting existed reads its default). The watching settings it leaves
    out (``tracking.untracked``) and a TRL arm's unused eval section read their defaults: nothing that reads the file
    back plans with them."""
    return conf_of(TrainConf, {"tracking": {}, "eval": {}, **json.loads(path.read_text())})


def run_train(cfg: CheckedTrainConf) -> dict[str, Any]:
    """Train one arm. Its config is checked already: a :class:`CheckedTrainConf` is made only by the checks
    (``train.checks.check_train_conf``, or a study's arm plan), so an unchecked one does not type-check."""
    run_dir = Path(cfg.run_dir)
    arm = ArmLayout(run_dir)
    config = resolved(cfg)
    digest = config_sha256(config)
    summary_path = arm.summary
    if summary_path.exists():
        old = json.loads(summary_path.read_text())
        if old.get("config_sha256") == digest:
            return {**old, "skipped": True}
        if not cfg.overwrite:
            raise RecipeError(f"{run_dir} holds a finished run of another config; pass overwrite=true or a new run_dir")
    from crossed_rlvr.ranks import rank

    first = rank() == 0  # on several processes (torchrun) rank 0 writes
    rows = training_rows(cfg)  # the same stream on every rank; each trains on its share of every update
    if first:
        run_dir.mkdir(parents=True, exist_ok=True)
        arm.resolved_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_rows(arm.train_rows, rows)
    if cfg.engine.name == "trl":
        from crossed_rlvr.train.trl_engine import train_trl

        result = train_trl(cfg, rows, run_dir, digest)
        metrics = [row for row, _where in json_lines(arm.metrics)]
        reward_key = f"rewards/{cfg.convention.name}_reward/mean"
        result["reward_first"] = metrics[0].get(reward_key)
        result["reward_last"] = metrics[-1].get(reward_key)
        result["payload_first"] = metrics[0].get("rewards/requested_payload/mean")
        result["payload_last"] = metrics[-1].get("rewards/requested_payload/mean")
    else:
        from crossed_rlvr.train.verl_engine import prepare_verl

        result = prepare_verl(cfg, rows, run_dir)
    from crossed_rlvr.machine import machine

    summary = {"arm": cfg.arm, "convention": cfg.convention.name, "seed": cfg.seed, "engine": cfg.engine.name,
               "config_sha256": digest, **result, "machine": machine()}
    if first:
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


