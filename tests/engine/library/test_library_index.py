"""The structure records and indexes of a library (engine/library/build.py, index.py): standardisation,
dedupe, formula/mass/key queries, fingerprints, the .npz file."""

from __future__ import annotations

import numpy as np
import pytest

from engine.chem import molecules as chem
from engine.chem.formula import formula_mass
from engine.library import LibraryError, StructureLibrary, build_library
from engine.progress import run_to_end

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"  # C10H10O3, 178.062994
ISOMER = "COc1ccc(C=CC(=O)O)cc1"  # 4-methoxycinnamic acid, another C10H10O3
CAFFEINE = "CN1C=NC2=C1C(=O)N(C)C(=O)N2C"


def build(tmp_path, text, name="lib.tsv", **kwargs) -> StructureLibrary:
    path = tmp_path / name
    path.write_text(text)
    return run_to_end(build_library(path, **kwargs))


@pytest.fixture
def lib(tmp_path):
    return build(tmp_path, "SMILES\tName\tID\tsource\n"
                           f"{MELLEIN}\tmellein\tM1\tlab A\n"
                           f"{ISOMER}\tisomer\tM2\t\n"
                           f"{CAFFEINE}\tcaffeine\tM3\tlab B\n"
                           "C[C@H](N)C(=O)O\tL-alanine\tM4\t\n"
                           "[Na+].CC(=O)[O-]\tsodium acetate\tM5\t\n"
                           "C[N+](C)(C)CCO\tcholine\tM6\t\n")


def test_records_are_standardised(lib):
    assert len(lib) == 6
    alanine = lib.record(3)
    assert alanine.smiles == "CC(N)C(=O)O"  # stereo removed
    assert alanine.inchikey14 == chem.inchikey14("CC(N)C(=O)O")
    acetate = lib.record(4)
    assert (acetate.smiles, acetate.formula) == ("CC(=O)O", "C2H4O2")  # largest fragment, neutralised
    choline = lib.record(5)
    assert choline.formula == "C5H14NO"  # a quaternary ammonium stays charged
    assert choline.mass == pytest.approx(formula_mass({"C": 5, "H": 14, "N": 1, "O": 1}), abs=1e-9)
    m = lib.record(0)
    assert (m.name, m.identifier, m.source, m.formula) == ("mellein", "M1", "lab A", "C10H10O3")
    assert m.mass == pytest.approx(178.062994, abs=1e-6)
    assert lib.record(1).source == "lib.tsv"  # no source column value: the library's name


def test_formula_query_in_any_element_order(lib):
    assert lib.rows_of_formula("C10H10O3").tolist() == [0, 1]
    assert lib.rows_of_formula("H10C10O3").tolist() == [0, 1]
    assert lib.rows_of_formula("C8H10N4O2").tolist() == [2]
    assert lib.rows_of_formula("C99H1").tolist() == []
    assert lib.rows_of_formula("C2H3NaO2").tolist() == []  # beyond the supported elements: no error
    assert lib.rows_of_formula("C10H10O3").dtype == np.int64
    assert sorted(lib.formulas()) == sorted({lib.record(r).formula for r in range(len(lib))})


def test_mass_query_finds_5_ppm_not_20_ppm(lib):
    mellein = lib.record(0).mass
    caffeine = lib.record(2).mass
    assert lib.rows_near_mass(mellein * (1 + 5e-6), ppm=10).tolist() == [0, 1]
    assert lib.rows_near_mass(mellein * (1 - 5e-6), ppm=10).tolist() == [0, 1]
    assert lib.rows_near_mass(mellein * (1 + 20e-6), ppm=10).tolist() == []
    assert lib.rows_near_mass(caffeine, ppm=1).tolist() == [2]
    assert lib.rows_near_mass(1000.0, ppm=10).tolist() == []


def test_bits_round_trip_equal_morgan_bits(lib):
    for row in range(len(lib)):
        want = chem.morgan_bits(chem.mol_from_smiles(lib.smiles(row)))
        got = lib.bits(row)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_row_of_key(lib):
    assert lib.row_of_key(chem.inchikey14(CAFFEINE)) == 2
    assert lib.row_of_key(chem.inchikey14(CAFFEINE) + "-UHFFFAOYSA-N") == 2
    assert lib.row_of_key("AAAAAAAAAAAAAA") is None


def test_dedupe_keeps_the_first_name_and_merges_sources(tmp_path):
    lib = build(tmp_path, "SMILES,Name,Identifier,source\n"
                          "CCO,ethanol,E1,NORMAN\n"
                          "OCC,alcohol,E2,PubChem\n"
                          "[Na+].[O-]CC,sodium ethoxide,E3,NORMAN\n"
                          "C[C@@H](O)CC,2-butanol,B1,\n", name="lib.csv")
    assert len(lib) == 2 and lib.info["n_duplicates"] == 2
    ethanol = lib.record(0)
    assert (ethanol.name, ethanol.identifier, ethanol.source) == ("ethanol", "E1", "NORMAN;PubChem")


def test_trusted_keys_are_used_only_for_unchanged_structures(tmp_path):
    text = "smiles\tinchikey14\tsource\nCCO\tAAAAAAAAAAAAAA\ta\n[Na+].CC(=O)[O-]\tBBBBBBBBBBBBBB\tb\n"
    trusted = build(tmp_path, text, trust_keys=True)
    assert [trusted.inchikey14(r) for r in range(2)] == ["AAAAAAAAAAAAAA", chem.inchikey14("CC(=O)O")]
    computed = build(tmp_path, text)
    assert computed.inchikey14(0) == chem.inchikey14("CCO")
    assert trusted.info["trust_keys"] and not computed.info["trust_keys"]


def test_save_and_load_round_trip(tmp_path, lib):
    path = lib.save(tmp_path / "sub" / "index.npz")
    assert not [p for p in path.parent.iterdir() if p.name != "index.npz"]  # no temporary left
    again = StructureLibrary.load(path)
    assert len(again) == len(lib) and again.checksum == lib.checksum and len(again.checksum) == 64
    assert again.name == lib.name and again.info["n_rows"] == 6
    for row in range(len(lib)):
        assert again.record(row) == lib.record(row)
        np.testing.assert_array_equal(again.bits(row), lib.bits(row))
    assert again.rows_of_formula("C10H10O3").tolist() == [0, 1]
    with np.load(path, allow_pickle=False) as z:  # plain arrays only
        assert z["bits"].dtype == np.uint16 and z["bits_offsets"].dtype == np.int64
        assert len(z["bits_offsets"]) == len(lib) + 1


def test_load_rejects_other_files(tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, format=np.array("msgpt-known-structures"), format_version=np.array(1))
    with pytest.raises(LibraryError, match="not a structure library index"):
        StructureLibrary.load(other)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(LibraryError, match="cannot be read as a structure library index"):
        StructureLibrary.load(junk)


def test_record_of_a_row_out_of_range(lib):
    with pytest.raises(IndexError):
        lib.record(len(lib))
