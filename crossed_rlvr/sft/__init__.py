"""Supervised fine-tuning: the warm start of a tiny initial policy and content-matched marker arms
(paper 001 App. D.2.1); ``crossed-sft``."""
