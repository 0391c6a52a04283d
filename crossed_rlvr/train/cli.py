"""``crossed-train`` (Hydra): one GRPO arm; ``-m convention=hash,boxed seed=83,84`` sweeps a matched design.

Every run directory holds the resolved config (``resolved_config.json`` and ``hydra/``), the
training stream (``data/train.jsonl``), checkpoints and metrics. A finished run with the same
resolved config is not trained again; a finished run with another config is refused unless
``overwrite=true``. Bad configs fail before any model is loaded.
"""

from __future__ import annotations

import json

from omegaconf import DictConfig

from crossed_rlvr.train.checks import check_train, checked_train
from crossed_rlvr.train.run import run_train


def _run(cfg: DictConfig) -> None:  # DictConfig: Hydra's composed node, typed here, at the door
    """The command's door: Hydra's config typed once (``TrainConf``) and checked into the type ``run_train`` takes
    (a RecipeError: one line, exit 2, errors.py)."""
    summary = run_train(checked_train(cfg))
    print(json.dumps(summary, indent=2))


def main() -> None:
    from crossed_rlvr.command import hydra_app

    hydra_app("crossed-train", "crossed_train", _run, check=check_train)()  # the recipe, before any file


if __name__ == "__main__":
    main()
