"""Preflights for what only a cluster reveals, at ``stages=prepare`` and again at launch.

Each one is a line that names the fix, before anything is launched:

- ``tracking=online`` without wandb credentials: verl calls ``wandb.init`` inside ``fit()``, after the model
  is loaded and vLLM started, so a run without a key dies minutes in. Credentials are ``WANDB_API_KEY`` or
  the ``api.wandb.ai`` entry ``wandb login`` writes to ``~/.netrc``; nothing is sent to check them.
- A model or dataset named by hub id that is not in the local Hugging Face cache: on first start verl's
  4 FSDP ranks and 4 vLLM servers would fetch the weights at once, or fail on a node without the network.
  ``crossed-study ... stages=fetch`` downloads them once into the cache (``HF_HOME``), and the launch
  scripts run with ``HF_HUB_OFFLINE=1`` so no rank reaches for the hub.
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# (task source) -> the hub dataset its loader reads when task.path is null (tasks/loaders.py)
HUB_DATASETS = {"gsm8k": "openai/gsm8k", "math500": "HuggingFaceH4/MATH-500"}


def wandb_credentials() -> bool:
    """Whether wandb would find an API key here (environment or netrc), without any network call."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (netrc.NetrcParseError, OSError):
        return False


def tracking_problem(mode: str | None) -> str | None:
    if mode == "online" and not wandb_credentials():
        return ("tracking=online needs wandb credentials here and on every node (WANDB_API_KEY, or `wandb login`); "
                "or pass tracking=offline and `wandb sync` the run folders later")
    return None


def cached_repos() -> set[tuple[str, str]]:
    """(repo type, repo id) of every repository in the local Hugging Face cache."""
    from huggingface_hub import scan_cache_dir

    # read here, not at huggingface_hub's import: the launch may set HF_HOME or HF_HUB_CACHE after it
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                     os.path.expanduser("~/.cache"), "huggingface")
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    try:
        return {(r.repo_type, r.repo_id) for r in scan_cache_dir(cache).repos}
    except Exception:  # noqa: BLE001 - no cache folder yet (CacheNotFound) or an unreadable one: nothing cached
        return set()


def hub_ids(cfg: Any) -> list[tuple[str, str, str]]:
    """(repo type, repo id, the key that names it) the run reads from the hub."""
    out = []
    model = cfg.get("model") or {}
    path = str(model.get("path") or "")
    if model.get("source") == "hub" and path and not Path(path).exists():
        out.append(("model", path, "model.path"))
    task = cfg.get("task") or {}
    if not task.get("path") and task.get("source") in HUB_DATASETS:
        out.append(("dataset", HUB_DATASETS[task.source], "task.path"))
    return out


def cache_problem(cfg: Any, command: str = "crossed-study") -> str | None:
    cached = cached_repos()
    missing = [(kind, repo, key) for kind, repo, key in hub_ids(cfg) if (kind, repo) not in cached]
    if not missing:
        return None
    kind, repo, key = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return (f"{key}: the {kind} {repo} is not in this machine's Hugging Face cache{more}; download it once with "
            f"`{command} <the same overrides> stages=fetch` (the launch runs with HF_HUB_OFFLINE=1), or point {key} "
            "at a local copy")


def problems(cfg: Any, command: str = "crossed-study") -> list[str]:
    """Every preflight's complaint, in order (empty: ready to launch)."""
    found = [tracking_problem((cfg.get("tracking") or {}).get("mode")), cache_problem(cfg, command)]
    return [p for p in found if p]


def fetch(cfg: Any) -> list[str]:
    """Download what the run reads from the hub into the local cache; the repositories fetched."""
    from huggingface_hub import snapshot_download

    done = []
    for kind, repo, key in hub_ids(cfg):
        try:
            snapshot_download(repo, repo_type=kind)
        except Exception as err:  # noqa: BLE001 - the hub client raises many types without the network
            raise FetchError(f"{key}: could not download the {kind} {repo} ({type(err).__name__}); stages=fetch needs "
                             "the network (HF_HUB_OFFLINE unset) and writes into HF_HOME") from None
        done.append(f"{kind} {repo}")
    return done


class FetchError(RuntimeError):
    pass
