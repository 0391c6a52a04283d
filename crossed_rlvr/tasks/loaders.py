"""Item loaders for GSM8K and MATH-500: Hugging Face datasets when the network is there, or a local
JSON Lines / Parquet file (the form used here, where no hub download works).

GSM8K: the reference is the number after ``####`` with commas removed; the solution body drops the
``<<...>>`` calculator annotations (paper 001 §3, App. D.2.1). MATH-500: ``problem``, ``answer``
and ``solution``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossed_rlvr.files import json_lines
from crossed_rlvr.tasks.items import ItemFileError

_CALC = re.compile(r"<<[^<>]*>>")
_FINAL = re.compile(r"\n?####\s*(.+?)\s*$", re.DOTALL)


def gsm8k_item(row: dict[str, Any], index: int) -> dict[str, Any]:
    """One GSM8K row (``question``, ``answer``) as an item."""
    answer = str(row["answer"])
    m = _FINAL.search(answer)
    if m is None:
        raise ItemFileError(f"GSM8K row {index}: answer has no '####' line")
    reference = m.group(1).replace(",", "").strip()
    body = _CALC.sub("", answer[: m.start()]).strip()
    return {"item_id": str(row.get("item_id", index)), "question": str(row["question"]).strip(),
            "reference": reference, "solution": body, "task": "gsm8k"}


def last_box(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{}`` (MATH train rows carry their answer only there)."""
    from crossed_rlvr.rewards.text import box_spans

    spans = box_spans(text)
    return text[spans[-1][0]:spans[-1][1]].strip() if spans else None


def math500_item(row: dict[str, Any], index: int) -> dict[str, Any]:
    """One MATH row (``problem``, ``answer``; MATH's train split has no ``answer``: the solution's last box)."""
    solution = str(row.get("solution", "") or "").strip()
    answer = row.get("answer")
    if answer is None:
        answer = last_box(solution)
        if answer is None:
            raise ItemFileError(f"MATH row {index}: no 'answer' field and no \\boxed{{}} in its solution")
    return {"item_id": str(row.get("unique_id", row.get("item_id", index))), "question": str(row["problem"]).strip(),
            "reference": str(answer).strip(), "solution": solution,
            "subject": row.get("subject", row.get("type")), "level": row.get("level"), "task": "math500"}


def read_local(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise ItemFileError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    return [row for row, _where in json_lines(path, ItemFileError)]


def read_hub(name: str, config: str | None, split: str) -> list[dict[str, Any]]:
    try:
        from datasets import load_dataset
    except ImportError as err:  # pragma: no cover - datasets is a dependency
        raise ItemFileError("loading from the hub needs the 'datasets' package") from err
    try:
        return list(load_dataset(name, config, split=split))
    except Exception as err:  # noqa: BLE001 - the hub client raises many types when offline
        raise ItemFileError(
            f"could not load {name} ({split}) from the Hugging Face hub: {type(err).__name__}: {str(err)[:200]}; "
            "without network access, pass local JSON Lines or Parquet files as task.path= (test) and "
            "task.train_path= (train and dev)"
        ) from None


def _load(path: str | Path | None, hub: tuple[str, str | None, str], required: tuple[str, ...],
          convert: Callable[[dict[str, Any], int], dict[str, Any]]) -> list[dict[str, Any]]:
    rows = read_local(Path(path)) if path else read_hub(*hub)
    require_fields(rows, required, str(path or hub[0]))
    return [convert(row, i) for i, row in enumerate(rows)]


def require_fields(rows: list[dict[str, Any]], required: tuple[str, ...], where: str) -> None:
    """Refuse the first row that lacks a required field, naming the source and the row."""
    for i, row in enumerate(rows):
        for field in required:
            if field not in row:
                raise ItemFileError(f"{where}: row {i + 1} lacks field '{field}'")


def load_gsm8k(path: str | Path | None = None, split: str = "test", hub: tuple | None = None) -> list[dict[str, Any]]:
    return _load(path, hub or ("openai/gsm8k", "main", split), ("question", "answer"), gsm8k_item)


def load_math500(path: str | Path | None = None, split: str = "test", hub: tuple | None = None) -> list[dict[str, Any]]:
    return _load(path, hub or ("HuggingFaceH4/MATH-500", None, split), ("problem",), math500_item)
