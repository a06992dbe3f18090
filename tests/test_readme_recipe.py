"""The documented recipe for reading an exported CSV works on a real export, nitriles included.

The recipe is read from docs/cli.md itself (the ```python block after the ``<!-- recipe: read-export``
marker), so the test runs what users copy. ``pandas.read_csv(path, comment="#")`` would cut
``N#Cc1ccc(O)cc1`` at its ``#``; the recipe skips only the leading ``#`` provenance lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
MARKER = "<!-- recipe: read-export"


def recipe_code() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, f"{DOC} should hold exactly one {MARKER!r} marker"
    after = text.split(MARKER, 1)[1]
    m = re.match(r"[^\n]*-->\n```python\n(.*?)\n```", after, flags=re.S)
    assert m, f"no ```python block right after the marker in {DOC}"
    return m.group(1)


def write_export(path: Path) -> dict[str, str]:
    """An export as msgpt predict writes it: two candidates of one spectrum, the first a nitrile."""
    from engine.chem import molecules as chem
    from engine.elucidation.pipeline import QueryParams, SpectrumResult
    from engine.elucidation.ranking import Candidate
    from engine.files.export import CandidateWriter
    from engine.spectra.spectrum import Spectrum

    def candidate(rank: int, smiles: str, count: int) -> Candidate:
        mol = chem.mol_from_smiles(smiles)
        return Candidate(rank=rank, smiles=chem.canonical_smiles(mol), inchikey=chem.inchikey(mol),
                         inchikey14=chem.inchikey14(mol), formula=chem.mol_formula(mol), count=count,
                         frequency=count / 100, posterior_similarity=0.5, bits=chem.morgan_bits(mol),
                         fingerprint_score=-50.0 - rank, score=-50.0 - rank)

    spectrum = Spectrum(id="007", precursor_mz=120.0444, adduct="[M+H]+", formula="C7H5NO",
                        mz=[65.0386, 92.0495, 120.0444], intensity=[10.0, 100.0, 50.0])
    result = SpectrumResult(
        spectrum=spectrum, params=QueryParams(),
        candidates=(candidate(1, "N#Cc1ccc(O)cc1", 7), candidate(2, "Oc1ccccc1C#N", 3)),
        n_samples=100, n_valid=60, n_formula_consistent=50, thresholds=np.array([0.3, 0.1]),
        n_distinct_queries=2, mean_query_bits=40.0, fidelity=None, reference_inchikey14=None,
        reference_rank=None, new_samples=100, seconds=1.0, confidence=0.25,
    )
    info = {"msgpt_version": "0.1.0", "model": "msgpt-test", "model_checksum": "abc123",
            "parameters": "κ 0.95-1.50, M=20, N=5", "seed": "0", "created": "2025-01-01T00:00:00+00:00"}
    with CandidateWriter(path, info) as writer:
        writer.write(result)
    return info


def test_documented_recipe_reads_an_export_with_nitriles(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    code = recipe_code()
    name = re.search(r"read_export\(\"([^\"]+)\"\)", code).group(1)
    monkeypatch.chdir(tmp_path)
    info = write_export(tmp_path / name)
    assert (tmp_path / name).read_text(encoding="utf-8").startswith("# ")  # the leading provenance lines

    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    got_info, table = namespace["info"], namespace["candidates"]

    assert got_info == info
    assert list(table["smiles"]) == ["N#Cc1ccc(O)cc1", "N#Cc1ccccc1O"]
    assert list(table["formula"]) == ["C7H5NO", "C7H5NO"]
    assert list(table["rank"]) == [1, 2]
    assert list(table["spectrum_id"]) == ["007", "007"]
    assert list(table["count"]) == [7, 3]
