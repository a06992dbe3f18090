"""Reading spectral library files (engine/spectral_library/read.py, records.py): MSP and MGF, bad records by
line, plain words for unusable libraries."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from engine.chem.molecules import inchikey14
from engine.errors import InputFileError
from engine.progress import run_to_end
from engine.spectral_library import ReadReport, SpectralLibraryError, iter_references
from engine.spectral_library.index import build_library
from engine.spectral_library.read import detect_format

NIST = """Name: Caffeine
Synon: 1,3,7-trimethylxanthine
Precursor_type: [M+H]+
Spectrum_type: MS2
PrecursorMZ: 195.0877
Instrument_type: HCD
Collision_energy: NCE=35%
Ion_mode: P
InChIKey: RYYVLZVUVIJVGH-UHFFFAOYSA-N
Formula: C8H10N4O2
NIST#: 1234
DB#: 42
Num Peaks: 3
110.0713 120 "p-C3H3NO"
138.0662 999 "p-CO"
195.0877 400

"""

MONA = """Name: Atrazine
Precursor_type: [M+H]+
Ion_mode: POSITIVE
PrecursorMZ: 216.1010
Instrument_type: LC-ESI-QTOF
Collision_energy: 20 eV
Comments: "SMILES=CCNc1nc(Cl)nc(NC(C)C)n1" "accession=MSBNK-Eawag-EA000001" "license=CC BY" "author=Someone"
Num Peaks: 4
68.0243 5.1; 104.0010 12; 132.0323 30;
174.0541 100;

"""

MSDIAL = """NAME: Taurine
PRECURSORMZ: 124.0074
PRECURSORTYPE: [M-H]-
IONMODE: Negative
INCHI: InChI=1S/C2H7NO3S/c3-1-2-7(4,5)6/h1-3H2,(H,4,5,6)
Num Peaks: 2
79.9568	100
106.9808	20

"""

BAD_PEAK = """Name: Broken
PrecursorMZ: 300.1
Ion_mode: P
Num Peaks: 2
100.0 50
abc def

"""

NO_PRECURSOR = """Name: EI only
Ion_mode: P
Num Peaks: 2
41 100
43 50

"""

SHORT = """Name: Truncated
PrecursorMZ: 250.2
Num Peaks: 5
100.0 50
120.0 10

"""

MGF_GOOD = """BEGIN IONS
TITLE=MSBNK-LCSB-LU109701
PEPMASS=304.1134
CHARGE=1+
IONMODE=positive
ADDUCT=[M+H]+
NAME=Fenamiphos
SMILES=CCOP(=O)(NC(C)C)Oc1ccc(SC)c(C)c1
INSTRUMENT_TYPE=LC-ESI-QFT
COLLISION_ENERGY=30
LICENSE=CC BY
SOURCE=MassBank MSBNK-LCSB-LU109701
FOLD=train
217.0321 100
234.0586 45.5
END IONS
"""

MGF_BAD = """BEGIN IONS
TITLE=bad-peaks
PEPMASS=200.1
50.1 x10
END IONS
BEGIN IONS
TITLE=polarity-conflict
PEPMASS=200.1
IONMODE=negative
ADDUCT=[M+H]+
60.0 10
END IONS
BEGIN IONS
TITLE=cut-off
PEPMASS=180.0
60.0 10
"""


def write(tmp_path, name, text, compress=False):
    path = tmp_path / name
    if compress:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def read_all(path):
    report = ReadReport(str(path))
    return list(iter_references(path, report)), report


def test_msp_nist_mona_msdial(tmp_path):
    path = write(tmp_path, "lib.msp", NIST + MONA + MSDIAL)
    refs, report = read_all(path)
    assert report.format == "msp" and report.records == 3 and report.used == 3 and not report.problems
    caffeine, atrazine, taurine = refs
    assert caffeine.name == "Caffeine" and caffeine.precursor_mz == pytest.approx(195.0877)
    assert caffeine.adduct == "[M+H]+" and caffeine.polarity == "positive" and caffeine.charge == 1
    assert caffeine.collision_energy == "NCE=35%" and caffeine.instrument_type == "HCD"
    assert caffeine.inchikey14 == "RYYVLZVUVIJVGH" and caffeine.accession == "42" and caffeine.line == 1
    np.testing.assert_allclose(caffeine.mz, [110.0713, 138.0662, 195.0877])
    np.testing.assert_allclose(caffeine.intensity, [120, 999, 400])
    # MoNA: structure, accession and licence inside Comments; several peaks a line
    assert atrazine.smiles == "CCNc1nc(Cl)nc(NC(C)C)n1"
    assert atrazine.inchikey14 == inchikey14("CCNc1nc(Cl)nc(NC(C)C)n1")  # computed from the SMILES
    assert atrazine.accession == "MSBNK-Eawag-EA000001" and atrazine.contributor == "Eawag"
    assert atrazine.license == "CC BY" and atrazine.mz.size == 4
    # MS-DIAL: upper-case keys, InChI only, negative
    assert taurine.polarity == "negative" and taurine.charge == -1 and taurine.adduct == "[M-H]-"
    assert taurine.inchikey14 == inchikey14("NCCS(=O)(=O)O")  # computed from the InChI
    assert taurine.line == NIST.count("\n") + MONA.count("\n") + 1


def test_msp_bad_records_skipped_by_line(tmp_path):
    path = write(tmp_path, "mixed.msp", NIST + BAD_PEAK + NO_PRECURSOR + SHORT + MSDIAL)
    refs, report = read_all(path)
    assert [r.name for r in refs] == ["Caffeine", "Taurine"]
    assert report.records == 5 and report.used == 2 and report.skipped == 3 and report.no_precursor == 1
    start = NIST.count("\n") + 1
    assert report.problems[0] == (f"line {start} (Broken): line {start + 5}: 'abc def' is neither 'Key: value' nor "
                                  "a peak 'm/z intensity'")
    assert "no precursor m/z" in report.problems[1]
    assert "Num Peaks says 5 but 2 peaks follow" in report.problems[2]
    summary = report.summary()
    assert "2 of 5 records of mixed.msp used; 3 skipped" in summary and "without a precursor m/z" in summary


def test_mgf_records_via_pyteomics(tmp_path):
    path = write(tmp_path, "massbank.mgf.gz", MGF_GOOD + MGF_BAD, compress=True)
    refs, report = read_all(path)
    assert report.format == "mgf" and report.records == 4 and report.used == 1
    (ref,) = refs
    assert ref.accession == "MSBNK-LCSB-LU109701" and ref.contributor == "LCSB"
    assert ref.inchikey14 == "ZCJPOPBZHLUFHF"  # computed from the SMILES: fenamiphos
    assert ref.source == "MassBank MSBNK-LCSB-LU109701" and ref.extra["fold"] == "train"
    assert ref.polarity == "positive" and ref.charge == 1 and ref.license == "CC BY"
    bad_start = MGF_GOOD.count("\n") + 1
    assert report.problems[0] == f"line {bad_start} (bad-peaks): line {bad_start + 3}: '50.1 x10' is neither " \
                                 "KEY=value nor a peak 'm/z intensity'"
    assert "conflicting polarity" in report.problems[1] and "polarity-conflict" in report.problems[1]
    assert "no END IONS" in report.problems[2]


def test_mgf_unsigned_charge_takes_the_ion_mode(tmp_path):
    text = "BEGIN IONS\nTITLE=x\nPEPMASS=150.0\nCHARGE=1\nIONMODE=Negative\n70.0 10\nEND IONS\n"
    (ref,), _ = read_all(write(tmp_path, "n.mgf", text))
    assert ref.polarity == "negative" and ref.charge == -1


def test_format_from_content_when_the_extension_says_nothing(tmp_path):
    assert detect_format(write(tmp_path, "lib.txt", NIST)) == "msp"
    assert detect_format(write(tmp_path, "lib.dat", MGF_GOOD)) == "mgf"


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"\x00\x01\x02binary" * 10, "binary file"),
    (b"just some text\nwithout records\n", "neither MSP"),
])
def test_unreadable_files_name_the_file_and_the_fix(tmp_path, content, words):
    path = tmp_path / "lib.msp"
    path.write_bytes(content)
    with pytest.raises(InputFileError) as info:
        detect_format(path)
    assert str(path) in str(info.value) and words in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpectralLibraryError, match="does not exist; check the path"):
        detect_format(tmp_path / "nope.msp")


def test_truncated_gzip_is_a_file_error(tmp_path):
    data = gzip.compress((NIST * 2000).encode())
    path = tmp_path / "cut.msp.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SpectralLibraryError, match="truncated or damaged"):
        read_all(path)


def test_library_without_precursors_is_told_in_plain_words(tmp_path):
    path = write(tmp_path, "ei.msp", NO_PRECURSOR * 3)
    with pytest.raises(SpectralLibraryError) as info:
        run_to_end(build_library(path, "ei"))
    message = str(info.value)
    assert "none of its 3 spectra has a precursor m/z" in message and "EI (GC-MS) library" in message


def test_library_of_the_other_polarity_is_told_in_plain_words(tmp_path):
    path = write(tmp_path, "neg.msp", MSDIAL * 2)
    library = run_to_end(build_library(path, "neg.msp"))
    assert library.polarity_counts() == {"positive": 0, "negative": 2, "unknown": 0}
    note = library.polarity_note("positive")
    assert note.startswith("neg.msp holds only negative-mode spectra (2); a positive-mode spectrum cannot match")
    assert library.polarity_note("negative") == "" and library.polarity_note(None) == ""
