"""Ctrl-C ends every command with one line that says how to go on, never a traceback; so does a
file-system error that names its path (a full or read-only disk: exit 1; a path that cannot be used: exit 2),
and bad input (``crossed_rlvr.errors.CrossedError``: exit 2).

A terminal's Ctrl-C reaches the whole foreground process group: the command's own worker processes
ignore it (``ignore_interrupts`` as their initializer) and are stopped by their parent, which prints the
one line. Exit status 130, the shell's convention for a SIGINT.

A cluster stops a command with SIGTERM instead (SLURM at a time limit, on preemption and on ``scancel``;
Kubernetes on eviction), often sent to the command's process alone: it is handled as Ctrl-C, and the command
first stops every process below it (multiprocessing workers, torchrun's ranks, vLLM engines, the local Ray
cluster it started and Ray's workers: SIGTERM, then SIGKILL to any left after ``GRACE_S``), since nothing else
would. Exit status 143 (128 + 15).

On SIGTERM the processes below that handle it themselves (a worker command, torchrun, Ray's daemons, vLLM's
engines) are stopped first, each stopping its own; then the way out runs as for Ctrl-C (pools shut down by their
owners), and whatever is left is stopped last. Ray's driver installs a SIGTERM handler of its own at ``ray.init``:
the command's is put back after it (``reclaim``).

SIGUSR1 is SLURM's warning before a time limit (``--signal=B:USR1@<s>``): a training arm saves a resumable
checkpoint at its next update and stops (``save_requested``, read by the arm's trainer), so that the requeued
job loses at most one update; a command with no arm training stops at once as on SIGTERM. Exit status 138
(128 + 10). The signal reaches the arm's own processes wherever they run: a process that catches SIGUSR1 passes
it to each process below it that catches it too (the processes training an arm; others, whose default on
SIGUSR1 is to die, are left alone).

Each command's temporary files live in a folder of its own, removed when it ends (crossed_rlvr/scratch.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from crossed_rlvr.errors import BAD_INPUT, CrossedError
from crossed_rlvr.faults import MachineFault

F = TypeVar("F", bound=Callable[..., Any])

# How each command goes on after an interruption: what it keeps and what a rerun does.
RESUME = {
    "crossed-score": "run the same command again: the chunks already scored are kept and the rest scored "
                     "(the table is written only when complete)",
    "crossed-eval": "run the same command again: finished response files are kept, the rest generated",
    "crossed-study": "run the same command again: every finished stage is reused, and an arm in training goes on "
                     "from its last saved update (recipe.save_every)",
    "crossed-train": "run the same command again: the arm goes on from its last saved update (recipe.save_every; "
                     "0: from its initial policy)",
    "crossed-sft": "run the same command again: a model is saved only when complete, so it starts again",
    "crossed-analyze": "run the same command again: nothing is written until the analysis is complete",
    "crossed-import": "run the same command again: the output is written only when complete",
    "crossed-calibrate": "run the same command again: every saved label is kept",
    "crossed-rescore": "run the same command again: the output is written only when complete",
    "crossed-match": "run the same command again",
    "crossed-rlvr": "run the same command again",
}


# how long the processes below a stopped command get to end on SIGTERM before they are killed
GRACE_S = 5.0
# the exit status of a command ended by each signal (the shell's 128 + the signal's number)
STATUS: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGUSR1: 138}
WHY: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM",
       signal.SIGUSR1: "stopped by SIGUSR1 (a time limit's warning)"}


class Stopped(KeyboardInterrupt):
    """A signal that stops the command, raised in its main thread: handled on the same path as Ctrl-C (every
    ``except KeyboardInterrupt`` and ``finally`` on the way runs), with its own exit status."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    def __reduce__(self) -> tuple[type, tuple[int]]:  # raised in a pool's worker, re-raised in its parent
        return (Stopped, (self.signum,))


class _State:
    """This process's handling: whose handlers were installed (a forked child inherits them, not the role), whether
    SIGUSR1 asked for a save, how many arms it is training now."""

    owner: int | None = None
    signum: int | None = None  # the signal that is stopping it (a library may re-raise it as a plain KeyboardInterrupt)
    save_requested = False
    training = 0
    pass_usr1 = True  # whether SIGUSR1 goes on to the processes below that catch it (else: stop at once)


_state = _State()


def save_requested() -> bool:
    """Whether SIGUSR1 asked this process to save a checkpoint at the next update and stop."""
    return _state.save_requested


class training:
    """Marks the span in which this process trains an arm that reads ``save_requested`` at each update: a SIGUSR1
    then waits for that save instead of stopping the command at once."""

    def __enter__(self) -> None:
        _state.training += 1

    def __exit__(self, *exc: object) -> None:
        _state.training -= 1


def ignore_interrupts() -> None:
    """Initializer of worker processes: the parent handles Ctrl-C and stops them; SIGTERM, which the parent sends
    them, ends them as by default (a forked worker would otherwise inherit the parent's handler)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def training_worker() -> None:
    """Initializer of a worker process that trains arms: as ``ignore_interrupts``, and SIGUSR1 (passed on by the
    parent) asks its arm to save at the next update and stop."""
    ignore_interrupts()
    _state.owner = os.getpid()
    signal.signal(signal.SIGUSR1, _on_usr1)


def _proc_status(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as fields (empty where the process is gone, or off Linux)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    except OSError:
        return {}


def descendants(root: int | None = None) -> list[int]:
    """The live processes below ``root`` (this one by default), parents before their children, read from
    ``/proc`` (none off Linux)."""
    children: dict[int, list[int]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        status = _proc_status(pid)
        if status and status.get("State", "").split()[:1] != ["Z"]:
            children.setdefault(int(status.get("PPid", "0")), []).append(pid)
    found, todo = [], [os.getpid() if root is None else root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def _alive(pid: int) -> bool:
    status = _proc_status(pid)
    return bool(status) and status.get("State", "").split()[:1] != ["Z"]


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _tracker(pid: int) -> bool:
    """Whether ``pid`` is multiprocessing's resource tracker: it ignores SIGTERM and ends by itself once this
    process has ended (removing what its workers left registered); killed first, it is started again at this
    process's next unregistration and prints a traceback for each."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"multiprocessing.resource_tracker" in fh.read()
    except OSError:
        return False


def _ray(pid: int) -> bool:
    """Whether ``pid`` is one of Ray's processes (its daemons, its workers): a local cluster is stopped by its
    driver's ``ray.shutdown``, at once, where SIGTERM keeps its daemons for seconds."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            comm = fh.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        return False
    return comm in ("gcs_server", "raylet") or comm.startswith("ray::") or b"/ray/" in cmdline


def stop_descendants(grace_s: float = GRACE_S, catching: bool = False) -> None:
    """SIGTERM (and SIGCONT, for one stopped) to every process below this one, SIGKILL to those left after
    ``grace_s``: a command ends with nothing of its own left running (multiprocessing's resource tracker ends
    with it: ``_tracker``). Processes that start meanwhile (a pool replacing a worker) are found on a second
    pass. ``catching``: only the processes that handle SIGTERM themselves (a worker command, torchrun, vLLM's
    engines), each stopping its own; pool workers are left to their pool's shutdown, Ray's to ``ray.shutdown``."""
    for _ in range(2):
        procs = [pid for pid in descendants() if not _tracker(pid)
                 and (not catching or (_catches(pid, signal.SIGTERM) and not _ray(pid)))]
        if not procs:
            return
        for pid in procs:
            _send(pid, signal.SIGTERM)
            _send(pid, signal.SIGCONT)
        deadline = time.monotonic() + grace_s
        while any(map(_alive, procs)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in filter(_alive, procs):
            _send(pid, signal.SIGKILL)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: ``SigCgt`` in ``/proc/<pid>/status``)."""
    caught = _proc_status(pid).get("SigCgt")
    return caught is not None and bool(int(caught, 16) >> (signum - 1) & 1)


def _on_term(signum: int, frame: object) -> None:
    if os.getpid() != _state.owner:  # a forked child that inherited the handler: end as by default
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    # first the processes below that stop themselves (and theirs): the way out then shuts the pools down and Ray's
    # local cluster (each ``finally`` on it runs), and ``stops_cleanly`` stops whatever is left
    _state.signum = signum
    stop_descendants(catching=True)
    raise Stopped(signum)


def _on_usr1(signum: int, frame: object) -> None:
    if os.getpid() != _state.owner:
        return  # a forked child (a data loader's, a pool's): the arm's own process reads the request
    _state.save_requested = True
    passed = False
    for pid in descendants() if _state.pass_usr1 else []:
        if _catches(pid, signum):
            _send(pid, signum)
            passed = True
    if not passed and not _state.training and threading.current_thread() is threading.main_thread():
        _state.signum = signum  # no arm here or below to save: stop now, as on SIGTERM
        stop_descendants(catching=True)
        raise Stopped(signum)


def handle_signals(pass_usr1: bool = True) -> None:
    """SIGTERM and SIGUSR1 handled in this process (its main thread only: Python's rule for handlers).
    ``pass_usr1=False``: no process below reads a save request (verl's Ray workers), so SIGUSR1 stops at once."""
    if threading.current_thread() is not threading.main_thread():
        return
    _state.owner, _state.pass_usr1 = os.getpid(), pass_usr1
    _state.signum, _state.save_requested = None, False  # a command's own: none from one run before it in-process
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGUSR1, _on_usr1)


def reclaim() -> None:
    """This process's handlers again, after a library replaced them: Ray's driver installs its own on SIGTERM at
    ``ray.init`` (a stack trace, then death by the signal, its workers and the local cluster left to themselves)."""
    if _state.owner == os.getpid() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)
        signal.signal(signal.SIGUSR1, _on_usr1)


def stopped_by(returncode: int) -> None:
    """A worker command's exit status read back by the command that ran it: a worker ended by a signal this
    command also got (it passes SIGTERM and SIGUSR1 on) stops this command the same way. After a SIGUSR1 any
    failure counts as the stop it asked for (torchrun reports its ranks' saved stop as its own failure)."""
    if returncode == 0:
        return
    if _state.save_requested:
        raise Stopped(signal.SIGUSR1)
    for signum in (signal.SIGINT, signal.SIGTERM):
        if returncode in (STATUS[signum], -signum):
            raise Stopped(signum)


def stops_cleanly(command: str, quiet: bool = False) -> Callable[[F], F]:
    """Wrap a command's ``main``: a KeyboardInterrupt becomes one line on stderr and exit status 130.
    ``quiet`` for worker programs whose parent prints the line."""

    def wrap(main: F) -> F:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> Any:
            from crossed_rlvr.scratch import own_tmp

            handle_signals()
            with own_tmp():  # the command's temporary files, removed when it ends (scratch.py)
                return _guarded(main, *args, **kwargs)

        def _guarded(main: F, *args: Any, **kwargs: Any) -> Any:
            try:
                return main(*args, **kwargs)
            except CrossedError as err:  # bad input: its one line (errors.py)
                if quiet:
                    raise
                print(f"{command}: {err}", file=sys.stderr, flush=True)
                raise SystemExit(BAD_INPUT) from None
            except MachineFault as err:  # a fault of the machine (faults.py): one line, exit 1
                if quiet:
                    raise
                print(f"{command}: {err}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None
            except KeyboardInterrupt as err:  # Ray's ray.get re-raises a signal's exception as a plain one
                signum = err.signum if isinstance(err, Stopped) else _state.signum or signal.SIGINT
                stop_descendants()  # whatever its workers' owners did not stop on the way out
                if not quiet:
                    print(f"{command}: {WHY[signum]}; {RESUME.get(command, 'run the same command again')}.",
                          file=sys.stderr, flush=True)
                raise SystemExit(STATUS[signum]) from None
            except OSError as err:  # a file-system error with its path (full or read-only disk, a bad path)
                if quiet or err.filename is None:
                    raise
                from crossed_rlvr.files import describe_os_error

                line, status = describe_os_error(err)
                print(f"{command}: {line}", file=sys.stderr, flush=True)
                raise SystemExit(status) from None

        return run  # type: ignore[return-value]

    return wrap


def end_process(status: int = 0) -> NoReturn:
    """End a command's process once its work is done: its exit handlers run (logging's, the reward pool's, wandb's),
    then the process ends without the interpreter's teardown of every object it loaded. After crossed-eval had
    written its last file, tearing down vLLM's engine and torch took ~3 s of a 33 s command (measured on 2 cores).
    Only when this is the one thread left: Python's own exit waits for another thread, which may still be writing."""
    import atexit

    if threading.active_count() > 1:
        sys.exit(status)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
