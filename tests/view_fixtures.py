"""Run folders for crossed-view's tests: a small crossed study's folder (three policies under two requests, scored
and analysed like a study's) and a GSM8K-sized crossed-eval folder replicated from its records and scores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> so the sum is 7\n#### 7'
N_ITEMS = 16  # over 13 items, scipy's Wilcoxon test is asymptotic, not a permutation test (~1 min at 12)
POLICIES = (("initial", "initial", None), ("grpo-hash/s83", "hash", 83), ("grpo-boxed/s83", "boxed", 83))


def answer(k: int) -> str:
    return str(3 + 2 * k)


def response(convention: str, request: str, k: int) -> str:
    """What each policy writes for item ``k``: an arm mostly in its own convention whatever is asked, the initial
    policy in the requested one about half the time; some answers wrong, so that correctness flips too."""
    right = answer(k) if k % 3 else str(int(answer(k)) + 1)
    work = f"{k} + {k + 3} = {right}"
    if convention == "initial" and request == "hash" and k == 4:
        return HOSTILE.replace("7", answer(k)).replace("so the sum", f"{work}, so the sum")
    own = {"hash": f"{work}\n#### {right}", "boxed": f"{work}\nSo \\boxed{{{right}}}"}
    if convention == "initial":
        return own[request] if k % 2 else own["boxed" if request == "hash" else "hash"]
    if k % 4 == 3:  # now and then an arm follows the request
        return own[request].replace(right, answer(k))
    return own[convention]


def small_study(root: Path) -> Path:
    """A study's folder (``eval/``, ``analysis/``) of three policies under the hash and boxed requests."""
    from crossed_rlvr.analysis.report.folder import analyze
    from crossed_rlvr.eval.score.scoring import score_files
    from crossed_rlvr.layout import RunLayout
    from crossed_rlvr.records import write_responses
    from crossed_rlvr.tasks.items import write_items

    run = RunLayout(root)
    ev = run.eval
    write_items(ev.items("toy", "test"), [{"item_id": str(k), "question": f"What is {k} + {k + 3}?",
                                           "reference": answer(k)} for k in range(N_ITEMS)])
    ev.responses.mkdir(parents=True, exist_ok=True)
    for policy, conv, seed in POLICIES:
        for request in ("hash", "boxed"):
            recs = [{"item_id": str(k), "task": "toy", "policy": policy, "training_convention": conv,
                     "train_seed": seed, "request": request, "template": "original", "sample_idx": 0,
                     "gen_seed": None, "prompt_sha256": "0" * 64, "response": response(conv, request, k),
                     "finish_reason": "length" if k == 5 else "stop", "prompt_tokens": 10, "response_tokens": 20 + k,
                     "reference": answer(k)} for k in range(N_ITEMS)]
            write_responses(ev.response_file(f"{policy.replace('/', '_')}__{request}__original"), recs)
    score_files([ev.responses], ev.scores, workers=0, progress=False)
    analyze(ev.scores, run.analysis, n_resamples=200, figures=False)
    return root


def gsm8k_sized(small: Path, root: Path, n_items: int = 1319, n_policies: int = 11) -> Path:
    """A crossed-eval folder of GSM8K's size (``n_items`` x 2 requests x ``n_policies``) made from the small study's
    records and scores, each item's row copied under new item ids and policy names (no model runs)."""
    from crossed_rlvr.layout import EvalLayout, RunLayout

    src = RunLayout(small).eval
    ev = EvalLayout(root)
    ev.responses.mkdir(parents=True)
    ev.items_folder.mkdir()
    shutil.copy(src.items("toy", "test"), ev.items("toy", "test"))  # questions of items past 11 are absent: shown so
    scores = pd.read_parquet(src.scores)
    names = ["initial"] + [f"grpo-{'hash' if k % 2 else 'boxed'}/s{80 + k}" for k in range(1, n_policies)]
    frames = []
    for j, name in enumerate(names):
        conv = "initial" if name == "initial" else name.split("-")[1].split("/")[0]
        template_policy = {"initial": "initial", "hash": "grpo-hash/s83", "boxed": "grpo-boxed/s83"}[conv]
        base = scores[scores.policy == template_policy]
        records = {}
        for path in src.responses.glob(f"{template_policy.replace('/', '_')}__*.jsonl"):
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                records[(rec["request"], rec["item_id"])] = rec
        for request, part in base.groupby("request"):
            reps = -(-n_items // len(part))
            big = pd.concat([part] * reps, ignore_index=True).iloc[:n_items].copy()
            source_ids = big["item_id"].tolist()
            big["item_id"] = [str(i) for i in range(n_items)]
            big["policy"] = name
            big["train_seed"] = None if name == "initial" else 80 + j
            frames.append(big)
            with ev.response_file(f"{name.replace('/', '_')}__{request}__original").open("w") as fh:
                for i, sid in enumerate(source_ids):
                    rec = dict(records[(request, sid)], item_id=str(i), policy=name,
                               train_seed=None if name == "initial" else 80 + j)
                    fh.write(json.dumps(rec) + "\n")
    table = pd.concat(frames, ignore_index=True)
    table["train_seed"] = table["train_seed"].astype("Int64")
    table.to_parquet(ev.scores, index=False)
    return root


# ------------------------------------------------------------------------------------------ in the browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # the annotation page's (tests/test_calibration_page.py)


class ViewServer:
    """``crossed-view RUN --port 0`` in its own process (``python -m``: no reinstall needed); the URL from its first
    line."""

    def __init__(self, run: Path, *args: str) -> None:
        import re
        import subprocess
        import sys
        import time

        start = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "crossed_rlvr.view.cli", str(run), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.first = self.proc.stdout.readline()
        self.second = self.proc.stdout.readline()
        self.start_s = time.perf_counter() - start  # reading the run before it serves
        found = re.search(r"http://\S+/", self.first)
        assert found, self.first + self.second
        self.url = found.group(0)
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> ViewServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def open_view(page, url: str) -> None:
    """Go to a view (``#view=...``) and wait until the page has drawn it."""
    page.goto(url)
    want = url.split("#", 1)[1] if "#" in url else ""
    page.wait_for_function("w => document.body.dataset.ready === (w ? '#' + w : '#')", arg=want)
    assert page.inner_text("#error") == "", page.inner_text("#error")


def check_grid(page, url: str, analysis: Path) -> int:
    """Every grid cell's numbers against cells.csv, every interaction against report.md's headline table; returns
    how many cells were checked."""
    cells = pd.read_csv(analysis / "cells.csv")
    cells = cells[~cells.template.astype(str).str.endswith("@shared")]
    if "checkpoint" in cells:
        cells = cells[cells.checkpoint.isna()]
    open_view(page, url + "#view=grid")
    shown = page.eval_on_selector_all(
        "table.grid td.cell", "tds => tds.map(td => ({...td.dataset, group: td.closest('table').dataset.group}))")
    groups = page.evaluate("fetch('/api/grid').then(r => r.json()).then(g => g.groups.map(x => [x.task, x.template]))")
    assert shown
    names = {"payload": "payload", "strict": "acc.strict", "lenient": "acc.lenient", "mv": "acc.math_verify"}
    for td in shown:
        task, template = groups[int(td["group"])]
        mine = cells[(cells.task == task) & (cells.template.astype(str) == template) & (cells.policy == td["policy"])
                     & (cells.request == td["request"])]
        assert int(td["n"]) == int(mine.n.iloc[0])
        for short, measure in names.items():
            want = mine[mine.measure == measure].value
            if len(want):
                assert float(td[short]) == float(want.iloc[0]), (td, measure)
    # the interactions, as the report's headline table prints them
    report = (analysis / "report.md").read_text()
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith("| ") and " | I_" in line]
    printed = {(r[0][2:], r[1], r[2], r[5]): r[6] for r in rows if len(r) >= 8}
    tables = page.eval_on_selector_all("table.inter", "ts => ts.map(t => [t.dataset.group, [...t.querySelectorAll("
                                       "'tr[data-name]')].map(r => [r.dataset.name, r.querySelector('.ci').innerText])])")
    pairs = page.evaluate("fetch('/api/grid').then(r => r.json()).then(g => g.groups.map(x => x.pair))")
    checked = 0
    for group, shown_rows in tables:
        task, template = groups[int(group)]
        for name, text in shown_rows:
            assert printed[(task, template, pairs[int(group)], name)] == text
            checked += 1
    assert checked, "no interaction shown"
    return len(shown)


def flips_from_scores(scores: pd.DataFrame, a: tuple[str, ...], b: tuple[str, ...]) -> dict[str, int]:
    """The payload changes from cell ``a`` to cell ``b`` (task, template, policy, request) counted here from the scores
    table, independently of the viewer: kept, lost, gained, absent."""
    def cell(key: tuple[str, ...]) -> pd.DataFrame:
        part = scores[(scores.task == key[0]) & (scores.template == key[1]) & (scores.policy == key[2])
                      & (scores.request == key[3])]
        return part.set_index([part.item_id.astype(str), part.sample_idx])["requested_payload"].astype(bool)

    pa, pb = cell(a), cell(b)
    pa, pb = pa.align(pb, join="inner")
    return {"kept": int((pa & pb).sum()), "lost": int((pa & ~pb).sum()), "gained": int((~pa & pb).sum()),
            "absent": int((~pa & ~pb).sum())}


def check_flips(page, url: str, scores: pd.DataFrame, cells: list[dict], a: tuple[str, ...], b: tuple[str, ...],
                cells_csv: pd.DataFrame | None = None) -> dict[str, int]:
    """The paired view of cells ``a`` and ``b``: its payload counts against the scores table (and, when ``a`` is the
    initial policy under ``b``'s request, against cells.csv's lost and gained); each kind's filter lists that many."""
    ids = {(c["task"], c["template"], c["policy"], c["request"]): c["id"] for c in cells}
    open_view(page, url + f"#view=pair&a={ids[a]}&b={ids[b]}")
    shown = {k: int(page.get_attribute(f'button.count[data-measure="payload"][data-kind="{k}"]', "data-count"))
             for k in ("kept", "lost", "gained", "absent")}
    want = flips_from_scores(scores, a, b)
    assert shown == want, (shown, want)
    if cells_csv is not None:
        row = cells_csv[(cells_csv.task == b[0]) & (cells_csv.template.astype(str) == b[1])
                        & (cells_csv.policy == b[2]) & (cells_csv.request == b[3])]
        for kind in ("lost", "gained"):
            assert shown[kind] == int(row[row.measure == kind].value.iloc[0]), kind
    for kind, n in shown.items():
        if 0 < n <= 10:  # one page: every pair of the kind is listed
            page.click(f'button.count[data-measure="payload"][data-kind="{kind}"]')
            page.wait_for_function("k => document.body.dataset.ready.includes('kind=' + k)", arg=kind)
            assert len(page.query_selector_all(f'.pair[data-kind="{kind}"]')) == n == len(page.query_selector_all(".pair"))
    return shown


def check_study_in_browser(run: Path, shots: Path | None = None, scores_path: Path | None = None) -> None:
    """crossed-view on a study's (or an audit's, or a re-scoring's: ``scores_path``) folder: the grid against cells.csv
    and the report, a cell's response count, the paired counts of the initial policy and each arm under each request
    against the scores table and ΔP's lost/gained; screenshots of the grid and a paired view into ``shots``."""
    from playwright.sync_api import sync_playwright

    scores = pd.read_parquet(scores_path or run / "eval" / "scores.parquet")
    cells_csv = pd.read_csv(run / "analysis" / "cells.csv")
    with ViewServer(run) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        assert check_grid(page, server.url, run / "analysis") > 0
        if shots is not None:
            page.screenshot(path=str(shots / "view_grid.png"))
        cells = page.evaluate("fetch('/api/grid').then(r => r.json()).then(g => g.cells)")
        for c in cells[:2]:
            open_view(page, server.url + f"#view=cell&id={c['id']}")
            n = len(scores[(scores.task == c["task"]) & (scores.template == c["template"])
                           & (scores.policy == c["policy"]) & (scores.request == c["request"])])
            assert int(page.get_attribute("#total", "data-total")) == n
            assert "(the response file holds no record" not in page.inner_text("main")  # every response found
        keys = [(c["task"], c["template"], c["policy"], c["request"]) for c in cells]
        shot = None
        for key in keys:
            initial = (*key[:2], "initial", key[3])
            if key[2] != "initial" and initial in keys:
                found = check_flips(page, server.url, scores, cells, initial, key, cells_csv)
                if shot is None and found["lost"] and shots is not None:
                    shot = key
                    page.click('button.count[data-measure="payload"][data-kind="lost"]')
                    page.wait_for_function("() => document.body.dataset.ready.includes('kind=lost')")
                    page.screenshot(path=str(shots / "view_pair.png"))
        browser.close()


def rescoring_folder(small: Path, root: Path) -> Path:
    """A re-scoring folder as docs/rescoring.md makes one: one imported file per policy in ``resp/`` (every request
    in it), ``scores.parquet`` and ``analysis/`` beside; made from the small study's files (its scores' manifest
    names the study's files, so it is left behind: the viewer finds ``resp/`` beside the table)."""
    from crossed_rlvr.layout import RunLayout

    src = RunLayout(small)
    (root / "resp").mkdir(parents=True)
    for policy, _, _ in POLICIES:
        slug = policy.replace("/", "_")
        lines = [line for f in sorted(src.eval.responses.glob(f"{slug}__*.jsonl")) for line in f.read_text().splitlines()]
        (root / "resp" / f"{slug}.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(src.eval.scores, root / "scores.parquet")
    shutil.copytree(src.analysis, root / "analysis")
    return root
