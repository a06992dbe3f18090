"""The trained model and the method's parts that run it: SAFE tokenizer, spectrum encoder and its input
featurization, conditional decoder, the SAFE token grammar (``safe_grammar``) and the formula constraints on
sampling (``constraints``), sampling, density-band calibration and queries
(``querying``), fingerprint scoring, the confidence model, the bit legend, the known-structure hashes
(``known``), the fragment-level forward model and its score (``forward``), and the bundle that loads them all
from ``config.json`` + safetensors (``bundle``).

May import: ``engine.formulas``, ``engine.spectra``, ``engine.chem`` and below. Loading a bundle's weights must
not need RDKit (the accelerator imports ``model.bundle`` without it).
"""
