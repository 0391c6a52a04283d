"""The sandbox's seccomp filter: a classic BPF program that bubblewrap installs (``bwrap --seccomp FD``) before it
starts the harness, so every process of a sample runs under it.

It denies (``EPERM``) the system calls a scored program never needs and an attacker would: the kernel keyring
(``add_key``, ``request_key``, ``keyctl``: a sample could read the scorer's session keys or leave data there for
later samples), ``io_uring_*`` (a second way into the kernel that other filters miss), ``ptrace``,
``process_vm_*``, ``perf_event_open``, ``bpf``, ``userfaultfd``, and mounting, namespaces, modules, kexec, swap
and reboot. A call from another entry point of the machine (i386's ``int 0x80`` on x86_64: another architecture in
the filter's view) kills the process; x32's calls (numbers with bit 30 set) are denied.

Written by hand (twenty lines of BPF) rather than through libseccomp: its Python binding is a Debian package for the
system interpreter only, not installable into the project's environment.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# struct seccomp_data: int nr; __u32 arch; ...
NR_OFFSET, ARCH_OFFSET = 0, 4
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
X32_BIT = 0x40000000

DENIED = ("add_key", "request_key", "keyctl", "io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace",
          "process_vm_readv", "process_vm_writev", "perf_event_open", "bpf", "userfaultfd", "kcmp",
          "mount", "umount2", "pivot_root", "unshare", "setns", "open_tree", "move_mount", "fsopen", "fsconfig",
          "fsmount", "fspick", "mount_setattr", "name_to_handle_at", "open_by_handle_at", "fanotify_init",
          "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "acct", "swapon",
          "swapoff", "reboot", "quotactl")

# (audit architecture, system call numbers) per machine: arch/x86/entry/syscalls/syscall_64.tbl and
# include/uapi/asm-generic/unistd.h (aarch64)
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "add_key": 248, "request_key": 249, "keyctl": 250, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "perf_event_open": 298, "bpf": 321, "userfaultfd": 323, "kcmp": 312, "mount": 165, "umount2": 166,
        "pivot_root": 155, "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "name_to_handle_at": 303,
        "open_by_handle_at": 304, "fanotify_init": 300, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "acct": 163, "swapon": 167,
        "swapoff": 168, "reboot": 169, "quotactl": 179}),
    "aarch64": (0xC00000B7, {
        "add_key": 217, "request_key": 218, "keyctl": 219, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "perf_event_open": 241, "bpf": 280, "userfaultfd": 282, "kcmp": 272, "mount": 40, "umount2": 39,
        "pivot_root": 41, "unshare": 97, "setns": 268, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "name_to_handle_at": 264,
        "open_by_handle_at": 265, "fanotify_init": 262, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "acct": 89, "swapon": 224,
        "swapoff": 225, "reboot": 142, "quotactl": 60}),
}


class UnknownMachine(RuntimeError):
    """No filter is written for this machine's architecture."""


def numbers(machine: str | None = None) -> dict[str, int]:
    """The denied calls' numbers on this machine (the sandbox's self-test calls some of them from inside)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise UnknownMachine(f"no seccomp filter is written for {machine} (only {', '.join(ARCHES)})")
    return ARCHES[machine][1]


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter as bubblewrap reads it: an array of ``struct sock_filter``."""
    machine = machine or platform.machine()
    nrs = numbers(machine)
    arch = ARCHES[machine][0]
    denied = sorted({nrs[name] for name in DENIED})
    body = [_insn(LD_W_ABS, ARCH_OFFSET), _insn(JEQ_K, arch, jt=1), _insn(RET_K, RET_KILL_PROCESS),
            _insn(LD_W_ABS, NR_OFFSET)]
    checks = ([("x32", X32_BIT)] if machine == "x86_64" else []) + [("nr", nr) for nr in denied]
    # each check jumps to the deny at the end: past the remaining checks and the allow
    for k, (kind, value) in enumerate(checks):
        to_deny = len(checks) - k  # the remaining checks after this one, then the allow
        body.append(_insn(JGE_K if kind == "x32" else JEQ_K, value, jt=to_deny))
    body += [_insn(RET_K, RET_ALLOW), _insn(RET_K, RET_ERRNO | errno.EPERM)]
    return b"".join(body)


def write(path: os.PathLike[str] | str) -> None:
    with open(path, "wb") as fh:
        fh.write(program())
    os.chmod(path, 0o600)
