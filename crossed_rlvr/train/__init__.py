"""GRPO training of matched arms (paper 001 App. D.1): TRL on one machine, verl data, overrides and
launch scripts for GPU nodes; the matched-pair check; ``crossed-train``."""
