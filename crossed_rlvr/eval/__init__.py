"""Evaluation: ``generate/`` (the crossed design's responses, on any engine) and ``score/`` (the reader
panel, the payload detector and the scores table; paper 001 §2, App. B.2, C.1)."""
