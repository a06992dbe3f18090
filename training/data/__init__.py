"""Training data: the molecule corpus (``corpus`` builds it, ``corpus_format`` names its format, ``dataset``
reads it memory-mapped, ``batching`` groups it by formula), labelled MS/MS spectra (``spectra``) and an out-of-fold
run read back (``oof_data``). Imports ``engine`` and ``training.core``."""
