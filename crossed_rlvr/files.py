"""Small file helpers shared by every stage: content hashes, atomic writes and the one JSON Lines reader.

Every stage boundary is a file on disk; writing through a temporary sibling and ``os.replace``
means an interrupted run never leaves a half-written file where a finished one is expected.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError


def settings(conf: object) -> Any:  # Any: a dict, a list or a value, as the config holds
    """A config (dataclasses, lists, dicts) as the plain dicts its settings hash and files hold: ``dataclasses.asdict``,
    less every field left unset (None) whose declared default is unset. An optional setting's None is the behaviour
    from before the setting existed, so adding one (its field alone) changes no earlier hash; a default with a value
    stays in every hash, since changing it changes what a run does."""
    if dataclasses.is_dataclass(conf) and not isinstance(conf, type):
        return {f.name: settings(value) for f in dataclasses.fields(conf)
                if (value := getattr(conf, f.name)) is not None or f.default is not None}
    if isinstance(conf, list | tuple):
        return [settings(x) for x in conf]
    if isinstance(conf, dict):
        return {k: settings(v) for k, v in conf.items()}
    return conf


def unset_out(value: Any) -> Any:  # Any: the settings' own JSON shape
    """``value`` without its unset (None) entries, at every depth: two settings records equal by it differ only in
    what :func:`settings` leaves out, so a record written before it left unset settings out means the same run."""
    if isinstance(value, dict):
        return {k: unset_out(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [unset_out(v) for v in value]
    return value


def config_sha256(obj: object) -> str:
    """The one hash of a config or any JSON value: keys sorted, values JSON cannot hold written as text. Stage
    stamps, a training run's config, an evaluation cell's settings and a tracked run's settings all use it, so one
    setting hashes the same everywhere."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def link_files(src: Path, dst: Path) -> None:
    """``dst`` holding ``src``'s files as hard links (copies across file systems): the same weights in two folders of
    one stage without a second write. Files here are only ever replaced whole, never written in place, so linked
    folders cannot drift apart; a link never crosses stages, whose outputs are checked and redone apart."""
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).unlink(missing_ok=True)
            try:
                os.link(f, dst / f.name)
            except OSError:
                shutil.copy2(f, dst / f.name)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # ranks writing the same file do not share a temp
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def atomic_write_json(path: str | Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_jsonl(path: str | Path, rows: list[dict[str, Any]], sort_keys: bool = False) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=sort_keys) + "\n" for r in rows))


def tree_sha256(path: str | Path, file_sha256: Callable[[Path], str] = sha256_file, skip: tuple[str, ...] = ()) -> str:
    """One hash over a directory's files (relative names and contents), or over one file; files named in
    ``skip`` are left out.

    wandb's folders are left out: tracking logs keep changing after a stage and are not its results."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "wandb" not in p.relative_to(path).parts
                    and p.name not in skip):
        h.update(str(f.relative_to(path)).encode() + b"\0" + file_sha256(f).encode())
    return h.hexdigest()


def policy_sha256(path: str | Path, file_sha256: Callable[[Path], str] = sha256_file) -> str:
    """The one hash of a policy's folder: its weights, tokenizer and config, never the records of the run that made
    it (``layout.RUN_RECORDS``: timings, pickled arguments), so an identical rebuild hashes the same."""
    from crossed_rlvr.layout import RUN_RECORDS

    return tree_sha256(path, file_sha256, skip=RUN_RECORDS)


@dataclass(frozen=True)
class Source:
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


class DuplicateKey(CrossedError, ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when a key repeats (``json`` would keep the last value without a word)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def input_problem(path: str | Path, folder_ok: bool = False) -> str | None:
    """Why ``path`` cannot be read as an input file (one phrase), or None: missing, a dangling or looping
    symbolic link, a folder (unless ``folder_ok``), a FIFO, socket or device (a read would block or never
    end), or unreadable."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return "a symbolic link to nothing" if p.is_symlink() else "no such file or folder"
    except OSError as err:
        return "a loop of symbolic links" if err.errno == errno.ELOOP else (err.strerror or str(err)).lower()
    if stat.S_ISDIR(st.st_mode):
        return None if folder_ok else "is a folder; expected a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, socket or device)"
    if not os.access(p, os.R_OK):
        return "cannot be read (permission denied)"
    return None


# What a failed write or read says, by errno: a full or read-only disk is the machine's, exit status 1.
DISK_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system",
               errno.EDQUOT: "disk quota exceeded", errno.EIO: "input/output error"}


def describe_os_error(err: OSError) -> tuple[str, int]:
    """One line for a file-system error (its path and what happened) and the exit status: 1 for the disk, 2 for
    a path the user gave that cannot be used."""
    path = err.filename if err.filename is not None else ""
    what = DISK_ERRORS.get(err.errno) if err.errno is not None else None
    if what is not None:
        return (f"{path}: {what}; nothing was half-written (finished files are kept: run the same command again "
                "once there is room or the disk is writable)", 1)
    known = {errno.ELOOP: "a loop of symbolic links", errno.EISDIR: "is a folder; expected a file",
             errno.ENOTDIR: "a part of the path is a file, not a folder", errno.ENOENT: "no such file or folder",
             errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
             errno.ENAMETOOLONG: "file name too long"}
    return f"{path}: {known.get(err.errno or 0, (err.strerror or str(err)).lower())}", 2


def json_lines(path: str | Path, error: type[Exception] = ValueError) -> Iterator[tuple[Any, Source]]:
    """The values of a JSON Lines file with their file and line; bytes that are not UTF-8 and lines that
    are not JSON are refused with the line named (every reader of JSON Lines input goes through here, raising its own ``error``)."""
    path = Path(path)
    problem = input_problem(path)
    if problem is not None:
        raise error(f"{path}: {problem}")
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            where = Source(str(path), n)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise error(f"{where}: not UTF-8 text (byte {err.start} of the line)") from None
            if line.strip():
                try:
                    yield json.loads(line, object_pairs_hook=_unique_keys), where
                except json.JSONDecodeError as err:
                    raise error(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
                except RecursionError:  # json's decoder recurses per nesting level
                    raise error(f"{where}: nested deeper than a JSON value may be read") from None
                except DuplicateKey as err:
                    raise error(f"{where}: key {err.args[0]!r} appears twice in one object (JSON keeps the last "
                                "silently; say which one is meant)") from None
