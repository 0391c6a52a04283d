"""The warm-start cache (study/warm_cache.py): studies running at once build one policy once, and an entry cut
short before it was published is built again instead of copied."""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from crossed_rlvr.study.warm_cache import fetch_or_build


def build_in(dest: Path, log: Path) -> dict:
    """A build that takes a while and says that it ran."""
    with log.open("a") as fh:
        fh.write(f"{dest}\n")
    time.sleep(1.0)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.safetensors").write_bytes(b"weights")
    return {"path": str(dest), "built": True}


def study(cache: Path, dest: Path, log: Path) -> dict:
    return fetch_or_build(cache, "key", dest, lambda: build_in(dest, log))


def test_two_studies_at_once_build_one_policy(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        infos = list(pool.map(study, [cache, cache], [tmp_path / "a", tmp_path / "b"], [log, log]))
    assert len(log.read_text().splitlines()) == 1  # the second waited on the lock, then copied
    assert sorted(i["from_cache"] is None for i in infos) == [False, True]
    assert [i["path"] for i in infos] == [str(tmp_path / "a"), str(tmp_path / "b")]
    for name in ("a", "b"):
        assert (tmp_path / name / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((cache / "key" / "info.json").read_text())["built"] is True
    assert [p.name for p in cache.iterdir() if "partial" in p.name] == []


def test_an_entry_cut_short_is_built_again(tmp_path):
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    (cache / "key" / "model").mkdir(parents=True)  # a publish that never wrote its info.json
    (cache / "key" / "model" / "model.safetensors").write_bytes(b"half")
    info = study(cache, tmp_path / "a", log)
    assert info["from_cache"] is None and len(log.read_text().splitlines()) == 1
    assert (cache / "key" / "model" / "model.safetensors").read_bytes() == b"weights"
    again = study(cache, tmp_path / "b", log)
    assert again["from_cache"] == str(cache / "key") and len(log.read_text().splitlines()) == 1
