"""Run untrusted code in a fresh process isolated by the operating system, never in a Python process of ours.

Every run is ``[setpriv to the slot's uid] prlimit ... bwrap ... /usr/bin/python3 -I -S /harness.py FD``:

- **bubblewrap** with every namespace unshared: its own network namespace (only a loopback interface, checked at
  start-up), process namespace (when the harness ends, the kernel kills whatever it left behind), mount namespace
  that holds read-only ``/usr`` and the job's folder and a small private ``/tmp`` (the one writable place: the
  root is remounted read-only), nothing of the project, the run directory or any home folder; no further user namespaces; a new session (no terminal to write into). The
  harness is the namespace's pid 1 (``--as-pid-1``): bubblewrap's own reaper there leaves the uid's process count
  raised for about a second after each run (measured: five quick runs used up a budget of 8), and when pid 1
  ends, the kernel ends everything else inside.
- **an unprivileged host uid per worker slot** (when we run as root): as root ``RLIMIT_NPROC`` is ignored, so only
  another uid contains a fork bomb, and one uid per slot keeps one sample's bomb from using up its neighbours'
  process budget. Run as an ordinary user, every slot runs as that user with the user's current process count plus
  the budget as its limit: contained, but shared with the user's other processes (weaker; said in the docs).
- **rlimits** on address space, CPU seconds, processes, file size, open files and core files (``prlimit``, applied
  before bubblewrap starts, inherited by everything inside).
- **a wall-clock limit**, enforced from outside: the sandbox's pid 1 is killed (and with it everything inside),
  then the whole process group. Before a slot's uid is used again, no process of it may be left.
- Debian's system ``python3`` with the standard library: an interpreter an unprivileged uid can read.

Threads launch the runs (subprocesses: never a fork of a process that holds torch); each run reads its results
from a pipe, at most ``Limits.output_mb``, and may be stopped early by the caller (EvalPlus's fast check).
"""

from __future__ import annotations

import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError

HARNESS = Path(__file__).with_name("harness.py")
PYTHON = "/usr/bin/python3"
UID_BASE = 60001  # the slots' host uids: UID_BASE, UID_BASE + 1, ... (no account needs to exist)
STDERR_CAP = 16_384


class SandboxUnavailable(CrossedError, RuntimeError):
    """The sandbox cannot start on this machine: code is not scored at all (never scored as the model's failure)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. ``memory_mb`` is per process (RLIMIT_AS; EvalPlus's 4 GB), so a run's memory is at most
    ``processes`` times it; ``cpu_s`` bounds CPU seconds and ``wall_s`` the time the run is waited for."""

    wall_s: float = 60.0
    cpu_s: int = 120
    memory_mb: int = 4096
    processes: int = 8
    file_mb: int = 16
    open_files: int = 64
    tmp_mb: int = 64
    output_mb: int = 64

    def key(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Run:
    """What came back from one run: the results lines after the harness's ready line, and how the run ended.
    ``ended`` is ``exited`` (the harness ran to its end or the code ended it), ``stopped`` (the caller stopped it
    early), ``wall`` (killed at the wall-clock limit), ``output`` (it wrote more than the cap) or ``sandbox-error``
    (no ready line: the sandbox itself failed, and ``detail`` holds its stderr)."""

    ended: str
    lines: list[dict[str, Any]] = field(default_factory=list)
    bad_line: bool = False
    returncode: int | None = None
    detail: str = ""
    seconds: float = 0.0


def _start(cmd: Callable[[int], list[str]]) -> tuple[int, subprocess.Popen]:
    """Start one sandboxed run; returns the read end of its results pipe and the process."""
    read_fd, write_fd = os.pipe()
    try:
        # the pipe keeps its number in the child (pass_fds), and the harness is told it
        proc = subprocess.Popen(cmd(write_fd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, pass_fds=(write_fd,), start_new_session=True,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    except FileNotFoundError as err:
        os.close(read_fd)
        os.close(write_fd)
        raise SandboxUnavailable(f"cannot start the code sandbox: {err.filename} is not installed "
                                 "(Debian: apt-get install bubblewrap util-linux)") from err
    os.close(write_fd)
    return read_fd, proc


def _reap(proc: subprocess.Popen, run: Run) -> None:
    """End the run if it still runs (the sandbox's pid 1 first), and record its exit status."""
    if proc.poll() is None:
        _end(proc)
    try:
        run.returncode = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        run.returncode = proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


class _Results:
    """The harness's result lines as they arrive through the pipe: the first must be its ready line, each later one
    a JSON object; a line may run to megabytes, so the buffer grows in place and is split only when a line ended."""

    def __init__(self, run: Run, stop: Callable[[dict[str, Any]], bool] | None) -> None:
        self.run, self.stop = run, stop
        self.buf = bytearray()
        self.ready = False

    def feed(self, chunk: bytes) -> bool:
        """Take one chunk; True when the run is to end (a line that breaks the protocol, or ``stop`` said so)."""
        self.buf += chunk
        if b"\n" not in chunk:  # no line ended: nothing to split (a long line is not rescanned)
            return False
        *complete, rest = self.buf.split(b"\n")
        self.buf = bytearray(rest)
        for raw in complete:
            try:
                line = json.loads(raw)
                ok = isinstance(line, dict)
            except ValueError:
                ok = False
            if not ok or (not self.ready and line != {"ready": 1}):
                self.run.bad_line = True
                return True
            if not self.ready:
                self.ready = True
                continue
            self.run.lines.append(line)
            if self.stop is not None and self.stop(line):
                self.run.ended = "stopped"
                return True
        return False


class Sandbox:
    """Runs jobs for the harness, ``slots`` at a time, each slot under its own uid. :meth:`check` runs the
    start-up self-test (and raises :class:`SandboxUnavailable` in one line); :meth:`run` is thread-safe."""

    def __init__(self, slots: int = 2, limits: Limits | None = None, uid_base: int = UID_BASE) -> None:
        self.slots = max(1, slots)
        self.limits = limits or Limits()
        self.root = os.geteuid() == 0
        self._uids: queue.Queue[int | None] = queue.Queue()
        self._claims: list[int] = []
        for uid in (_claim_uids(self.slots, uid_base, self._claims) if self.root else [None] * self.slots):
            self._uids.put(uid)
        self._base = Path(tempfile.mkdtemp(prefix="crossed-sandbox-"))
        os.chmod(self._base, 0o711)  # the slots' uids may enter the job folders, not list them
        shutil.copyfile(HARNESS, self._base / "harness.py")
        os.chmod(self._base / "harness.py", 0o644)
        self._shared = self._base / "shared"
        self._shared.mkdir(mode=0o755)
        os.chmod(self._shared, 0o755)
        self._shared_names: dict[str, str] = {}
        self._checked = False
        self._lock = threading.Lock()

    def close(self) -> None:
        shutil.rmtree(self._base, ignore_errors=True)
        for fd in self._claims:
            os.close(fd)  # releases the uid's lock
        self._claims.clear()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def shared(self, key: str, text: str) -> str:
        """A read-only file every run sees at ``/shared/<name>`` (written once: a task's inputs, which all its
        samples share); returns that path."""
        with self._lock:
            if key not in self._shared_names:
                import hashlib

                name = hashlib.sha256(key.encode()).hexdigest()[:24] + ".json"
                path = self._shared / name
                path.write_text(text, encoding="utf-8")
                os.chmod(path, 0o644)
                self._shared_names[key] = name
            return f"/shared/{self._shared_names[key]}"

    # ------------------------------------------------------------ commands
    def command(self, job_dir: Path, uid: int | None, limits: Limits, results_fd: int = 3) -> list[str]:
        mb = 1024 * 1024
        nproc = limits.processes if uid is not None else len(uid_processes(os.getuid())) + limits.processes
        cmd: list[str] = []
        if uid is not None:
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
        cmd += ["prlimit", f"--as={limits.memory_mb * mb}", f"--cpu={limits.cpu_s}", f"--nproc={nproc}",
                f"--fsize={limits.file_mb * mb}", f"--nofile={limits.open_files}", "--core=0", "--"]
        cmd += ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv",
                "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
                "--ro-bind", "/usr", "/usr"]
        for top in ("bin", "lib", "lib64", "sbin"):
            host = Path("/") / top
            if host.is_symlink():
                cmd += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                cmd += ["--ro-bind", str(host), f"/{top}"]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmp_mb * mb), "--tmpfs", "/tmp",
                "--ro-bind", str(job_dir), "/job", "--ro-bind", str(self._shared), "/shared", "--ro-bind", str(self._base / "harness.py"), "/harness.py",
                "--remount-ro", "/", "--chdir", "/tmp", PYTHON, "-I", "-S", "/harness.py", str(results_fd)]
        return cmd

    @contextmanager
    def _slot(self) -> Iterator[int | None]:
        uid = self._uids.get()
        try:
            yield uid
        finally:
            if uid is not None:
                # a run stopped early leaves its code to be reaped by the host's init, and until then the uid's
                # process count stays raised: the slot waits for its uid to be empty, so the next run starts with
                # its whole budget (and nothing of this run is left running)
                _wait_until_gone(uid)
            self._uids.put(uid)

    # ------------------------------------------------------------ one run
    def run(self, job: dict[str, Any], limits: Limits | None = None,
            stop: Callable[[dict[str, Any]], bool] | None = None) -> Run:
        """Run one job (see :mod:`crossed_rlvr.sandbox.harness`); ``stop(line)`` returning True ends the run
        early. Never raises for what the code does; raises only if the sandbox cannot start at all."""
        if not self._checked:
            self.check()
        return self._run(job, limits or self.limits, stop)

    @contextmanager
    def _job_dir(self, job: dict[str, Any]) -> Iterator[Path]:
        """The job's own folder (readable by the slots' uids), removed after its run."""
        job_dir = Path(tempfile.mkdtemp(dir=self._base))
        os.chmod(job_dir, 0o755)
        (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        os.chmod(job_dir / "job.json", 0o644)
        try:
            yield job_dir
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    def _run(self, job: dict[str, Any], limits: Limits, stop: Callable[[dict[str, Any]], bool] | None) -> Run:
        start = time.monotonic()
        with self._job_dir(job) as job_dir, self._slot() as uid:
            return self._watch(lambda fd: self.command(job_dir, uid, limits, fd), limits, stop, start)

    def _watch(self, cmd: Callable[[int], list[str]], limits: Limits, stop: Callable[[dict[str, Any]], bool] | None,
               start: float) -> Run:
        read_fd, proc = _start(cmd)
        run = Run(ended="exited")
        results = _Results(run, stop)
        sel = selectors.DefaultSelector()
        sel.register(read_fd, selectors.EVENT_READ, "results")
        assert proc.stderr is not None
        sel.register(proc.stderr.fileno(), selectors.EVENT_READ, "stderr")
        err, total = b"", 0
        deadline = start + limits.wall_s
        cap = limits.output_mb * 1024 * 1024
        open_fds = 2
        try:
            while open_fds:
                left = deadline - time.monotonic()
                if left <= 0:
                    run.ended = "wall"
                    break
                finished = False
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                        open_fds -= 1
                        continue
                    if key.data == "stderr":
                        err = (err + chunk)[:STDERR_CAP]
                        continue
                    total += len(chunk)
                    if total > cap:
                        run.ended, finished = "output", True
                        break
                    if results.feed(chunk):
                        finished = True
                        break
                if finished:
                    break
        finally:
            sel.close()
            _reap(proc, run)
            os.close(read_fd)
        run.seconds = time.monotonic() - start
        if not results.ready and run.ended == "exited":
            run.ended, run.detail = "sandbox-error", err.decode(errors="replace").strip()[-2000:]
        return run

    # ------------------------------------------------------------ many runs
    def map(self, jobs: list[dict[str, Any]], limits: list[Limits] | None = None,
            stops: list[Callable[[dict[str, Any]], bool] | None] | None = None,
            progress: Callable[[], None] | None = None) -> list[Run]:
        """Run every job, ``slots`` at a time (threads, each launching its runs), in the jobs' order."""
        if not self._checked:
            self.check()

        def one(k: int) -> Run:
            result = self._run(jobs[k], limits[k] if limits else self.limits, stops[k] if stops else None)
            if progress is not None:
                progress()
            return result

        with ThreadPoolExecutor(max_workers=self.slots) as pool:
            return list(pool.map(one, range(len(jobs))))

    # ------------------------------------------------------------ start-up self-test
    def check(self) -> None:
        """Start the sandbox once per slot and look from inside: only a loopback interface, the slot's uid, no view
        of the project, the home folder or the current folder. Raises :class:`SandboxUnavailable` in one line."""
        with self._lock:
            if self._checked:
                return
            probe = ("import os, socket\n"
                     "def probe(paths):\n"
                     "    return [[n for _, n in socket.if_nameindex()], os.getuid(), [os.path.exists(p) for p in paths]]\n")
            hidden = sorted({str(Path.home()), str(Path.cwd()), str(Path(__file__).resolve().parents[1])})
            from crossed_rlvr.sandbox.harness import encode

            job = {"code": probe, "entry_point": "probe", "inputs": [encode([hidden])], "time_limits": [10]}
            limits = Limits(wall_s=30)
            for _ in range(self.slots):
                with self._job_dir(job) as job_dir, self._slot() as uid:
                    run = self._watch(lambda fd, d=job_dir, u=uid: self.command(d, u, limits, fd), limits, None,
                                      time.monotonic())
                if run.ended == "sandbox-error":
                    raise SandboxUnavailable(f"the code sandbox (bubblewrap) cannot start here: {last_line(run.detail)}")
                if len(run.lines) != 1 or "out" not in run.lines[0]:
                    raise SandboxUnavailable(f"the code sandbox's self-test did not finish ({run.ended}): "
                                             f"{last_line(run.detail) or run.lines}")
                names, got_uid, seen = run.lines[0]["out"]
                if names != ["lo"]:
                    raise SandboxUnavailable(f"the code sandbox sees network interfaces {names}: only 'lo' may exist")
                if uid is not None and got_uid != uid:
                    raise SandboxUnavailable(f"the code sandbox runs as uid {got_uid}, not the slot's {uid}")
                if any(seen):
                    shown = [p for p, s in zip(hidden, seen) if s]
                    raise SandboxUnavailable(f"the code sandbox can see {shown}")
            self._checked = True



UID_SPAN = 4096
LOCKS = Path(tempfile.gettempdir())


def _claim_uids(n: int, base: int, fds: list[int]) -> list[int]:
    """``n`` uids no other sandbox on this machine holds (a lock file each, held until :meth:`Sandbox.close`), no
    account owns and no process runs as: two scoring processes never share a uid's process budget, and a slot's
    clean-up never touches another's processes."""
    import fcntl
    import pwd

    got: list[int] = []
    for uid in range(base, base + UID_SPAN):
        if len(got) == n:
            break
        try:
            pwd.getpwuid(uid)
            continue  # an account's uid
        except KeyError:
            pass
        fd = os.open(LOCKS / f"crossed-sandbox-uid-{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if uid_processes(uid):
            os.close(fd)
            continue
        fds.append(fd)
        got.append(uid)
    if len(got) < n:
        raise SandboxUnavailable(f"only {len(got)} of the {n} sandbox uids from {base} are free")
    return got


def uid_processes(uid: int) -> list[int]:
    """The pids whose /proc entry belongs to ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _wait_until_gone(uid: int, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while (pids := uid_processes(uid)) and time.monotonic() < deadline:
        for pid in pids:  # anything of the slot's uid is a sample's: end it
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End a run from outside: kill the sandbox's pid 1 (the kernel then ends everything in its namespace), so
    that bubblewrap reaps it and exits by itself; killed first, bubblewrap would leave it to the host's init, which
    may take seconds to reap it (and the slot's uid keeps it in its process count until then)."""
    for child in _children(proc.pid):
        with suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def last_line(text: str, default: str = "") -> str:
    """The last non-empty line of a message (bubblewrap's own error is its last line of stderr)."""
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else default
