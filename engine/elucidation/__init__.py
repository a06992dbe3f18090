"""One spectrum's search, as the paper runs it: posterior -> band queries -> B samples -> the ranked pool
(``pipeline``: :class:`SpectrumSession`, :func:`elucidate` and its progress events; ``ranking``: decoding the
samples and ranking the candidates).

May import: ``engine.model`` and below.
"""
