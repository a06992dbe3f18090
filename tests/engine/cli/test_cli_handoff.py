"""`msgpt predict` on hand-off files (#60): feature IDs end to end, abundances from the quant table, and a per-feature
table that joins back to the quant table by ID with no row lost. The model is the tiny test bundle; nothing depends on
what it happens to generate (only on which features got rows and what the feature itself says)."""

import csv
import importlib.util
from pathlib import Path

import pytest
from synthetic_run import write_shifted_run

import engine.cli.predict as cli
from engine.files.feature_table import (
    COLUMNS,
    FeatureRow,
    rows_from_candidate_csv,
    write_feature_table,
)

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("write_handoff_files", ROOT / "scripts" / "write_handoff_files.py")
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)
FAST = ["--groups", "2", "--pool-size", "4", "-q", "--no-libraries", "--precision", "fp32"]


@pytest.fixture(scope="module")
def handoff(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    run = write_shifted_run(folder / "run.mzML", 0.0)
    return run, writer.write_all(run, folder / "out")


def read_table(path: Path, delimiter: str = "\t") -> list[dict]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter=delimiter))


def read_candidates(path: Path) -> list[dict]:
    return list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("# ")))


@pytest.mark.parametrize("kind", ["feature_mgf", "mzmine_sirius", "msp", "sirius_ms"])
def test_feature_ids_travel_end_to_end_and_the_table_joins_the_quant_table(handoff, tmp_path, tiny_bundle_dir, capsys,
                                                                         kind):
    _, paths = handoff
    out, table = tmp_path / "out.csv", tmp_path / "features.tsv"
    rc = cli.main(["predict", str(paths[kind]), "-o", str(out), "--model", str(tiny_bundle_dir), "--quant",
                   str(paths["quant"]), "--feature-table", str(table), *FAST])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "6 features written to" in err
    rows = read_table(table)
    quant = read_table(paths["quant"], ",")
    ids = [r["feature_id"] for r in rows]
    expected = [q["row ID"] for q in quant] if kind != "msp" else [str(int(q["row ID"]) - 1) for q in quant]
    assert ids == expected  # one row per feature, the tool's IDs, in file order; none lost
    assert {r["spectrum_id"] for r in read_candidates(out)} <= set(ids)  # the candidate CSV keeps the same IDs
    for r in rows:
        assert r["source_file"] == paths[kind].name and r["status"] in ("annotated", "no candidates")
        assert float(r["mz"]) > 0 and float(r["rt_s"]) == pytest.approx(60.0 * float(r["rt_min"]), abs=0.01)
    if kind != "msp":  # the quant table's row IDs are these IDs: joined by ID, abundance as in the table
        for r, q in zip(rows, quant):
            assert float(r["abundance"]) == float(r["abundance:run.mzML"]) == float(q["run.mzML Peak area"])
        by_id = {r["feature_id"]: float(r["abundance"]) for r in rows}  # the candidate CSV carries it too
        assert all(float(c["abundance"]) == by_id[c["spectrum_id"]] for c in read_candidates(out))
    annotated = [r for r in rows if r["status"] == "annotated"]
    assert annotated and all(r["smiles"] and r["inchikey"] and r["formula"] and r["identification_level"]
                             for r in annotated)


def test_pandas_join_loses_no_quant_row(handoff, tmp_path, tiny_bundle_dir, capsys):
    pd = pytest.importorskip("pandas")
    _, paths = handoff
    table = tmp_path / "features.csv"
    assert cli.main(["predict", str(paths["feature_mgf"]), "-o", str(tmp_path / "o.csv"), "--model",
                     str(tiny_bundle_dir), "--feature-table", str(table), *FAST]) == 0
    quant = pd.read_csv(paths["quant"])
    ours = pd.read_csv(table, dtype={"feature_id": str})
    joined = quant.assign(key=quant["row ID"].astype(str)).merge(ours, left_on="key", right_on="feature_id",
                                                                 how="left", validate="one_to_one")
    assert len(joined) == len(quant) == 6 and joined["feature_id"].notna().all()
    # the quant table beside the MGF (<name>_quant.csv) was used without --quant
    assert (joined["abundance"] == joined["run.mzML Peak area"]).all()


def test_gnps_style_names_the_columns_as_a_gnps_library_result(handoff, tmp_path, tiny_bundle_dir, capsys):
    _, paths = handoff
    table = tmp_path / "gnps.tsv"
    assert cli.main(["predict", str(paths["feature_mgf"]), "-o", str(tmp_path / "o.csv"), "--model",
                     str(tiny_bundle_dir), "--feature-table", str(table), "--feature-table-style", "gnps", *FAST]) == 0
    rows = read_table(table)
    assert [r["#Scan#"] for r in rows] == [str(k) for k in range(1, 7)]
    assert {"SpectrumFile", "CompoundName", "Smiles", "InChIKey", "MQScore", "SpecMZ", "Charge", "LibraryName"} <= set(rows[0])


def test_a_quant_table_joins_an_mzml_run_by_mz_and_rt(handoff, tmp_path, tiny_bundle_dir, capsys):
    run, paths = handoff
    table = tmp_path / "features.tsv"
    assert cli.main(["predict", str(run), "-o", str(tmp_path / "o.csv"), "--model", str(tiny_bundle_dir), "--quant",
                     str(paths["quant"]), "--feature-table", str(table), *FAST]) == 0
    rows = read_table(table)
    assert len(rows) == 6 and all(r["feature_id"].startswith("F000") for r in rows)  # MS-GPT's own IDs
    assert all(float(r["abundance"]) > 0 for r in rows)  # each found its quant row by m/z and RT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--feature-table", "features.xlsx"], "use a .tsv or .csv file name"),
        (["--quant", "missing.csv"], "no such quantification table"),
    ],
)
def test_bad_handoff_options_give_one_line_before_the_model_loads(handoff, tmp_path, capsys, args, message):
    _, paths = handoff
    rc = cli.main(["predict", str(paths["feature_mgf"]), "-o", str(tmp_path / "o.csv"), "--model",
                   str(tmp_path / "no-model"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_rows_from_a_candidate_csv_and_writing_both_formats(tmp_path):
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("# model: x\nspectrum_id,rank,feature_rank,smiles,inchikey,formula,adduct,precursor_mz,"
                        "retention_time_s,compound_name,identification_level,spectrum_confidence,score,origin\n"
                        "7,1,2,CCO,LFQSCWFLJHTTHZ-UHFFFAOYSA-N,C2H6O,[M+H]+,47.04914,12.00,,3,0.1,-3.0,de_novo\n"
                        "7,2,1,OCC#C,TVDSBUOJIPERQY-UHFFFAOYSA-N,C3H4O,[M+H]+,57.03349,12.00,,3,0.2,-2.0,de_novo\n",
                        encoding="utf-8")
    rows = rows_from_candidate_csv(csv_path)
    assert list(rows) == ["7"] and rows["7"].smiles == "OCC#C" and rows["7"].n_candidates == 2  # '#' in SMILES kept
    out = tmp_path / "t.csv"
    row = FeatureRow("7", "a.mgf", 47.049, 12.0, abundance=5.0, samples={"s1": 5.0, "s2": 1.0})
    assert write_feature_table(out, [row]) == 1
    got = read_table(out, ",")
    assert list(got[0]) == [*COLUMNS, "abundance:s1", "abundance:s2"] and got[0]["rt_min"] == "0.2000"


def test_mzmine_style_keeps_the_annotated_rows_under_mzmines_column_names(tmp_path):
    out = tmp_path / "db.csv"
    rows = [FeatureRow("1", "a.mgf", 195.0877, 60.0, ion_type="[M+H]+", formula="C8H10N4O2",
                       smiles="Cn1cnc2c1c(=O)n(C)c(=O)n2C", inchikey="RYYVLZVUVIJVGH-UHFFFAOYSA-N", status="annotated"),
            FeatureRow("2", "a.mgf", 200.0, 90.0, status="no candidates")]
    assert write_feature_table(out, rows, style="mzmine") == 1  # the row without an answer is left out
    got = read_table(out, ",")
    assert [r["internal_id"] for r in got] == ["1"]
    assert (got[0]["mz"], got[0]["rt"], got[0]["adduct"], got[0]["inchi_key"]) == (
        "195.08770", "1.0000", "[M+H]+", "RYYVLZVUVIJVGH-UHFFFAOYSA-N")


def test_a_resumed_run_writes_every_feature_with_the_earlier_answers(handoff, tmp_path, tiny_bundle_dir, monkeypatch,
                                                                    capsys):
    from engine.files import export

    _, paths = handoff
    args = ["--model", str(tiny_bundle_dir), "--formulas", "1", *FAST]
    reference = tmp_path / "reference.tsv"
    assert cli.main(["predict", str(paths["feature_mgf"]), "-o", str(tmp_path / "ref.csv"), *args,
                     "--feature-table", str(reference)]) == 0
    real, calls = export.CandidateWriter.write, {"n": 0}

    def write(self, result, **kwargs):  # Ctrl+C while the third result is written
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real(self, result, **kwargs)

    out, table = tmp_path / "out.csv", tmp_path / "features.tsv"
    monkeypatch.setattr(export.CandidateWriter, "write", write)
    assert cli.main(["predict", str(paths["feature_mgf"]), "-o", str(out), *args, "--feature-table", str(table)]) == 130
    assert not table.exists()  # an interrupted run writes no feature table
    monkeypatch.undo()
    assert cli.main(["predict", str(paths["feature_mgf"]), "-o", str(out), *args, "--resume",
                     "--feature-table", str(table)]) == 0
    mine, theirs = read_table(table), read_table(reference)
    assert [r["feature_id"] for r in mine] == [r["feature_id"] for r in theirs] == [str(k) for k in range(1, 7)]
    for a, b in zip(mine, theirs):  # the earlier features' answers come from OUTPUT, their abundance from the table
        assert (a["smiles"], a["status"], a["abundance"]) == (b["smiles"], b["status"], b["abundance"])
