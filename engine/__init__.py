"""MS-GPT inference engine: spectra in, ranked candidate structures out. Never imports Qt.

The packages, lowest layer first; a package imports only from the layers below it (and its own modules),
which ``tests/engine/test_layers.py`` checks on every import, lazy ones included:

=================  ==========================================================================================
``engine.errors``  typed exceptions (every layer raises them)
``engine.progress`` the cancel check and ``run_to_end`` for generators of progress events
``engine.paths``   user folders and the bundled resources
``engine.stamps``  a file's SHA-256 and the stamps that let an unchanged library file reopen without hashing
``engine.threads`` how many CPU threads torch takes (one rule for the command, the app and cluster workers)
``engine.timing``  the stage timers a benchmark switches on (where a run's time goes)
``chem``           molecules (RDKit): SMILES, InChIKeys, Morgan fingerprints; molecular formulas; adducts
``spectra``        the spectrum record, MGF/mzML reading, LC-MS features, peak annotation, isotopes,
                   fragment explanations of a structure's peaks
``formulas``       formula candidates of a precursor: decomposition, prior, scorer, evidence, the ranked table
``library``        structure libraries (PubChemLite/NORMAN tables, SDF, SMILES lists, the bundled one): read,
                   standardised, indexed by formula and mass with fingerprints, kept in the data folder
``spectral_library`` reference MS/MS spectra (MSP/MGF exports, the bundled MassBank subset): read, indexed with
                   Flash entropy search per ion mode, kept in the data folder; identity and analog search
``model``          the trained bundle and its parts: tokenizer, encoder, decoder, calibrations, sampling,
                   grammar constraints, fingerprint scoring, confidence, bit legend, known structures
``elucidation``    one spectrum's search: queries, samples, the ranked candidate pool (``pipeline``)
``insight``        what a result means: novelty against known lists, scoring a user's own structures
``files``          what a run writes and reads back: CSV/SDF export, the resume journal, projects, posteriors
``cli``            the ``msgpt`` command (``predict``, ``score``, ``info``)
=================  ==========================================================================================
"""

__version__ = "0.1.0"
