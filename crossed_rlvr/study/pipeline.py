"""The stages of one crossed study (paper 001 §2-§3), each reused when its config and inputs are unchanged.

1. ``initial``: the initial policy: a tiny model built and warm-started with SFT (``initial.build=warmstart``)
   or a given model (``given``: a local directory, SmolLM2's converted GGUF, or a hub name).
2. ``arms``: matched arms for every convention x seed from that policy: GRPO (``crossed-train``; arms of
   one seed are checked to differ only in the intervention) or content-matched SFT marker arms.
3. ``eval``: every policy (initial and each arm's final checkpoint) under every request and wording.
4. ``score``: every response with the fixed reader panel.
5. ``analyze``: cells, contrasts with paired-bootstrap intervals, coverage, report and figures, plus the
   arms' training curves.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from crossed_rlvr.machine import torch_threads
from crossed_rlvr.study.stamps import Stamps, digest
from crossed_rlvr.tasks.training import GRPO_ITEM_SEED, SFT_ITEM_SEED

STAGES = ("initial", "arms", "eval", "score", "analyze")


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


class Study:
    def __init__(self, cfg: Any, console: Any = None) -> None:
        self.cfg = cfg
        self.run = Path(cfg.run_dir)
        self.stamps = Stamps(self.run)
        self.console = console
        self.times: dict[str, dict[str, Any]] = {}
        # the wandb group of every stage's runs: tracking.group, else the run directory's name
        self.study_name = str(cfg.tracking.get("group") or self.run.resolve().name)

    # ------------------------------------------------------------------ driver
    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)

    def stage(self, name: str, inputs: dict[str, Any], outputs: list[Path], fn: Any) -> dict[str, Any]:
        """Run ``fn`` unless a stamp with the same inputs (config and input hashes) and intact outputs exists."""
        k = STAGES.index(name) + 1
        fingerprint = digest(inputs)
        stamp = self.stamps.fresh(name, fingerprint, outputs)
        if stamp is not None:
            self.say(f"[bold]\\[{k}/{len(STAGES)}] {name}[/bold]: reused (finished {stamp['finished']}, "
                     f"{stamp['seconds']} s)")
            self.times[name] = {"seconds": 0.0, "reused": True, "first_seconds": stamp["seconds"]}
            return stamp["info"]
        previous = self.stamps.read(name)
        changed: list[str] = []
        if previous is not None:  # finished before with other inputs, or its outputs changed: say what
            changed = changed_inputs(previous.get("inputs", {}), inputs) or ["its outputs were changed or removed"]
            self.say(f"[bold]\\[{k}/{len(STAGES)}] {name}[/bold]: redoing, replacing the earlier outputs "
                     f"(changed: {', '.join(changed)})")
        else:
            self.say(f"[bold]\\[{k}/{len(STAGES)}] {name}[/bold]: running")
        start = time.perf_counter()
        info = fn()
        seconds = time.perf_counter() - start
        self.stamps.write(name, fingerprint, outputs, seconds, info, inputs)
        self.times[name] = {"seconds": round(seconds, 1), "reused": False, "changed": changed}
        self.say(f"    {name} done in {seconds:.1f} s")
        return info

    def run_all(self) -> dict[str, Any]:
        self.run.mkdir(parents=True, exist_ok=True)
        (self.run / "study_config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
        initial = self.initial()
        arms = self.arms(initial)
        self.evaluate(initial, arms)
        self.score()
        self.analyze(arms)
        summary = {"run_dir": str(self.run), "stages": self.times,
                   "report": str(self.run / "analysis" / "report.md")}
        (self.run / "study_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    # ------------------------------------------------------------------ 1. initial policy
    def initial_path(self) -> Path | str:
        c = self.cfg
        if c.initial.build == "warmstart":
            return self.run / "models" / "initial"
        from crossed_rlvr.eval.generate.plan import resolve_model_path

        return resolve_model_path(c.model)

    def initial(self) -> dict[str, Any]:
        c = self.cfg
        path = self.initial_path()
        if c.initial.build == "given":
            fp = {"model": _plain(c.model), "path": str(path)}
            outputs = [Path(path)] if Path(str(path)).exists() else []
            return self.stage("initial", fp, outputs, lambda: {"path": str(path), "built": False})
        if c.initial.build != "warmstart":
            raise SystemExit(f"crossed-study: initial.build must be warmstart or given, not {c.initial.build!r}")
        # where a built policy is kept for other studies does not change it: not part of the fingerprint
        fp = {"model": _plain(c.model), "task": _plain(c.task), "sft": _plain(c.sft),
              "initial": {k: v for k, v in _plain(c.initial).items() if k != "cache_dir"}}
        warm = {"requests": list(c.initial.requests), "templates": list(c.initial.templates),
                "seed": int(c.initial.seed), "follow_rate": float(c.initial.follow_rate)}
        if not c.model.get("tiny"):  # a given model (SmolLM2, a hub name) is fine-tuned, not built
            from crossed_rlvr.eval.generate.plan import resolve_model_path

            warm["base"] = str(resolve_model_path(c.model))
        if int(c.initial.band.every) > 0:  # measured under the evaluation's sampling (sft/band.py)
            warm["band"] = _plain(c.initial.band)
            fp["band_sampling"] = _plain(c.eval)

        def build() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.cli import warmstart

            shutil.rmtree(path, ignore_errors=True)  # a stale or half-written policy is rebuilt, never reused
            sft_cfg = OmegaConf.create({
                "model": {**_plain(c.model), "path": str(path)}, "task": _plain(c.task), "sft": _plain(c.sft),
                "eval": _plain(c.eval),
                "run_dir": str(self.run), "train_items": {"n": int(c.initial.train_items), "seed": SFT_ITEM_SEED},
                "tracking": _plain(c.tracking), "study": self.study_name,
                "warmstart": warm,
            })
            with torch_threads(c.initial.get("threads")):
                result = warmstart(sft_cfg)
            shutil.rmtree(self.run / "models" / "fresh", ignore_errors=True)
            return {"path": str(path), "built": True, **{k: v for k, v in result.items() if k != "config"}}

        cache = c.initial.get("cache_dir")
        if cache:
            from crossed_rlvr.study.warm_cache import fetch_or_build

            def key() -> str:  # a tiny model's path is where it is built (in this run directory), not an input
                return digest({**fp, "model": {k: v for k, v in fp["model"].items() if k != "path"}}
                              if c.model.get("tiny") else fp)

            return self.stage("initial", fp, [Path(path)],
                              lambda: fetch_or_build(Path(str(cache)), key(), Path(path), build, self.say))
        return self.stage("initial", fp, [Path(path)], build)

    # ------------------------------------------------------------------ 2. matched arms
    def arm_list(self) -> list[tuple[str, int]]:
        return [(conv, int(seed)) for seed in self.cfg.arms.seeds for conv in self.cfg.arms.conventions]

    def train_task(self) -> dict[str, Any]:
        """The task as the arms see it: a hub task's train split frozen by content on first use
        (``<run>/data/train_rows.jsonl``, paper 001 §3 "frozen training rows"), its file and sha256 part of
        every arm's config; a user's ``task.train_rows`` is used as given, pinned by its hash."""
        from crossed_rlvr.files import sha256_file
        from crossed_rlvr.tasks.splits import freeze_train_rows

        task = _plain(self.cfg.task)
        if task.get("source") not in ("gsm8k", "math500"):
            return task
        if task.get("train_rows"):
            path = Path(str(task["train_rows"])).resolve()
            if not path.exists():
                raise SystemExit(f"crossed-study: task.train_rows={task['train_rows']}: no such file")
            return {**task, "train_rows": str(path), "train_rows_sha256": task.get("train_rows_sha256")
                    or sha256_file(path)}
        if not hasattr(self, "_frozen"):
            self._frozen = freeze_train_rows(OmegaConf.create(task), self.run / "data" / "train_rows.jsonl")
            self.say(f"    training rows frozen: {self._frozen['rows']} rows, sha256 {self._frozen['sha256'][:16]}… "
                     f"({self._frozen['file']})")
        return {**task, "train_rows": self._frozen["file"], "train_rows_sha256": self._frozen["sha256"]}

    def arm_dir(self, conv: str, seed: int) -> Path:
        return self.run / "train" / conv / f"s{seed}"

    def train_config(self, conv: str, seed: int, initial_path: str, weights: str,
                     strata: dict[str, Any] | None = None) -> dict[str, Any]:
        """The crossed-train config of one arm: the study's groups, the arm's convention and seed.

        ``model.weights_sha256`` ties a finished arm to the initial weights it started from, so a
        rebuilt initial policy retrains the arms while an interrupted stage reuses finished ones."""
        c = self.cfg
        recipe = _plain(c.recipe)
        if strata is not None:  # the frozen strata file and its hash: part of both arms' configs
            recipe["proposal"] = {**recipe["proposal"], "strata_file": strata["file"], "strata_sha256": strata["sha256"]}
        return {
            "model": {**_plain(c.model), "path": str(initial_path), "weights_sha256": weights}, "task": self.train_task(),
            "convention": {"name": conv}, "recipe": recipe, "algorithm": _plain(c.algorithm),
            "engine": _plain(c.engine), "tracking": _plain(c.tracking),
            "validation": _plain(c.validation), "eval": _plain(c.eval),
            "seed": seed, "data_seed": seed, "run_dir": str(self.arm_dir(conv, seed)), "arm": f"grpo-{conv}/s{seed}",
            "study": self.study_name,
            "overwrite": True, "template": "original",
            "train_items": {"n": int(c.arms.train_items), "seed": GRPO_ITEM_SEED},
        }

    def arms(self, initial: dict[str, Any]) -> dict[str, Any]:
        c = self.cfg
        ipath = str(initial["path"])
        weights = self.stamps.hash(ipath) if Path(ipath).exists() else ipath
        if c.arms.kind == "sft":
            return self._sft_arms(ipath, weights)
        if c.arms.kind == "given":
            return self._given_arms()
        if c.arms.kind != "grpo":
            raise SystemExit(f"crossed-study: arms.kind must be grpo or sft, not {c.arms.kind!r}")
        strata = self.strata(ipath, weights)
        configs = {f"grpo-{conv}/s{seed}": self.train_config(conv, seed, ipath, weights, strata)
                   for conv, seed in self.arm_list()}
        fp = {"configs": {name: untracked(cfg) for name, cfg in configs.items()}}
        if c.arms.get("threads") is not None and int(c.arms.parallel) == 1:  # other sums, other weights
            fp["threads"] = int(c.arms.threads)
        final = {name: Path(cfg["run_dir"]) / "checkpoints" / f"step-{int(c.recipe.updates)}"
                 for name, cfg in configs.items()}

        def train() -> dict[str, Any]:
            from crossed_rlvr.conf.checks import check_config

            for cfg in configs.values():
                check_config(OmegaConf.create(cfg))  # every arm's config is checked before any trains
            results = self._train_arms(configs)
            missing = [str(p) for p in final.values() if not p.exists()]
            if missing:  # e.g. engine=verl without engine.launch: the launch scripts are ready, not run
                raise SystemExit("crossed-study: no final checkpoint at " + ", ".join(missing) + ". With engine=verl "
                                 "and engine.launch=false, run each arm's launch script (launch_single_node.sh or "
                                 "sbatch launch_slurm_ray.sbatch), then run the study again: finished arms are reused.")
            verdicts = {}
            from crossed_rlvr.train.matched import check_and_record

            for seed in c.arms.seeds:
                dirs = [self.arm_dir(conv, int(seed)) for conv in c.arms.conventions]
                for other in dirs[1:]:
                    verdict = check_and_record(dirs[0], other)
                    verdicts[f"{dirs[0].name}:{dirs[0].parent.name}-{other.parent.name}"] = verdict["matched"]
                    if not verdict["matched"]:
                        raise SystemExit(f"crossed-study: arms {dirs[0]} and {other} are not matched: "
                                         f"{verdict['config_differences'] or verdict['data_differences']}")
            return {"arms": {name: {"path": str(final[name]), "convention": cfg["convention"]["name"],
                                    "seed": cfg["seed"], **results[name]} for name, cfg in configs.items()},
                    "matched": verdicts}

        return self.stage("arms", fp, list(final.values()), train)

    def _train_arms(self, configs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Train every arm; with ``arms.parallel`` > 1, in worker processes of one CPU thread each
        (a tiny model's small matrices gain little from threads, so two single-thread arms at once
        finish in about the time of one two-thread arm)."""
        from tqdm import tqdm

        parallel = max(1, int(self.cfg.arms.parallel))
        updates = int(self.cfg.recipe.updates)
        nproc = int(self.cfg.engine.get("nproc_per_node") or 1)
        bar = tqdm(total=updates * len(configs), desc="GRPO updates (all arms)", unit="update")
        results: dict[str, dict[str, Any]] = {}
        import torch

        # each arm across nproc processes (torchrun); on a GPU, one arm at a time in a process of its own too,
        # so that the evaluation's vLLM later starts on memory that training no longer holds
        if self.cfg.engine.name == "trl" and (nproc > 1 or (parallel == 1 and torch.cuda.is_available())):
            from crossed_rlvr.train.worker import run_arm

            for name, cfg in configs.items():
                results[name] = _arm_result(run_arm(cfg, Path(cfg["run_dir"]) / "worker.spec.json", nproc))
                bar.update(updates)
            bar.close()
            return results
        if parallel == 1:
            from crossed_rlvr.train.cli import run_train

            for name, cfg in configs.items():
                with torch_threads(self.cfg.arms.get("threads")):
                    summary = run_train(OmegaConf.create(cfg))
                results[name] = _arm_result(summary)
                bar.update(updates)
            bar.close()
            return results
        import concurrent.futures as cf
        import multiprocessing as mp

        seen = 0
        with cf.ProcessPoolExecutor(max_workers=parallel, mp_context=mp.get_context("spawn"),
                                    initializer=_one_thread) as pool:
            futures = {pool.submit(_train_worker, cfg): name for name, cfg in configs.items()}
            pending = set(futures)
            while pending:
                done, pending = cf.wait(pending, timeout=2.0)
                for fut in done:
                    results[futures[fut]] = _arm_result(fut.result())  # re-raises a worker's error
                now = sum(_lines(Path(cfg["run_dir"]) / "metrics.jsonl") for cfg in configs.values())
                now = max(now, seen)
                bar.update(now - seen)
                seen = now
        bar.update(updates * len(configs) - seen)
        bar.close()
        return {name: results[name] for name in configs}

    def given_arm_paths(self) -> dict[str, dict[str, Any]]:
        """``arms.kind=given``: another study's GRPO arms, at its final step (B.4's transfer of GSM8K-trained
        checkpoints to MATH500 evaluates them on another task without training anything here)."""
        c = self.cfg
        src = Path(str(c.arms.from_run)).expanduser().resolve()
        return {f"grpo-{conv}/s{seed}": {"path": str(src / "train" / conv / f"s{seed}" / "checkpoints" /
                                                     f"step-{int(c.recipe.updates)}"),
                                         "convention": conv, "seed": int(seed)} for conv, seed in self.arm_list()}

    def _given_arms(self) -> dict[str, Any]:
        arms = self.given_arm_paths()
        missing = [a["path"] for a in arms.values() if not Path(a["path"]).is_dir()]
        if missing:
            raise SystemExit(f"crossed-study: arms.kind=given: no checkpoint at {', '.join(missing)} (arms.from_run="
                             f"{self.cfg.arms.from_run}, recipe.updates={int(self.cfg.recipe.updates)}); train them "
                             "with that study first, or set arms.seeds/arms.conventions to the arms it has")
        fp = {name: self.stamps.hash(a["path"]) for name, a in arms.items()}
        return self.stage("arms", fp, [Path(a["path"]) for a in arms.values()], lambda: {"arms": arms})

    def _sft_arms(self, ipath: str, weights: str) -> dict[str, Any]:
        c = self.cfg
        spec = {"model": {**_plain(c.model), "path": ipath}, "task": self.train_task(), "sft": _plain(c.sft),
                "run_dir": str(self.run), "seeds": [int(s) for s in c.arms.seeds], "arm": c.arms.sft_arm,
                "control": c.arms.sft_control, "train_items": {"n": int(c.arms.train_items), "seed": SFT_ITEM_SEED},
                "tracking": _plain(c.tracking), "study": self.study_name}
        fp = {"spec": untracked(spec), "initial_weights": weights}
        final = {f"sft-{conv}/s{seed}": self.run / "models" / f"sft-{conv}" / f"s{seed}"
                 for seed in c.arms.seeds for conv in (c.arms.sft_arm, c.arms.sft_control)}

        def train() -> dict[str, Any]:
            import shutil

            from crossed_rlvr.sft.worker import run_stage

            for p in final.values():
                shutil.rmtree(p, ignore_errors=True)
            # in a process of its own (torchrun with sft.nproc_per_node > 1): the evaluation's vLLM then
            # starts on GPU memory that training no longer holds
            run_stage(spec, self.run / "data" / "sft-arms.spec.json")
            return {"arms": {name: {"path": str(p), "convention": name.split("/")[0][4:],
                                    "seed": int(name.split("/s")[1])} for name, p in final.items()}}

        return self.stage("arms", fp, list(final.values()), train)

    # ------------------------------------------------------------------ frozen strata (App. D.1)
    def strata(self, ipath: str, weights: str, prepare: bool = False) -> dict[str, Any] | None:
        """The frozen difficulty strata of the training items when the proposal is on: the user's file
        (``recipe.proposal.strata_file``), none when the task's items carry strata, else estimated with
        the initial policy (train/strata.py) into ``<run>/data/strata.jsonl``, reused while the policy,
        items and sampling settings are unchanged."""
        from crossed_rlvr.conf.checks import RecipeError
        from crossed_rlvr.files import sha256_file as file_sha256
        from crossed_rlvr.tasks.training import train_items
        from crossed_rlvr.train.strata import StrataError, estimate_strata

        c = self.cfg
        prop = c.recipe.proposal
        if c.arms.kind != "grpo" or not prop.enabled:
            return None
        if prop.get("strata_file"):
            path = Path(str(prop.strata_file)).resolve()
            if not path.exists():
                raise RecipeError(f"recipe.proposal.strata_file={prop.strata_file}: no such file")
            return {"file": str(path), "sha256": file_sha256(path)}
        items = train_items(OmegaConf.create(self.train_task()), int(c.arms.train_items), GRPO_ITEM_SEED)
        if items and all(it.get("stratum") is not None for it in items):
            return None
        out = self.run / "data" / "strata.jsonl"
        meta_path = out.with_suffix(".meta.json")
        meta = {"policy": weights, "items": digest([it["item_id"] for it in items]), "eval": _plain(c.eval),
                "samples": int(prop.estimate_samples)}
        if out.exists() and meta_path.exists() and json.loads(meta_path.read_text()) == meta:
            return {"file": str(out.resolve()), "sha256": file_sha256(out)}
        if prepare and c.eval.backend == "vllm":
            import torch

            if not torch.cuda.is_available():
                raise RecipeError(
                    "recipe.proposal.enabled=true: the training items have no difficulty strata, and estimating "
                    f"them needs the initial policy on a GPU (eval={c.eval.backend}). For stages=prepare or "
                    "stages=rehearse here, give recipe.proposal.strata_file=PATH (JSON Lines: item_id, stratum); "
                    "on the GPU node the study estimates them before the arms train.")
        self.say(f"    estimating difficulty strata of {len(items)} training items with the initial policy "
                 f"({int(prop.estimate_samples)} samples each, App. D.1)")
        try:
            info = estimate_strata(items, ipath, c.eval, int(prop.estimate_samples), out, c.model.get("system"))
        except StrataError as err:
            raise RecipeError(str(err)) from None
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        self.say(f"    strata: {info['counts']} -> {out}")
        return {"file": str(out.resolve()), "sha256": info["sha256"]}

    # ------------------------------------------------------------------ rehearse (verl on Ray, no GPU)
    def rehearse(self) -> dict[str, Any]:
        """``stages=rehearse``: the dress rehearsal, then every verl arm's launch script run through
        verl's start-up on a local Ray with logical GPUs up to its first CUDA-needing point
        (train/rehearsal.py). ``rehearsal.json`` holds what each arm reached and how long it took."""
        from crossed_rlvr.train.rehearsal import rehearse

        summary = self.prepare()
        c = self.cfg
        if c.arms.kind != "grpo" or c.engine.name != "verl":
            self.say("    nothing to rehearse on Ray: the arms do not train through verl")
            summary["rehearsal"] = {}
            return summary
        r = c.get("rehearsal") or {}
        only = r.get("conventions")
        arms = {name: arm for name, arm in summary["arms"].items() if only is None or arm["convention"] in only}
        summary["rehearsal"] = rehearse(arms, int(c.engine.n_gpus_per_node), self.run / "rehearsal.json",
                                        timeout=float(r.get("timeout_s", 600)),
                                        wait_limit=float(r.get("wait_limit_s", 120)), say=self.say)
        (self.run / "prepare_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    # ------------------------------------------------------------------ prepare (dress rehearsal)
    def prepare(self) -> dict[str, Any]:
        """Everything up to the launch, on any machine (``stages=prepare``): every arm's training data
        (verl: train and validation parquet, overrides checked by verl's own validation, launch
        scripts), and the evaluation plan with the frozen test items. Nothing is trained or generated."""
        c = self.cfg
        self.run.mkdir(parents=True, exist_ok=True)
        (self.run / "study_config.yaml").write_text(OmegaConf.to_yaml(c, resolve=True))
        ipath = str(self.initial_path())
        initial = {"path": ipath, "built": False}
        if c.arms.kind == "given":  # nothing to prepare: the evaluation plan lists the checkpoints it will read
            arms = {"arms": {name: {**a, "exists": Path(a["path"]).is_dir()}
                             for name, a in self.given_arm_paths().items()}}
        else:
            arms = self._prepare_sft_arms(ipath) if c.arms.kind == "sft" else self._prepare_grpo_arms(ipath)
        plan = self.eval_plan(initial, arms)
        summary = {"initial": ipath, "arms": arms["arms"], "eval_plan": str(self.run / "eval_plan.json"),
                   "responses_planned": plan["responses"]}
        (self.run / "prepare_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _prepare_grpo_arms(self, ipath: str) -> dict[str, Any]:
        from crossed_rlvr.conf.checks import check_config
        from crossed_rlvr.train.cli import run_train
        from crossed_rlvr.train.recipe import training_rows, write_rows

        c = self.cfg
        out: dict[str, Any] = {}
        strata = self.strata(ipath, "not hashed (stages=prepare)", prepare=True)
        for conv, seed in self.arm_list():
            cfg = self.train_config(conv, seed, ipath, "not hashed (stages=prepare)", strata)
            cfg["engine"] = {**cfg["engine"], "launch": False}
            name, run_dir = cfg["arm"], Path(cfg["run_dir"])
            node = OmegaConf.create(cfg)
            check_config(node)
            if c.engine.name == "verl":
                info = run_train(node)
                files = ["data/train.parquet", "data/val.parquet", "verl_overrides.txt", "launch_single_node.sh",
                         "launch_slurm_ray.sbatch"]
            else:  # TRL trains in-process: its data is the whole preparation
                run_dir.mkdir(parents=True, exist_ok=True)
                rows = training_rows(node)
                write_rows(run_dir / "data" / "train.jsonl", rows)
                info, files = {"rows": len(rows)}, ["data/train.jsonl"]
            self.say(f"    prepared {name}: {', '.join(files)}")
            out[name] = {"path": str(run_dir / "checkpoints" / f"step-{int(c.recipe.updates)}"), "convention": conv,
                         "seed": seed, "run_dir": str(run_dir), "files": files,
                         **{k: info[k] for k in ("val_rows", "overrides") if k in info}}
        return {"arms": out}

    def _prepare_sft_arms(self, ipath: str) -> dict[str, Any]:
        from crossed_rlvr.sft.pairs import write_pairs
        from crossed_rlvr.tasks.training import train_items

        c = self.cfg
        arm, control = c.arms.sft_arm, c.arms.sft_control
        data = {conv: self.run / "data" / f"sft-{conv}.jsonl" for conv in (arm, control)}
        items = train_items(OmegaConf.create(self.train_task()), int(c.arms.train_items), SFT_ITEM_SEED)
        n = write_pairs(items, data[arm], data[control], arm, control)
        self.say(f"    prepared {n} content-matched SFT pairs: {data[arm]}, {data[control]}")
        return {"arms": {f"sft-{conv}/s{seed}": {"path": str(self.run / "models" / f"sft-{conv}" / f"s{seed}"),
                                                 "convention": conv, "seed": int(seed), "pairs": n,
                                                 "files": [str(data[conv].relative_to(self.run))]}
                         for seed in c.arms.seeds for conv in (arm, control)}}

    def eval_plan(self, initial: dict[str, Any], arms: dict[str, Any]) -> dict[str, Any]:
        """Policies x requests x wordings with item counts and seeds; freezes the test items now."""
        from crossed_rlvr.eval.generate.plan import frozen_items, item_seed, template_items

        cfg = self.eval_config(initial, arms)
        items, sha, path = frozen_items(Path(cfg.run_dir), cfg.task)
        base = int(cfg.eval.base_seed)
        per_template = {}
        for t in cfg.templates:
            chosen = template_items(items, t, cfg.template_subset, cfg.template_subset_seed)
            per_template[t] = {"items": len(chosen), "first_item_seed": item_seed(base, chosen[0], 0, 0) if chosen else None}
        cells = [{"policy": p["name"], "path": p["path"], "request": r, "template": t,
                  "items": per_template[t]["items"], "samples": int(cfg.samples)}
                 for p in _plain(cfg.policies) for r in cfg.requests for t in cfg.templates]
        plan = {"task": cfg.task.name, "split": cfg.task.split, "items_file": str(path), "items_sha256": sha,
                "n_items": len(items), "templates": per_template, "requests": list(cfg.requests),
                "generation": _plain(cfg.eval), "seeds": "item seed = base_seed + item id (row index for "
                "non-numeric ids) + 10^7 x sample", "policies": _plain(cfg.policies), "cells": cells,
                "responses": sum(x["items"] * x["samples"] for x in cells)}
        (self.run / "eval_plan.json").write_text(json.dumps(plan, indent=2) + "\n")
        self.say(f"    evaluation plan: {len(plan['policies'])} policies x {len(cfg.requests)} requests x "
                 f"{len(cfg.templates)} wordings, {plan['responses']} responses ({path.name}, {len(items)} items)")
        return plan

    # ------------------------------------------------------------------ 3-5
    def policies(self, initial: dict[str, Any], arms: dict[str, Any]) -> list[dict[str, Any]]:
        pols = [{"name": "initial", "path": str(initial["path"]), "training_convention": "initial", "train_seed": None}]
        for name, arm in sorted(arms["arms"].items()):  # stamps store dicts sorted: one order always
            pols.append({"name": name, "path": arm["path"], "training_convention": arm["convention"],
                         "train_seed": int(arm["seed"])})
        return pols

    def eval_config(self, initial: dict[str, Any], arms: dict[str, Any]) -> Any:
        c, ev = self.cfg, self.cfg.evaluation
        task = _plain(c.task)
        if ev.n_items is not None:
            task["n_items"] = int(ev.n_items)
        return OmegaConf.create({
            "model": _plain(c.model), "task": task, "eval": _plain(c.eval), "tracking": _plain(c.tracking),
            "study": self.study_name,
            "run_dir": str(self.run / "eval"), "policies": self.policies(initial, arms),
            "requests": list(ev.requests), "templates": list(ev.templates), "template_subset": ev.template_subset,
            "template_subset_seed": int(ev.template_subset_seed), "samples": int(ev.samples), "overwrite": True,
            "distribute": _plain(c.distribute),
        })

    def evaluate(self, initial: dict[str, Any], arms: dict[str, Any]) -> dict[str, Any]:
        eval_cfg = self.eval_config(initial, arms)
        weights = {p["name"]: self.stamps.hash(p["path"]) if Path(p["path"]).exists() else p["path"]
                   for p in eval_cfg.policies}
        spec = {k: v for k, v in untracked(_plain(eval_cfg)).items() if k != "policies"}
        if self.cfg.evaluation.get("threads") is not None:  # sums in another order: other samples
            spec["threads"] = int(self.cfg.evaluation.threads)
        fp = {"eval": spec, "weights": weights,
                     "policies": [{k: v for k, v in p.items() if k != "path"} for p in _plain(eval_cfg.policies)]}

        def run() -> dict[str, Any]:
            from crossed_rlvr.eval.generate.runner import run_eval

            with torch_threads(self.cfg.evaluation.get("threads")):
                summary = run_eval(eval_cfg)
            return {"cells": len(summary)}

        return self.stage("eval", fp, [self.run / "eval" / "responses"], run)

    def validation_dirs(self) -> list[Path]:
        """Response folders of the arms' crossed validation during training: TRL writes crossed-eval cells
        (``validation.every`` > 0); verl dumps ``{step}.jsonl`` into ``validation/``, which are imported
        here, every step as ``<arm>@step<K>`` (``crossed-import verl --all-steps``)."""
        if self.cfg.arms.kind != "grpo":
            return []
        if self.cfg.engine.name == "verl":
            for conv, seed in self.arm_list():
                self._import_verl_validation(conv, seed)
        dirs = [self.arm_dir(conv, seed) / "validation" / "responses" for conv, seed in self.arm_list()]
        return [d for d in dirs if d.is_dir() and any(d.glob("*.jsonl"))]

    def _import_verl_validation(self, conv: str, seed: int) -> None:
        """verl's validation dumps of one arm as response records (rewritten when the dumps change)."""
        from crossed_rlvr.eval.generate.importers import import_verl_steps
        from crossed_rlvr.files import atomic_write_json, atomic_write_jsonl

        dumps = self.arm_dir(conv, seed) / "validation"
        steps = sorted(dumps.glob("*.jsonl")) if dumps.is_dir() else []
        if not [p for p in steps if p.stem.isdigit()]:
            return
        out = dumps / "responses" / "verl.jsonl"
        stamp = out.with_suffix(".sources.json")
        sources = {p.name: self.stamps.hash(p) for p in steps if p.stem.isdigit()}
        if out.exists() and stamp.exists() and json.loads(stamp.read_text()) == sources:
            return
        records = import_verl_steps(dumps, policy=f"grpo-{conv}/s{seed}", training_convention=conv, train_seed=seed,
                                    task=str(self.cfg.task.name))
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(out, records)
        atomic_write_json(stamp, sources)
        self.say(f"    imported verl validation of grpo-{conv}/s{seed}: {len(sources)} step(s), {len(records)} responses")

    def score(self) -> dict[str, Any]:
        responses = self.run / "eval" / "responses"
        out = self.run / "eval" / "scores.parquet"
        vout = self.run / "eval" / "validation_scores.parquet"
        vdirs = self.validation_dirs()
        fp = {"responses": self.stamps.hash(responses)}
        if vdirs:  # one scores table of every arm's validation steps, for the interactions over training
            fp["validation"] = {str(d.relative_to(self.run)): self.stamps.hash(d) for d in vdirs}

        def run() -> dict[str, Any]:
            from crossed_rlvr.eval.score.scoring import score_files

            out.unlink(missing_ok=True)  # the stage is stale or its output was changed: score again
            score_files([self.run / "eval"], out, overwrite=True)
            info = {"scores": str(out)}
            vout.unlink(missing_ok=True)
            if vdirs:
                score_files(vdirs, vout, overwrite=True)
                info["validation_scores"] = str(vout)
            return info

        return self.stage("score", fp, [out, vout] if vdirs else [out], run)

    def analyze(self, arms: dict[str, Any]) -> dict[str, Any]:
        a = self.cfg.analysis
        scores = self.run / "eval" / "scores.parquet"
        vscores = self.run / "eval" / "validation_scores.parquet"
        out = self.run / "analysis"
        metrics = {name: Path(arm["path"]).parent.parent / "metrics.jsonl" for name, arm in arms["arms"].items()}
        metrics = {k: v for k, v in metrics.items() if v.exists()}
        fp = {"scores": self.stamps.hash(scores), "analysis": _plain(a),
                     "metrics": {k: self.stamps.hash(v) for k, v in metrics.items()}}
        warm = self.run / "models" / "initial" / "sft_summary.json"  # the warm start's figures, when built here
        warm = warm if self.cfg.initial.build == "warmstart" and warm.exists() else None
        if warm is not None:
            fp["warmstart"] = self.stamps.hash(warm)
        if vscores.exists():
            fp["validation_scores"] = self.stamps.hash(vscores)
        tracking = _plain(self.cfg.tracking)

        def sections(folder: Path) -> list[str]:
            """The study's own report sections, written with the analysis (one report, one contents)."""
            from crossed_rlvr.analysis.report.document import initial_section, training_section

            out_sections = []
            if vscores.exists() and (over := self._over_training(vscores, folder, a)) is not None:
                out_sections.append(over)
            if metrics:
                out_sections.append(training_section(folder, {k: _read_metrics(v) for k, v in metrics.items()}))
            if warm is not None:
                out_sections.append(initial_section(json.loads(warm.read_text())))
            return out_sections

        def run() -> dict[str, Any]:
            from crossed_rlvr.analysis.cli import analyze

            analyze(scores, out, n_resamples=int(a.resamples), rng_seed=int(a.rng_seed), overwrite=True,
                    tracking="off", sections=sections)
            from crossed_rlvr.tracking import enabled

            if enabled(OmegaConf.create(tracking)):  # after the training section: the logged report is whole
                from crossed_rlvr.analysis.tracking import log_analysis

                log_analysis(out, OmegaConf.create(tracking), study=self.study_name, scores=scores,
                             run_dir=self.run, config=_plain(self.cfg))
            return {"report": str(out / "report.md")}

        return self.stage("analyze", fp, [out], run)

    def _over_training(self, vscores: Path, out: Path, a: Any) -> str | None:
        """The validation steps analysed like any crossed set (``analysis/validation/``), and the report section
        of their interactions over training (its table and figure written into ``out``); None with fewer than
        two validated steps."""
        import pandas as pd

        from crossed_rlvr.analysis.cli import analyze
        from crossed_rlvr.analysis.report.over_training import write_over_training

        sub = out / "validation"
        # its tables in full; its figures would repeat the main ones (the over-training figure is drawn below)
        analyze(vscores, sub, n_resamples=int(a.resamples), rng_seed=int(a.rng_seed), overwrite=True,
                figures=False, tracking="off")
        section = write_over_training(pd.read_csv(sub / "contrasts.csv"), out)
        if section is None:
            return None
        return ("\n" + section + "\n\nThe whole analysis of the validation steps: "
                "[validation/report.md](validation/report.md).\n")


# Settings that change how a stage is watched, not what it produces: never part of a fingerprint.
UNTRACKED = ("tracking", "study", "overwrite", "distribute")  # how, not what: the same files either way


def untracked(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in UNTRACKED}


def changed_inputs(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted names of the inputs that differ between two stamps (for the console, at most 6)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += changed_inputs(old.get(key), new.get(key), f"{prefix}{key}.")
        return out[:6]
    return [] if old == new else [prefix[:-1] or "inputs"]


def _lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open())
    except FileNotFoundError:
        return 0


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _arm_result(summary: dict[str, Any]) -> dict[str, Any]:
    keep = ("seconds", "reward_first", "reward_last", "payload_first", "payload_last", "skipped", "validation_steps",
            "validation_seconds", "bf16", "threads")
    return {k: summary[k] for k in keep if k in summary}


def _one_thread() -> None:
    from crossed_rlvr.interrupt import ignore_interrupts

    ignore_interrupts()  # the study's own process reports Ctrl-C
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _train_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One GRPO arm in a worker process; its console output goes to ``<arm>/train.log``."""
    import contextlib

    from crossed_rlvr.train.cli import run_train

    run_dir = Path(cfg["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "train.log").open("w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return run_train(OmegaConf.create(cfg))
