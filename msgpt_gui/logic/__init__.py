"""The app's Qt-free layer: what the desktop application knows and does, without a window.

What lives here: the document (:mod:`.entries`: one entry per record of the opened files, with its results),
editing a spectrum's formula, adduct and precursor m/z (:mod:`.editing`), the formula candidates of an entry
(:mod:`.formulas`), the background jobs as generators of progress events (:mod:`.jobs`: reading files, loading
a model, elucidating, exporting), projects (:mod:`.projects`), insights beyond the candidates
(:mod:`.insights`), matplotlib plots (:mod:`.plotting`), structure pictures (:mod:`.depict`) and the texts of
the tooltips (:mod:`.tooltips`).

What these modules may import: :mod:`engine`, the standard library, numpy, matplotlib and RDKit, and each
other. Never Qt (PySide6, shiboken6, superqt…) and never the Qt modules of :mod:`msgpt_gui` (its views,
controllers, item models, workers, ``qtcompat``): they are tested, scripted and reused without a display,
and importing this package must not load PySide6 (``tests/gui/test_gui_layering.py`` checks both).
"""
