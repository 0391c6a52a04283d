"""crossed-rlvr: train matched RLVR policies and evaluate them crossed (training convention x request)."""

__version__ = "0.1.0"
