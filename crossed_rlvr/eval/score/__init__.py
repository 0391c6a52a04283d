"""Scoring: the reader panel, the payload detector, Math-Verify wrappers and the scores table (paper 001 §2,
App. B.2, C.1)."""

from crossed_rlvr.eval.score.panel import Item, columns, score_many, score_response
from crossed_rlvr.eval.score.payload import CATEGORIES, PayloadReport, detect
from crossed_rlvr.eval.score.readers import READERS, STRICT, Reader, Reading, get_reader

__all__ = [
    "CATEGORIES",
    "READERS",
    "STRICT",
    "Item",
    "PayloadReport",
    "Reader",
    "Reading",
    "columns",
    "detect",
    "get_reader",
    "score_many",
    "score_response",
]
