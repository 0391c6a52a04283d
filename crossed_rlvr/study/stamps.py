"""The stage cache: one rule for every stage of a study. A stage is fresh when the fingerprint of its inputs equals
the one its stamp recorded and its outputs still hash to what the stamp recorded; otherwise it runs again.

A stage declares its inputs once, as settings with a :class:`~crossed_rlvr.fingerprint.Read` wherever it reads a
file or folder, and :func:`~crossed_rlvr.fingerprint.fingerprint` (the one function that computes every stage's
fingerprint, and an arm's and an evaluation cell's) puts each file's content hash in its place: a policy's folder by
its weights, tokenizer and config (``files.policy_sha256``; never the timings of the run that made it), any other
file or folder by all of its bytes.

A stamp (``<run_dir>/stages/<stage>.json``) is written only after the stage finished, so an interrupted stage has
none and runs again (the stages themselves resume from their partial files). A stamp written under an earlier
rule (a policy hashed by its whole folder; unset settings recorded as null) is carried over once when the inputs
it recorded are the ones read now up to that change (:meth:`StageCache.carried_over`): no stage is redone for a
change of rule alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossed_rlvr.faults import writing
from crossed_rlvr.files import atomic_write_json, tree_sha256, unset_out
from crossed_rlvr.fingerprint import HashCache, Read, content_sha256, fingerprint
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.machine import machine

RULE = 3  # the rule a stamp was written under: 2, a policy hashed without its run records; 3, unset settings left out


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (an arm's worker, torchrun's ranks, the
    scoring workers): with the wall time, how busy a stage kept the machine's cores."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Stamps:
    def __init__(self, run_dir: Path) -> None:
        self.layout = RunLayout(run_dir)
        self.dir = self.layout.stages
        # Hashes of stage outputs taken this invocation: the next stage's inputs are the same files,
        # and a later stage never writes an earlier one's outputs, so each tree is read once.
        self.hashes: dict[str, str] = {}
        self.files = HashCache(self.layout.file_hashes)

    def hash(self, path: str | Path, fresh: bool = False) -> str:
        key = str(path)
        if fresh or key not in self.hashes:
            self.hashes[key] = tree_sha256(path, self.files)
            self.files.save()
        return self.hashes[key]

    def content(self, read: Read, whole: bool = False) -> str:
        """The content hash of what a stage reads (``fingerprint.content_sha256``, once per invocation and through
        the hash cache). ``whole``: a policy by every file of its folder, as stamps recorded it before the one rule
        (:meth:`StageCache.carried_over`)."""
        if whole and Path(read.path).exists():
            read = Read(read.path)
        key = f"policy:{read.path}" if read.policy else str(read.path)  # an output's key too (:meth:`hash`)
        if key not in self.hashes:
            self.hashes[key] = content_sha256(read, self.files)
            self.files.save()
        return self.hashes[key]

    def weights(self, path: str | Path) -> str:
        """A policy's hash by the one rule: what the arms' configs and the strata name as the weights they read."""
        return self.content(Read.weights(path))

    def path(self, stage: str) -> Path:
        return self.layout.stage_stamp(stage)

    def read(self, stage: str) -> dict[str, Any] | None:
        p = self.path(stage)
        return json.loads(p.read_text()) if p.exists() else None

    def fresh(self, stage: str, fingerprint: str, outputs: list[Path]) -> dict[str, Any] | None:
        """The stamp if the stage finished with this fingerprint and its outputs are still there."""
        p = self.path(stage)
        if not p.exists():
            return None
        stamp = json.loads(p.read_text())
        if stamp.get("fingerprint") != fingerprint or not all(o.exists() for o in outputs):
            return None
        if stamp.get("outputs_sha256") != {str(o): self.hash(o, fresh=True) for o in outputs}:
            return None  # an output was changed by hand: redo the stage
        return stamp

    def write(self, stage: str, fingerprint: str, outputs: list[Path], seconds: float, info: dict[str, Any],
              inputs: dict[str, Any], cpu: float | None = None) -> None:
        atomic_write_json(self.path(stage), {
            "stage": stage, "fingerprint": fingerprint, "rule": RULE, "inputs": inputs, "seconds": round(seconds, 1),
            "cpu_seconds": None if cpu is None else round(cpu, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "outputs_sha256": {str(o): self.hash(o, fresh=True) for o in outputs}, "info": info,
            "machine": machine(),  # float results of training and sampling are one machine's
        })


class StageCache:
    """Runs a study's stages in order, each only when it is not fresh by the one rule (:func:`fingerprint` of its
    declared inputs equals its stamp's, its outputs intact), and says on the console which it did and why."""

    def __init__(self, run_dir: Path, stages: tuple[str, ...], say: Callable[[str], None]) -> None:
        self.stamps = Stamps(run_dir)
        self.run_dir = run_dir
        self.stages = stages
        self.say = say
        self.times: dict[str, dict[str, Any]] = {}

    def fingerprint(self, inputs: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """:func:`fingerprint` with this run's content hashes."""
        return fingerprint(inputs, self.stamps.content)

    def __call__(self, name: str, inputs: dict[str, Any], outputs: list[Path], fn: Callable[[], dict[str, Any]]
                 ) -> dict[str, Any]:
        """Stage ``name``: its ``inputs`` (settings, a :class:`Read` for each file it reads), the ``outputs`` it
        writes and ``fn``, which makes them and returns what the stamp keeps (the stage's info)."""
        head = f"[bold]\\[{self.stages.index(name) + 1}/{len(self.stages)}] {name}[/bold]"
        resolved, fp = self.fingerprint(inputs)
        stamp = self.stamps.fresh(name, fp, outputs) or self.carried_over(name, inputs, resolved, fp, outputs)
        if stamp is not None:
            self.say(f"{head}: reused (finished {stamp['finished']}, {stamp['seconds']} s)")
            self.times[name] = {"seconds": 0.0, "reused": True, "first_seconds": stamp["seconds"]}
            return stamp["info"]
        previous = self.stamps.read(name)
        changed: list[str] = []
        if previous is not None:  # finished before with other inputs, or its outputs changed: say what
            changed = changed_inputs(previous.get("inputs", {}), resolved) or ["its outputs were changed or removed"]
            self.say(f"{head}: redoing, replacing the earlier outputs (changed: {', '.join(changed)})")
        else:
            self.say(f"{head}: running")
        start, cpu = time.perf_counter(), cpu_seconds()
        with writing(self.run_dir, f"the {name} stage"):  # a full disk or a killed worker: one line (faults.py)
            info = fn()
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        self.stamps.write(name, fp, outputs, seconds, info, resolved, cpu)
        self.times[name] = {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "reused": False,
                            "changed": changed}
        self.say(f"    {name} done in {seconds:.1f} s")
        return info

    def carried_over(self, name: str, inputs: dict[str, Any], resolved: dict[str, Any], fp: str,
                     outputs: list[Path]) -> dict[str, Any] | None:
        """A stamp written under an earlier rule, fresh when the inputs it recorded are the ones read now, up to what
        the rule changed: a policy hashed by every file of its folder, its run records too (before rule 2), and unset
        settings recorded as null (before rule 3, :func:`files.settings`). Its outputs must be intact. It is rewritten
        once with this rule's fingerprint (one line says so), so no stage is redone for a change of rule alone."""
        previous = self.stamps.read(name)
        if previous is None or previous.get("rule") == RULE or "inputs" not in previous:
            return None
        if self.stamps.fresh(name, previous["fingerprint"], outputs) is None:
            return None  # an output changed or went missing: the stage is redone
        was = unset_out(_as_json(previous["inputs"]))
        whole, _ = fingerprint(inputs, lambda read: self.stamps.content(read, whole=True))
        if not any(unset_out(_as_json(now)) == was for now in (resolved, whole)):
            return None  # the stage's inputs changed
        stamp = {**previous, "fingerprint": fp, "rule": RULE, "inputs": resolved}
        atomic_write_json(self.stamps.path(name), stamp)
        self.say(f"    {name}: stamp carried over to freshness rule {RULE} (its inputs and outputs unchanged)")
        return stamp


def _as_json(value: Any) -> Any:  # Any: the settings' own JSON shape
    """``value`` as a stamp holds it once read back (keys as text, tuples as lists, other values as text)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def changed_inputs(old: object, new: object, prefix: str = "") -> list[str]:
    """Dotted names of the inputs that differ between two stamps (for the console, at most 6). Keys compare as text:
    a stamp read back from JSON has ``"1"`` where the inputs computed now have ``1``."""
    if isinstance(old, dict) and isinstance(new, dict):
        was, now = {str(k): v for k, v in old.items()}, {str(k): v for k, v in new.items()}
        out: list[str] = []
        for key in sorted(set(was) | set(now)):
            out += changed_inputs(was.get(key), now.get(key), f"{prefix}{key}.")
        return out[:6]
    return [] if old == new else [prefix[:-1] or "inputs"]
