"""reporter: compare LLMs by what happens inside them (benchmarks, MUI, LPP) and write a model card."""
__version__ = "0.1.0"
