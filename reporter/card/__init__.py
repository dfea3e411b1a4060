"""The render stage: the model card (HTML, PDF) and model-index YAML, from results.json alone.

Sections (:mod:`~reporter.card.sections`) and charts (:mod:`~reporter.card.charts`) are
registries; nothing here imports torch, a model, or the collect stage.
"""
