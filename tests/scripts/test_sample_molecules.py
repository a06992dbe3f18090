"""scripts/sample_molecules.py: seeded corpus subsets, with every row of chosen sources kept."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sample_molecules.py"
_spec = importlib.util.spec_from_file_location("sample_molecules", _SCRIPT)
sample_molecules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sample_molecules)

HEADER = "smiles\tinchikey14\tsource"


def _write(path: Path, rows: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n".join([HEADER, *rows]) + "\n")
    return path


def _read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read().splitlines()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    rows = []
    for i in range(40):
        source = "mibig;chemxlstm_chembl31" if i % 10 == 0 else ("npclassifier" if i % 10 == 1 else "graph2graph_zinc")
        rows.append(f"C{'C' * i}O\tKEY{i:010d}\t{source}")
    return _write(tmp_path / "molecules.tsv.gz", rows)


def test_rows_are_a_seeded_subset_in_file_order(corpus: Path, tmp_path: Path) -> None:
    out_a, out_b = tmp_path / "a.tsv.gz", tmp_path / "b.tsv.gz"
    assert sample_molecules.main([str(corpus), str(out_a), "--rows", "12", "--seed", "3"]) == 0
    sample_molecules.main([str(corpus), str(out_b), "--rows", "12", "--seed", "3"])
    rows = _read(out_a)
    assert rows[0] == HEADER and len(rows) == 13
    assert rows == _read(out_b)
    body = _read(corpus)[1:]
    positions = [body.index(r) for r in rows[1:]]
    assert positions == sorted(positions)


def test_keep_sources_keeps_every_row_of_those_sources(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "bio.tsv.gz"
    sample_molecules.main([str(corpus), str(out), "--rows", "15", "--keep-sources", "mibig, npclassifier"])
    rows = _read(out)[1:]
    assert len(rows) == 15
    kept = [r for r in _read(corpus)[1:] if {"mibig", "npclassifier"} & set(r.split("\t")[2].split(";"))]
    assert len(kept) == 8 and set(kept) <= set(rows)  # a row held by a kept and another source counts as kept
    assert sum("graph2graph_zinc" in r for r in rows) == 7


def test_keep_sources_larger_than_rows_names_the_fix(corpus: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        sample_molecules.main(
            [str(corpus), str(tmp_path / "x.tsv.gz"), "--rows", "5", "--keep-sources", "mibig,npclassifier"]
        )
    assert "raise --rows to at least" in capsys.readouterr().err


def test_unknown_keep_source_is_an_error(corpus: Path, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        sample_molecules.main([str(corpus), str(tmp_path / "x.tsv.gz"), "--rows", "5", "--keep-sources", "mibg"])
    assert "mibg" in capsys.readouterr().err
