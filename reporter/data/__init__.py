"""Data files that ship inside the package (the embedded default model list)."""
