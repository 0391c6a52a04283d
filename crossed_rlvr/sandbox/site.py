"""The packages a sandboxed sample may import beyond the standard library: numpy, as EvalPlus's samples have it
(EvalPlus depends on numpy, so a HumanEval+ solution that imports it passes there).

The sandbox runs Debian's system ``python3`` with every ``site-packages`` and ``dist-packages`` folder hidden, so
nothing of the machine's or the project's packages is visible inside; this folder, bound read-only at ``/site``,
is the one exception. It is a pinned numpy wheel for the system interpreter's version, installed once by the
set-up (``make sandbox`` runs ``python -m crossed_rlvr.sandbox.site``) under ``~/.cache/crossed-rlvr``, or
wherever ``CROSSED_SANDBOX_SITE`` names.

    python -m crossed_rlvr.sandbox.site          # install it (pip, from PyPI) unless it is there; print its path
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

from crossed_rlvr.layout import UserCache

NUMPY = "2.3.5"  # a wheel for CPython 3.11-3.13 on x86_64 and aarch64 (Debian 12 and 13's system pythons)
SYSTEM_PYTHON = "/usr/bin/python3"


@functools.cache  # asked by every Sandbox that starts: the interpreter does not change within a process
def system_python_version() -> str:
    out = subprocess.run([SYSTEM_PYTHON, "-I", "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def site_dir() -> Path:
    """Where the sandbox's numpy is (or is to be) installed."""
    if given := os.environ.get("CROSSED_SANDBOX_SITE"):
        return Path(given)
    return UserCache.default().sandbox_site(NUMPY, system_python_version())


def installed(folder: Path) -> bool:
    try:
        return (folder / "numpy" / "__init__.py").is_file()
    except OSError:  # a folder this user may not enter holds no numpy for it
        return False


def install(folder: Path | None = None) -> Path:
    """The pinned numpy wheel for the system interpreter, unpacked into ``folder`` (nothing else: no dependencies
    exist), readable by every uid. Installed into a temporary folder first, so a failed install leaves nothing."""
    import shutil
    import tempfile

    folder = folder or site_dir()
    if installed(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sandbox-site-", dir=folder.parent))
    try:
        machine = {"x86_64": "x86_64", "aarch64": "aarch64"}[platform.machine()]
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-deps", "--only-binary=:all:", "--target", str(tmp),
                        "--python-version", system_python_version(), "--implementation", "cp",
                        *[x for tag in ("manylinux_2_28", "manylinux_2_17", "manylinux2014")
                          for x in ("--platform", f"{tag}_{machine}")],
                        f"numpy=={NUMPY}"], check=True)
        for root, _dirs, files in os.walk(tmp):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        os.chmod(tmp, 0o755)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


if __name__ == "__main__":
    print(install())
