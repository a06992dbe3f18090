"""Hand-off files (#60): MZmine's SIRIUS export, GNPS-FBMN MGF + quant table, MS-DIAL MSP and SIRIUS .ms, written by
scripts/write_handoff_files.py from a synthetic run (tests/synthetic_run.py), read back as the same features with the
same formula candidates (isotope evidence included), IDs as the tool wrote them, abundances joined; bad files get
errors naming file, line and fix. One test repeats it on the real QC-pool run when ../shared is there."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from synthetic_run import SHIFTED_RUN, protonated_mz, scan_id, write_mzml

from engine.errors import InputFileError
from engine.formulas.candidates import rank_formulas
from engine.spectra.handoff import (
    attach_quant,
    feature_abundance,
    handoff_kind,
    iter_input_features,
    read_quant_table,
)
from engine.spectra.io import detect_format, read_spectra
from engine.spectra.run_features import iter_features
from engine.spectra.spectrum import SkippedRecord

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("write_handoff_files", ROOT / "scripts" / "write_handoff_files.py")
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)
QC_POOL = ROOT.parent / "shared" / "data" / "mzml" / "qexactive_dda_qc_pool.mzML"


def synthetic_scans() -> list[dict]:
    """The six compounds of SHIFTED_RUN (no m/z shift), one a minute; the first one fragmented three times, with a
    noise peak in one scan only (merging drops it)."""
    from engine.chem.formula import format_formula, parse_formula
    from engine.spectra.isotopes import isotope_pattern

    scans = []
    for i, (formula, fragments) in enumerate(SHIFTED_RUN.items()):
        rt = 60.0 * (i + 1)
        ion = dict(parse_formula(formula))
        ion["H"] += 1
        masses, abundances = isotope_pattern(format_formula(ion), 3, charge=1)
        scans.append({"ms_level": 1, "rt": rt, "mz": np.asarray(masses), "intensity": abundances * 1e6 * (i + 1)})
        ref = scan_id(len(scans) - 1)
        for k in range(3 if i == 0 else 1):
            mz = sorted(protonated_mz(f) for f in fragments)
            intensity = [100.0, 80.0, 60.0, 40.0]
            if k == 1:
                mz, intensity = [*mz, 250.1234], [*intensity, 30.0]
            scans.append({"ms_level": 2, "rt": rt + 0.5 + 2 * k, "precursor_mz": protonated_mz(formula), "charge": 1,
                          "ref": ref, "mz": mz, "intensity": intensity})
    return scans


@pytest.fixture(scope="module")
def handoff(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handoff")
    run = write_mzml(folder / "run.mzML", synthetic_scans())
    paths = writer.write_all(run, folder / "out")
    reference, _ = writer.run_features(run)
    return run, paths, reference


def features_of(path, **kwargs):
    items = list(iter_input_features(path, **kwargs))
    return [i for i in items if not isinstance(i, SkippedRecord)], [i for i in items if isinstance(i, SkippedRecord)]


@pytest.mark.parametrize("kind", ["mzmine_sirius", "feature_mgf", "msp", "sirius_ms"])
def test_each_export_is_known_by_its_content(handoff, tmp_path, kind):
    _, paths, _ = handoff
    assert handoff_kind(paths[kind]) == kind
    renamed = tmp_path / "export.txt"  # not by the extension
    renamed.write_bytes(paths[kind].read_bytes())
    assert handoff_kind(renamed) == kind


def test_a_run_and_a_library_mgf_are_not_hand_offs(handoff, data_dir):
    run, _, _ = handoff
    assert handoff_kind(run) is None and handoff_kind(data_dir / "fixture.mgf") is None


@pytest.mark.parametrize("kind, first_id", [("mzmine_sirius", "1"), ("feature_mgf", "1"), ("msp", "0"), ("sirius_ms", "1")])
def test_the_same_features_as_the_mzml_with_the_ids_the_tool_wrote(handoff, kind, first_id):
    _, paths, reference = handoff
    features, skipped = features_of(paths[kind])
    assert not skipped and len(features) == len(reference) == 6
    assert features[0].id == first_id and len({f.id for f in features}) == 6
    exact = kind in ("mzmine_sirius", "sirius_ms")  # these write m/z and RT in full; GNPS and MS-DIAL round them
    for f, r in zip(features, reference):
        assert f.spectrum.id == f.id and f.spectrum.metadata["feature_id"] == f.id
        assert f.precursor_mz == pytest.approx(r.precursor_mz, abs=0 if exact else 1e-4)
        assert f.retention_time == pytest.approx(r.retention_time, abs=0 if exact else 0.01)
        assert f.spectrum.polarity == "positive" and f.spectrum.charge == 1
        assert np.allclose(f.spectrum.mz, r.spectrum.mz, atol=0 if exact else 1e-4)
        scale = r.spectrum.intensity.max() / f.spectrum.intensity.max()
        assert np.allclose(f.spectrum.intensity * scale, r.spectrum.intensity, rtol=1e-3)
    # the three scans of the first compound: MZmine's per-scan MS2 records merge as the run's scans do (noise dropped)
    assert 250.1234 not in features[0].spectrum.mz
    if kind == "mzmine_sirius":
        assert features[0].n_scans == 3 and features[0].spectrum.metadata["n_scans"] == "3"


@pytest.mark.parametrize("kind", ["mzmine_sirius", "sirius_ms"])
def test_the_same_formula_candidates_isotope_evidence_included(handoff, kind):
    _, paths, reference = handoff
    features, _ = features_of(paths[kind])
    for f, r, truth in zip(features, reference, SHIFTED_RUN):
        assert f.ms1 is not None and np.array_equal(f.ms1.mz, r.ms1.mz) and np.array_equal(f.ms1.intensity, r.ms1.intensity)
        mine, theirs = rank_formulas(f.spectrum, ms1=f.ms1), rank_formulas(r.spectrum, ms1=r.ms1)
        assert mine.has_ms1 and theirs.has_ms1
        assert [(c.formula, c.ion_type) for c in mine.candidates] == [(c.formula, c.ion_type) for c in theirs.candidates]
        assert [c.score for c in mine.candidates] == pytest.approx([c.score for c in theirs.candidates])
        assert mine.candidates[0].formula == truth


def test_ms_dial_isotopes_decide_the_formula_too(handoff):
    """MS-DIAL writes M, M+1.00335, M+2.00671 only (a 37Cl M+2 at +1.99705 is not there: height 0, dropped), and
    its default [M+H]+; the formula ranking still scores that pattern."""
    _, paths, _ = handoff
    features, _ = features_of(paths["msp"])
    for f, truth in zip(features, SHIFTED_RUN):
        assert f.ms1 is not None and f.ms1.mz.size == (2 if "Cl" in truth else 3) and f.spectrum.adduct == "[M+H]+"
        table = rank_formulas(f.spectrum, ms1=f.ms1)
        formulas = [c.formula for c in table.candidates]
        assert table.has_ms1 and (formulas[0] == truth if "Cl" not in truth else truth in formulas)
    assert feature_abundance(features[1].spectrum.metadata)[0] == pytest.approx(features[1].ms1.precursor_intensity, rel=1e-6)


def test_gnps_quant_table_beside_the_mgf_gives_each_feature_its_abundance(handoff):
    _, paths, _ = handoff
    features, _ = features_of(paths["feature_mgf"])
    table = read_quant_table(paths["quant"])
    assert table.samples == ("run.mzML",) and set(table.rows) == {f.id for f in features}
    for f in features:
        top, samples = feature_abundance(f.spectrum.metadata)
        assert top == table.rows[f.id].values[0] == samples["run.mzML"] and top > 0
        assert "by id" in f.spectrum.metadata["abundance_source"]
    # more intense compounds were written with more signal: the abundances keep their order
    tops = [feature_abundance(f.spectrum.metadata)[0] for f in features]
    assert tops == sorted(tops)


def test_a_quant_table_joins_an_mzml_run_by_mz_and_rt(handoff, tmp_path):
    run, _, _ = handoff
    table = tmp_path / "quant.tsv"
    table.write_text("Alignment ID\tAverage Rt(min)\tAverage Mz\tMetabolite name\tMS/MS spectrum\tQC1\tQC2\n"
                     f"7\t1.01\t{protonated_mz('C8H10N4O2'):.5f}\tUnknown\t\t100\t300\n"
                     f"8\t9.5\t{protonated_mz('C10H10O3'):.5f}\tUnknown\t\t5\t6\n", encoding="utf-8")
    features = [f for f in attach_quant(iter_features(run), table) if not isinstance(f, SkippedRecord)]
    top, samples = feature_abundance(features[0].spectrum.metadata)
    assert (top, samples) == (300.0, {"QC1": 100.0, "QC2": 300.0})
    assert features[0].spectrum.metadata["quant_row_id"] == "7" and "m/z+RT" in features[0].spectrum.metadata["abundance_source"]
    # row 8 is 7 minutes away from the run's C10H10O3: no abundance, and a note says so
    assert feature_abundance(features[1].spectrum.metadata) == (None, {})
    assert "not in the quantification table quant.tsv" in features[1].spectrum.metadata["warnings"]


def test_adduct_spellings_are_normalised(tmp_path):
    msp = tmp_path / "neg.msp"
    msp.write_text("NAME: Unknown\nALIGNMENTID: 12\nRETENTIONTIME: 2.5\nPRECURSORMZ: 239.0561\n"
                   "PRECURSORTYPE: [M+Hac-H]-\nIONMODE: Negative\nNum Peaks: 2\n59.0139\t100\n179.0350\t40\n\n"
                   "NAME: Unknown\nALIGNMENTID: 13\nRETENTIONTIME: 3.0\nPRECURSORMZ: 197.1285\n"
                   "PRECURSORTYPE: [M+NH4]+\nIONMODE: Positive\nNum Peaks: 1\n180.1019\t100\n", encoding="utf-8")
    features, _ = features_of(msp)
    assert [(f.id, f.spectrum.adduct, f.spectrum.polarity) for f in features] == [
        ("12", "[M+CH3COO]-", "negative"), ("13", "[M+NH4]+", "positive")]
    assert features[0].retention_time == pytest.approx(150.0)
    ms = tmp_path / "a.ms"
    ms.write_text(">compound F9\n>parentmass 195.0877\n>ionization [M+?]+\n>rt 1.5min\n\n>collision 35\n"
                  "138.0662 100\n\n>compound F10\n>parentmass 217.0696\n>ionization [M+Na]+\n>rt 90s\n\n>ms2\n"
                  "160.0 50\n", encoding="utf-8")
    features, _ = features_of(ms)
    assert [(f.id, f.spectrum.adduct, f.spectrum.polarity, f.retention_time) for f in features] == [
        ("F9", None, "positive", 90.0), ("F10", "[M+Na]+", "positive", 90.0)]


def test_a_mzmine_ms1_record_without_ms2_is_skipped_by_feature(tmp_path):
    mgf = tmp_path / "sirius.mgf"
    mgf.write_text("BEGIN IONS\nFEATURE_ID=5\nPEPMASS=195.0877\nCHARGE=1+\nRTINSECONDS=60.0\nSPECTYPE=CORRELATED MS\n"
                   "MSLEVEL=1\n195.0877 100\n196.0910 10\nEND IONS\n", encoding="utf-8")
    features, skipped = features_of(mgf)
    assert not features and skipped[0].spectrum_id == "5"
    assert "feature 5 has an MS1 record but no usable MS2 record" in skipped[0].reason
    # read as plain spectra, the MS1 record stays refused as before
    _, plain = read_spectra(mgf)
    assert "only MS2 spectra are used" in plain[0].reason


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("bad.msp", "NAME: x\nPRECURSORMZ: abc\nNum Peaks: 1\n100 1\n", "PRECURSORMZ 'abc' is not a number"),
        ("bad.msp", "NAME: x\nALIGNMENTID: 3\nPRECURSORMZ: 200.1\nNum Peaks: 2\n100 1\nhello world\n",
         "line 6: 'hello world' is neither 'KEY: value' nor a peak"),
        ("bad.ms", ">compound c1\n>parentmass 200.1\n100 5\n>ms2\n100 5\n", "line 3: '100 5' before any >ms1/>ms2 block"),
        ("bad.ms", ">compound c1\n>parentmass 200.1\n>ms1\n200.1 5\n", "compound 'c1' has no >ms2"),
    ],
)
def test_bad_records_are_skipped_naming_line_and_value(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    _, skipped = features_of(path)
    assert skipped and message in skipped[0].reason


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("x.msp", "BEGIN IONS\nPEPMASS=100\n1 1\nEND IONS\n", "not a MSP file: no PRECURSORMZ: and Num Peaks: lines"),
        ("x.ms", "hello\n", "not a SIRIUS .ms file: no >compound or >parentmass line"),
        ("x.txt", "hello\n", "neither MGF ('BEGIN IONS'), MSP ('PRECURSORMZ:'), SIRIUS .ms ('>compound') nor mzML"),
    ],
)
def test_bad_files_get_one_file_error(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError, match=None) as e:
        detect_format(path)
    assert message in str(e.value) and name in str(e.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a,b\n1,2\n", "no feature ID column in the first 20 lines"),
        ("row ID,row m/z,row retention time,s.mzML Peak area\n1,100,1,5\n1,101,1,6\n",
         "line 3: feature ID '1' is also on line 2; IDs must be unique"),
        ("row ID,row m/z,row retention time,s.mzML Peak area\n1,100,1,lots\n",
         "line 2: 'lots' in column 's.mzML Peak area' is not a number"),
        ("row ID,row m/z,row retention time,comment\n1,100,1,hello\n", "no sample abundance columns"),
    ],
)
def test_bad_quant_tables_name_line_and_fix(tmp_path, text, message):
    path = tmp_path / "q.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as e:
        read_quant_table(path)
    assert message in str(e.value) and "q.csv" in str(e.value)


def test_mzmine3_datafile_columns_and_empty_cells(tmp_path):
    path = tmp_path / "mz3.csv"
    path.write_text("id,mz,rt,datafile:A.mzML:area,datafile:B.mzML:area\n4,200.1,1.5,10,\n", encoding="utf-8")
    table = read_quant_table(path)
    assert table.samples == ("A.mzML", "B.mzML") and table.rows["4"].values == (10.0, 0.0)
    assert table.rows["4"].rt_s == pytest.approx(90.0)


@pytest.mark.skipif(not QC_POOL.exists(), reason="needs ../shared/data/mzml/qexactive_dda_qc_pool.mzML")
def test_the_qc_pool_run_round_trips_through_every_export(tmp_path):
    paths = writer.write_all(QC_POOL, tmp_path, limit=25)
    reference, _ = writer.run_features(QC_POOL, limit=25)
    for kind in ("mzmine_sirius", "feature_mgf", "msp", "sirius_ms"):
        features, skipped = features_of(paths[kind])
        assert not skipped and len(features) == len(reference) == 25, kind
        for f, r in zip(features, reference):
            assert f.precursor_mz == pytest.approx(r.precursor_mz, abs=1e-4)
            assert f.spectrum.mz.size == r.spectrum.mz.size
    features, _ = features_of(paths["mzmine_sirius"])
    for f, r in zip(features[:10], reference[:10]):  # formula ranking with isotope evidence, as from the mzML
        mine, theirs = rank_formulas(f.spectrum, ms1=f.ms1), rank_formulas(r.spectrum, ms1=r.ms1)
        assert [c.formula for c in mine.candidates[:5]] == [c.formula for c in theirs.candidates[:5]]
    quant = json.loads(features_of(paths["feature_mgf"])[0][0].spectrum.metadata["abundance_samples"])
    assert list(quant) == ["qexactive_dda_qc_pool.mzML"]


def test_the_sirius_export_finds_the_quant_table_of_its_feature_list(handoff, tmp_path):
    """MZmine names its exports of one feature list <name>_sirius.mgf and <name>.mgf + <name>_quant.csv."""
    _, paths, _ = handoff
    (tmp_path / "list_sirius.mgf").write_bytes(paths["mzmine_sirius"].read_bytes())
    (tmp_path / "list_quant.csv").write_bytes(paths["quant"].read_bytes())
    features, _ = features_of(tmp_path / "list_sirius.mgf")
    assert all(feature_abundance(f.spectrum.metadata)[0] > 0 for f in features)
    assert all("list_quant.csv row" in f.spectrum.metadata["abundance_source"] for f in features)


def test_ms_dial_mgf_keys_are_read(tmp_path):
    """MS-DIAL's MGF export (saveSpectraTableAsMascotFormat): RTINMINUTES and ADDUCTIONNAME in MS-DIAL's spelling."""
    mgf = tmp_path / "msdial.mgf"
    mgf.write_text("BEGIN IONS\nTITLE=Unknown\nRTINMINUTES=2.5\nPEPMASS=239.0561\nMETABOLITENAME=\n"
                   "ADDUCTIONNAME=[M+Hac-H]-\n59.0139\t100\n179.0350\t40\nEND IONS\n", encoding="utf-8")
    spectra, skipped = read_spectra(mgf)
    assert not skipped and spectra[0].adduct == "[M+CH3COO]-" and spectra[0].retention_time == pytest.approx(150.0)


FIXTURES = ROOT / "tests" / "data" / "handoff"


def test_the_committed_qc_pool_fixtures_read_as_the_same_five_features():
    """tests/data/handoff: five QC-pool features in each tool's export (tests/data/handoff/README.md)."""
    exports = {kind: FIXTURES / name for kind, name in [
        ("mzmine_sirius", "qexactive_dda_qc_pool_sirius.mgf"), ("feature_mgf", "qexactive_dda_qc_pool_gnps.mgf"),
        ("msp", "qexactive_dda_qc_pool_msdial.msp"), ("sirius_ms", "qexactive_dda_qc_pool.ms")]}
    read = {kind: features_of(path)[0] for kind, path in exports.items()}
    assert {kind: handoff_kind(path) for kind, path in exports.items()} == {kind: kind for kind in exports}
    mzmine = read["mzmine_sirius"]
    assert [f.id for f in mzmine] == ["1", "2", "3", "4", "5"] and all(f.ms1 is not None for f in mzmine)
    for kind, features in read.items():
        assert [f.precursor_mz for f in features] == pytest.approx([f.precursor_mz for f in mzmine], abs=1e-4), kind
        assert [f.spectrum.mz.size for f in features] == [f.spectrum.mz.size for f in mzmine], kind
    for a, b in zip(mzmine, read["sirius_ms"]):  # both carry the survey window: the same formula candidates
        assert [c.formula for c in rank_formulas(a.spectrum, ms1=a.ms1).candidates] == \
               [c.formula for c in rank_formulas(b.spectrum, ms1=b.ms1).candidates]
    quant = read_quant_table(FIXTURES / "qexactive_dda_qc_pool_gnps_quant.csv")
    assert [feature_abundance(f.spectrum.metadata)[0] for f in read["feature_mgf"]] == [
        quant.rows[f.id].values[0] for f in read["feature_mgf"]]


@pytest.mark.skipif(not QC_POOL.exists(), reason="needs ../shared/data/mzml/qexactive_dda_qc_pool.mzML")
def test_the_committed_fixtures_are_what_the_script_writes_from_the_run():
    reference, _ = writer.run_features(QC_POOL, limit=5)
    features, _ = features_of(FIXTURES / "qexactive_dda_qc_pool_sirius.mgf")
    assert [f.precursor_mz for f in features] == pytest.approx([r.precursor_mz for r in reference]), (
        "rerun: python scripts/write_handoff_files.py ../shared/data/mzml/qexactive_dda_qc_pool.mzML "
        "tests/data/handoff --features 5")
