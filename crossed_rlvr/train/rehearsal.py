"""The launch rehearsal (``crossed-study stages=rehearse``, ``gpu_smoke.sh --dry-run``): every verl arm's
generated launch script run for real on a machine without GPUs, up to the first point that needs one.

The script runs as written, with ``CROSSED_REHEARSE=<the preset's GPUs per node>``: ``verl_launch``
then starts a local Ray with the preset's CPU count and that many *logical* GPUs, and verl's own
start-up runs: TransferQueue (controller and storage units), the resource pools and their placement
groups, the trainer class the arm uses (our importance-weighted one for the frozen proposal) and the
construction of its GPU workers, where torch first asks for NCCL/CUDA. That error is the point
reached (``REACHED <actor>.<method>: <error>`` in ``<arm>/rehearsal.log``). Anything else fails the
rehearsal: another error, a Ray wait past the wait limit (the budget is named), or no answer within
the time limit (the process group, Ray's daemons included, is killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossed_rlvr.cluster import MARKER
from crossed_rlvr.layout import ArmLayout


class RehearsalError(RuntimeError):
    pass


def rehearse_arm(arm_dir: Path, gpus: int, timeout: float = 600.0, wait_limit: float = 120.0) -> dict[str, Any]:
    """Run ``<arm_dir>/launch_single_node.sh`` as a rehearsal; returns what was reached and how long it took."""
    script = ArmLayout(Path(arm_dir)).launch_single_node
    if not script.exists():
        raise RehearsalError(f"{script}: no launch script (run stages=prepare with engine=verl first)")
    log = ArmLayout(Path(arm_dir)).rehearsal_log
    # verl_launch hides the GPUs from verl's actors, so the rehearsal never trains, on a GPU node too
    tag = f"{os.getpid()}-{time.monotonic_ns()}"  # marks every process of this rehearsal, daemons included
    # (the pid first: tagged(prefix=f"{pid}-") finds what any rehearsal of this process left)
    env = {**os.environ, "CROSSED_REHEARSE": str(int(gpus)), "CROSSED_WAIT_LIMIT": f"{wait_limit:g}",
           "RAY_DEDUP_LOGS": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", TAG: tag}
    start = time.perf_counter()
    with log.open("w") as fh:
        # a session of its own: on a timeout the whole group goes, Ray's GCS, raylet and workers included
        proc = subprocess.Popen(["bash", str(script)], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                cwd=arm_dir, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc.pid, tag)
    seconds = round(time.perf_counter() - start, 1)
    text = log.read_text(errors="replace")
    lines = launch_lines(text)
    reached = next((x[len("REACHED "):] for x in lines if x.startswith("REACHED ")), None)
    trainer = next((m.group(1) for m in re.finditer(r"crossed-rlvr trainer: (\w+)", text)), None)
    result = {"arm_dir": str(arm_dir), "gpus": int(gpus), "seconds": seconds, "exit": code, "reached": reached,
              "trainer": trainer, "log": str(log), "launch_lines": lines}
    if code is None:
        raise RehearsalError(f"{script}: no answer within {timeout:g} s (killed); last lines of {log}:\n"
                             + "\n".join(text.splitlines()[-15:]))
    if code != 0 or reached is None:
        said = next((x for x in lines if x.startswith(("PREFLIGHT FAILED", "WAIT LIMIT", "FAILED"))), None)
        raise RehearsalError(f"{script}: exit {code}, no GPU point reached"
                             + (f": {said}" if said else "") + f"; last lines of {log}:\n"
                             + "\n".join(text.splitlines()[-15:]))
    return result


def launch_lines(text: str) -> list[str]:
    """What ``verl_launch`` said in a log (``cluster.say``), wherever in a line it begins: Ray's log thread
    writes workers' lines to the same file, and one left without its newline runs into ours."""
    return [m.group(1).strip() for m in re.finditer(re.escape(MARKER) + r"(.*)", text)]


TAG = "CROSSED_REHEARSAL_ID"


def tagged(tag: str | None = None, prefix: str = "") -> list[int]:
    """Live processes started by a rehearsal (``tag``: by this one; ``prefix``: by those whose tag starts so, as
    the rehearsals of one ``crossed-study`` process do), found by the variable every process of it inherits: Ray's
    GCS and raylet may leave the rehearsal's session, never its environment."""
    needle = f"{TAG}={tag}".encode() if tag else f"{TAG}={prefix}".encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(v == needle or (tag is None and v.startswith(needle)) for v in environ.split(b"\0")):
            found.append(int(entry))
    return found


def kill_group(sid: int, tag: str | None = None) -> None:
    """Kill every process of the rehearsal: its session (Ray's workers set process groups of their own) and
    every process carrying its tag (daemons that left the session); waits up to 10 s for them to go."""
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGKILL)
    if tag is None:
        return
    deadline = time.monotonic() + 10.0
    while (left := tagged(tag)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def rehearse(arms: dict[str, dict[str, Any]], gpus: int, out: Path, timeout: float = 600.0,
             wait_limit: float = 120.0, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Rehearse every arm in turn; writes ``out`` (JSON) and raises on the first arm that fails."""
    results: dict[str, Any] = {}
    for name, arm in arms.items():
        say(f"    rehearsing {name}: its launch script through verl's start-up on Ray ({gpus} logical GPU(s))")
        results[name] = rehearse_arm(Path(arm["run_dir"]), gpus, timeout, wait_limit)
        say(f"    {name}: reached {results[name]['reached']} in {results[name]['seconds']} s")
        out.write_text(json.dumps(results, indent=2) + "\n")
    return results
