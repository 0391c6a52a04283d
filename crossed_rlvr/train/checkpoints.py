"""After an arm's Hugging Face merge: verify it, then drop the final step's optimizer state.

A resumable verl checkpoint holds fp32 weights and AdamW state for every rank (``optim_world_size_*``,
``extra_state_world_size_*``): ~91 GB for a 7B arm, ~0.9 TB for the ten arms of paper 001. Once the final
step is merged into a Hugging Face folder that reads back whole, the optimizer state serves nothing but a
resume past the end; it is removed unless ``recipe.keep_optimizer=true``. The merge is verified first:
``config.json`` and safetensors files whose headers read, holding exactly the tensors, by name and shape, of
the model that config describes (built by transformers on the meta device: no memory, no weights; a tensor
tied to another may be stored once). A formula would miss what an architecture adds (OLMo-2's query and key
norms). An unverified merge keeps everything and exits 1.

A verified merge is stamped with the settings the arm trained with (``crossed_rlvr_arm.json``: the sha256 of
its verl overrides). The launch scripts ask ``--finished`` first, so a relaunch of a finished arm does nothing
and says so: relaunched, verl's ``resume_mode=auto`` would load the final step, whose optimizer state is gone,
and crash. A merge stamped with other settings is refused in one line rather than resumed or overwritten.

    python -m crossed_rlvr.train.checkpoints --merged DIR --shards DIR [--keep-optimizer] [--trained-with SHA]
    python -m crossed_rlvr.train.checkpoints --finished DIR --trained-with SHA   (exit 0 finished, 1 not, 2 other)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import ARM_STAMP

STATE = ("optim_world_size_*", "extra_state_world_size_*")
STAMP = ARM_STAMP


class MergeError(RuntimeError):
    pass


def stored_tensors(folder: Path) -> dict[str, tuple[int, ...]]:
    """Name and shape of every tensor in a merged Hugging Face folder, from its safetensors headers (no tensor is
    read)."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not (folder / "config.json").is_file() or not files:
        raise MergeError(f"{folder}: no config.json and *.safetensors (the merge did not finish)")
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="numpy") as st:
                for key in st.keys():  # noqa: SIM118 - safe_open is not a mapping
                    shapes[key] = tuple(int(d) for d in st.get_slice(key).get_shape())
        except Exception as err:  # noqa: BLE001 - a truncated or foreign file, whatever the library raises
            raise MergeError(f"{f}: not a readable safetensors file ({err})") from None
    return shapes


def model_tensors(folder: Path) -> tuple[dict[str, tuple[int, ...]], set[str]] | None:
    """The state dict (names and shapes) of the causal LM that ``folder/config.json`` describes, built on the meta
    device, and the names tied to an earlier tensor (``save_pretrained`` stores those once). None when this
    transformers does not know the architecture."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(folder))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, OSError):
        return None
    seen: set[int] = set()
    tied: set[str] = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(name)
        seen.add(id(param))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}, tied


def verify_merge(folder: Path) -> int:
    """The merged folder's parameter count when its tensors are the ones its config.json describes, else
    MergeError naming what is missing, unexpected or of the wrong shape."""
    import math

    found = stored_tensors(folder)
    total = sum(math.prod(shape) for shape in found.values())
    expected = model_tensors(folder)
    if expected is None:
        return total  # an architecture transformers does not know: readable headers are the check
    shapes, tied = expected
    missing = [n for n in shapes if n not in found and n not in tied]
    unexpected = [n for n in found if n not in shapes]
    wrong = [f"{n} {list(found[n])} (config: {list(shapes[n])})" for n in shapes if n in found and found[n] != shapes[n]]
    if missing or unexpected or wrong:
        said = [f"{what}: {', '.join(names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                for what, names in (("missing", missing), ("not in the model", unexpected), ("wrong shape", wrong))
                if names]
        raise MergeError(f"{folder}: its tensors are not the ones its config.json describes ({'; '.join(said)})")
    return total


def finished(merged: Path, trained_with: str) -> str | None:
    """None when ``merged`` holds no verified merge (the arm has to train); "" when it holds this arm's,
    trained with ``trained_with``; else why the folder cannot be taken as this arm's (MergeError's message)."""
    if not (merged / "config.json").exists():
        return None
    try:
        verify_merge(merged)
    except MergeError:
        return None  # an unfinished merge: the launch trains (or resumes) and merges again
    stamp = merged / STAMP
    if not stamp.is_file():
        return f"{merged} holds a merged model with no record of the settings it was trained with ({STAMP})"
    was = json.loads(stamp.read_text()).get("trained_with")
    if was != trained_with:
        return f"{merged} holds a model trained with other settings ({STAMP}: {was}, this launch: {trained_with})"
    return ""


def tidy(merged: Path, shards: Path, keep_optimizer: bool = False, trained_with: str | None = None) -> list[Path]:
    """Verify the merge and stamp it, then remove the shards' optimizer and extra state (unless kept); the removed
    files."""
    verify_merge(merged)
    if trained_with:
        (merged / STAMP).write_text(json.dumps({"trained_with": trained_with}) + "\n")
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
    parser.add_argument("--merged", help="the Hugging Face folder the merge wrote")
    parser.add_argument("--shards", help="the final step's FSDP folder (global_step_N/actor)")
    parser.add_argument("--keep-optimizer", action="store_true", help="keep the optimizer and extra state")
    parser.add_argument("--trained-with", help="sha256 of the arm's verl overrides, stamped on the merge")
    parser.add_argument("--finished", metavar="DIR", help="exit 0 when DIR is this arm's verified merge, 1 when the "
                        "arm has to train, 2 when DIR holds another model")
    args = parser.parse_args(argv)
    if args.finished:
        if not args.trained_with:
            parser.error("--finished needs --trained-with")
        why = finished(Path(args.finished), args.trained_with)
        if why is None:
            return 1
        if why:
            print(f"checkpoints: {why}. Move it away to train the arm again.", file=sys.stderr)
            return 2
        print(f"checkpoints: this arm has finished: {args.finished} is its verified merge, trained with these "
              "settings; nothing to do")
        return 0
    if not (args.merged and args.shards):
        parser.error("--merged and --shards are required")
    try:
        removed = tidy(Path(args.merged), Path(args.shards), args.keep_optimizer, args.trained_with)
    except MergeError as err:
        print(f"checkpoints: {err}; nothing removed", file=sys.stderr)
        return 1
    kept = "optimizer state kept (recipe.keep_optimizer=true)"
    print(f"checkpoints: merge verified ({args.merged}); "
          + (kept if args.keep_optimizer else f"removed {len(removed)} optimizer/extra-state file(s) of {args.shards}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
