"""The corpus format's identifiers, apart from :mod:`training.corpus` (which needs RDKit and safe-mol to
build a corpus): reading a prepared corpus (:mod:`training.dataset`, pretraining) needs neither, so
pretraining runs on a machine that has only torch and numpy (docs/accelerator.md)."""

FORMAT = "msgpt-corpus"
FORMAT_VERSION = 1
MAX_CONTEXT_BITS = 256  # the decoder's fingerprint encoder reads at most this many active bits
