"""Hydra configs of every command; importing the package registers their typed schemas and the resolvers that
name multirun job directories by the overrides a sweep varies (crossed_rlvr/command.py)."""

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


def _swept(job_overrides: Sequence[object] | None, *exclude: str) -> str:  # lazily: it imports Hydra's parser
    from crossed_rlvr.command import swept_dirname

    return swept_dirname(job_overrides, *exclude)


def _given(job_overrides: Sequence[object] | None, key: str, default: object) -> object:
    from crossed_rlvr.command import given_override

    return given_override(job_overrides, key, default)


register()
OmegaConf.register_new_resolver("crossed_swept", _swept, replace=True)
OmegaConf.register_new_resolver("crossed_given", _given, replace=True)
