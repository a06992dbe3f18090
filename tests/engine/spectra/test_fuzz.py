"""Property-based fuzzing: any input gives a result or one of our documented errors, never another exception.

Budget (examples per test) is set below; the whole file runs in about half a minute on one core.
``MSGPT_FUZZ_SCALE=N`` multiplies it for a longer soak (e.g. ``MSGPT_FUZZ_SCALE=20 python -m pytest
tests/test_fuzz.py``).
"""

import gzip
import math
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.chem.adducts import parse_adduct, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, normalize_formula, parse_formula
from engine.errors import AdductError, FormulaError, InputFileError
from engine.spectra.io import iter_spectra
from engine.spectra.spectrum import SkippedRecord, Spectrum

SCALE = int(os.environ.get("MSGPT_FUZZ_SCALE", "1"))
FAST = settings(max_examples=1500 * SCALE, deadline=None, database=None)
FILES = settings(max_examples=500 * SCALE, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])

# Pieces people really write, so the fuzzer reaches deep into the parsers, plus arbitrary text.
FORMULA_PIECES = ["C", "H", "N", "O", "S", "P", "Cl", "Br", "Na", "Si", "c", "l", "o", "Xx", "D", "0", "1", "12",
                  "9" * 30, "+", "-", "(", ")", "[", "]", ".", "·", " ", "\u0663", "ß"]
ADDUCT_PIECES = ["[", "]", "M", "2M", "+", "-", "H", "Na", "K", "NH4", "H2O", "FA", "ACN", "Cl", "HCOO", "2", "3",
                 "9" * 30, "*", "•", ".", " ", "e", "Xy", "++", "--", "0"]


def pieces(alphabet):
    return st.one_of(st.text(max_size=40), st.lists(st.sampled_from(alphabet), max_size=25).map("".join))


@FAST
@given(pieces(FORMULA_PIECES))
def test_formula_parser_gives_counts_or_a_formula_error(text):
    try:
        counts = parse_formula(text)
    except FormulaError as e:
        assert str(e)  # a message for the user
        return
    assert counts and all(isinstance(n, int) and n > 0 for n in counts.values())
    assert parse_formula(normalize_formula(text)) == counts  # Hill order round-trips
    assert math.isfinite(formula_mass(counts))


@FAST
@given(pieces(ADDUCT_PIECES))
def test_adduct_parser_gives_an_adduct_or_an_adduct_error(text):
    try:
        adduct = parse_adduct(text)
    except AdductError as e:
        assert str(e)
        return
    assert adduct.charge != 0 and adduct.n_molecules >= 1
    assert parse_adduct(adduct.name) == adduct  # the normalised name parses to itself
    assert math.isfinite(precursor_mz_from_neutral(200.0, adduct))


MGF_KEYS = ["TITLE", "PEPMASS", "CHARGE", "ADDUCT", "ION", "PRECURSOR_TYPE", "IONMODE", "FORMULA", "SMILES",
            "INCHIKEY", "RTINSECONDS", "RETENTION_TIME", "MSLEVEL", "PRECURSOR_MZ", "NAME", "SCANS", "FEATURE_ID"]
MGF_VALUES = ["179.0703", "0", "-1", "nan", "inf", "1e999", "1+", "2-", "1", "[M+H]+", "M+Na", "[M-H]-",
              "C10H10O3", "c10h10o3", "positive", "neg", "3.4 min", "N/A", "179.07 100 2+", "179.07 abc", "",
              "C1CC((", "[M+H]2+", "CCO", "1+ and 2+"]
MGF_LINES = st.one_of(
    st.tuples(st.sampled_from(MGF_KEYS), st.one_of(st.sampled_from(MGF_VALUES), st.text(max_size=12))).map(
        lambda kv: f"{kv[0]}={kv[1]}"),
    st.tuples(st.floats(), st.floats()).map(lambda p: f"{p[0]} {p[1]}"),
    st.sampled_from(["BEGIN IONS", "END IONS", "", "# comment", "100 200 1+", "100", "abc def", "=", "=x", "KEY="]),
    st.text(max_size=20),
)
MGF_TEXT = st.lists(MGF_LINES, max_size=30).map(lambda lines: "BEGIN IONS\n" + "\n".join(lines) + "\n")


@FILES
@given(MGF_TEXT, st.sampled_from(["utf-8", "latin-1", "utf-16"]), st.booleans(), st.sampled_from(["\n", "\r\n", "\r"]))
def test_mgf_reader_gives_spectra_skips_or_an_input_file_error(text, encoding, packed, newline):
    data = text.replace("\n", newline).encode(encoding, errors="replace")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fuzz.mgf")
        with open(path, "wb") as fh:
            fh.write(gzip.compress(data) if packed else data)
        try:
            items = list(iter_spectra(path))
        except InputFileError as e:
            # a whole-file problem we name; never the catch-all for an unexpected exception
            assert "cannot read this MGF file" not in str(e), e
            return
    for item in items:
        assert isinstance(item, (Spectrum, SkippedRecord))
        if isinstance(item, SkippedRecord):
            assert item.reason
        else:
            assert item.n_peaks > 0 and item.precursor_mz > 0
