"""After an arm's Hugging Face merge: verify it, then drop the final step's optimizer state (issue 34).

A resumable verl checkpoint holds fp32 weights and AdamW state for every rank (``optim_world_size_*``,
``extra_state_world_size_*``): ~91 GB for a 7B arm, ~0.9 TB for the ten arms of paper 001. Once the final
step is merged into a Hugging Face folder that reads back whole, the optimizer state serves nothing but a
resume past the end; it is removed unless ``recipe.keep_optimizer=true``. The merge is verified first:
``config.json`` and safetensors files whose headers read, holding as many parameters as the config says
(counted from the headers, nothing loaded). An unverified merge keeps everything and exits 1.

    python -m crossed_rlvr.train.checkpoints --merged DIR --shards DIR [--keep-optimizer]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from crossed_rlvr.interrupt import stops_cleanly

STATE = ("optim_world_size_*", "extra_state_world_size_*")


class MergeError(RuntimeError):
    pass


def merged_parameters(folder: Path) -> int:
    """Parameters in a merged Hugging Face folder, from its safetensors headers (no tensor is read)."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not (folder / "config.json").is_file() or not files:
        raise MergeError(f"{folder}: no config.json and *.safetensors (the merge did not finish)")
    total = 0
    for f in files:
        try:
            with safe_open(str(f), framework="numpy") as st:
                for key in st.keys():  # noqa: SIM118 - safe_open is not a mapping
                    n = 1
                    for d in st.get_slice(key).get_shape():
                        n *= int(d)
                    total += n
        except Exception as err:  # noqa: BLE001 - a truncated or foreign file, whatever the library raises
            raise MergeError(f"{f}: not a readable safetensors file ({err})") from None
    return total


def verify_merge(folder: Path) -> int:
    """The merged folder's parameter count when it matches its config.json (tied embeddings stored once or
    twice), else MergeError."""
    from crossed_rlvr.train.memory import Shape

    found = merged_parameters(folder)
    config = json.loads((folder / "config.json").read_text())
    try:
        shape = Shape.from_config(config)
    except (KeyError, TypeError, ValueError):
        return found  # an architecture the formula does not know: readable headers are the check
    want = shape.parameters()
    allowed = {want, want + shape.vocab * shape.hidden} if shape.tied else {want}
    if found not in allowed:
        raise MergeError(f"{folder}: holds {found:,} parameters; its config.json describes {want:,}")
    return found


def tidy(merged: Path, shards: Path, keep_optimizer: bool = False) -> list[Path]:
    """Verify the merge, then remove the shards' optimizer and extra state (unless kept); the removed files."""
    verify_merge(merged)
    if keep_optimizer:
        return []
    removed = [p for pattern in STATE for p in sorted(shards.glob(pattern))]
    for p in removed:
        p.unlink()
    return removed


@stops_cleanly("crossed-rlvr checkpoints")
def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.limits import Parser

    parser = Parser(prog="python -m crossed_rlvr.train.checkpoints", description=__doc__.splitlines()[0])
    parser.add_argument("--merged", required=True, help="the Hugging Face folder the merge wrote")
    parser.add_argument("--shards", required=True, help="the final step's FSDP folder (global_step_N/actor)")
    parser.add_argument("--keep-optimizer", action="store_true", help="keep the optimizer and extra state")
    args = parser.parse_args(argv)
    try:
        removed = tidy(Path(args.merged), Path(args.shards), args.keep_optimizer)
    except MergeError as err:
        print(f"checkpoints: {err}; nothing removed", file=sys.stderr)
        return 1
    kept = "optimizer state kept (recipe.keep_optimizer=true)"
    print(f"checkpoints: merge verified ({args.merged}); "
          + (kept if args.keep_optimizer else f"removed {len(removed)} optimizer/extra-state file(s) of {args.shards}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
