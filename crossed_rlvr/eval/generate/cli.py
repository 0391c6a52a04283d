"""``crossed-eval``: the crossed evaluation from a Hydra config (``conf/crossed_eval.yaml``)."""

from __future__ import annotations

import json
from typing import Any

from crossed_rlvr.eval.generate.plan import RunError
from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.tasks.items import ItemFileError


def _run(cfg: Any) -> None:
    from crossed_rlvr.eval.generate.engines import ContextLengthError

    try:
        summary = run_eval(cfg)
    except (RunError, ItemFileError, ContextLengthError) as err:
        raise SystemExit(f"crossed-eval: {err}") from None
    for name, s in summary.items():
        print(name, json.dumps(s))


def main() -> None:
    from crossed_rlvr.conf.app import hydra_app

    hydra_app("crossed-eval", "crossed_eval", _run)()


if __name__ == "__main__":
    main()
