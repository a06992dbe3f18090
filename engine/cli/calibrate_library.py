"""``msgpt calibrate-library``: recalibrate when a hit of your own spectral library is an identification, and how sure
it is, on your own labelled spectra.

The shipped rule and confidence of identifications (``resources/spectral_library/confidence.json``,
:mod:`engine.spectral_library.identity`) were fitted on MassBank spectra against a MassBank library. A library of
another instrument type, or of one compound class, may match differently. Given the library and spectra whose
structure you know (an MGF or MSP with ``INCHIKEY=`` or ``SMILES=``; often the library itself: each spectrum is then
searched without its own record), this command searches each labelled spectrum in the library, and maps the shipped
model's logistic probability to how often the rank-1 reference was right on *your* spectra (an isotonic map, as the
shipped model's, :func:`engine.model.confidence.isotonic_knots`). The identification rule keeps its least probability
(so an identification still means "right at least that often", now measured on your data) and floor. It writes
``<library>.confidence.json`` beside the library, which every search of that library then uses (the app and
``msgpt predict --spectral-library``; :meth:`engine.spectral_library.search.SpectralMatches.threshold_for`), and prints
what the shipped and the recalibrated rule identify on your spectra.

The feature weights stay the shipped ones: a few hundred labelled spectra cannot refit seven weights reliably, but
they can say how often a given score is right in your setting.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Generator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.cli.common import err
from engine.errors import ConfigError, MsgptError
from engine.model.confidence import ConfidenceModel, identity_model, isotonic_knots
from engine.progress import CancelFn, check_cancel, run_to_end
from engine.spectral_library import load_spectral_library
from engine.spectral_library.identity import (
    confidence_path,
    identity_features,
    load_rule,
    user_calibration_path,
)
from engine.spectral_library.read import ReadReport, iter_references
from engine.spectral_library.search import AnswerThreshold, SearchParams, search_peaks

#: Labelled spectra with a rank-1 hit a recalibration needs at least.
MIN_LABELLED = 10
#: Identity search as the pipeline runs it (engine.elucidation.libraries.SPECTRAL_HITS hits).
PARAMS = SearchParams(mode="identity", top_k=5)


@dataclass(frozen=True)
class Outcome:
    """One labelled spectrum's rank-1 hit: its features, whether it is the spectrum's structure."""

    accession: str
    features: dict
    right: bool


@dataclass(frozen=True)
class CalibrationProgress:
    done: int
    text: str


def labelled_outcomes(library, labelled: str | Path, cancel: CancelFn | None = None,
                      ) -> Generator[CalibrationProgress, None, tuple[list[Outcome], ReadReport, int]]:
    """Search each labelled spectrum of ``labelled`` in ``library`` (rows with the spectrum's own accession left out);
    returns the outcomes, the read report and how many spectra had no structure."""
    report = ReadReport(str(labelled))
    own = {acc: i for i, acc in enumerate(library.columns["accession"]) if acc}
    out, unlabelled = [], 0
    for n, ref in enumerate(iter_references(labelled, report), 1):
        check_cancel(cancel)
        if not ref.inchikey14:
            unlabelled += 1
            continue
        exclude = {library.name: np.array([own[ref.accession]])} if ref.accession in own else None
        matches = search_peaks(library, ref.precursor_mz, ref.mz, ref.intensity, ref.polarity or None, PARAMS,
                               exclude)
        features = identity_features(matches)
        if features is not None:
            out.append(Outcome(ref.accession, features, matches.hits[0].reference.inchikey14 == ref.inchikey14))
        if n % 100 == 0:
            yield CalibrationProgress(n, f"{n} labelled spectra searched")
    return out, report, unlabelled


def recalibrated(base: ConfidenceModel, outcomes: list[Outcome], min_count: int = 20) -> ConfidenceModel:
    """``base`` with its isotonic map refitted from its logistic probability to the outcomes."""
    plain = replace(base, recalibration=())
    probs = [plain.probability(o.features) for o in outcomes]
    knots = isotonic_knots(probs, [o.right for o in outcomes], min_count=min_count)
    return replace(base, recalibration=knots)


def identified(model: ConfidenceModel, rule: AnswerThreshold, outcomes: list[Outcome]) -> tuple[int, int]:
    """(right, wrong) identifications among the outcomes under ``model``'s probability and ``rule``'s floor and cut."""
    right = wrong = 0
    cut = rule.rule.min_probability if rule.rule is not None else 0.0
    for o in outcomes:
        f = o.features
        ok = (f["similarity"] >= rule.min_similarity and round(np.exp(f["log_matched"])) >= rule.min_matched_peaks
              and model.probability(f) >= cut)
        right += ok and o.right
        wrong += ok and not o.right
    return right, wrong


def calibrate_library(library_path: str | Path, labelled: str | Path, out: str | Path | None = None,
                      min_count: int = 20, cancel: CancelFn | None = None) -> Generator[CalibrationProgress, None, dict]:
    """Recalibrate the shipped confidence of identifications on ``labelled`` spectra searched in the library at
    ``library_path``; write it (default: beside the library) and return a summary."""
    base_path = confidence_path()
    base = identity_model(base_path)
    shipped = load_rule(base_path)
    if base is None or shipped is None:
        raise ConfigError(f"{base_path}: the shipped confidence of identifications is missing; reinstall MS-GPT "
                          "Desktop.")
    library = load_spectral_library(library_path)
    outcomes, report, unlabelled = yield from labelled_outcomes(library, labelled, cancel)
    if len(outcomes) < MIN_LABELLED:
        raise ConfigError(f"{labelled}: {len(outcomes)} labelled spectra have a hit in {library_path} "
                          f"({report.used} read, {unlabelled} without INCHIKEY= or SMILES=); at least {MIN_LABELLED} "
                          "are needed: add spectra whose structure you know, with their InChIKey or SMILES.")
    model = recalibrated(base, outcomes, min_count)
    floor = AnswerThreshold(shipped.min_similarity, shipped.min_matched_peaks, rule=shipped)
    before, after = identified(base, floor, outcomes), identified(model, floor, outcomes)
    n_right = sum(o.right for o in outcomes)
    summary = {"library": str(library_path), "labelled": str(labelled), "searched": len(outcomes), "right": n_right,
               "unlabelled": unlabelled, "min_probability": shipped.min_probability,
               "identified_shipped": {"right": before[0], "wrong": before[1]},
               "identified_recalibrated": {"right": after[0], "wrong": after[1]}}
    d = replace(model, meta={"what": "the shipped confidence of identifications, its isotonic map refitted on the "
                                     "user's labelled spectra (msgpt calibrate-library)", "user_calibration": summary}
                ).to_json()
    d["identification_rule"] = {"min_probability": shipped.min_probability, "min_similarity": shipped.min_similarity,
                                "min_matched_peaks": shipped.min_matched_peaks, "measured": summary}
    target = Path(out) if out else user_calibration_path(library_path)
    try:
        target.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write {target} ({e.strerror or e}); choose another file with -o.") from e
    summary["written"] = str(target)
    return summary


def add_calibrate_library_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate-library",
        help="recalibrate the identification rule and confidence of your spectral library on your labelled spectra",
        description="Search spectra whose structure you know (MGF/MSP with INCHIKEY= or SMILES=; the library itself "
        "works: each is searched without its own record) in your spectral library, refit how often a hit of a given "
        "score is right there, and write LIBRARY.confidence.json beside the library: every later search of it "
        "uses that calibration (the identification rule's probability and the confidence shown).",
    )
    p.add_argument("library", metavar="LIBRARY", help="your spectral library (MGF or MSP)")
    p.add_argument("--labelled", required=True, metavar="FILE",
                   help="spectra with their structure (INCHIKEY= or SMILES=), MGF or MSP; may be the library itself")
    p.add_argument("-o", "--output", metavar="JSON", help="where to write (default: LIBRARY.confidence.json)")
    p.add_argument("--min-count", type=int, default=20, metavar="N",
                   help="least labelled spectra behind each knot of the map (default 20)")
    p.set_defaults(func=cmd_calibrate_library)


def cmd_calibrate_library(args: argparse.Namespace) -> int:
    if args.min_count < 1:
        raise ConfigError(f"--min-count {args.min_count} must be at least 1 (e.g. 20).")
    try:
        s = run_to_end(calibrate_library(args.library, args.labelled, args.output, args.min_count))
    except MsgptError:
        raise
    except OSError as e:
        err(f"error: {e}")
        return 2
    print(f"{s['searched']} labelled spectra with a hit ({s['right']} right at rank 1); identifications at "
          f"P >= {s['min_probability']:g}: shipped calibration {s['identified_shipped']['right']} right / "
          f"{s['identified_shipped']['wrong']} wrong, recalibrated {s['identified_recalibrated']['right']} right / "
          f"{s['identified_recalibrated']['wrong']} wrong. Wrote {s['written']}.")
    return 0
