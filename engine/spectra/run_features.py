"""The features of one input file, as they stream: an MGF library record by record (each its own feature), an mzML
run read whole, its MS2 scans made into features (:mod:`engine.spectra.features`) and joined into compound groups
(:func:`engine.spectra.adduct_groups.group_features`), and what the file held counted (:class:`RunCounts`).
Imports the reading (:mod:`engine.spectra.io`), the features and the adduct groups of this package; nothing of the
model, the app or Qt."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from engine.errors import InputFileError
from engine.spectra.adduct_groups import group_features
from engine.spectra.features import Feature, FeatureConfig, build_features, library_feature, single_scan_feature
from engine.spectra.spectrum import SkippedRecord, Spectrum, SurveyScan

MAX_SURVEY_BEHIND = 50  # survey scans an ungrouped MS2 scan may find its precursor in (the latest ones)


@dataclass
class RunCounts:
    """What a file held: MS2 spectra read and skipped, MS1 survey scans, features made, compound groups found."""

    source: str = ""
    n_ms2: int = 0
    n_skipped: int = 0
    n_survey: int = 0
    n_features: int = 0
    n_groups: int = 0
    n_grouped: int = 0  # features in a compound group
    peak_width_s: float | None = None  # the run's peak width the groups were found with

    def describe(self) -> str:
        survey = f", {self.n_survey} MS1 survey scans (precursor evidence)" if self.n_survey else ""
        groups = (f"; {self.n_groups} compound groups of {self.n_grouped} features (adduct partners, peak width "
                  f"{self.peak_width_s:.1f} s)" if self.n_groups else "")
        return (f"{self.source}: {self.n_ms2} MS2 spectra ({self.n_skipped} skipped){survey} -> "
                f"{self.n_features} precursor features{groups}")


def iter_features(
    path: str | os.PathLike, config: FeatureConfig = FeatureConfig(), counts: RunCounts | None = None, **io_kwargs
) -> Iterator[Feature | SkippedRecord]:
    """The features of one file, then nothing else; ``counts`` (optional) is filled in as it goes.

    MGF with ``grouping="auto"`` streams: each record is its own feature (:func:`library_feature`).
    An mzML run (or ``grouping="always"``) is read whole, MS1 survey scans included, then grouped;
    skipped records come first, then the features in order; a run that breaks off mid-way
    (``InputFileError``) gives the features of the scans read before, then raises. With
    ``grouping="never"`` an mzML run streams too, each scan with the survey scans read before it.
    ``io_kwargs`` go to :func:`engine.spectra.io.iter_spectra`.
    """
    from engine.spectra.io import detect_format, iter_spectra

    counts = counts if counts is not None else RunCounts()
    counts.source = str(path)
    fmt = detect_format(path)
    if fmt == "mgf" and config.grouping in ("auto", "never"):
        for item in iter_spectra(path, **io_kwargs):
            if isinstance(item, SkippedRecord):
                counts.n_skipped += 1
                yield item
            else:
                counts.n_ms2 += 1
                counts.n_features += 1
                yield library_feature(item)
        return
    spectra: list[Spectrum] = []
    survey: list[SurveyScan] = []
    error: InputFileError | None = None
    try:
        for item in iter_spectra(path, survey_scans=True, **io_kwargs):
            if isinstance(item, SurveyScan):
                counts.n_survey += 1
                survey.append(item)
            elif isinstance(item, SkippedRecord):
                counts.n_skipped += 1
                yield item
            elif config.grouping == "never":  # streams: each scan with the survey scans read so far
                counts.n_ms2 += 1
                counts.n_features += 1
                yield single_scan_feature(item, survey[-MAX_SURVEY_BEHIND:], config)
            else:
                counts.n_ms2 += 1
                spectra.append(item)
    except InputFileError as e:  # a run cut off mid-way: the scans read before still count
        error = e
    features, grouping = group_features(build_features(spectra, survey, config), survey, config)
    counts.n_features += len(features)
    if grouping is not None:
        counts.n_groups = len(grouping.groups)
        counts.n_grouped = sum(len(g.members) for g in grouping.groups)
        counts.peak_width_s = grouping.peak_width_s
    yield from features
    if error is not None:
        raise error
