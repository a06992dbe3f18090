"""Write the project file of the current format version that the tests keep reading in every later version.

    python scripts/build_project_fixture.py      # writes tests/data/project_v<FORMAT_VERSION>.msgpt

Run it once when a format version is new, and commit the file; never rewrite the file of an older
version (the script refuses): ``tests/test_project.py`` checks that each committed one still reads, with
what this script put in it. The content is made up (no model is needed): a spectrum with two
candidates, its posterior, thresholds, drawn samples and notes; one whose formula and ion type were set
by hand; a skipped record that kept its peaks; the selection, parameters, model and a source file.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.elucidation.pipeline import QueryParams, SpectrumResult  # noqa: E402
from engine.elucidation.ranking import Candidate  # noqa: E402
from engine.files.project import (  # noqa: E402
    FORMAT_VERSION,
    ModelRef,
    Project,
    ProjectEntry,
    Selection,
    SourceFile,
    save_project,
)
from engine.spectra.spectrum import SkippedRecord, Spectrum  # noqa: E402

MELLEIN = "CC1Cc2cccc(O)c2C(=O)O1"
METHOXYCINNAMIC = "COc1ccc(C=CC(=O)O)cc1"


def fixture_project() -> Project:
    peaks = dict(mz=[133.0648, 151.0754, 161.0597, 179.0703], intensity=[21905.3, 9239.9, 96508.4, 72563.9])
    mellein = Spectrum(id="mellein", precursor_mz=179.0703, adduct="[M+H]+", formula="C10H10O3", source="/data/fixture.mgf",
                       index=0, retention_time=312.0, metadata={"name": "Mellein", "collision_energy": "20"}, **peaks)
    as_read = Spectrum(id="no-formula", precursor_mz=179.0703, source="/data/fixture.mgf", index=1, **peaks)
    posterior = np.zeros(4096, dtype=np.float32)
    posterior[[1, 80, 650, 4000]] = [0.5, 0.75, 0.25, 0.125]
    params = QueryParams(kappa_min=1.0, kappa_max=1.25, groups=2, samples_per_group=3, seed=11, ranking="frequency",
                         decoding="free", use_adapter=False)
    candidates = (
        Candidate(rank=1, smiles=MELLEIN, inchikey="KWILGNNWGSNMPA-UHFFFAOYSA-N", inchikey14="KWILGNNWGSNMPA",
                  formula="C10H10O3", count=4, frequency=4 / 6, posterior_similarity=0.8,
                  bits=np.array([1, 80, 650, 4000]), fingerprint_score=-12.5, score=4.0),
        Candidate(rank=2, smiles=METHOXYCINNAMIC, inchikey="AFDXODALSZRGIH-UHFFFAOYSA-N", inchikey14="AFDXODALSZRGIH",
                  formula="C10H10O3", count=2, frequency=2 / 6, posterior_similarity=0.25,
                  bits=np.array([80, 1200]), fingerprint_score=-30.0, score=float("nan")),
    )
    result = SpectrumResult(spectrum=mellein, params=params, candidates=candidates, n_samples=6, n_valid=6,
                            n_formula_consistent=6, thresholds=np.array([0.5, 0.3]), n_distinct_queries=2,
                            mean_query_bits=3.0, fidelity=None, reference_inchikey14=None, reference_rank=None,
                            new_samples=6, seconds=0.5, posterior=posterior)
    skipped = SkippedRecord("/data/fixture.mgf", 2, "scan=3", "no precursor m/z", mz=np.array([50.0, 60.0]),
                            intensity=np.array([1.0, 2.0]), retention_time=30.0, polarity="positive")
    entries = [
        ProjectEntry(mellein, mellein, status="done", notes="Lactone; compare with the standard.", result=result,
                     model_checksum="0123456789abcdef" * 4,
                     samples=((0, 0, MELLEIN), (1, 0, MELLEIN))),
        ProjectEntry(dataclasses.replace(as_read, formula="C10H10O3", adduct="[M+H]+"), as_read, status="not run"),
        ProjectEntry(None, None, skipped=skipped, status="skipped", reason="no precursor m/z"),
    ]
    return Project(entries=entries, params=params,
                   model=ModelRef("fixture-model", "0123456789abcdef" * 4, "/models/fixture-model"),
                   files=[SourceFile("/data/fixture.mgf", 2048, "cd" * 32)],
                   selection=Selection(current=0, selected=(0, 1), candidate="KWILGNNWGSNMPA"),
                   saved_at="2025-01-01T00:00:00+00:00", saved_by="msgpt 0.1.0")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / f"project_v{FORMAT_VERSION}.msgpt")
    args = p.parse_args(argv)
    if args.out.exists():
        print(f"{args.out} exists: the file of a format version is written once and kept.", file=sys.stderr)
        return 1
    size = save_project(args.out, fixture_project())
    print(f"wrote {args.out} ({size} bytes, format version {FORMAT_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
