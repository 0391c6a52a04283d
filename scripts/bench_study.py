"""Where a crossed study's time goes: each stage's wall and CPU seconds and tokens, and each step's throughput
against what the machine's cores can compute at the model's own shapes.

    .venv/bin/python scripts/bench_study.py --run runs/study            # a finished study's stages
    .venv/bin/python scripts/bench_study.py --steps tiny                # the steps of the tiny study's model
    .venv/bin/python scripts/bench_study.py --run runs/real --steps real-cpu --json out.json

``--run``: the stage stamps' wall and CPU seconds (``cpu_seconds``: this process and its ended children, so the
arms' workers count), the tokens each stage pushed through a model (warm start: the examples' tokens times the
epochs run; arms: TRL's ``num_tokens``, prompts and completions, of every arm; evaluation: every response
record's prompt and response tokens) and tokens per second, and the cores kept busy (CPU / wall seconds).

``--steps``: one step of each kind, timed alone on a freshly built model of the preset's shapes (the tiny
0.6M model, or SmolLM2-135M-Instruct for ``real-cpu``): the ceiling (the model's own matrix products, forward
only and forward + backward, at 1 and 2 threads: tokens per second if the step did nothing else), a warm-start
optimizer step (forward, backward and AdamW on one batch), a GRPO update (the same on a group of completions),
GRPO's generation (``prompts_per_update`` x ``group_size`` samples through ``model.generate``, as TRL samples,
and through ``engine.sampler=stream``), GRPO's loss pass on whole sequences and with each prompt once
(``engine.prompt_once``), and an evaluation batch (the evaluator's KV-cache loop with per-row seeds). A step far under its ceiling spends its time outside the matrix products: Python,
kernel launches, small-tensor overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# each preset's shapes: its model, warm-start batch, GRPO prompts x group, response budget, evaluation batch and budget
PRESETS = {
    "tiny": {"model": "tiny", "sft_batch": 32, "grpo": (8, 8), "response": 96, "eval_batch": 50, "eval_new": 160,
             "bf16": False},
    "real-cpu": {"model": "smollm2", "sft_batch": 16, "grpo": (3, 8), "response": 64, "eval_batch": 50,
                 "eval_new": 96, "bf16": True},
}


# ---------------------------------------------------------------------------------------------- stages of a run
def stage_rows(run: Path) -> list[dict[str, Any]]:
    from crossed_rlvr.layout import RunLayout
    from crossed_rlvr.study.stamps import Stamps

    layout, stamps = RunLayout(run), Stamps(run)
    tokens = {"initial": warm_tokens(layout), "arms": arm_tokens(layout), "eval": eval_tokens(layout)}
    rows = []
    for stage in ("initial", "arms", "eval", "score", "analyze"):
        stamp = stamps.read(stage)
        if stamp is None:
            continue
        wall, cpu, tok = stamp["seconds"], stamp.get("cpu_seconds"), tokens.get(stage)
        rows.append({"stage": stage, "seconds": wall, "cpu_seconds": cpu,
                     "cores_busy": None if cpu is None or not wall else round(cpu / wall, 2),
                     "tokens": tok, "tokens_per_s": round(tok / wall) if tok and wall else None})
    return rows


def warm_tokens(layout: Any) -> int | None:
    """Tokens the warm start trained on: its examples' tokens times the epochs it ran (stopped early by its band,
    a fraction of one)."""
    if not layout.warmstart_summary.exists():
        return None
    s = json.loads(layout.warmstart_summary.read_text())
    per_epoch, examples = s.get("tokens_per_epoch"), s.get("examples")
    if not per_epoch or not examples:
        return None
    batch = s["per_device_batch"] * s["accumulation"] * s["world_size"]
    return round(per_epoch * s["steps"] * batch / examples)


def arm_tokens(layout: Any) -> int | None:
    total = 0
    for arm in layout.arms():
        lines = arm.metrics.read_text().splitlines() if arm.metrics.exists() else []
        counts = [json.loads(line).get("num_tokens") for line in lines]
        total += int(max((c for c in counts if c is not None), default=0))
    return total or None


def eval_tokens(layout: Any) -> int | None:
    total = 0
    for f in sorted(layout.eval.responses.glob("*.jsonl")):
        for line in f.open():
            r = json.loads(line)
            total += int(r.get("prompt_tokens") or 0) + int(r.get("response_tokens") or 0)
    return total or None


# ---------------------------------------------------------------------------------------------- steps of a model
def build_model(preset: str, folder: Path) -> Path:
    if PRESETS[preset]["model"] == "smollm2":
        from crossed_rlvr.policies.smollm import smollm2_135m_dir

        return smollm2_135m_dir()
    from omegaconf import OmegaConf

    from crossed_rlvr.conf import group_file
    from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model

    tiny = OmegaConf.to_container(OmegaConf.load(group_file("model", "tiny")).tiny)
    return build_tiny_model(folder / "model", TinyConfig(**tiny))


def linear_shapes(model: Any) -> list[tuple[int, int]]:
    import torch

    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear)]


def best_of(fn: Any, repeats: int = 3) -> float:
    fn()  # warm the kernels and the allocator
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def ceiling(model: Any, rows: int, threads: int, bf16: bool = False) -> dict[str, float]:
    """Tokens per second if a step were only the model's matrix products (every nn.Linear, lm_head included) on
    ``rows`` tokens at once: forward, and forward + backward (three products per layer); in bfloat16 or fp32."""
    import torch

    torch.set_num_threads(threads)
    shapes = linear_shapes(model)
    dtype = torch.bfloat16 if bf16 else torch.float32
    xs = [torch.randn(rows, i, dtype=dtype) for i, _ in shapes]
    ws = [torch.randn(o, i, dtype=dtype) for i, o in shapes]

    def forward() -> None:
        for x, w in zip(xs, ws):
            torch.nn.functional.linear(x, w)

    seconds = best_of(forward)
    flops = 2.0 * rows * sum(i * o for i, o in shapes)
    return {"gflops": round(flops / seconds / 1e9, 1), "forward_tokens_per_s": round(rows / seconds),
            "train_tokens_per_s": round(rows / (3 * seconds))}


def train_step(model: Any, batch: int, length: int, bf16: bool = False) -> dict[str, float]:
    """One optimizer step (forward, backward, AdamW) on ``batch`` sequences of ``length`` tokens; ``bf16``: the
    forward under bfloat16 autocast over fp32 weights, as the trainers run where the CPU computes bfloat16."""
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, length))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()

    seconds = best_of(step)
    return {"seconds": round(seconds, 3), "tokens_per_s": round(batch * length / seconds)}


def prompt_ids(tok: Any, n: int) -> list[list[int]]:
    """The first ``n`` arithmetic probe prompts under the hash request, as the model reads them."""
    from crossed_rlvr.prompts import messages, render
    from crossed_rlvr.tasks.arith import make_splits

    items = make_splits(max(n, 40), 20, 20260908, (1, 2), 9, ("+", "-"))["test"][:n]
    return [render(tok, messages(it["question"], "hash"))[1] for it in items]


def generation(model: Any, tok: Any, prompts: int, new_tokens: int) -> dict[str, float]:
    """Sampling through the evaluator's transformers loop (KV cache, left padding, per-row seeds) at T = 1."""
    from crossed_rlvr.eval.generate.engines import GenParams, HFBackend

    ids = prompt_ids(tok, prompts)
    backend = HFBackend(model, tok, prompts)
    params = GenParams(1.0, 1.0, new_tokens, 1024)
    start = time.perf_counter()
    outs = backend.generate(ids, list(range(prompts)), params)
    seconds = time.perf_counter() - start
    made = sum(o.response_tokens for o in outs)
    steps = max(o.response_tokens for o in outs)
    return {"seconds": round(seconds, 2), "response_tokens": made, "tokens_per_s": round(made / seconds),
            "ms_per_decoding_step": round(1000 * seconds / max(1, steps), 1),
            "prompt_tokens": round(statistics.mean(len(i) for i in ids))}


def trl_generation(model: Any, tok: Any, prompts: int, group: int, new_tokens: int,
                   bf16: bool = False) -> dict[str, float]:
    """GRPO's sampling as TRL does it: ``model.generate`` on every prompt's group at once (left padding, T = 1);
    ``bf16``: under bfloat16 autocast over the fp32 training weights (each cast once, autocast's cache)."""
    import torch

    ids = [i for i in prompt_ids(tok, prompts) for _ in range(group)]
    side, tok.padding_side = tok.padding_side, "left"
    batch = tok.pad({"input_ids": ids}, return_tensors="pt")
    tok.padding_side = side
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, max_new_tokens=new_tokens,
                             pad_token_id=tok.pad_token_id)
    seconds = time.perf_counter() - start
    new = out[:, batch["input_ids"].shape[1]:]
    made = int((new != tok.pad_token_id).sum())
    return {"seconds": round(seconds, 2), "response_tokens": made, "tokens_per_s": round(made / seconds),
            "ms_per_decoding_step": round(1000 * seconds / max(1, new.shape[1]), 1),
            "prompt_tokens": round(statistics.mean(len(i) for i in ids))}


def stream_generation(model: Any, tok: Any, prompts: int, group: int, new_tokens: int,
                      bf16: bool = False) -> dict[str, float]:
    """GRPO's sampling as ``engine.sampler=stream`` does it (train/rollout.py): the evaluator's stream over a packed
    copy of the weights (eager attention), each group's prompt prefilled once, T = 1; the copy's refresh included."""
    import torch

    from crossed_rlvr.train.rollout import StreamSampler

    ids = [i for i in prompt_ids(tok, prompts) for _ in range(group)]
    sampler = StreamSampler(tok, new_tokens, 1.0, 1.0, bf16, len(ids), 1024)
    sampler.refresh(model)  # the copy is made once per arm; each update only refreshes it
    torch.manual_seed(0)
    start = time.perf_counter()
    out = sampler.sample(model, ids)
    seconds = time.perf_counter() - start
    made = sum(len(c) for c in out)
    return {"seconds": round(seconds, 2), "response_tokens": made, "tokens_per_s": round(made / seconds),
            "ms_per_decoding_step": round(1000 * seconds / max(1, *map(len, out))),
            "prompt_tokens": round(statistics.mean(len(i) for i in ids))}


def loss_pass(model: Any, tok: Any, prompts: int, group: int, completion: int, bf16: bool,
              once: bool) -> dict[str, float]:
    """A GRPO update's forward and backward on ``prompts`` x ``group`` completions of ``completion`` tokens: every
    sequence whole, scored on its completion (``once=False``), or each prompt once with its completions continuing
    from its cache (``engine.prompt_once``, train/prompt_once.py)."""
    import torch

    from crossed_rlvr.train.prompt_once import completion_logps

    ids = [i for i in prompt_ids(tok, prompts) for _ in range(group)]
    width = max(map(len, ids))
    prompt = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * (len(i) + completion) for i in ids])
    full = torch.cat([prompt, torch.randint(0, model.config.vocab_size, (len(ids), completion))], dim=1)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if once:
                logps, _ = completion_logps(model, full, mask, completion, 1.0, entropy=True)
            else:
                logits = model(input_ids=full, attention_mask=mask, logits_to_keep=completion + 1).logits[:, :-1]
                logps = torch.log_softmax(logits.float(), -1).gather(-1, full[:, -completion:, None])
        logps.sum().backward()
        model.zero_grad(set_to_none=True)

    seconds = best_of(step)
    return {"seconds": round(seconds, 3), "tokens_per_s": round(len(ids) * (width + completion) / seconds)}


def step_rows(preset: str) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    from crossed_rlvr.machine import native_bf16
    from crossed_rlvr.policies.loading import load_tokenizer

    p = PRESETS[preset]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model(preset, Path(tmp))
        tok = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        prompts, group = p["grpo"]
        # a training sequence: a prompt and a solution of ~45 characters (arith_tiny's), in the model's tokens
        length = round(statistics.mean(len(i) for i in prompt_ids(tok, 32))) + len(tok("x" * 45)["input_ids"])
        # where the preset computes in bfloat16 (and the machine natively can), both ways are timed
        kinds = [False, True] if p["bf16"] and native_bf16() else [False]
        evaluated = {False: model}
        if True in kinds:  # the evaluator loads the policy in bfloat16 (eval.dtype=auto)
            evaluated[True] = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).eval()
        for threads in (1, 2):
            for bf16 in kinds:
                c = ceiling(model, p["sft_batch"] * length, threads, bf16)
                dtype = "bf16" if bf16 else "fp32"
                rows.append({"step": "ceiling: the model's matrix products", "dtype": dtype, "threads": threads,
                             **c})
                torch.set_num_threads(threads)
                model.train()
                rows.append({"step": f"warm-start optimizer step ({p['sft_batch']} x {length} tokens)",
                             "dtype": dtype, "threads": threads, **train_step(model, p["sft_batch"], length, bf16)})
                rows.append({"step": f"GRPO update ({prompts * group} x {length} tokens)", "dtype": dtype,
                             "threads": threads, **train_step(model, prompts * group, length, bf16)})
                completion = p["response"] // 2
                for once in (False, True):
                    how = "each prompt once (engine.prompt_once)" if once else "whole sequences"
                    rows.append({"step": f"GRPO loss pass, {how} ({prompts} x {group}, {completion} new tokens)",
                                 "dtype": dtype, "threads": threads,
                                 **loss_pass(model, tok, prompts, group, completion, bf16, once)})
                model.eval()
                with torch.no_grad():
                    rows.append({"step": f"GRPO generation ({prompts} x {group} samples, <= {p['response']} tokens)",
                                 "dtype": dtype, "threads": threads,
                                 **trl_generation(model, tok, prompts, group, p["response"], bf16)})
                    rows.append({"step": f"GRPO generation, engine.sampler=stream ({prompts} x {group} samples, "
                                         f"<= {p['response']} tokens)", "dtype": dtype, "threads": threads,
                                 **stream_generation(model, tok, prompts, group, p["response"], bf16)})
                    rows.append({"step": f"evaluation batch ({p['eval_batch']}, <= {p['eval_new']} tokens)",
                                 "dtype": dtype, "threads": threads,
                                 **generation(evaluated[bf16], tok, p["eval_batch"], p["eval_new"])})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if r.get(c) is None else str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a finished study's run folder")
    ap.add_argument("--steps", choices=sorted(PRESETS), help="time each step of this preset's model")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    if not a.run and not a.steps:
        ap.error("give --run RUN_DIR, --steps PRESET, or both")
    out: dict[str, Any] = {"loop_10m_s": loop_time()}
    print(f"10-million-step Python loop: {out['loop_10m_s']} s (the machine's speed; 0.19 s on the reference)")
    if a.run:
        out["stages"] = stage_rows(a.run)
        print(table(out["stages"]))
    if a.steps:
        out["steps"] = step_rows(a.steps)
        print(table(out["steps"]))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


def loop_time() -> float:
    start = time.perf_counter()
    for _ in range(10_000_000):
        pass
    return round(time.perf_counter() - start, 3)


if __name__ == "__main__":
    main()
