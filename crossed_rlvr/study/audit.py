"""``crossed-audit``: model folders or hub names in, the crossed report out (paper 001 §2-§3).

    crossed-audit initial=BASE hash=HASH_CKPT boxed=BOXED_CKPT task=gsm8k eval=vllm run_dir=runs/audit
    crossed-audit initial=BASE boxed=[SEED0_CKPT,SEED1_CKPT] task=math500
    crossed-audit preset=d3 from_study=runs/qwen7b run_dir=runs/d3      # App. D.3: a study's policies on code

Each policy is named by the convention its training rewarded (``hash``, ``boxed`` or any registered convention
(``crossed_rlvr/rewards/conventions.py``); on a code task ``fence`` and ``begin_done``; a list is one checkpoint per seed, seeds 0, 1, ... in
its order) and ``initial`` is the base. A code task's policies write programs, run in the sandbox and analysed by
pass@k and γ (App. D.3: the code study's own steps; ``preset=code`` and ``preset=d3`` hold its settings).
``from_study=RUN_DIR`` adds a finished study's initial policy and arms, as its arms stage recorded them, under
their own names (``step=N``: each arm's checkpoint at update N, ``grpo-hash/s83@stepN``).
The study's last three stages run on them as they run on a study's arms: every policy under every request and
wording (``eval/responses``), every response read by the fixed reader panel (``eval/scores.parquet``), then the
cells, contrasts with paired-bootstrap intervals and the report (``analysis/``): the crossed interactions where both
conventions of a seed are given, ΔP and the gains against the initial policy where only one is. The stage cache
and folder shape are the study's, so a second run reuses what is finished and a policy added later generates only
its own cells.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from crossed_rlvr.conf.schema import AuditConf, StudyConf, conf_of
from crossed_rlvr.errors import ConfigError, CrossedError
from crossed_rlvr.layout import ArmLayout, RunLayout
from crossed_rlvr.names import policy_name
from crossed_rlvr.study import answer_steps, code_steps  # noqa: F401  (each registers its task kind's steps)
from crossed_rlvr.study.configs import StudyConfigs
from crossed_rlvr.study.plan import ArmPlan, Policy, policies_of
from crossed_rlvr.study.stamps import StageCache, Stamps
from crossed_rlvr.study.steps import steps_for
from crossed_rlvr.task_sources import task_kind

STAGES = ("eval", "score", "analyze")
METHOD = "given"  # the policies' method in their names (``given-boxed/s0``): trained elsewhere, by any method


class NoStudyPolicies(CrossedError):
    """``from_study`` names a folder without finished initial and arms stages, or arms without the asked checkpoint."""


def study_arms(run_dir: str | Path, step: int | None = None) -> tuple[Policy, list[Policy]]:
    """A finished study's initial policy and every arm's policy, as its stage stamps recorded them (never read from
    folder names): each arm's final weights, or with ``step`` its checkpoint at that update. App. D.3 evaluates the
    GSM8K-trained arms on code without training anything again."""
    run = RunLayout(Path(run_dir).expanduser().resolve())
    stamps = Stamps(run.root)
    initial, arms = stamps.read("initial"), stamps.read("arms")
    if initial is None or arms is None:
        raise NoStudyPolicies(f"{run.root}: no finished initial and arms stages (no {stamps.path('initial')} or "
                              f"{stamps.path('arms')}): run the study first")
    trained = policies_of(arms["info"])
    if step is not None:
        trained = [checkpoint_of(policy, step, run.root) for policy in trained]
    policies = [Policy.initial(initial["info"]["path"]), *trained]
    missing = [p.path for p in policies if not Path(p.path).is_dir()]
    if missing:
        raise NoStudyPolicies(f"{run.root}: the study's policies are gone: {', '.join(missing)}")
    return policies[0], policies[1:]


def checkpoint_of(policy: Policy, step: int, root: Path) -> Policy:
    """An arm's checkpoint of update ``step`` (``grpo-hash/s83@step50``: a policy of its own, found in the folder of
    the arm that wrote the final policy)."""
    arm = ArmLayout.holding(Path(policy.path))
    if arm is None or not arm.checkpoint(step).is_dir():
        raise NoStudyPolicies(f"{root}: {policy.name} has no checkpoint at step {step} "
                              f"(its checkpoints: {arm.checkpoint_steps() if arm else 'none'})")
    return policy.at_step(step, arm.checkpoint(step))


def study_policies(run_dir: str | Path, step: int | None = None) -> dict[str, str]:
    """:func:`study_arms` as policy name -> model folder."""
    initial, arms = study_arms(run_dir, step)
    return {p.name: p.path for p in (initial, *arms)}


def given_policies(cfg: AuditConf) -> tuple[Policy, list[Policy]]:
    """(the initial policy, ``from_study``'s arms in name order, then every convention's policies, seeds 0, 1, ...
    in the order given). ``initial=`` takes the place of the study's initial policy."""
    base, given = audit_checkpoints(cfg)  # refuses a config with neither a base nor a study
    initial, arms = study_arms(cfg.from_study, cfg.step) if cfg.from_study else (None, [])
    if base is not None:
        initial = Policy.initial(base)
    if initial is None:
        raise ConfigError("initial=PATH is required (or from_study=RUN_DIR)")
    return initial, [*arms, *(Policy(policy_name(METHOD, conv, seed), path, conv, seed, METHOD)
                              for conv, paths in given.items() for seed, path in enumerate(paths))]


def audit_checkpoints(cfg: AuditConf | DictConfig) -> tuple[str | None, dict[str, list[str]]]:
    """``crossed-audit``'s policies: (the base, each convention's checkpoints in seed order), each a local folder
    made absolute or a hub name (``org/name``) as given. The base alone is a valid audit (its own cells and
    formatting gap); trained policies are given by the task's conventions: an answer task's (hash, boxed, ...) or
    a code task's (fence, begin_done). The base is None where ``from_study`` gives it (the study's initial policy)."""
    from crossed_rlvr.records import TRAINED

    conventions = task_kind(cfg.task).conventions
    given = {str(k): v for k, v in cfg.trained.items() if v is not None}
    if unknown := [conv for conv in given if conv not in TRAINED]:
        raise ConfigError(f"{unknown[0]}={given[unknown[0]]}: no convention of that name; expected one of "
                          f"{', '.join(conventions)}")
    wrong = [conv for conv in given if conv not in conventions]
    if wrong:
        raise ConfigError(f"{wrong[0]}={given[wrong[0]]}: task={cfg.task.name} takes policies trained to "
                          f"{', '.join(conventions)}")
    if not cfg.initial and not cfg.from_study:  # a study's own initial policy is its base
        raise ConfigError("initial=PATH is required (or from_study=RUN_DIR): the base the trained policies are "
                          "compared with")
    base = _model_location(str(cfg.initial), "initial") if cfg.initial else None
    paths = {conv: [_model_location(p, f"{conv}[{k}]") for k, p in enumerate(_checkpoints(given.get(conv), conv))]
             for conv in conventions}
    return base, {conv: found for conv, found in paths.items() if found}


def _checkpoints(value: object, key: str) -> list[str]:
    """A convention key's checkpoints: one path or hub name, or a list of them."""
    from omegaconf import ListConfig

    if value is None:
        return []
    items = list(value) if isinstance(value, ListConfig | list | tuple) else [value]
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ConfigError(f"{key}={value}: give a model folder or hub name, or a list of them ({key}=[P1,P2])")
    return [str(x) for x in items]


def _model_location(path: str, key: str) -> str:
    """A local folder as an absolute path; a hub name (``org/name``, not a local path) as given."""
    local = Path(path).expanduser()
    if local.is_dir():
        return str(local.resolve())
    if local.is_absolute() or path.startswith(".") or path.count("/") != 1:
        raise ConfigError(f"{key}={path}: no such model folder (nor a hub name of the form org/name)")
    return path


def check_given(cfg: AuditConf) -> None:
    """The audit's own check, with conf/checks.py's and before any file is written: the policies given
    (:func:`audit_checkpoints`), ``step`` picks a study's checkpoints, and ``from_study``'s policies are all on disk."""
    audit_checkpoints(cfg)
    if cfg.step is not None and not cfg.from_study:
        raise ConfigError(f"step={cfg.step}: picks each arm's checkpoint of a study; give from_study=RUN_DIR")
    if cfg.from_study:
        study_arms(cfg.from_study, cfg.step)


def study_config(cfg: AuditConf, initial: Policy) -> StudyConf:
    """The study config the answer steps read: the audit's sections, the base as the model, and no arms of a
    study's own (``arms.kind=none``: nothing to train, no arm folders or training validation to read). The
    sections an audit never reads (sft, recipe, ...) stay at the schema's defaults."""
    base = StudyConf()
    source = "local" if Path(initial.path).is_dir() else "hub"
    evaluation = cfg.evaluation
    kind = task_kind(cfg.task)
    if kind.audit_templates is not None:  # e.g. programs under both code requests, in the original wording (App. D.3)
        evaluation = replace(evaluation, requests=list(kind.conventions), templates=list(kind.audit_templates))
    return replace(base, model=replace(cfg.model, path=initial.path, source=source), task=cfg.task, eval=cfg.eval,
                   tracking=cfg.tracking, evaluation=evaluation, analysis=cfg.analysis, distribute=cfg.distribute,
                   run_dir=str(cfg.run_dir), initial=replace(base.initial, build="given"),
                   arms=replace(base.arms, kind="none"))


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


def _run(given: DictConfig) -> None:
    """The command's door: Hydra's config typed once (``AuditConf``)."""
    cfg = conf_of(AuditConf, given)
    console = Console(stderr=True)
    console.rule(f"crossed-audit -> {cfg.run_dir}")
    report = Audit(cfg, console).run()
    console.print(f"report: {report}")
    console.print(f"view: crossed-view {cfg.run_dir}", markup=False, highlight=False)  # responses in a browser
    print(report)


def main() -> None:
    from crossed_rlvr.command import hydra_app

    hydra_app("crossed-audit", "crossed_audit", _run, check=check_given)()


if __name__ == "__main__":
    main()
