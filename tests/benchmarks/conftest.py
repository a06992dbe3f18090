"""The benchmark tests' shared builders (test_suspect_ranking.spectrum_dict) stay importable from tests/benchmarks/studies:
this file puts this folder on the import path of every test below it."""
