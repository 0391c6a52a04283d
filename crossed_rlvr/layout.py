"""Where every file of a run lives: one class per kind of run directory, so that a path is spelled once.

- :class:`RunLayout`: a study (``crossed-study run_dir=...``): its initial policy, arms, evaluation,
  analysis and stage stamps.
- :class:`ArmLayout`: one training arm (``crossed-train run_dir=...``, or a study's ``train/<conv>/s<seed>``):
  its data, metrics, checkpoints and validation.
- :class:`EvalLayout`: one crossed evaluation (``crossed-eval run_dir=...``, or a study's ``eval/``): its frozen
  items, manifest, response files and scores.
- :class:`ScoresFiles`, :class:`AnalysisLayout`: a scores table and the files beside it; an analysis folder.
- :class:`CalibrationLayout`, :class:`RescoreLayout`: a human calibration's folder (or a Stage 1 pack);
  ``crossed-rescore``'s output folder.
- :class:`WorkerFiles`, :class:`WarmCacheLayout`, :class:`SandboxLayout`: a stage run in worker processes (its
  spec and result), the warm-start cache that studies share, the code sandbox's scratch folder.

Every other module asks these for a path instead of joining strings under a folder the project writes; the
names other tools give their files (Hugging Face, verl, lm-eval, EvalPlus) are spelled where those tools are
used (tests/test_layout.py holds the rule and its short list of such names).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SFT_SUMMARY = "sft_summary.json"  # inside a policy trained by SFT: its figures, and the sign that it is finished
# What a trainer leaves beside a policy's weights that is a record of the run, not the policy: its timings and its
# pickled arguments (with the run's own paths). Left out of every hash of a policy (files.policy_sha256), so the same
# weights, tokenizer and config rebuilt are the same policy.
RUN_RECORDS = (SFT_SUMMARY, "training_args.bin")
ARM_STAMP = "crossed_rlvr_arm.json"  # inside a GRPO arm's merged final policy: which arm trained it, and with what
TRACKING_LEDGER = Path("wandb") / "crossed-runs.jsonl"  # under any command's run_dir: the wandb runs it started
FOLDER_LOCK = ".crossed-rlvr.lock"  # in every folder a command writes: its writer (folder_lock.py)


@dataclass(frozen=True)
class ArmLayout:
    """One training arm's folder."""

    root: Path

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> ArmLayout:
        """The arm that wrote a checkpoint (``<arm>/checkpoints/step-<K>``)."""
        return cls(checkpoint.parent.parent)

    @classmethod
    def holding(cls, policy: Path) -> ArmLayout | None:
        """The arm that wrote a policy folder, its checkpoint (``checkpoints/step-<K>``) or the checkpoint its
        crossed validation read (``validation/checkpoints/step-<K>``); None for a folder no arm wrote."""
        for arm in (cls.of_checkpoint(policy), cls(policy.parent.parent.parent)):
            if arm.resolved_config.is_file():
                return arm
        return None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def train_rows(self) -> Path:
        """The arm's training rows, in the order it trains on them (TRL's input)."""
        return self.data / "train.jsonl"

    @property
    def verl_train_data(self) -> Path:
        """verl's training rows (its ``data.train_files``)."""
        return self.data / "train.parquet"

    @property
    def verl_val_data(self) -> Path:
        """verl's crossed validation rows, one per item, request and wording (its ``data.val_files``)."""
        return self.data / "val.parquet"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def resolved_config(self) -> Path:
        return self.root / "resolved_config.json"

    @property
    def metrics(self) -> Path:
        """One JSON line per update (TRL's trainer)."""
        return self.root / "metrics.jsonl"

    @property
    def log(self) -> Path:
        """The console of an arm trained in a worker process."""
        return self.root / "train.log"

    @property
    def worker_spec(self) -> Path:
        return self.root / "worker.spec.json"

    @property
    def file_hashes(self) -> Path:
        """The hashes of the arm's final policy's files by size and time (``fingerprint.HashCache``): a reuse does
        not read a 7B policy again to find it intact."""
        return self.root / "file_hashes.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        """The policy the arm wrote at update ``step`` (its final policy at the last update)."""
        return self.checkpoints / f"step-{int(step)}"

    def checkpoint_steps(self) -> list[int]:
        """The updates the arm has a checkpoint of (``checkpoints/step-<K>``), in order."""
        found = (p.name.split("-", 1)[1] for p in self.checkpoints.glob("step-*"))
        return sorted(int(k) for k in found if k.isdigit())

    @property
    def convention(self) -> str:
        """The convention of a study's arm (``train/<convention>/s<seed>``)."""
        return self.root.parent.name

    @property
    def seed(self) -> int:
        """The seed of a study's arm (``train/<convention>/s<seed>``)."""
        return int(self.root.name[1:])

    def verl_shards(self, step: int) -> Path:
        """verl's FSDP shards of the actor at update ``step`` (merged into ``checkpoint(step)``)."""
        return self.checkpoints / f"global_step_{int(step)}" / "actor"

    @property
    def ray_auth_token(self) -> Path:
        return self.root / ".ray_auth_token"

    @property
    def verl_latest(self) -> Path:
        """verl's record of its last saved iteration: present once an arm can resume."""
        return self.checkpoints / "latest_checkpointed_iteration.txt"

    @property
    def trl_output(self) -> Path:
        return self.root / "trl"

    @property
    def validation(self) -> Path:
        """Crossed validation during training: TRL's evaluation folder, or verl's ``{step}.jsonl`` dumps."""
        return self.root / "validation"

    @property
    def validation_eval(self) -> EvalLayout:
        """TRL's crossed validation, an evaluation of its own (its responses under ``validation/responses``)."""
        return EvalLayout(self.validation)

    @property
    def validation_summary(self) -> Path:
        return self.validation / "summary.jsonl"

    @property
    def verl_validation_records(self) -> Path:
        """verl's validation dumps imported as response records (every step in one file)."""
        return self.validation_eval.responses / "verl.jsonl"

    @property
    def verl_validation_sources(self) -> Path:
        """The hashes of the dumps ``verl_validation_records`` was imported from (reimported when they change)."""
        return self.verl_validation_records.with_suffix(".sources.json")

    def validation_checkpoint(self, step: int) -> Path:
        """The policy saved at update ``step`` to be validated (TRL)."""
        return self.validation / "checkpoints" / f"step-{int(step)}"

    def validation_scores(self, step: int) -> Path:
        return self.validation / "scores" / f"step-{int(step)}.parquet"

    @property
    def verl_overrides(self) -> Path:
        return self.root / "verl_overrides.txt"

    @property
    def memory_plan(self) -> Path:
        return self.root / "memory_plan.txt"

    @property
    def memory_plan_json(self) -> Path:
        return self.root / "memory_plan.json"

    @property
    def matched_check(self) -> Path:
        """``crossed-match``'s verdict on this arm and its partner (written into both arms)."""
        return self.root / "matched_check.json"

    @property
    def rehearsal_log(self) -> Path:
        """The console of a launch rehearsal (``stages=rehearse``)."""
        return self.root / "rehearsal.log"

    @property
    def verl_metrics(self) -> Path:
        """verl's file logger's metrics, one ``launch-<UTC time>-<pid>.jsonl`` per launch."""
        return self.root / "verl_metrics"

    def verl_launch_metrics(self, stamp: str) -> Path:
        """One launch's metrics (``stamp``: its UTC start time and process id)."""
        return self.verl_metrics / f"launch-{stamp}.jsonl"

    def verl_launches_metrics(self) -> list[Path]:
        """Every launch's metrics file, oldest first."""
        return sorted(self.verl_metrics.glob("launch-*.jsonl"))

    @property
    def launch_single_node(self) -> Path:
        return self.root / "launch_single_node.sh"

    @property
    def launch_slurm(self) -> Path:
        return self.root / "launch_slurm_ray.sbatch"

    @property
    def advantages(self) -> Path:
        """The weighted trainer's advantages before and after the importance scaling, ``step-<N>.pt`` per update
        (``engine.dump_advantages``)."""
        return self.root / "advantages"

    def advantages_at(self, step: int) -> Path:
        return self.advantages / f"step-{step}.pt"

    @property
    def rollout_probe(self) -> Path:
        """The vLLM rollout's log-probs of a fixed token sequence after each weight sync, one JSON line a sync
        (``engine.dump_advantages`` on the CPU route: train/verl_vllm.py)."""
        return self.root / "rollout_probe.jsonl"

    @property
    def wandb_config(self) -> Path:
        """The arm's settings for its wandb run's config, added by our trainer inside verl (train/verl_weighted.py)."""
        return self.root / "wandb_config.json"

    def resume_log(self, which: str) -> Path:
        """The console of one launch in the kill-and-resume check (``first``, ``second``, ``third``)."""
        return self.root / f"resume_{which}.log"


@dataclass(frozen=True)
class EvalLayout:
    """One crossed evaluation's folder."""

    root: Path

    @classmethod
    def of_response_file(cls, response_file: Path) -> EvalLayout:
        """The evaluation a response file belongs to (``<eval>/responses/<cell>.jsonl``)."""
        return cls(response_file.parent.parent)

    @property
    def items_folder(self) -> Path:
        return self.root / "items"

    def items(self, task: str, split: str) -> Path:
        """The frozen item file of a task's split: written on first use, checked against the manifest after."""
        return self.items_folder / f"{task}-{split}.jsonl"

    @property
    def manifest(self) -> Path:
        return self.root / "run.json"

    @property
    def summary(self) -> Path:
        return self.root / "eval_summary.json"

    @property
    def responses(self) -> Path:
        """One response file per cell (and its ``.meta.json``)."""
        return self.root / "responses"

    @property
    def made_with(self) -> Path:
        """What a study's cells were sampled under that their settings records do not hold (CPU numerics, threads)."""
        return self.root / "cells_made_with.json"

    @property
    def partial(self) -> Path:
        """Cells still being generated."""
        return self.responses / ".partial"

    def response_file(self, cell: str, partial: bool = False) -> Path:
        """A cell's response records (``.jsonl``); ``partial``: while it is being generated."""
        return (self.partial if partial else self.responses) / f"{cell}.jsonl"

    @staticmethod
    def meta_of(response_file: Path) -> Path:
        """The settings and hashes beside a response file (``<cell>.meta.json``)."""
        return response_file.with_suffix(".meta.json")

    @staticmethod
    def cell_of(file_name: str) -> str:
        """The cell a response file or its record belongs to (``<cell>.jsonl``, ``<cell>.meta.json``)."""
        return file_name.removesuffix(".meta.json").removesuffix(".jsonl")

    def response_meta(self, cell: str, partial: bool = False) -> Path:
        """A cell's settings and hashes, beside its records."""
        return (self.partial if partial else self.responses) / f"{cell}.meta.json"

    def shards(self, cell: str) -> Path:
        """A cell's shards while several workers generate it."""
        return self.partial / f"{cell}.shards"

    @staticmethod
    def shard_name(item: int, sample: int) -> str:
        """A finished shard's file in a cell's shards folder, named by its first item and sample index (so that
        name order is generation order)."""
        return f"{int(item):07d}-{int(sample):05d}.jsonl"

    @property
    def scores(self) -> Path:
        return self.root / "scores.parquet"

    @property
    def validation_scores(self) -> Path:
        """A study's scores of its arms' validation steps."""
        return self.root / "validation_scores.parquet"


@dataclass(frozen=True)
class ScoresFiles:
    """A scores table (``crossed-score --output``, a study's ``eval/scores.parquet``) and the files beside it."""

    table: Path

    @property
    def manifest(self) -> Path:
        """The response files it was scored from, with their sha256, and the scoring's settings."""
        return self.table.with_name(self.table.stem + ".manifest.json")

    @property
    def partial(self) -> Path:
        """Finished shards of an interrupted scoring, reused by the next run of the same inputs."""
        return self.table.with_name(self.table.name + ".partial")

    @property
    def partial_manifest(self) -> Path:
        return self.partial / "manifest.json"

    def shard(self, k: int) -> Path:
        """The ``k``-th shard of scored rows, written whole."""
        return self.partial / f"shard-{int(k):05d}.parquet"

    def shards(self) -> list[Path]:
        """The shards written so far."""
        return sorted(self.partial.glob("shard-*.parquet"))


@dataclass(frozen=True)
class AnalysisLayout:
    """One analysis folder (``crossed-analyze --out``, a study's ``analysis/``, its ``analysis/validation/``, a code
    analysis): tables, report, figures and manifest (docs/formats.md)."""

    root: Path

    def table(self, name: str) -> Path:
        """A table (``cells``, ``contrasts``, ``coverage``, ``paired_tests``, ``over_training`` ...) as CSV."""
        return self.root / f"{name}.csv"

    def rows(self, name: str) -> Path:
        """A table of records (``examples``, ``reader_audit_examples``) as JSON Lines."""
        return self.root / f"{name}.jsonl"

    @property
    def cells(self) -> Path:
        return self.table("cells")

    @property
    def contrasts(self) -> Path:
        return self.table("contrasts")

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def manifest(self) -> Path:
        """The inputs with their sha256, the settings, checks, machine, protocol and every output."""
        return self.root / "manifest.json"

    @property
    def summary(self) -> Path:
        """A code analysis's settings (dataset, tasks, samples)."""
        return self.root / "summary.json"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    def figure(self, name: str) -> Path:
        return self.figures / f"{name}.png"

    @property
    def validation(self) -> AnalysisLayout:
        """A study's validation steps analysed like any crossed set."""
        return AnalysisLayout(self.root / "validation")


@dataclass(frozen=True)
class RunLayout:
    """One study's run directory."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "study_config.yaml"

    @property
    def summary(self) -> Path:
        return self.root / "study_summary.json"

    @property
    def stages(self) -> Path:
        """The stage stamps (``<stage>.json``)."""
        return self.root / "stages"

    def stage_stamp(self, stage: str) -> Path:
        """What a finished stage ran with and made (study/stamps.py)."""
        return self.stages / f"{stage}.json"

    @property
    def file_hashes(self) -> Path:
        """The stamps' cache of file hashes (size and modification time -> sha256)."""
        return self.stages / "file_hashes.json"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def initial(self) -> Path:
        """The warm-started initial policy, when the study builds it."""
        return self.models / "initial"

    @property
    def warmstart_summary(self) -> Path:
        return self.initial / SFT_SUMMARY

    @property
    def fresh(self) -> Path:
        """The freshly built tiny model the warm start begins from (removed once the warm start is done)."""
        return self.models / "fresh"

    def sft_policy(self, convention: str, seed: int) -> Path:
        """An SFT marker arm's policy."""
        return self.models / f"sft-{convention}" / f"s{int(seed)}"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def train_rows(self) -> Path:
        """A hub task's training split, frozen by content on first use."""
        return self.data / "train_rows.jsonl"

    @staticmethod
    def origin_of(rows: Path) -> Path:
        """The task settings a frozen file of training rows was drawn with, beside it."""
        return rows.with_suffix(".origin.json")

    @property
    def strata(self) -> Path:
        return self.data / "strata.jsonl"

    @property
    def strata_meta(self) -> Path:
        """What the strata were estimated from (policy, items, sampling): they are reused while it is unchanged."""
        return self.data / "strata.meta.json"

    def sft_pairs(self, convention: str) -> Path:
        """The content-matched SFT targets of one convention."""
        return self.data / f"sft-{convention}.jsonl"

    @property
    def sft_spec(self) -> Path:
        return self.data / "sft-arms.spec.json"

    def arm(self, convention: str, seed: int) -> ArmLayout:
        """The folder of the GRPO arm of one convention and seed."""
        return ArmLayout(self.root / "train" / convention / f"s{int(seed)}")

    def arms(self) -> list[ArmLayout]:
        """Every GRPO arm folder there is (``train/<convention>/s<seed>``), sorted."""
        return [ArmLayout(p) for p in sorted((self.root / "train").glob("*/s*"))
                if p.is_dir() and p.name[1:].isdigit()]

    @property
    def eval(self) -> EvalLayout:
        return EvalLayout(self.root / "eval")

    @property
    def eval_plan(self) -> Path:
        return self.root / "eval_plan.json"

    @property
    def prepare_summary(self) -> Path:
        return self.root / "prepare_summary.json"

    @property
    def rehearsal(self) -> Path:
        return self.root / "rehearsal.json"

    @property
    def analysis(self) -> Path:
        return self.root / "analysis"

    @property
    def analysis_files(self) -> AnalysisLayout:
        return AnalysisLayout(self.analysis)

    @property
    def report(self) -> Path:
        return self.analysis_files.report


@dataclass(frozen=True)
class CalibrationLayout:
    """A human calibration's folder (``crossed-calibrate sample -o``), or a Stage 1 pack of it (``pack -o``): the
    frozen sample and its header, the declared roles, the labels, and the analysis."""

    root: Path

    @property
    def head(self) -> Path:
        """The frozen sample's header: seed, the scores file and the sha256 of the scores and the sample."""
        return self.root / "calibration.json"

    @property
    def sample(self) -> Path:
        return self.root / "sample.jsonl"

    @property
    def roles(self) -> Path:
        """The declared annotators and adjudicators with each person's secret link."""
        return self.root / "roles.json"

    @property
    def labels(self) -> Path:
        return self.root / "labels.sqlite"

    @property
    def analysis(self) -> AnalysisLayout:
        """``crossed-calibrate analyze``'s tables and report, unless ``-o`` names another folder."""
        return AnalysisLayout(self.root / "analysis")


@dataclass(frozen=True)
class RescoreLayout:
    """``crossed-rescore``'s output folder (``-o``): comparisons, pooling rules, figures, report, pooled share and
    the reader audit."""

    root: Path

    @property
    def comparisons(self) -> Path:
        return self.root / "comparisons.csv"

    @property
    def pooling_rules(self) -> Path:
        return self.root / "pooling_rules.csv"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def pooled(self) -> Path:
        return self.root / "pooled.json"

    @property
    def where_omega(self) -> Path:
        """Fig. 3: where the fixed extractor found the answer (linked from the report by its name)."""
        return self.root / "where_omega.png"

    @property
    def spread(self) -> Path:
        """Fig. 5: the reported gains across harness extractors (linked from the report by its name)."""
        return self.root / "spread.png"

    @property
    def reader_audit(self) -> Path:
        return self.root / "reader_audit.csv"

    @property
    def reader_audit_examples(self) -> Path:
        return self.root / "reader_audit_examples.jsonl"


@dataclass(frozen=True)
class WorkerFiles:
    """A stage run in worker processes (``python -m``/``torchrun``): the spec the study writes, and the result its
    rank 0 writes beside it (``<spec stem>.result.json``)."""

    spec: Path

    @property
    def result(self) -> Path:
        return self.spec.with_suffix(".result.json")

    def one(self, name: str) -> WorkerFiles:
        """The files of one policy's own worker when several train side by side (``<spec stem>.<policy>.json``)."""
        return WorkerFiles(self.spec.with_name(f"{self.spec.stem}.{name.replace('/', '_')}.json"))


@dataclass(frozen=True)
class WarmCacheEntry:
    """One warm-started initial policy in the cache: the policy folder and the initial stage's info."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def info(self) -> Path:
        """Written last: an entry without it was cut short."""
        return self.root / "info.json"


@dataclass(frozen=True)
class WarmCacheLayout:
    """The warm-start cache that studies share (``initial.cache_dir``): one entry per initial-stage fingerprint."""

    root: Path

    def entry(self, key: str) -> WarmCacheEntry:
        return WarmCacheEntry(self.root / key)

    def lock(self, key: str) -> Path:
        """Held while an entry is built or copied."""
        return self.root / f"{key}.lock"

    def partial(self, key: str, pid: int) -> WarmCacheEntry:
        """An entry being written by process ``pid``, renamed into place once whole."""
        return WarmCacheEntry(self.root / f".{key}.partial-{int(pid)}")


@dataclass(frozen=True)
class SandboxLayout:
    """The code sandbox's scratch folder on the host; ``SandboxLayout(Path("/"))`` is the same names as one run sees
    them from inside (its job's folder at ``/job``, the shared inputs at ``/shared``, the harness at
    ``/harness.py``)."""

    root: Path

    @property
    def harness(self) -> Path:
        return self.root / "harness.py"

    @property
    def shared(self) -> Path:
        """Read-only inputs every run sees (a task's inputs, which all its samples share)."""
        return self.root / "shared"

    @property
    def job(self) -> Path:
        """One run's job folder, as that run sees it."""
        return self.root / "job"

    @property
    def site(self) -> Path:
        """numpy for the samples (sandbox/site.py)."""
        return self.root / "site"

    @property
    def seccomp_filter(self) -> Path:
        """The compiled seccomp filter every run is started with (sandbox/seccomp.py)."""
        return self.root / "seccomp.bpf"

    @staticmethod
    def job_file(job_folder: Path) -> Path:
        """The job (code, inputs, limits) inside a job folder."""
        return job_folder / "job.json"

    @staticmethod
    def uid_lock(folder: Path, uid: int) -> Path:
        """The lock a sandbox holds on a slot's uid, in the machine's shared temporary folder."""
        return folder / f"crossed-sandbox-uid-{int(uid)}.lock"


@dataclass(frozen=True)
class UserCache:
    """The project's cache on this machine (``$XDG_CACHE_HOME/crossed-rlvr``, else ``~/.cache/crossed-rlvr``):
    what is computed once per machine and reused by every run."""

    root: Path

    @classmethod
    def default(cls) -> UserCache:
        return cls(Path(os.environ.get("XDG_CACHE_HOME", cls.home_caches())) / "crossed-rlvr")

    @classmethod
    def in_home(cls) -> UserCache:
        """The cache under the home folder, whatever ``XDG_CACHE_HOME`` says (the converted SmolLM2's default)."""
        return cls(cls.home_caches() / "crossed-rlvr")

    @staticmethod
    def home_caches() -> Path:
        return Path.home() / ".cache"

    @property
    def torchinductor(self) -> Path:
        """torch's compiled kernels, kept between commands (crossed_rlvr/scratch.py: not in a command's own tmp)."""
        return self.root / "torchinductor"

    @property
    def smollm2(self) -> Path:
        """SmolLM2-135M-Instruct converted once from its GGUF file (policies/smollm.py)."""
        return self.root / "smollm2-135m-instruct"

    @property
    def code_oracle(self) -> Path:
        """The canonical solutions' expected outputs, one folder per code dataset (eval/score/execution.py)."""
        return self.root / "code-oracle"

    def code_tiny(self, split: str, n_test: int, n_train: int, seed: int) -> Path:
        """One split of the generated code task, named by its parameters (tasks/code.py)."""
        return self.root / "code-tiny" / f"{split}-{int(n_test)}-{int(n_train)}-{int(seed)}.jsonl"

    def sandbox_site(self, numpy: str, python: str) -> Path:
        """The sandbox's numpy for the system interpreter (sandbox/site.py)."""
        return self.root / f"sandbox-site-numpy-{numpy}-py{python}"
