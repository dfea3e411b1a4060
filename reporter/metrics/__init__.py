"""Pure maths on measured values: MUI set arithmetic, spectra, calibration, Min-K%, statistics.

Each module is independent and side-effect free. All but :mod:`~reporter.metrics.spectra`
(which works on torch tensors, on their device) use only numpy and scipy, so the analyse
stage can use them without torch.
"""
