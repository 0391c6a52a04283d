"""``crossed-calibrate``: human calibration of committed answers (paper 001 App. A).

    crossed-calibrate sample runs/study/eval/scores.parquet -o cal/ --state initial:hash --state grpo-hash/s83:hash
    crossed-calibrate annotate cal/            # http://127.0.0.1:8765 (Stage 1, Stage 2, adjudication)
    crossed-calibrate export cal/ labels.jsonl # or .csv; `import` reads the same format
    crossed-calibrate pack cal/ -o ann/ --annotator ann   # Stage 1 only, for another machine
    crossed-calibrate analyze cal/ -o cal/analysis
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from crossed_rlvr.calibration.sample import (
    CalibrationError,
    State,
    build_sample,
    load_calibration,
    scores_file,
    write_calibration,
)
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import CalibrationLayout, EvalLayout
from crossed_rlvr.limits import Parser, add_number


def _responses(paths: list[Path]) -> dict[tuple, dict]:
    from crossed_rlvr.records import read_responses

    recs = read_responses(paths).records
    return {(r["task"], r["policy"], r["request"], r["template"], str(r["item_id"]), int(r["sample_idx"])): r
            for r in recs}


def _questions(paths: list[Path]) -> dict[tuple[str, str], str]:
    from crossed_rlvr.tasks.items import read_items

    out = {}
    for path in paths:
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        for f in files:
            task = f.stem.rsplit("-", 1)[0]
            for it in read_items(f)[0]:  # checked: file, line and field named on a bad row
                out[(task, it["item_id"])] = it["question"]
    return out


def cmd_sample(args: argparse.Namespace) -> int:
    from crossed_rlvr.eval.score.checks import ScoresTableError, read_scores

    scores = Path(args.scores)
    try:
        read_scores(scores)  # every row checked before a sample is drawn from it
    except ScoresTableError as err:
        raise CalibrationError(str(err)) from None
    eval_dir = scores.parent
    responses = [Path(p) for p in args.responses] if args.responses else [EvalLayout(eval_dir).responses]
    items = [Path(p) for p in args.items] if args.items else [EvalLayout(eval_dir).items_folder]
    if args.cap < 1:
        raise CalibrationError(f"--cap {args.cap}: a stratum needs at least 1 sampled response")
    states = [State.parse(s) for s in args.state] if args.state else _default_states(scores)
    repeated = sorted({s.key() for s in states if [t.key() for t in states].count(s.key()) > 1})
    if repeated:  # a state twice would be sampled twice and weighted as if it were two (App. A's n_h)
        raise CalibrationError(f"--state {repeated[0]} is given more than once")
    rows = build_sample(scores, _responses(responses), _questions(items), states, args.cap, args.seed, args.census,
                        tuple(args.readers.split(",")) if args.readers else None)
    out = write_calibration(Path(args.out), scores, rows, {
        "states": [s.key() for s in states], "cap": args.cap, "seed": args.seed, "census": args.census,
        "readers": args.readers})
    print(f"froze {len(rows)} observations from {len(states)} states in {out}")
    return 0


def _default_states(scores: Path) -> list[State]:
    import pandas as pd

    df = pd.read_parquet(scores, columns=["policy", "request", "template"])
    keys = sorted({(p, r) for p, r, t in zip(df.policy, df.request, df.template) if t == "original"})
    return [State(p, r) for p, r in keys]


def _store(folder: Path, check_scores: bool = False):
    from crossed_rlvr.calibration.labels import LabelStore
    from crossed_rlvr.calibration.pack import pack_of

    head, rows = load_calibration(folder, check_scores)  # the scores are checked only where they are read
    store = LabelStore(folder, rows, int(head["seed"]))
    store.pack = pack_of(head)
    return store, head, rows


def cmd_annotate(args: argparse.Namespace) -> int:
    from crossed_rlvr.calibration.roles import declare_roles
    from crossed_rlvr.calibration.server import serve

    folder = Path(args.folder)
    if args.annotators or args.adjudicator:
        declare_roles(folder, [a.strip() for a in (args.annotators or "").split(",") if a.strip()],
                      list(args.adjudicator or []))
    store, _, rows = _store(folder)
    if store.roles is None:  # names typed on a page decide nothing: whoever labels is declared, with a link
        raise CalibrationError(f"{folder}: no declared roles; declare who labels: crossed-calibrate annotate {folder} "
                               "--annotators A,B --adjudicator C (frozen into roles.json; each person gets a secret "
                               "link, and the page takes the name from it)")
    try:
        server = serve(store, args.host, args.port, args.allow_remote)
    except PermissionError as err:
        raise CalibrationError(str(err)) from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"WARNING: serving on {args.host}: anyone who can reach this machine can read and write labels",
              file=sys.stderr, flush=True)
    url = f"http://{args.host}:{server.server_port}/"
    print(f"annotating {len(rows)} observations: {url}  (Ctrl-C stops; every label is already saved)", flush=True)
    for name in [n for n in (*store.roles.annotators, *store.roles.adjudicators) if n in store.roles.tokens.values()]:
        role = "adjudicator" if name in store.roles.adjudicators else "annotator"
        print(f"  {name} ({role}): {url}?token={store.roles.token_of(name)}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from crossed_rlvr.calibration.pack import make_pack

    out = make_pack(Path(args.folder), Path(args.out), args.annotator)
    print(f"{args.annotator}'s Stage 1 pack: {out} (ids, questions and responses only; no references, candidates "
          f"or policies). On that machine: crossed-calibrate annotate {out}; back here: crossed-calibrate export "
          f"{out} {args.annotator}.jsonl, then crossed-calibrate import {args.folder} {args.annotator}.jsonl --lock")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    store, _, _ = _store(Path(args.folder))
    print(f"wrote {store.export(Path(args.file))} labels to {args.file}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    store, _, _ = _store(Path(args.folder))
    print(f"imported {store.import_labels(Path(args.file), lock=args.lock)} labels")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    import pandas as pd

    from crossed_rlvr.calibration.analysis import analyze_calibration, observation_table, write_outputs
    from crossed_rlvr.files import sha256_file

    folder = Path(args.folder)
    store, head, rows = _store(folder, check_scores=not args.scores)
    if args.scores and sha256_file(Path(args.scores)) != head["scores_sha256"]:
        raise CalibrationError(f"{args.scores}: not the scores file this sample was drawn from "
                               f"({CalibrationLayout(folder).head} records {head['scores_sha256'][:12]}...)")
    final = store.final()
    pair = store.annotators()[:2]
    s1, s2 = store.labels(stage="stage1"), store.labels(stage="stage2")
    agreement = {sid: {"agreement": int(s2[(pair[0], "stage2", sid)]["correctness"]
                                        == s2[(pair[1], "stage2", sid)]["correctness"]),
                       "status_agreement": int(s1[(pair[0], "stage1", sid)]["status"]
                                               == s1[(pair[1], "stage1", sid)]["status"]),
                       # the requested strict reader's candidate is faithful to the locked commitment: per
                       # annotator, and the endpoint counts it faithful only when both annotators judged so
                       **{f"fidelity_{ab}": int(next(iter(store.fidelity(who, sid).values()), False))
                          for ab, who in zip("AB", pair, strict=True)}}
                 for sid in store.sample}
    for row in agreement.values():
        row["fidelity"] = min(row["fidelity_A"], row["fidelity_B"])
    obs = observation_table(rows, final, agreement)
    tables = analyze_calibration(obs, pd.read_parquet(args.scores or scores_file(folder, head)))
    report = write_outputs(Path(args.out) if args.out else CalibrationLayout(folder).analysis.root, tables)
    print(report)
    return 0


@stops_cleanly("crossed-calibrate")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="crossed-calibrate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sample", help="freeze a stratified sample of a scored study")
    p.add_argument("scores", help="scores Parquet (its folder's responses/ and items/ are read by default)")
    p.add_argument("-o", "--out", required=True, help="new calibration folder")
    p.add_argument("--state", action="append", help="POLICY:REQUEST[:TEMPLATE]; default: every policy and request "
                   "under the original wording")
    add_number(p, "--cap", 1, 1_000_000, default=30, help="responses per stratum (App. A: 30 GSM8K, 20 MATH)")
    add_number(p, "--seed", 0, 2**32 - 1, default=20260919)
    p.add_argument("--census", action="append", default=[], help="stratum taken whole, e.g. strict=1|fallback=1|mv=0")
    p.add_argument("--readers", default=None, help="stratifying reader roles, e.g. strict,fallback,mv")
    p.add_argument("--responses", nargs="*", help="response files or folders (default: <scores dir>/responses)")
    p.add_argument("--items", nargs="*", help="item files or folders (default: <scores dir>/items)")
    p.set_defaults(fn=cmd_sample)
    p = sub.add_parser("annotate", help="serve the blinded two-stage annotation page on localhost")
    p.add_argument("folder")
    p.add_argument("--host", default="127.0.0.1")
    add_number(p, "--port", 0, 65_535, default=8765, why="0: any free port")
    p.add_argument("--allow-remote", action="store_true", help="let --host be an address other machines reach")
    p.add_argument("--annotators", help="the two annotators A,B (declared once into roles.json; links printed)")
    p.add_argument("--adjudicator", action="append", help="an adjudicator (repeat for several)")
    p.set_defaults(fn=cmd_annotate)
    p = sub.add_parser("pack", help="one annotator's Stage 1 pack for another machine: ids, questions, responses only")
    p.add_argument("folder")
    p.add_argument("-o", "--out", required=True, help="a new folder")
    p.add_argument("--annotator", required=True, help="one of the declared annotators")
    p.set_defaults(fn=cmd_pack)
    p = sub.add_parser("export", help="labels to JSON Lines or CSV")
    p.add_argument("folder")
    p.add_argument("file")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("import", help="labels made elsewhere (the export format); all checked before any is written")
    p.add_argument("folder")
    p.add_argument("file")
    p.add_argument("--lock", action="store_true", help="lock the imported annotators' stages")
    p.set_defaults(fn=cmd_import)
    p = sub.add_parser("analyze", help="bounds, tables and calibration.csv")
    p.add_argument("folder")
    p.add_argument("-o", "--out", default=None)
    p.add_argument("--scores", default=None, help="check this scores file against the frozen sample's")
    p.set_defaults(fn=cmd_analyze)
    args = parser.parse_args(argv)
    from crossed_rlvr.records import ResponseFileError
    from crossed_rlvr.tasks.items import ItemFileError

    try:
        return args.fn(args)
    except (CalibrationError, ResponseFileError, ItemFileError, FileExistsError) as err:  # bad input: one line, exit 2
        print(f"crossed-calibrate: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
