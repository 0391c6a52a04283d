"""Policies: model factories and loaders (tiny local models, SmolLM2 from its GGUF file, hub names)."""
