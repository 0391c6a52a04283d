"""``crossed-study`` (Hydra): the whole crossed design in one command; ``experiment=`` picks a preset.

    crossed-study                                   # the tiny default (minutes on 2 CPU cores: docs/results-on-cpu.md)
    crossed-study experiment=smoke run_dir=/tmp/s   # every stage at the smallest size
    crossed-study experiment=qwen2.5-7b-gsm8k-crossed   # the paper's setting (GPU cluster)
    crossed-study experiment=qwen2.5-7b-gsm8k-crossed stages=prepare   # dress rehearsal, any machine
    crossed-study experiment=gpu-smoke stages=rehearse   # and verl started on Ray up to its first GPU need

Re-running with the same config reuses every finished stage; a changed setting redoes the stages
from the first one it affects.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from crossed_rlvr.conf.schema import StudyConf, conf_of
from crossed_rlvr.layout import RunLayout

if TYPE_CHECKING:
    from omegaconf import DictConfig


class NeedsGPU(SystemExit):
    pass


def layout_of(cfg: StudyConf) -> RunLayout:
    return RunLayout(Path(cfg.run_dir))


def check_device(cfg: StudyConf) -> None:
    """A GPU preset stops before any stage on a machine without a GPU (``stages=prepare`` needs none)."""
    if not cfg.requires_gpu or cfg.stages in ("prepare", "rehearse", "fetch"):
        return
    import torch

    if not torch.cuda.is_available():
        name = cfg.experiment_name or "this preset"
        raise NeedsGPU(f"crossed-study: {name} needs a GPU (engine={cfg.engine.name}, eval backend="
                       f"{cfg.eval.backend}, model={cfg.model.name}) and none is visible (torch.cuda.is_available() "
                       "is False). Nothing was run. On a GPU node install the extra: pip install -e '.[gpu]'. "
                       "For a CPU study use experiment=tiny, smoke or real-cpu; to rehearse this preset up to "
                       "the launch here, add stages=prepare.")


def _run(given: DictConfig) -> None:
    """The command's door: Hydra's config typed once (``StudyConf``); every check and stage below reads that."""
    from rich.console import Console
    from rich.table import Table

    from crossed_rlvr.study.pipeline import Study
    from crossed_rlvr.train.rehearsal import RehearsalError

    cfg = conf_of(StudyConf, given)
    if cfg.engine.name == "verl" and cfg.arms.kind == "grpo":  # before any stage: will an arm fit its GPUs?
        from crossed_rlvr.train.memory import NoShape, PlanError, check

        try:
            check(cfg)
        except NoShape:
            pass  # the initial policy is built by the first stage: each arm's preparation plans it
        except PlanError as err:
            print(f"crossed-study: {err}", file=sys.stderr)
            raise SystemExit(2) from None
    check_device(cfg)
    from crossed_rlvr.train.preflight import FetchError, cache_problem, fetch, tracking_problem

    if cfg.stages == "fetch":  # once, on a machine with the network: the launch runs with HF_HUB_OFFLINE=1
        try:
            fetched = fetch(cfg)
        except FetchError as err:
            print(f"crossed-study: {err}", file=sys.stderr)
            raise SystemExit(1) from None
        for what in fetched:
            print(f"crossed-study: fetched {what} into the Hugging Face cache", file=sys.stderr)
        return
    problem = tracking_problem(cfg.tracking.mode) or (cache_problem(cfg) if cfg.engine.name == "verl" else None)
    if problem is not None:  # what a cluster run would only meet minutes in: refused before any stage
        print(f"crossed-study: {problem}", file=sys.stderr)
        raise SystemExit(2)
    console = Console(stderr=True)
    console.rule(f"crossed-study {cfg.experiment_name or ''} -> {cfg.run_dir}")
    try:
        if cfg.stages == "prepare":
            summary = Study(cfg, console).prepare()
            console.print(f"prepared (nothing trained or generated): {layout_of(cfg).prepare_summary}")
            print(json.dumps(summary))
            return
        if cfg.stages == "rehearse":
            summary = Study(cfg, console).rehearse()
            console.print(f"rehearsed (nothing trained): {layout_of(cfg).rehearsal}")
            print(json.dumps(summary))
            return
        from pathlib import Path

        from crossed_rlvr.study.space import check_room

        check_room(cfg, Path(cfg.run_dir))  # its models fit the disk, or one line before any stage
        summary = Study(cfg, console).run_all()
    except RehearsalError as err:  # a failed launch, not bad input: exit 1 (bad input exits 2: errors.py)
        raise SystemExit(f"crossed-study: launch rehearsal failed: {err}") from None
    table = Table(title="stages")
    for col in ("stage", "seconds", "reused"):
        table.add_column(col)
    for name, t in summary["stages"].items():
        table.add_row(name, f"{t['seconds']:.1f}", "yes" if t["reused"] else "no")
    console.print(table)
    for line in headline(summary["report"]):
        console.print(line, markup=False, highlight=False)
    console.print(f"report: {summary['report']}")
    console.print(f"view: crossed-view {cfg.run_dir}", markup=False, highlight=False)  # responses in a browser
    print(json.dumps(summary))


def headline(report: str) -> list[str]:
    """The report's opening sentences (one per task, wording and pair: what training changed, with I_P), so the
    console ends with the study's result and not only where it is."""
    from pathlib import Path

    path = Path(report)
    if not path.is_file():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("| "):  # the interactions table follows the sentences
            break
        if line.startswith("**"):
            lines.append(line.split(" Caveats:")[0])
    return lines


def main() -> None:
    from crossed_rlvr.command import hydra_app

    hydra_app("crossed-study", "crossed_study", _run)()


if __name__ == "__main__":
    main()
