"""The Ray cluster of a SLURM allocation, shared by the verl arms' and the crossed evaluation's sbatch
scripts: the header, the cluster start (head first, then every node), and the wait until every node joined.

``python -m crossed_rlvr.cluster --wait-nodes N --address HOST:PORT`` is that wait, run by the scripts in
a fresh process (Ray reads its auth settings when it is imported).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from crossed_rlvr.limits import Parser, add_number

MARKER = "crossed-rlvr launch:"


def say(text: str) -> None:
    # one write, not print's two: Ray's log thread prints workers' lines to the same stream, and a line of
    # its written between print's text and its newline would split ours
    sys.stdout.write(f"{MARKER} {text}\n")
    sys.stdout.flush()


# SLURM's warning before a time limit, by default (engine.slurm_warning_s; the evaluation script's --warning-s)
WARNING_S = 300

# How a SLURM script survives the cluster's own signals. The command runs in the background of the batch shell
# (``run_then_settle``), so that the shell's traps run while it works: SLURM's warning (``--signal=B:USR1@<s>``,
# sent to the batch shell alone, <s> seconds before the time limit) is passed on to the command, which saves (a
# training arm at its next update, crossed_rlvr/interrupt.py) and stops; the job then puts itself back in the
# queue (``scontrol requeue``, allowed by ``--requeue``), and the requeued job goes on from that save. SIGTERM
# (scancel, a preemption, the time limit itself) is passed on too: the command stops its own processes and says
# what is kept. A command that failed without a warning fails the job: a requeue would fail the same way.
REQUEUE = """child=
warned=0
trap 'warned=1; if [ -n "$child" ]; then kill -USR1 "$child" 2>/dev/null || true; fi' USR1
trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi' TERM
settle() {  # wait for the command (a trap ends a wait early: wait again), then requeue the job if it was warned
  local status=0
  if [ "$warned" = 1 ]; then kill -USR1 "$child" 2>/dev/null || true; fi  # warned before the command started
  while :; do
    status=0
    wait "$child" || status=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=
  if [ "$warned" = 1 ] && [ "$status" -ne 0 ]; then
    echo "crossed-rlvr: SLURM's warning came; the command saved and stopped (exit $status): requeueing job" \
      "${SLURM_JOB_ID:-?}, which goes on from that save" >&2
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
  fi
  return "$status"
}
"""


def run_then_settle(command: str) -> str:
    """``command`` (a line of the script, continued lines included) run in the background, then ``settle``
    (``REQUEUE``)."""
    return f"{command} &\nchild=$!\nsettle\n"


def slurm_header(what: str, warning_s: int = WARNING_S) -> str:
    """The sbatch header (a template with job, nodes, gpus, cpus): one task per node, whole nodes; SLURM's warning
    ``warning_s`` seconds before the time limit and the requeue after it (``REQUEUE``; 0: neither)."""
    warn = f"#SBATCH --signal=B:USR1@{int(warning_s)}\n#SBATCH --requeue\n" if warning_s > 0 else ""
    return ('''#!/usr/bin/env bash
#SBATCH --job-name={job}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --cpus-per-task={cpus}
#SBATCH --exclusive
''' + warn + f"# A Ray cluster across the allocated nodes, then {what} on its head.\n" + '''# HEAD_IP overrides the head's address; RAY_JOIN_TIMEOUT (s) bounds the wait for every node to join.
set -euo pipefail
''' + REQUEUE.replace("{", "{{").replace("}", "}}"))


# Ray's authentication, decided in this one place for the head, every node and every driver: token auth on,
# one token per run in a private file that every node reads (RAY_AUTH_TOKEN_PATH, on the file system the nodes
# share), RAY_AUTH_MODE explicit. Left unset, `ray start --head` turns token auth on whenever ~/.ray/auth_token
# exists (any earlier local ray.init writes one) while a driver's ray.init(address=...) never does, so a driver
# or a node would present no token, or another one. A template with {token} (the file) and {python}.
RAY_AUTH = """export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN_PATH="${{RAY_AUTH_TOKEN_PATH:-{token}}}"
if [ ! -s "$RAY_AUTH_TOKEN_PATH" ]; then
  (umask 077; {python} -c 'import secrets; print(secrets.token_hex(32))' > "$RAY_AUTH_TOKEN_PATH")
fi
"""


def ray_auth_for_driver() -> None:
    """A driver about to join a running cluster: token mode when a token is at hand and the mode is unset
    (Ray's ``ray.init(address=...)`` never turns it on by itself), refreshed if Ray is already imported."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            (Path.home() / ".ray" / "auth_token").exists():
        os.environ["RAY_AUTH_MODE"] = "token"
        import sys

        if "ray" in sys.modules:  # Ray caches its config at import: re-read the environment
            from ray._raylet import Config  # type: ignore[attr-defined]  # the compiled module has it; its .pyi stub omits it

            Config.initialize("")


# A Ray cluster over a SLURM allocation, ready on "$head_ip:$port" (shared with crossed-eval's script).
RAY_CLUSTER = """cpus=${{SLURM_CPUS_PER_TASK:-{cpus}}}
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head=${{nodes[0]}}
# the head's IPv4 address on the interface that routes off the node (never a loopback name entry)
head_ip=${{HEAD_IP:-$(srun --nodes=1 --ntasks=1 -w "$head" bash -c \\
  "ip -4 -o route get 192.0.2.1 2>/dev/null | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p'; hostname -I 2>/dev/null" \\
  | tr ' ' '\\n' | grep -E '^[0-9]+(\\.[0-9]+){{3}}$' | grep -v '^127\\.' | head -n 1 || true)}}
# (|| true: under pipefail a grep that finds nothing would end the script before the message below)
if [ -z "$head_ip" ]; then echo "no IPv4 address found for head node $head; set HEAD_IP" >&2; exit 1; fi
# every node reads the run's Ray token (RAY_AUTH): a run_dir on node-local storage would leave a node
# unauthenticated and the join wait below timing out without a reason
for node in ${{nodes[@]+"${{nodes[@]}}"}}; do
  if ! srun --nodes=1 --ntasks=1 -w "$node" test -s "$RAY_AUTH_TOKEN_PATH"; then
    echo "node $node cannot read the Ray token file $RAY_AUTH_TOKEN_PATH: put run_dir (or RAY_AUTH_TOKEN_PATH)" \
      "on storage every node shares" >&2; exit 1
  fi
done
port=6379
# --cpus-per-task on every srun that starts Ray: since SLURM 22.05 a step no longer inherits it from sbatch, and
# where tasks are bound to cores the raylet and every actor it starts would share one core while Ray still
# reports $cpus CPUs (SRUN_CPUS_PER_TASK says the same to any srun a user adds)
export SRUN_CPUS_PER_TASK="$cpus"
srun --nodes=1 --ntasks=1 --cpus-per-task="$cpus" -w "$head" {ray} start --head --node-ip-address="$head_ip" --port=$port \\
  --num-cpus="$cpus" --num-gpus={gpus} --block &
{python} -m crossed_rlvr.cluster --wait-nodes 1 --address "$head_ip:$port" --join-timeout "${{RAY_JOIN_TIMEOUT:-300}}"
for node in "${{nodes[@]:1}}"; do
  srun --nodes=1 --ntasks=1 --cpus-per-task="$cpus" -w "$node" {ray} start --address="$head_ip:$port" --num-cpus="$cpus" \\
    --num-gpus={gpus} --block &
done
# every node joined, or a loud failure (verl would otherwise stop with "Total available GPUs ...")
{python} -m crossed_rlvr.cluster --wait-nodes {nodes} --address "$head_ip:$port" --join-timeout "${{RAY_JOIN_TIMEOUT:-300}}"
"""


def wait_for_nodes(address: str, n: int, timeout: float) -> int:
    """Poll the Ray cluster at ``address`` until ``n`` nodes are alive (SLURM start-up); loud on timeout."""
    ray_auth_for_driver()  # the scripts export RAY_AUTH (above); a hand-started cluster may only have the file
    import ray

    deadline = time.monotonic() + timeout
    alive, last = 0, ""
    while time.monotonic() < deadline:
        try:
            ray.init(address=address, log_to_driver=False)
            try:
                alive = sum(1 for node in ray.nodes() if node["Alive"])
            finally:
                ray.shutdown()
            if alive >= n:
                say(f"{alive} of {n} Ray node(s) joined at {address}")
                return 0
        except Exception as err:  # noqa: BLE001  (the head may not be up yet)
            last = f" (last error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        time.sleep(3)
    say(f"JOIN TIMEOUT: {alive} of {n} Ray node(s) joined {address} within {timeout:g} s{last}; check that "
        "ray start ran on every allocated node and that they reach the head's address and port")
    return 4


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m crossed_rlvr.cluster",
                                     description="Wait until N Ray nodes joined the cluster at an address.")
    add_number(parser, "--wait-nodes", 1, 4096, metavar="N", required=True, help="nodes to wait for")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray address (or RAY_ADDRESS)")
    add_number(parser, "--join-timeout", 1, 86_400, integer=False, default=300.0, help="seconds to wait (default 300)")
    args = parser.parse_args(argv)
    if not args.address:
        parser.error("--wait-nodes needs --address or RAY_ADDRESS")
    return wait_for_nodes(args.address, args.wait_nodes, args.join_timeout)


if __name__ == "__main__":
    raise SystemExit(main())
