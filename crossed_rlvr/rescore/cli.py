"""``crossed-rescore``: the format share of a base/RL pair's reported gains, from saved outputs (paper 000).

    crossed-rescore resp/*.jsonl --pair initial=grpo-hash/s83 -o rescore/
    crossed-rescore lm_eval_resp/ --pair base=rl --harness lm-eval-gsm8k-flexible,math-boxed -o rescore/
    crossed-rescore code --dataset HumanEvalPlus.jsonl.gz --samples samples.jsonl   (code, by execution)

Inputs are response files (crossed-eval's, or ``crossed-import lm-eval`` output). A benchmark is a
record's ``task``, a prompt its request (or another prompt's name: plain, a harness's own) and wording; an item whose reference is a single letter A-J is
multiple choice (``--options`` gives its number of options, default 4), any other is free form.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

from crossed_rlvr.analysis.report.tables import markdown_table
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.layout import EvalLayout, RescoreLayout
from crossed_rlvr.limits import Parser, add_number
from crossed_rlvr.rescore.harness import REGISTRY
from crossed_rlvr.rescore.omega import VARIANTS
from crossed_rlvr.rescore.share import RESAMPLES, Outputs, comparisons, pooled, pooling_rules, spread

LETTERS = "ABCDEFGHIJ"
# the subcommand that parses its own arguments, named in the main --help so it can be found
CODE_SUBCOMMAND = ("subcommand: crossed-rescore code --dataset DATASET --samples SAMPLES scores EvalPlus samples by "
                   "execution in the sandbox (crossed-rescore code --help)")


def item_files(inputs: list[str]) -> list[str]:
    """The item files frozen beside response inputs (crossed-eval's ``<run>/items/*.jsonl``): the loaders'
    own record of each item's options."""
    found = []
    for raw in inputs:
        p = Path(raw)
        for folder in {EvalLayout(root).items_folder for root in (p, p.parent, p.parent.parent)}:
            if folder.is_dir():
                found += [str(f) for f in sorted(folder.glob("*.jsonl"))]
    return sorted(set(found))


def item_options(paths: list[str]) -> dict[tuple[str, str], int]:
    """(task, item id) -> number of options, from item files (crossed_rlvr.tasks.choice writes ``n_options``)."""
    from crossed_rlvr.tasks.items import read_items

    out = {}
    for path in paths:
        for it in read_items(path)[0]:  # checked: file, line and field named on a bad row
            if it.get("n_options"):
                out[(str(it.get("task", Path(path).stem.rsplit("-", 1)[0])), it["item_id"])] = it["n_options"]
    return out


def runs_from_records(records: list[dict], options: int, n_options: dict[tuple[str, str], int] | None = None,
                      variant: str = "omega") -> dict[tuple[str, str, str, str], Outputs]:
    grouped: dict[tuple, dict[str, dict]] = defaultdict(dict)
    n_options = n_options or {}
    for r in records:
        if r.get("sample_idx", 0) != 0:
            continue  # one response per item and model: the first sample
        known = (r["task"], str(r["item_id"])) in n_options
        key = r["reference"].strip()
        kind = "mc" if known or (len(key) == 1 and key in LETTERS) else "free"
        if kind == "mc" and not known and LETTERS.index(key) >= options:
            # the key itself shows the assumption is wrong (MMLU-Pro, AQuA-RAT, 5-option ARC): omega would read
            # only A-D and misscore the item, so refuse rather than guess
            raise ValueError(f"{r['task']} item {r['item_id']!r}: key {key!r} lies outside the {options} options "
                             f"assumed (A-{LETTERS[options - 1]}); give the item files (--items, or the run's "
                             "items/ folder beside its responses) or --options")
        grouped[(r["policy"], r["task"], f"{r['request']}/{r['template']}", kind)][str(r["item_id"])] = r
    runs = {}
    by_bench: dict[tuple, list[set[str]]] = defaultdict(list)
    for (_policy, task, prompt, kind), recs in grouped.items():
        by_bench[(task, prompt, kind)].append(set(recs))
    for (policy, task, prompt, kind), recs in grouped.items():
        shared = sorted(set.intersection(*by_bench[(task, prompt, kind)]), key=lambda x: (len(x), x))
        runs[(policy, task, prompt, kind)] = Outputs(
            items=shared, keys=[recs[i]["reference"] for i in shared], responses=[recs[i]["response"] for i in shared],
            kind=kind, n_options=[n_options.get((task, i), options) for i in shared], benchmark=task,
            variant=variant)
    return runs


def audit_runs(runs: dict[tuple[str, str, str, str], Outputs], harnesses: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The reader audit of re-scored outputs: every pair of harness extractors and omega, per model and benchmark."""
    from crossed_rlvr.analysis.audit import audit
    from crossed_rlvr.rescore.share import answers, credited

    frames = []
    for (model, bench, prompt, kind), out in sorted(runs.items()):
        cols: dict[str, list] = {"policy": [model] * len(out.items), "task": [bench] * len(out.items),
                                 "request": [prompt] * len(out.items), "template": [kind] * len(out.items),
                                 "item_id": out.items, "reference": out.keys}
        for name in [h for h in harnesses if kind in REGISTRY[h].kinds] + ["omega"]:
            cols[f"{name}.answer"] = answers(out, name)  # read once: the comparisons read them already
            cols[f"{name}.correct"] = credited(out, name)
        frames.append(pd.DataFrame(cols))
    rates, examples = [], []
    for kind, part in pd.concat(frames, ignore_index=True).groupby("template"):  # readers differ by answer form
        readers = [c[: -len(".correct")] for c in part.columns if c.endswith(".correct") and part[c].notna().all()]
        r, e = audit(part, readers, ["policy", "task", "request"], ["policy", "task", "request", "item_id"])
        rates.append(r.assign(kind=kind))
        examples.append(e)
    return pd.concat(rates, ignore_index=True), pd.concat(examples, ignore_index=True)


def where_figure(where: pd.DataFrame, path: Path) -> None:
    """Fig. 3: where ω found the answer (box / text / other), base and RL models side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{r.benchmark}/{r.prompt}\n{r.pair}" for r in where.itertuples()]
    bottom = {m: [0.0] * len(where) for m in ("base", "rl")}
    for w, color in (("box", "#3a7"), ("text", "#37a"), ("other", "#a73")):
        for k, m in enumerate(("base", "rl")):
            total = sum(where[f"omega_{x}_{m}"] for x in ("box", "text", "other")).replace(0, float("nan"))
            vals = (100 * where[f"omega_{w}_{m}"] / total).fillna(0).tolist()
            xs = [i * 3 + k for i in range(len(where))]
            ax.bar(xs, vals, bottom=bottom[m], color=color, label=w if k == 0 else None)
            bottom[m] = [b + v for b, v in zip(bottom[m], vals, strict=True)]
    ax.set_xticks([i * 3 + 0.5 for i in range(len(where))], labels, fontsize=7)
    ax.set_ylabel("% of outputs ω reads (base | RL)")
    ax.set_title("Where ω found the answer (Fig. 3)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def spread_figure(table: pd.DataFrame, path: Path) -> None:
    """Fig. 5: one reported gain per harness extractor (dots) and ω's (line), per combination."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    combos = table.groupby(["pair", "benchmark", "prompt"], sort=True)
    for k, (_, g) in enumerate(combos):
        ax.plot([k] * len(g), g.g_rep, "o", color="#37a", alpha=0.7)
        ax.plot([k - 0.3, k + 0.3], [g.g_fix.iloc[0]] * 2, color="#a33")
    ax.set_xticks(range(len(combos)), [f"{b}/{p}\n{pair}" for (pair, b, p), _ in combos], fontsize=7)
    ax.set_ylabel("gain (points)")
    ax.set_title("Reported gain by harness extractor (dots) and ω's (line), Fig. 5")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out: Path, table: pd.DataFrame, result: dict, spreads: pd.DataFrame) -> Path:
    """The rescore folder: comparisons and pooling rules (CSV), report.md with its figures, pooled.json."""
    files = RescoreLayout(out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(files.comparisons, index=False, float_format="%.10g")
    cols = ["pair", "benchmark", "prompt", "harness", "g_rep", "g_rep_low", "g_fix", "D", "share", "read_omega_base",
            "read_omega_rl", "admitted"] + (["same_input"] if "same_input" in table else [])
    loo = ", ".join(f"leave one {col} out {result.get(f'leave_one_{col}_out_min', float('nan')):.3f}–"
                    f"{result.get(f'leave_one_{col}_out_max', float('nan')):.3f}"
                    for col in ("pair", "benchmark", "harness", "prompt"))
    variant = table.attrs.get("omega", "omega")
    headline = (f"Fixed extractor: ω{'' if variant == 'omega' else f' ({variant} variant)'}. Pooled format share over {result['comparisons']} admitted comparisons: **{result['share']:.3f}** "
                f"[{result['low']:.3f}, {result['high']:.3f}] (items resampled within benchmark); {loo}.")
    criteria = ("Admitted: the reported gain's lower 95% bound is at least 2 points, and ω reads at least 50% of "
                "each model's outputs with the two rates within 20 points.")
    lines = ["# Format share of reported gains (paper 000)", "", headline, "", criteria, "", "## Comparisons", "",
             markdown_table(cols, [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r]
                                   for r in table[cols].itertuples(index=False)])]
    rules = pooling_rules(table)
    rules.to_csv(files.pooling_rules, index=False, float_format="%.10g")
    lines += ["", "## Which comparisons enter the ratio (App. D, Table 9)", "",
              markdown_table(["rule", "comparisons", "Σ g_rep", "Σ D", "share"],
                             [[r.rule, r.comparisons, f"{r.sum_g_rep:.1f}", f"{r.sum_D:.1f}", f"{r.share:.3f}"]
                              for r in rules.itertuples()])]
    lines += ["", "## Spread of reported gains across harness extractors (Fig. 5)", "",
              markdown_table(["pair", "benchmark", "prompt", "spread (points)"],
                             [[r.pair, r.benchmark, r.prompt, f"{r.spread:.2f}"] for r in spreads.itertuples()]),
              "", f"![where omega found the answer]({files.where_omega.name})", ""]
    where = table[table["same_input"]] if "same_input" in table else table
    where = where.drop_duplicates(["pair", "benchmark", "prompt", "kind"])
    different = table.attrs.get("different_inputs") or {}
    if different:
        lines[2:2] = ["Pairs whose two models saw different prompts (their own chat templates), reported below but "
                      "kept out of the pooled share and of Fig. 3 (paper 000 App. A): "
                      + "; ".join(f"{k} (first at {v})" for k, v in sorted(different.items())) + ".", ""]
    # Fig. 3 divides the outputs in which omega reads an answer: box / text / other, as shares of those
    read = {m: sum(where[f"omega_{w}_{m}"] * where["items"] for w in ("box", "text", "other")) for m in ("base", "rl")}
    box = {m: float((where[f"omega_box_{m}"] * where["items"]).sum() / read[m].sum()) if read[m].sum() else float("nan")
           for m in ("base", "rl")}
    lines[2:2] = [f"Of the outputs in which ω reads an answer, {100 * box['base']:.1f}% of the base models' contain a "
                  f"`\\boxed{{}}`, against {100 * box['rl']:.1f}% of the RL models' (Fig. 3; every comparison's "
                  "outputs once).", ""]
    where_figure(where, files.where_omega)
    spread_figure(table, files.spread)
    lines.append(f"![reported gains across extractors]({files.spread.name})")
    files.report.write_text("\n".join(lines))
    files.pooled.write_text(json.dumps(result, indent=2) + "\n")
    return files.report


def chosen_harnesses(named: str | None) -> tuple[list[str], str]:
    """The extractors to run and a sentence naming those left out. Unnamed: every registered extractor whose
    package is installed (lm-eval's and the installed verl's call those packages, which the light install lacks);
    the report names the rest. Named: each must exist and be installed."""
    if named is None:
        absent = [h for h in REGISTRY.values() if not h.installed()]
        how = ", ".join(sorted({f"{h.package} (pip install {h.package})" for h in absent}))
        return [h for h in REGISTRY if REGISTRY[h].installed()], (
            f"{', '.join(h.name for h in absent)}; they call {how}" if absent else "")
    names = named.split(",")
    unknown = [h for h in names if h not in REGISTRY]
    if unknown:
        raise ValueError(f"--harness {', '.join(unknown)} unknown; known: {', '.join(REGISTRY)}")
    absent = [REGISTRY[h] for h in names if not REGISTRY[h].installed()]
    if absent:
        raise ValueError(f"--harness {absent[0].name} calls the installed {absent[0].package}, which is not "
                         f"installed here: pip install {absent[0].package}")
    return names, ""


@stops_cleanly("crossed-rescore")
def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.records import ResponseFileError, read_responses

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["code"]:  # samples scored by execution (crossed_rlvr/rescore/code.py)
        from crossed_rlvr.rescore.code import main as code_main

        return code_main(argv[1:])

    parser = Parser(prog="crossed-rescore", description=__doc__.splitlines()[0], epilog=CODE_SUBCOMMAND)
    parser.add_argument("inputs", nargs="+", help="response files or folders")
    parser.add_argument("--pair", action="append", required=True, help="BASE=RL policy names")
    parser.add_argument("--harness", default=None,
                        help=f"extractors (default: every one whose package is installed: {', '.join(REGISTRY)})")
    add_number(parser, "--options", 2, 26, default=4, help="options per multiple-choice item without an item file")
    parser.add_argument("--items", nargs="*", default=[], help="item files with n_options per item (MMLU-Pro: A-J)")
    add_number(parser, "--resamples", 10, 1_000_000, default=RESAMPLES, help="item resamples (paper 000: 10,000)")
    parser.add_argument("--omega", default="omega", choices=list(VARIANTS),
                        help="the fixed extractor's variant (App. B): strict, omega (default), permissive, maximal")
    parser.add_argument("--no-audit", action="store_true", help="skip the reader audit of the extractors")
    parser.add_argument("-o", "--out", required=True, help="output folder (report.md, comparisons.csv, figures)")
    args = parser.parse_args(argv)
    try:
        pairs = [tuple(p.split("=", 1)) for p in args.pair]
        if any(len(p) != 2 or not all(p) for p in pairs):
            raise ValueError("--pair must be BASE=RL")
        harnesses, left_out = chosen_harnesses(args.harness)
        if args.options < 2 or args.options > len(LETTERS):
            raise ValueError(f"--options {args.options} must lie in 2..{len(LETTERS)}")
        rs = read_responses(args.inputs, different_prompts="record", prompt_names=True)
        runs = runs_from_records(rs.records, args.options, item_options(args.items or item_files(args.inputs)),
                                 args.omega)
        names = {m for m, *_ in runs}
        missing = sorted({x for p in pairs for x in p} - names)
        if missing:
            raise ValueError(f"no outputs of {', '.join(missing)}; have {', '.join(sorted(names))}")
        table, extra = comparisons(runs, pairs, harnesses, args.resamples)
        table.attrs["omega"] = args.omega
        if len(table):
            # a pair whose models saw different prompts (their own chat templates) is reported but kept out of
            # every pooled share and of Fig. 3 (paper 000 App. A)
            table["same_input"] = [frozenset((b, r)) not in rs.prompt_differences for b, r in zip(table.base, table.rl)]
            table["admitted"] = table.admitted & table.same_input
            table.attrs["different_inputs"] = {" / ".join(sorted(k)): v for k, v in rs.prompt_differences.items()
                                               if any(frozenset(p) == k for p in pairs)}
    except (ResponseFileError, ValueError) as err:
        print(f"crossed-rescore: {err}", file=sys.stderr)
        return 2
    result = pooled(table, extra)
    report = write_report(Path(args.out), table, result, spread(table))
    if left_out:
        with report.open("a", encoding="utf-8") as fh:
            fh.write(f"\nNot run (their packages are not installed here): {left_out}.\n")
    if not args.no_audit:
        from crossed_rlvr.analysis.report.audit import audit_section

        rates, examples = audit_runs(runs, harnesses)
        files = RescoreLayout(Path(args.out))
        rates.to_csv(files.reader_audit, index=False, float_format="%.10g")
        examples.to_json(files.reader_audit_examples, orient="records", lines=True, force_ascii=False)
        with report.open("a", encoding="utf-8") as fh:
            fh.write("\n## Reader audit\n\nEvery pair of extractors (omega included), per model, benchmark and "
                     f"prompt: `{files.reader_audit.name}`, examples in `{files.reader_audit_examples.name}`.\n\n"
                     + audit_section(rates, examples) + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
