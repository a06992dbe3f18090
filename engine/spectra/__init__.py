"""Spectra: the :class:`~engine.spectra.spectrum.Spectrum` record, reading MGF/mzML (``io``, with
the readers ``mgf`` and ``mzml`` and what they share, ``reading``), LC-MS features
(``features``: MS2 scans grouped by precursor, with MS1 evidence), peak annotation by subformulas (``annotate``),
isotope patterns (``isotopes``) and fragment explanations of a structure's peaks (``fragments``).

May import: ``engine.chem`` and below.
"""
