"""A real lm-evaluation-harness run of a study's policies, imported, scored and analysed crossed.

lm-eval (from PyPI) loads the initial policy and every arm checkpoint with its own ``hf`` model
(``AutoTokenizer`` / ``AutoModelForCausalLM``) and runs a local task in two variants that differ only
in the request (hash, boxed), with ``--log_samples``. ``crossed-import lm-eval`` reads each policy's
output folder under one ``--task``, ``crossed-score`` scores the responses, ``crossed-analyze`` finds
the crossed pair.

    python scripts/lm_eval_crossed.py RUN_DIR OUT [--limit 8] [--max-gen-toks 48]

RUN_DIR is a finished study (``crossed-study``): its frozen test items and ``stages/arms.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from crossed_rlvr.prompts import user_content

BIN = Path(sys.executable).parent
REQUESTS = ("hash", "boxed")


def write_tasks(items: list[dict], folder: Path, task: str, max_gen_toks: int) -> list[str]:
    """A local lm-eval task per request: the same documents, the request suffix in the prompt."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps({"question": it["question"], "answer": f"#### {it['reference']}",
                                        **{f"prompt_{r}": user_content(it["question"], r) for r in REQUESTS}}) + "\n"
                            for it in items))
    names = []
    for request in REQUESTS:
        name = f"{task}_{request}"
        (folder / f"{name}.yaml").write_text("\n".join([
            f"task: {name}", "dataset_path: json", "dataset_kwargs:", f"  data_files: {{test: {data}}}",
            "test_split: test", "output_type: generate_until", f'doc_to_text: "{{{{prompt_{request}}}}}"',
            'doc_to_target: "{{answer}}"', "target_delimiter: ''", "generation_kwargs:",
            "  until: ['<|im_end|>']", "  do_sample: false", f"  max_gen_toks: {max_gen_toks}",
            "metric_list:", "  - metric: exact_match", "num_fewshot: 0", ""]))
        names.append(name)
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--limit", type=int, default=8, help="documents per task")
    parser.add_argument("--max-gen-toks", type=int, default=48)
    args = parser.parse_args()
    run, out = args.run_dir, args.out
    items_file = next((run / "eval" / "items").glob("*.jsonl"))
    items = [json.loads(x) for x in items_file.read_text().splitlines() if x.strip()]
    task = items_file.stem.rsplit("-", 1)[0]
    arms = json.loads((run / "stages" / "arms.json").read_text())["info"]["arms"]
    policies = {"initial": run / "models" / "initial", **{name: Path(a["path"]) for name, a in sorted(arms.items())}}
    names = write_tasks(items, out / "tasks", task, args.max_gen_toks)
    responses = []
    for policy, path in policies.items():
        slug = policy.replace("/", "_")
        start = time.perf_counter()
        subprocess.run([str(BIN / "lm_eval"), "--model", "hf", "--model_args", f"pretrained={path},dtype=float32",
                        "--tasks", ",".join(names), "--include_path", str(out / "tasks"), "--apply_chat_template",
                        "--log_samples", "--output_path", str(out / "lm_eval" / slug), "--limit", str(args.limit),
                        "--device", "cpu", "--batch_size", "8"], check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        target = out / "responses" / f"{slug}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        # one folder per policy, both request variants in it, one task name: the crossing is kept
        subprocess.run([str(BIN / "crossed-import"), "lm-eval", str(out / "lm_eval" / slug), "-o", str(target),
                        "--policy", policy, "--task", task], check=True, capture_output=True, text=True)
        responses.append(str(target))
        print(f"{policy}: lm-eval {seconds:.1f} s -> {target}", file=sys.stderr)
    scores = out / "scores.parquet"
    subprocess.run([str(BIN / "crossed-score"), *responses, "-o", str(scores), "--overwrite"], check=True,
                   capture_output=True, text=True)
    subprocess.run([str(BIN / "crossed-analyze"), str(scores), "-o", str(out / "analysis"), "--overwrite",
                    "--resamples", "200", "--no-figures"], check=True, capture_output=True, text=True)
    print(out / "analysis" / "report.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
