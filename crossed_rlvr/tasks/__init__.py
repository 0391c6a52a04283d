"""Tasks: item generators and loaders, and frozen item files (paper 001 §3, App. C.1)."""

from crossed_rlvr.tasks.arith import exact_value, generate, make_splits
from crossed_rlvr.tasks.items import ItemFileError, file_sha256, read_items, write_items
from crossed_rlvr.tasks.loaders import load_gsm8k, load_math500

__all__ = [
           "ItemFileError",
           "exact_value",
           "file_sha256",
           "generate",
           "load_gsm8k",
           "load_math500",
           "make_splits",
           "read_items",
           "write_items",
]
