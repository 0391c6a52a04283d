"""``crossed-eval``: the crossed evaluation from a Hydra config (``conf/crossed_eval.yaml``)."""

from __future__ import annotations

import json

from omegaconf import DictConfig

from crossed_rlvr.conf.schema import EvalCommandConf, conf_of
from crossed_rlvr.eval.generate.runner import run_eval


def _run(given: DictConfig) -> None:
    """The command's door: Hydra's config typed once (``EvalCommandConf``); everything below reads that."""
    cfg = conf_of(EvalCommandConf, given)
    # bad input (RunError, ItemFileError, ContextLengthError): one line, exit 2 (errors.py); the last engine is not
    # shut down: the process ends next (entry), and its memory with it
    summary = run_eval(cfg, release_last=False)
    for name, s in summary.items():
        print(name, json.dumps(s))


def check_device(given: DictConfig) -> None:
    """``eval.device`` against this machine (or the Ray workers' GPUs), refused before Hydra writes any file."""
    from crossed_rlvr.eval.generate.device import resolve_device
    from crossed_rlvr.eval.generate.runner import gpu_workers

    cfg = conf_of(EvalCommandConf, given)
    resolve_device(cfg.eval.device, gpu_workers(cfg))


def main() -> None:
    from crossed_rlvr.command import hydra_app

    hydra_app("crossed-eval", "crossed_eval", _run, check=check_device)()


def entry() -> None:
    """The ``crossed-eval`` program: ``main``, then the process ends at once where it succeeded
    (``interrupt.end_process``: the engine's teardown is skipped, not its files); an error ends it as before."""
    from crossed_rlvr.interrupt import end_process

    main()
    end_process(0)


if __name__ == "__main__":
    entry()
