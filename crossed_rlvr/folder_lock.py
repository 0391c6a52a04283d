"""One writer per folder: a command that writes a run, evaluation or analysis folder holds it for its whole run.

Two runs into one folder (a second terminal, a resubmitted job, a sweep with a fixed ``run_dir``) would interleave
their stages' files, and which one dies, with a message about some file, is up to timing. So the writer takes an
advisory lock on a file in the folder (the way PostgreSQL refuses a second server on one data directory, naming
the holder) and a second command is refused before any work, in one line naming the holder (pid, host, command,
start time) and the way on, exit 2.

- **Stale locks.** The lock is the kernel's (``flock``): it goes with its holder's process, however that ended
  (kill -9 included). The holder's line stays in the file until a clean exit empties it, so a line found under a
  free lock is a run that died: it is taken over and said so.
- **One writer, several processes.** A command's own children (the stages it starts as commands, verl's launch
  scripts, Ray workers started by it) inherit the folders it holds through the environment and count as its
  writer, not a second one; a folder inside a held one is held too. Under torchrun, rank 0 holds the folder for
  all the command's ranks.
- ``fcntl.flock`` is used directly rather than ``filelock``: the refusal needs the holder's identity written in
  the lock file itself, which ``filelock`` does not keep.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import FOLDER_LOCK

# the folders this process tree holds, os.pathsep-separated: read by the commands it starts
HELD_ENV = "CROSSED_RLVR_HELD_FOLDERS"

_held: dict[Path, int] = {}  # folder -> the open, locked file's descriptor (open for the process's life)


class FolderInUse(CrossedError):
    """Another live command is writing the folder."""


def _inherited() -> list[Path]:
    return [Path(p) for p in os.environ.get(HELD_ENV, "").split(os.pathsep) if p]


def holder_of(folder: Path) -> dict[str, object] | None:
    """The holder line a folder's lock file keeps (None: no lock file, or an empty one)."""
    try:
        text = (folder / FOLDER_LOCK).read_text()
    except OSError:
        return None
    return _parse(text)


def _parse(text: str) -> dict[str, object] | None:
    try:
        value = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def describe(holder: dict[str, object] | None) -> str:
    if not holder:
        return "a process that has not yet said who it is"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(str(holder.get("started", 0)))))
    return f"pid {holder.get('pid')} on {holder.get('host')}, `{holder.get('command')}`, started {started}"


def hold(folder: str | Path, command: str, args: list[str] | None = None) -> None:
    """Hold ``folder`` (made if missing) for this process's life, or raise :class:`FolderInUse` naming the holder
    (``command`` and ``args``, the command line as the user gave it; default ``sys.argv[1:]``). A folder this
    process tree already holds, or one inside it, is held already."""
    folder = Path(folder).resolve()
    if any(folder == p or p in folder.parents for p in [*_held, *_inherited()]):
        return
    if int(os.environ.get("RANK", "0") or 0) > 0:  # torchrun's other ranks: one command, rank 0 its writer
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / FOLDER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
        os.close(fd)
        raise FolderInUse(f"{folder} is being written by another run ({describe(holder)}): wait for it to end, "
                          "or give this run another run_dir (one writer per folder)") from None
    stale = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
    if stale:
        print(f"{command}: {folder}: taking over the lock of a run that ended without finishing "
              f"({describe(stale)})", file=sys.stderr, flush=True)
    line = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                       "command": " ".join([command, *(sys.argv[1:] if args is None else args)])})
    os.ftruncate(fd, 0)
    os.pwrite(fd, (line + "\n").encode(), 0)
    _held[folder] = fd
    os.environ[HELD_ENV] = os.pathsep.join(str(p) for p in [*_inherited(), folder])
    if len(_held) == 1:
        atexit.register(release_all)


def release(folder: str | Path) -> None:
    """Empty the holder line (a clean end: nothing to take over) and let the folder go."""
    folder = Path(folder).resolve()
    fd = _held.pop(folder, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):  # a vanished or read-only folder: the lock goes with the descriptor anyway
        os.ftruncate(fd, 0)
    os.close(fd)
    os.environ[HELD_ENV] = os.pathsep.join(str(p) for p in _inherited() if p != folder)


def release_all() -> None:
    for folder in list(_held):
        release(folder)
