"""Reading structure library files (engine/library/read.py) and the rows the build skips, by line."""

from __future__ import annotations

import gzip

import pytest
from rdkit import Chem

from engine.errors import InputFileError
from engine.library import LibraryError, LibraryFile, build_library
from engine.progress import run_to_end

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"
ETHANOL_INCHI = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"
PUBCHEMLITE = (
    "Identifier,CompoundName,SMILES,InChI,InChIKey,MolecularFormula,MonoisotopicMass\n"
    f"11373,Mellein,{MELLEIN},,KWILGNNWGSNMPA-UHFFFAOYSA-N,C10H10O3,178.063\n"
    f'702,Ethanol,,"{ETHANOL_INCHI}",LFQSCWFLJHTTHZ-UHFFFAOYSA-N,C2H6O,46.042\n'
    "176,Acetic acid,CC(=O)O,,,C2H4O2,60.021\n"
)
NORMAN = (
    "Norman_SusDat_ID\tName\tSMILES\tStdInChI\tCAS_RN\tMonoiso_Mass\tsource\n"
    "NS00000001\tCaffeine\tCN1C=NC2=C1C(=O)N(C)C(=O)N2C\t\t58-08-2\t194.08\tNORMAN SusDat\n"
    f"NS00000002\tEthanol\t\t{ETHANOL_INCHI}\t64-17-5\t46.04\tNORMAN SusDat\n"
)


def rows(path):
    with LibraryFile(path) as f:
        return list(f)


def build(path, **kwargs):
    return run_to_end(build_library(path, **kwargs))


def test_pubchemlite_csv_keeps_names_identifiers_keys_and_falls_back_to_inchi(tmp_path):
    path = tmp_path / "PubChemLite_exposomics.csv"
    path.write_text(PUBCHEMLITE)
    got = rows(path)
    assert [(r.where, r.name, r.identifier, r.kind) for r in got] == [
        ("line 2", "Mellein", "11373", "smiles"), ("line 3", "Ethanol", "702", "inchi"),
        ("line 4", "Acetic acid", "176", "smiles")]
    assert got[0].text == MELLEIN and got[0].inchikey == "KWILGNNWGSNMPA-UHFFFAOYSA-N"
    assert got[1].text == ETHANOL_INCHI


def test_norman_tsv_keeps_susdat_id_cas_and_source(tmp_path):
    path = tmp_path / "susdat.tsv"
    path.write_text(NORMAN)
    got = rows(path)
    assert [(r.identifier, r.name, r.cas, r.source, r.kind) for r in got] == [
        ("NS00000001", "Caffeine", "58-08-2", "NORMAN SusDat", "smiles"),
        ("NS00000002", "Ethanol", "64-17-5", "NORMAN SusDat", "inchi")]
    lib = build(path)
    assert len(lib) == 2
    assert {lib.record(r).name for r in range(2)} == {"Caffeine", "Ethanol"}


def test_gzipped_csv_with_a_bom_and_comments(tmp_path):
    path = tmp_path / "list.csv.gz"
    path.write_bytes(gzip.compress(("\ufeff# exported today\n" + PUBCHEMLITE).encode("utf-8")))
    got = rows(path)
    assert [r.name for r in got] == ["Mellein", "Ethanol", "Acetic acid"]
    assert got[0].where == "line 3"


def test_sdf_records_keep_title_and_properties_and_report_broken_records(tmp_path):
    path = tmp_path / "lib.sdf"
    mol = Chem.MolFromSmiles(MELLEIN)
    mol.SetProp("_Name", "title of mellein")
    mol.SetProp("ID", "MB-1")
    mol.SetProp("CAS", "17397-85-2")
    plain = Chem.MolFromSmiles("CCO")
    plain.SetProp("_Name", "ethanol")
    with Chem.SDWriter(str(path)) as w:
        w.write(mol)
        w.write(plain)
    text = path.read_text()
    path.write_text(text + "broken\n  no atoms here\n\nM  END\n$$$$\n")
    got = rows(path)
    assert [(r.name, r.identifier, r.cas, r.kind) for r in got] == [
        ("title of mellein", "MB-1", "17397-85-2", "molfile"), ("ethanol", "", "", "molfile"),
        ("broken", "", "", "molfile")]
    second_start = text.splitlines().index("$$$$") + 2
    assert got[1].where == f"record 2 (line {second_start})"
    lib = build(path)
    assert len(lib) == 2 and lib.n_problems == 1
    assert lib.problems[0].startswith("record 3 (line ") and "molfile cannot be read" in lib.problems[0]


def test_sdf_name_property_wins_over_title(tmp_path):
    path = tmp_path / "lib.sdf"
    mol = Chem.MolFromSmiles("CCO")
    mol.SetProp("_Name", "x1")
    mol.SetProp("NAME", "ethanol")
    with Chem.SDWriter(str(path)) as w:
        w.write(mol)
    assert rows(path)[0].name == "ethanol"


def test_smi_lines_with_names_header_and_comments(tmp_path):
    path = tmp_path / "mine.smi"
    path.write_text(f"SMILES Name\n# mine\n{MELLEIN} mellein (R)\n\nCCO\n{ETHANOL_INCHI}\tethanol again\n")
    got = rows(path)
    assert [(r.where, r.text, r.name) for r in got] == [
        ("line 3", MELLEIN, "mellein (R)"), ("line 5", "CCO", ""), ("line 6", ETHANOL_INCHI, "ethanol again")]
    lib = build(path)
    assert len(lib) == 2  # the InChI of ethanol is a duplicate of CCO
    assert lib.info["n_duplicates"] == 1


def test_txt_with_a_tab_header_is_a_table(tmp_path):
    path = tmp_path / "export.txt"
    path.write_text(f"# comment\nName\tSMILES\nmellein\t{MELLEIN}\n")
    got = rows(path)
    assert [(r.where, r.name, r.text) for r in got] == [("line 3", "mellein", MELLEIN)]


def test_headerless_csv_is_structure_then_name(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text(f"{MELLEIN},mellein\nCCO,ethanol\n")
    assert [(r.where, r.text, r.name) for r in rows(path)] == [
        ("line 1", MELLEIN, "mellein"), ("line 2", "CCO", "ethanol")]


def test_bad_rows_are_skipped_and_named_by_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(f"Name,SMILES\ngood,{MELLEIN}\nbroken,C1CC\nempty,\nshort\nfine,CCO\n")
    lib = build(path)
    assert len(lib) == 2 and lib.n_rows == 5 and lib.n_problems == 3
    assert lib.problems == ("line 3: 'C1CC' is not a SMILES RDKit can read",
                            "line 4: no structure (the SMILES/InChI cell is empty, or the record has no molfile)",
                            "line 5: no structure (the SMILES/InChI cell is empty, or the record has no molfile)")


def test_only_the_first_problems_are_kept_with_a_count(tmp_path):
    path = tmp_path / "many.smi"
    path.write_text("CCO\n" + "nonsense(\n" * 30)
    lib = build(path, max_problems=5)
    assert lib.n_problems == 30 and len(lib.problems) == 5
    assert lib.problems[-1].startswith("line 6: ")


@pytest.mark.parametrize("name, content, match", [
    ("missing.csv", None, "no such file"),
    ("list.xlsx", b"PK\x03\x04", "Save it as CSV"),
    ("list.json", b"{}", "unknown structure library format '.json'"),
    ("cols.csv", b"Name,Formula\ncaffeine,C8H10N4O2\n", "no SMILES or InChI column .*'Name', 'Formula'"),
    ("fake.csv.gz", b"Name,SMILES\n", "not a gzip file"),
])
def test_unreadable_files_name_the_file_and_the_fix(tmp_path, name, content, match):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LibraryError, match=match) as e:
        rows(path)
    assert isinstance(e.value, InputFileError) and e.value.path == str(path)


def test_a_file_without_any_readable_structure_is_an_error(tmp_path):
    path = tmp_path / "junk.smi"
    path.write_text("xx(\nyy(\n")
    with pytest.raises(LibraryError, match=r"no structure RDKit can read in 2 rows \(line 1: 'xx\('"):
        build(path)
