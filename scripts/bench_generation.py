"""Generation throughput of a policy per backend, dtype and thread count (the backend by measurement).

Samples the arithmetic probe's first N prompts under the hash request through the evaluator's own engines
(``eval/generate/engines.py``: the transformers loop, or vLLM's CPU build when this interpreter has it) at the
study's sampling settings, and prints one line per setting: seconds, response tokens and tokens per second.

    .venv/bin/python scripts/bench_generation.py                 # SmolLM2-135M-Instruct, transformers
    .venv/bin/python scripts/bench_generation.py --backend vllm --dtype float32 bfloat16

Each setting runs in a process of its own (torch's thread count is fixed per process; vLLM holds its engine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def one(model: str, backend: str, dtype: str, threads: int, n: int, max_new_tokens: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from omegaconf import OmegaConf

    from crossed_rlvr.eval.generate.engines import GenParams, load_backend
    from crossed_rlvr.eval.generate.plan import item_seed
    from crossed_rlvr.prompts import messages, render
    from crossed_rlvr.tasks.arith import make_splits

    items = make_splits(100, 20, 20260908, (1, 2), 9, ("+", "-"))["test"][:n]
    gen = OmegaConf.create({"backend": backend, "dtype": dtype, "batch_size": n, "context_limit": 1024,
                            "enforce_eager": True, "cpu_kvcache_gib": 1})
    start = time.perf_counter()
    engine, tok = load_backend(model, gen)
    load = time.perf_counter() - start
    ids = [render(tok, messages(it["question"], "hash"))[1] for it in items]
    seeds = [item_seed(20260908, it, k, 0) for k, it in enumerate(items)]
    start = time.perf_counter()
    outs = engine.generate(ids, seeds, GenParams(0.6, 0.95, max_new_tokens, 1024))
    seconds = time.perf_counter() - start
    tokens = sum(o.response_tokens for o in outs)
    return {"backend": backend, "dtype": dtype, "threads": threads, "prompts": n, "load_s": round(load, 1),
            "seconds": round(seconds, 2), "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a model folder (default: SmolLM2-135M-Instruct, converted)")
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:  # a child: one setting
        print(json.dumps(one(**json.loads(a.one))))
        return
    model = a.model
    if model is None:
        from crossed_rlvr.policies.smollm import smollm2_135m_dir

        model = str(smollm2_135m_dir())
    for dtype in a.dtype:
        for threads in a.threads:
            spec = {"model": model, "backend": a.backend, "dtype": dtype, "threads": threads, "n": a.prompts,
                    "max_new_tokens": a.max_new_tokens}
            out = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                                 text=True, check=False)
            lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
            if out.returncode or not lines:
                print(f"{a.backend} {dtype} threads={threads}: failed\n{out.stderr[-2000:]}")
                continue
            r = json.loads(lines[-1])
            print(f"{r['backend']:5} {r['dtype']:9} threads={r['threads']}  {r['prompts']} prompts: "
                  f"{r['seconds']:6.1f} s, {r['tokens']} tokens, {r['tokens_per_s']:6.1f} tokens/s "
                  f"(load {r['load_s']} s)", flush=True)


if __name__ == "__main__":
    main()
