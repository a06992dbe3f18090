"""MS-GPT inference engine: spectra in, ranked candidate structures out. Never imports Qt."""

__version__ = "0.1.0"
