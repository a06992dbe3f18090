"""The training tests' shared builders (tiny_corpus.py, labelled_spectra.py) lie beside this file; its presence
puts this folder on the import path of every test below it, as tests/conftest.py does for tests/."""
