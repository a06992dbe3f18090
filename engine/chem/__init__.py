"""Chemistry without spectra: molecules (RDKit parsing, canonical SMILES, InChIKeys, Morgan fingerprints,
Tanimoto), molecular formulas (parsing, Hill notation, masses), adducts (ion types, precursor m/z) and motifs
no stable compound shows (``plausibility``: flagged in the app, never proposed by deep search's edits).

May import: ``engine.errors``, ``engine.progress``, ``engine.paths``.
"""
