"""Molecular formula candidates of a precursor whose formula is not known, as SIRIUS and BUDDY rank them:
mass decomposition (``decompose``), the corpus prior (``prior``), the scorer and its fragment evidence
(``scorer``, ``evidence``), the ranked table with the top-k runnable formulas (``candidates``), what the
isotopes and fragments show of the elements (``elements``), and a run's m/z recalibration (``recalibration``).

May import: ``engine.spectra``, ``engine.chem`` and below.
"""
