"""The spectral identification rule on hits that are not the query itself (issue #61, item 3; issue #57): a reference
of the query's precursor whose spectrum is the query's diluted by three foreign peaks, the value the shipped rule
decides on set just above and just below its cut (engine.spectral_library.search.default_threshold: the calibrated
probability of resources/spectral_library/confidence.json's rule, or the similarity of calibration.json without
one), run through ``msgpt predict``: above, the reference's structure is identified (rank 1, level 2a, its evidence
written); below, it is not, and nothing is called 2a. The margins (0.001-0.05 either side) stay far above float
noise."""

from __future__ import annotations

import csv

import pytest
from tiny_bundle import FIXTURE, fixture_spectra

from engine.chem import molecules as chem
from engine.elucidation.libraries import search_spectrum
from engine.elucidation.ranking import SPECTRAL_LIBRARY
from engine.spectral_library import load_spectral_library
from engine.spectral_library.identity import identity_features
from engine.spectral_library.search import default_threshold

ISOMER = "O=C(CCCCCC(=O)N(CCO)CCO)N(CCO)CO"  # the first fixture spectrum's formula, not its structure
TITLE = "MSBNK-Athens_Univ-AU406406"
FOREIGN = (100.5123, 140.6011, 180.7345)  # m/z the query has no peak near


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


def diluted_reference(path, share: float):
    """The first fixture record as a reference of ISOMER, with three foreign peaks of ``share`` x its base peak."""
    block = FIXTURE.read_text().split("END IONS")[0]
    lines = [line for line in block.splitlines() if not line.startswith(("SMILES=", "INCHIKEY=", "ADDUCT="))]
    peaks = [line for line in lines if line[:1].isdigit()]
    base = max(float(p.split()[1]) for p in peaks)
    head = [line for line in lines if not line[:1].isdigit()]
    head.insert(head.index("BEGIN IONS") + 1, f"SMILES={ISOMER}\nADDUCT=[M+H]+")
    extra = [f"{mz:.4f} {share * base:.1f}" for mz in FOREIGN]
    path.write_text("\n".join(head + peaks + extra) + "\nEND IONS\n")
    return path


def similarity(path) -> tuple[float, int, float]:
    """(similarity, matched peaks, the value the shipped rule cuts: its probability, or the similarity)."""
    matches = search_spectrum([load_spectral_library(path)], fixture_spectra()[0])
    hit, rule = matches.hits[0], default_threshold().rule
    return hit.similarity, hit.matched_peaks, hit.similarity if rule is None else rule.probability(
        identity_features(matches))


def cut() -> float:
    rule = default_threshold()
    return rule.min_similarity if rule.rule is None else rule.rule.min_probability


def constructed(home, above: bool):
    """A reference whose value under the rule lies 0.001-0.05 above (or below) its cut, with enough matched peaks
    and similarity: the rule's cut alone decides. Found on a grid of dilutions (similarity, and with it the
    probability, falls as the foreign peaks grow)."""
    rule = default_threshold()
    for i in range(81):
        share = 0.05 * i
        path = diluted_reference(home / f"ref_{'above' if above else 'below'}_{i}.mgf", share)
        s, matched, value = similarity(path)
        window = (cut() + 0.001, cut() + 0.05) if above else (cut() - 0.05, cut() - 0.001)
        if window[0] <= value <= window[1] and matched >= rule.min_matched_peaks + 3 and s >= rule.min_similarity:
            return path, s
    pytest.fail(f"no dilution puts the rule's value {'above' if above else 'below'} {cut()}")


def predict(tiny_bundle_dir, home, refs, name):
    from engine.cli import main

    one = home / "one.mgf"
    one.write_text(FIXTURE.read_text().split("END IONS")[0] + "END IONS\n")
    out = home / name
    argv = ["predict", str(one), "-o", str(out), "--model", str(tiny_bundle_dir), "--groups", "2",
            "--samples-per-group", "2", "--band", "0.95", "1.5", "-q", "--formulas", "0",
            "--no-bundled-libraries", "--spectral-library", str(refs)]
    assert main(argv) == 0
    return [r for r in csv.DictReader(line for line in open(out) if not line.startswith("#"))]


def test_a_hit_just_above_the_rule_identifies_its_structure(tiny_bundle_dir, home):
    refs, s = constructed(home, above=True)
    rows = predict(tiny_bundle_dir, home, refs, "above.csv")
    top = min(rows, key=lambda r: int(r["feature_rank"]))
    assert top["InChIkey2D"] == chem.inchikey14(ISOMER) and SPECTRAL_LIBRARY in top["origin"]
    assert top["identification_level"] == "2a" and top["reference_accession"] == TITLE
    assert float(top["spectral_similarity"]) == pytest.approx(s, abs=1e-3)


def test_a_hit_just_below_the_rule_identifies_nothing(tiny_bundle_dir, home):
    refs, _ = constructed(home, above=False)
    assert similarity(refs)[2] < cut()
    rows = predict(tiny_bundle_dir, home, refs, "below.csv")
    assert rows and not [r for r in rows if r["identification_level"] == "2a"]
    assert not [r for r in rows if r["InChIkey2D"] == chem.inchikey14(ISOMER) and r["feature_rank"] == "1"
                and SPECTRAL_LIBRARY in r["origin"] and r["reference_accession"] == TITLE]  # not put first by it
