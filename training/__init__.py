"""Training code of MS-GPT Desktop: what makes the shipped model, what builds the data it ships with, and the studies
that chose its settings. Nothing here imports Qt; the engine's inference code never imports from here.

The packages, lowest layer first; a package imports only from ``engine`` and the layers below it (and its own
modules), which ``tests/engine/test_layers.py`` checks on every import, lazy ones included:

===============  ==============================================================================================
``core``         what every training command shares: config base class, schedules, signals (``loop``),
                 checkpoints (``checkpoint``), metrics of posteriors and rankings (``metrics``)
``data``         the molecule corpus (``corpus``, ``corpus_format``, ``dataset``, ``batching``), labelled spectra
                 (``spectra``) and reading an out-of-fold run (``oof_data``)
``encoder``      the spectrum encoder (``train_encoder``), its substructure labels (``substructures``), the
                 forward model and its simulated spectra (``forward``), the fingerprint noise model (``noise``)
``calibration``  active-bit density (``calibrate``), out-of-fold posteriors (``oof_posteriors``), per-bit
                 calibration (``calibrate_bits``), per-spectrum confidence (``confidence``), the formula scorer
                 (``formula_scorer``)
``decoder``      the decoder: warm start (``warmstart``), conditional pretraining (``pretrain``),
                 posterior-aligned adaptation (``adapt``), one prepared accelerator run (``accelerator``)
``bundle``       what ships: the model bundle and its card (``build_bundle``), bit legend (``bit_legend``), known
                 structures (``known_structures``), the bundled structure and spectral libraries
                 (``structure_library``, ``spectral_library``)
``evaluation``   ``msgpt-eval`` (``evaluate``), its report (``report``), MCES distances (``mces``)
``studies``      one-off measurements whose tables are in docs/ (each names its table and command); nothing
                 shipped imports them
===============  ==============================================================================================

The shipped model's recipe, in order (docs/training.md): ``data.corpus`` -> ``encoder.train_encoder`` ->
``calibration.calibrate`` / ``oof_posteriors`` / ``calibrate_bits`` -> ``encoder.noise`` -> ``decoder.pretrain``
-> ``decoder.adapt`` -> ``calibration.confidence`` -> ``bundle.build_bundle`` -> ``evaluation.evaluate``.
"""
