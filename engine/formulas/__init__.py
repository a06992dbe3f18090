"""Molecular formula candidates of a precursor whose formula is not known, as SIRIUS and BUDDY rank them:
mass decomposition (``decompose``), the corpus prior (``prior``), the scorer and its fragment evidence
(``scorer``, ``evidence``), and the ranked table with the top-k runnable formulas (``candidates``).

May import: ``engine.spectra``, ``engine.chem`` and below.
"""
