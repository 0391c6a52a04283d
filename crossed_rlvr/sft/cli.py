"""``crossed-sft`` (Hydra): ``mode=warmstart`` warm-starts a tiny initial policy, ``mode=arms`` trains the
content-matched SFT arms (what each does: crossed_rlvr/sft/run.py)."""

from __future__ import annotations

import json

from omegaconf import DictConfig

from crossed_rlvr.sft.run import SFTJob, arms, warmstart


def _run(cfg: DictConfig) -> None:  # DictConfig: Hydra's composed node, typed here, at the door
    """The command's door: the config typed once (``sft.run.SFTJob``), then handed to ``warmstart`` or ``arms``."""
    job = SFTJob.of(cfg)
    result = {"initial": warmstart(job)} if job.cfg.mode == "warmstart" else arms(job)
    for name, res in result.items():
        shown = {k: v for k, v in res.items() if k != "config"} if isinstance(res, dict) else res
        print(name, json.dumps(shown))


def main() -> None:
    from crossed_rlvr.command import hydra_app

    hydra_app("crossed-sft", "crossed_sft", _run)()


if __name__ == "__main__":
    main()
