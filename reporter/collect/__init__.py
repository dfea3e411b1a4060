"""The collect stage: load each model, generate, one hooked teacher-forced pass per batch, write artifacts.

:func:`~reporter.collect.job.collect_model` is one model's job; measurements on the hooked
pass are plugins (:mod:`reporter.collect.collectors`). The analyse stage reads only the files
this stage writes.
"""
