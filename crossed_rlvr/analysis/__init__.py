"""analysis stage of crossed-rlvr (built in later issues)."""
