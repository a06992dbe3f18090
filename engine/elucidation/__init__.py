"""One spectrum's search, as the paper runs it: posterior -> band queries -> B samples -> the ranked pool
(``pipeline``: :class:`SpectrumSession`, :func:`elucidate` and its progress events; ``ranking``: decoding the
samples and ranking the candidates); the known compounds that join the pool (``libraries``: structure and
spectral library hits; ``formula_runs``: which formula candidates of a spectrum of unknown formula are run, and
which of them draw samples); deep effort (``deep``: adaptive allocation, refinement rounds, analog seeding, edits,
with ``analogs``: every library structure scored against a posterior at once, and ``edits``: the isomers one
formula-preserving move away from a candidate).

May import: ``engine.model``, ``engine.library``, ``engine.spectral_library``, ``engine.spectra`` and below.
"""
