"""The annotation page in a real headless browser (Debian's chromium, driven by Playwright): two
annotators complete both stages on a 12-item sample, Stage 2 is refused before Stage 1 is locked, no
Stage 1 page carries the reference, the server is killed mid-session and restarts with no label lost,
and ``analyze`` then produces the tables. Screenshots of each stage go to the test's folder."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from crossed_rlvr.calibration.cli import main
from tests.calibration_fixtures import scored_study

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BIN = Path(sys.executable).parent
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


class Server:
    def __init__(self, folder: Path) -> None:
        from crossed_rlvr.calibration.roles import declare_roles, load_roles

        self.folder = folder
        if load_roles(folder) is None:  # annotate serves only declared people
            declare_roles(folder, ["A", "B"], ["C"])
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([str(BIN / "crossed-calibrate"), "annotate", str(self.folder), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        self.url = re.search(r"http://\S+/", line).group(0)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)  # no shutdown: what is saved must already be on disk
        self.proc.wait()


def labelled(folder: Path, annotator: str, stage: str) -> int:
    db = sqlite3.connect(folder / "labels.sqlite")
    return db.execute("select count(*) from labels where annotator=? and stage=?", (annotator, stage)).fetchone()[0]


@pytest.fixture
def twelve(tmp_path):
    scores = scored_study(tmp_path)
    assert main(["sample", str(scores), "-o", str(tmp_path / "cal"), "--cap", "6"]) == 0  # the whole 2 x 6
    rows = [json.loads(x) for x in (tmp_path / "cal" / "sample.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    return tmp_path / "cal", {r["sample_id"]: r for r in rows}


def open_stage(page, server: "Server", annotator: str, stage: str) -> None:
    """The person's own link (declared roles); a name without one types it, and the server refuses it."""
    from crossed_rlvr.calibration.roles import load_roles

    roles = load_roles(server.folder)
    token = next((t for t, n in roles.tokens.items() if n == annotator), None)
    page.goto(f"{server.url}?token={token}" if token else server.url)
    if token:
        page.wait_for_function("n => document.getElementById('annotator').value === n", arg=annotator)
    else:
        page.fill("#annotator", annotator)
    page.select_option("#stage", stage)
    page.click("#start")
    page.wait_for_selector("#sid, #finished, #error:not(:empty)")


def stage1(page, rows, annotator, shots, stop_after=None) -> int:
    done = 0
    while page.query_selector("#sid"):
        sid = page.inner_text("#sid")
        body = page.inner_text("main")
        row = rows[sid]
        assert page.query_selector("#reference") is None and "Reference" not in body
        if row["reference"] not in row["response"]:
            assert row["reference"] not in body  # the reference never reaches a Stage 1 page
        if shots is not None and not (shots / "stage1.png").exists():
            page.screenshot(path=str(shots / "stage1.png"), full_page=True)
        page.keyboard.press("2" if "not sure" in row["response"] else "1")
        page.fill("#span", row["response"][-6:])
        page.click("#sid")  # keys go to the page again, not the text field
        page.keyboard.press("Enter")
        page.wait_for_function("s => !document.getElementById('sid') || document.getElementById('sid').innerText != s",
                               arg=sid)
        done += 1
        if stop_after is not None and done == stop_after:
            return done
    return done


def stage2(page, rows, annotator, shots) -> int:
    done = 0
    while page.query_selector("#sid"):
        sid = page.inner_text("#sid")
        row = rows[sid]
        assert page.inner_text("#reference") == row["reference"]
        assert "grpo" not in page.content() and "strict" not in page.inner_text("main")  # no model, no reader names
        if shots is not None and not (shots / "stage2.png").exists():
            page.screenshot(path=str(shots / "stage2.png"), full_page=True)
        page.keyboard.press("c" if "mv=1" in row["stratum"] else "i")
        n = len(page.query_selector_all(".fid"))
        if done == 0 and n > 1:  # a candidate left not judged is refused, never counted as "differs"
            page.keyboard.press("1")
            page.keyboard.press("Enter")
            page.wait_for_function("() => document.getElementById('error').innerText.includes('not judged')")
            assert page.inner_text("#sid") == sid
        page.keyboard.press("1") if page.eval_on_selector('.fid[data-k="0"]', "x => x.value") != "yes" else None
        for k in range(2, n + 1):  # the first candidate equals the commitment, the others differ
            page.keyboard.press(str(k))
            page.keyboard.press(str(k))
        page.keyboard.press("Enter")
        page.wait_for_function("s => !document.getElementById('sid') || document.getElementById('sid').innerText != s",
                               arg=sid)
        done += 1
    return done


@pytest.mark.long
def test_two_annotators_in_a_real_browser(twelve, tmp_path):
    from playwright.sync_api import sync_playwright

    folder, rows = twelve
    shots = tmp_path / "shots"
    shots.mkdir()
    server = Server(folder)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            asked = []
            page.on("dialog", lambda d: (asked.append(d.message), d.accept()))  # Lock asks for confirmation
            # annotator A: half of Stage 1, then the server dies mid-session
            open_stage(page, server, "A", "stage1")
            assert stage1(page, rows, "A", shots, stop_after=5) == 5
            server.kill()
            assert labelled(folder, "A", "stage1") == 5  # every label saved before the kill is on disk
            # a stopped server is said at once: the label was not saved (no stale message, no silent loss)
            page.keyboard.press("1")
            page.keyboard.press("Enter")
            page.wait_for_function("() => document.getElementById('error').innerText.includes('server unreachable')")
            assert page.evaluate("document.body.classList.contains('offline')")
            server.start()
            open_stage(page, server, "A", "stage1")
            assert stage1(page, rows, "A", shots) == 7  # resumes at the sixth item
            assert labelled(folder, "A", "stage1") == 12
            # Stage 2 is refused before Stage 1 is locked
            open_stage(page, server, "A", "stage2")
            assert "lock Stage 1" in page.inner_text("#error") and page.query_selector("#reference") is None
            open_stage(page, server, "A", "stage1")
            page.click("#lock")
            page.wait_for_selector("text=(locked)")
            assert asked and asked[0].startswith("Lock Stage 1")
            open_stage(page, server, "A", "stage2")
            assert stage2(page, rows, "A", shots) == 12
            page.click("#lock")
            # annotator B, in its own order
            open_stage(page, server, "B", "stage1")
            first_b = page.inner_text("#sid")
            assert stage1(page, rows, "B", None) == 12
            page.click("#lock")
            page.wait_for_selector("text=(locked)")
            open_stage(page, server, "B", "stage2")
            assert stage2(page, rows, "B", None) == 12
            page.click("#lock")
            page.wait_for_selector("text=(locked)")
            from crossed_rlvr.calibration.labels import LabelStore

            store = LabelStore(folder, list(rows.values()), json.loads((folder / "calibration.json").read_text())["seed"])
            assert first_b == store.order("B")[0] and store.order("A") != store.order("B")  # each their own order
            # adjudication of the fixed review share (A and B agree here)
            open_stage(page, server, "C", "adjudication")
            while page.query_selector("#sid"):
                sid = page.inner_text("#sid")
                page.keyboard.press("c" if "mv=1" in rows[sid]["stratum"] else "i")
                page.keyboard.press("Enter")
                page.wait_for_function(
                    "s => !document.getElementById('sid') || document.getElementById('sid').innerText != s", arg=sid)
            browser.close()
    finally:
        server.kill()
    assert labelled(folder, "A", "stage2") == labelled(folder, "B", "stage2") == 12
    assert main(["analyze", str(folder), "-o", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "(Table 3)" in report and "grpo-hash under hash (original)" in report
    assert (shots / "stage1.png").stat().st_size > 5000 and (shots / "stage2.png").stat().st_size > 5000
    target = os.environ.get("CALIBRATION_SCREENSHOTS")  # docs/img is refreshed from here on request
    if target:
        for name in ("stage1.png", "stage2.png"):
            shutil.copy(shots / name, Path(target) / f"calibration_{name}")


@pytest.mark.long
def test_a_personal_link_fixes_the_name_in_a_real_browser(twelve):
    """Declared roles: each person's link carries their token; the page shows their name, which
    cannot be edited, and the labels land under it whatever is typed; a third name's page reads nothing."""
    from playwright.sync_api import sync_playwright

    from crossed_rlvr.calibration.roles import declare_roles

    folder, rows = twelve
    roles = declare_roles(folder, ["A", "B"], ["C"])
    server = Server(folder)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            blocked: list[str] = []  # the page works under its own Content-Security-Policy
            page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
            response = page.goto(f"{server.url}?token={roles.token_of('A')}")
            headers = response.headers
            assert headers["content-security-policy"].startswith("default-src 'none'; script-src 'sha256-")
            assert "frame-ancestors 'none'" in headers["content-security-policy"]
            assert headers["referrer-policy"] == "no-referrer" and headers["x-frame-options"] == "DENY"
            # a function, not a bare expression: polled, an expression is eval'd in the page, which its CSP refuses
            page.wait_for_function("() => document.getElementById('annotator').value === 'A'")
            assert page.eval_on_selector("#annotator", "x => x.readOnly") is True
            page.select_option("#stage", "stage1")
            page.focus("#stage")
            page.keyboard.press("s")  # the self-correction key typed on the selector switches nothing
            assert page.eval_on_selector("#stage", "x => x.value") == "stage1"
            page.click("#start")
            page.wait_for_selector("#sid")
            assert stage1(page, rows, "A", None, stop_after=2) == 2
            # undo before the lock: Back re-opens the last item labelled, with its label, and saving changes it
            shown = page.inner_text("#sid")
            page.click("#back")
            # the page fetches the item before and its saved label: wait for both, not for the item it still shows
            page.wait_for_function("s => document.getElementById('sid') && document.getElementById('sid').innerText "
                                   "!= s && document.getElementById('span').value !== ''", arg=shown)
            sid = page.inner_text("#sid")
            assert page.eval_on_selector("#span", "x => x.value") == rows[sid]["response"][-6:]
            page.fill("#span", "changed")
            page.click("#sid")
            page.keyboard.press("3")  # ambiguous now
            page.keyboard.press("Enter")
            page.wait_for_function("s => !document.getElementById('sid') || document.getElementById('sid').innerText != s",
                                   arg=sid)
            db = sqlite3.connect(folder / "labels.sqlite")
            saved = json.loads(db.execute("select label from labels where annotator='A' and stage='stage1' and "
                                          "sample_id=?", (sid,)).fetchone()[0])
            assert (saved["status"], saved["span"]) == ("ambiguous", "changed")
            assert blocked == []
            # a script injected into the page (as a response's text would be, were it ever put in as HTML) is refused
            page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
                          " document.body.appendChild(s); }")
            assert page.evaluate("() => window.ran === undefined") and blocked
            # a page without a link (a typed third name) gets nothing
            other = browser.new_page()
            open_stage(other, server, "mallory", "stage2")
            assert "own link" in other.inner_text("#error") and other.query_selector("#sid") is None
            browser.close()
    finally:
        server.kill()
    assert labelled(folder, "A", "stage1") == 2 and labelled(folder, "mallory", "stage1") == 0
