"""Human calibration (paper 001 App. A): frozen sample, labels, bounds, tables, and bad input."""

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from crossed_rlvr.calibration.bounds import successes_interval
from crossed_rlvr.calibration.cli import main
from crossed_rlvr.calibration.labels import LabelError, LabelStore
from crossed_rlvr.calibration.sample import CalibrationError, load_calibration
from crossed_rlvr.calibration.simulate import census_estimate_equals_truth, coverage_simulation
from tests.calibration_fixtures import scored_study


@pytest.fixture
def calibration(tmp_path):
    scores = scored_study(tmp_path)
    assert main(["sample", str(scores), "-o", str(tmp_path / "cal"), "--cap", "2", "--seed", "5",
                 "--census", "strict=0|fallback=0|mv=0"]) == 0
    return tmp_path / "cal", scores


def labels_for(rows, annotator, flip=(), unfaithful=()):
    """Stage 1 and 2 labels that call a response correct when its Math-Verify bit says so."""
    out = []
    for r in rows:
        correct = "mv=1" in r["stratum"]
        status = "no_answer" if "not sure" in r["response"] else "clear"
        c = ("unresolved" if r["sample_id"] in flip else "correct" if correct else "incorrect")
        out.append({"annotator": annotator, "stage": "stage1", "sample_id": r["sample_id"], "status": status,
                    "span": r["response"][-6:]})
        out.append({"annotator": annotator, "stage": "stage2", "sample_id": r["sample_id"], "correctness": c,
                    "fidelity": [r["sample_id"] not in unfaithful] * len(r["candidates"])})
    return out


def test_frozen_sample_is_stratified_and_weighted(calibration):
    folder, _ = calibration
    head, rows = load_calibration(folder)
    assert head["cap"] == 2 and len({r["sample_id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["weight"] == r["N_h"] / r["n_h"] and r["n_h"] <= max(2, r["N_h"] if r["census"] else 2)
        assert "policy" not in r["sample_id"] and r["sample_id"].startswith("S")
    census = [r for r in rows if r["census"]]
    assert census and all(r["n_h"] == r["N_h"] for r in census)
    # population per state: the six items
    for state, g in pd.DataFrame(rows).groupby("state"):
        assert g.drop_duplicates("stratum").N_h.sum() == 6, state


def test_point_identification_and_simultaneous_coverage():
    assert census_estimate_equals_truth()  # nothing unresolved, whole strata: the population value itself
    assert successes_interval(3, 10, 10, 0.01) == (3, 3)
    result = coverage_simulation(1000)
    # the event the union bound guarantees: every endpoint x stratum cell holds its true count at once
    assert result["cells"] >= 0.95 - 3 * result["cells_mcse"], result
    print(f"\ncoverage over {result['draws']} frozen samples: states and gain together {result['all']:.3f} "
          f"({result['seconds']:.2f} s)")
    assert result["all"] >= 0.95 and result["gain"] >= 0.95


def test_analysis_tables_and_the_widths_identity(calibration, tmp_path):
    folder, _ = calibration
    _, rows = load_calibration(folder)
    flip = {rows[0]["sample_id"], rows[3]["sample_id"]}
    path = tmp_path / "labels.jsonl"
    # B judges the strict candidate of every sampled response of one state unfaithful: both annotators' fidelity
    # is analysed (Table 7: A, B, and the endpoint, faithful by both)
    odd = {r["sample_id"] for r in rows if r["state"] == "grpo-hash/s83:hash:original"}
    path.write_text("".join(json.dumps(x) + "\n" for a in ("A", "B")
                            for x in labels_for(rows, a, flip, odd if a == "B" else ())))
    assert main(["import", str(folder), str(path), "--lock"]) == 0
    assert main(["analyze", str(folder), "-o", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "report.md").read_text()
    for table in ("(Table 3)", "(Table 5)", "(Table 6, eq. 6)", "(Table 7)"):
        assert table in report
    cal = pd.read_csv(tmp_path / "out" / "calibration.csv")
    gain = cal[cal.quantity == "gain_human"].iloc[0]
    acc = cal[cal.quantity == "human_accuracy"].set_index("setting")
    u = (acc.estimate_high - acc.estimate_low)
    # App. A: the gain-range width is U_RL + U_0, on the report's own numbers
    assert gain.estimate_high - gain.estimate_low == pytest.approx(u["grpo-hash/s83:hash:original"]
                                                                   + u["initial:hash:original"])
    assert u.sum() > 0  # the flipped labels left something unresolved
    assert gain.ci_low <= gain.estimate_low <= gain.estimate_high <= gain.ci_high
    gap = cal[cal.quantity == "gap_strict_human"].iloc[0]
    strict = cal[cal.quantity == "gain_strict"].iloc[0].estimate_low
    assert (gap.estimate_low, gap.estimate_high) == pytest.approx((strict - gain.estimate_high,
                                                                   strict - gain.estimate_low))
    assert "| grpo-hash/s83:hash:original | 100.00 | 100.00 |" in report  # A and B gave the same labels
    line = next(x for x in report.splitlines() if x.startswith("| grpo-hash/s83:hash:original | 100.00 |"))
    assert line.endswith("| 100.00 / 0.00 / 0.00 |"), line
    assert next(x for x in report.splitlines() if x.startswith("| initial:hash:original | 100.00 |")).endswith(
        "| 100.00 / 100.00 / 100.00 |")
    fid = cal[(cal.quantity == "strict_candidate_fidelity")].set_index("setting").estimate_low
    assert fid["grpo-hash/s83:hash:original"] == 0 and fid["initial:hash:original"] == 1


def test_bad_input_is_refused_and_nothing_is_written(calibration, tmp_path):
    folder, scores = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    before = store.db.execute("select count(*) from labels").fetchone()[0]
    bad = tmp_path / "bad.jsonl"
    good = labels_for(rows[:1], "A")
    bad.write_text(json.dumps(good[0]) + "\n" + json.dumps({**good[0], "sample_id": "S9999"}) + "\n")
    with pytest.raises(LabelError, match=r"bad\.jsonl:2: sample id 'S9999' is not in this calibration"):
        store.import_labels(bad)
    assert store.db.execute("select count(*) from labels").fetchone()[0] == before  # the good line was not written
    with pytest.raises(LabelError, match="sample id 'S9999'"):
        store.put("A", "stage1", "S9999", {"status": "clear"})
    for r in rows:
        store.put("A", "stage1", r["sample_id"], {"status": "clear", "span": "x"})
    with pytest.raises(LabelError, match="must lock Stage 1 before Stage 2"):
        store.put("A", "stage2", rows[0]["sample_id"], {"correctness": "correct", "fidelity": [True] * 3})
    store.lock("A", "stage1")
    with pytest.raises(LabelError, match="A's stage1 is locked; a locked label is never replaced"):
        store.put("A", "stage1", rows[0]["sample_id"], {"status": "ambiguous"})
    kept = json.loads(store.db.execute("select label from labels where sample_id=? and stage='stage1'",
                                       (rows[0]["sample_id"],)).fetchone()[0])
    assert kept["status"] == "clear"
    # another scores file: refused, no analysis folder written
    other = tmp_path / "other.parquet"
    pd.read_parquet(scores).head(3).to_parquet(other)
    assert main(["analyze", str(folder), "--scores", str(other), "-o", str(tmp_path / "never")]) == 2
    assert not (tmp_path / "never").exists()
    other.replace(scores)  # the recorded scores file itself changed
    with pytest.raises(CalibrationError, match="not the scores file this sample was drawn from"):
        load_calibration(folder)
    with pytest.raises(CalibrationError, match=r"calibration.json exists: a frozen sample is never redrawn"):
        from crossed_rlvr.calibration.sample import write_calibration

        write_calibration(folder, scores, rows, {})
    assert sqlite3.connect(folder / "labels.sqlite").execute("select count(*) from locks").fetchone()[0] == 1


def test_candidate_fidelity_maps_back_to_its_reader(tmp_path):
    cands = {"strict_first_hash": "18", "lenient_hash_fallback": "17", "math_verify": "16"}
    rows = [{"sample_id": f"S{k}", "candidates": cands} for k in range(1, 9)]
    store = LabelStore(tmp_path, rows, seed=3)
    assert len({tuple(store.candidates(r["sample_id"])) for r in rows}) > 1  # the order differs between samples
    for r in rows:
        store.put("A", "stage1", r["sample_id"], {"status": "clear"})
    store.lock("A", "stage1")
    for r in rows:  # tick only the strict reader's value, wherever the page shows it
        marks = [v == "18" for v in store.candidates(r["sample_id"])]
        store.put("A", "stage2", r["sample_id"], {"correctness": "correct", "fidelity": marks})
        assert store.fidelity("A", r["sample_id"]) == {"strict_first_hash": True, "lenient_hash_fallback": False,
                                                       "math_verify": False}


@pytest.mark.parametrize(("extra", "first"), [
    (["--state", "initial:hash", "--state", "initial:hash"], "--state initial:hash:original is given more than once"),
    (["--cap", "0"], "sample: argument --cap: 0 is outside its range [1, 1,000,000]"),
    (["--cap", "-3"], "sample: argument --cap: -3 is outside its range [1, 1,000,000]"),
    (["--census", "strict=0|fallbak=1|mv=0"], "--census 'strict=0|fallbak=1|mv=0' names no stratum of the sampled "
                                               "states; their strata: "),
])
def test_bad_sample_options_are_refused_before_anything_is_frozen(tmp_path, capsys, extra, first):
    """A repeated state (human accuracy 1.3125), a census typo (ignored), caps below 1."""
    scores = scored_study(tmp_path)
    try:
        code = main(["sample", str(scores), "-o", str(tmp_path / "cal"), *extra])
    except SystemExit as stop:  # a flag out of its declared range (crossed_rlvr/limits.py)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.splitlines()[0]
    assert err.startswith(f"crossed-calibrate{' ' if first.startswith('sample:') else ': '}{first}"), err
    assert not (tmp_path / "cal" / "calibration.json").exists()


def test_the_calibration_folder_moves_with_its_scores_or_without_them(calibration, tmp_path, monkeypatch):
    """The scores path is kept relative to the folder; commands that do not read the scores
    (annotate, export, import) never ask for them."""
    import shutil

    folder, _scores = calibration
    head = json.loads((folder / "calibration.json").read_text())
    assert not Path(head["scores"]).is_absolute()
    monkeypatch.chdir(tmp_path.parent)  # another working directory: still found
    load_calibration(folder)
    laptop = tmp_path / "laptop" / "cal"
    shutil.copytree(folder, laptop)  # without the scores: labels can be made and exported
    assert main(["export", str(laptop), str(tmp_path / "labels.jsonl")]) == 0
    with pytest.raises(CalibrationError, match="no such scores file"):
        load_calibration(laptop)


def test_import_keeps_the_stage_order_refuses_duplicates_and_writes_all_or_nothing(calibration, tmp_path):
    """Stage 2 without Stage 1 (which crashed the adjudication queue), duplicate rows
    (last-wins), bad JSON in a CSV cell (a traceback), and an import killed midway (partial rows)."""
    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    labels = labels_for(rows, "A")
    stage2_only = tmp_path / "s2.jsonl"
    stage2_only.write_text("".join(json.dumps(x) + "\n" for x in labels if x["stage"] == "stage2"))
    with pytest.raises(LabelError, match=r"s2\.jsonl:1: A has no Stage 1 commitment for S\d+; Stage 2 comes after it"):
        store.import_labels(stage2_only, lock=True)
    both = tmp_path / "both.jsonl"
    both.write_text("".join(json.dumps(x) + "\n" for x in labels))
    with pytest.raises(LabelError, match=r"both\.jsonl:2: A's Stage 1 is not locked"):
        store.import_labels(both)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps(labels[0]) + "\n" + json.dumps({**labels[0], "status": "ambiguous"}) + "\n")
    with pytest.raises(LabelError, match=r"dup\.jsonl:2: A's stage1 label of S\d+ again \(first at .*dup\.jsonl:1\)"):
        store.import_labels(dup)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("annotator,stage,sample_id,correctness,fidelity\nA,stage2,S0001,correct,[true\n")
    with pytest.raises(LabelError, match=r"bad\.csv:2: field 'fidelity' is not valid JSON"):
        store.import_labels(bad_csv)
    assert store.db.execute("select count(*) from labels").fetchone()[0] == 0

    class Killed(Exception):
        pass

    class Dies:  # the connection, dying at the fifth row written
        def __init__(self, db):
            self.db, self.rows = db, 0

        def execute(self, sql, *args):
            if sql.startswith("insert"):
                self.rows += 1
                if self.rows == 5:
                    raise Killed
            return self.db.execute(sql, *args)

    real = store.db
    store.db = Dies(real)
    with pytest.raises(Killed):
        store.import_labels(both, lock=True)
    store.db = real
    assert real.execute("select count(*) from labels").fetchone()[0] == 0  # nothing, not four rows
    assert store.import_labels(both, lock=True) == len(labels)


@pytest.mark.exclusive
def test_the_server_answers_every_malformed_request_with_a_4xx_and_is_not_stalled(calibration):
    """Bodies that are not JSON objects of UTF-8 text, bad lengths, oversize bodies,
    other origins and foreign Host headers get a 4xx and a message; an idle connection stalls no one."""
    import http.client
    import socket
    import threading
    import time

    from crossed_rlvr.calibration.server import serve

    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    server = serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    idle = socket.create_connection(("127.0.0.1", port))  # connects and sends nothing
    try:
        def post(body: bytes, headers: dict | None = None, path: str = "/api/label"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.putrequest("POST", path, skip_host=True)
            hdrs = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), **(headers or {})}
            for k, v in hdrs.items():
                conn.putheader(k, v)
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}").get("error", "")

        sid = rows[0]["sample_id"]
        start = time.perf_counter()
        assert post(b"[1, 2]") == (400, "the body must be a JSON object, got list")
        assert post(json.dumps({"annotator": "A", "stage": "stage1", "sample_id": sid, "label": "x"}).encode()) == \
            (400, "field 'label' must be a JSON object")
        assert post(b'{"annotator": "\xff"}') == (400, "the body is not UTF-8 text")
        assert post(b"{}", {"Content-Length": "abc"})[0] == 400
        assert post(b"{}", {"Content-Length": "²"})[0] == 400  # a Unicode digit int() refuses
        assert post(b"x" * 10, {"Content-Length": str(2 << 20)})[0] == 413
        assert post(b"{}", {"Origin": "http://evil.example"})[0] == 403
        assert post(b"{}", {"Host": "evil.example"})[0] == 421
        ok = json.dumps({"annotator": "A", "stage": "stage1", "sample_id": sid, "label": {"status": "clear", "span": "x"}})
        assert post(ok.encode(), {"Origin": f"http://127.0.0.1:{port}"})[0] == 200
        assert time.perf_counter() - start < 5  # the idle connection held up nothing
    finally:
        idle.close()
        server.shutdown()
    with pytest.raises(PermissionError, match="pass --allow-remote"):
        serve(store, "0.0.0.0", 0)


@pytest.mark.parametrize("names", [("alice", "bob"), ("zed", "bob")])
def test_adjudication_decides_whatever_the_annotators_are_called(calibration, tmp_path, names):
    """Alice = no_answer/incorrect, bob = clear/correct, carol adjudicates correct: the final
    label is correct with an answer, also when alice is renamed zed (it used to flip z between (0,0) and (1,1));
    an adjudicated 'unresolved' stays unresolved (eq. 10); two differing adjudications are refused."""
    from crossed_rlvr.calibration.analysis import z_values as z_of

    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    first, second = names
    for who, status, correctness in ((first, "no_answer", "incorrect"), (second, "clear", "correct")):
        for r in rows:
            store.put(who, "stage1", r["sample_id"], {"status": status if r is rows[0] else "clear", "span": "x"})
        store.lock(who, "stage1")
        for r in rows:
            store.put(who, "stage2", r["sample_id"], {"correctness": correctness if r is rows[0] else "correct",
                                                      "fidelity": [True] * len(r["candidates"])})
        store.lock(who, "stage2")
    disputed, other = rows[0]["sample_id"], rows[1]["sample_id"]
    assert disputed in store.to_adjudicate()
    store.put("carol", "adjudication", disputed, {"correctness": "correct"})
    final = store.final()[disputed]
    assert (final["correctness"], final["status"]) == ("correct", "clear") and z_of(final) == (1, 1)
    store.put("carol", "adjudication", disputed, {"correctness": "unresolved"})
    assert z_of(store.final()[disputed]) == (0, 1)
    store.put("dave", "adjudication", disputed, {"correctness": "incorrect"})
    with pytest.raises(LabelError, match=f"sample {disputed}: adjudications differ"):
        store.final()
    if other not in store.to_adjudicate():
        with pytest.raises(LabelError, match="is not in the adjudication queue"):
            store.put("carol", "adjudication", other, {"correctness": "incorrect"})


def test_csv_export_is_safe_to_open_in_a_spreadsheet_and_round_trips(calibration, tmp_path):
    """A span such as '=HYPERLINK(...)' is written with a leading quote and read back as typed."""
    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    store.put("A", "stage1", rows[0]["sample_id"], {"status": "clear", "span": "=HYPERLINK(\"x\")"})
    out = tmp_path / "labels.csv"
    store.export(out)
    assert "'=HYPERLINK" in out.read_text()
    other = tmp_path / "other"
    import shutil

    shutil.copytree(folder, other)
    (other / "labels.sqlite").unlink()
    again = LabelStore(other, rows, head["seed"])
    again.import_labels(out)
    assert again.labels("A", "stage1")[("A", "stage1", rows[0]["sample_id"])]["span"] == "=HYPERLINK(\"x\")"



@pytest.mark.parametrize("mutation", ["no multiplicity correction", "Wald intervals"])
def test_the_coverage_check_catches_a_wrong_method(mutation):
    """The check fails for a wrong method (the identification ranges alone held ~100% for
    every method tried, so they could not)."""
    from crossed_rlvr.calibration.simulate import wald_interval

    kwargs = {"corrected": False} if mutation.startswith("no") else {"interval": wald_interval}
    result = coverage_simulation(500, 0, **kwargs)
    assert result["cells"] + 3 * result["cells_mcse"] < 0.95, result


def test_a_label_text_has_a_size_limit(calibration):
    """A 50 MB span was stored."""
    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    with pytest.raises(LabelError, match="field 'span' holds 50,000 characters; a label's text is at most 20,000"):
        store.put("A", "stage1", rows[0]["sample_id"], {"status": "clear", "span": "x" * 50_000})


def test_declared_roles_decide_who_reads_and_writes(calibration):
    """With roles declared, a person is their link's token, not a typed name: a third
    name reads nothing, A cannot write B's labels, annotators cannot adjudicate nor adjudicators annotate, and
    a name that locks Stage 2 never becomes A or B."""
    import http.client
    import threading
    from urllib.parse import quote

    from crossed_rlvr.calibration.roles import declare_roles
    from crossed_rlvr.calibration.server import serve

    folder, _ = calibration
    roles = declare_roles(folder, ["ann", "bob"], ["carol"])
    assert declare_roles(folder, ["ann", "bob"], ["carol"]) == roles  # the same declaration again
    with pytest.raises(CalibrationError, match="roles are already declared"):
        declare_roles(folder, ["ann", "trainee"], ["carol"])
    assert (folder / "roles.json").stat().st_mode & 0o077 == 0  # the links are credentials
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    server = serve(store, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    def call(method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Length": str(len(data or b""))})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")

    ann, bob, carol = (roles.token_of(n) for n in ("ann", "bob", "carol"))
    sid = rows[0]["sample_id"]
    label = {"status": "clear", "span": "x"}
    try:
        assert call("GET", "/api/next?annotator=mallory&stage=stage2")[0] == 403  # a typed name is no one
        assert call("GET", f"/api/next?annotator=bob&stage=stage1&token={quote(ann)}")[0] == 403
        assert call("GET", f"/api/whoami?token={quote(ann)}")[1] == {"name": "ann", "role": "annotator",
                                                                      "declared": True}
        status, body = call("POST", "/api/label", {"annotator": "bob", "stage": "stage1", "sample_id": sid,
                                                   "label": label, "token": ann})
        assert (status, body["error"]) == (403, "this link is ann's; it cannot read or write bob's labels")
        assert call("POST", "/api/label", {"stage": "stage1", "sample_id": sid, "label": label, "token": ann})[0] == 200
        assert store.labels("ann", "stage1") and not store.labels("bob", "stage1")
        # undo before the lock: one's own labelled item comes back with its label; another's never does
        status, body = call("GET", f"/api/item?stage=stage1&sample_id={sid}&token={quote(ann)}")
        assert status == 200 and body["label"]["span"] == "x" and body["item"]["sample_id"] == sid
        assert call("GET", f"/api/item?stage=stage1&sample_id={sid}&token={quote(bob)}")[0] == 409
        assert call("GET", f"/api/next?stage=stage2&token={quote(ann)}")[0] == 409  # Stage 2 waits for the lock
        assert call("GET", f"/api/next?stage=adjudication&token={quote(ann)}")[0] == 403
        assert call("GET", f"/api/next?stage=stage1&token={quote(carol)}")[0] == 403
        assert call("GET", f"/api/next?stage=adjudication&token={quote(bob)}")[0] == 403
    finally:
        server.shutdown()
    with pytest.raises(LabelError, match="'trainee' has no stage1 role"):
        store.put("trainee", "stage1", sid, label)


@pytest.mark.parametrize("method", ["exact, corrected", "no multiplicity correction", "Wald intervals"])
@pytest.mark.long
def test_coverage_through_analyze_itself(method):
    """The check run through ``analyze_calibration`` (settings, seed means, the full M of 5 endpoints)
    over frozen samples of a population with known truth: the exact corrected bounds hold every quantity at
    once in >= 95% of samples; without the multiplicity correction, or with Wald intervals, they do not.
    Seeded, so the figures are fixed: 0.99 / 0.85 / 0.61 at 150 samples (the closing note's table)."""
    from crossed_rlvr.calibration.simulate import ANALYSIS_QUANTITIES, analysis_coverage, wald_interval

    kwargs = {"exact, corrected": {}, "no multiplicity correction": {"corrected": False},
              "Wald intervals": {"interval": wald_interval}}[method]
    result = analysis_coverage(150, 1, **kwargs)
    assert set(ANALYSIS_QUANTITIES) <= set(result) and result["draws"] == 150
    if method.startswith("exact"):
        assert result["all"] >= 0.95 and all(result[q] >= 0.95 for q in ANALYSIS_QUANTITIES), result
    else:
        assert result["all"] + 2 * result["all_mcse"] < 0.95, result  # below 0.95 by more than 2 MC errors


def test_reference_flags_and_review_requests_reach_the_adjudicator(calibration, tmp_path):
    """App. A: an annotator flags a reference or asks for review in Stage 2; the item joins the adjudication
    queue although A and B agree, and the adjudicator sees the flag and the note."""
    from crossed_rlvr.calibration.server import item_view

    folder, _ = calibration
    head, rows = load_calibration(folder)
    labels = labels_for(rows, "A") + labels_for(rows, "B")
    flagged, asked = rows[1]["sample_id"], rows[2]["sample_id"]
    for lab in labels:
        if lab["annotator"] == "B" and lab["stage"] == "stage2" and lab["sample_id"] == flagged:
            lab.update(reference_flag=True, note="the reference drops the units")
        if lab["annotator"] == "A" and lab["stage"] == "stage2" and lab["sample_id"] == asked:
            lab.update(review=True)
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in labels))
    assert main(["import", str(folder), str(path), "--lock"]) == 0
    store = LabelStore(folder, rows, head["seed"])
    queue = store.to_adjudicate()
    assert flagged in queue and asked in queue
    seen = item_view(store, "C", "adjudication", flagged)
    assert [lab.get("reference_flag") for lab in seen["labels"]] == [False, True]
    assert seen["labels"][1]["note"] == "the reference drops the units"
    # the round trip through CSV keeps them
    out = tmp_path / "labels.csv"
    store.export(out)
    text = out.read_text()
    assert "reference_flag" in text and "the reference drops the units" in text


def test_annotate_serves_only_declared_people(calibration, capsys):
    """A typed name decides nothing. Without declared roles, annotate refuses to serve and says how
    to declare them; nothing is written."""
    folder, _ = calibration
    assert main(["annotate", str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "no declared roles; declare who labels" in err and "--annotators A,B --adjudicator C" in err
    assert not (folder / "roles.json").exists()


def test_the_calibration_folder_is_private(calibration, capsys):
    """The sample, the labels and the roles are the owner's alone; a roles file others can read (its
    tokens are credentials) is refused with the fix, before anything is served."""
    from crossed_rlvr.calibration.roles import declare_roles

    folder, _ = calibration
    assert (folder / "sample.jsonl").stat().st_mode & 0o077 == 0
    head, rows = load_calibration(folder)
    LabelStore(folder, rows, head["seed"])
    assert (folder / "labels.sqlite").stat().st_mode & 0o077 == 0
    declare_roles(folder, ["ann", "bob"], ["carol"])
    (folder / "roles.json").chmod(0o644)
    assert main(["annotate", str(folder), "--port", "0"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"crossed-calibrate: {folder}/roles.json: readable by other users (mode 644); its tokens are the annotators' "
        f"credentials. Run: chmod 600 {folder}/roles.json")


def test_locks_are_for_known_stages_and_an_adjudicator_cannot_relabel_after_locking(calibration):
    """A lock of stage '' wrote a junk lock row; an adjudicator could relabel after locking."""
    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    with pytest.raises(LabelError, match="stage '' is unknown; expected one of stage1, stage2, adjudication"):
        store.lock("A", "")
    assert store.db.execute("select count(*) from locks").fetchone()[0] == 0
    for who, correctness in (("A", "incorrect"), ("B", "correct")):
        for r in rows:
            store.put(who, "stage1", r["sample_id"], {"status": "clear", "span": "x"})
        store.lock(who, "stage1")
        for r in rows:
            store.put(who, "stage2", r["sample_id"], {"correctness": correctness if r is rows[0] else "correct",
                                                      "fidelity": [True] * len(r["candidates"])})
        store.lock(who, "stage2")
    queue = store.to_adjudicate()
    assert rows[0]["sample_id"] in queue
    store.put("C", "adjudication", queue[0], {"correctness": "correct"})
    if len(queue) > 1:  # the adjudicator locks the queue, not the whole sample
        with pytest.raises(LabelError, match="adjudication cannot be locked"):
            store.lock("C", "adjudication")
    for sid in queue[1:]:
        store.put("C", "adjudication", sid, {"correctness": "correct"})
    store.lock("C", "adjudication")
    with pytest.raises(LabelError, match="C's adjudication is locked; a locked label is never replaced"):
        store.put("C", "adjudication", queue[0], {"correctness": "incorrect"})
    assert store.final()[queue[0]]["correctness"] == "correct"


def test_import_reads_a_spreadsheets_csv_with_a_byte_order_mark_and_refuses_lists_as_names(calibration, tmp_path):
    """Excel's 'CSV UTF-8' starts with a BOM (read as part of the first column's name: "missing field
    'annotator'"); a JSON label whose annotator is a list reached SQLite as a TypeError."""
    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    sid = rows[0]["sample_id"]
    csv_path = tmp_path / "labels.csv"
    csv_path.write_bytes(b"\xef\xbb\xbfannotator,sample_id,span,stage,status\r\nA," + sid.encode()
                         + b",x,stage1,clear\r\n")
    assert store.import_labels(csv_path) == 1
    assert store.labels("A", "stage1")[("A", "stage1", sid)]["status"] == "clear"
    bad = tmp_path / "labels.jsonl"
    bad.write_text(json.dumps({"annotator": ["A"], "stage": "stage1", "sample_id": sid, "status": "clear"}) + "\n")
    with pytest.raises(LabelError, match=r'labels.jsonl:1: field .annotator. is \["A"\] \(list\); expected text'):
        store.import_labels(bad)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"annotator,sample_id,span,stage,status\r\nJos\xe9," + sid.encode() + b",x,stage1,clear\r\n")
    with pytest.raises(LabelError, match=r"not UTF-8 text .* save the sheet as CSV UTF-8"):
        store.import_labels(latin)


def test_the_server_holds_64_simultaneous_saves(calibration):
    """40 simultaneous writes reset 8 connections (socketserver's listen backlog of 5)."""
    import http.client
    import threading

    from crossed_rlvr.calibration.server import serve

    folder, _ = calibration
    head, rows = load_calibration(folder)
    store = LabelStore(folder, rows, head["seed"])
    server = serve(store, "127.0.0.1", 0)
    assert server.request_queue_size == 64
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    statuses: list[int | str] = []
    barrier = threading.Barrier(64)

    def save(k: int) -> None:
        body = json.dumps({"annotator": f"A{k}", "stage": "stage1", "sample_id": rows[k % len(rows)]["sample_id"],
                           "label": {"status": "clear", "span": "x"}}).encode()
        try:
            barrier.wait()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/api/label", body=body, headers={"Content-Length": str(len(body))})
            statuses.append(conn.getresponse().status)
        except OSError as err:
            statuses.append(type(err).__name__)

    try:
        threads = [threading.Thread(target=save, args=(k,)) for k in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.shutdown()
    assert statuses == [200] * 64, statuses
    assert len(store.labels(stage="stage1")) == 64


def test_a_stage1_pack_carries_no_reference_candidate_or_policy_and_its_labels_come_home(calibration, tmp_path,
                                                                                           capsys):
    """The calibration folder holds each observation's policy, reference and reader candidates and every
    person's link; the pack for one annotator's laptop holds ids, questions, responses and that one link, 0600,
    serves Stage 1 only, and its labels import into the folder, where Stage 2 then opens."""
    from crossed_rlvr.calibration.roles import declare_roles

    folder, _ = calibration
    roles = declare_roles(folder, ["ann", "bob"], ["carol"])
    _, rows = load_calibration(folder)
    pack = tmp_path / "ann-stage1"
    assert main(["pack", str(folder), "-o", str(pack), "--annotator", "ann"]) == 0
    files = {p.name: p for p in pack.iterdir()}
    assert set(files) == {"sample.jsonl", "calibration.json", "roles.json"}
    assert all(p.stat().st_mode & 0o077 == 0 for p in files.values())
    text = "".join(p.read_text() for p in files.values())
    for r in rows:
        assert r["reference"] not in ("", None)
    packed = [json.loads(line) for line in files["sample.jsonl"].read_text().splitlines()]
    assert [set(r) for r in packed] == [{"sample_id", "question", "response", "candidates"}] * len(rows)
    assert all(r["candidates"] == {} for r in packed)
    assert "reference" not in text and "policy" not in text and roles.token_of("bob") not in text
    assert roles.token_of("ann") in text
    # the pack labels Stage 1 only
    from crossed_rlvr.calibration.cli import _store

    store, _, _ = _store(pack)
    for r in packed:
        store.put("ann", "stage1", r["sample_id"], {"status": "clear", "span": "x"})
    store.lock("ann", "stage1")
    with pytest.raises(LabelError, match="this folder is ann's Stage 1 pack; stage2 opens in the calibration folder"):
        store.put("ann", "stage2", packed[0]["sample_id"], {"correctness": "correct", "fidelity": []})
    assert main(["analyze", str(pack)]) == 2
    assert "a Stage 1 pack for ann; analyse in the calibration folder" in capsys.readouterr().err
    # home again: the labels import (locked), and Stage 2 opens there with the references
    assert main(["export", str(pack), str(tmp_path / "ann.jsonl")]) == 0
    assert main(["import", str(folder), str(tmp_path / "ann.jsonl"), "--lock"]) == 0
    home, _, _ = _store(folder)
    assert home.locked("ann", "stage1") and len(home.labels("ann", "stage1")) == len(rows)
    assert main(["pack", str(folder), "-o", str(pack), "--annotator", "ann"]) == 2  # never over an existing folder
    assert main(["pack", str(folder), "-o", str(tmp_path / "x"), "--annotator", "carol"]) == 2
