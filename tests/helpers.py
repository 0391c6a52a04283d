"""Helpers that several test modules share (plain values and functions; shared fixtures live in conftest.py
and gpu_fixtures.py), so that no test module imports another."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossed_rlvr.folder_lock import HELD_ENV
from crossed_rlvr.policies.tiny import TinyConfig

# the smallest tiny model that still generates: built in well under a second
SMALL = TinyConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=1, max_position_embeddings=512, seed=0)


def rec(item: int = 0, policy: str = "initial", request: str = "hash", template: str = "original", sample: int = 0,
        **kw: Any) -> dict[str, Any]:
    """One valid response record of the response-file contract; ``kw`` replaces any field."""
    base = {
        "item_id": str(item), "task": "gsm8k", "policy": policy,
        "training_convention": "initial" if policy == "initial" else policy.split("-")[1].split("/")[0],
        "train_seed": None if policy == "initial" else 83, "request": request, "template": template,
        "sample_idx": sample, "gen_seed": 1000 + item, "prompt_sha256": f"{item:064x}"[-64:] + "",
        "response": "#### 18", "finish_reason": "stop", "prompt_tokens": 10, "response_tokens": 3, "reference": "18",
    }
    base["prompt_sha256"] = f"{request}-{template}-{item}".ljust(64, "0")
    base.update(kw)
    return base


def study_cfg(run_dir: Path | str, *overrides: str) -> Any:
    """The composed ``crossed_study`` config with ``run_dir`` and overrides."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_study", overrides=[f"run_dir={run_dir}", *overrides])


def cfg_for(*args: str) -> Any:
    """The composed ``crossed_eval`` config with these overrides."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        return compose(config_name="crossed_eval", overrides=list(args))


def overrides(run_dir: Path | str, tiny: Path | str, n_items: int = 6, extra: tuple | list = ()) -> list[str]:
    """A small crossed evaluation of a tiny model: 6 items, 12 new tokens, two wordings."""
    return [f"run_dir={run_dir}", f"model.path={tiny}", f"task.n_items={n_items}", "task.n_test=30", "task.n_dev=3",
            "eval.max_new_tokens=12", "eval.context_limit=512", "eval.batch_size=4", "tracking=off",
            "templates=[original,para_a]", "template_subset=3", *extra]


def scores_table(tmp: Path, change: Callable[[Any], Any] | None = None) -> Path:
    """A small valid crossed scores table, then ``change`` applied (the bad part)."""
    import pandas as pd

    from tests.analysis_fixtures import cell

    rows = [r for policy, seed in (("initial", None), ("grpo-hash/s1", 1), ("grpo-boxed/s1", 1))
            for request in ("hash", "boxed") for r in cell(policy, request, [1, 0, 1, 1], [1, 0, 0, 1], seed=seed)]
    df = pd.DataFrame(rows)
    df["train_seed"] = df["train_seed"].astype("Int64")
    if change is not None:
        df = change(df)
    path = tmp / "scores.parquet"
    df.to_parquet(path, index=False)
    return path


def arm_files(run: Path, name: str = "hash/s83") -> tuple[str, str, list[str]]:
    """A prepared verl arm's single-node script, SLURM script and override lines."""
    arm = run / "train" / name
    return ((arm / "launch_single_node.sh").read_text(), (arm / "launch_slurm_ray.sbatch").read_text(),
            (arm / "verl_overrides.txt").read_text().split("\n")[:-1])


# A one-task EvalPlus dataset (two inputs a part) for the sandbox's tests: a right answer is cheap to write.
ADD = {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "entry_point": "add",
       "canonical_solution": "    return a + b\n", "base_input": [[1, 2], [3, 4]], "plus_input": [[5, 6], [-1, 1]],
       "atol": 0}


def code_metrics() -> Any:
    """scripts/code_metrics.py as a module (scripts/ is no package): the package's figures and its AST helpers."""
    import sys

    scripts = str(Path(__file__).resolve().parents[1] / "scripts")
    sys.path.insert(0, scripts)
    try:
        import code_metrics as module
    finally:
        sys.path.remove(scripts)
    return module


def site_with(folder: Path, code: str) -> Path:
    """A folder holding ``code`` as ``sitecustomize.py``: put first on a command's path (``command_env``), it runs
    first in the command's interpreter and in every Python process the command starts (a fault injected where the
    machine would raise it)."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(code)
    return site


def command_env(site: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a command a test starts: no folder inherited as held (crossed_rlvr/folder_lock.py: the
    command would count as the test's own writer, not a second one), ``site`` first on its path, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != HELD_ENV}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


class FakeVLLMEngine:
    """vLLM's ``LLMEngine`` as ``VLLMBackend.stream`` drives it (add_request, step, abort_request), for tests on a
    machine without the engine: every queued request finishes at the next step with the text ``#### 3``, the k-th
    with ``reasons[k]`` as its finish reason (``stop`` past the list's end). Its KV cache holds ``cache_blocks``
    blocks of 16 tokens (None: unknown, as in an engine core of another process); ``most`` counts the requests it
    held at once."""

    def __init__(self, reasons: tuple[str, ...] = (), cache_blocks: int | None = None):
        from types import SimpleNamespace

        self.queued: list[str] = []
        self.reasons = reasons
        self.vllm_config = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks=cache_blocks, block_size=16))
        self.most = 0

    def add_request(self, request_id: str, prompt: Any, params: Any) -> str:
        self.queued.append(request_id)
        self.most = max(self.most, len(self.queued))
        return request_id

    def has_unfinished_requests(self) -> bool:
        return bool(self.queued)

    def step(self) -> list[Any]:
        from types import SimpleNamespace

        done, self.queued = self.queued, []
        return [SimpleNamespace(request_id=r, finished=True, outputs=[SimpleNamespace(
            text="#### 3", finish_reason=self.reasons[k] if k < len(self.reasons) else "stop", token_ids=[5, 6])])
            for k, r in enumerate(done)]

    def abort_request(self, request_ids: list[str]) -> None:
        self.queued = []


# The settings hash of small_eval()'s one cell as the code before eval.device planned it (its default eval settings,
# float32 on the CPU): a cell finished then must be finished now, not refused or generated again; every evaluation
# option added since, left unset, must keep it.
BEFORE_DEVICE = "c2999b4e848bd12c8694e086d1df4b7aeba08f9a78cde22960a7a634e74d8713"


def small_eval(run_dir: Path, *extra: str) -> Any:
    """One cell (a hub-named policy that is never loaded, two items, the hash request), typed as crossed-eval's door
    types it (an ``EvalCommandConf``)."""
    from crossed_rlvr.conf.schema import EvalCommandConf, conf_of

    return conf_of(EvalCommandConf, cfg_for(
        f"run_dir={run_dir}", "task.n_items=2", "task.n_test=30", "task.n_dev=3", "tracking=off",
        "templates=[original]", "requests=[hash]",
        "policies=[{name: initial, path: org/tiny-policy, training_convention: initial, train_seed: null}]", *extra))


def session_of(sid: int) -> list[str]:
    """The names of the live processes in session ``sid`` (a command started in a session of its own, its children
    and theirs)."""
    names = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        state, _ppid, _group, session = stat[stat.rindex(")") + 2 :].split()[:4]
        if int(session) == sid and state != "Z":
            names.append(stat[stat.index("(") + 1 : stat.rindex(")")])
    return names
