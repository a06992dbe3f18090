"""Calibrations of a trained encoder and of what the app reports: ``calibrate`` (active-bit density
``D_enc`` and ``A(t)``), ``oof_posteriors`` (every training spectrum scored by an encoder that never saw its
structure), ``calibrate_bits`` (per-bit calibration of the fingerprint score), ``confidence`` (the per-spectrum
confidence), ``formula_scorer`` (the formula scorer shipped in resources/). Imports ``engine`` and the training
layers ``core``, ``data``, ``encoder``."""
