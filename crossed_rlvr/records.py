"""Response records: one JSON Lines record per sampled response (docs/formats.md).

Reading validates as it goes and refuses bad input with one message naming the file, the line and
the field or key at fault: malformed JSON, a missing field, a wrong type, a repeated
(item, policy, request, template, sample) key, a cell whose item set (or samples per item)
differs from the cells it is compared with, and different prompt hashes for the same item,
request and template across policies (which would mean the policies did not see the same prompt).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.files import Source, input_problem, json_lines
from crossed_rlvr.layout import EvalLayout
from crossed_rlvr.limits import BIG, DECODING, SEED, Range
from crossed_rlvr.names import PolicyName
from crossed_rlvr.rewards.code import CODE_CONVENTIONS
from crossed_rlvr.rewards.conventions import CONVENTIONS, REQUESTS, TEMPLATES

# what a policy can have been trained on: an answer convention, or a code delimiter (code arms, App. D.3)
TRAINED: tuple[str, ...] = (*CONVENTIONS, *CODE_CONVENTIONS)

# field -> allowed Python types (None allowed where listed).
FIELDS: dict[str, tuple[type, ...]] = {
    "item_id": (str, int),
    "task": (str,),
    "policy": (str,),
    "training_convention": (str,),
    "train_seed": (int, type(None)),
    "request": (str,),
    "template": (str,),
    "sample_idx": (int,),
    "gen_seed": (int, type(None)),
    "prompt_sha256": (str,),
    "response": (str,),
    "finish_reason": (str,),
    "prompt_tokens": (int,),
    "response_tokens": (int,),
    "reference": (str,),
}
# optional fields: the decoding of each response (crossed-eval writes them; imports may not know them)
OPTIONAL: dict[str, tuple[type, ...]] = {"temperature": (int, float), "top_p": (int, float), "max_new_tokens": (int,)}
# optional fields: the policy's method and checkpoint, stored beside its name where the record is made
# (policies.policy.Policy.facts);
# records written before they were stored get them when analysed (analysis/cells.py: policy_table)
PARTS: dict[str, tuple[type, ...]] = {"method": (str,), "checkpoint": (str,)}


_UNKNOWN = "-1: not recorded (outputs imported from lm-eval or verl)"
# field -> Range: NaN, infinity, a negative count or a temperature of 1e300 never enter a table (the decoding
# ranges are the eval schema's own, limits.DECODING)
NUMBER_RANGES: dict[str, Range] = {
    **DECODING, "sample_idx": Range(0, BIG), "prompt_tokens": Range(-1, BIG, why=_UNKNOWN),
    "response_tokens": Range(-1, BIG, why=_UNKNOWN), "gen_seed": Range(0, 2**63 - 1), "train_seed": Range(*SEED)}
# task first: benchmarks whose loaders number items by row (MMLU, AQuA-RAT, BBH) share ids, never responses
KEY = ("task", "item_id", "policy", "request", "template", "sample_idx")
CELL = ("task", "policy", "request", "template")
FINISH_REASONS = ("stop", "length", "unknown")  # unknown: imported outputs that do not record it
# Outputs re-scored from harnesses (paper 000) were made under prompts other than the four requests: a "plain"
# prompt, or a harness's own (lm-eval's gsm8k-cot, Qwen's chat template ...). Their records name the prompt in
# ``request``; crossed-rescore reads them, crossed-score (whose readers need a requested convention) does not.
PROMPT_NAME = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,63}\Z")


def is_prompt_name(name: str) -> bool:
    """A valid name for a prompt outside the four requests (lower case, digits, ``_ . : -``)."""
    return bool(PROMPT_NAME.match(name))


class ResponseFileError(CrossedError, ValueError):
    """A response file that breaks the contract; the message names file, line and field or key."""


def name_disagreement(name: str, convention: str, seed: int | None) -> str | None:
    """Why a policy's name contradicts its convention or seed (``initial``, or a name of the study's form),
    else None: the analysis groups by all three, so a contradiction would put responses in the wrong cell."""
    if name == "initial" and convention != "initial":
        return (f"policy 'initial' has training_convention={convention!r}; the initial policy has training_convention "
                "initial and no train_seed")
    named = PolicyName.parse(name)  # the study's own names: checked; a user's other names are theirs
    if named is not None and named.is_study_name and (named.convention != convention or seed is None
                                                       or named.seed != int(seed)):
        return (f"policy {name!r} names convention {named.convention!r} and seed {named.seed}, but its "
                f"training_convention={convention!r} and train_seed={seed!r}")
    return None


def code_points(text: str) -> str:
    """``U+0030 U+0020``: ids that look alike, shown apart."""
    return " ".join(f"U+{ord(c):04X}" for c in text[:40]) + (" ..." if len(text) > 40 else "")


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def check_record(rec: object, where: Source, prompt_names: bool = False) -> dict[str, Any]:
    """Check one parsed record against the contract and return it with ``item_id`` as a string.
    ``prompt_names``: ``request`` may also name another prompt (see ``PROMPT_NAME``), for re-scoring."""
    if not isinstance(rec, dict):
        raise ResponseFileError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
    for name, types in FIELDS.items():
        if name not in rec:
            raise ResponseFileError(f"{where}: missing field '{name}'")
        value = rec[name]
        # bool is an int subclass in Python; a JSON true is never a valid count or seed.
        if isinstance(value, bool) or not isinstance(value, types):
            raise ResponseFileError(
                f"{where}: field '{name}' must be {_type_name(types)}, got {type(value).__name__} {value!r:.60}"
            )
        if isinstance(value, int) and not -(2**63) <= value < 2**63:  # a scores table stores 64-bit integers
            raise ResponseFileError(f"{where}: field '{name}' is {str(value)[:30]}{'...' if len(str(value)) > 30 else ''}"
                                    ", beyond a 64-bit integer")
    if rec["request"] not in REQUESTS and not (prompt_names and is_prompt_name(rec["request"])):
        hint = ("" if prompt_names or not is_prompt_name(rec["request"]) else
                " (another prompt's outputs can be re-scored with crossed-rescore, not scored crossed)")
        wanted = "one of the requests or a prompt name [a-z0-9_.:-]" if prompt_names else f"one of {REQUESTS}"
        raise ResponseFileError(f"{where}: field 'request' is {rec['request']!r}; expected {wanted}{hint}")
    if rec["template"] not in TEMPLATES:
        raise ResponseFileError(f"{where}: field 'template' is {rec['template']!r}; expected one of {TEMPLATES}")
    if rec["finish_reason"] not in FINISH_REASONS:
        raise ResponseFileError(f"{where}: field 'finish_reason' is {rec['finish_reason']!r}; expected stop, length or unknown")
    conv = rec["training_convention"]
    if conv != "initial" and conv not in TRAINED:
        raise ResponseFileError(
            f"{where}: field 'training_convention' is {conv!r}; expected 'initial' or one of {TRAINED}"
        )
    if (conv == "initial") != (rec["train_seed"] is None):
        raise ResponseFileError(f"{where}: field 'train_seed' must be null exactly when training_convention is 'initial'")
    if rec["sample_idx"] < 0:
        raise ResponseFileError(f"{where}: field 'sample_idx' must be >= 0")
    for name, rng in NUMBER_RANGES.items():
        value = rec.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and not rng.admits(value):
            note = f" ({rng.why})" if rng.why else ""
            raise ResponseFileError(f"{where}: field '{name}' is {value}; expected a number in {rng.text()}{note}")
    iid = str(rec["item_id"])
    if iid != iid.strip() or not iid:  # "0" and "0 " would be two items that look like one
        raise ResponseFileError(f"{where}: field 'item_id' {iid!r} ({code_points(iid)}) is empty or starts or ends "
                                "with white space")
    why = name_disagreement(rec["policy"], conv, rec["train_seed"])
    if why is not None:
        raise ResponseFileError(f"{where}: {why}")
    for name, types in {**OPTIONAL, **PARTS}.items():  # fields a record may carry; when present, of the right kind
        value = rec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            raise ResponseFileError(f"{where}: field '{name}' must be {_type_name(types)} or null, got "
                                    f"{type(value).__name__} {value!r:.60}")
    return {**rec, "item_id": str(rec["item_id"])}


@dataclass
class ResponseSet:
    """Validated records from one or more files, with where each came from."""

    records: list[dict[str, Any]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    prompt_differences: dict[frozenset, str] = field(default_factory=dict)  # policy pair -> first line


def iter_file(path: Path, prompt_names: bool = False) -> Iterator[tuple[dict[str, Any], Source]]:
    for rec, where in json_lines(path, ResponseFileError):
        yield check_record(rec, where, prompt_names), where


def find_response_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories (searched recursively for ``*.jsonl``) into a sorted file list.

    A crossed-eval run directory (one with ``responses/``) contributes its response files only, not its
    frozen item files; interrupted cells' scratch files (``.partial/``) are never read."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and EvalLayout(p).responses.is_dir():
            files += sorted(q for q in EvalLayout(p).responses.glob("*.jsonl") if q.is_file())
        elif p.is_dir():  # hidden folders (.partial/: an interrupted cell's scratch) are never read
            files += sorted(q for q in p.rglob("*.jsonl")
                            if q.is_file() and not any(part.startswith(".") for part in q.relative_to(p).parts))
        elif p.is_file() and input_problem(p) is None:
            files.append(p)
        else:
            raise ResponseFileError(f"{p}: {input_problem(p, folder_ok=True) or 'no such file or folder'}")
    if not files:
        raise ResponseFileError(f"no response files (*.jsonl) under {', '.join(map(str, paths))}")
    return sorted(set(files))


def read_responses(paths: Iterable[str | Path], different_prompts: str = "refuse",
                   prompt_names: bool = False) -> ResponseSet:
    """Read and validate response files as one collection (all checks above). ``different_prompts="record"``
    records policies that saw different prompts for the same item (models with their own chat templates,
    paper 000 App. A) in ``prompt_differences`` instead of refusing them; ``prompt_names`` admits prompts
    other than the four requests (re-scoring harness outputs)."""
    out = ResponseSet(files=find_response_files(paths))
    seen: dict[tuple, Source] = {}
    for path in out.files:
        for rec, where in iter_file(path, prompt_names):
            # the same response under another decoding setting is another response (a sweep)
            key = tuple(rec[k] for k in KEY) + tuple(rec.get(k) for k in OPTIONAL)
            if key in seen:
                names = ", ".join(f"{k}={v!r}" for k, v in zip((*KEY, *OPTIONAL), key) if v is not None)
                raise ResponseFileError(f"{where}: duplicate key ({names}); first seen at {seen[key]}")
            seen[key] = where
            out.records.append(rec)
            out.sources.append(where)
    check_collection(out, different_prompts)
    return out


def check_collection(rs: ResponseSet, different_prompts: str = "refuse") -> None:
    """Cross-record checks: equal item sets and samples across compared cells; shared prompt hashes."""
    cells: dict[tuple, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    first_line: dict[tuple, Source] = {}
    prompts: dict[tuple, tuple[str, str, Source]] = {}
    seen_by: dict[tuple, dict[str, str]] = defaultdict(dict)  # item prompt -> policy -> its prompt hash
    references: dict[tuple[str, str], tuple[str, Source]] = {}  # (task, item) -> its reference, where first seen
    ids: dict[tuple[str, str], tuple[str, Source]] = {}  # (task, NFC id) -> the id as written, where first seen
    for rec, where in zip(rs.records, rs.sources):
        item = (rec["task"], rec["item_id"])
        ref, first = references.setdefault(item, (rec["reference"], where))
        if ref != rec["reference"]:  # scored against two answers, an item would count twice, differently
            raise ResponseFileError(f"{where}: field 'reference' of item {rec['item_id']!r} is {rec['reference']!r:.60} "
                                    f"but {ref!r:.60} at {first}: one item has one reference")
        norm = (rec["task"], unicodedata.normalize("NFC", rec["item_id"]))
        raw, first = ids.setdefault(norm, (rec["item_id"], where))
        if raw != rec["item_id"]:
            raise ResponseFileError(f"{where}: item id {rec['item_id']!r} ({code_points(rec['item_id'])}) and "
                                    f"{raw!r} ({code_points(raw)}) at {first} are the same text in another Unicode "
                                    "form; give one item one id")
        cell = tuple(rec[k] for k in CELL)
        cells[cell][rec["item_id"]].add(rec["sample_idx"])
        first_line.setdefault(cell, where)
        pkey = (rec["task"], rec["item_id"], rec["request"], rec["template"])
        sha = rec["prompt_sha256"]
        if different_prompts == "record":  # every pair of policies that saw different prompts for one item
            for pol, other_sha in seen_by[pkey].items():
                if other_sha != sha:
                    rs.prompt_differences.setdefault(frozenset((pol, rec["policy"])), str(where))
            seen_by[pkey].setdefault(rec["policy"], sha)
        elif pkey in prompts and prompts[pkey][0] != sha:
            _sha, policy, other = prompts[pkey]
            raise ResponseFileError(
                f"{where}: field 'prompt_sha256' for item {rec['item_id']!r} under request {rec['request']!r}, "
                f"template {rec['template']!r} differs between policy {rec['policy']!r} and policy {policy!r} "
                f"({other}): the policies did not see the same prompt"
            )
        prompts.setdefault(pkey, (sha, rec["policy"], where))
    # Cells are compared within a task and template (across policies and requests).
    reference: dict[tuple, tuple] = {}
    for cell, items in cells.items():
        sample_sets = {frozenset(v) for v in items.values()}
        if len(sample_sets) > 1:
            raise ResponseFileError(
                f"{first_line[cell]}: cell (policy={cell[1]!r}, request={cell[2]!r}, template={cell[3]!r}) mixes "
                f"items with different sample indices: every item of a cell needs the same samples"
            )
        group = (cell[0], cell[3])
        if group not in reference:
            reference[group] = (cell, items)
            continue
        ref_cell, ref_items = reference[group]
        where = first_line[cell]
        missing = sorted(set(ref_items) - set(items))
        extra = sorted(set(items) - set(ref_items))
        if missing or extra:
            detail = f"lacks item {missing[0]!r}" if missing else f"has extra item {extra[0]!r}"
            raise ResponseFileError(
                f"{where}: cell (policy={cell[1]!r}, request={cell[2]!r}, template={cell[3]!r}) {detail} "
                f"compared with cell (policy={ref_cell[1]!r}, request={ref_cell[2]!r}) from {first_line[ref_cell]} "
                f"({len(items)} vs {len(ref_items)} items): compared cells must hold the same item set"
            )
        for item_id, samples in items.items():
            if samples != ref_items[item_id]:
                raise ResponseFileError(
                    f"{where}: cell (policy={cell[1]!r}, request={cell[2]!r}, template={cell[3]!r}) item {item_id!r} "
                    f"has samples {sorted(samples)[:5]} but cell (policy={ref_cell[1]!r}, request={ref_cell[2]!r}) "
                    f"has {sorted(ref_items[item_id])[:5]}: compared cells must hold the same samples per item"
                )


def write_responses(path: str | Path, records: Iterable[dict[str, Any]]) -> None:
    """Write records as JSON Lines with a stable key order (same records, same bytes)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(rec, ensure_ascii=False, sort_keys=False) + "\n" for rec in records)
