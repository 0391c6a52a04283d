"""crossed-eval serial vs on Ray workers, on the tiny study's cells.

Three policies of the tiny study's size (initial, hash and boxed arms: three tiny models) x two
requests on the arith task's first items: one serial run (all cores, in this process), then the same
design on 1 and on 2 local Ray workers (one core each), every run from an empty run folder. Prints
each wall time, the speed-up of 2 workers over the serial run (with and without Ray's start), Ray's
start-up, and the overhead Ray adds per cell: (1 worker − Ray start − serial on one core) / cells.
Every distributed run's files are checked byte for byte against the serial run's.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from crossed_rlvr.eval.generate.runner import run_eval
from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model


def config(run: Path, models: dict[str, Path], items: int, tokens: int, extra: list[str]):
    pols = ",".join(f"{{name: {n}, path: {p}, training_convention: {n.split('/')[0].removeprefix('grpo-') if '/' in n else 'initial'}, "
                    f"train_seed: {83 if '/' in n else 'null'}}}" for n, p in models.items())
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_eval", overrides=[
            f"run_dir={run}", f"model.path={models['initial']}", f"task.n_items={items}", "task.n_test=200",
            "task.n_dev=3", f"eval.max_new_tokens={tokens}", "eval.context_limit=1024", "eval.batch_size=16",
            "tracking=off", "templates=[original]", f"policies=[{pols}]", *extra])


def timed(cfg, events=None) -> float:
    start = time.perf_counter()
    run_eval(cfg, progress=False, on_event=events)
    return time.perf_counter() - start


def same(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in (a / "responses").glob("*.jsonl"))
    return names == sorted(p.name for p in (b / "responses").glob("*.jsonl")) and all(
        filecmp.cmp(a / "responses" / n, b / "responses" / n, shallow=False) for n in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens per response")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    try:
        models = {name: build_tiny_model(root / "models" / str(k), TinyConfig(seed=k))
                  for k, name in enumerate(["initial", "grpo-hash/s83", "grpo-boxed/s83"])}
        cells = len(models) * 2
        responses = cells * args.items
        cores = torch.get_num_threads()
        serial = timed(config(root / "serial", models, args.items, args.tokens, []))
        torch.set_num_threads(1)
        serial1 = timed(config(root / "serial1", models, args.items, args.tokens, []))
        torch.set_num_threads(cores)
        runs = {}
        for n in (1, 2):
            t0 = time.perf_counter()
            ready: list[float] = []
            wall = timed(config(root / f"w{n}", models, args.items, args.tokens,
                                [f"distribute.workers={n}", f"distribute.shard_size={args.items}"]),
                         lambda kind, info, ready=ready, t0=t0: ready.append(time.perf_counter() - t0)
                         if kind == "worker" else None)
            runs[n] = (wall, ready[n - 1], same(root / "serial", root / f"w{n}"))
        (w1, start1, ok1), (w2, start2, ok2) = runs[1], runs[2]
        print(f"{cells} cells x {args.items} items ({responses} responses, <= {args.tokens} new tokens), "
              f"tiny study's model size, {cores} cores")
        print(f"serial ({cores} threads)   {serial:7.1f} s")
        print(f"serial (1 thread)    {serial1:7.1f} s")
        print(f"1 Ray worker         {w1:7.1f} s   (Ray and its worker up after {start1:.1f} s; files equal: {ok1})")
        print(f"2 Ray workers        {w2:7.1f} s   (Ray and its workers up after {start2:.1f} s; files equal: {ok2})")
        print(f"speed-up, 2 workers over serial: {serial / w2:.2f}x; once Ray is up: {serial / (w2 - start2):.2f}x")
        print(f"overhead Ray adds per cell, (1 worker once up - serial on 1 thread) / cells: "
              f"{(w1 - start1 - serial1) / cells:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
