"""wandb runs as verl and TRL users expect them: one run per arm or stage, named, grouped, resumable.

Every command and study stage opens its run through :func:`start_run`: name = the arm or stage, group =
the study (or ``tracking.group``), job type = the stage, the resolved Hydra config as the run config,
and an id of its own (``claim_run_id``). Every start of a stage is a new wandb run, so a stage redone,
or run again with other settings, never writes a second history under an id that already has one; the
one exception is explicit: a verl arm relaunched onto its own checkpoint with the same settings resumes
its run (``resume=allow``). The ids are recorded in ``<run_dir>/wandb/crossed-runs.jsonl``. A new arm
never lands in the previous arm's run (``reinit=finish_previous``). ``offline_runs`` reads the offline
run folders back (wandb 0.31 ships no Python reader of its transaction log).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from crossed_rlvr.files import config_sha256, settings
from crossed_rlvr.layout import TRACKING_LEDGER


class TrackingConf(Protocol):
    """What this module reads of a ``tracking`` block (conf/schema.py's ``TrackingConf`` has these fields; this
    module sits below the config layer, so it names the fields, not the class)."""

    mode: str
    project: str
    entity: str | None
    group: str | None
    tags: list[str]


class Tracker(Protocol):
    """What a stage does with its wandb run (:func:`start_run`'s): log a step's numbers, finish it."""

    def log(self, data: dict[str, Any]) -> None: ...

    def finish(self) -> None: ...


# Settings that change how a run is watched or where it runs, not what it produces: never part of a stage's
# fingerprint or a training run's config hash (the same files either way).
UNTRACKED = ("tracking", "study", "overwrite", "distribute")
WandbMode = Literal["online", "offline", "disabled", "shared"]  # tracking.mode as wandb takes it (conf/checks.py)


def untracked(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config without its watching settings (``UNTRACKED``)."""
    return {k: v for k, v in cfg.items() if k not in UNTRACKED}


def _setting(tracking: TrackingConf | Mapping[str, Any] | None, key: str) -> Any:
    """One setting of a tracking block: the schema's dataclass, or a node or dict of it (the stages that still hold
    their config by key); None without a block."""
    if tracking is None:
        return None
    return tracking.get(key) if isinstance(tracking, Mapping) else getattr(tracking, key)


def enabled(tracking: TrackingConf | Mapping[str, Any] | None) -> bool:
    """Whether a tracking block logs anything (YAML reads a bare ``off`` as false)."""
    return tracking is not None and _setting(tracking, "mode") not in ("off", False, None, "disabled")


def group_of(tracking: TrackingConf | Mapping[str, Any] | None, study: str | None = None) -> str | None:
    return _setting(tracking, "group") or study


LEDGER = TRACKING_LEDGER  # under the run_dir: the runs started there, so that a resumed run keeps its id


def settings_sha(config: dict[str, Any] | None) -> str:
    """What a run was started with, without the tracking block itself (logging offline or online is not a
    setting of the experiment)."""
    data = {k: v for k, v in (config or {}).items() if k not in ("tracking", "hydra")}
    return config_sha256(data)[:16]


def claim_run_id(tracking: TrackingConf | Mapping[str, Any], job_type: str, name: str, run_dir: str | Path, config: dict[str, Any] | None,
                 resume: bool = False) -> tuple[str, bool]:
    """The wandb id for one start of a stage, and whether it continues an earlier run.

    A start is a new run (id from the stage, the run directory, the settings and the number of earlier
    starts, so the same sequence of commands gives the same ids) unless ``resume`` is asked for and the
    last start of this stage had the same settings. Recorded in ``<run_dir>/wandb/crossed-runs.jsonl``.
    """
    ledger = Path(run_dir) / LEDGER
    settings = settings_sha(config)
    earlier = []
    if ledger.exists():
        earlier = [e for e in (json.loads(x) for x in ledger.read_text().splitlines() if x.strip())
                   if e["job_type"] == job_type and e["name"] == name]
    if resume and earlier and earlier[-1]["settings"] == settings:
        return earlier[-1]["id"], True
    key = "|".join(str(x) for x in (_setting(tracking, "entity"), _setting(tracking, "project"), job_type, name,
                                     Path(run_dir).resolve(), settings, len(earlier)))
    new = hashlib.sha256(key.encode()).hexdigest()[:16]
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a") as fh:
        fh.write(json.dumps({"job_type": job_type, "name": name, "settings": settings, "start": len(earlier),
                             "id": new}) + "\n")
    return new, False


def start_run(tracking: TrackingConf | Mapping[str, Any] | None, *, name: str, job_type: str, run_dir: str | Path, config: dict[str, Any] | None = None,
              study: str | None = None) -> Any:
    """A new wandb run for one start of an arm or stage, or None when tracking is off."""
    if tracking is None or not enabled(tracking):
        return None
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id, _ = claim_run_id(tracking, job_type, name, run_dir, config)
    return wandb.init(
        project=str(_setting(tracking, "project") or "crossed-rlvr"), entity=_setting(tracking, "entity") or None,
        group=group_of(tracking, study), name=name, job_type=job_type,
        tags=[str(t) for t in (_setting(tracking, "tags") or [])], config=config or {}, dir=str(run_dir),
        id=run_id, resume="never", mode=cast(WandbMode, str(_setting(tracking, "mode"))), reinit="finish_previous",
    )


def resolved_config(cfg: object) -> dict[str, Any]:
    """The resolved config without Hydra's own node (what a run config should hold): a command's typed config as
    its settings (conf/schema.py), a dict as it is (a Hydra node is typed at its command's door, never here)."""
    import dataclasses

    plain = settings(cfg) if dataclasses.is_dataclass(cfg) else cfg
    if not isinstance(plain, Mapping):
        raise TypeError(f"a run's config is a mapping, not {type(cfg).__name__}")
    data = dict(plain)
    data.pop("hydra", None)
    return data


# ---------------------------------------------------------------------- reading offline runs back
_BLOCK, _HEADER = 32768, 7


def _records(path: Path) -> Iterator[Any]:
    """Protobuf records of a ``run-<id>.wandb`` file (a LevelDB-style log: 32 KiB blocks of chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:_HEADER])
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a wandb transaction log")
    pos, buf = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        buf = chunk if kind in (1, 2) else buf + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


def _key(item: Any) -> str:  # Any: a wandb protobuf item (wandb ships no types for it)
    """A history or summary item's name ('' for wandb's own underscore keys)."""
    name = item.key or "/".join(item.nested_key)
    return "" if name.startswith("_") else name


def offline_runs(folder: str | Path) -> list[dict[str, Any]]:
    """Every offline wandb run under ``folder``: id, name, group, job type, tags, and its config, summary
    and history keys, and the steps its history logged (``_step``)."""
    runs = []
    for path in sorted(Path(folder).rglob("offline-run-*/run-*.wandb")):
        info: dict[str, Any] = {"path": str(path.parent), "config": set(), "summary": set(), "history": set(),
                                "steps": set()}
        for rec in _records(path):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                r = rec.run
                info.update(id=r.run_id, name=r.display_name, group=r.run_group, job_type=r.job_type,
                            project=r.project, tags=list(r.tags))
                info["config"] |= {c.key for c in r.config.update if c.key != "_wandb"}
            elif kind == "config":
                info["config"] |= {c.key for c in rec.config.update if c.key and c.key != "_wandb"}
            elif kind == "history":
                info["history"] |= {_key(i) for i in rec.history.item} - {""}
                info["steps"] |= {int(json.loads(i.value_json)) for i in rec.history.item
                                  if (i.key or "/".join(i.nested_key)) == "_step"}
            elif kind == "summary":
                info["summary"] |= {_key(i) for i in rec.summary.update} - {""}
        for key in ("config", "summary", "history", "steps"):
            info[key] = sorted(info[key])
        runs.append(info)
    return runs
