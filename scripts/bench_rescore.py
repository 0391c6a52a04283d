"""Re-scoring at the scale of paper 000's grid: base/RL pairs x benchmarks x prompts x harness extractors,
500 items each, synthetic outputs of realistic length (about 1,200 characters of reasoning, then an answer
stated in a box, in text, on its own line, or not at all).

    python scripts/bench_rescore.py
"""

from __future__ import annotations

import random
import time

from crossed_rlvr.rescore.harness import REGISTRY
from crossed_rlvr.rescore.share import Outputs, comparisons, pooled

ITEMS, PAIRS, PROMPTS = 500, 7, ("boxed", "plain")
MC_BENCH, FREE_BENCH = ("mmlu", "mmlu_pro", "arc", "aqua"), ("gsm8k", "math500", "bbh", "sat", "svamp")
WORDS = ["so", "we", "compute", "the", "value", "then", "check", "each", "option", "carefully", "and", "compare", "it", "with", "the", "question"]


def response(rng: random.Random, answer: str, boxed_share: float) -> str:
    body = " ".join(rng.choice(WORDS) for _ in range(200)) + f" {rng.randint(1, 999)} = {rng.randint(1, 999)}."
    u = rng.random()
    if u < boxed_share:
        return f"{body}\n\\boxed{{{answer}}}"
    if u < boxed_share + 0.25:
        return f"{body}\nThe answer is {answer}."
    if u < boxed_share + 0.35:
        return f"{body}\n{answer}"
    return body


def main() -> None:
    rng = random.Random(0)
    runs = {}
    start = time.perf_counter()
    for p in range(PAIRS):
        for prompt in PROMPTS:
            for bench, kind in [*((b, "mc") for b in MC_BENCH), *((b, "free") for b in FREE_BENCH)]:
                keys = [rng.choice("ABCD") if kind == "mc" else str(rng.randint(1, 500)) for _ in range(ITEMS)]
                for model, boxed, right in ((f"base{p}", 0.45, 0.55), (f"rl{p}", 0.6, 0.65)):
                    answers = [k if rng.random() < right else ("ABCD".replace(k, "")[0] if kind == "mc" else "0")
                               for k in keys]
                    runs[(model, bench, prompt, kind)] = Outputs(
                        items=[str(i) for i in range(ITEMS)], keys=keys,
                        responses=[response(rng, a, boxed) for a in answers], kind=kind, n_options=[4] * ITEMS,
                        benchmark=bench)
    made = time.perf_counter() - start
    start = time.perf_counter()
    table, extra = comparisons(runs, [(f"base{p}", f"rl{p}") for p in range(PAIRS)], list(REGISTRY))  # 10,000 resamples
    scored = time.perf_counter() - start
    start = time.perf_counter()
    result = pooled(table, extra)
    pooled_s = time.perf_counter() - start
    print(f"{len(table)} comparisons x {ITEMS} items, {len(REGISTRY)} harness extractors + omega "
          f"({sum(len(o.responses) for o in runs.values()):,} responses of ~1,300 characters; made in {made:.1f} s)")
    print(f"re-scored in {scored:.1f} s; pooled share {result['share']:.3f} [{result['low']:.3f}, {result['high']:.3f}] "
          f"over {result['comparisons']} admitted comparisons in {pooled_s:.1f} s")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options; --help describes it
    main()
