"""The Hydra entry of every command: typed composition, value checks before any stage, one run
directory per multirun job, and a ``--help`` that lists only the command's own groups and presets; and the spelling
of a value on a Hydra command line. The configs themselves (YAML, schemas, checks) are :mod:`crossed_rlvr.conf`."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import yaml

if TYPE_CHECKING:
    from omegaconf import DictConfig

C = TypeVar("C")  # a command's view of its composed config

CONF = Path(__file__).parent / "conf"  # the configs (crossed_rlvr/conf), read without importing their schemas


def hydra_quoted(text: str) -> str:
    """``text`` as a single-quoted Hydra override value. Hydra reads a backslash literally unless backslashes
    precede a quote or end the string, so only those runs are doubled."""
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", str(text))
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text) + "'"


def hydra_value(text: str) -> str:
    """A path or name as a Hydra override value: as it is where Hydra's grammar reads it back as the same string
    (every plain path, so the overrides of finished runs read as before), else quoted: unquoted, a comma makes a
    sweep, parentheses, brackets or a quote fail to parse, and ``2024`` or ``true`` are read as other types."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        same = OverridesParser.create().parse_override(f"k={text}").value() == text
    except HydraException:  # Hydra's grammar refuses it unquoted
        same = False
    return text if same else hydra_quoted(text)


def given_override(job_overrides: Sequence[object] | None, key: str, default: object) -> object:
    """The value of ``key=...`` among a job's command-line overrides, else ``default`` (the ``crossed_given``
    resolver; crossed-train -m: a ``run_dir`` given on the command line is the sweep's root)."""
    for o in job_overrides or []:
        name, _, value = str(o).partition("=")
        if name.lstrip("+~") == key and value:
            return value
    return default


def describe(path: Path) -> str:
    """The first comment line of a config file (its one-line description)."""
    for line in path.read_text().splitlines():
        text = line.strip()
        if text.startswith("#") and "@package" not in text:
            return text.lstrip("# ").strip()
        if text and not text.startswith("#"):
            break
    return ""


def groups_of(config_name: str) -> list[tuple[str, str]]:
    """(group, default option) of a primary config's defaults list, schema entries left out."""
    defaults = yaml.safe_load((CONF / f"{config_name}.yaml").read_text()).get("defaults", [])
    return [next(iter(d.items())) for d in defaults if isinstance(d, dict)]


def header(path: Path) -> tuple[str, list[str]]:
    """A primary config's description (its first comment paragraph) and the examples its header lists under
    ``# examples:``: the command's help is written once, with its config."""
    comments = [line[1:] for line in path.read_text().splitlines() if line.startswith("#")]
    k = next((i for i, line in enumerate(comments) if line.strip() == "examples:"), len(comments))
    return "\n".join(line.strip() for line in comments[:k]), [line[3:] for line in comments[k + 1:]]


def help_text(command: str, config_name: str) -> str:
    about, examples = header(CONF / f"{config_name}.yaml")
    lines = [about, "", f"usage: {command} [-m] [key=value ...] [group=option ...]", "",
             "Groups (default marked *):"]
    for group, default in groups_of(config_name):
        lines.append(f"  {group}:")
        for path in sorted((CONF / group).glob("*.yaml")):
            mark = "*" if path.stem == default else " "
            lines.append(f"   {mark} {path.stem:<32} {describe(path)}")
    lines += ["", "Examples:", *[f"  {e}" for e in examples], "",
              f"All keys with their values: {command} --cfg job    Hydra's own flags: {command} --hydra-help",
              ("Under -m every job writes to its own run directory <run_dir>/<the job's overrides>, with its "
               "config in hydra/ there.")]
    return "\n".join(lines)


def job_run_dir(cfg: DictConfig) -> bool:
    """Under ``-m``, point ``run_dir`` at the job's own directory (sweep dir / job overrides), so the
    jobs of a sweep never share (and refuse or overwrite) one run directory. True under ``-m``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        cfg.run_dir = hc.runtime.output_dir
        return True
    return False


# a command's own checks beside conf/checks.py's, that need its layer (crossed-eval: the GPU eval.device names)
COMMAND_CHECKS: dict[str, Callable[..., None]] = {}


def needed_extras(cfg: DictConfig) -> list[str]:
    """The extras (crossed_rlvr/extras.py) a Hydra command's composed config needs: every such command loads a model
    (``train``); the verl engine needs ``verl``, the vLLM backend ``vllm``, tracking other than off ``track``."""
    from omegaconf import OmegaConf

    names = ["train"]
    if OmegaConf.select(cfg, "engine.name") == "verl":
        names.append("verl")
    if OmegaConf.select(cfg, "eval.backend") == "vllm":
        names.append("vllm")
    if OmegaConf.select(cfg, "tracking.mode") not in (None, "off"):
        names.append("track")
    return names


@contextlib.contextmanager
def one_line(command: str) -> Iterator[None]:
    """The error contract of a command (crossed_rlvr/errors.py) as one line on stderr and its exit status: a refusal
    of its input exits 2; a run that failed as its message says (arms not matched, a full disk) or a file the machine
    could not read or write, its own status. Inside Hydra's job too, whose handler would print a traceback."""
    from crossed_rlvr.errors import BAD_INPUT, RUN_FAILED, CrossedError, RunFailure

    try:
        yield
    except (CrossedError, RunFailure) as err:
        print(f"{command}: {err}", file=sys.stderr, flush=True)
        raise SystemExit(BAD_INPUT if isinstance(err, CrossedError) else RUN_FAILED) from None
    except OSError as err:
        if err.filename is None:
            raise
        from crossed_rlvr.files import describe_os_error

        line, status = describe_os_error(err)
        print(f"{command}: {line}", file=sys.stderr, flush=True)
        raise SystemExit(status) from None


def refuse_or_pass(command: str, cfg: DictConfig) -> None:
    """Every check of the command's composed config; a refusal is one line on stderr and exit 2."""
    from crossed_rlvr.conf.checks import check_command
    from crossed_rlvr.extras import require

    with one_line(command):
        require(*needed_extras(cfg))  # the engines this config loads are installed
        check_command(command, cfg)
        if command in COMMAND_CHECKS:
            COMMAND_CHECKS[command](cfg)


def hold_or_refuse(command: str, run_dir: str) -> None:
    """The run folder held for the command's whole run (crossed_rlvr/folder_lock.py), after its config passed and
    before anything is written there: a second run into a held folder is one line and exit 2."""
    from crossed_rlvr.folder_lock import hold

    with one_line(command):
        hold(run_dir, command, [a for a in sys.argv[1:] if not a.startswith(CHECKS_KEY)])  # as the user typed it


class ChecksFirst:
    """Hydra callback that checks a single run's config before Hydra's job makes its run directory and writes the
    config copies (``hydra/``) and the job's log there: a refused config leaves no files behind. (Under ``-m``
    each job checks its own config in its directory.) Every hook Hydra calls is defined: it warns on a missing one."""

    def __init__(self, command: str) -> None:
        self.command = command

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        import copy

        from omegaconf import open_dict, read_write

        task = copy.deepcopy(config)
        with read_write(task), open_dict(task):
            del task["hydra"]  # the job's config, as Hydra hands it to the job
        refuse_or_pass(self.command, task)
        hold_or_refuse(self.command, str(task.run_dir))

    # **kwargs: Any below and above: the keyword arguments Hydra's Callback hooks are called with
    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None: ...
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None: ...
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None: ...
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None: ...
    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None: ...


CHECKS_KEY = "+hydra.callbacks.crossed_checks_first"  # the overrides with_checks_first adds to the command line


def with_checks_first(argv: list[str], command: str) -> list[str]:
    """The command line plus the override that installs ``ChecksFirst`` (Hydra reads callbacks from its config only,
    and the command's override list is the one way in that leaves the config files alone)."""
    extra = [f"{CHECKS_KEY}._target_={__name__}.ChecksFirst", f"{CHECKS_KEY}.command={command}"]
    # beside the command line's own overrides: Hydra's parser takes one run of them, so overrides split by a flag
    # (``-m``, ``--cfg job``) are refused
    at = next((k for k, a in enumerate(argv) if k > 0 and "=" in a and not a.startswith("-")), len(argv))
    return [*argv[:at], *extra, *argv[at:]]


def as_trained(overrides: list[str]) -> list[str]:
    """crossed-audit's ``CONVENTION=CKPT`` (any registered convention's name, an answer task's or a code task's) as
    the schema's ``trained.CONVENTION``: a policy is named by the convention its training rewarded, and the schema
    keeps every convention's in one mapping, so a convention added later needs no field of its own."""
    from crossed_rlvr.rewards.code import CODE_CONVENTIONS
    from crossed_rlvr.rewards.conventions import CONVENTIONS

    out = []
    for arg in overrides:
        key, eq, value = arg.partition("=")
        out.append(f"++trained.{key}={value}" if eq and (key in CONVENTIONS or key in CODE_CONVENTIONS) else arg)
    return out


# A command's own spelling of some overrides, as its schema's keys: applied to the command line before Hydra reads it
SPELLINGS: dict[str, Callable[[list[str]], list[str]]] = {"crossed-audit": as_trained}


def spelled(command: str, overrides: list[str]) -> list[str]:
    """The overrides as the command's schema reads them (``SPELLINGS``)."""
    spell = SPELLINGS.get(command)
    return spell(overrides) if spell is not None else overrides


def hydra_app(command: str, config_name: str, run: Callable[[C], None],
              check: Callable[[C], None] | None = None) -> Callable[[], None]:
    """``main()`` of a Hydra command: help, composition against the schema, checks, then ``run(cfg)`` with the composed
    node (``C``: the node, or the schema a command reads it as; a command types it at its door). ``check``:
    the command's own check of its composed config, run with conf/checks.py's before any file is written."""
    if check is not None:
        COMMAND_CHECKS[command] = check

    def main() -> None:
        if any(a in ("--help", "-h") for a in sys.argv[1:]):
            print(help_text(command, config_name))
            return
        import hydra

        from crossed_rlvr.conf.ranges import check_overrides

        with one_line(command):  # the command line's numbers, before Hydra's own conversion can stop on them
            check_overrides(spelled(command, sys.argv[1:]), config_name)

        started = []

        @hydra.main(version_base="1.3", config_path=str(CONF), config_name=config_name)
        def _main(cfg: DictConfig) -> None:
            started.append(True)
            if job_run_dir(cfg):  # a single run was checked by ChecksFirst, before Hydra wrote anything
                refuse_or_pass(command, cfg)
                hold_or_refuse(command, str(cfg.run_dir))
            from crossed_rlvr.faults import writing
            from crossed_rlvr.numerics import apply

            with one_line(command):
                apply(str(cfg.numerics))  # before torch loads: this process's kernels and every one it starts
                with writing(Path(str(cfg.run_dir)), command):  # a fault of the machine: one line (faults.py)
                    run(cast(C, cfg))  # the node: a command that reads it as its schema types it at its door

        from crossed_rlvr.errors import BAD_INPUT
        from crossed_rlvr.interrupt import stops_cleanly

        argv = sys.argv  # read as the schema reads it (SPELLINGS), with the checks first; restored after
        sys.argv = with_checks_first([argv[0], *spelled(command, argv[1:])], command)
        try:
            stops_cleanly(command)(_main)()
        except SystemExit as stop:
            # Hydra exits 1 when it cannot compose the config (a preset or group option that does not exist, a key
            # the schema lacks): that is a bad command line, as argparse's, so it exits 2; once the job has started,
            # a status is the job's own
            if stop.code == 1 and not started:
                raise SystemExit(BAD_INPUT) from None
            raise
        finally:
            sys.argv = argv

    return main


def swept_dirname(job_overrides: Sequence[object] | None, *exclude: str) -> str:
    """The name of a multirun job's directory: only the overrides the sweep varies (``eval.temperature=0``),
    read with Hydra's own override parser from the command line; '/' becomes '_'."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [a for a in sys.argv[1:] if "=" in a and not a.startswith("-")]
    try:
        swept = {o.key_or_group for o in OverridesParser.create().parse_overrides(args) if o.is_sweep_override()}
    except Exception:  # noqa: BLE001 - an argument Hydra itself will reject; name the job by all overrides
        swept = {a.split("=", 1)[0].lstrip("+~") for a in args}
    keep = [str(o) for o in (job_overrides or []) if str(o).split("=", 1)[0].lstrip("+~") in swept - set(exclude)]
    return ",".join(keep).replace("/", "_")
