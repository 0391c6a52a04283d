"""Responses made elsewhere, read into response records so they can be scored like our own (paper 000 §2): one
module per source (``lm_eval``, ``verl``), what they share (``common``), and ``crossed-import`` (``cli``). Nothing
here generates."""
