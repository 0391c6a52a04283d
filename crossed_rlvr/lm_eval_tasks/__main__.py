"""``python -m crossed_rlvr.lm_eval_tasks``: regenerate the shipped lm-eval task YAMLs from the request suffixes."""

from crossed_rlvr.lm_eval_tasks import main

raise SystemExit(main())
