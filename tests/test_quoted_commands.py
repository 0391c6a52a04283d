"""Every command quoted in the README, CONTRIBUTING.md, every page under docs/ and examples/ (its README, and the
commands in the examples' docstrings and comments) is exercised here, so a renamed flag, a subcommand that never
existed, a missing required option or a Hydra key that moved fails in the suite, not in a reader's shell.

Each quoted command is exercised in one of four ways, chosen by ``how``:

- **run as quoted**: a command that takes seconds runs as a subprocess from a temporary working folder, on data the
  test makes there (``SCENARIOS``: the commands of one guide's workflow in the order the guide gives them, with the
  outputs each must write); exit 0 and its files are checked. The TRL example runs in tests/test_public_api.py.
- **composed**: a Hydra command (crossed-study/-train/-eval/-sft/-audit, also under torchrun or ``make study``, and
  verl's trainer on the example's config) composes with its overrides and passes the range and relation checks
  that run before any stage; one quoted command of each Hydra executable also runs for real with ``--cfg job``.
- **parsed**: a command that needs a GPU, the network or minutes has its arguments parsed by the command itself,
  in this process: ``argparse``'s parse is wrapped so that, once the real parse succeeds, a private exception stops
  the command (a parse error, exit 2, fails the test); ``make`` targets are parsed by ``make -n``, shell scripts by
  their own argument loop (``--help`` appended) or the Python module they hand their arguments to.
- **--help**: a bare name in prose (``crossed-score``, ``crossed-rescore code``) answers ``--help`` (a shell script
  without one is checked by ``bash -n``); any flag the mention names must be in that help.

Placeholders (``<arm>``, ``SAMPLES``, ``$DATASET``, ``...``, ``[--optional ...]``) are substituted from the small
tables below; a new placeholder fails ``test_every_placeholder_has_a_value`` until it has one.
``test_counts`` prints how many quoted commands each way covers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.helpers import command_env

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md")),
         ROOT / "examples" / "README.md"]
EXAMPLE_SOURCES = sorted(p for p in (ROOT / "examples").iterdir() if p.suffix in (".py", ".yaml"))
BIN = Path(sys.executable).parent
PRESETS = {p.stem for p in (ROOT / "crossed_rlvr" / "conf" / "experiment").glob("*.yaml")}
ENTRY = {  # console scripts (pyproject's [project.scripts]) -> the module whose main() they call
    "crossed-rlvr": "crossed_rlvr.cli", "crossed-score": "crossed_rlvr.eval.score.scoring",
    "crossed-analyze": "crossed_rlvr.analysis.cli", "crossed-import": "crossed_rlvr.eval.ingest.cli",
    "crossed-eval": "crossed_rlvr.eval.generate.cli", "crossed-sft": "crossed_rlvr.sft.cli",
    "crossed-train": "crossed_rlvr.train.cli", "crossed-match": "crossed_rlvr.train.matched",
    "crossed-study": "crossed_rlvr.study.cli", "crossed-calibrate": "crossed_rlvr.calibration.cli",
    "crossed-rescore": "crossed_rlvr.rescore.cli", "crossed-audit": "crossed_rlvr.study.audit",
    "crossed-view": "crossed_rlvr.view.cli",
}
# the programs whose console script ends the process once main() has succeeded (interrupt.end_process)
ENDS_AT_ONCE = {"crossed-eval": "entry"}
HYDRA = {"crossed-study": "crossed_study", "crossed-train": "crossed_train", "crossed-eval": "crossed_eval",
         "crossed-sft": "crossed_sft", "crossed-audit": "crossed_audit"}
LAUNCHERS = ("torchrun", "-m torch.distributed.run")  # their own options, then -m MODULE and its arguments
VERL_TRAINER = "-m verl.trainer.main_ppo"  # Hydra, on the example's config (examples/verl_reward.yaml)

# Placeholders in quoted commands and the value each takes here (a path the scenario makes, or any valid value).
PLACEHOLDERS = {"<name>": "tiny", "<task>": "gsm8k", "<dir>": "runs/real", "<arm>": "arm", "<step>": "step",
                "<trainer.validation_data_dir>": "val"}


# ---------------------------------------------------------------------------------------------- the extractor

@dataclass(frozen=True)
class Command:
    """One quoted command: where it is, its text (comment dropped, continuations joined) and its words (after the
    page's shell variables, env prefixes, ``.venv/bin/`` and ``taskset`` are dropped, optional groups resolved)."""

    where: str
    text: str
    words: tuple[str, ...]
    inline: bool

    @property
    def program(self) -> str:
        return split_program(list(self.words))[0]

    @property
    def args(self) -> list[str]:
        return split_program(list(self.words))[1]

    @property
    def launcher(self) -> list[str]:
        return split_program(list(self.words))[2]


def split_program(words: list[str]) -> tuple[str, list[str], list[str]]:
    """(program, its arguments, a launcher's own options): ``crossed-score``, ``-m crossed_rlvr.x``,
    ``scripts/x.py``, ``examples/x.py``, ``-c``, ``make``, ``lm_eval``; torchrun's ``-m MODULE`` is the program."""
    head, rest = words[0], words[1:]
    if head in ("python", "python3"):
        if rest[0] == "-m":
            head, rest = f"-m {rest[1]}", rest[2:]
        elif rest[0] == "-c":
            head, rest = "-c", rest[1:]
        else:
            head, rest = script_path(rest[0]), rest[1:]
    elif head == "bash":
        head, rest = rest[0], rest[1:]
    if head in LAUNCHERS and "-m" in rest:
        cut = rest.index("-m")
        return f"-m {rest[cut + 1]}", rest[cut + 2:], rest[:cut]
    return head, rest, []


def script_path(name: str) -> str:
    """A quoted script by its repository path (the examples are run from a copy in the user's own folder)."""
    return f"examples/{name}" if (ROOT / "examples" / name).is_file() and "/" not in name else name


def is_project_command(words: list[str]) -> bool:
    """A command of this project (or of a tool it drives: torchrun, lm_eval, verl), as opposed to pip, cp, sbatch."""
    if not words:
        return False
    head = words[0]
    if head in ENTRY or head in ("make", "lm_eval", "torchrun") or words[:2] == ["mkdir", "-p"]:
        return True
    if head in ("python", "python3"):
        if len(words) < 2:
            return False
        if words[1] == "-m":
            return len(words) > 2 and words[2].split(".")[0] in ("crossed_rlvr", "verl", "torch")
        return words[1] == "-c" or words[1].endswith(".py")
    if head == "bash":
        head = words[1] if len(words) > 1 else ""
    return head.startswith("scripts/") and head.endswith((".py", ".sh"))


def drop_comment(line: str) -> str:
    """The line up to a shell comment: a ``#`` that starts a word outside quotes."""
    quote = ""
    for k, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


def shell_words(text: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ``&&``, ``||``, ``;``, ``|``), each as its words (a redirection
    ``> FILE`` stays a word: ``<arm>`` is a placeholder, not one)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lex.whitespace_split, lex.commenters = True, ""
    out: list[list[str]] = [[]]
    for word in lex:
        if word in ("&&", "||", ";", "|", "&"):
            out.append([])
        else:
            out[-1].append(word)
    return [w for w in out if w]


def optional_groups(words: list[str]) -> list[str]:
    """``[--items FILE]`` is kept without its brackets, ``[--pair B=R ...]`` (a repeat) is dropped, and a bare
    ``...`` (more of the same) too; a Hydra list value (``seeds=[83]``) is no group."""
    out: list[str] = []
    group: list[str] | None = None
    for word in words:
        if group is None and word.startswith("[") and not re.match(r"^\[[\w.,\-]*\]$", word):
            group = []
        if group is not None:
            group.append(word)
            if word.endswith("]"):
                inner = " ".join(group)[1:-1].split()
                out += [] if "..." in inner else inner
                group = None
        elif word != "...":
            out.append(word)
    return out


def normalise(words: list[str]) -> list[str]:
    """Env assignments, ``.venv/bin/`` and a ``taskset -c CPUS`` wrapper dropped."""
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if words[:1] == ["taskset"]:
        words = words[3:]
    if words:
        words = [words[0].removeprefix(".venv/bin/"), *words[1:]]
    return words


ASSIGN_COMMAND = re.compile(r"^([A-Za-z_]\w*)=\$\((.*)\)\s*$")
ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S*)\s*$")


@dataclass
class Page:
    """What a reader's shell holds while following one page: its variables (``S=...``) and command substitutions
    (``DATASET=$(...)``, kept as ``$DATASET`` and resolved when the command runs)."""

    name: str
    variables: dict[str, str]


SUBSTITUTIONS: dict[str, str] = {}  # $NAME -> the command whose output it is (pages' DATASET=$(...) lines)


def commands_of_line(page: Page, line: str, where: str, inline: bool) -> list[Command]:
    line = drop_comment(line).strip()
    if match := ASSIGN_COMMAND.match(line):
        SUBSTITUTIONS[f"${match[1]}"] = match[2]
        line = match[2]
    elif (match := ASSIGN.match(line)) and not inline:
        page.variables[match[1]] = shlex.split(match[2])[0] if match[2] else ""
        return []
    for name, value in page.variables.items():
        line = re.sub(rf"\${{?{name}\b}}?", lambda _m, v=value: v, line)
    try:
        simple = shell_words(line)
    except ValueError:  # unbalanced quotes: prose, not a command
        return []
    found = []
    for given in simple:
        words = normalise(given)
        if is_project_command(words):
            words = optional_groups(words)
            found.append(Command(where, " ".join(words), tuple(words), inline))
    return found


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    """(offset, content) of the inline code spans of markdown prose (any run of backticks, within a paragraph)."""
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
        if "\n\n" not in match[2]:
            yield match.start(), " ".join(match[2].split())


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def page_commands(path: Path) -> list[Command]:
    text = path.read_text(encoding="utf-8")
    name = str(path.relative_to(ROOT))
    page, found = Page(name, {}), []
    fences = list(re.finditer(r"^```([a-z]*)\n(.*?)^```", text, re.S | re.M))
    for fence in fences:
        if fence[1] not in ("", "bash", "sh", "shell", "console"):
            continue
        first, lines, k = line_of(text, fence.start(2)), fence[2].split("\n"), 0
        while k < len(lines):
            start, line = k, lines[k]
            while line.endswith("\\") and k + 1 < len(lines):
                k += 1
                line = f"{line[:-1]} {lines[k]}"
            found += commands_of_line(page, line, f"{name}:{first + start}", inline=False)
            k += 1
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m[0].count("\n"), text, flags=re.S | re.M)
    for offset, span in code_spans(prose):
        found += commands_of_line(page, span, f"{name}:{line_of(prose, offset)}", inline=True)
    return found


def example_commands(path: Path) -> list[Command]:
    """Commands in an example's docstring or comments (a line that starts with a command, continuations joined)."""
    name = str(path.relative_to(ROOT))
    lines = [re.sub(r"^\s*#?\s*", "", line) for line in path.read_text(encoding="utf-8").splitlines()]
    text = "\n".join(lines).replace("\\\n", " ")
    found: list[Command] = []
    page = Page(name, {})
    for k, line in enumerate(text.splitlines()):
        if re.match(r"^(python|\.venv/bin/|crossed-)", line):
            found += commands_of_line(page, line, f"{name}:{k + 1}", inline=False)
    return found


@cache
def quoted() -> tuple[Command, ...]:
    """Every quoted command of every page and example, in page order."""
    SUBSTITUTIONS.clear()
    found: list[Command] = []
    for path in PAGES:
        found += page_commands(path)
    for path in EXAMPLE_SOURCES:
        found += example_commands(path)
    return tuple(found)


def unique(commands: list[Command]) -> dict[str, list[Command]]:
    """Commands by text: a command quoted on several pages is exercised once, and every place counts."""
    out: dict[str, list[Command]] = {}
    for c in commands:
        out.setdefault(c.text, []).append(c)
    return out


# ------------------------------------------------------------------------------------- how each is exercised

# A quoted command that runs, as quoted, in a test of another module.
RUN_ELSEWHERE = {
    "python trl_grpo_own_script.py --steps 4 --out own-grpo":
        ("tests/test_public_api.py", "test_trl_example_runs_as_a_users_own_script"),
}
SCENARIOS: dict[str, tuple[tuple[str, ...], Callable[[Path], None]]] = {}


def scenario(*texts: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    """A workflow of quoted commands, run as quoted in the order given, on data the function makes."""
    def register(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        SCENARIOS[fn.__name__] = (texts, fn)
        return fn
    return register


def hydra_of(c: Command) -> str | None:
    """The Hydra executable a command composes for (its name, or the module torchrun starts), or None."""
    if c.program in HYDRA or c.program == VERL_TRAINER:
        return c.program
    return next((exe for exe, module in ENTRY.items() if exe in HYDRA and c.program == f"-m {module}"), None)


def is_mention(c: Command) -> bool:
    """A name in prose: the program alone, with a subcommand, or with the flags it talks about and their placeholder
    values (``crossed-rescore code --dataset FILE``), but no value of its own."""
    flag = False
    for word in c.args:
        if word.startswith("-"):
            flag = True
        elif flag and (word.isupper() or word.startswith("<")):
            flag = False
        elif not flag and re.fullmatch(r"[a-z][a-z0-9-]*", word):
            continue
        else:
            return False
    return c.inline


def how(c: Command) -> str:
    """run | compose | parse | help (module docstring)."""
    if c.text in RUN_TEXTS or c.text in RUN_ELSEWHERE:
        return "run"
    if c.program == "make":
        return "parse"
    if is_mention(c):
        return "help"
    return "compose" if hydra_of(c) else "parse"


# ------------------------------------------------------------------------------------------ running a command

def substituted(inner: str, cwd: Path) -> str:
    """The output of a command substitution ``$(...)``, run as a reader's shell runs it (the venv's commands first
    on the path)."""
    proc = subprocess.run(["bash", "-c", inner.replace(".venv/bin/", f"{BIN}/")], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, (inner, proc.stderr[-2000:])
    return proc.stdout.strip()


def resolve(word: str, cwd: Path, values: dict[str, str] | None = None) -> str:
    """A quoted word as the command receives it: placeholders from the tables (and the scenario's own ``values``),
    command substitutions run, ``$PWD``/``$HOME`` expanded."""
    if values and word in values:
        return values[word]
    for key, value in PLACEHOLDERS.items():
        word = word.replace(key, value)
    for name, inner in SUBSTITUTIONS.items():
        if name in word:
            word = word.replace(name, substituted(inner, cwd))
    for inner in re.findall(r"\$\(([^)]*)\)", word):
        word = word.replace(f"$({inner})", substituted(inner, cwd))
    return os.path.expandvars(word.replace("$PWD", str(cwd)))


def environment() -> dict[str, str]:
    env = command_env()
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return env


def executable(program: str) -> list[str]:
    """How a subprocess starts a program: the venv's console script, its Python, a script of the repository."""
    if program in ENTRY or program in ("lm_eval", "torchrun"):
        return [str(BIN / program)]
    if program == "mkdir":
        return [program]
    if program.startswith("-m ") or program == "-c":
        return [sys.executable, *program.split(" ", 1)]
    if program.endswith(".py"):
        return [sys.executable, str(ROOT / program)]
    return ["bash", str(ROOT / program)]


RAN: list[str] = []


def run_quoted(text: str, cwd: Path, values: dict[str, str] | None = None,
               timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """The quoted command ``text`` as a subprocess from ``cwd``: exit 0 or the test fails with its output."""
    found = unique(list(quoted())).get(text)
    assert found, f"no longer quoted anywhere: {text}"
    program = found[0].program
    args = [resolve(w, cwd, values) for w in found[0].args]
    out = None
    if ">" in args:
        out, args = cwd / args[args.index(">") + 1], args[:args.index(">")]
    proc = subprocess.run([*executable(program), *args], cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, (text, proc.stdout[-1500:], proc.stderr[-3000:])
    if out is not None:
        out.write_text(proc.stdout)
    RAN.append(text)
    return proc


# -------------------------------------------------------------------------------------- parsing in this process

class Parsed(BaseException):
    """Raised once a command's own argparse parse has succeeded: the command stops there (a BaseException, so that
    no handler of the command's takes it)."""

    def __init__(self, namespace: object) -> None:
        super().__init__("parsed")
        self.namespace = namespace


@contextlib.contextmanager
def parse_only() -> Iterator[None]:
    """argparse's ``parse_args``/``parse_known_args`` raise ``Parsed`` when the outermost call succeeds (a
    subcommand's parser runs inside its parent's parse, and ``parse_args`` calls ``parse_known_args``)."""
    originals = {name: getattr(argparse.ArgumentParser, name) for name in ("parse_args", "parse_known_args")}
    depth = 0

    def wrapped(original: Callable[..., object]) -> Callable[..., object]:
        def call(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> object:
            nonlocal depth
            depth += 1
            try:
                result = original(self, *args, **kwargs)
            finally:
                depth -= 1
            if depth == 0:
                raise Parsed(result)
            return result
        return call

    for name, original in originals.items():
        setattr(argparse.ArgumentParser, name, wrapped(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(argparse.ArgumentParser, name, original)


@contextlib.contextmanager
def as_invoked(argv: list[str], cwd: Path) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """``sys.argv``, the working folder and stdout/stderr as the command would have them."""
    saved_argv, saved_cwd, out, err = sys.argv[:], Path.cwd(), io.StringIO(), io.StringIO()
    sys.argv = argv
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)


def call(program: str, args: list[str]) -> None:
    """The program's own entry, in this process, with ``args`` (``sys.argv`` already set)."""
    if program in ENTRY:
        importlib.import_module(ENTRY[program]).main(args)
    elif program.startswith("-m "):
        runpy.run_module(program[3:], run_name="__main__", alter_sys=True)
    elif program.endswith(".py"):
        runpy.run_path(str(ROOT / program), run_name="__main__")
    elif program == "lm_eval":
        from lm_eval.__main__ import cli_evaluate

        cli_evaluate()
    elif program.endswith(".sh"):  # a script that hands its arguments to a Python module
        module = re.search(r'-m ([\w.]+) "\$@"', (ROOT / program).read_text())
        assert module, f"{program}: no Python module takes its arguments"
        importlib.import_module(module[1]).main(args)
    else:
        raise AssertionError(f"{program}: no entry to parse with")


def parse_quoted(program: str, args: list[str], cwd: Path) -> object:
    """The namespace the program's own parser makes of ``args``; a parse error or no parse at all fails."""
    with as_invoked([program.split()[-1], *args], cwd) as (_, err):
        try:
            with parse_only():
                call(program, args)
        except Parsed as done:
            return done.namespace
        except SystemExit as stop:
            pytest.fail(f"{program} {' '.join(args)}: exit {stop.code} while parsing: {err.getvalue()[-1500:]}")
    pytest.fail(f"{program} {' '.join(args)}: returned without parsing its arguments")


# ------------------------------------------------------------------------------ the workflows run as quoted

def lm_eval_folder(folder: Path, writes: str) -> None:
    """An lm-eval ``--output_path`` folder of one policy: the shipped GSM8K tasks under both requests (prompts carry
    the request); ``writes`` is the payload it answers with: ``hash``, ``boxed`` or ``asked`` (the one requested)."""
    from crossed_rlvr.rewards.conventions import request_suffix

    folder.mkdir(parents=True)
    for request in ("hash", "boxed"):
        marker = {"hash": "#### {}", "boxed": "\\boxed{{{}}}"}[request if writes == "asked" else writes]
        rows = [{"doc_id": d, "target": f"#### {d + 10}", "resps": [[f"{d} + 10 = {d + 10}\n" + marker.format(d + 10)]],
                 "filter": "none", "arguments": {"gen_args_0": {"arg_0": f"What is {d} + 10?\n{request_suffix(request)}",
                                                                 "arg_1": {}}}} for d in range(8)]
        name = f"samples_crossed_gsm8k_{request}_original_2026-01-01T00-00-00.jsonl"
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


@scenario("mkdir -p resp",
          "crossed-import lm-eval lm_eval_out/initial/ --task gsm8k --policy initial -o resp/initial.jsonl",
          "crossed-import lm-eval lm_eval_out/grpo-hash_s83/ --task gsm8k --policy grpo-hash/s83 -o "
          "resp/grpo-hash_s83.jsonl",
          "crossed-score resp/ -o scores.parquet",
          "crossed-analyze scores.parquet -o analysis/ --resamples 20000 --rng-seed 20260919")
def rescoring(tmp: Path) -> None:
    """docs/rescoring.md: lm-eval outputs of the initial policy and both arms, imported, scored and analysed crossed
    (the boxed arm's import is the hash arm's command with its own names)."""
    from crossed_rlvr.eval.ingest.cli import main as import_main

    for policy, writes in (("initial", "asked"), ("grpo-hash_s83", "hash"), ("grpo-boxed_s83", "boxed")):
        lm_eval_folder(tmp / "lm_eval_out" / policy, writes)
    texts = SCENARIOS["rescoring"][0]
    run_quoted(texts[0], tmp)
    run_quoted(texts[1], tmp)
    run_quoted(texts[2], tmp)
    assert import_main(["lm-eval", str(tmp / "lm_eval_out" / "grpo-boxed_s83"), "--task", "gsm8k", "--policy",
                        "grpo-boxed/s83", "-o", str(tmp / "resp" / "grpo-boxed_s83.jsonl")]) == 0
    run_quoted(texts[3], tmp)
    run_quoted(texts[4], tmp)
    contrasts = (tmp / "analysis" / "contrasts.csv").read_text()
    assert "interaction" in contrasts and (tmp / "analysis" / "report.md").read_text().strip()


def verl_dump(folder: Path, steps: tuple[int, ...]) -> None:
    """verl's validation dump: one JSON Lines file per step, each prompt ending in its request."""
    from crossed_rlvr.rewards.conventions import request_suffix

    folder.mkdir(parents=True)
    for step in steps:
        rows = [{"input": f"user: What is {i} + 5?\n{request_suffix(r)}\nassistant:", "output": f"#### {i + 5}",
                 "gts": str(i + 5), "score": 1.0, "step": step} for r in ("hash", "boxed") for i in range(3)]
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@scenario("crossed-import verl <trainer.validation_data_dir> -o resp/grpo-hash_s83.jsonl --policy grpo-hash/s83 "
          "--task gsm8k",
          "crossed-import verl <arm>/validation --all-steps --policy grpo-hash/s83 --task gsm8k -o hash_steps.jsonl")
def verl_dumps(tmp: Path) -> None:
    """docs/rescoring.md, docs/training-arms.md and docs/gpu.md: verl's validation dumps as response records."""
    verl_dump(tmp / "val", (0, 10))
    verl_dump(tmp / "arm" / "validation", (0, 5))
    texts = SCENARIOS["verl_dumps"][0]
    (tmp / "resp").mkdir()  # the guide's `mkdir -p resp` (run in the rescoring workflow)
    run_quoted(texts[0], tmp)
    assert len((tmp / "resp" / "grpo-hash_s83.jsonl").read_text().splitlines()) == 6  # the last step's
    run_quoted(texts[1], tmp)
    policies = {json.loads(line)["policy"] for line in (tmp / "hash_steps.jsonl").read_text().splitlines()}
    assert policies == {"grpo-hash/s83@step0", "grpo-hash/s83@step5"}


@scenario("crossed-rlvr lm-eval-tasks", "crossed-rlvr lm-eval-tasks --data gsm8k=gsm8k_test.jsonl --out my_tasks/",
          "crossed-rlvr panel")
def small_tools(tmp: Path) -> None:
    """docs/rescoring.md: the shipped lm-eval tasks' folder, the same tasks on a local copy of GSM8K; the panel."""
    texts = SCENARIOS["small_tools"][0]
    shipped = Path(run_quoted(texts[0], tmp).stdout.strip())
    assert (shipped / "crossed_gsm8k_hash_original.yaml").is_file()
    (tmp / "gsm8k_test.jsonl").write_text(json.dumps({"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    run_quoted(texts[1], tmp)
    assert (tmp / "my_tasks" / "crossed_gsm8k_boxed_para_b.yaml").is_file()
    assert "strict_first_hash" in run_quoted(texts[2], tmp).stdout


@scenario("crossed-calibrate sample runs/study/eval/scores.parquet -o cal/ --state initial:hash --state "
          "grpo-hash/s83:hash --state grpo-hash/s84:hash --cap 30 --census strict=0|fallback=1|mv=1",
          "crossed-calibrate pack cal/ -o ann/ --annotator ann",
          "crossed-calibrate export cal/ labels.csv",
          "crossed-calibrate analyze cal/ -o cal/analysis")
def calibration(tmp: Path) -> None:
    """docs/calibration.md: a frozen sample of a scored study (three states), an annotator's pack, the export, and the
    analysis once both annotators' labels are in (``annotate`` serves a page: its arguments are parsed below)."""
    from crossed_rlvr.calibration.cli import main
    from crossed_rlvr.calibration.roles import declare_roles
    from crossed_rlvr.calibration.sample import load_calibration
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.records import write_responses
    from crossed_rlvr.tasks.items import write_items
    from tests.calibration_fixtures import ITEMS

    eval_dir = tmp / "runs" / "study" / "eval"
    (eval_dir / "responses").mkdir(parents=True)
    write_items(eval_dir / "items" / "toy-test.jsonl", [{"item_id": i, "question": q, "reference": r}
                                                         for i, q, r, _, _ in ITEMS])
    for policy, seed, col in (("initial", None, 3), ("grpo-hash/s83", 83, 4), ("grpo-hash/s84", 84, 4)):
        write_responses(eval_dir / "responses" / f"{policy.replace('/', '_')}__hash__original.jsonl", [
            {"item_id": it[0], "task": "toy", "policy": policy, "training_convention": "hash" if seed else "initial",
             "train_seed": seed, "request": "hash", "template": "original", "sample_idx": 0, "gen_seed": None,
             "prompt_sha256": "0" * 64, "response": it[col], "finish_reason": "stop", "prompt_tokens": 10,
             "response_tokens": 10, "reference": it[2]} for it in ITEMS])
    score_files([eval_dir / "responses"], eval_dir / "scores.parquet", workers=0, progress=False)
    texts = SCENARIOS["calibration"][0]
    run_quoted(texts[0], tmp)
    declare_roles(tmp / "cal", ["ann", "bob"], ["carol"])  # what the quoted `annotate` declares before it serves
    run_quoted(texts[1], tmp)
    assert (tmp / "ann").is_dir()
    run_quoted(texts[2], tmp)
    assert (tmp / "labels.csv").is_file()
    _, rows = load_calibration(tmp / "cal")
    labels = [x for who in ("ann", "bob") for r in rows for x in (
        {"annotator": who, "stage": "stage1", "sample_id": r["sample_id"], "status": "clear", "span": r["response"][-6:]},
        {"annotator": who, "stage": "stage2", "sample_id": r["sample_id"],
         "correctness": "correct" if "mv=1" in r["stratum"] else "incorrect", "fidelity": [True] * len(r["candidates"])})]
    (tmp / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    assert main(["import", str(tmp / "cal"), str(tmp / "labels.jsonl"), "--lock"]) == 0
    run_quoted(texts[3], tmp)
    assert "(Table 3)" in (tmp / "cal" / "analysis" / "report.md").read_text()


@scenario("crossed-import lm-eval SAMPLES --request plain --task TASK --policy POLICY -o FILE",
          "crossed-rescore resp/ --pair base=rl -o rescore/ --items items/mmlu_pro.jsonl")
def format_share(tmp: Path) -> None:
    """docs/format-share.md: outputs of a plain prompt imported; a base and an RL model's multiple-choice outputs
    re-scored with the fixed extractor against an item file of ten-option items."""
    from crossed_rlvr.records import write_responses
    from tests.helpers import rec

    rows = [{"doc_id": k, "target": f"#### {k + 3}", "resps": [[f"The answer is {k + 3}."]],
             "arguments": {"gen_args_0": {"arg_0": f"Question: what is {k} + 3?\nAnswer:", "arg_1": {}}}} for k in range(4)]
    (tmp / "samples_gsm8k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts = SCENARIOS["format_share"][0]
    run_quoted(texts[0], tmp, {"SAMPLES": "samples_gsm8k.jsonl", "TASK": "gsm8k", "POLICY": "initial",
                               "FILE": "plain.jsonl"})
    assert {json.loads(line)["request"] for line in (tmp / "plain.jsonl").read_text().splitlines()} == {"plain"}
    keys = ["ABCDEFGHIJ"[k % 10] for k in range(30)]
    records = []
    for policy, text in (("base", "The answer is {}."), ("rl", "\\boxed{{{}}}")):
        for k, key in enumerate(keys):
            r = rec(k, "initial", "boxed", task="mmlu_pro", reference=key, response=text.format(key))
            r.update(policy=policy, training_convention="initial" if policy == "base" else "boxed",
                     train_seed=None if policy == "base" else 83)
            records.append(r)
    (tmp / "resp").mkdir()
    write_responses(tmp / "resp" / "outputs.jsonl", records)
    (tmp / "items").mkdir()
    (tmp / "items" / "mmlu_pro.jsonl").write_text("".join(json.dumps(
        {"item_id": str(k), "task": "mmlu_pro", "question": "q", "reference": key, "n_options": 10}) + "\n"
        for k, key in enumerate(keys)))
    run_quoted(texts[1], tmp)
    assert (tmp / "rescore" / "comparisons.csv").is_file() and (tmp / "rescore" / "report.md").is_file()


@scenario("python -c import crossed_rlvr.tasks.code as c; print(c.HUMANEVAL_PLUS)",
          "crossed-rescore code --dataset $DATASET --samples samples.jsonl")
def code_samples(tmp: Path) -> None:
    """docs/code-tasks.md: EvalPlus samples scored in the sandbox against the HumanEval+ file the package ships."""
    texts = SCENARIOS["code_samples"][0]
    assert Path(run_quoted(texts[0], tmp).stdout.strip()).is_file()
    (tmp / "samples.jsonl").write_text(json.dumps({"task_id": "HumanEval/53",
                                                   "solution": "def add(x: int, y: int):\n    return x + y\n"}) + "\n")
    run_quoted(texts[1], tmp)
    result = json.loads((tmp / "samples_eval_results.json").read_text())
    assert result["pass_at_k"]["plus"] == {"pass@1": 1.0}


@scenario("python -m crossed_rlvr.eval.generate.workers slurm --nodes 4 --gpus-per-node 8 -o eval.sbatch -- "
          "crossed-study experiment=qwen2.5-7b-gsm8k-crossed",
          "python scripts/settings_table.py > docs/settings.md",
          "python scripts/wandb_runs.py runs/study",
          "scripts/suite_timeline.py DIR")
def writers(tmp: Path) -> None:
    """docs/cluster-eval.md's SLURM script, docs/settings.md as its first line says it is made, docs/configs.md's
    listing of a run's offline wandb runs, docs/development.md's summary of a suite's timeline (one test's line, as
    tests/conftest.py writes it)."""
    texts = SCENARIOS["writers"][0]
    run_quoted(texts[0], tmp)
    assert "crossed-study experiment=qwen2.5-7b-gsm8k-crossed" in (tmp / "eval.sbatch").read_text()
    (tmp / "docs").mkdir()
    run_quoted(texts[1], tmp)
    assert (tmp / "docs" / "settings.md").read_text() == (ROOT / "docs" / "settings.md").read_text()
    (tmp / "runs" / "study").mkdir(parents=True)
    assert "offline wandb runs under runs/study" in run_quoted(texts[2], tmp).stdout
    (tmp / "DIR").mkdir()
    (tmp / "DIR" / "gw0.jsonl").write_text(json.dumps({"test": "tests/test_x.py::test_a", "worker": "gw0", "start": 1.0,
                                                        "end": 3.5, "cpu": 2.1}) + "\n")
    assert "1 tests in" in run_quoted(texts[3], tmp).stdout


@scenario("crossed-match runs/train/hash/s83 runs/train/boxed/s83")
def matched(tmp: Path) -> None:
    """docs/training-arms.md: the matched-arm check on the two arms of a seed, as crossed-train writes their config
    and training rows before it trains."""
    from hydra import compose, initialize_config_module

    from crossed_rlvr.layout import ArmLayout
    from crossed_rlvr.train.checks import checked_train
    from crossed_rlvr.train.recipe import training_rows, write_rows
    from crossed_rlvr.train.run import resolved

    for convention in ("hash", "boxed"):
        with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
            cfg = compose(config_name="crossed_train", overrides=[  # a hub name: no model folder to build
                "tracking=off", "recipe=tiny", "train_items.n=200", "model=qwen2.5-7b-instruct",
                f"convention={convention}", "seed=83"])
        arm = ArmLayout(tmp / "runs" / "train" / convention / "s83")
        arm.root.mkdir(parents=True)
        arm.resolved_config.write_text(json.dumps(resolved(checked_train(cfg))))
        write_rows(arm.train_rows, training_rows(cfg))
    run_quoted(SCENARIOS["matched"][0][0], tmp)
    assert json.loads(ArmLayout(tmp / "runs" / "train" / "hash" / "s83").matched_check.read_text())["matched"]


RUN_TEXTS = {text for texts, _ in SCENARIOS.values() for text in texts}
SLOW_SCENARIOS = {"rescoring", "format_share", "code_samples", "calibration"}  # 5 s and more each (conftest: long)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in SLOW_SCENARIOS else n
                                  for n in SCENARIOS])
def test_quoted_workflow_runs_as_quoted(name, tmp_path):
    texts, fn = SCENARIOS[name]
    RAN.clear()
    fn(tmp_path)
    assert list(texts) == RAN, f"{name} ran {RAN}, not every command it names in order"


def test_every_workflow_command_and_the_example_are_still_quoted():
    """The scenarios' commands are the docs' own text (a reworded command must be reworded here too), and the
    example the public-API test runs is the one its README quotes."""
    texts = unique(list(quoted()))
    assert sorted(RUN_TEXTS - texts.keys()) == []
    for text, (module, test) in RUN_ELSEWHERE.items():
        assert text in texts and f"def {test}(" in (ROOT / module).read_text(), text
        assert repr(text.split()[2:]) in (ROOT / module).read_text(), f"{module} runs other arguments than {text}"


# ----------------------------------------------------------------------------------------- parsed commands

def by_kind(kind: str) -> dict[str, list[Command]]:
    return {t: cs for t, cs in unique(list(quoted())).items() if how(cs[0]) == kind}


def make_dry_run(args: list[str]) -> list[str]:
    """The recipe lines ``make -n`` prints for the quoted targets and variables (GNU make parses them; nothing runs)."""
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, (args, proc.stderr[-1000:])
    return proc.stdout.splitlines()


@pytest.mark.parametrize("text", sorted(by_kind("parse")), ids=lambda t: t[:90])
def test_quoted_command_parses(text, tmp_path):
    """Its arguments parsed by the command itself (module docstring); ``make study`` also composes the crossed-study
    command it would run."""
    c = by_kind("parse")[text][0]
    args = [resolve(w, tmp_path) for w in c.args]
    if c.program == "make":
        for line in make_dry_run(args):
            if line.startswith(".venv/bin/crossed-study"):
                compose_checked("crossed-study", shlex.split(line)[1:], tmp_path)
    elif c.program.endswith(".sh") and not re.search(r'-m [\w.]+ "\$@"', (ROOT / c.program).read_text()):
        proc = subprocess.run(["bash", str(ROOT / c.program), *args, "--help"], capture_output=True, text=True,
                              timeout=60, check=False)  # its own argument loop reads every word before --help
        assert proc.returncode == 0, (text, proc.stderr[-1000:])
    else:
        assert parse_quoted(c.program, args, tmp_path) is not None


def test_the_parse_stop_fails_a_wrong_flag_and_passes_a_right_one(tmp_path):
    """The negative control of the parse: a flag the command does not have, or a missing required option, fails."""
    namespace = parse_quoted("crossed-import", ["lm-eval", "S", "--policy", "initial", "-o", "f.jsonl"], tmp_path)
    assert vars(namespace)["policy"] == "initial"
    for wrong in (["lm-eval", "S", "--policy", "initial"], ["lm-eval", "S", "-o", "f", "--polcy", "initial"]):
        with pytest.raises(pytest.fail.Exception, match="exit 2 while parsing"):
            parse_quoted("crossed-import", wrong, tmp_path)
    with pytest.raises(pytest.fail.Exception, match="exit 2 while parsing"):
        parse_quoted("scripts/bench_study.py", ["--no-such-flag"], tmp_path)
    with pytest.raises(AssertionError):
        make_dry_run(["no-such-target"])


# ---------------------------------------------------------------------------------------- composed commands

def compose_checked(command: str, args: list[str], run_dir: Path) -> object:
    """The config a Hydra command composes from these arguments (the first job of a sweep), checked as the command
    checks it before any stage."""
    from hydra import compose, initialize_config_module
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from crossed_rlvr.command import spelled
    from crossed_rlvr.conf.ranges import check_overrides, check_ranges, check_relations

    overrides = spelled(command, [a for a in args if a not in ("-m", "--multirun") and "=" in a
                                  and not a.startswith("-") and "..." not in a])
    parsed = OverridesParser.create().parse_overrides(overrides)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    first = list(batches[0][0]) if batches and batches[0] else overrides
    check_overrides(first, HYDRA[command])
    with initialize_config_module(config_module="crossed_rlvr.conf", version_base="1.3"):
        cfg = compose(config_name=HYDRA[command], overrides=[*first, f"run_dir={run_dir}"])
    check_ranges(cfg, HYDRA[command])
    check_relations(cfg, HYDRA[command])
    return cfg


def verl_example_config(args: list[str]) -> object:
    """verl's trainer config as ``--config-path "$PWD/examples" --config-name verl_reward`` composes it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    assert args[args.index("--config-path") + 1].endswith("/examples")
    name = args[args.index("--config-name") + 1]
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "examples"), version_base=None):
            return compose(config_name=name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("text", sorted(by_kind("compose")), ids=lambda t: t[:90])
def test_quoted_hydra_command_composes_and_passes_its_checks(text, tmp_path):
    c = by_kind("compose")[text][0]
    args = [resolve(w, tmp_path) for w in c.args]
    exe = hydra_of(c)
    if exe == VERL_TRAINER:
        cfg = verl_example_config(args)
        assert cfg.reward.custom_reward_function.name == "compute_score"  # type: ignore[attr-defined]
        return
    if c.launcher:  # torchrun's own options, parsed by torch's parser
        from torch.distributed.run import get_args_parser

        launched = get_args_parser().parse_args([*c.launcher, "-m", c.program[3:], *args])
        assert launched.module and launched.training_script == c.program[3:]
    compose_checked(exe, args, tmp_path)


def cfg_job_commands() -> list[Command]:
    """For each Hydra executable, its first quoted command that is a single run and names no placeholder value."""
    chosen: dict[str, Command] = {}
    for cs in by_kind("compose").values():
        c = cs[0]
        if not c.launcher and "-m" not in c.args and hydra_of(c) not in chosen:
            chosen[hydra_of(c) or ""] = c
    return list(chosen.values())


@pytest.mark.parametrize("c", [pytest.param(c, marks=pytest.mark.long) if c.program == VERL_TRAINER else c
                               for c in cfg_job_commands()], ids=lambda c: c.program)
def test_each_hydra_executable_runs_a_quoted_command_with_cfg_job(c, tmp_path):
    """The real entry point, as quoted with ``--cfg job`` appended: Hydra composes and prints the job's config."""
    import yaml

    if c.program == VERL_TRAINER:
        (tmp_path / "examples").mkdir()
        (tmp_path / "examples" / "verl_reward.yaml").write_text((ROOT / "examples" / "verl_reward.yaml").read_text())
    args = [resolve(w, tmp_path) for w in c.args if "..." not in w]
    proc = subprocess.run([*executable(c.program), *args, "--cfg", "job"], cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, (c.text, proc.stderr[-2000:])
    cfg = yaml.safe_load(proc.stdout)
    assert "actor_rollout_ref" in cfg if c.program == VERL_TRAINER else "run_dir" in cfg
    assert list(tmp_path.iterdir()) in ([], [tmp_path / "examples"])  # a config printed, nothing written


def test_every_hydra_executable_is_run_with_cfg_job():
    assert {hydra_of(c) for c in cfg_job_commands()} == {*HYDRA, VERL_TRAINER}


def test_the_entry_table_is_pyprojects():
    """The console scripts this file runs and parses are the ones the package installs, with the same entries."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {name: f"{module}:{ENDS_AT_ONCE.get(name, 'main')}" for name, module in ENTRY.items()}
    assert set(HYDRA) < set(ENTRY)


def test_every_quoted_preset_exists():
    named = set()
    for path in PAGES:
        named |= {(path.name, m) for m in re.findall(r"experiment=([A-Za-z0-9_.\-]+)", path.read_text(encoding="utf-8"))}
    assert sorted(f"{d}: experiment={m}" for d, m in named if m.rstrip(".") not in PRESETS) == []
    assert {m for _, m in named} & {"qwen2.5-7b-gsm8k-crossed", "tiny"}


# ---------------------------------------------------------------------------------------------- bare names

def mention_of(c: Command) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(program, subcommands, flags) of a name in prose."""
    return (c.program, tuple(a for a in c.args if not a.startswith("-") and not a.isupper() and "<" not in a),
            tuple(a for a in c.args if a.startswith("-") and a != "--help"))


def mentions() -> dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[Command]]:
    out: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[Command]] = {}
    for cs in by_kind("help").values():
        out.setdefault(mention_of(cs[0]), []).extend(cs)
    return out


def shell_help(script: str) -> bool:
    """A shell script answers ``--help``: its argument loop has a case for it, or it hands its arguments to Python."""
    text = (ROOT / script).read_text()
    return bool(re.search(r"--help\)", text) or re.search(r'-m [\w.]+ "\$@"', text))


def help_text(program: str, subcommands: tuple[str, ...] = ()) -> str:
    if program.endswith(".sh") and not shell_help(program):
        proc = subprocess.run(["bash", "-n", str(ROOT / program)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (program, proc.stderr)
        return (ROOT / program).read_text()
    if program in HYDRA or program in ("lm_eval", "torchrun") or program.endswith(".sh"):
        proc = subprocess.run([*executable(program), *subcommands, "--help"], cwd=ROOT, env=environment(),
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0 and proc.stdout.strip(), (program, subcommands, proc.stderr[-1500:])
        return proc.stdout
    argv = [*subcommands, "--help"]  # argparse's help, in this process
    with as_invoked([program.split()[-1], *argv], ROOT) as (out, err), pytest.raises(SystemExit) as stop:
        call(program, argv)
    assert stop.value.code in (0, None) and out.getvalue().strip(), (program, subcommands, err.getvalue()[-1500:])
    return out.getvalue()


@pytest.mark.parametrize("mention", sorted(mentions()), ids=lambda m: " ".join([m[0], *m[1], *m[2]]))
def test_a_name_in_prose_answers_help(mention):
    """``--help`` answers (a shell script without one: ``bash -n``); a subcommand has help of its own, and every flag
    the prose names is in it."""
    program, subcommands, flags = mention
    text = help_text(program, subcommands)
    if subcommands:
        assert text != help_text(program), f"{program} has no subcommand {' '.join(subcommands)}"
    assert [f for f in flags if f.split("=")[0] not in text] == []


# ------------------------------------------------------------------------------------ the extractor itself

def test_every_placeholder_has_a_value():
    """A placeholder the tables do not know would reach a command as text: every ``<...>`` and ``$NAME`` has a value."""
    unknown = set()
    for c in quoted():
        for word in c.words:
            unknown |= {p for p in re.findall(r"<[^>]*>", word) if p not in PLACEHOLDERS and how(c) != "help"}
            unknown |= {v for v in re.findall(r"\$\{?\w+", word) if v not in SUBSTITUTIONS
                        and v.lstrip("${") not in ("HOME", "PWD")}
    assert unknown == set()


def test_the_extractor_reads_a_page_as_a_reader_does(tmp_path, monkeypatch):
    """Continuations, comments, variables, ``&&``, quotes, optional groups, placeholders and inline spans over a line
    break; other tools' commands (pip, cp) and prose are not commands of ours."""
    page = tmp_path / "page.md"
    page.write_text("Run `crossed-score resp/\n-o s.parquet` then\n\n```bash\nS=\"experiment=smoke run_dir=r\"\n"
                    "pip install x && .venv/bin/crossed-study $S \\\n    arms.seeds=[83]   # a comment\n"
                    "crossed-calibrate sample s -o c --census 'a=0|b=1'\n"
                    "crossed-rescore r --pair a=b [--pair c=d ...] -o o [--items i.jsonl]\n```\n"
                    "```python\ncrossed-score not_shell\n```\n`crossed-rescore code` and `crossed-study experiment=<name>`\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = [(c.text, c.inline, how(c)) for c in page_commands(page)]
    assert found == [
        ("crossed-study experiment=smoke run_dir=r arms.seeds=[83]", False, "compose"),
        ("crossed-calibrate sample s -o c --census a=0|b=1", False, "parse"),
        ("crossed-rescore r --pair a=b -o o --items i.jsonl", False, "parse"),
        ("crossed-score resp/ -o s.parquet", True, "parse"),
        ("crossed-rescore code", True, "help"),
        ("crossed-study experiment=<name>", True, "compose"),
    ]


def test_counts():
    """How many quoted commands (by text; the places that quote each one counted apart) each way covers; the
    extractor finds the docs' commands (a broken extractor would leave every test above vacuous)."""
    by_text = unique(list(quoted()))
    kinds = {kind: [t for t, cs in by_text.items() if how(cs[0]) == kind] for kind in ("run", "compose", "parse",
                                                                                       "help")}
    places = {kind: sum(len(by_text[t]) for t in texts) for kind, texts in kinds.items()}
    print(f"\nquoted commands: {len(by_text)} ({len(quoted())} places); run as quoted {len(kinds['run'])} "
          f"({places['run']} places); parsed or composed {len(kinds['parse']) + len(kinds['compose'])} "
          f"({places['parse'] + places['compose']}); --help only {len(kinds['help'])} ({places['help']})")
    assert len(kinds["run"]) >= 18 and len(kinds["compose"]) >= 40 and len(kinds["parse"]) >= 25
    assert {"crossed-study", "crossed-eval", "crossed-analyze", "crossed-rescore"} <= {c.program for c in quoted()}
    assert len(examples := [c for c in quoted() if c.where.startswith("examples/")]) >= 4, examples
