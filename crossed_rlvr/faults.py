"""A fault of the machine under a running command ends in one line, with nothing lost.

A full disk, a read-only or vanished folder, a permission error, an interrupted network share or a killed worker
is not a bug: the user is shown one line naming the folder, what was being written and what to do, exit 1, while
the original error (a traceback, often from a library: safetensors reports a full disk in Rust's words) is kept in
the command's log. Every stage writes into temporary files moved into place when complete (files.py, the stage
stamps), so what finished before the fault is kept and the same command run again goes on from there.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import signal
import subprocess
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crossed_rlvr.errors import RunFailure

# what each fault is, said to the user, and what to do about it
FAULTS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("out of disk space", "free space on that disk (or give another run_dir)"),
    errno.EDQUOT: ("over the disk quota", "free space within the quota (or give another run_dir)"),
    errno.EROFS: ("the file system is read-only", "make it writable (or give another run_dir)"),
    errno.EACCES: ("permission denied", "give this user write permission there (or give another run_dir)"),
    errno.EPERM: ("operation not permitted", "give this user write permission there (or give another run_dir)"),
    errno.EIO: ("an input/output error (a failing disk or an interrupted network share)",
                "check the disk or the share's mount"),
    errno.ESTALE: ("the network share went away (stale file handle)", "remount the share"),
    errno.ENOTCONN: ("the network share is not connected", "remount the share"),
    errno.ENOENT: ("a folder it was writing vanished", "leave the run folder in place while the command runs"),
}
# libraries that report a failed write in their own words (safetensors' Rust I/O errors, torch's zip writer)
WORDS: tuple[tuple[str, int], ...] = (
    ("no space left on device", errno.ENOSPC), ("os error 28", errno.ENOSPC),
    ("disk quota exceeded", errno.EDQUOT), ("os error 122", errno.EDQUOT),
    ("read-only file system", errno.EROFS), ("os error 30", errno.EROFS),
    ("permission denied", errno.EACCES), ("os error 13", errno.EACCES),
    ("stale file handle", errno.ESTALE), ("input/output error", errno.EIO), ("os error 5", errno.EIO),
)


class MachineFault(RunFailure):
    """A fault of the machine, said in one line: the command exits ``RUN_FAILED`` (the stages finished before are
    kept)."""


def fault_errno(err: BaseException) -> int | None:
    """The fault behind ``err`` or one of the errors it was raised from (None: not a fault of the machine)."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in FAULTS:
            return cur.errno
        text = str(cur).lower()
        for words, code in WORDS:
            if words in text:
                return code
        cur = cur.__cause__ or cur.__context__
    return None


def killed_by(err: BaseException) -> str | None:
    """The signal that killed a worker command (``CalledProcessError`` with a negative status), by name."""
    if isinstance(err, subprocess.CalledProcessError) and err.returncode < 0:
        try:
            return signal.Signals(-err.returncode).name
        except ValueError:
            return f"signal {-err.returncode}"
    return None


def keep_in_log(err: BaseException) -> None:
    """The original error, whole, in the command's log file (Hydra's job log), not on the console. The log may sit
    on the disk that is full or gone: then the traceback is lost, but neither logging's own "--- Logging error ---"
    traceback reaches the console nor an error about the log takes the place of the one line about the fault."""
    record = logging.LogRecord("crossed_rlvr", logging.ERROR, __file__, 0, "%s", (
        "".join(traceback.format_exception(type(err), err, err.__traceback__)),), None)
    loud, logging.raiseExceptions = logging.raiseExceptions, False  # a failed write: dropped, not printed
    try:
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.FileHandler):
                with contextlib.suppress(OSError):  # a closed log reopened on a full disk fails outside emit's guard
                    handler.handle(record)
    finally:
        logging.raiseExceptions = loud


def free_gb(path: Path) -> float | None:
    """Free space on the file system that holds ``path`` (or its nearest existing parent)."""
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free / 1e9
        except OSError:
            continue
    return None


# the attribute ``at`` sets on an error leaving its block: what was being written (read by ``writing``)
WRITING_AT = "crossed_rlvr_writing"


@contextmanager
def at(written: str) -> Iterator[None]:
    """Name what the block writes (``the cell X``) on an error that leaves it, so that the one line of the
    ``writing`` around it says where the fault came (an inner name wins: it is the nearer one)."""
    try:
        yield
    except Exception as err:
        if not hasattr(err, WRITING_AT):
            with contextlib.suppress(AttributeError):  # an error type that takes no attribute: the line says less
                setattr(err, WRITING_AT, written)
        raise


def describe(folder: Path, what: str, code: int, needed_gb: float | None = None, written: str | None = None) -> str:
    fault, todo = FAULTS[code]
    if code in (errno.ENOSPC, errno.EDQUOT):
        free = free_gb(folder)
        room = f"{free:.2f} GB free" if free is not None else "free space unknown"
        if needed_gb is not None:
            todo = f"free at least {needed_gb:.2f} GB there ({room} now; or give another run_dir)"
        else:
            todo = f"{todo}; {room} now"
    return (f"{stopped(folder, what, written)}: {fault}. What finished before is kept: {todo}, then run the same "
            "command again (the original error is in the command's log)")


def stopped(folder: Path, what: str, written: str | None) -> str:
    """The start of a fault's one line: the folder, what stopped and, where ``at`` named it, what it was writing."""
    return f"{folder}: {what} stopped" + (f" writing {written}" if written else "")


@contextmanager
def writing(folder: Path, what: str, needed_gb: float | None = None) -> Iterator[None]:
    """Turn a fault of the machine inside the block into :class:`MachineFault` (one line), the original kept in the
    log; any other error passes unchanged. ``needed_gb``: what the block writes, where it can be known before."""
    try:
        yield
    except MachineFault:
        raise
    except Exception as err:
        code = fault_errno(err)
        signal_name = killed_by(err) if code is None else None
        if code is None and signal_name is None:
            raise
        keep_in_log(err)
        written = getattr(err, WRITING_AT, None)
        if code is not None:
            raise MachineFault(describe(folder, what, code, needed_gb, written)) from err
        raise MachineFault(f"{stopped(folder, what, written)}: a worker process was killed ({signal_name}; out of "
                           "memory, or stopped by hand or by the scheduler). What finished before is kept: run the "
                           "same command again (the original error is in the command's log)") from err
