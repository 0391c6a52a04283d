"""Figures a reader of the package's design asks for, counted from its source with the ``ast`` module alone (the
package is not imported, so it runs on any checkout, before or after a change, in about a second):

- parameters typed ``Any`` per subpackage (``*args``/``**kwargs: Any`` and the unannotated parameters apart;
  ``self``/``cls`` not counted);
- ``DictConfig`` (named, or made by ``OmegaConf.create/merge/structured``) and plain-dict conversions
  (``plain(...)``, ``OmegaConf.to_container(...)``) below the study, i.e. outside ``study/``, ``conf/`` and ``command.py`` (the
  study's own count given beside);
- call sites of the functions that parse a policy's name back into its parts (``PolicyName.parse``,
  ``policy_facts``, ...) outside ``names.py``, and regular expressions written on policy names there too;
- string literals that name a file (``"report.md"``, ``f"shard-{k}.parquet"``, ``"*.jsonl"``) outside
  ``layout.py``, docstrings and sentences excepted (other tools' names, e.g. Hugging Face's ``config.json``,
  counted and reported apart);
- functions over 60 lines (the house rule's soft limit; 80 is the hard one, tests/test_layout.py);
- the package's lines.

Usage: ``python scripts/code_metrics.py [SRC] [--list] [--json]`` (SRC: the package folder, ``crossed_rlvr`` by
default; ``--list`` prints every item counted; ``--json`` one JSON object instead of the text report).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = "(top)"  # the package's own modules, outside any subpackage
LONG = 60
# the study's door: configs are composed and checked there, so its DictConfig and plain() uses are expected
DOOR = ("study", "conf", "command.py")  # command.py: every command's Hydra entry, beside its configs
# the functions that read a policy's facts back out of its name (crossed_rlvr/names.py)
NAME_PARSERS = ("PolicyName.parse", "PairName.parse", "policy_facts", "policy_parts", "pair_of", "contrast_parts",
                "checkpoint_step")
# a regular expression on a policy name: a seed slot (``/s83``) or a checkpoint step (``@step10``, ``-step10``)
NAME_REGEX = re.compile(r"/s(?:\(|\\d|\[)|[@-]step")
REGEX_CALLS = {"compile", "match", "fullmatch", "search", "findall", "finditer", "sub", "split"}
EXTENSIONS = ("json", "jsonl", "parquet", "csv", "md", "png", "txt", "log", "sh", "yaml", "yml")
FILE_NAME = re.compile(rf"\S*\.(?:{'|'.join(EXTENSIONS)})")
BARE_SUFFIX = re.compile(rf"\*?(?:\.(?:{'|'.join(EXTENSIONS)}))+")  # '.json', '*.jsonl': a kind of file, no name
# names other tools give their files (Hugging Face, verl, lm-eval, EvalPlus): counted, and reported apart
OTHER_TOOLS_FILES = {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                     "generation_config.json", "latest_checkpointed_iteration.txt", "samples_*.jsonl", "gsm8k.yaml",
                     "_eval_results.json"}


@dataclass
class Metrics:
    """Every count, with the items behind it (``where`` is ``path:line``)."""

    files: int = 0
    lines: int = 0
    code_lines: int = 0
    any_params: Counter[str] = field(default_factory=Counter)  # subpackage -> count
    any_names: Counter[str] = field(default_factory=Counter)  # parameter name -> count
    any_variadic: int = 0  # ``*args: Any`` / ``**kwargs: Any``: the idiom for passing arguments through
    unannotated: Counter[str] = field(default_factory=Counter)
    config_uses: dict[str, Counter[str]] = field(default_factory=dict)  # subpackage -> {DictConfig, plain, ...}
    items: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, item: str) -> None:
        self.items.setdefault(kind, []).append(item)


def subpackage(rel: Path) -> str:
    return rel.parts[0] if len(rel.parts) > 1 else rel.name if rel.name in DOOR else TOP


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name or an attribute chain; empty for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def is_any(annotation: ast.AST | None) -> bool:
    """``Any``, ``typing.Any``, ``"Any"``, or a union or Optional that holds one (``Any | None``)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.replace(" ", "") in ("Any", "Any|None", "Optional[Any]", "typing.Any")
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return is_any(annotation.left) or is_any(annotation.right)
    if isinstance(annotation, ast.Subscript) and dotted(annotation.value).endswith("Optional"):
        return is_any(annotation.slice)
    return dotted(annotation) in ("Any", "typing.Any", "t.Any")


def functions(tree: ast.AST) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every function and method, with whether it is a method whose first parameter is its instance or class."""
    bound = {id(item) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for item in node.body
             if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
             and not any(dotted(d) == "staticmethod" for d in item.decorator_list)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, id(node) in bound


def count_parameters(tree: ast.AST, part: str, where: str, m: Metrics) -> None:
    for fn, bound in functions(tree):
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        if bound and (a.posonlyargs or a.args):
            params = params[1:]  # self / cls
        variadic = [p for p in (a.vararg, a.kwarg) if p is not None]
        m.any_variadic += sum(is_any(p.annotation) for p in variadic)
        for p in [*params, *variadic]:
            if p in variadic and is_any(p.annotation):
                continue
            if is_any(p.annotation):
                m.any_params[part] += 1
                m.any_names[p.arg] += 1
                m.add("any", f"{where}:{fn.lineno} {fn.name}({p.arg})")
            elif p.annotation is None:
                m.unannotated[part] += 1
                m.add("unannotated", f"{where}:{fn.lineno} {fn.name}({p.arg})")
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > LONG:
            m.add("long", f"{where}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)")


def count_config_uses(tree: ast.AST, part: str, where: str, m: Metrics) -> None:
    uses = m.config_uses.setdefault(part, Counter())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "DictConfig") or (
                isinstance(node, ast.Attribute) and node.attr == "DictConfig"):
            kind = "DictConfig"
        elif isinstance(node, ast.Call) and dotted(node.func).split(".")[-1] == "plain":
            kind = "plain()"
        elif isinstance(node, ast.Call) and dotted(node.func).endswith("OmegaConf.to_container"):
            kind = "OmegaConf.to_container()"
        elif isinstance(node, ast.Call) and dotted(node.func).split(".")[-2:] in (
                ["OmegaConf", "create"], ["OmegaConf", "merge"], ["OmegaConf", "structured"]):
            kind = "OmegaConf.create/merge/structured()"
        else:
            continue
        uses[kind] += 1
        if part not in DOOR:
            m.add("config", f"{where}:{node.lineno} {kind}")


def count_name_parsers(tree: ast.AST, rel: Path, where: str, m: Metrics) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = dotted(node.func)
        parser = next((p for p in NAME_PARSERS if name == p or name.endswith(f".{p}")), None)
        if parser is not None and rel.as_posix() != "names.py":
            m.add("parsers", f"{where}:{node.lineno} {parser}")
        elif name.split(".")[-1] in REGEX_CALLS and name.split(".")[0] == "re" and node.args and (
                rel.as_posix() != "names.py"):
            pattern = node.args[0]
            if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) and NAME_REGEX.search(pattern.value):
                m.add("name_regexes", f"{where}:{node.lineno} {pattern.value!r}")


def docstring_ids(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def count_file_literals(tree: ast.AST, rel: Path, where: str, m: Metrics) -> None:
    """A whole literal, a glob or an f-string read whole (``f"shard-{k}.parquet"`` as ``shard-{}.parquet``) that
    ends in a file extension; an extension alone (``".json"``), a docstring or a sentence names no file."""
    if rel.as_posix() == "layout.py":
        return
    skip = docstring_ids(tree) | {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                                  for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if FILE_NAME.fullmatch(text) and not BARE_SUFFIX.fullmatch(text):
            m.add("file_literals", f"{where}:{node.lineno} {text!r}")
            if text in OTHER_TOOLS_FILES:
                m.add("other_tools_file_literals", f"{where}:{node.lineno} {text!r}")


def measure(src: Path) -> Metrics:
    m = Metrics()
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        where, part = f"{src.name}/{rel.as_posix()}", subpackage(rel)
        m.files += 1
        m.lines += len(text.splitlines())
        m.code_lines += sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
        count_parameters(tree, part, where, m)
        count_config_uses(tree, part, where, m)
        count_name_parsers(tree, rel, where, m)
        count_file_literals(tree, rel, where, m)
    return m


def below_door(m: Metrics) -> Counter[str]:
    total: Counter[str] = Counter()
    for part, uses in m.config_uses.items():
        if part not in DOOR:
            total.update(uses)
    return total


def summary(m: Metrics) -> dict:
    """The figures as one plain object (``--json``), the items' counts per kind included."""
    door: Counter[str] = Counter()
    for part in DOOR:
        door.update(m.config_uses.get(part, Counter()))
    return {
        "files": m.files, "lines": m.lines, "code_lines": m.code_lines,
        "any_params": sum(m.any_params.values()), "any_params_by_subpackage": dict(m.any_params.most_common()),
        "any_params_by_name": dict(m.any_names.most_common(5)),
        "any_variadic": m.any_variadic,
        "unannotated_params": sum(m.unannotated.values()),
        "unannotated_by_subpackage": dict(m.unannotated.most_common()),
        "config_below_study": dict(below_door(m)), "config_in_study_and_conf": dict(door),
        "name_parser_calls": len(m.items.get("parsers", [])),
        "name_parser_calls_by_function": dict(Counter(i.split()[-1] for i in m.items.get("parsers", [])).most_common()),
        "name_regexes": len(m.items.get("name_regexes", [])),
        "file_literals_outside_layout": len(m.items.get("file_literals", [])),
        "of_them_other_tools_names": len(m.items.get("other_tools_file_literals", [])),
        "functions_over_60_lines": len(m.items.get("long", [])),
    }


def report(s: dict, src: Path) -> str:
    def pairs(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"

    return "\n".join([
        f"package {src.name}: {s['files']} files, {s['lines']} lines ({s['code_lines']} neither blank nor comment)",
        f"parameters typed Any: {s['any_params']} ({pairs(s['any_params_by_subpackage'])}); "
        f"most common names: {pairs(s['any_params_by_name'])}; *args/**kwargs typed Any besides: {s['any_variadic']}",
        f"parameters unannotated (self/cls not counted): {s['unannotated_params']} "
        f"({pairs(s['unannotated_by_subpackage'])})",
        f"DictConfig, OmegaConf.create/merge/structured, plain(), OmegaConf.to_container below the study (outside "
        f"{', '.join(DOOR)}): "
        f"{sum(s['config_below_study'].values())} ({pairs(s['config_below_study'])}); "
        f"in {', '.join(DOOR)}: {sum(s['config_in_study_and_conf'].values())} ({pairs(s['config_in_study_and_conf'])})",
        f"name parsers called outside names.py: {s['name_parser_calls']} "
        f"({pairs(s['name_parser_calls_by_function'])}); regular expressions on policy names outside names.py: "
        f"{s['name_regexes']}",
        f"file-name literals outside layout.py: {s['file_literals_outside_layout']} "
        f"(of them other tools' names: {s['of_them_other_tools_names']})",
        f"functions over {LONG} lines: {s['functions_over_60_lines']}",
    ])


def _by_place(item: str) -> tuple[str, int]:
    path, line = item.split()[0].rsplit(":", 1)
    return path, int(line)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="?", type=Path, default=ROOT / "crossed_rlvr", help="the package's folder")
    ap.add_argument("--list", action="store_true", help="print every item counted, by kind")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the text report")
    args = ap.parse_args(argv)
    m = measure(args.src)
    s = summary(m)
    print(json.dumps(s, indent=1) if args.json else report(s, args.src))
    if args.list:
        for kind, items in m.items.items():
            print(f"\n## {kind} ({len(items)})", *sorted(items, key=_by_place), sep="\n")


if __name__ == "__main__":
    main()
