"""Hydra configs of every command; importing the package registers their typed schemas and the
resolver that names multirun job directories by the overrides a sweep varies."""

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


def _swept(job_overrides, *exclude):  # imported lazily: the app module imports Hydra's parser
    from crossed_rlvr.conf.app import swept_dirname

    return swept_dirname(job_overrides, *exclude)


def _given(job_overrides, key, default):
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
