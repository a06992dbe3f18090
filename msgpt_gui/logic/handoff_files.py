"""The app's reading of hand-off files (#60): MZmine's SIRIUS export, GNPS-FBMN MGF (with its ``_quant.csv``
beside it), MS-DIAL MSP and SIRIUS ``.ms`` listed one row per feature (:mod:`engine.spectra.handoff`), in batches
that :func:`msgpt_gui.logic.jobs.load_file` hands on as it lists other files (this module does not import it: no
import circle); a quantification table attached to the listed rows (File ▸ Add Quantification Table); and the rows
of File ▸ Export Feature Table. No Qt here."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

from engine.errors import MsgptError
from engine.progress import CancelFn, check_cancel
from engine.spectra.features import FeatureConfig
from engine.spectra.handoff import (
    ABUNDANCE_KEY,
    QuantTable,
    iter_handoff_features,
    quant_metadata,
)
from engine.spectra.run_features import RunCounts


def handoff_batches(path: str, kind: str, summary, cancel: CancelFn | None = None, batch: int = 500,
                    interval_s: float = 0.15, features: FeatureConfig | None = None) -> Iterator[tuple]:
    """The file's features (and skipped records) in batches (tuples), counted into ``summary`` (a
    :class:`~msgpt_gui.logic.jobs.FileSummary`, :meth:`~msgpt_gui.logic.jobs.FileSummary.listed`). A file that
    breaks off mid-way gives what was read before, then raises."""
    counts = RunCounts()
    items: list = []
    last = time.perf_counter()
    try:
        for item in iter_handoff_features(path, kind, features or FeatureConfig(), counts):
            check_cancel(cancel)
            items.append(item)
            summary.listed(item)
            if len(items) >= batch or time.perf_counter() - last >= interval_s:
                yield tuple(items)
                items, last = [], time.perf_counter()
    except MsgptError:
        if items:
            yield tuple(items)
        raise
    summary.survey_scans = counts.n_survey
    if items:
        yield tuple(items)


def entry_feature_rows(entries) -> list:
    """One :class:`~engine.files.feature_table.FeatureRow` per listed entry (File ▸ Export Feature Table): its
    feature (or record), its complete results (best formula first), ``not run`` or the reason it was skipped."""
    from engine.files.feature_table import feature_row

    rows = []
    for e in entries:
        item = e.feature if e.feature is not None else (e.spectrum if e.spectrum is not None else e.skipped)
        rows.append(feature_row(item, e.results(), e.source))
    return rows


def attach_quant_to_entries(entries, table: QuantTable, config: FeatureConfig | None = None) -> int:
    """Give every listed entry its row of ``table`` (by ID, else m/z and RT: :meth:`QuantTable.row_for`); its spectrum,
    the spectrum as read and its feature get the abundance in their metadata. Returns how many rows were matched."""
    config = config or FeatureConfig()
    matched = 0
    for e in entries:
        if e.spectrum is None:
            continue
        row, how = table.row_for(e, config.mz_tol_ppm, config.mz_tol_da, config.rt_gap_s)
        if row is None:
            continue
        matched += 1
        extra = quant_metadata(table, row, how)
        e.spectrum = dataclasses.replace(e.spectrum, metadata={**e.spectrum.metadata, **extra})
        if e.original is not None:
            e.original = dataclasses.replace(e.original, metadata={**e.original.metadata, **extra})
        if e.feature is not None:
            spectrum = dataclasses.replace(e.feature.spectrum, metadata={**e.feature.spectrum.metadata, **extra})
            e.feature = dataclasses.replace(e.feature, spectrum=spectrum)
    return matched


def has_abundance(entries) -> bool:
    return any(e.spectrum is not None and ABUNDANCE_KEY in e.spectrum.metadata for e in entries)


def abundance_cell(entry, sort: bool):
    """The spectra list's Abundance cell: the largest sample's (``sort``: the number, -1 for none)."""
    a = entry.abundance
    return (-1.0 if a is None else a) if sort else ("" if a is None else f"{a:.4g}")


def abundance_tip(entry) -> str:
    """Its tooltip: where the abundance comes from and each sample's (the first 20)."""
    lines = [f"{name}: {value:.6g}" for name, value in list(entry.abundance_samples.items())[:20]]
    source = entry.spectrum.metadata.get("abundance_source", "") if entry.spectrum is not None else ""
    return "\n".join(["Largest abundance over the samples" + (f" ({source})" if source else ""), *lines])
