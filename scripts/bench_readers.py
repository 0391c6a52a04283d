"""Reader throughput on a fixed synthetic set of GSM8K-like responses (1-3 KB each).

Prints responses per second for
  (a) the panel without Math-Verify, one core, in-process;
  (b) Math-Verify alone (full response), one core, in-process;
  (c) the whole panel on all cores through the worker pool, on 29,018 responses
      (the size of paper 001's GSM8K crossed collection).
Targets: (a) >= 10,000 responses/s; (c) under 60 s on a 2-core machine.

``--pathological`` instead prints, for each adversarial response of crossed_rlvr.eval.score.stress at
100 KB, 1 MB and 2 MB, the whole panel's time and peak-memory growth in a forked scoring child.
"""

from __future__ import annotations

import argparse
import os
import random
import time

from crossed_rlvr.eval.score import Item, score_many, score_response
from crossed_rlvr.eval.score.readers import READERS

SENTENCES = [
    "Janet's ducks lay {a} eggs per day.",
    "She eats {b} for breakfast every morning and bakes muffins with {c}.",
    "That leaves {a} - {b} - {c} = {d} eggs.",
    "She sells each egg for ${e}, so she makes {d} * {e} = {f} dollars.",
    "Let's double-check: {d} eggs at ${e} each is {f}.",
    "**Step {g}:** compute the remaining amount, which is {d}.",
    "The store has {h} items and gives away {b} of them, leaving {i}.",
]
ENDINGS = [
    "\n#### {f}",
    "\n#### ${f}",
    "\nThe final answer is \\boxed{{{f}}}.",
    "\n#### {f}\n\nSo the answer is \\boxed{{{f}}}.",
    "\nTherefore the answer is {f}.",
    "\n#### **{f}**",
    "\n#### Step 4: final\nThe answer is $\\boxed{{{f}}}$",
]


def make_responses(n: int, seed: int = 20260908, task: str = "gsm8k") -> list[Item]:
    rng = random.Random(seed)
    items = []
    for k in range(n):
        a, b, c = rng.randint(10, 99), rng.randint(1, 9), rng.randint(1, 9)
        d, e = a - b - c, rng.randint(2, 9)
        v = {"a": a, "b": b, "c": c, "d": d, "e": e, "f": d * e, "g": rng.randint(1, 5), "h": rng.randint(100, 999), "i": 0}
        target = rng.randint(1000, 3000)
        parts: list[str] = []
        while sum(map(len, parts)) < target:
            parts.append(rng.choice(SENTENCES).format(**v))
        body = " ".join(parts) + rng.choice(ENDINGS).format(**v)
        reference = str(v["f"] if rng.random() < 0.8 else v["f"] + 1)
        items.append(Item(body, reference, "hash" if k % 2 == 0 else "boxed", task))
    return items


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f} responses/s ({n:,} in {seconds:.2f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast-n", type=int, default=20_000)
    parser.add_argument("--mv-n", type=int, default=1_000)
    parser.add_argument("--full-n", type=int, default=29_018)
    parser.add_argument("--math-n", type=int, default=4_000,
                        help="responses scored as a symbolic (MATH500) task, with the symbolic readers on")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--pathological", action="store_true", help="time and memory on adversarial responses")
    args = parser.parse_args()
    if args.pathological:
        pathological()
        return

    items = make_responses(max(args.fast_n, args.full_n))
    sizes = [len(it.response) for it in items]
    print(f"synthetic responses: {len(items):,}, {min(sizes)}-{max(sizes)} chars, mean {sum(sizes) / len(sizes):.0f}")

    subset = items[: args.fast_n]
    start = time.perf_counter()
    for it in subset:
        score_response(it.response, it.reference, it.request, slow=False)
    print("(a) panel without Math-Verify, 1 core:", rate(len(subset), time.perf_counter() - start))

    mv = READERS["math_verify"]
    mv(items[0].response, items[0].reference)  # import sympy/antlr outside the timing
    subset = items[: args.mv_n]
    start = time.perf_counter()
    for it in subset:
        mv(it.response, it.reference)
    print("(b) Math-Verify alone, 1 core:       ", rate(len(subset), time.perf_counter() - start))

    subset = items[: args.full_n]
    start = time.perf_counter()
    rows = score_many(subset, workers=args.workers, chunk_size=128)
    elapsed = time.perf_counter() - start
    print(f"(c) whole panel, {args.workers} workers:        ", rate(len(subset), elapsed))
    print(f"    timed out: {sum(r['timed_out'] for r in rows)}; "
          f"math_verify accuracy {sum(r['math_verify.correct'] for r in rows) / len(rows):.3f}")

    subset = make_responses(args.math_n, task="math500")
    start = time.perf_counter()
    rows = score_many(subset, workers=args.workers, chunk_size=128)
    print(f"(d) whole panel, MATH500 task, {args.workers} workers:", rate(len(subset), time.perf_counter() - start))


def pathological(sizes: tuple[int, ...] = (100_000, 1_000_000, 2_000_000)) -> None:
    from crossed_rlvr.eval.score.panel import warm
    from crossed_rlvr.eval.score.stress import CASES, measure

    warm()
    print(f"{'response':24s} {'chars':>10s} {'request':7s} {'seconds':>8s} {'peak MB':>8s} truncated")
    for name, make in CASES.items():
        for n in sizes:
            text = make(n)
            for request in ("hash", "boxed"):
                m = measure(text, request)
                if m["exitcode"] != 0:
                    print(f"{name:24s} {len(text):>10,} {request:7s} {'failed: ' + str(m['exitcode']):>17s}")
                    continue
                print(f"{name:24s} {len(text):>10,} {request:7s} {m['seconds']:8.3f} {m['peak_bytes'] / 2**20:8.1f} "
                      f"{m['truncated']}", flush=True)


if __name__ == "__main__":
    main()
