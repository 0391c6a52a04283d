"""Preflights for what only a cluster reveals, at ``stages=prepare`` and again at launch.

Each one is a line that names the fix, before anything is launched:

- ``tracking=online`` without wandb credentials: verl calls ``wandb.init`` inside ``fit()``, after the model
  is loaded and vLLM started, so a run without a key dies minutes in. Credentials are ``WANDB_API_KEY`` or
  the ``api.wandb.ai`` entry ``wandb login`` writes to ``~/.netrc``; nothing is sent to check them.
- ``tracking=online`` on a machine that cannot reach wandb's host (``WANDB_BASE_URL``, else api.wandb.ai):
  compute nodes often have no route out, and ``wandb.init`` would fail at the same late point. One HTTP
  request with a short time limit: any answer, whatever its status, shows the host can be reached.
- A model or dataset named by hub id that is not in the local Hugging Face cache: on first start verl's
  4 FSDP ranks and 4 vLLM servers would fetch the weights at once, or fail on a node without the network.
  ``crossed-study ... stages=fetch`` downloads them once into the cache (``HF_HOME``), and the launch
  scripts run with ``HF_HUB_OFFLINE=1`` so no rank reaches for the hub.
- A temporary folder whose path leaves no room for Ray's Unix sockets: Ray puts them at
  ``<RAY_TMPDIR or TMPDIR or /tmp>/ray/session_<date>_<pid>/sockets/plasma_store`` and refuses a path over
  107 bytes (the kernel's ``sun_path``), which a cluster's per-job TMPDIR can reach.
- No C compiler or no Python headers on a GPU node: Triton and vLLM compile kernels on first use, inside
  the rollout, minutes after the model loaded.
"""

from __future__ import annotations

import netrc
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import urlparse

# Ray's longest socket path below its temporary folder, and the most an AF_UNIX path holds
from crossed_rlvr.scratch import RAY_SOCKET_TAIL, SOCKET_PATH_MAX

if TYPE_CHECKING:
    from crossed_rlvr.conf.schema import StudyConf

# (task source) -> the hub dataset its loader reads when task.path is null (tasks/loaders.py)
HUB_DATASETS = {"gsm8k": "openai/gsm8k", "math500": "HuggingFaceH4/MATH-500"}


WANDB_HOST = "https://api.wandb.ai"
REACH_TIMEOUT_S = 5.0  # a host that answers at all answers within this; a silent firewall drop never does


def wandb_host() -> str:
    return os.environ.get("WANDB_BASE_URL") or WANDB_HOST


def wandb_credentials() -> bool:
    """Whether wandb would find an API key here (environment or netrc), without any network call."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(wandb_host()).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (netrc.NetrcParseError, OSError):
        return False


def unreachable(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """Why ``url`` gives no HTTP answer within ``timeout`` seconds (None: it answered, with any status)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:  # an answer (401, 404, ...): the host is there
        return None
    except TimeoutError:  # socket.timeout is TimeoutError since 3.10
        return f"no answer in {timeout:g} s"
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, TimeoutError):
            return f"no answer in {timeout:g} s"
        return str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as err:  # a reset connection, or a malformed WANDB_BASE_URL
        return str(err)


def tracking_problem(mode: str | None, timeout: float = REACH_TIMEOUT_S) -> str | None:
    if mode != "online":
        return None
    if not wandb_credentials():
        return ("tracking=online needs wandb credentials here and on every node (WANDB_API_KEY, or `wandb login`); "
                "or pass tracking=offline and `wandb sync` the run folders later")
    host = wandb_host()
    why = unreachable(host, timeout)
    if why is not None:
        return (f"tracking=online: wandb's host {host} cannot be reached from this machine ({why}); pass "
                "tracking=offline and `wandb sync` the run folders later from a machine that can reach it")
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


# a run's config: a command's schema (the study's), or a node or dict of it (an arm's launch settings, read back)
RunConfig = Union["StudyConf", Mapping[str, Any]]


def _part(cfg: object, key: str) -> Any:  # Any: whichever value the key holds
    """``cfg.key`` of a schema's dataclass or a mapping, None where it is absent."""
    return cfg.get(key) if isinstance(cfg, Mapping) else getattr(cfg, key, None)


def hub_ids(cfg: RunConfig) -> list[tuple[str, str, str]]:
    """(repo type, repo id, the key that names it) the run reads from the hub."""
    out = []
    model, task = _part(cfg, "model"), _part(cfg, "task")
    path = str(_part(model, "path") or "")
    if _part(model, "source") == "hub" and path and not Path(path).exists():
        out.append(("model", path, "model.path"))
    if not _part(task, "path") and _part(task, "source") in HUB_DATASETS:
        out.append(("dataset", HUB_DATASETS[_part(task, "source")], "task.path"))
    return out


def cache_problem(cfg: RunConfig, command: str = "crossed-study") -> str | None:
    cached = cached_repos()
    missing = [(kind, repo, key) for kind, repo, key in hub_ids(cfg) if (kind, repo) not in cached]
    if not missing:
        return None
    kind, repo, key = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return (f"{key}: the {kind} {repo} is not in this machine's Hugging Face cache{more}; download it once with "
            f"`{command} <the same overrides> stages=fetch` (the launch runs with HF_HUB_OFFLINE=1), or point {key} "
            "at a local copy")




def socket_path_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Ray's sockets would not fit under the temporary folder Ray picks (RAY_TMPDIR, else TMPDIR, else /tmp)."""
    where: Mapping[str, str] = os.environ if env is None else env
    name = next((k for k in ("RAY_TMPDIR", "TMPDIR") if where.get(k)), None)
    root = where[name] if name else "/tmp"
    if len(root.encode()) + RAY_SOCKET_TAIL <= SOCKET_PATH_MAX:
        return None
    return (f"{name}={root} ({len(root.encode())} bytes) leaves Ray's socket paths over {SOCKET_PATH_MAX} bytes; "
            f"export RAY_TMPDIR=/tmp/ray-$USER (any folder of at most {SOCKET_PATH_MAX - RAY_SOCKET_TAIL} bytes)")


def compiler_problem(include: str | None = None) -> str | None:
    """Triton's and vLLM's kernels compile on the node at first use: a C compiler and ``Python.h`` must be there."""
    import shutil
    import sysconfig

    include = include or sysconfig.get_paths()["include"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not (shutil.which("cc") or shutil.which("gcc")):
        return ("no C compiler (cc) on PATH: Triton and vLLM compile kernels on the GPU node at first use; install "
                "one (Debian/Ubuntu: apt install build-essential; conda: conda install gcc) or load its module")
    if not (Path(include) / "Python.h").is_file():
        return (f"no Python headers ({include}/Python.h): Triton and vLLM compile kernels against them at first use; "
                f"install them (Debian/Ubuntu: apt install python{version}-dev; conda: they come with python)")
    return None


def problems(cfg: RunConfig, command: str = "crossed-study") -> list[str]:
    """Every preflight's complaint, in order (empty: ready to launch)."""
    found = [tracking_problem(_part(_part(cfg, "tracking"), "mode")), cache_problem(cfg, command)]
    return [p for p in found if p]


def fetch(cfg: RunConfig) -> list[str]:
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
