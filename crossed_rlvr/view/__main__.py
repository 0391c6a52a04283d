"""``python -m crossed_rlvr.view RUN_DIR``: the same as ``crossed-view RUN_DIR``."""

from crossed_rlvr.view.cli import main

raise SystemExit(main())
