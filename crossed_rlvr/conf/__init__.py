"""Hydra configs of every command; importing the package registers their typed schemas and the
resolver that names multirun job directories by the overrides a sweep varies."""

from omegaconf import OmegaConf

from crossed_rlvr.conf.schema import register


def _swept(job_overrides, *exclude):  # imported lazily: the app module imports Hydra's parser
    from crossed_rlvr.conf.app import swept_dirname

    return swept_dirname(job_overrides, *exclude)


register()
OmegaConf.register_new_resolver("crossed_swept", _swept, replace=True)
