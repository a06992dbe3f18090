"""Data shipped with MS-GPT Desktop: the default model bundle and example spectra (no code)."""
