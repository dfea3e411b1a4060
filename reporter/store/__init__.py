"""The run directory on disk: layout and file names, atomic writes, array and sample formats.

Nothing here imports torch or a model: every stage, and a reviewer without torch, can read a run.
"""
