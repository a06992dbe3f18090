"""`msgpt predict` on a run with adduct partners: the group's lead is elucidated once and every member shows its
answer, with a ``compound_group`` column and the member's ion type (issue #56, item 2).

The run is tests/synthetic_run.py's adduct run (caffeine [M+H]+ and [M+Na]+ co-eluting, and three ions that are not
partners); the model is the tiny test bundle; what the CLI hands to the model is captured.
"""

import csv
import io
from pathlib import Path

import pytest
from synthetic_run import CAFFEINE, ion_mz, write_adduct_run

import engine.cli.predict as cli

FAST = ["--groups", "2", "--pool-size", "4", "-q", "--no-libraries", "--formulas", "2"]


@pytest.fixture
def run(tmp_path) -> Path:
    return write_adduct_run(tmp_path / "adducts.mzML")


def read_rows(path: Path) -> list[dict]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def ids_at(rows, mz):
    return {r["spectrum_id"] for r in rows if abs(float(r["precursor_mz"]) - mz) < 0.002}


def test_the_sodium_member_shows_the_protonated_members_answer(run, tmp_path, tiny_bundle_dir, captured, capsys):
    out = tmp_path / "out.csv"
    rc = cli.main(["predict", str(run), "-o", str(out), "--model", str(tiny_bundle_dir), *FAST])
    err = capsys.readouterr().err
    assert rc == 0, err
    rows = read_rows(out)
    (h_id,) = ids_at(rows, ion_mz(CAFFEINE, "[M+H]+"))
    na_ids = {i for i in ids_at(rows, ion_mz(CAFFEINE, "[M+Na]+")) if "rt60" in i}
    (na_id,) = na_ids
    # the group's lead alone went to the model, with the group's formula ranking
    elucidated = {s.id for s in captured}
    assert h_id in elucidated and na_id not in elucidated
    lead_runs = [s for s in captured if s.id == h_id]
    assert lead_runs[0].formula == CAFFEINE and lead_runs[0].adduct == "[M+H]+"
    assert lead_runs[0].metadata["compound_group"] == "G0001"
    h_rows = [r for r in rows if r["spectrum_id"] == h_id]
    na_rows = [r for r in rows if r["spectrum_id"] == na_id]
    assert [r["smiles"] for r in na_rows] == [r["smiles"] for r in h_rows] and na_rows
    assert {r["compound_group"] for r in h_rows + na_rows} == {"G0001"}
    assert {r["adduct"] for r in na_rows} == {"[M+Na]+"} and {r["adduct"] for r in h_rows} == {"[M+H]+"}
    assert na_rows[0]["formula"] == CAFFEINE and na_rows[0]["feature_rank"] == "1"
    # the others are solved alone, outside any group
    others = [r for r in rows if r["spectrum_id"] not in (h_id, na_id)]
    assert others and {r["compound_group"] for r in others} == {""}
    assert "1 compound groups of 2 features" in err


def test_without_adduct_groups_every_feature_is_solved_alone(run, tmp_path, tiny_bundle_dir, captured, capsys):
    out = tmp_path / "out.csv"
    rc = cli.main(["predict", str(run), "-o", str(out), "--model", str(tiny_bundle_dir), *FAST, "--no-adduct-groups"])
    assert rc == 0, capsys.readouterr().err
    rows = read_rows(out)
    assert {r["compound_group"] for r in rows} == {""}
    na_id = next(i for i in ids_at(rows, ion_mz(CAFFEINE, "[M+Na]+")) if "rt60" in i)
    assert na_id in {s.id for s in captured}  # the sodium adduct elucidated for itself
