"""Every command's temporary files in one folder of its own, removed when it ends, interrupted or not.

The libraries a command runs leave files in the system's temporary folder and never remove them: Ray's session
folders, vLLM's ``vllm_dist_*`` rendezvous files and ZMQ sockets (named by UUIDs), torchrun's ``torchelastic_*``
folders, verl's ``ckpt_*.lock`` files, wandb's staging folders and sockets. A lab machine running studies for
weeks fills its ``/tmp`` with them. Each of them asks Python's ``tempfile`` (or ``TMPDIR``, which Ray reads too)
where to write, so the first command of a process tree points ``TMPDIR`` at ``<system tmp>/crossed-<pid>`` for
itself and every process it starts, and removes that folder when it ends (``own_tmp``); commands it starts find
the folder in their environment and share it. A folder left by a killed command (kill -9 runs no cleanup) is
removed by the next command that starts, once its process is gone.

The name is short on purpose: Ray's sockets live under it, and a socket's path may not exceed 107 bytes (where
the system's folder is already too long for that, Ray keeps it: ``RAY_TMPDIR``).
What must outlive a command stays where it was: the sandboxes' per-uid locks (``system_tmp``), shared by every
command on the machine; torch's compiled kernels go to the user's cache (``TORCHINDUCTOR_CACHE_DIR``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from crossed_rlvr.layout import UserCache

OWN = "CROSSED_RLVR_TMP"  # the folder of the command that owns this process tree's temporary files
SYSTEM = "CROSSED_RLVR_SYSTEM_TMP"  # the system's temporary folder, as it was before a command replaced TMPDIR
PREFIX = "crossed-"
WANDB_SERVICE = "WANDB_SERVICE"  # where wandb's service, once started, listens (its socket under TMPDIR)
# Ray's longest socket path below its temporary folder: "/ray/" + "session_2026-12-02_01-46-52_467512_4194304"
# (42: the date, microseconds and a 7-digit pid) + "/sockets/plasma_store" (21)
RAY_SOCKET_TAIL = 5 + 42 + 21
SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX path, as Ray checks them (validate_socket_filename)


def system_tmp() -> Path:
    """The system's temporary folder (where TMPDIR pointed before a command gave its own): for files every
    command on the machine must share."""
    return Path(os.environ.get(SYSTEM) or tempfile.gettempdir())


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(base: Path) -> None:
    """The folders ``crossed-<pid>`` under ``base`` whose process has ended (killed without cleanup)."""
    with contextlib.suppress(OSError):
        for folder in base.glob(f"{PREFIX}*"):
            pid = folder.name[len(PREFIX):]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)) and folder.owner() == _user():
                shutil.rmtree(folder, ignore_errors=True)


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


@contextlib.contextmanager
def own_tmp() -> Iterator[Path]:
    """``TMPDIR`` (and Python's ``tempfile``) pointed at this command's own folder while it runs; the folder and
    everything in it removed when it ends. Inside a command that has one already: that one."""
    given = os.environ.get(OWN)
    if given and Path(given).is_dir():
        yield Path(given)
        return
    base = Path(tempfile.gettempdir())
    remove_stale(base)
    folder = base / f"{PREFIX}{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)  # an earlier process's of the same pid, ended without cleanup
    folder.mkdir()
    os.chmod(folder, 0o711)  # others may pass through, not list it: the code sandbox's uids reach their job folders
    keys = ("TMPDIR", OWN, SYSTEM, "TORCHINDUCTOR_CACHE_DIR", "RAY_TMPDIR", WANDB_SERVICE)
    before, cached = {k: os.environ.get(k) for k in keys}, tempfile.tempdir
    os.environ.update({"TMPDIR": str(folder), OWN: str(folder), SYSTEM: str(base)})
    if len(str(folder).encode()) + RAY_SOCKET_TAIL > SOCKET_PATH_MAX:  # Ray's sockets would not fit under it
        os.environ.setdefault("RAY_TMPDIR", str(base))  # Ray where it was (train/preflight.py judges that folder)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(UserCache.default().torchinductor))
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        if before[WANDB_SERVICE] is None and os.environ.get(WANDB_SERVICE) and "wandb" in sys.modules:
            # the service this command started listens on a socket in the folder: it ends with the command, so that
            # nothing started later connects to a socket that is gone
            with contextlib.suppress(Exception):
                sys.modules["wandb"].teardown()
        tempfile.tempdir = cached
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)
