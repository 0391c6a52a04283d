"""Analysis: cells, crossed contrasts with paired-bootstrap intervals, coverage, report and figures
(paper 001 §2-§3, App. B.4, D.3); ``crossed-analyze``."""
