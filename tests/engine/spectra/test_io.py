"""Reading MGF / mzML (+ gzip): good records, per-record skips, file-level errors."""

import gzip
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from engine.chem import molecules as chem
from engine.errors import AdductError, FormulaError, InputFileError
from engine.spectra.io import detect_format, iter_spectra, read_spectra
from engine.spectra.spectrum import SkippedRecord, Spectrum

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"
GOOD = {
    "TITLE": "mellein",
    "PEPMASS": "179.0703",
    "CHARGE": "1+",
    "ADDUCT": "[M+H]+",
    "FORMULA": "C10H10O3",
    "SMILES": MELLEIN,
}
PEAKS = "133.0648 21905.3\n161.0597 96508.4\n179.0703 72563.9"
SHARED_MZML = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "mzml"


def mgf_record(peaks: str | None = PEAKS, **fields: str | None) -> str:
    """One MGF record: GOOD's fields with overrides (None leaves a field out)."""
    values = {**GOOD, **fields}
    lines = ["BEGIN IONS", *(f"{k}={v}" for k, v in values.items() if v is not None)]
    lines += [peaks] if peaks else []
    return "\n".join([*lines, "END IONS", ""])


def write(tmp_path: Path, content: str | bytes, name: str = "input.mgf") -> Path:
    path = tmp_path / name
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def read_one(tmp_path: Path, text: str, **kwargs) -> Spectrum | SkippedRecord:
    items = list(iter_spectra(write(tmp_path, text), **kwargs))
    assert len(items) == 1
    return items[0]


# ---------------------------------------------------------------------------------------------
# Fixture files
# ---------------------------------------------------------------------------------------------


def test_fixture_mgf(data_dir):
    spectra, skipped = read_spectra(data_dir / "fixture.mgf")
    assert skipped == []
    assert Counter(s.adduct for s in spectra) == {"[M+H]+": 7, "[M+Na]+": 3, "[M-H]-": 2}
    first = spectra[0]
    assert first.id == "MSBNK-Athens_Univ-AU406406"
    assert (first.formula, first.charge, first.polarity, first.index) == ("C14H28N2O6", 1, "positive", 0)
    assert first.retention_time == pytest.approx(2.6 * 60)  # "2.6 min"
    assert first.metadata["license"] == "CC BY-SA" and first.metadata["fold"] == "val"
    assert first.source == str(data_dir / "fixture.mgf")
    assert [s.index for s in spectra] == list(range(12))
    for s in spectra:
        assert s.polarity == ("negative" if s.adduct == "[M-H]-" else "positive")
        assert chem.inchikey(chem.mol_from_smiles(s.smiles)) == s.inchikey  # cross-check with RDKit


def test_fixture_mgf_gz_reads_the_same(data_dir, tmp_path):
    gz = write(tmp_path, (data_dir / "fixture.mgf").read_bytes(), "fixture.mgf.gz")
    plain, _ = read_spectra(data_dir / "fixture.mgf")
    packed, _ = read_spectra(gz)
    assert [s.id for s in packed] == [s.id for s in plain]
    assert all(a.mz.tolist() == b.mz.tolist() for a, b in zip(plain, packed))


def test_small_mzml(data_dir):
    spectra, skipped = read_spectra(data_dir / "small.mzML")
    assert skipped == []
    assert [s.index for s in spectra] == [0, 1, 3, 4, 5, 7, 8, 9]  # MS1 scans 2 and 6 passed over
    first = spectra[0]
    assert first.id == "controllerType=0 controllerNumber=1 scan=621"
    assert first.precursor_mz == pytest.approx(313.179832623487)
    assert (first.charge, first.polarity, first.adduct, first.formula) == (1, "positive", None, None)
    assert first.retention_time == pytest.approx(3.3389343 * 60)
    assert first.n_peaks == 202
    assert first.metadata["collision_energy"] == "30"
    assert first.metadata["precursor_source"] == "selected ion m/z"
    no_charge = spectra[2]
    assert (no_charge.index, no_charge.charge, no_charge.polarity) == (3, 0, "positive")


def test_mzml_survey_scans_on_request(data_dir):
    from engine.spectra.spectrum import SurveyScan

    items = list(iter_spectra(data_dir / "small.mzML", survey_scans=True))
    kinds = ["MS1" if isinstance(i, SurveyScan) else "MS2" for i in items]
    assert kinds == ["MS2", "MS2", "MS1", "MS2", "MS2", "MS2", "MS1", "MS2", "MS2", "MS2"]  # file order
    survey = items[2]
    assert survey.id == "controllerType=0 controllerNumber=1 scan=623" and survey.index == 2
    assert survey.n_peaks == 926 and survey.polarity == "positive"
    assert survey.retention_time == pytest.approx(3.3476647 * 60)
    assert not survey.mz.flags.writeable and (survey.intensity > 0).all()
    assert items[3].metadata["precursor_scan_id"] == survey.id  # the MS2 scan names its survey scan
    assert [i.index for i in iter_spectra(data_dir / "small.mzML")] == [0, 1, 3, 4, 5, 7, 8, 9]  # default: none


def test_mzml_default_adduct_fills_matching_polarity_only(data_dir):
    positive, _ = read_spectra(data_dir / "small.mzML", default_adduct="M+H")
    assert {(s.adduct, s.charge) for s in positive} == {("[M+H]+", 1)}
    negative, _ = read_spectra(data_dir / "small.mzML", default_adduct="[M-H]-")
    assert {s.adduct for s in negative} == {None}


def test_mzml_gz(data_dir, tmp_path):
    gz = write(tmp_path, (data_dir / "small.mzML").read_bytes(), "small.mzML.gz")
    assert len(read_spectra(gz)[0]) == 8


def _edited_mzml(data_dir: Path, tmp_path: Path, edit) -> Path:
    return write(tmp_path, edit((data_dir / "small.mzML").read_text()), "edited.mzML")


def test_mzml_precursor_from_isolation_window(data_dir, tmp_path):
    path = _edited_mzml(data_dir, tmp_path, lambda t: re.sub(r'<cvParam[^>]*accession="MS:1000744"[^>]*/>', "", t, count=1))
    first = read_spectra(path)[0][0]
    assert first.precursor_mz == pytest.approx(313.18)
    assert first.metadata["precursor_source"] == "isolation window target m/z"


def test_mzml_without_precursor_is_skipped(data_dir, tmp_path):
    path = _edited_mzml(data_dir, tmp_path, lambda t: re.sub(r"<precursorList.*?</precursorList>", "", t, count=1, flags=re.S))
    spectra, skipped = read_spectra(path)
    assert len(spectra) == 7
    assert skipped[0].spectrum_id.endswith("scan=621") and "no precursor m/z" in skipped[0].reason


def test_mzml_negative_scans(data_dir, tmp_path):
    path = _edited_mzml(
        data_dir, tmp_path,
        lambda t: t.replace('accession="MS:1000130" name="positive scan"', 'accession="MS:1000129" name="negative scan"'),
    )
    spectra = read_spectra(path, default_adduct="[M-H]-")[0]
    assert {(s.polarity, s.adduct) for s in spectra} == {("negative", "[M-H]-")}
    assert {s.charge for s in spectra} == {-1}


def test_truncated_mzml_is_a_file_error(data_dir, tmp_path):
    text = (data_dir / "small.mzML").read_text()
    path = write(tmp_path, text[: len(text) * 2 // 3], "cut.mzML")
    with pytest.raises(InputFileError, match="malformed XML"):
        read_spectra(path)


# ---------------------------------------------------------------------------------------------
# MGF fields
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, attribute, expected",
    [
        (dict(CHARGE="0", ADDUCT=None), "charge", 0),
        (dict(CHARGE="0", ADDUCT=None), "polarity", None),
        (dict(CHARGE="1", ADDUCT=None), "charge", 1),  # unsigned: positive by default
        (dict(CHARGE="1", ADDUCT=None, IONMODE="negative", PEPMASS="177.0557"), "charge", -1),
        (dict(CHARGE="N/A"), "charge", 1),  # from the adduct
        (dict(CHARGE=None, ADDUCT=None, IONMODE="Negative"), "polarity", "negative"),
        (dict(ADDUCT="unknown"), "adduct", None),
        (dict(ADDUCT="null"), "adduct", None),
        (dict(ADDUCT="M+H"), "adduct", "[M+H]+"),
        (dict(ADDUCT=None, PRECURSOR_TYPE="[M+H]1+"), "adduct", "[M+H]+"),
        (dict(ADDUCT=None, PRECURSORTYPE="M+H"), "adduct", "[M+H]+"),
        (dict(ADDUCT=None, IONTYPE="[M+H]+"), "adduct", "[M+H]+"),
        (dict(ADDUCT=None, ION="[M+H]+"), "adduct", "[M+H]+"),
        (dict(ADDUCT=None), "adduct", None),
        (dict(FORMULA="NA"), "formula", None),
        (dict(FORMULA="O3C10H10"), "formula", "C10H10O3"),
        (dict(PEPMASS="179.0703 12345.6"), "precursor_mz", 179.0703),
        (dict(PEPMASS="179.0703 12345.6 1+", CHARGE=None), "charge", 1),
        (dict(PEPMASS=None, PRECURSOR_MZ="179.0703"), "precursor_mz", 179.0703),
        (dict(INCHIKEY="KWILGNNWGSNMPA-UHFFFAOYSA-N"), "inchikey", "KWILGNNWGSNMPA-UHFFFAOYSA-N"),
        (dict(INCHIAUX="KWILGNNWGSNMPA-UHFFFAOYSA-N"), "inchikey", "KWILGNNWGSNMPA-UHFFFAOYSA-N"),
        (dict(SMILES="N/A"), "smiles", None),
        (dict(RTINSECONDS="12.5"), "retention_time", 12.5),
        (dict(RETENTION_TIME="3.44"), "retention_time", 206.4),  # no unit: minutes
        (dict(RETENTION_TIME="3.44 min"), "retention_time", 206.4),
        (dict(RETENTIONTIME="90 s"), "retention_time", 90.0),
        (dict(RETENTION_TIME="12.5 sec (MSMS)"), "retention_time", 12.5),
        (dict(RETENTION_TIME="0.5 min (in paper: 0.6 min)"), "retention_time", 30.0),
        (dict(RETENTION_TIME="N/A min"), "retention_time", None),
        (dict(TITLE=None, FEATURE_ID="7", SCANS="12"), "id", "7"),
        (dict(TITLE=None, SCANS="12"), "id", "12"),
        (dict(TITLE=None), "id", "0"),
        (dict(TITLE="N/A"), "id", "0"),
    ],
)
def test_mgf_fields(tmp_path, fields, attribute, expected):
    spectrum = read_one(tmp_path, mgf_record(**fields))
    assert isinstance(spectrum, Spectrum), spectrum
    value = getattr(spectrum, attribute)
    assert value == (pytest.approx(expected) if isinstance(expected, float) else expected)


def test_mgf_keys_are_case_insensitive(tmp_path):
    text = "begin ions\ntitle=x\npepmass=179.0703\nCharge=1+\nAdduct=M+H\nFormula=C10H10O3\n" + PEAKS + "\nend ions\n"
    s = read_one(tmp_path, text)
    assert (s.id, s.adduct, s.formula, s.charge) == ("x", "[M+H]+", "C10H10O3", 1)
    assert s.metadata["adduct"] == "M+H"  # metadata keeps the values as written


def test_mgf_header_applies_to_every_record(tmp_path):
    text = "COM=test\nIONMODE=negative\n" + mgf_record(CHARGE="1", ADDUCT=None, PEPMASS="177.0557") * 2
    spectra, skipped = read_spectra(write(tmp_path, text))
    assert skipped == [] and [s.charge for s in spectra] == [-1, -1]
    assert spectra[0].metadata["com"] == "test"


def test_unreadable_retention_time_is_left_empty_with_a_warning(tmp_path):
    s = read_one(tmp_path, mgf_record(RETENTION_TIME="early"))
    assert s.retention_time is None
    assert "retention time 'early' not understood" in s.metadata["warnings"]
    s = read_one(tmp_path, mgf_record(RTINSECONDS="abc"))  # not needed to elucidate: no reason to skip
    assert s.retention_time is None
    assert "line 8: RTINSECONDS 'abc' is not a number of seconds" in s.metadata["warnings"]


def test_bad_peaks_are_dropped_with_a_warning(tmp_path):
    s = read_one(tmp_path, mgf_record(peaks="100.0 nan\n120.0 -5\n130.0 0\n140.0 10\n-3 5\n179.0703 20"))
    assert s.mz.tolist() == [140.0, 179.0703]
    assert "4 peaks with zero, negative or NaN" in s.metadata["warnings"]


def test_unsorted_peaks_are_sorted_but_not_merged(tmp_path):
    s = read_one(tmp_path, mgf_record(peaks="150 1\n100 2\n100 3"))
    assert s.mz.tolist() == [100.0, 100.0, 150.0] and s.intensity.tolist() == [2.0, 3.0, 1.0]


def test_invalid_reference_smiles_is_dropped_with_a_note(tmp_path):
    s = read_one(tmp_path, mgf_record(SMILES="C1CC(("))
    assert s.smiles is None
    assert "reference SMILES 'C1CC((' cannot be parsed" in s.metadata["warnings"]
    assert s.metadata["smiles"] == "C1CC(("


def test_default_formula_and_adduct(tmp_path):
    s = read_one(tmp_path, mgf_record(FORMULA=None, ADDUCT=None, CHARGE=None),
                 default_adduct="[M+H]+", default_formula="C10H10O3")
    assert (s.adduct, s.formula, s.charge) == ("[M+H]+", "C10H10O3", 1)
    wrong = read_one(tmp_path, mgf_record(FORMULA=None), default_formula="C10H12O3")
    assert isinstance(wrong, SkippedRecord) and "fix FORMULA or ADDUCT" in wrong.reason


def test_a_permanent_cations_charged_formula_is_read_as_its_atoms(tmp_path):
    """MassBank writes choline's [M]+ record as FORMULA=C5H14NO+: it reads as the cation's atoms C5H14NO; a charged
    formula with any other ion type is still refused, naming the fix."""
    s = read_one(tmp_path, mgf_record(FORMULA="C5H14NO+", ADDUCT="[M]+", PEPMASS="104.1070", CHARGE="1+"))
    assert (s.adduct, s.formula, s.charge) == ("[M]+", "C5H14NO", 1)
    wrong = read_one(tmp_path, mgf_record(FORMULA="C10H10O3+"))
    assert isinstance(wrong, SkippedRecord) and "give the neutral formula" in wrong.reason


def test_file_adduct_wins_over_default(tmp_path):
    s = read_one(tmp_path, mgf_record(ADDUCT="[M+Na]+", PEPMASS="201.0522"), default_adduct="[M+H]+")
    assert s.adduct == "[M+Na]+"


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(default_adduct="[M+Qq]+"), AdductError, "Unknown group 'Qq'"),
        (dict(default_adduct="[M+2H]2+"), AdductError, "only singly charged"),
        (dict(default_formula="C10H10O3Xe"), FormulaError, "Unsupported element 'Xe'"),
    ],
)
def test_bad_defaults_raise_at_once(data_dir, kwargs, error, message):
    with pytest.raises(error, match=message):
        iter_spectra(data_dir / "fixture.mgf", **kwargs)


def test_tolerance_is_a_parameter(tmp_path):
    text = mgf_record(PEPMASS="179.10")
    assert isinstance(read_one(tmp_path, text), SkippedRecord)
    assert isinstance(read_one(tmp_path, text, tol_da=0.05), Spectrum)


# ---------------------------------------------------------------------------------------------
# Per-record problems: skipped with a reason, the rest of the file goes on
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, peaks, reason",
    [
        (dict(PEPMASS=None), PEAKS, "no precursor m/z"),
        (dict(PEPMASS="N/A"), PEAKS, "no precursor m/z"),
        (dict(PEPMASS="abc"), PEAKS, r"line 3: PEPMASS 'abc' is not a number"),
        (dict(PRECURSOR_MZ="abc", PEPMASS=None), PEAKS, "precursor m/z 'abc' is not a number"),
        ({}, "133.0 abc\n161.0 5", r"line 8: peak '133.0 abc' is not 'm/z intensity'"),
        ({}, "133.0\n161.0 5", r"peak '133.0' is not 'm/z intensity'"),
        ({}, None, "no peaks: the record has no 'm/z intensity' lines"),
        ({}, "133.0 -5\n161.0 0", "all 2 peaks have zero, negative or NaN"),
        (dict(CHARGE="abc"), PEAKS, r"line 4: charge 'abc' is not a charge such as 1\+"),
        (dict(CHARGE="2+", ADDUCT=None), PEAKS, "charge 2: only singly charged precursors"),
        (dict(CHARGE="1+ and 2+"), PEAKS, "several charges"),
        (dict(ADDUCT="[M+2H]2+", CHARGE=None), PEAKS, r"adduct \[M\+2H\]2\+: only singly charged"),
        (dict(ADDUCT="[M+2H]++", CHARGE="1+"), PEAKS, r"CHARGE 1 does not match ADDUCT \[M\+2H\]2\+"),
        (dict(ADDUCT="[M+Xy]+"), PEAKS, r"Unknown group 'Xy' in adduct '\[M\+Xy\]\+'"),
        (dict(FORMULA="C10H10O3Na"), PEAKS, "Unsupported element 'Na' in formula"),
        (dict(FORMULA="C12H17N4OS+"), PEAKS, r"'\+' is not allowed"),
        (dict(FORMULA="C10H12O3"), PEAKS, r"formula C10H12O3 gives \[M\+H\]\+ m/z 181.0859 but PEPMASS is 179.07"),
        (dict(IONMODE="negative"), PEAKS, r"conflicting polarity: IONMODE is negative but CHARGE is 1\+"),
        (dict(CHARGE="1-"), PEAKS, r"CHARGE is 1- but ADDUCT \[M\+H\]\+ is positive"),
        (dict(IONMODE="both"), PEAKS, "IONMODE 'both' is neither positive nor negative"),
        (dict(MSLEVEL="1"), PEAKS, "MSLEVEL is '1'; only MS2"),
        (dict(PEPMASS="179.0703 100 abc", CHARGE=None), PEAKS, r"line 3: charge 'abc' is not a charge"),
    ],
)
def test_bad_records_are_skipped_and_reading_goes_on(tmp_path, fields, peaks, reason):
    text = mgf_record(peaks, TITLE="bad", **fields) + mgf_record(TITLE="good")
    items = list(iter_spectra(write(tmp_path, text)))
    assert [type(i) for i in items] == [SkippedRecord, Spectrum]
    skipped = items[0]
    assert (skipped.spectrum_id, skipped.index, skipped.source) == ("bad", 0, str(tmp_path / "input.mgf"))
    assert re.search(reason, skipped.reason), skipped.reason
    assert items[1].id == "good" and items[1].index == 1


def test_record_without_end_ions(tmp_path):
    text = "BEGIN IONS\nTITLE=open\nPEPMASS=100\n" + mgf_record(TITLE="good")
    items = list(iter_spectra(write(tmp_path, text)))
    assert isinstance(items[0], SkippedRecord) and items[0].spectrum_id == "open"
    assert "starting at line 1 has no END IONS before line 4" in items[0].reason
    assert items[1].id == "good"


def test_file_ending_inside_a_record(tmp_path):
    text = mgf_record(TITLE="good") + "BEGIN IONS\nTITLE=cut\nPEPMASS=17"
    items = list(iter_spectra(write(tmp_path, text)))
    assert items[0].id == "good"
    assert isinstance(items[1], SkippedRecord) and "file ends inside the record starting at line 12" in items[1].reason


# ---------------------------------------------------------------------------------------------
# File-level problems: one InputFileError with a readable reason
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.mgf", "", "empty"),
        ("blank.mgf", "\n\n  \n", "only white space"),
        ("empty.mgf.gz", "", "empty after decompression"),
        ("garbage.mgf", bytes(range(256)) * 4, "binary data"),
        ("notes.mgf", "hello world\n", "not an MGF file: no 'BEGIN IONS'"),
        ("notes.txt", "hello world\n", r"neither MGF .* nor mzML"),
        ("wrong.mgf", "<?xml version='1.0'?>\n<mzML></mzML>\n", "rename it to .mzML"),
        ("wrong.mzML", mgf_record(), "rename it to .mgf"),
        ("other.mzML", "<?xml version='1.0'?>\n<foo/>\n", "XML without an <mzML> element"),
        ("broken.mzML", "<?xml version='1.0'?>\n<mzML><run><spectrumList count='1'><spectrum", "malformed XML"),
    ],
)
def test_file_errors(tmp_path, name, content, message):
    path = write(tmp_path, content, name)
    with pytest.raises(InputFileError, match=message) as info:
        read_spectra(path)
    assert info.value.path == str(path)


def test_missing_file_and_folder_fail_before_iteration(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        iter_spectra(tmp_path / "nope.mgf")  # no next() needed
    with pytest.raises(InputFileError, match="folder, not a file"):
        iter_spectra(tmp_path)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path):
    path = write(tmp_path, mgf_record())
    path.chmod(0)
    try:
        with pytest.raises(InputFileError, match="no permission"):
            read_spectra(path)
    finally:
        path.chmod(0o600)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "bad.mgf.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage-garbage-garbage")
    with pytest.raises(InputFileError, match="gzip data is truncated or corrupt"):
        read_spectra(path)


def test_truncated_gzip_streams_the_records_before_the_cut(tmp_path):
    records = "".join(mgf_record(TITLE=f"r{i}") for i in range(3000))  # ~600 KB of text
    packed = gzip.compress(records.encode())
    path = write(tmp_path, packed[: len(packed) * 3 // 4], "cut.mgf")  # named .mgf, gzip by content
    seen = []
    with pytest.raises(InputFileError, match="gzip data is truncated or corrupt.*records before it were read"):
        for item in iter_spectra(path):
            seen.append(item)
    assert len(seen) > 500 and all(isinstance(s, Spectrum) for s in seen)


def test_unknown_extension_with_mgf_content(tmp_path):
    assert detect_format(write(tmp_path, mgf_record(), "spectra.txt")) == "mgf"
    assert len(read_spectra(tmp_path / "spectra.txt")[0]) == 1


def test_latin1_bytes_do_not_break_reading(tmp_path):
    path = write(tmp_path, mgf_record(NAME="caf\xe9").encode("latin-1"))
    assert read_spectra(path)[0][0].metadata["name"] == "caf\ufffd"


# ---------------------------------------------------------------------------------------------
# Real runs from ../shared (skipped when absent)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (SHARED_MZML / "polarity_switching.mzML.gz").exists(), reason="shared mzML data not present")
def test_polarity_switching_run():
    spectra, skipped = read_spectra(SHARED_MZML / "polarity_switching.mzML.gz", default_adduct="[M+H]+")
    assert {s.polarity for s in spectra} == {"positive", "negative"}
    assert {s.adduct for s in spectra if s.polarity == "negative"} == {None}
    assert all("only singly charged" in r.reason for r in skipped)


@pytest.mark.skipif(not (SHARED_MZML / "qexactive_dda_qc_pool.mzML").exists(), reason="shared mzML data not present")
def test_qexactive_run_with_zlib_arrays():
    spectra, skipped = read_spectra(SHARED_MZML / "qexactive_dda_qc_pool.mzML")
    assert len(spectra) + len(skipped) == 381  # every MS2 scan is accounted for
    assert all(s.n_peaks > 0 for s in spectra)


# ---------------------------------------------------------------------------------------------
# Precursor m/z written at nominal precision (MassBank-style records)
# ---------------------------------------------------------------------------------------------

LYSINE_OXIDE = {"TITLE": "nominal", "FORMULA": "C6H14N2O3", "SMILES": None}  # [M+H]+ 163.1077


@pytest.mark.parametrize("pepmass", ["163", "163.1", "163.11", "163.1077", "164"])
def test_nominal_pepmass_is_a_check_at_its_written_precision(tmp_path, pepmass):
    s = read_one(tmp_path, mgf_record(PEAKS.replace("179.0703", "163.1077"), **LYSINE_OXIDE, PEPMASS=pepmass))
    assert isinstance(s, Spectrum), s
    assert s.formula == "C6H14N2O3" and s.precursor_mz == float(pepmass)  # kept as written
    assert s.metadata["precursor_mz_decimals"] == str(len(pepmass.partition(".")[2]))


@pytest.mark.parametrize("pepmass, tolerance", [("165", "1 Da"), ("163.3", "0.1 Da")])
def test_precursor_off_by_more_than_its_written_precision_is_skipped(tmp_path, pepmass, tolerance):
    item = read_one(tmp_path, mgf_record(**LYSINE_OXIDE, PEPMASS=pepmass))
    assert isinstance(item, SkippedRecord)
    assert f"tolerance {tolerance}, the precision PEPMASS is written with" in item.reason


def test_precise_pepmass_keeps_the_ppm_check(tmp_path):
    item = read_one(tmp_path, mgf_record(**LYSINE_OXIDE, PEPMASS="163.1277"))  # 20 mDa off, 4 decimals
    assert isinstance(item, SkippedRecord) and "tolerance 0.01 Da)" in item.reason
