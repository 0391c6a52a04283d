"""One GRPO arm, start to finish: the config checked and resolved, the training stream written, the engine run
(TRL in this process; verl prepared and, with ``engine.launch``, launched), the arm's summary written.

An arm is fresh by the one rule (crossed_rlvr/fingerprint.py), as a study's stage is: its summary records the
fingerprint of its settings (``config_sha256``) and the bytes of its final policy (``final_sha256``). A finished arm
with the same settings and its final policy intact is not trained again; one whose final policy was changed or
removed since is said in one line and trained again; a finished arm of other settings is refused unless
``overwrite=true``.
"""


from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from crossed_rlvr.conf.schema import TrainConf, conf_of
from crossed_rlvr.errors import RecipeError
from crossed_rlvr.files import atomic_write_json, json_lines, settings, tree_sha256
from crossed_rlvr.fingerprint import HashCache, fingerprint
from crossed_rlvr.layout import FOLDER_LOCK, TRACKING_LEDGER, ArmLayout
from crossed_rlvr.machine import machine, torch_threads
from crossed_rlvr.tracking import untracked
from crossed_rlvr.train.checks import CheckedTrainConf
from crossed_rlvr.train.recipe import training_rows, write_rows

FINAL_SHA256 = "final_sha256"  # a summary's record of its final policy's bytes


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


def final_sha256(arm: ArmLayout, final: Path) -> str | None:
    """All bytes of the arm's final policy, as a study's stamp hashes a stage's outputs; None where it is missing
    (never made, removed, or removed by another rank while read)."""
    cache = HashCache(arm.file_hashes)
    try:
        out = tree_sha256(final, cache) if final.is_dir() else None
    except FileNotFoundError:
        return None
    cache.save()
    return out


def clear_outputs(run_dir: Path) -> None:
    """An arm's outputs removed before it is trained again: its checkpoints and records go with its final policy
    (verl would resume from its own final step). The folder's lock and its wandb runs' ledger stay."""
    for entry in run_dir.iterdir():
        if entry.name in (FOLDER_LOCK, TRACKING_LEDGER.parts[0]):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def said(line: str) -> None:
    """One line on stderr, above a progress bar if one is drawn."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


def read_resolved(path: Path) -> TrainConf:
    """An arm's ``resolved_config.json`` typed again (a launch's door): the settings it holds, each other field at the
    schema's default (a file written before a setting existed reads its default). The watching settings it leaves
    out (``tracking.untracked``) and a TRL arm's unused eval section read their defaults: nothing that reads the file
    back plans with them."""
    return conf_of(TrainConf, {"tracking": {}, "eval": {}, **json.loads(path.read_text())})


def run_train(cfg: CheckedTrainConf) -> dict[str, Any]:
    """Train one arm. Its config is checked already: a :class:`CheckedTrainConf` is made only by the checks
    (``train.checks.check_train_conf``, or a study's arm plan), so an unchecked one does not type-check."""
    from crossed_rlvr.ranks import rank

    run_dir = Path(cfg.run_dir)
    arm = ArmLayout(run_dir)
    config, digest = fingerprint(resolved(cfg))  # its settings hold the numerics it runs already
    summary_path, final = arm.summary, arm.checkpoint(int(cfg.recipe.updates))
    first = rank() == 0  # on several processes (torchrun) rank 0 writes
    if summary_path.exists():
        old = json.loads(summary_path.read_text())
        if old.get("config_sha256") == digest:
            now = final_sha256(arm, final)
            if old.get(FINAL_SHA256) in (None, now):
                if now is not None and FINAL_SHA256 not in old:  # made by a launch since, or before it was
                    old[FINAL_SHA256] = now  # recorded: kept from now on
                    if first:
                        atomic_write_json(summary_path, old)
                return {**old, "skipped": True}
            said(f"crossed-train: {final}: changed or removed since the arm finished (its bytes differ from the "
                 f"sha256 its {summary_path.name} records); training the arm again")
            if first:
                clear_outputs(run_dir)
        elif not cfg.overwrite:
            raise RecipeError(f"{run_dir} holds a finished run of another config; pass overwrite=true or a new run_dir")
    rows = training_rows(cfg)  # the same stream on every rank; each trains on its share of every update
    if first:
        run_dir.mkdir(parents=True, exist_ok=True)
        arm.resolved_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        write_rows(arm.train_rows, rows)
    with torch_threads(cfg.threads):  # the machine's record below says the threads it trained with
        result = engine_run(cfg, rows, run_dir, digest)
        summary = {"arm": cfg.arm, "convention": cfg.convention.name, "seed": cfg.seed, "engine": cfg.engine.name,
                   "config_sha256": digest, **result, "machine": machine()}
    made = final_sha256(arm, final) if first else None  # none yet where verl's launch is left to the user
    if made is not None:
        summary[FINAL_SHA256] = made
    if first:
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def engine_run(cfg: CheckedTrainConf, rows: list[dict[str, Any]], run_dir: Path, digest: str) -> dict[str, Any]:
    """The engine's part: TRL trains here (its rewards and payload rates first and last read back from its metrics);
    verl's launch is prepared, and run where ``engine.launch`` says."""
    if cfg.engine.name != "trl":
        from crossed_rlvr.train.verl_engine import prepare_verl

        return prepare_verl(cfg, rows, run_dir)
    from crossed_rlvr.train.trl_engine import train_trl

    result = train_trl(cfg, rows, run_dir, digest)
    metrics = [row for row, _where in json_lines(ArmLayout(run_dir).metrics)]
    reward_key = f"rewards/{cfg.convention.name}_reward/mean"
    result["reward_first"] = metrics[0].get(reward_key)
    result["reward_last"] = metrics[-1].get(reward_key)
    result["payload_first"] = metrics[0].get("rewards/requested_payload/mean")
    result["payload_last"] = metrics[-1].get("rewards/requested_payload/mean")
    return result
