"""Chemistry without spectra: molecules (RDKit parsing, canonical SMILES, InChIKeys, Morgan fingerprints,
Tanimoto), molecular formulas (parsing, Hill notation, masses) and adducts (ion types, precursor m/z).

May import: ``engine.errors``, ``engine.progress``, ``engine.paths``.
"""
