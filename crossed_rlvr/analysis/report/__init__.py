"""Writing the analysis: report.md (``document``), its headline, the over-training section, figures, tables
and the CSV/manifest outputs. Computes nothing: it formats what ``analysis/`` computed."""
