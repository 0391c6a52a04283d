"""``crossed-analyze``: scores table -> cells, contrasts, coverage, paired tests, report, figures (the folder it
writes: crossed_rlvr/analysis/report/folder.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crossed_rlvr.analysis.analyze import DEFAULT_RESAMPLES, DEFAULT_RNG_SEED, AnalysisError
from crossed_rlvr.analysis.contrasts import AmbiguousPolicies
from crossed_rlvr.analysis.report.code import analyze_code, code_scores
from crossed_rlvr.analysis.report.folder import analyze
from crossed_rlvr.conf.schema import RESAMPLES_RANGE, SEED_RANGE
from crossed_rlvr.extras import MissingExtra, require
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import AnalysisLayout
from crossed_rlvr.limits import Parser, add_number


def parser() -> Parser:
    """crossed-analyze's options, each with its help and (ArgumentDefaultsHelpFormatter) its default."""
    p = Parser(prog="crossed-analyze", description="Crossed analysis of a scores table.",
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("scores", help="scores table (Parquet) from crossed-score")
    p.add_argument("-o", "--out", required=True, default=argparse.SUPPRESS, help="output folder")  # no default shown
    add_number(p, "--resamples", *RESAMPLES_RANGE, default=DEFAULT_RESAMPLES,
               why="an interval needs at least 10 resamples", help="paired bootstrap resamples")
    add_number(p, "--rng-seed", *SEED_RANGE, default=DEFAULT_RNG_SEED,
               help="seed of the bootstrap's draws (the study's analysis.rng_seed)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    p.add_argument("--allow-partial", action="store_true",
                   help="analyse a partial design (a policy missing a request, items or its partner arm) "
                   "without its incomplete policies, instead of refusing it")
    p.add_argument("--no-figures", action="store_true", help="write the report without its figures")
    p.add_argument("--tracking", choices=["off", "offline", "online"], default="off",
                   help="log to wandb (offline writes a local run folder to sync later)")
    p.add_argument("--project", default="crossed-rlvr", help="wandb project")
    p.add_argument("--entity", default=None, help="wandb entity (team); None: your default one")
    p.add_argument("--group", default=None, help="wandb group, e.g. the study the scores come from")
    return p


@stops_cleanly("crossed-analyze")
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.tracking != "off":
            require("track")
        if code_scores(Path(args.scores)):
            analyze_code(Path(args.scores), Path(args.out), args.resamples, args.rng_seed, args.overwrite)
            print(f"crossed-analyze: {AnalysisLayout(Path(args.out)).report}")
        else:
            analyze(args.scores, args.out, args.resamples, args.rng_seed, args.overwrite, not args.no_figures,
                    args.tracking, args.project, args.entity, args.group, args.allow_partial)
    except (AnalysisError, AmbiguousPolicies, FileExistsError, MissingExtra) as err:
        print(f"crossed-analyze: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
