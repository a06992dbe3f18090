"""The spectrum encoder and what trains it: ``train_encoder`` (the recipe), ``substructures`` (MAGMa-like
labels of its auxiliary task), ``forward`` (the fragment-level forward model and the simulated spectra it adds),
``noise`` (the fingerprint noise model measured on out-of-fold posteriors, for noise-aware pretraining). Imports
``engine``, ``training.core`` and ``training.data``."""
