"""Multiple-choice and free-form benchmarks of paper 000: MMLU, MMLU-Pro, ARC-Challenge, AQuA-RAT,
SAT-Math and BBH, from the Hugging Face hub or a local JSON Lines / Parquet file of the same rows.

Every item keeps its own option letters (A-D, up to A-J for MMLU-Pro's ten options): ``options`` is
the list of option texts, ``n_options`` its length, ``reference`` the key's letter, and ``question``
the stem followed by the lettered options (one per line, "A. text"). BBH items whose target is an
option "(X)" are multiple choice with the options listed in their input; the others are free form.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossed_rlvr.tasks.items import ItemFileError
from crossed_rlvr.tasks.loaders import read_hub, read_local

LETTERS = "ABCDEFGHIJ"

# hub source of each benchmark: (dataset, config, split)
HUB = {"mmlu": ("cais/mmlu", "all", "test"), "mmlu_pro": ("TIGER-Lab/MMLU-Pro", None, "test"),
       "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge", "test"), "aqua_rat": ("deepmind/aqua_rat", "raw", "test"),
       "sat_math": ("hails/agieval-sat-math", None, "test"), "bbh": ("lukaemon/bbh", "date_understanding", "test")}


def mc_item(index: int, stem: str, options: list[str], key: int, benchmark: str, item_id: object = None) -> dict[str, Any]:
    if not 2 <= len(options) <= 10:
        raise ItemFileError(f"{benchmark} row {index}: {len(options)} options; expected 2 to 10 (A to J)")
    if not 0 <= key < len(options):
        raise ItemFileError(f"{benchmark} row {index}: the key is not one of its {len(options)} options")
    lettered = "\n".join(f"{LETTERS[k]}. {str(o).strip()}" for k, o in enumerate(options))
    return {"item_id": str(index if item_id is None else item_id), "question": f"{stem.strip()}\n{lettered}",
            "options": [str(o).strip() for o in options], "n_options": len(options), "reference": LETTERS[key],
            "kind": "mc", "task": benchmark}


def _letter_index(value: object, benchmark: str, index: int) -> int:
    text = str(value).strip().strip("()")
    if text.isdigit():
        return int(text)
    if len(text) == 1 and text.upper() in LETTERS:
        return LETTERS.index(text.upper())
    raise ItemFileError(f"{benchmark} row {index}: answer {value!r} is neither a letter nor an index")


def mmlu(row: dict, i: int) -> dict[str, Any]:
    return mc_item(i, row["question"], list(row["choices"]), _letter_index(row["answer"], "mmlu", i), "mmlu")


def mmlu_pro(row: dict, i: int) -> dict[str, Any]:
    key = row.get("answer_index", row.get("answer"))
    return mc_item(i, row["question"], list(row["options"]), _letter_index(key, "mmlu_pro", i), "mmlu_pro",
                   row.get("question_id"))


def arc_challenge(row: dict, i: int) -> dict[str, Any]:
    labels, texts = list(row["choices"]["label"]), list(row["choices"]["text"])
    key = labels.index(str(row["answerKey"])) if str(row["answerKey"]) in labels else _letter_index(
        row["answerKey"], "arc_challenge", i)
    return mc_item(i, row["question"], texts, key, "arc_challenge", row.get("id"))


def aqua_rat(row: dict, i: int) -> dict[str, Any]:
    options = [re.sub(r"^\s*\(?[A-E]\)\s*", "", o) for o in row["options"]]  # "A)21" -> "21"
    return mc_item(i, row["question"], options, _letter_index(row["correct"], "aqua_rat", i), "aqua_rat")


def sat_math(row: dict, i: int) -> dict[str, Any]:
    options = [re.sub(r"^\s*\([A-E]\)\s*", "", o) for o in row["choices"]]  # "(A)5" -> "5"
    gold = row["gold"][0] if isinstance(row["gold"], list | tuple) else row["gold"]
    stem = re.sub(r"\s*Answer Choices:.*$", "", str(row["query"]), flags=re.DOTALL).removeprefix("Q: ")
    return mc_item(i, stem, options, _letter_index(gold, "sat_math", i), "sat_math")


def bbh(row: dict, i: int) -> dict[str, Any]:
    """BIG-Bench Hard as paper 000 scores it: free form, the target as written ("(A)", "False", "12"), the
    options (where a task has them) left in the question as the task states them."""
    return {"item_id": str(i), "question": str(row["input"]).strip(), "reference": str(row["target"]).strip(),
            "kind": "free", "task": "bbh"}


LOADERS: dict[str, Callable[[dict, int], dict[str, Any]]] = {
    "mmlu": mmlu, "mmlu_pro": mmlu_pro, "arc_challenge": arc_challenge, "aqua_rat": aqua_rat, "sat_math": sat_math,
    "bbh": bbh}


def load_benchmark(name: str, path: str | Path | None = None, config: str | None = None) -> list[dict[str, Any]]:
    """Items of a benchmark from a local file of hub-format rows, or from the hub (``config`` overrides
    the hub config, e.g. a BBH task)."""
    if name not in LOADERS:
        raise ItemFileError(f"benchmark {name!r} is unknown; expected one of {', '.join(LOADERS)}")
    if path:
        rows, where = read_local(Path(path)), str(path)
    else:
        hub, default, split = HUB[name]
        rows, where = read_hub(hub, config or default, split), hub
    items = []
    for i, row in enumerate(rows):
        try:
            items.append(LOADERS[name](row, i))
        except KeyError as err:
            raise ItemFileError(f"{where}: row {i + 1} has no field {err} ({name} format expected)") from None
    return items
