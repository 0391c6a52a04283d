"""Import outputs made elsewhere as response records, so they can be re-scored (paper 000 §2).

- lm-evaluation-harness ``--log_samples`` files: ``samples_<task>_<time>.jsonl`` (0.4.3 and later), one
  line per document and filter, or one JSON array per task (0.4.0-0.4.2); a folder is read whole
  (every samples file under it). The raw generations are ``resps`` (one list per request, one entry
  per repeat); lines repeated for each filter carry the same raw responses and are read once. The
  request of each response is the request suffix found in its prompt (else ``--request``), so one
  folder holding a task's hash and boxed variants imports as one crossed set under one ``--task``.
- verl validation dumps (``trainer.validation_data_dir``; ``--all-steps``: every step, as ``<policy>@step<K>``):
  one ``{step}.jsonl`` per step with
  ``input``, ``output``, ``gts``, ``score``, ``step``. The request (and wording) of each response is
  the request suffix found in its prompt; dumps carry no item id, so the item id is the first 16 hex
  digits of the sha256 of the prompt without that suffix, which pairs the same item across requests
  and policies; repeated prompts (``val_kwargs.n > 1``) become samples 0, 1, ...

Neither source records finish reasons or token counts: imported records say ``finish_reason``
"unknown" (the report prints "n/a" for their truncation) and token counts of -1 (unknown).

The imported policy is made once, here, from the flags: its training convention and seed come from its name
when it has the documented form ``<method>-<convention>/s<seed>`` (``grpo-hash/s83``, ``sft-boxed/s84``) or is
``initial``; a flag that contradicts the name, or a name that says neither, is refused rather than guessed.
``--method`` gives its method for a name of another form (else the name's, as above); every record stores it.

The sources are :mod:`crossed_rlvr.eval.ingest.lm_eval` and :mod:`crossed_rlvr.eval.ingest.verl`; what they
share is in :mod:`crossed_rlvr.eval.ingest.common`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from crossed_rlvr.eval.ingest import lm_eval, verl
from crossed_rlvr.eval.ingest.common import given_policy
from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.limits import Parser, add_number
from crossed_rlvr.records import ResponseFileError, write_responses

# one reader per source: each takes the input path and the command's options and returns checked records
SOURCES = {"lm-eval": lm_eval.ingest, "verl": verl.ingest}


@stops_cleanly("crossed-import")
def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="crossed-import", description="Import outputs made elsewhere as response records.")
    parser.add_argument("kind", choices=sorted(SOURCES), help="source format")
    parser.add_argument("input", help="lm-eval samples file or --output_path folder, or a verl "
                        "validation_data_dir / {step}.jsonl")
    parser.add_argument("-o", "--output", required=True, help="response file to write (JSON Lines)")
    parser.add_argument("--policy", required=True, help="policy name, e.g. initial or grpo-hash/s83")
    parser.add_argument("--training-convention", default=None,
                        help="initial or a convention; read from a policy name like grpo-hash/s83 when omitted")
    add_number(parser, "--train-seed", 0, 2**32 - 1, default=None)
    parser.add_argument("--method", default=None,
                        help="what trained the policy (grpo, sft, ...); read from a policy name like grpo-hash/s83 "
                             "when omitted")
    parser.add_argument("--request", default=None,
                        help="the request of responses whose prompt carries no known request suffix (default: read "
                             "from each prompt); lm-eval also takes another prompt's name (plain, gsm8k-cot, ...), "
                             "whose outputs crossed-rescore reads")
    parser.add_argument("--template", default="original")
    parser.add_argument("--task", default=None, help="task name of every record (lm-eval: default from each "
                        "file name, refused when one policy's requests fall under different names)")
    add_number(parser, "--step", 0, 10**9, default=None, why="0: the step before training", help="verl: which {step}.jsonl (default: the last)")
    parser.add_argument("--all-steps", action="store_true",
                        help="verl: every {step}.jsonl, each as the policy <policy>@step<K> (validation during "
                             "training; crossed-analyze reports the interactions over training)")
    args = parser.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        print(f"crossed-import: {out} exists; refusing to overwrite it", file=sys.stderr)
        return 2
    try:
        policy = given_policy(args.policy, args.training_convention, args.train_seed, args.method)
        records = SOURCES[args.kind](args.input, policy=policy, request=args.request, template=args.template,
                                     task=args.task, step=args.step, all_steps=args.all_steps)
    except ResponseFileError as err:
        print(f"crossed-import: {err}", file=sys.stderr)
        return 2
    write_responses(out, records)
    print(f"wrote {len(records)} records to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
