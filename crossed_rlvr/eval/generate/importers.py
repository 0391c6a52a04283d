"""Import outputs made elsewhere as response records, so they can be re-scored (paper 000 §2).

- lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<time>.jsonl`` (0.4.3 and later), one
  line per document and filter, or one JSON array per task (0.4.0-0.4.2); a folder is read whole
  (every samples file under it). The raw generations are ``resps`` (one list per request, one entry
  per repeat); lines repeated for each filter carry the same raw responses and are read once. The
  request of each response is the request suffix found in its prompt (else ``--request``), so one
  folder holding a task's hash and boxed variants imports as one crossed set under one ``--task``.
- verl validation dumps (``trainer.validation_data_dir``; ``--all-steps``: every step, as ``<policy>@step<K>``):
  one ``{step}.jsonl`` per step with
  ``input``, ``output``, ``gts``, ``score``, ``step``. The request (and wording) of each response is
  the request suffix found in its prompt; dumps carry no item id, so the item id is the first 16 hex
  digits of the sha256 of the prompt without that suffix, which pairs the same item across requests
  and policies; repeated prompts (``val_kwargs.n > 1``) become samples 0, 1, ...

Neither source records finish reasons or token counts: imported records say ``finish_reason``
"unknown" (the report prints "n/a" for their truncation) and token counts of -1 (unknown).

A policy's training convention and seed come from its name when it has the documented form
``<method>-<convention>/s<seed>`` (``grpo-hash/s83``, ``sft-boxed/s84``) or is ``initial``; a flag that
contradicts the name, or a name that says neither, is refused rather than guessed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossed_rlvr.files import Source, json_lines
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.limits import Parser, add_number
from crossed_rlvr.names import PolicyName, checkpoint_name
from crossed_rlvr.records import ResponseFileError, check_record, write_responses

_GSM8K_TARGET = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_from_target(target: Any) -> str:
    """A GSM8K-style target ('... #### 1,234') becomes '1234'; anything else is kept as text."""
    text = str(target).strip()
    m = _GSM8K_TARGET.search(text)
    return m.group(1).replace(",", "").strip() if m else text


def _policy_fields(policy: str, training_convention: str, train_seed: int | None) -> dict[str, Any]:
    return {"policy": policy, "training_convention": training_convention, "train_seed": train_seed}




def policy_identity(policy: str, training_convention: str | None = None,
                    train_seed: int | None = None) -> tuple[str, int | None]:
    """(training convention, seed) of a policy: read from a name ``<method>-<convention>/s<seed>`` or
    ``initial``, checked against the flags; a contradiction or a name that says neither is refused."""
    from crossed_rlvr.rewards.conventions import CONVENTIONS

    parsed = PolicyName.parse(policy)
    named = (parsed.convention, parsed.seed) if parsed and parsed.convention in CONVENTIONS else None
    if policy == "initial":
        named = ("initial", None)
    if named is None:
        if training_convention is None:
            raise ResponseFileError(
                f"policy {policy!r}: cannot tell its training convention; name it <method>-<convention>/s<seed> "
                f"(e.g. grpo-hash/s83) or initial, or pass --training-convention (and --train-seed)")
        return training_convention, train_seed
    if training_convention is not None and training_convention != named[0]:
        raise ResponseFileError(f"policy {policy!r}: the name says training convention {named[0]!r} but "
                                f"--training-convention says {training_convention!r}")
    if train_seed is not None and train_seed != named[1]:
        raise ResponseFileError(f"policy {policy!r}: the name says seed {named[1]} but --train-seed says {train_seed}")
    return named


def _lines(path: Path) -> Iterator[tuple[dict[str, Any], Source]]:
    return json_lines(path, ResponseFileError)


def _lm_eval_samples(path: Path) -> Iterator[tuple[dict[str, Any], Source]]:
    """Samples of one lm-eval file: JSON Lines (0.4.3+) or one JSON array (0.4.0-0.4.2, whose
    entries are numbered by their position in the array)."""
    with path.open("rb") as fh:
        head = fh.read(4096).decode("utf-8", errors="replace").lstrip()  # the format only; _lines checks bytes
    if not head.startswith("["):
        yield from _lines(path)
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
        first = next(iter(args.values()), {})
        if isinstance(first, dict) and "arg_0" in first:
            return str(first["arg_0"])
    if isinstance(args, list) and args and isinstance(args[0], list | tuple) and args[0]:
        return str(args[0][0])  # older: [[prompt, gen_kwargs], ...]
    raise ResponseFileError(f"{where}: field 'arguments' holds no prompt (lm-eval --log_samples format expected)")


def import_lm_eval(
    path: str | Path, policy: str, training_convention: str | None = None, train_seed: int | None = None,
    request: str | None = None, template: str = "original", task: str | None = None,
) -> list[dict[str, Any]]:
    """Response records from an lm-eval ``--log_samples`` file or folder (every samples file in it).

    The request (and wording) of each response is the request suffix in its prompt, else ``request``;
    documents keep their ``doc_id`` as item id, so a task's hash and boxed variants pair item by item.
    Without ``task``, each file's task comes from its name, and one policy whose requests fall under
    different task names is refused: the crossing would be lost (pass ``--task``)."""
    convention, seed = policy_identity(policy, training_convention, train_seed)
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
                    "item_id": str(sample["doc_id"]), "task": file_task, **_policy_fields(policy, convention, seed),
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
        raise ResponseFileError(f"{path}: policy {policy!r} has its requests under different task names ({shown}); "
                                "the crossed analysis pairs requests within one task, so pass --task NAME")
    return records


def find_request(prompt: str) -> tuple[str, str, int] | None:
    """(request, template, position) of the last request suffix in a rendered prompt, if any."""
    from crossed_rlvr.rewards.conventions import REQUESTS, TEMPLATES, request_suffix

    best = None
    for req in REQUESTS:
        for tmpl in TEMPLATES:
            at = prompt.rfind(request_suffix(req, tmpl))
            if at >= 0 and (best is None or at > best[2]):
                best = (req, tmpl, at)
    return best


def request_of(prompt: str, request: str | None, template: str, where: Source
               ) -> tuple[str, str, tuple[str, str, int] | None]:
    """(request, template, suffix found) of one imported response: the request suffix in its prompt, else
    the ``--request`` flag; a prompt without a suffix and no flag, or a contradiction, is refused."""
    found = find_request(prompt)
    if found is None and request is None:
        raise ResponseFileError(f"{where}: the prompt carries no known request suffix; pass --request")
    if found is not None and request is not None and found[0] != request:
        raise ResponseFileError(f"{where}: the prompt asks for {found[0]!r} but --request says {request!r}")
    return (found[0], found[1], found) if found else (str(request), template, None)


def strip_request(prompt: str, found: tuple[str, str, int] | None) -> str:
    if found is None:
        return prompt
    from crossed_rlvr.rewards.conventions import request_suffix

    req, tmpl, at = found
    return prompt[:at] + prompt[at + len(request_suffix(req, tmpl)):]


def import_verl_dump(
    path: str | Path, policy: str, training_convention: str, train_seed: int | None = None,
    request: str | None = None, template: str = "original", task: str = "gsm8k",
) -> list[dict[str, Any]]:
    """Response records from one verl validation dump ``{step}.jsonl``.

    A dump of validation under several requests (crossed-rlvr's val.parquet) is split by the request
    suffix found in each prompt; the item id is the hash of the prompt without that suffix, so the same
    item pairs across requests and policies."""
    path = Path(path)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    records = []
    rows_seen: dict[Any, Source] = {}
    for row, where in _lines(path):
        if not isinstance(row, dict):
            raise ResponseFileError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
        for field in ("input", "output", "gts"):
            if field not in row:
                hint = " (verl before 0.5 wrote no 'gts'; re-run validation with a newer verl)" if field == "gts" else ""
                raise ResponseFileError(f"{where}: missing field '{field}'{hint}")
            if row[field] is None:
                raise ResponseFileError(f"{where}: field '{field}' is null")
        # verl's v1 writer keys each sample by uid: a uid seen twice is a dump written or concatenated twice.
        # (The legacy writer has no uid, and equal rows are then legitimate: n > 1 greedy samples.)
        if row.get("uid") is not None:
            if row["uid"] in rows_seen:
                raise ResponseFileError(f"{where}: the same sample as at {rows_seen[row['uid']]} (uid "
                                        f"{row['uid']!r}): a dump written or concatenated twice")
            rows_seen[row["uid"]] = where
        prompt = str(row["input"])
        sha = sha256_text(prompt)
        # our val.parquet names each row's request in data_source (crossed_rlvr/<task>/<request>): it decides
        # for a prompt without a suffix, so rows of another request never fold in as extra samples
        named = _named_request(row.get("data_source"))
        if named is not None:
            suffix = find_request(prompt)
            if suffix is not None and suffix[0] != named:
                raise ResponseFileError(f"{where}: the prompt asks for {suffix[0]!r} but data_source "
                                        f"{row['data_source']!r} says {named!r}")
            if request is not None and named != request:
                raise ResponseFileError(f"{where}: data_source {row['data_source']!r} says request {named!r} but "
                                        f"--request says {request!r}")
        req, tmpl, found = request_of(prompt, request if named is None else named, template, where)
        # The item id hashes the prompt without its request suffix: one item, one id under every request.
        item = sha256_text(strip_request(prompt, found))[:16]
        key = (item, req, tmpl)
        rec = {
            "item_id": item, "task": task, **_policy_fields(policy, training_convention, train_seed),
            "request": req, "template": tmpl, "sample_idx": 0, "gen_seed": None,
            "prompt_sha256": sha, "response": str(row["output"]), "finish_reason": "unknown",
            "prompt_tokens": -1, "response_tokens": -1, "reference": reference_from_target(row["gts"]),
            "finish_reason_known": False, "verl_step": row.get("step"), "verl_score": row.get("score"),
            "source": str(where),
        }
        rec["sample_idx"] = counts[key]
        counts[key] += 1
        records.append(check_record(rec, where))
    if not records:
        raise ResponseFileError(f"{path}: no rows (an empty dump is never an empty result)")
    return records


def _named_request(source: Any) -> str | None:
    """The request a verl row's ``data_source`` names (``crossed_rlvr/<task>/<request>``), if any."""
    from crossed_rlvr.rewards.conventions import REQUESTS

    parts = str(source).split("/") if source else []
    return parts[2] if len(parts) == 3 and parts[0] == "crossed_rlvr" and parts[2] in REQUESTS else None


def verl_steps(folder: Path) -> list[tuple[int, Path]]:
    """The ``{step}.jsonl`` dumps of a ``validation_data_dir``, by step."""
    steps = sorted((int(p.stem), p) for p in Path(folder).glob("*.jsonl") if p.stem.isdigit())
    if not steps:
        raise ResponseFileError(f"{folder}: no {{step}}.jsonl files")
    return steps


def import_verl_steps(folder: str | Path, policy: str, **kw: Any) -> list[dict[str, Any]]:
    """Every step of a verl ``validation_data_dir`` (``val_before_train``, every ``test_freq`` and the end),
    each step's responses as the policy ``<policy>@step<K>``: the checkpoints of one arm, which the
    analysis pairs with the other arm's same steps (crossed validation during training)."""
    records = []
    for step, path in verl_steps(Path(folder)):
        records += import_verl_dump(path, policy=checkpoint_name(policy, step), **kw)
    return records


def verl_task(src: Path) -> str:
    """The task of a verl dump from its rows' ``data_source`` (``crossed_rlvr/<task>[/<request>]``, as our
    parquet writes it, where the dump keeps it); never a guess: readers differ by task (``\\frac12`` is
    right on MATH, unreadable on GSM8K), so a dump that does not say is refused."""
    from crossed_rlvr.conf import group_options

    tasks = group_options("task")
    files = [p for _, p in verl_steps(src)] if src.is_dir() else [src]
    for path in files:
        for row, _where in _lines(path):
            source = row.get("data_source") if isinstance(row, dict) else None
            parts = str(source).split("/") if source else []
            if len(parts) >= 2 and parts[0] == "crossed_rlvr" and parts[1] in tasks:
                return parts[1]
            break
    raise ResponseFileError(f"{files[0]}: the dump does not say its task (no data_source crossed_rlvr/<task>); "
                            f"give --task (one of {', '.join(tasks)})")


@stops_cleanly("crossed-import")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="crossed-import", description="Import outputs made elsewhere as response records.")
    parser.add_argument("kind", choices=["lm-eval", "verl"], help="source format")
    parser.add_argument("input", help="lm-eval samples file or --output_path folder, or a verl "
                        "validation_data_dir / {step}.jsonl")
    parser.add_argument("-o", "--output", required=True, help="response file to write (JSON Lines)")
    parser.add_argument("--policy", required=True, help="policy name, e.g. initial or grpo-hash/s83")
    parser.add_argument("--training-convention", default=None,
                        help="initial or a convention; read from a policy name like grpo-hash/s83 when omitted")
    add_number(parser, "--train-seed", 0, 2**32 - 1, default=None)
    parser.add_argument("--request", default=None,
                        help="the request of responses whose prompt carries no known request suffix (default: read "
                             "from each prompt); lm-eval also takes another prompt's name (plain, gsm8k-cot, ...), "
                             "whose outputs crossed-rescore reads")
    parser.add_argument("--template", default="original")
    parser.add_argument("--task", default=None, help="task name of every record (lm-eval: default from each "
                        "file name, refused when one policy's requests fall under different names)")
    add_number(parser, "--step", 0, 10**9, default=None, why="0: the step before training", help="verl: which {step}.jsonl (default: the last)")
    parser.add_argument("--all-steps", action="store_true",
                        help="verl: every {step}.jsonl, each as the policy <policy>@step<K> (validation during "
                             "training; crossed-analyze reports the interactions over training)")
    args = parser.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        print(f"crossed-import: {out} exists; refusing to overwrite it", file=sys.stderr)
        return 2
    common = {"policy": args.policy, "training_convention": args.training_convention, "train_seed": args.train_seed,
                  "request": args.request, "template": args.template}
    try:
        if args.kind == "lm-eval":
            records = import_lm_eval(args.input, task=args.task, **common)
        else:
            src = Path(args.input)
            convention, seed = policy_identity(args.policy, args.training_convention, args.train_seed)
            kw = {**common, "training_convention": convention, "train_seed": seed}
            task = args.task or verl_task(src)
            if args.all_steps:
                records = import_verl_steps(src, task=task, **kw)
            else:
                if src.is_dir():
                    steps = verl_steps(src)
                    chosen = dict(steps).get(args.step) if args.step is not None else steps[-1][1]
                    if chosen is None:
                        raise ResponseFileError(f"{src}: no {args.step}.jsonl")
                    src = chosen
                records = import_verl_dump(src, task=task, **kw)
    except ResponseFileError as err:
        print(f"crossed-import: {err}", file=sys.stderr)
        return 2
    write_responses(out, records)
    print(f"wrote {len(records)} records to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
