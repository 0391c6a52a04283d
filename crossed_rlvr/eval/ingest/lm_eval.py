"""lm-evaluation-harness ``--log_samples`` files as response records.

``samples_<task>_<time>.jsonl`` (0.4.3 and later) hold one line per document and filter; 0.4.0-0.4.2 wrote one
JSON array per task. A folder is read whole (every samples file under it). The raw generations are ``resps``
(one list per request, one entry per repeat); lines repeated for each filter carry the same raw responses and
are read once. The request of each response is the request suffix found in its prompt (else ``--request``), so
one folder holding a task's hash and boxed variants imports as one crossed set under one ``--task``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossed_rlvr.eval.ingest.common import (
    lines,
    reference_from_target,
    request_of,
    sha256_text,
    strip_request,
)
from crossed_rlvr.files import Source
from crossed_rlvr.policies.policy import Policy
from crossed_rlvr.records import ResponseFileError, check_record


def _lm_eval_samples(path: Path) -> Iterator[tuple[dict[str, Any], Source]]:
    """Samples of one lm-eval file: JSON Lines (0.4.3+) or one JSON array (0.4.0-0.4.2, whose
    entries are numbered by their position in the array)."""
    with path.open("rb") as fh:
        head = fh.read(4096).decode("utf-8", errors="replace").lstrip()  # the format only; _lines checks bytes
    if not head.startswith("["):
        yield from lines(path)
        return
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ResponseFileError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise ResponseFileError(f"{Source(str(path), err.lineno)}: not valid JSON ({err.msg})") from None
    for k, sample in enumerate(samples):
        yield sample, Source(str(path), k + 1)  # for an array, the entry number


def lm_eval_files(path: str | Path) -> list[Path]:
    """One samples file, or every lm-eval samples file under a folder (``--output_path`` keeps them
    in one sub-folder per model)."""
    path = Path(path)
    if not path.exists():
        raise ResponseFileError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    files = sorted(path.rglob("samples_*.jsonl"))
    if not files:  # 0.4.0-0.4.2 named them <model_args>_<task>.jsonl: JSON arrays
        files = sorted(p for p in path.rglob("*.jsonl") if p.read_text(encoding="utf-8")[:1024].lstrip().startswith("["))
    if not files:
        raise ResponseFileError(f"{path}: no lm-eval samples files (samples_*.jsonl) under this folder")
    return files


def task_of_file(path: Path) -> str | None:
    m = re.match(r"^samples_(.+?)(_\d{4}-\d{2}-\d{2}T.*)?$", path.stem)
    return m.group(1) if m else None


def _lm_eval_prompt(sample: dict[str, Any], where: Source) -> str:
    args = sample.get("arguments")
    if isinstance(args, dict):  # lm-eval >= 0.4.3: {"gen_args_0": {"arg_0": prompt, "arg_1": kwargs}}
        first: object = next(iter(args.values()), {})
        if isinstance(first, dict) and "arg_0" in first:
            return str(first["arg_0"])
    if isinstance(args, list) and args and isinstance(args[0], list | tuple) and args[0]:
        return str(args[0][0])  # older: [[prompt, gen_kwargs], ...]
    raise ResponseFileError(f"{where}: field 'arguments' holds no prompt (lm-eval --log_samples format expected)")


def import_lm_eval(
    path: str | Path, policy: Policy, request: str | None = None, template: str = "original", task: str | None = None,
) -> list[dict[str, Any]]:
    """Response records from an lm-eval ``--log_samples`` file or folder (every samples file in it).

    The request (and wording) of each response is the request suffix in its prompt, else ``request``;
    documents keep their ``doc_id`` as item id, so a task's hash and boxed variants pair item by item.
    Without ``task``, each file's task comes from its name, and one policy whose requests fall under
    different task names is refused: the crossing would be lost (pass ``--task``)."""
    records: list[dict[str, Any]] = []
    tasks_by_request: dict[str, set[str]] = defaultdict(set)
    questions: dict[tuple[str, str], tuple[str, str, Source]] = {}
    for file in lm_eval_files(path):
        file_task = task or task_of_file(file)
        if file_task is None:
            raise ResponseFileError(f"{file}: the task cannot be read from this file name; pass --task")
        seen: dict[Any, tuple[Any, Any, Source]] = {}
        for sample, where in _lm_eval_samples(file):
            if not isinstance(sample, dict):
                raise ResponseFileError(f"{where}: a sample must be a JSON object, got {type(sample).__name__}")
            for field in ("doc_id", "resps", "target"):
                if field not in sample:
                    raise ResponseFileError(f"{where}: missing field '{field}' (lm-eval --log_samples format expected)")
            doc = sample["doc_id"]
            if isinstance(doc, bool) or not isinstance(doc, int | str):
                raise ResponseFileError(f"{where}: field 'doc_id' must be an integer or a string, got "
                                        f"{type(doc).__name__}")
            if sample["target"] is None:
                raise ResponseFileError(f"{where}: field 'target' is null (no reference answer to score against)")
            resps = sample["resps"]
            if not (isinstance(resps, list) and resps and isinstance(resps[0], list)):
                raise ResponseFileError(f"{where}: field 'resps' must be a list of lists of generations")
            if not resps[0]:
                raise ResponseFileError(f"{where}: field 'resps' holds no generation for doc_id {doc!r}")
            bad = [k for k, text in enumerate(resps[0]) if not isinstance(text, str)]
            if bad:
                raise ResponseFileError(f"{where}: field 'resps' generation {bad[0]} is "
                                        f"{'null' if resps[0][bad[0]] is None else type(resps[0][bad[0]]).__name__},"
                                        " not text")
            if doc in seen:  # the same document under another filter holds the same raw responses
                first_resps, first_target, first_where = seen[doc]
                if resps[0] != first_resps or sample["target"] != first_target:
                    raise ResponseFileError(f"{where}: doc_id {doc!r} repeated with other responses or target than at "
                                            f"{first_where} (two runs in one file?)")
                continue
            seen[doc] = (resps[0], sample["target"], where)
            prompt = _lm_eval_prompt(sample, where)
            req, tmpl, found = request_of(prompt, request, template, where)
            tasks_by_request[req].add(file_task)
            question = sha256_text(strip_request(prompt, found))
            first = questions.setdefault((file_task, str(doc)), (question, req, where))
            if first[0] != question:  # the hash and boxed variants pair by doc_id: only for the same question
                raise ResponseFileError(f"{where}: doc_id {doc!r} holds another question than under request "
                                        f"{first[1]!r} at {first[2]}: the variants' documents are not in the same order")
            for k, text in enumerate(resps[0]):
                rec = {
                    "item_id": str(sample["doc_id"]), "task": file_task, **policy.facts(),
                    "request": req, "template": tmpl, "sample_idx": k, "gen_seed": None,
                    "prompt_sha256": sha256_text(prompt), "response": str(text), "finish_reason": "unknown",
                    "prompt_tokens": -1, "response_tokens": -1, "reference": reference_from_target(sample["target"]),
                    "finish_reason_known": False, "source": str(where),
                }
                records.append(check_record(rec, where, prompt_names=True))
    if not records:
        raise ResponseFileError(f"{path}: no samples (an empty input is never an empty result)")
    names = set().union(*tasks_by_request.values()) if tasks_by_request else set()
    if task is None and len(names) > 1:
        shown = "; ".join(f"{r}: {', '.join(sorted(t))}" for r, t in sorted(tasks_by_request.items()))
        raise ResponseFileError(f"{path}: policy {policy.name!r} has its requests under different task names ({shown}); "
                                "the crossed analysis pairs requests within one task, so pass --task NAME")
    return records


def ingest(src: str | Path, *, policy: Policy, request: str | None, template: str, task: str | None,
           step: int | None = None, all_steps: bool = False) -> list[dict[str, Any]]:
    """``crossed-import lm-eval``: a samples file or folder (``--step``/``--all-steps`` are verl's)."""
    if step is not None or all_steps:
        raise ResponseFileError("--step and --all-steps are for verl validation dumps; lm-eval samples have no steps")
    return import_lm_eval(src, policy, request, template, task)
