"""Measuring a bundle: ``evaluate`` (``msgpt-eval``: accuracy, similarity, yield, speed), ``report``
(metrics, Markdown report and figures of an evaluation folder, rebuilt without sampling), ``mces`` (Top-k MCES
distances). Imports ``engine`` and every training layer below it except ``studies``."""
