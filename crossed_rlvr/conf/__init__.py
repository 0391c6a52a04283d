"""Hydra configs of every command; importing the package registers their typed schemas and the
resolver that names multirun job directories by the overrides a sweep varies."""

import re
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import register

CONF_DIR = Path(__file__).resolve().parent


def group_options(group: str) -> list[str]:
    """The options of a config group (``task`` -> ``arith_tiny``, ``gsm8k`` ...), as Hydra lists them."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def group_file(group: str, option: str) -> Path:
    """The YAML file of one option of a config group (``conf/<group>/<option>.yaml``)."""
    return CONF_DIR / group / f"{option}.yaml"


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


def _swept(job_overrides: Sequence[object] | None, *exclude: str) -> str:  # imported lazily: the app module imports Hydra's parser
    from crossed_rlvr.conf.app import swept_dirname

    return swept_dirname(job_overrides, *exclude)


def _given(job_overrides: Sequence[object] | None, key: str, default: object) -> object:
    """The value of ``key=...`` among a job's command-line overrides, else ``default`` (crossed-train -m:
    a ``run_dir`` given on the command line is the sweep's root)."""
    for o in job_overrides or []:
        name, _, value = str(o).partition("=")
        if name.lstrip("+~") == key and value:
            return value
    return default


register()
OmegaConf.register_new_resolver("crossed_swept", _swept, replace=True)
OmegaConf.register_new_resolver("crossed_given", _given, replace=True)
