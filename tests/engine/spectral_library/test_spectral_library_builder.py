"""The bundled spectral library's builder and calibration (training/bundle/spectral_library.py) on a tiny synthetic
MassBank-style MGF, and the shipped files' consistency."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from engine.progress import run_to_end
from engine.spectral_library import iter_references
from engine.spectral_library.index import build_library, library_from_references
from engine.spectral_library.search import SearchParams, calibration_path
from training.bundle import spectral_library as builder

RECORDS = [  # accession, licence, fold, instrument, ion mode, structure key
    ("MSBNK-Eawag-EA000101", "CC BY", "train", "LC-ESI-QFT", "positive", "AAAAAAAAAAAAAA"),
    ("MSBNK-Eawag-EA000102", "CC BY-SA", "train", "LC-ESI-QFT", "positive", "AAAAAAAAAAAAAA"),
    ("MSBNK-BAFG-CSL0001", "dl-de/by-2-0", "train", "LC-ESI-QTOF", "negative", "BBBBBBBBBBBBBB"),
    ("MSBNK-UFZ-WANA0001", "CC0", "train", "LC-ESI-ITFT", "positive", "CCCCCCCCCCCCCC"),
    ("MSBNK-RIKEN-PR0001", "CC BY-NC", "train", "LC-ESI-QTOF", "positive", "DDDDDDDDDDDDDD"),
    ("MSBNK-RIKEN-PR0002", "CC BY-NC-SA", "train", "LC-ESI-QTOF", "positive", "DDDDDDDDDDDDDD"),
    ("MSBNK-Keio_Univ-KO0001", "CC BY", "train", "LC-ESI-QQ", "positive", "EEEEEEEEEEEEEE"),
    ("MSBNK-LCSB-LU0001", "CC BY", "val", "LC-ESI-QFT", "positive", "FFFFFFFFFFFFFF"),
]


def mgf(records=RECORDS, n_peaks=12):
    rng = np.random.default_rng(0)
    blocks = []
    for i, (acc, lic, fold, instrument, mode, key) in enumerate(records):
        precursor = 250.0 + 10 * i
        mz = np.sort(rng.uniform(50, precursor - 5, size=n_peaks))
        intensity = np.concatenate([[1000.0], rng.uniform(0.5, 800, size=n_peaks - 1)])
        peaks = "".join(f"{m:.6f} {x:.2f}\n" for m, x in zip(mz, intensity)) + f"{precursor:.4f} 5000\n"
        adduct = "[M+H]+" if mode == "positive" else "[M-H]-"
        blocks.append(f"BEGIN IONS\nTITLE={acc}\nPEPMASS={precursor:.5f}\nCHARGE=1{'+' if mode == 'positive' else '-'}"
                      f"\nIONMODE={mode}\nADDUCT={adduct}\nNAME=compound {i}\nINCHIKEY={key}-UHFFFAOYSA-N\n"
                      f"INSTRUMENT_TYPE={instrument}\nCOLLISION_ENERGY=20\nLICENSE={lic}\nSOURCE=MassBank {acc}\n"
                      f"FOLD={fold}\n{peaks}END IONS\n\n")
    return "".join(blocks)


@pytest.fixture
def built(tmp_path):
    source = tmp_path / "massbank.mgf"
    source.write_text(mgf())
    out = tmp_path / "out"
    stats = builder.build(source, out, top=5, min_rel=1.0)
    return source, out, stats


def test_only_open_licences_of_the_training_fold_at_high_resolution(built):
    _, out, stats = built
    refs = list(iter_references(out / builder.LIBRARY))
    assert [r.accession for r in refs] == ["MSBNK-Eawag-EA000101", "MSBNK-Eawag-EA000102", "MSBNK-BAFG-CSL0001",
                                           "MSBNK-UFZ-WANA0001"]
    assert {r.license for r in refs} <= set(builder.LICENSES)
    assert stats.excluded == {"licence": 2, "not high resolution": 1, "fold": 1}
    assert [r.contributor for r in refs] == ["Eawag", "Eawag", "BAFG", "UFZ"]
    assert refs[2].polarity == "negative" and refs[2].adduct == "[M-H]-" and refs[2].inchikey14 == "BBBBBBBBBBBBBB"
    assert refs[0].source == "MassBank MSBNK-Eawag-EA000101" and "fold" not in refs[0].extra


def test_peaks_are_compact(built):
    _, out, _ = built
    text = gzip.decompress((out / builder.LIBRARY).read_bytes()).decode()
    block = text.split("END IONS")[0]
    peaks = [line.split() for line in block.splitlines() if line[:1].isdigit()]
    assert len(peaks) == 6  # the 5 largest fragments and the precursor peak
    assert all(len(mz.split(".")[1]) == 4 for mz, _ in peaks)
    assert max(float(x) for _, x in peaks) == 100.0
    assert all(len(x.replace(".", "").lstrip("0")) <= 3 for _, x in peaks)


def test_attribution_names_licences_contributors_and_share_alike(built):
    _, out, _ = built
    text = (out / builder.ATTRIBUTION).read_text()
    assert "which makes the library as a whole available under **CC BY-SA\n4.0**" in text
    assert "| CC BY-SA | 1 |" in text and "| dl-de/by-2-0 | 1 |" in text and "CC BY-NC |" not in text
    assert "| Eawag | 2 | CC BY (1), CC BY-SA (1) |" in text
    assert "1 spectra are under CC BY-SA 4.0" in text


def test_a_rebuild_gives_the_same_bytes(built, tmp_path):
    source, out, _ = built
    again = tmp_path / "again"
    builder.build(source, again, top=5, min_rel=1.0)
    assert (again / builder.LIBRARY).read_bytes() == (out / builder.LIBRARY).read_bytes()


def test_compact_peaks_measures_fragments_against_the_largest_fragment():
    mz = np.array([60.0, 80.0, 100.0, 199.0, 200.0])
    intensity = np.array([0.5, 2.0, 1.0, 30.0, 1000.0])  # the precursor dwarfs the fragments
    kept_mz, rel = builder.compact_peaks(mz, intensity, 200.0, top=2, min_rel=1.0)
    assert kept_mz.tolist() == [80.0, 100.0, 199.0, 200.0]  # 60 is 25% of the largest fragment but 3rd of 3
    kept_mz, _ = builder.compact_peaks(mz, intensity, 200.0, top=5, min_rel=20.0)
    assert kept_mz.tolist() == [60.0, 80.0, 100.0, 200.0]  # 199 is 3% of the base peak
    assert rel[-1] == 100.0


def test_calibration_on_synthetic_queries():
    rng = np.random.default_rng(2)
    refs, queries = [], []
    for i in range(12):
        precursor = 200.0 + 0.005 * i  # all within one precursor window: every query sees every reference
        base = np.sort(rng.uniform(50, 190, size=8))
        for j in range(2):  # two spectra of each structure
            refs.append(builder.ReferenceSpectrum(
                index=len(refs), line=1, precursor_mz=precursor, charge=1, mz=base + rng.uniform(-0.002, 0.002, 8),
                intensity=rng.uniform(10, 100, 8), polarity="positive", inchikey14=f"K{i:013d}",
                contributor="LAB" if j == 0 else "OTHER"))
        shared = np.concatenate([base[:2], rng.uniform(50, 190, 6)])  # 2 of 8 peaks in common: a weak false hit
        queries.append(builder.ReferenceSpectrum(
            index=i, line=1, precursor_mz=precursor, charge=1, mz=np.sort(shared),
            intensity=rng.uniform(10, 100, 8), polarity="positive", inchikey14=f"Q{i:013d}"))
    library = library_from_references(refs, "synthetic")
    params = SearchParams()
    false = builder.calibrate_false(library, queries, params)
    loso, other_lab = builder.calibrate_true(library, params)
    assert false.queries == 12 and loso.queries == 24 and other_lab.queries == 24
    assert all(loso.correct) and loso.rates(0.8, 6)[1] == 1.0  # its twin is always found
    assert len(false.similarity) == 12 and max(false.similarity) < 0.8 and false.rates(0.8, 1) == (0.0, 0.0)
    assert false.rates(0.0, 1) == (1.0, 0.0) and false.rates(0.0, 3)[0] < 1.0
    rows = builder.table(false, loso, other_lab)
    chosen = builder.choose(rows, 0.5)
    assert chosen["true_answer_rate"] == 1.0
    with pytest.raises(builder.MsgptError, match="is in the library"):
        builder.calibrate_false(library, refs[:1], params)


def test_wilson_upper_bound():
    assert builder.wilson_upper(0.0, 1000) == pytest.approx(0.0038, abs=2e-4)
    assert builder.wilson_upper(0.05, 100) > 0.05 > builder.wilson_upper(0.04, 10000)


BUNDLED = Path(__file__).resolve().parents[3] / "resources" / "spectral_library"


@pytest.mark.skipif(not (BUNDLED / builder.LIBRARY).is_file(), reason="the bundled library is not built")
def test_shipped_library_files_agree():
    text = gzip.decompress((BUNDLED / builder.LIBRARY).read_bytes()).decode()
    licences = {line[8:] for line in text.splitlines() if line.startswith("LICENSE=")}
    assert licences <= set(builder.LICENSES)
    assert "FOLD=" not in text
    for key in ("UFNOUKDBUJZYDE", "ZCJPOPBZHLUFHF"):  # cyproconazole, fenamiphos: the real-run targets
        assert f"INCHIKEY={key}-" in text
    calibration = json.loads(calibration_path().read_text())
    chosen = calibration["chosen"]
    assert chosen["false_answer_rate_upper95"] <= calibration["max_false_answer_rate"] <= 0.05
    assert calibration["library"] == builder.LIBRARY


SHARED = Path("/work/shared/data/massbank_dev.mgf.gz")


@pytest.mark.skipif(not SHARED.is_file() or not (BUNDLED / builder.LIBRARY).is_file(),
                    reason="needs ../shared/data and the bundled library")
def test_no_validation_structure_is_shipped():
    shipped = {line[9:23] for line in gzip.decompress((BUNDLED / builder.LIBRARY).read_bytes()).decode().splitlines()
               if line.startswith("INCHIKEY=")}
    val = set()
    with gzip.open(SHARED, "rt") as fh:
        key = ""
        for line in fh:
            if line.startswith("INCHIKEY="):
                key = line[9:23]
            elif line.startswith("FOLD=val"):
                val.add(key)
    assert val and not (val & shipped)


def test_build_library_reads_the_builder_output(built):
    _, out, _ = built
    library = run_to_end(build_library(out / builder.LIBRARY, "bundle"))
    assert len(library) == 4 and library.polarity_counts()["negative"] == 1
