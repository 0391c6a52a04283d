"""``crossed-eval``: the crossed evaluation from a Hydra config (``conf/crossed_eval.yaml``)."""

from __future__ import annotations

import json

from omegaconf import DictConfig

from crossed_rlvr.eval.generate.runner import run_eval


def _run(cfg: DictConfig) -> None:
    summary = run_eval(cfg)  # bad input (RunError, ItemFileError, ContextLengthError): one line, exit 2 (errors.py)
    for name, s in summary.items():
        print(name, json.dumps(s))


def check_device(cfg: DictConfig) -> None:
    """``eval.device`` against this machine (or the Ray workers' GPUs), refused before Hydra writes any file."""
    from crossed_rlvr.eval.generate.device import resolve_device
    from crossed_rlvr.eval.generate.runner import gpu_workers

    resolve_device(cfg.eval.device, gpu_workers(cfg))


def main() -> None:
    from crossed_rlvr.conf.app import hydra_app

    hydra_app("crossed-eval", "crossed_eval", _run, check=check_device)()


if __name__ == "__main__":
    main()
