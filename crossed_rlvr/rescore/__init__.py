"""Re-reading saved outputs with a fixed extractor (paper 000): the fixed extractor omega and its variants."""
