"""Paired-bootstrap speed for a five-seed crossed study.

20,000 paired item-bootstrap resamples of every contrast of a five-seed crossed study on GSM8K's
size (1,319 items, 22 cells: initial + hash/boxed arms x 5 seeds, under hash and boxed requests,
every reader of the panel), on one core. Prints the vectorized time, the time of a straightforward
per-resample loop on the same data and draws, and their ratio. Target: under 2 s on one core.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy loads its BLAS

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from crossed_rlvr.analysis.bootstrap import draw_counts, percentile_interval, resample_stats  # noqa: E402
from crossed_rlvr.analysis.cells import build_groups, derive_measures, policy_table  # noqa: E402
from crossed_rlvr.analysis.contrasts import build_contrasts, evaluate, used_stats  # noqa: E402
from crossed_rlvr.eval.score.panel import columns  # noqa: E402

N_ITEMS = 1319
SEEDS = (83, 84, 85, 86, 87)


def synthetic_scores(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cells = [("initial", "initial", None)] + [
        (f"grpo-{c}/s{s}", c, s) for s in SEEDS for c in ("hash", "boxed")]
    frames = []
    for policy, conv, train_seed in cells:
        for request in ("hash", "boxed"):
            df = pd.DataFrame({
                "task": "gsm8k", "policy": policy, "training_convention": conv, "train_seed": train_seed,
                "request": request, "template": "original", "item_id": [str(i) for i in range(N_ITEMS)],
                "sample_idx": 0, "finish_reason": np.where(rng.random(N_ITEMS) < 0.003, "length", "stop"),
            })
            for col in columns():
                if col.endswith(".correct") or col.startswith("payload.") or col in (
                        "requested_payload", "extractable", "timed_out"):
                    df[col] = rng.random(N_ITEMS) < rng.uniform(0.2, 0.95)
                elif col.endswith(".answer"):
                    df[col] = np.where(rng.random(N_ITEMS) < 0.9, "18", None)
            df["category"] = rng.choice(["requested_only", "other_only", "both", "neither"], N_ITEMS)
            frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["train_seed"] = out["train_seed"].astype("Int64")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=20_000)
    parser.add_argument("--loop-resamples", type=int, default=20_000,
                        help="resamples for the per-resample loop (its time is scaled to --resamples)")
    parser.add_argument("--rng-seed", type=int, default=20260913)
    args = parser.parse_args()

    df, measures = derive_measures(synthetic_scores())
    (group,) = build_groups(df, measures)
    contrasts = build_contrasts(group, policy_table(df))
    flat = group.flat()
    print(f"{len(group.cells)} cells x {len(measures)} measures x {len(group.items)} items; "
          f"{len(contrasts)} contrasts")

    start = time.perf_counter()
    draws = evaluate(contrasts, resample_stats(flat, args.resamples, args.rng_seed, used_stats(contrasts, len(flat))))
    _lo, _hi = percentile_interval(draws)
    fast = time.perf_counter() - start
    print(f"vectorized: {args.resamples:,} resamples of every contrast in {fast:.2f} s (one core)")

    # Straightforward loop: the same draws, one resample at a time, stats and contrasts per draw.
    start = time.perf_counter()
    x = np.nan_to_num(flat)
    done = 0
    loop_draws = []
    for counts in draw_counts(flat.shape[1], args.loop_resamples, args.rng_seed):
        for w in counts:
            idx = np.repeat(np.arange(len(w)), w.astype(int))
            loop_draws.append(evaluate(contrasts, x[:, idx].mean(axis=1)))
            done += 1
    loop = (time.perf_counter() - start) * args.resamples / done
    same = np.allclose(np.array(loop_draws), draws[:done], equal_nan=True, atol=1e-9)
    print(f"per-resample loop: {loop:.2f} s for {args.resamples:,} resamples"
          f"{'' if done == args.resamples else f' (scaled from {done:,})'}; same draws: {same}")
    print(f"speed-up: {loop / fast:.1f}x")


if __name__ == "__main__":
    main()
