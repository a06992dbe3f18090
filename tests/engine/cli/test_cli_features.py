"""`msgpt predict` on an LC-MS/MS run: one result per precursor feature, formula candidates, MS1 counted.

The run is a small synthetic mzML (tests/synthetic_run.py) with survey scans; the model is the tiny
test bundle. What the CLI hands to the model is captured, so nothing depends on what the tiny model
happens to generate.
"""

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from synthetic_run import scan_id, write_mzml

import engine.cli.predict as cli
from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.spectra.isotopes import isotope_pattern
from engine.spectra.spectrum import NO_FRAGMENTS_NOTE

CAFFEINE = "C8H10N4O2"
FRAGMENTS = ["C6H7N3O", "C5H7N3", "C4H5N3", "C7H6N4O"]  # neutral subformulas; ions are +H


def mz_of(formula: str, ion: str = "[M+H]+") -> float:
    return precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion)


def survey(rt: float, scale: float) -> dict:
    masses, abundances = isotope_pattern("C8H11N4O2", 3, charge=1)
    mz = [*masses, mz_of(CAFFEINE, "[M+Na]+"), mz_of("C10H10O3"), 400.0]
    intensity = [*(abundances * 1e6 * scale), 2e5 * scale, 5e5, 1e3]
    order = np.argsort(mz)
    return {"ms_level": 1, "rt": rt, "mz": np.array(mz)[order], "intensity": np.array(intensity)[order]}


def ms2(rt: float, precursor: float, fragments: list[str], ref=None, **extra) -> dict:
    mz = sorted([mz_of(f) for f in fragments] + [precursor])
    return {"ms_level": 2, "rt": rt, "precursor_mz": precursor, "charge": 1, "ref": ref, "mz": mz,
            "intensity": [100.0] * len(mz), **extra}


@pytest.fixture
def run(tmp_path) -> Path:
    caffeine = mz_of(CAFFEINE)
    scans = [
        survey(60.0, 0.5),
        ms2(60.5, caffeine, FRAGMENTS, ref=scan_id(0)),
        survey(66.0, 1.0),
        ms2(66.5, caffeine, FRAGMENTS[:3], ref=scan_id(2)),
        ms2(67.0, mz_of("C10H10O3"), [], ref=scan_id(2)),  # the precursor only: no fragments
        survey(72.0, 0.4),
        ms2(72.5, caffeine, FRAGMENTS, ref=scan_id(5)),
    ]
    return write_mzml(tmp_path / "run.mzML", scans)


FAST = ["--groups", "2", "--pool-size", "4", "-q", "--no-libraries",
        "--min-formula-p", "0"]  # libraries: tests/engine/elucidation; every one of K sampled: tests/engine/elucidation/test_formula_runs.py


def read_rows(path: Path) -> list[dict]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def test_the_run_budget_samples_only_the_likely_formulas(run, tmp_path, tiny_bundle_dir, captured, capsys):
    """--min-formula-p 1: the best formula of each feature alone is sampled; without libraries the others, which could
    only rank library structures, are not run at all (engine.elucidation.formula_runs)."""
    fast = [a for a in FAST if a not in ("--min-formula-p", "0")]
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "out.csv"), "--model", str(tiny_bundle_dir),
                   "--formulas", "2", *fast, "--min-formula-p", "1"])
    assert rc == 0, capsys.readouterr().err
    assert [s.metadata["formula_rank"] for s in captured] == ["1", "1"]
    assert len({s.id for s in captured}) == 2
    captured.clear()
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "x.csv"), "--model", str(tiny_bundle_dir), *fast,
                   "--min-formula-p", "1.5"])
    assert rc == 2 and "--min-formula-p must be a probability from 0 to 1, got 1.5" in capsys.readouterr().err
    assert not captured


def test_a_run_without_options_gives_one_result_per_precursor_feature(run, tmp_path, tiny_bundle_dir, captured, capsys):
    out = tmp_path / "out.csv"
    rc = cli.main(["predict", str(run), "-o", str(out), "--model", str(tiny_bundle_dir), "--formulas", "2", *FAST])
    err = capsys.readouterr().err
    assert rc == 0, err
    # two features (caffeine: 3 scans merged; the precursor-only one), each tried with its 2 best formulas
    feature_ids = list(dict.fromkeys(s.id for s in captured))
    assert len(feature_ids) == 2 and len(captured) == 4
    first = [s for s in captured if s.id == feature_ids[0]]
    assert [s.metadata["formula_rank"] for s in first] == ["1", "2"]
    assert first[0].formula == CAFFEINE and first[0].adduct == "[M+H]+"  # fragments, isotopes and the Na adduct agree
    assert first[0].metadata["n_scans"] == "3" and all(s.adduct in ("[M+H]+", "[M+Na]+") for s in captured)
    bare = [s for s in captured if s.id == feature_ids[1]]
    assert all(NO_FRAGMENTS_NOTE in s.metadata["warnings"] for s in bare)
    # the summary: features processed, the precursor-only note, MS1 scans counted
    assert "Processed 2 spectra" in err and NO_FRAGMENTS_NOTE in err
    assert "3 MS2 spectra" not in err and "4 MS2 spectra (0 skipped), 3 MS1 survey scans" in err
    assert "2 precursor features" in err
    rows = read_rows(out)
    for fid in feature_ids:  # one ranked list per feature, ranks running on across its formulas
        mine = [r for r in rows if r["spectrum_id"] == fid]
        assert [int(r["rank"]) for r in mine] == list(range(1, len(mine) + 1))
        assert all(r["formula_rank"] in ("1", "2") and 0 < float(r["formula_score"]) <= 1 for r in mine)


def test_forced_formula_and_adduct_skip_the_candidates(run, tmp_path, tiny_bundle_dir, captured, capsys):
    out = tmp_path / "out.csv"
    rc = cli.main(["predict", str(run), "-o", str(out), "--model", str(tiny_bundle_dir), "--formula", CAFFEINE,
                   "--adduct", "[M+H]+", *FAST])
    err = capsys.readouterr().err
    assert rc == 0
    assert [s.formula for s in captured] == [CAFFEINE]  # the other precursor does not fit caffeine: skipped
    assert "formula_rank" not in captured[0].metadata and "Skipped 1 spectra" in err
    assert all(r["formula_rank"] == "" for r in read_rows(out))


def test_no_merge_and_no_formulas_give_the_old_per_scan_behaviour(run, tmp_path, tiny_bundle_dir, captured, capsys):
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "o.csv"), "--model", str(tiny_bundle_dir),
                   "--no-merge", "--formulas", "0", *FAST])
    err = capsys.readouterr().err
    assert rc == 1 and "Skipped 4 spectra" in err and "no molecular formula" in err
    assert scan_id(1) in err  # scans keep their own ids


def test_ion_types_the_model_cannot_run_are_not_predicted(run, tmp_path, tiny_bundle_dir, captured, capsys):
    sodium_only = tmp_path / "sodium_only"  # a model trained on [M+Na]+ alone: nothing maps onto it
    shutil.copytree(tiny_bundle_dir, sodium_only)
    config = json.loads((sodium_only / "config.json").read_text())
    (sodium_only / "config.json").write_text(json.dumps({**config, "supported_adducts": ["[M+Na]+"]}))
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "o.csv"), "--model", str(sodium_only),
                   "--ion-types", "[M+NH4]+", *FAST])
    err = capsys.readouterr().err
    assert rc == 1 and not captured
    assert "no formula candidate of an ion type the model supports ([M+Na]+; tried [M+NH4]+)" in err


def test_an_ammonium_record_runs_as_the_protonated_molecule_keeping_its_ion_type(tmp_path, tiny_bundle_dir, captured,
                                                                                 capsys):
    nh4 = mz_of(CAFFEINE, "[M+NH4]+")  # the [M+H]+ fragments of caffeine, the NH4 precursor and NH4+
    peaks = sorted([mz_of(f) for f in FRAGMENTS] + [18.0338, nh4])
    mgf = tmp_path / "nh4.mgf"
    lines = "\n".join(f"{m:.5f} 100" for m in peaks)
    mgf.write_text(f"BEGIN IONS\nTITLE=caffeine_nh4\nPEPMASS={nh4:.5f}\nCHARGE=1+\nADDUCT=[M+NH4]+\nFORMULA={CAFFEINE}\n"
                   f"{lines}\nEND IONS\n")
    out = tmp_path / "o.csv"
    rc = cli.main(["predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir), *FAST])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert [(s.adduct, s.formula) for s in captured] == [("[M+NH4]+", CAFFEINE)]  # run as given, mapped inside
    assert "run as [M+H]+ after NH3 loss (mapping)" in err  # the run's notes say how
    rows = read_rows(out)
    assert rows and all(r["spectrum_id"] == "caffeine_nh4" for r in rows)
    assert {(r["adduct"], r["formula"], r["precursor_mz"]) for r in rows} == {("[M+NH4]+", CAFFEINE, f"{nh4:.5f}")}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--formulas", "-1"], "--formulas must be 0 or more"),
        (["--formula-ppm", "-2"], "`ppm` must be a number >= 0"),
        (["--ion-types", "[M+Xx]+"], "`ion_types`"),
        (["--feature-rt-gap", "-1"], "`rt_gap_s` must be a number >= 0"),
        (["--elements", "CHNa"], "`elements` holds Na"),
    ],
)
def test_bad_options_give_one_line(run, tmp_path, tiny_bundle_dir, capsys, args, message):
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "o.csv"), "--model", str(tiny_bundle_dir), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_an_interrupted_run_resumes_feature_by_feature(run, tmp_path, tiny_bundle_dir, monkeypatch, capsys):
    from engine.files import export

    args = ["--model", str(tiny_bundle_dir), "--formulas", "2", "--precision", "fp32", *FAST]
    reference = tmp_path / "reference.csv"
    assert cli.main(["predict", str(run), "-o", str(reference), *args]) == 0
    real, calls = export.CandidateWriter.write, {"n": 0}

    def write(self, result, **kwargs):  # Ctrl+C while the second feature is written
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real(self, result, **kwargs)

    out = tmp_path / "out.csv"
    monkeypatch.setattr(export.CandidateWriter, "write", write)
    assert cli.main(["predict", str(run), "-o", str(out), *args]) == 130
    monkeypatch.undo()
    assert cli.main(["predict", str(run), "-o", str(out), *args, "--resume"]) == 0
    assert "--resume: going on after 1 spectrum processed, 0 skipped" in capsys.readouterr().err

    def body(path):
        return [line for line in path.read_text().splitlines() if not line.startswith("# created:")]

    assert body(out) == body(reference)


def test_the_run_recalibration_is_one_line_and_can_be_set(run, tmp_path, tiny_bundle_dir, captured, capsys):
    args = ["--model", str(tiny_bundle_dir), "--formulas", "1", *FAST]
    assert cli.main(["predict", str(run), "-o", str(tmp_path / "a.csv"), *args]) == 0
    assert "run.mzML: m/z recalibration: none (" in capsys.readouterr().err  # two features: too few to measure
    captured.clear()
    assert cli.main(["predict", str(run), "-o", str(tmp_path / "b.csv"), *args, "--recalibrate", "2.5"]) == 0
    err = capsys.readouterr().err
    assert "run.mzML: m/z recalibration: +2.5 ppm at m/z 500, slope +0.0 ppm per 1000 m/z (set by the user)" in err
    assert captured[0].metadata["recalibrated_ppm"] == "2.50" and captured[0].precursor_mz < mz_of(CAFFEINE)
    rc = cli.main(["predict", str(run), "-o", str(tmp_path / "c.csv"), *args, "--recalibrate", "five"])
    err = capsys.readouterr().err
    assert rc == 2 and "give auto, off, or OFFSET[,SLOPE] in ppm" in err and "Traceback" not in err


def test_info_names_the_ion_types_run_natively_and_by_mapping(tiny_bundle_dir, capsys):
    assert cli.main(["info", "--model", str(tiny_bundle_dir)]) == 0
    out = capsys.readouterr().out
    assert "supported adducts: [M+H]+, [M+Na]+ (natively); [M+NH4]+, [M-H2O+H]+, [M+K]+, [M]+ by mapping" in out
