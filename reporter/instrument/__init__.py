"""Instrumentation: hooks and the one teacher-forced, hooked forward pass that feeds every collector.

Hooks never live in model code: :class:`~reporter.instrument.hooks.HookSet` registers them and
always removes them (the baukit ``nethook`` / lm-eval ``steer`` pattern), and
:func:`~reporter.instrument.hooked_pass.hooked_pass` runs one forward pass with every
collector's hooks attached.
"""
