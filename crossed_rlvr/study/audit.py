"""``crossed-audit``: model folders or hub names in, the crossed report out (paper 001 §2-§3).

    crossed-audit initial=BASE hash=HASH_CKPT boxed=BOXED_CKPT task=gsm8k eval=vllm run_dir=runs/audit
    crossed-audit initial=BASE boxed=[SEED0_CKPT,SEED1_CKPT] task=math500

Each policy is named by the convention its training rewarded (``hash``, ``boxed``, ``json``, ``xml``,
``answer_only``; on a code task ``fence`` and ``begin_done``; a list is one checkpoint per seed, seeds 0, 1, ... in
its order) and ``initial`` is the base. A code task's policies write programs, run in the sandbox and analysed by
pass@k and γ (App. D.3: the code study's own steps).
The study's last three stages run on them as they run on a study's arms: every policy under every request and
wording (``eval/responses``), every response read by the fixed reader panel (``eval/scores.parquet``), then the
cells, contrasts with paired-bootstrap intervals and the report (``analysis/``): the crossed interactions where both
conventions of a seed are given, ΔP and the gains against the initial policy where only one is. The stage cache
and folder shape are the study's, so a second run reuses what is finished and a policy added later generates only
its own cells.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf
from rich.console import Console

from crossed_rlvr.conf.checks import audit_checkpoints
from crossed_rlvr.conf.schema import AuditConf, StudyConf
from crossed_rlvr.layout import RunLayout
from crossed_rlvr.names import policy_name
from crossed_rlvr.study import answer_steps, code_steps  # noqa: F401  (each registers its task kind's steps)
from crossed_rlvr.study.configs import StudyConfigs
from crossed_rlvr.study.plan import ArmPlan, Policy
from crossed_rlvr.study.stamps import StageCache
from crossed_rlvr.study.steps import steps_for
from crossed_rlvr.task_sources import is_code

STAGES = ("eval", "score", "analyze")
METHOD = "given"  # the policies' method in their names (``given-boxed/s0``): trained elsewhere, by any method


def given_policies(cfg: AuditConf) -> tuple[Policy, list[Policy]]:
    """(the initial policy, every convention's policies, seeds 0, 1, ... in the order given)."""
    base, given = audit_checkpoints(cfg)
    return Policy.initial(base), [Policy(policy_name(METHOD, conv, seed), path, conv, seed, METHOD)
                                  for conv, paths in given.items() for seed, path in enumerate(paths)]


def study_config(cfg: AuditConf, initial: Policy) -> StudyConf:
    """The study config the answer steps read: the audit's sections, the base as the model, and no arms of a
    study's own (``arms.kind=none``: nothing to train, no arm folders or training validation to read)."""
    study = OmegaConf.structured(StudyConf)
    for key in ("model", "task", "eval", "tracking", "evaluation", "analysis", "distribute"):
        study[key] = getattr(cfg, key)
    study.run_dir = str(cfg.run_dir)
    study.model.path = initial.path
    study.model.source = "local" if Path(study.model.path).is_dir() else "hub"
    study.initial.build = "given"
    study.arms.kind = "none"
    if is_code(study.task):  # programs under the code requests, in the original wording (App. D.3)
        from crossed_rlvr.rewards.code import CODE_CONVENTIONS

        study.evaluation.requests, study.evaluation.templates = list(CODE_CONVENTIONS), ["original"]
    return study  # a DictConfig typed by the StudyConf schema


class Audit:
    """The steps' view of a run (``steps.StudyState``) with given policies: a config, a run folder and its stage
    cache, the commands' configs; no initial policy to build, no arms to plan."""

    def __init__(self, cfg: AuditConf, console: Console | None = None) -> None:
        self.initial, self.arms = given_policies(cfg)
        self.cfg = study_config(cfg, self.initial)
        self.layout = RunLayout(Path(cfg.run_dir))
        self.console = console
        self.stage = StageCache(self.layout.root, STAGES, self.say)
        self.stamps = self.stage.stamps
        self.study_name = str(self.cfg.tracking.group or self.layout.root.resolve().name)
        self.configs = StudyConfigs(self.cfg, self.layout, self.study_name, self.say)
        self.plans: list[ArmPlan] = []

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text)

    def run(self) -> Path:
        """Evaluate, score and analyse; returns the report."""
        steps = steps_for(self.cfg.task)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        steps.evaluate(self, self.initial, self.arms)
        steps.score(self)
        steps.analyze(self, self.arms)
        return self.layout.report


def _run(cfg: AuditConf) -> None:
    console = Console(stderr=True)
    console.rule(f"crossed-audit -> {cfg.run_dir}")
    report = Audit(cfg, console).run()
    console.print(f"report: {report}")
    print(report)


def main() -> None:
    from crossed_rlvr.conf.app import hydra_app

    hydra_app("crossed-audit", "crossed_audit", _run)()


if __name__ == "__main__":
    main()
