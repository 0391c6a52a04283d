"""crossed-view in a real headless browser (Debian's chromium, driven by Playwright, as the annotation page's tests):
the grid's numbers against cells.csv and the report, a cell's responses (count, paging, search, a link each), the
paired view's counts against the scores table and ΔP's lost/gained, a hostile response shown as text, the refused
paths, hosts and origins, nothing written; and a GSM8K-sized run (1,319 items x 2 requests x 11 policies, replicated
from a small run's records) opening its grid in under 2 s and a cell's first page in under 1 s."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.view_fixtures import (
    CHROMIUM,
    FLAGS,
    HOSTILE,
    N_ITEMS,
    ViewServer,
    check_flips,
    check_grid,
    check_study_in_browser,
    gsm8k_sized,
    open_view,
    rescoring_folder,
    small_study,
)

GRID_S, PAGE_S = 2.0, 1.0  # the bounds a GSM8K-sized run must open within
# one worker builds the small study once for every test here (tests/conftest.py)
WORKER_GROUP = "view"
SHARED_FIXTURES = ("study",)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return small_study(tmp_path_factory.mktemp("view") / "study")


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def grid_cells(page) -> list[dict]:
    return page.evaluate("fetch('/api/grid').then(r => r.json()).then(g => g.cells)")


@pytest.mark.long
def test_grid_responses_and_pairs_in_a_real_browser(study):
    from playwright.sync_api import sync_playwright

    scores = pd.read_parquet(study / "eval" / "scores.parquet")
    cells_csv = pd.read_csv(study / "analysis" / "cells.csv")
    before = files_of(study)
    with ViewServer(study) as server, sync_playwright() as p:
        assert f"ssh -N -L {server.port}:127.0.0.1:{server.port}" in server.second
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        response = page.goto(server.url)
        csp = response.headers["content-security-policy"]
        assert csp.startswith("default-src 'none'; script-src 'sha256-") and "frame-ancestors 'none'" in csp
        assert check_grid(page, server.url, study / "analysis") == 6  # 3 policies x 2 requests
        cells = grid_cells(page)
        ids = {(c["policy"], c["request"]): c["id"] for c in cells}
        # a cell's responses: all of them counted, each with its link
        open_view(page, server.url + f"#view=cell&id={ids[('grpo-hash/s83', 'boxed')]}")
        assert int(page.get_attribute("#total", "data-total")) == N_ITEMS == len(page.query_selector_all(".response"))
        first = page.query_selector(".response")
        assert "requested" in first.inner_text() and first.query_selector("tr[data-reader='boxed_first']")
        assert first.query_selector("mark[data-conv='hash']")  # the arm's own convention, not the requested one
        # search by text and by item id
        page.fill("#search", "so the sum is")
        page.click("#search-go")
        page.wait_for_function("() => document.body.dataset.ready.includes('q=')")
        assert int(page.get_attribute("#total", "data-total")) == 0  # the arm never writes it
        open_view(page, server.url + f"#view=cell&id={ids[('initial', 'hash')]}&q=so%20the%20sum%20is")
        assert int(page.get_attribute("#total", "data-total")) == 1
        open_view(page, server.url + f"#view=cell&id={ids[('initial', 'hash')]}&q=7")
        assert page.get_attribute(".response", "data-item") == "7" and page.get_attribute("#total", "data-total") == "1"
        # the hostile response, by its own link: shown as text, nothing run, no element made from it
        open_view(page, server.url + f"#view=cell&id={ids[('initial', 'hash')]}&q=4")
        page.click(".response .permalink")
        page.wait_for_function("() => document.body.dataset.ready.includes('view=response')")
        text = page.inner_text(".response pre.text")
        assert "<script>window.pwned = 1</script>" in text and 'onerror="window.pwned = 2"' in text
        assert page.evaluate("() => window.pwned === undefined")
        assert page.query_selector(".response img") is None and len(page.query_selector_all("script")) == 1
        assert HOSTILE.split("\n", 1)[0].split(" so the sum")[0] in text  # the markup whole, as written
        # two cells item by item: the initial policy and an arm under one request, one policy under two requests
        key = ("toy", "original")
        for a, b in ((("initial", "hash"), ("grpo-hash/s83", "hash")), (("initial", "boxed"), ("grpo-hash/s83", "boxed")),
                     (("grpo-boxed/s83", "hash"), ("grpo-boxed/s83", "boxed"))):
            shown = check_flips(page, server.url, scores, cells, (*key, *a), (*key, *b),
                                cells_csv if a[0] == "initial" else None)
            assert sum(shown.values()) == N_ITEMS
        # the correctness flips: the strict reader of each cell's request, counted from the scores here
        open_view(page, server.url + f"#view=pair&a={ids[('initial', 'hash')]}&b={ids[('grpo-hash/s83', 'hash')]}")
        one = scores[(scores.request == "hash")].set_index(["policy", "item_id"])["strict_first_hash.correct"]
        before_ok, after_ok = one.loc["initial"].astype(bool), one.loc["grpo-hash/s83"].astype(bool)
        assert int(page.get_attribute('button.count[data-measure="strict"][data-kind="lost"]', "data-count")) == int(
            (before_ok & ~after_ok).sum())
        assert int(page.get_attribute('button.count[data-measure="strict"][data-kind="gained"]', "data-count")) == int(
            (~before_ok & after_ok).sum())
        assert blocked == []
        browser.close()
    assert files_of(study) == before  # the server wrote nothing


def raw_get(port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    """A request sent as written (no client normalises its ``..``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", (headers or {}).pop("Host", f"127.0.0.1:{port}"))
    for k, v in (headers or {}).items():
        conn.putheader(k, v)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_the_server_refuses_what_is_not_its_own(study):
    before = files_of(study)
    with ViewServer(study) as server:
        port = server.port
        assert raw_get(port, "/") == 200 and raw_get(port, "/api/grid") == 200
        for path in ("/../eval/scores.parquet", "/%2e%2e/%2e%2e/etc/passwd", "/%252e%252e/etc/passwd",
                     "/api/..%2f..%2fetc%2fpasswd", "/api/%2E%2E/cell?id=0", "/..\\eval\\scores.parquet"):
            assert raw_get(port, path) == 400, path
        for path in ("/eval/scores.parquet", "/analysis/report.md", "/etc/passwd", "/api/cell?id=999",
                     "/api/response?id=0&item=nope"):
            assert raw_get(port, path) == 404, path
        assert raw_get(port, "/api/cell?id=../../0") == 400
        assert raw_get(port, "/api/grid", {"Host": "evil.example:80"}) == 421  # DNS rebinding
        assert raw_get(port, "/api/grid", {"Origin": "http://evil.example"}) == 403
        assert raw_get(port, "/api/grid", {"Origin": f"http://127.0.0.1:{port}"}) == 200
        for method in ("POST", "PUT", "DELETE"):
            assert raw_get(port, "/api/grid", method=method) == 501  # read-only: no handler writes
    assert files_of(study) == before
    # beyond this machine only when asked; a folder that is not a run is said in one line
    for args, said in (([str(study), "--host", "0.0.0.0"], "--allow-remote"), ([str(study / "analysis")], "not a run")):
        proc = subprocess.run([sys.executable, "-m", "crossed_rlvr.view.cli", *args, "--port", "0"], capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.long
def test_a_gsm8k_sized_run_opens_in_time(study, tmp_path):
    from playwright.sync_api import sync_playwright

    run = gsm8k_sized(study, tmp_path / "gsm8k")  # a crossed-eval folder: scores.parquet, responses/, items/
    scores = pd.read_parquet(run / "scores.parquet")
    assert len(scores) == 1319 * 2 * 11
    with ViewServer(run) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        start = time.perf_counter()  # a fresh page: its HTML, its script and the grid
        open_view(page, server.url + "#view=grid")
        grid_s = time.perf_counter() - start
        assert len(page.query_selector_all("table.grid td.cell")) == 22
        cells = grid_cells(page)
        arm = next(c for c in cells if c["policy"] == "grpo-hash/s81" and c["request"] == "boxed")
        start = time.perf_counter()
        open_view(page, server.url + f"#view=cell&id={arm['id']}")
        page_s = time.perf_counter() - start
        print(f"GSM8K-sized run ({len(scores):,} responses): server ready in {server.start_s:.2f} s, grid "
              f"{grid_s:.3f} s, a cell's first page {page_s:.3f} s")
        assert grid_s < GRID_S and page_s < PAGE_S, (grid_s, page_s)
        assert int(page.get_attribute("#total", "data-total")) == 1319 and len(page.query_selector_all(".response")) == 20
        # paged on the server: the grid carries no response, a page twenty
        sizes = page.evaluate("""async (id) => [(await (await fetch('/api/grid')).text()).length,
                                                (await (await fetch('/api/cell?id=' + id)).text()).length]""", arm["id"])
        assert "####" not in page.evaluate("fetch('/api/grid').then(r => r.text())")
        assert sizes[0] < 50_000 and sizes[1] < 200_000, sizes
        page.click(".pager .next")
        page.wait_for_function("() => document.body.dataset.ready.includes('page=1')")
        assert page.get_attribute(".response", "data-item") == "20"
        key = ("toy", "original")
        check_flips(page, server.url, scores, cells, (*key, "initial", "boxed"), (*key, "grpo-hash/s81", "boxed"))
        browser.close()


@pytest.mark.long
def test_a_rescoring_folder_in_a_real_browser(study, tmp_path):
    """Imported responses (one file per policy, every request in it), scores.parquet and analysis/ side by side."""
    run = rescoring_folder(study, tmp_path / "rescoring")
    check_study_in_browser(run, scores_path=run / "scores.parquet")


def test_each_conventions_last_payload_is_marked_as_text():
    """The page's segments: each convention's last qualifying payload marked, the requested one flagged; the text
    rejoined is the response, character for character (nothing added, nothing escaped)."""
    from crossed_rlvr.view.marks import segments

    text = 'So 5 + 2 = 7, maybe \\boxed{6}\n#### 7\n{"answer": 7} <answer>7</answer> and <b>bold</b>'
    found = segments(text, "boxed")
    assert "".join(s["text"] for s in found) == text
    marked = {s["mark"]: (s["text"], s["requested"]) for s in found if s["mark"]}
    assert marked == {"boxed": ("\\boxed{6}", True), "hash": ("7", False), "json": ("7", False),
                      "xml": ("7", False)}
    assert segments("no payload at all", "hash") == [{"text": "no payload at all", "mark": None}]
    # a payload inside another's (a hash line that runs on into a box): each keeps its own characters
    inner = segments("#### 7 and \\boxed{8}", "hash")
    assert [(s["text"], s["mark"]) for s in inner] == [("#### ", None), ("7 and ", "hash"), ("\\boxed{8}", "boxed")]
