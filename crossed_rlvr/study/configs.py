"""The study's config projected into the config of each command a stage runs: the warm start (``crossed-sft``),
each arm (``crossed-train``), the SFT arms and the crossed evaluation (``crossed-eval``).

Each projection is checked against its command's schema where it is made (types, then declared ranges), so a
setting that no stage could run with fails here, naming its key, before anything is trained. The projections
stay plain dicts: the commands receive exactly the keys the study sets, so a schema default added later
changes no finished arm's config hash.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossed_rlvr.errors import ConfigError
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.names import INITIAL, policy_name
from crossed_rlvr.tasks.training import GRPO_ITEM_SEED, SFT_ITEM_SEED


def plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def typed(command: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` checked against ``command``'s schema (``crossed_train``, ``crossed_eval``, ``crossed_sft``): the type
    of every key the schema knows, then the ranges it declares. Keys the schema does not know pass (the study adds
    hashes and frozen files to the command's own settings). Returns ``cfg`` unchanged."""
    from omegaconf.errors import OmegaConfBaseException

    from crossed_rlvr.conf.ranges import check_ranges_of, open_schema
    from crossed_rlvr.errors import ConfigError

    try:
        OmegaConf.merge(open_schema(command), cfg)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", "") or ""
        raise ConfigError(f"{key}: {str(err).splitlines()[0]} (in the study's {command.replace('_', '-')} config)"
                          ) from None
    check_ranges_of(cfg, command)
    return cfg


class StudyConfigs:
    """The configs the stages hand to the commands, from one study config."""

    def __init__(self, cfg: Any, layout: RunLayout, study_name: str, say: Callable[[str], None]) -> None:
        self.cfg, self.layout, self.study_name, self.say = cfg, layout, study_name, say
        self._frozen: dict[str, Any] | None = None

    def arm_list(self) -> list[tuple[str, int]]:
        """(convention, seed) of every GRPO arm, seed by seed."""
        return [(conv, int(seed)) for seed in self.cfg.arms.seeds for conv in self.cfg.arms.conventions]

    def train_task(self) -> dict[str, Any]:
        """The task as the arms see it: a hub task's train split frozen by content on first use
        (``<run>/data/train_rows.jsonl``, paper 001 §3 "frozen training rows"), its file and sha256 part of
        every arm's config; a user's ``task.train_rows`` is used as given, pinned by its hash."""
        from crossed_rlvr.files import sha256_file
        from crossed_rlvr.tasks.splits import freeze_train_rows

        task = plain(self.cfg.task)
        if task.get("source") not in ("gsm8k", "math500"):
            return task
        if task.get("train_rows"):
            path = Path(str(task["train_rows"])).resolve()
            if not path.exists():
                raise ConfigError(f"task.train_rows={task['train_rows']}: no such file")
            return {**task, "train_rows": str(path), "train_rows_sha256": task.get("train_rows_sha256")
                    or sha256_file(path)}
        if self._frozen is None:
            self._frozen = freeze_train_rows(OmegaConf.create(task), self.layout.train_rows)
            self.say(f"    training rows frozen: {self._frozen['rows']} rows, sha256 {self._frozen['sha256'][:16]}… "
                     f"({self._frozen['file']})")
        return {**task, "train_rows": self._frozen["file"], "train_rows_sha256": self._frozen["sha256"]}

    def warmstart(self, path: Path, warm: dict[str, Any]) -> dict[str, Any]:
        """``crossed-sft mode=warmstart``'s config: the initial policy built at ``path``."""
        c = self.cfg
        return typed("crossed_sft", {
            "model": {**plain(c.model), "path": str(path)}, "task": plain(c.task), "sft": plain(c.sft),
            "eval": plain(c.eval),
            "run_dir": str(self.layout.root), "train_items": {"n": int(c.initial.train_items), "seed": SFT_ITEM_SEED},
            "tracking": plain(c.tracking), "study": self.study_name,
            "warmstart": warm,
        })

    def train(self, conv: str, seed: int, initial_path: str, weights: str,
              strata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The crossed-train config of one arm: the study's groups, the arm's convention and seed.

        ``model.weights_sha256`` ties a finished arm to the initial weights it started from, so a
        rebuilt initial policy retrains the arms while an interrupted stage reuses finished ones."""
        c = self.cfg
        recipe = plain(c.recipe)
        if strata is not None:  # the frozen strata file and its hash: part of both arms' configs
            recipe["proposal"] = {**recipe["proposal"], "strata_file": strata["file"], "strata_sha256": strata["sha256"]}
        return typed("crossed_train", {
            "model": {**plain(c.model), "path": str(initial_path), "weights_sha256": weights}, "task": self.train_task(),
            "convention": {"name": conv}, "recipe": recipe, "algorithm": plain(c.algorithm),
            "engine": plain(c.engine), "tracking": plain(c.tracking),
            "validation": plain(c.validation), "eval": plain(c.eval),
            "seed": seed, "data_seed": seed, "run_dir": str(self.layout.arm(conv, seed).root),
            "arm": policy_name("grpo", conv, seed),
            "study": self.study_name,
            "overwrite": True, "template": "original",
            "train_items": {"n": int(c.arms.train_items), "seed": GRPO_ITEM_SEED},
        })

    def sft_arms(self, initial_path: str) -> dict[str, Any]:
        """The SFT arms' job (``sft/worker.py``): the marker arm and its control for every seed."""
        c = self.cfg
        return {"model": {**plain(c.model), "path": initial_path}, "task": self.train_task(), "sft": plain(c.sft),
                "run_dir": str(self.layout.root), "seeds": [int(s) for s in c.arms.seeds], "arm": c.arms.sft_arm,
                "control": c.arms.sft_control, "train_items": {"n": int(c.arms.train_items), "seed": SFT_ITEM_SEED},
                "tracking": plain(c.tracking), "study": self.study_name}

    def given_arms(self) -> dict[str, dict[str, Any]]:
        """``arms.kind=given``: another study's GRPO arms, at its final step (B.4's transfer of GSM8K-trained
        checkpoints to MATH500 evaluates them on another task without training anything here)."""
        c = self.cfg
        src = RunLayout(Path(str(c.arms.from_run)).expanduser().resolve())
        return {policy_name("grpo", conv, seed): {"path": str(src.arm(conv, seed).checkpoint(int(c.recipe.updates))),
                                                  "convention": conv, "seed": int(seed)}
                for conv, seed in self.arm_list()}

    @staticmethod
    def policies(initial: dict[str, Any], arms: dict[str, Any]) -> list[dict[str, Any]]:
        """The initial policy, then every arm's final policy in name order."""
        pols = [{"name": INITIAL, "path": str(initial["path"]), "training_convention": INITIAL, "train_seed": None}]
        for name, arm in sorted(arms["arms"].items()):  # stamps store dicts sorted: one order always
            pols.append({"name": name, "path": arm["path"], "training_convention": arm["convention"],
                         "train_seed": int(arm["seed"])})
        return pols

    def evaluation(self, initial: dict[str, Any], arms: dict[str, Any]) -> Any:
        """crossed-eval's config: every policy under every request and wording, into ``<run>/eval``."""
        c, ev = self.cfg, self.cfg.evaluation
        task = plain(c.task)
        if ev.n_items is not None:
            task["n_items"] = int(ev.n_items)
        return OmegaConf.create(typed("crossed_eval", {
            "model": plain(c.model), "task": task, "eval": plain(c.eval), "tracking": plain(c.tracking),
            "study": self.study_name,
            "run_dir": str(self.layout.eval.root), "policies": self.policies(initial, arms),
            "requests": list(ev.requests), "templates": list(ev.templates), "template_subset": ev.template_subset,
            "template_subset_seed": int(ev.template_subset_seed), "samples": int(ev.samples), "overwrite": True,
            "distribute": plain(c.distribute),
        }))
