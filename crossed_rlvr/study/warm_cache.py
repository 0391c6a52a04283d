"""A folder of warm-started initial policies that studies share (``initial.cache_dir``), keyed by the initial
stage's fingerprint: its model, task, SFT, warm-start and band settings.

The warm start is deterministic in those inputs (the same seeds give the same files), so a study whose initial
stage has the fingerprint of one built before copies that policy instead of training it again: studies that
differ only in their arms, evaluation or analysis start from one policy. Studies running at once build an entry
once: the first takes the entry's lock and builds, the others wait on the lock and then copy. An entry is
published whole (written beside, then renamed), so a build killed half-way leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from crossed_rlvr.layout import WarmCacheLayout


def fetch_or_build(cache: Path, key: str, dest: Path, build: Callable[[], dict[str, Any]],
                   say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The policy for ``key`` at ``dest``: copied from ``cache/key`` when there, else built by ``build`` (which
    writes ``dest`` and returns the stage's info) and stored. The info says which it was (``from_cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    layout = WarmCacheLayout(cache)
    entry = layout.entry(key)
    with FileLock(str(layout.lock(key))):
        if entry.info.is_file() and entry.model.is_dir():
            shutil.rmtree(dest, ignore_errors=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(entry.model, dest)
            info = json.loads(entry.info.read_text())
            say(f"    initial policy copied from the warm-start cache ({entry.root})")
            return {**info, "path": str(dest), "from_cache": str(entry.root)}
        info = build()
        partial = layout.partial(key, os.getpid())
        shutil.rmtree(partial.root, ignore_errors=True)
        shutil.copytree(dest, partial.model)
        partial.info.write_text(json.dumps(info, indent=2) + "\n")
        shutil.rmtree(entry.root, ignore_errors=True)  # an entry without its info: a publish cut short
        os.replace(partial.root, entry.root)
        say(f"    initial policy stored in the warm-start cache ({entry.root})")
        return {**info, "from_cache": None}
