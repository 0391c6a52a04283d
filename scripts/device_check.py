"""A prepared one-GPU check of what the memory plan assumes, and of the tiny model's GRPO and evaluation on a GPU.

    python scripts/device_check.py                 # on a GPU: Qwen2.5-7B and 1.5B shapes, then the tiny model
    python scripts/device_check.py --shape tiny    # anywhere (the suite runs it on the CPU so it cannot rot)

For a bare machine with torch and transformers (no verl, vLLM or Ray, no network). Steps:

1. **FSDP2 as verl configures it** (``actor.strategy=fsdp2``, ``verl/utils/fsdp_utils.py: apply_fsdp2``): a randomly
   initialised model from a hand-written config (Qwen2.5-7B: 7.62B parameters, vocabulary 152,064), fp32 master
   weights, bf16 mixed precision with fp32 gradient reduction, ``fully_shard`` on each decoder layer then the root, activation checkpointing, SDPA. One micro-batch of 3,072
   tokens forward and backward, then one AdamW step with the fused kernel and one with foreach (the copy the
   memory plan counts; on one H200 the plan expects it not to fit). ``torch.cuda.max_memory_allocated`` per
   phase, beside ``crossed_rlvr.train.memory``'s plan for the same shapes.
2. The same at the Qwen2.5-1.5B shape with 40% of the card held back (``set_per_process_memory_fraction(0.6)``),
   as vLLM's share would be.
3. One TRL GRPO update and one crossed evaluation batch of the tiny model (needs trl, hydra-core, omegaconf,
   datasets and math-verify importable; a step whose modules are missing is reported as skipped, by name).
   On a bare image they travel as wheels: ``python scripts/device_bundle.py`` (where PyPI is reachable) writes
   ``.device/wheels`` (only what the image lacks), and
   ``python3 scripts/device_check.py --wheels .device/wheels`` installs them with ``pip --no-index`` into a
   throw-away venv that sees the image's packages, then runs this script there (the wheels must sit inside the
   interpreter's prefix: datasets pickles modules found outside it by value, and fails on pyarrow's types). Each
   requirement of a carried wheel that the image meets with another version is printed and kept in
   ``bundle.unmet``.
4. The launch driver's GPU table (``crossed_rlvr.train.memory.gpu_table``) in a fresh process: it must leave no CUDA
   context behind (the driver lives for the whole run; a context costs ~0.3-0.5 GiB on every GPU). NVIDIA's
   ``nvidia-smi --query-compute-apps`` must not list that process (``launch_context``).
5. The evaluation's transformers backend as ``eval.device=auto`` and an unset ``eval.dtype`` leave it
   (``crossed_rlvr.eval.generate.engines.load_backend``): a tiny local policy (written with transformers and
   tokenizers alone) loaded on the GPU in bfloat16, its weights checked there, and one batch generated. Without a
   GPU the same step runs on the CPU in float32, so it cannot rot (``transformers_eval``).

Writes ``device_check.json`` and ``device_check.md`` (a table) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout travels without an install

GIB = 2**30
SHAPES = {  # config.json values (Qwen2.5-7B-Instruct, Qwen2.5-1.5B-Instruct) and a toy one
    "7b": {"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
               "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False},
    "1.5b": {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                 "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "tiny": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "tie_word_embeddings": False},
}


OVERLAY = "CROSSED_DEVICE_OVERLAY"  # set inside the throw-away venv of --wheels


def run_in_overlay(wheels: Path, argv: list[str]) -> int:
    """Install the bundle's wheels into a fresh venv over this interpreter's packages and rerun this script in it."""
    import shutil
    import site

    found = sorted(wheels.glob("*.whl"))
    if not found:
        print(f"device_check: --wheels {wheels}: no .whl files (python scripts/device_bundle.py writes them)",
              file=sys.stderr)
        return 2
    env_dir = Path(tempfile.mkdtemp(prefix="device-check-env-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                       check=True)
        target = next((env_dir / "lib").glob("python3*/site-packages"))
        # a venv made from a venv sees the base interpreter, not the outer venv: name this one's packages too
        (target / "image.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                        str(target), *map(str, found)], check=True)
        env = {**os.environ, OVERLAY: json.dumps({"wheels": [w.name for w in found], "prefix": str(env_dir)})}
        return subprocess.run([str(env_dir / "bin" / "python"), str(Path(__file__).resolve()), *argv], env=env,
                              check=False).returncode
    finally:
        shutil.rmtree(env_dir, ignore_errors=True)


def unmet(wheel_names: list[str]) -> list[str]:
    """Each requirement of a carried distribution that the venv does not meet (the image may hold a package at
    another version than the bundle was closed against): ``--no-deps`` installs without asking, so say it here,
    by name, before a step fails on it. Empty: every requirement is met."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    out = []
    for wheel in wheel_names:
        dist = md.distribution(wheel.split("-")[0])
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue  # another Python's, or an extra's
            try:
                have = md.version(req.name)
            except md.PackageNotFoundError:
                out.append(f"{dist.name} {dist.version} needs {req}; not installed")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                out.append(f"{dist.name} {dist.version} needs {req}; found {req.name} {have}")
    return out


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def peak_gib() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / GIB if cuda() else None


def reset_peak() -> None:
    import torch

    if cuda():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def plan_for(shape: str, seq: int, card_gib: float) -> Any:
    """crossed_rlvr.train.memory's plan for one GPU of ``card_gib`` and one micro-batch of ``seq`` tokens."""
    from crossed_rlvr.conf.schema import EngineConf, RecipeConf
    from crossed_rlvr.train.memory import Shape, plan

    c = SHAPES[shape]
    s = Shape(c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"],
              c["num_attention_heads"], c["num_key_value_heads"], c["tie_word_embeddings"], True)
    # the schema's own engine and recipe (its defaults for everything not set here), as the memory plan reads them
    engine = EngineConf(name="verl", n_gpus_per_node=1, nnodes=1, gpu_memory_gib=card_gib, micro_batch_per_gpu=1,
                        gradient_checkpointing=True, gpu_memory_utilization=0.0, param_offload=True,
                        optimizer_offload=True, fused_optimizer=False, save_optimizer=False)
    recipe = RecipeConf(max_context_tokens=seq, save_every=0, keep_optimizer=False)
    return plan(SimpleNamespace(engine=engine, recipe=recipe, model=SimpleNamespace(path=shape)), s)


def fsdp_step(shape: str, seq: int, fraction: float | None = None) -> dict[str, Any]:
    """Step 1/2: one FSDP micro-batch and AdamW steps (fused, then foreach) with the peak memory of each phase."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import Qwen2Config, Qwen2ForCausalLM

    device = torch.device("cuda", 0) if cuda() else torch.device("cpu")
    if cuda():
        torch.cuda.set_device(device)
        torch.cuda.empty_cache()
        if fraction is not None:
            torch.cuda.set_per_process_memory_fraction(fraction, device)
    card = torch.cuda.mem_get_info(device)[1] / GIB if cuda() else 1.0
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl" if cuda() else "gloo", rank=0, world_size=1)
    out: dict[str, Any] = {"shape": shape, "tokens": seq, "card_gib": round(card * (fraction or 1.0), 1),
                           "device": torch.cuda.get_device_name(device) if cuda() else "cpu"}
    config = Qwen2Config(**SHAPES[shape], attn_implementation="sdpa", use_cache=False)
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.device(device):
        model = Qwen2ForCausalLM(config).float()  # fp32 masters, as verl keeps them
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # FSDP2 as verl's engine applies it (actor.strategy=fsdp2, verl.utils.fsdp_utils.apply_fsdp2): each decoder
    # layer, then the root, bf16 compute over fp32 masters with fp32 gradient reduction
    mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mixed)
    fully_shard(model, mp_policy=mixed)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["after_wrap_gib"] = peak_gib()
    reset_peak()
    ids = torch.randint(0, config.vocab_size, (1, seq), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    out["forward_backward_peak_gib"] = peak_gib()
    for name, kwargs in (("fused", {"fused": True}), ("foreach", {"foreach": True})):
        reset_peak()
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-6, **kwargs)
            opt.step()
            out[f"adamw_{name}_peak_gib"] = peak_gib()
        except torch.OutOfMemoryError:
            out[f"adamw_{name}_peak_gib"] = "out of memory"
        finally:
            opt = None
            if cuda():
                torch.cuda.empty_cache()
    out["seconds"] = round(time.perf_counter() - start, 1)
    p = plan_for(shape, seq, out["card_gib"])
    out["plan"] = {"parameters": p.params, "state_gib": round(sum(v for k, v in p.train.items() if "sharded" in k), 2),
                   "foreach_copy_gib": round(next(v for k, v in p.train.items() if k.startswith("optimizer step")), 2),
                   "micro_batch_gib": round(sum(v for k, v in p.train.items() if "micro-batch" in k), 2),
                   "update_peak_gib": round(p.train_peak, 2)}
    del model
    if cuda():
        torch.cuda.empty_cache()
        if fraction is not None:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    return out


def tiny_grpo_and_eval(work: Path) -> dict[str, Any]:
    """Step 3: one TRL GRPO update and one crossed evaluation batch of the tiny model, through the project's code."""
    missing = [m for m in ("trl", "hydra", "omegaconf", "datasets", "math_verify") if not _importable(m)]
    if missing:
        return {"skipped": f"not importable here: {', '.join(missing)} (install them beside the checkout)"}
    from hydra import compose, initialize_config_module

    from crossed_rlvr.eval.generate.runner import run_eval
    from crossed_rlvr.policies.tiny import TinyConfig, build_tiny_model
    from crossed_rlvr.train.checks import checked_train
    from crossed_rlvr.train.run import run_train

    small = TinyConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2)
    build_tiny_model(work / "model", small)
    start = time.perf_counter()
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        train = compose(config_name="crossed_train", overrides=[
            "tracking=off", "recipe=tiny", "recipe.updates=1", "recipe.prompts_per_update=2",
            "recipe.max_response_tokens=16", "train_items.n=16", f"run_dir={work}/arm", f"model.path={work}/model",
            "convention=hash"])
        evaluation = compose(config_name="crossed_eval", overrides=[
            "tracking=off", "eval=cpu", "eval.max_new_tokens=16", "task.n_items=4", f"run_dir={work}/eval",
            f"model.path={work}/arm/checkpoints/step-1"])
    summary = run_train(checked_train(train))
    trained = time.perf_counter() - start
    result = run_eval(evaluation, progress=False)
    return {"grpo_update_s": round(trained, 1), "reward_first": summary.get("reward_first"),
            "eval_cells": len(result), "eval_responses": sum(int(v.get("n", 0) or 0) for v in result.values()),
            "eval_s": round(time.perf_counter() - start - trained, 1)}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


LAUNCH_CONTEXT = """
import os, subprocess, sys
sys.path.insert(0, sys.argv[1])
from crossed_rlvr.train.memory import gpu_table
table = gpu_table()
apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                      capture_output=True, text=True, check=False).stdout
mine = [x for x in apps.splitlines() if x.split(",")[0].strip() == str(os.getpid())]
print(repr((table, mine)))
"""


def launch_context() -> dict[str, Any]:
    """Step 4: the GPU table read in a fresh process, and whether that process holds a CUDA context afterwards."""
    import ast

    if not cuda():
        return {"skipped": "no GPU"}
    out = subprocess.run([sys.executable, "-c", LAUNCH_CONTEXT, str(ROOT)], capture_output=True, text=True,
                         check=True, timeout=300)
    table, mine = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    return {"gpus": table, "context_held": bool(mine), "apps": mine}


class Settings(dict):
    """``eval`` settings as ``load_backend`` reads them (``gen.key``, ``gen.get``), without OmegaConf (not on a bare
    image)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def tiny_policy(folder: Path) -> Path:
    """A tiny Qwen2 policy folder from transformers and tokenizers alone (the project's ``policies/tiny.py`` imports
    its config schema, hence OmegaConf): one token per byte, ChatML's end of turn as its eos."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {t: i for i, t in enumerate(("<|endoftext|>", "<|im_start|>", "<|im_end|>"))}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    config = Qwen2Config(**{**SHAPES["tiny"], "vocab_size": len(vocab)}, eos_token_id=vocab["<|im_end|>"],
                         pad_token_id=vocab["<|endoftext|>"])
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def transformers_eval(work: Path) -> dict[str, Any]:
    """Step 5: load_backend with ``eval.device=auto`` and no ``eval.dtype``: the weights on the GPU in bfloat16 (the
    CPU in float32 without one), then one batch of four generations, two of them from one item seed."""
    from crossed_rlvr.eval.generate.engines import GenParams, load_backend

    expected = ("cuda", "bfloat16") if cuda() else ("cpu", "float32")
    path = tiny_policy(work / "policy")
    start = time.perf_counter()
    gen = Settings(backend="hf", device="auto", dtype=None, batch_size=4, linear=None, attention=None, shared_prefix=None,
                   prefix_cache=None)
    backend, tok = load_backend(str(path), gen)
    weights = next(backend.model.parameters())
    placed = (weights.device.type, str(weights.dtype).removeprefix("torch."))
    out: dict[str, Any] = {"device": placed[0], "dtype": placed[1], "load_s": round(time.perf_counter() - start, 1)}
    if placed != expected:
        return {**out, "error": f"weights on {placed[0]} in {placed[1]}; expected {expected[0]} in {expected[1]}"}
    prompt = tok("12+7=")["input_ids"]
    gens = backend.generate([prompt] * 4, [83, 84, 85, 83], GenParams(0.6, 0.95, 16, 256))
    out.update(responses=len(gens), response_tokens=sum(g.response_tokens for g in gens),
               finish_reasons=sorted({g.finish_reason for g in gens}), same_seed_same_text=gens[0].text == gens[3].text,
               generate_s=round(time.perf_counter() - start - out["load_s"], 1))
    if not all(g.response_tokens or g.finish_reason == "stop" for g in gens):
        out["error"] = "a generation ended without a token or a stop"
    return out


def table(results: dict[str, Any]) -> str:
    rows = ["| shape | tokens | card GiB | parameters | after wrap | fwd+bwd peak | AdamW fused peak | AdamW foreach "
            "peak | plan: state / step copy / micro-batch / update peak |", "|---|---|---|---|---|---|---|---|---|"]

    def g(v: Any) -> str:
        return "n/a (CPU)" if v is None else v if isinstance(v, str) else f"{v:.1f}"

    for r in results["fsdp"]:
        if "error" in r:
            rows.append(f"| {r['shape']} | | | | error: {r['error']} | | | | |")
            continue
        p = r["plan"]
        rows.append(f"| {r['shape']} | {r['tokens']} | {r['card_gib']} | {r['parameters']:,} (plan {r['plan']['parameters']:,}) | "
                    f"{g(r['after_wrap_gib'])} | {g(r['forward_backward_peak_gib'])} | {g(r['adamw_fused_peak_gib'])} | "
                    f"{g(r['adamw_foreach_peak_gib'])} | {p['state_gib']} / {p['foreach_copy_gib']} / "
                    f"{p['micro_batch_gib']} / {p['update_peak_gib']} |")
    rows += ["", f"tiny model on {results['device']}: {json.dumps(results['tiny'])}",
             f"launch driver's GPU table: {json.dumps(results.get('launch_context'))}",
             f"transformers backend (eval.device=auto): {json.dumps(results.get('transformers_eval'))}"]
    return "\n".join(rows) + "\n"



def step(fn: Any, *args: Any) -> dict[str, Any]:
    """One check's result, or its error: one check's failure is a result, and the other checks still run."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        return {"error": f"{type(err).__name__}: {str(err)[:200]}"}

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["gpu", "tiny"], default="gpu",
                        help="gpu: the 7B and 1.5B shapes then the tiny model; tiny: toy shapes (any machine)")
    parser.add_argument("--out", default=".", help="folder for device_check.json and device_check.md")
    parser.add_argument("--wheels", default=None,
                        help="a folder of wheels (scripts/device_bundle.py) to run step 3 with, on a bare image")
    args = parser.parse_args(argv)
    if args.wheels and not os.environ.get(OVERLAY):
        return run_in_overlay(Path(args.wheels), ["--shape", args.shape, "--out", str(Path(args.out).resolve())])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = [("7b", 3072, None), ("1.5b", 3072, 0.6)] if args.shape == "gpu" else [("tiny", 64, None),
                                                                                   ("tiny", 64, 0.6)]
    results: dict[str, Any] = {"device": "cuda" if cuda() else "cpu", "fsdp": []}
    if os.environ.get(OVERLAY):
        results["bundle"] = {**json.loads(os.environ[OVERLAY]), "python": sys.executable}
        results["bundle"]["unmet"] = unmet(results["bundle"]["wheels"])
        for line in results["bundle"]["unmet"]:  # carry the right version: device_bundle.py --add NAME==VERSION
            print(f"device_check: unmet: {line}", flush=True)
    for shape, seq, fraction in steps:
        try:
            results["fsdp"].append(fsdp_step(shape, seq, fraction))
        except Exception as err:  # noqa: BLE001 - one shape's failure is a result; the other steps still run
            traceback.print_exc()
            results["fsdp"].append({"shape": shape, "error": f"{type(err).__name__}: {str(err)[:200]}"})
        print(json.dumps(results["fsdp"][-1]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        results["tiny"] = step(tiny_grpo_and_eval, Path(tmp))
    results["launch_context"] = step(launch_context)
    with tempfile.TemporaryDirectory() as tmp:
        results["transformers_eval"] = step(transformers_eval, Path(tmp))
    (out / "device_check.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "device_check.md").write_text(table(results))
    print(table(results))
    context = results["launch_context"]
    ok = "error" not in context and not context.get("context_held") and "error" not in results["transformers_eval"]
    return 0 if all("error" not in r for r in results["fsdp"]) and "error" not in results["tiny"] and ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
