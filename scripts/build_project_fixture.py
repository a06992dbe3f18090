"""Write the project file of the current format version that the tests keep reading in every later version.

    python scripts/build_project_fixture.py      # writes tests/data/project_v<FORMAT_VERSION>.msgpt

Run it once when a format version is new, and commit the file; never rewrite the file of an older
version (the script refuses): ``tests/test_project.py`` checks that each committed one still reads, with
what this script put in it. The content is made up (no model is needed): a spectrum with two
candidates, its posterior, thresholds, drawn samples and notes; one whose formula and ion type were set
by hand; a skipped record that kept its peaks; the selection, parameters, model and a source file. Since format
2, also a precursor feature of an LC-MS run (two scans, one with notes; MS1 evidence) run for two formula candidates
(one with a result and samples, one failed), and the run's m/z recalibration.
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
    RunRecalibration,
    Selection,
    SourceFile,
    save_project,
)
from engine.formulas.candidates import FormulaCandidate  # noqa: E402
from engine.formulas.recalibration import Recalibration  # noqa: E402
from engine.spectra.features import Feature, MS1Evidence  # noqa: E402
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
    if FORMAT_VERSION >= 2:
        entries.append(feature_entry(params, candidates, posterior))
    return Project(entries=entries, params=params,
                   model=ModelRef("fixture-model", "0123456789abcdef" * 4, "/models/fixture-model"),
                   files=[SourceFile("/data/fixture.mgf", 2048, "cd" * 32)] + (
                       [SourceFile("/data/run.mzML", 4096, "ef" * 32)] if FORMAT_VERSION >= 2 else []),
                   recalibrations=[RunRecalibration("/data/run.mzML", Recalibration(
                       offset_ppm=4.5, slope_ppm=-1.5, scatter_ppm=1.75, n_features=6,
                       points_mz=np.array([150.25, 179.0703, 300.5]), points_ppm=np.array([4.25, 4.5, 4.0]),
                       points_precursor=np.array([False, True, True]), applied=True, mz_range=(150.25, 300.5)),
                       {"ppm": 10.0, "elements": "CHNOPSFClBrISi", "ion_types": None})] if FORMAT_VERSION >= 2 else [],
                   selection=Selection(current=0, selected=(0, 1), candidate="KWILGNNWGSNMPA"),
                   saved_at="2025-01-01T00:00:00+00:00", saved_by="msgpt 0.1.0")


def feature_entry(params, candidates, posterior) -> ProjectEntry:
    """A precursor feature of an LC-MS run, run for its two best formula candidates (format 2)."""
    scans = tuple(Spectrum(id=f"scan={i}", precursor_mz=179.0701 + 0.0001 * i, source="/data/run.mzML", index=i,
                           retention_time=60.0 + i, polarity="positive", charge=1,
                           metadata={"precursor_scan_id": f"scan={i - 1}"}, mz=[133.0648, 161.0597, 179.0703],
                           intensity=[10.0 * i, 100.0, 50.0]) for i in (4, 7))
    consensus = Spectrum(id="F0001_mz179.0703_rt64.5", precursor_mz=179.0703, source="/data/run.mzML", index=4,
                         retention_time=64.5, polarity="positive", charge=1,
                         metadata={"feature_id": "F0001_mz179.0703_rt64.5", "n_scans": "2"},
                         mz=[133.0648, 161.0597, 179.0703], intensity=[0.55, 1.0, 0.5])
    ms1 = MS1Evidence("scan=6", 64.5, 179.0703, 2.5e6, np.array([179.0703, 180.0737, 201.0522]),
                      np.array([2.5e6, 2.75e5, 1.25e5]), 2)
    feature = Feature("F0001_mz179.0703_rt64.5", 4, 179.0703, 64.0, 67.0, scans, consensus, ms1)
    runs = []
    for rank, (formula, status) in enumerate((("C10H10O3", "done"), ("C6H14O6", "failed")), start=1):
        picked = dataclasses.replace(consensus, formula=formula, adduct="[M+H]+",
                                     metadata={**consensus.metadata, "formula_rank": str(rank)})
        candidate = FormulaCandidate(rank=rank, formula=formula, ion_type="[M+H]+", neutral_mass=178.063,
                                     theoretical_mz=179.0703, ppm_error=0.5 * rank, rdbe=6.0 / rank,
                                     terms={"mass": -0.25, "prior": 1.5, "isotopes": 0.75}, score=2.0 / rank,
                                     probability=0.75 / rank, explained_intensity=0.5, n_explained=2, isomers=12,
                                     supported=True)
        result = None
        if status == "done":
            result = SpectrumResult(spectrum=picked, params=params, candidates=candidates, n_samples=6, n_valid=6,
                                    n_formula_consistent=6, thresholds=np.array([0.5, 0.3]), n_distinct_queries=2,
                                    mean_query_bits=3.0, fidelity=None, reference_inchikey14=None, reference_rank=None,
                                    new_samples=6, seconds=0.5, posterior=posterior)
        runs.append(ProjectEntry(picked, picked, status=status, reason="" if result else "no model for it",
                                 result=result, model_checksum="0123456789abcdef" * 4 if result else None,
                                 samples=((0, 0, MELLEIN),) if result else (), candidate=candidate))
    return ProjectEntry(consensus, consensus, status="done", feature=feature, formula_runs=runs,
                        scan_entries={1: ProjectEntry(scans[1], scans[1], notes="the later scan is cleaner")})


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
