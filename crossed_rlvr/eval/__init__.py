"""Evaluation: the reader panel, the payload detector and scoring (paper 001 §2, App. B.2, C.1)."""

from crossed_rlvr.eval.panel import Item, columns, score_many, score_response
from crossed_rlvr.eval.payload import CATEGORIES, PayloadReport, detect
from crossed_rlvr.eval.readers import READERS, REQUESTED_READER, Reader, Reading, get_reader

__all__ = [
    "CATEGORIES",
    "READERS",
    "REQUESTED_READER",
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
