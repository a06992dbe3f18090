"""Formula candidates in the app, without Qt: which spectra can take them, a spectrum's table, the spectra Run
elucidates for the best ``k``, and one ranked list of the candidates of several formulas.

A spectrum without a molecular formula (every precursor feature of an LC-MS run) is not stuck: its formula
and ion type candidates are ranked (:func:`engine.formulas.candidates.rank_formulas`, with the feature's MS1
evidence: isotope pattern and co-detected adducts), and Run elucidates the best ``k`` (default 3) of the ion
types the model supports, as ``msgpt predict`` does. The candidates of the ``k`` formulas form one list whose
ranks run on formula by formula (the rows the CLI writes); each carries its formula's rank and score
(``formula_rank`` / ``formula_score``, in exports too). Picking a formula in the table sets it on the
spectrum as a typed one would be.

The table is made for the spectrum without its formula and with the ion type the file gave (if any)
(:func:`formula_base`), so that picking one formula leaves the others on offer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from engine.elucidation.formula_runs import MIN_SAMPLED_PROBABILITY, formula_run_spectra
from engine.elucidation.pipeline import SpectrumResult
from engine.errors import ConfigError, SpectrumError
from engine.formulas.candidates import (
    FormulaCandidate,
    FormulaConfig,
    FormulaTable,
    default_ion_types,
    rank_formulas,
)
from engine.formulas.recalibration import Recalibration, parse_setting, recalibrate_run
from engine.model.ion_mapping import mapping_for
from engine.progress import check_cancel
from engine.spectra.spectrum import Spectrum, precursor_precision_da

DEFAULT_TOP_K = 3
MAX_TOP_K = 20
CONFIG = FormulaConfig()  # the defaults; the app's settings make the current one (current_config)
DEFAULT_ELEMENTS = "".join(CONFIG.decomposition.elements)
RECALIBRATION_MODES = ("auto", "off", "fixed")


@dataclass(frozen=True)
class RecalibrationChoice:
    """The app's m/z recalibration setting: ``auto`` (measured per run from its features), ``off``, or ``fixed``
    (``offset_ppm`` at m/z 500 and ``slope_ppm`` per 1000 m/z, for every spectrum), as ``msgpt predict
    --recalibrate auto|off|OFFSET[,SLOPE]``. Raises ConfigError naming the bad value."""

    mode: str = "auto"
    offset_ppm: float = 0.0
    slope_ppm: float = 0.0

    def __post_init__(self):
        if self.mode not in RECALIBRATION_MODES:
            raise ConfigError(f"m/z recalibration `mode` {self.mode!r}: choose one of {', '.join(RECALIBRATION_MODES)}.")
        self.setting()  # a fixed correction out of range says so now

    def text(self) -> str:
        """The setting as ``msgpt predict --recalibrate`` takes it."""
        return self.mode if self.mode != "fixed" else f"{self.offset_ppm:g},{self.slope_ppm:g}"

    def setting(self) -> Recalibration | None:
        """None for auto (measured per run), else the Recalibration used for every spectrum."""
        return parse_setting(self.text())


AUTO_RECALIBRATION = RecalibrationChoice()  # the default
_current = {"config": CONFIG, "key": (CONFIG.ppm, DEFAULT_ELEMENTS, None), "recalibration": AUTO_RECALIBRATION}


def make_config(ppm: float, elements: str, ion_types: str) -> FormulaConfig:
    """The formula settings of the app as a FormulaConfig: ``ppm`` precursor tolerance, ``elements`` like
    ``CHNOPSFClBrISi`` (C and H always), ``ion_types`` space- or comma-separated (empty: the defaults).
    Raises ConfigError naming the bad value."""
    import re

    from engine.formulas.decompose import DecompositionConfig

    symbols = re.findall(r"[A-Z][a-z]?", elements)
    if "".join(symbols) != elements.replace(" ", "").replace(",", ""):
        raise ConfigError(f"Elements {elements!r}: write element symbols one after another, e.g. CHNOPSFClBr.")
    ions = tuple(i for i in re.split(r"[\s,;]+", ion_types.strip()) if i)
    return FormulaConfig(ppm=float(ppm), ion_types=ions or None,
                         decomposition=DecompositionConfig(elements=tuple(dict.fromkeys(["C", "H", *symbols]))))


def set_current_config(ppm: float, elements: str, ion_types: str,
                       recalibration: RecalibrationChoice = AUTO_RECALIBRATION) -> FormulaConfig:
    """Make ``make_config(...)`` the one tables are ranked with, and ``recalibration`` the m/z recalibration of
    their spectra (tables ranked before no longer count)."""
    config = make_config(ppm, elements, ion_types)
    _current["config"], _current["key"] = config, (config.ppm, "".join(config.decomposition.elements), config.ion_types)
    _current["recalibration"] = recalibration
    return config


def current_recalibration() -> RecalibrationChoice:
    return _current["recalibration"]


def current_config() -> FormulaConfig:
    return _current["config"]
#: Column titles of the score terms (engine.formulas.candidates.TERMS) and what each says.
TERM_COLUMNS = (
    ("mass", "Mass", ("precursor mass error: −w·(ppm/10 · 3/σ)², σ the scatter assumed (3 ppm, or the run's "
                      "measured scatter after recalibration)")),
    ("prior", "Prior", "how ordinary the formula is in the molecule corpus (element pattern and counts, "
                       "H/C, N/C, O/C, RDBE/C, corpus structures with this formula)"),
    ("fragments", "Fragments", "fragment intensity explained by subformulas, against the share shifted peaks "
                               "would get by chance"),
    ("ion_type", "Ion", "how common the ion type is"),
    ("isotopes", "Isotopes", "MS1 isotope pattern of the precursor against the formula's (0 without a survey scan)"),
    ("adducts", "Adducts", "other ion types of the same molecule seen in the survey scan"),
)
SOURCE_KEYS = ("formula_rank", "formula_score", "formula_source", "formula_run")  # what formula_spectra notes


def formula_base(spectrum: Spectrum, original: Spectrum | None = None) -> Spectrum:
    """The spectrum whose table lists the formulas to pick from: ``spectrum`` with the formula of ``original``
    (the record as read; None for a record that was not a spectrum) instead of one picked or typed since, and
    without the notes of a picked one. Its ion type is the one set when no formula is (the user may set only
    the ion type), else the record's. A record without a formula gets every formula of its mass; one with a
    formula but no ion type, the ion types of that formula."""
    metadata = {k: v for k, v in spectrum.metadata.items() if k not in SOURCE_KEYS}
    formula = original.formula if original is not None else None
    adduct = spectrum.adduct if spectrum.formula is None else (original.adduct if original is not None else None)
    if spectrum.formula == formula and spectrum.adduct == adduct and metadata == spectrum.metadata:
        return spectrum
    return dataclasses.replace(spectrum, metadata=metadata).with_adduct(adduct, check=False).with_formula(
        formula, check=False)


def table_key(base: Spectrum) -> tuple:
    """What a table depends on, besides the peaks and MS1 evidence of the entry (which never change)."""
    return base.precursor_mz, base.formula, base.adduct, base.polarity, _current["key"], _current["recalibration"].text()


def readiness(spectrum: Spectrum, supported_adducts: Sequence[str] | None = None) -> str | None:
    """None when formula candidates can be ranked for ``spectrum`` and some are of an ion type the model supports
    (``supported_adducts``; None: not judged); else why not, in a few words a user can act on."""
    precision = precursor_precision_da(spectrum)
    if precision > current_config().tolerance(spectrum.precursor_mz):
        return (f"the precursor m/z {spectrum.precursor_mz:g} is written to {precision:g} Da, too coarse for formula "
                "candidates")
    try:
        ions = default_ion_types(spectrum, current_config())
    except SpectrumError as e:
        return str(e)
    if supported_adducts is not None and not set(ions) & set(supported_adducts):
        return (f"formula candidates would be {', '.join(ions)}, which this model does not support "
                f"({', '.join(supported_adducts)})")
    return None


_recalibrations: dict[tuple, Recalibration] = {}  # (source file, settings) -> the run's m/z recalibration


def run_recalibration(source: str, run_items: Sequence[tuple] | None = None,
                      cancel: Callable[[], bool] | None = None) -> Recalibration | None:
    """The m/z recalibration of the run ``source`` under the current settings: the one set (off or fixed: the same
    for every spectrum), else (auto) measured once from ``run_items`` (its features' ``(spectrum, ms1)``) and kept;
    None when auto, not measured and no items are given."""
    setting = _current["recalibration"].setting()
    if setting is not None:
        return setting
    key = (source, _current["key"])
    if key not in _recalibrations and run_items is not None:
        _recalibrations[key] = recalibrate_run(run_items, config=current_config(), cancel=cancel)
    return _recalibrations.get(key)


def rank_job(spectrum: Spectrum, ms1=None, cancel: Callable[[], bool] | None = None, run_items=None
             ) -> Generator[None, None, FormulaTable]:
    """The formula table of ``spectrum`` (and its MS1 evidence), as a job: cancellable, no progress events.

    A spectrum of an LC-MS run is ranked with the run's m/z recalibration (``msgpt predict``'s default):
    measured from ``run_items`` (the run's features as ``(spectrum, ms1)``) the first time, then kept per
    file; or the one the settings fix (off, or a correction for every spectrum). The table's first note says
    what it is."""
    check_cancel(cancel)
    config = current_config()
    recal = run_recalibration(spectrum.source, run_items, cancel) if spectrum.source else None
    if recal is not None and recal.applied:
        spectrum, ms1, config = recal.apply(spectrum), recal.apply_ms1(ms1), recal.formula_config(config)
    table = rank_formulas(spectrum, ms1=ms1, config=config, cancel=cancel)
    if recal is not None:
        table = dataclasses.replace(table, notes=(recal.describe(), *table.notes))
    check_cancel(cancel)
    return table
    yield  # a generator, so GeneratorWorker runs it like every other job


def rank_group_job(members: Sequence, runnable: Sequence[str] | None = None, cancel: Callable[[], bool] | None = None,
                   run_items=None) -> Generator[None, None, object]:
    """The decision of a compound group (:func:`engine.formulas.groups.decide_group`, as ``msgpt predict`` makes it)
    from its member features, as a job: each member with the run's m/z recalibration (see :func:`rank_job`), one
    neutral formula ranked over all of them, the member elucidated. Returns the
    :class:`~engine.formulas.groups.GroupDecision`; its joint table's first note says the recalibration."""
    from engine.formulas.groups import decide_group
    from engine.spectra.adduct_groups import with_partners

    check_cancel(cancel)
    config = current_config()
    source = members[0].spectrum.source
    recal = run_recalibration(source, run_items, cancel) if source else None
    if recal is not None and recal.applied:
        members = [dataclasses.replace(f, spectrum=recal.apply(f.spectrum), ms1=recal.apply_ms1(f.ms1))
                   for f in members]
        members = [dataclasses.replace(f, precursor_mz=f.spectrum.precursor_mz) for f in members]
        config = recal.formula_config(config)
    members = with_partners(members)
    decision = decide_group(members[0].group_members, config, runnable=runnable, supported_adducts=runnable,
                            cancel=cancel)
    if recal is not None:
        decision = dataclasses.replace(decision, joint=dataclasses.replace(
            decision.joint, notes=(recal.describe(), *decision.joint.notes)))
    check_cancel(cancel)
    return decision
    yield  # a generator, so GeneratorWorker runs it like every other job


def formula_spectra(base: Spectrum, table: FormulaTable, supported_adducts: Sequence[str] | None,
                    k: int, libraries: Sequence = (), min_probability: float = MIN_SAMPLED_PROBABILITY
                    ) -> list[tuple[FormulaCandidate, Spectrum]]:
    """The spectra Run elucidates for the best ``k`` formulas: ``base`` with each candidate's formula and ion type,
    its rank and score noted (exports write them); those below ``min_probability`` (but the best) rank the
    ``libraries``' structures of their formula alone, and a sampled one below the best draws its share of the samples,
    as in ``msgpt predict`` (:func:`engine.elucidation.formula_runs.formula_run_spectra`). ``min_probability`` 0 (the
    chemist asked for the best k by name) samples every one in full."""
    return formula_run_spectra(base, table, k, supported_adducts, libraries, min_probability,
                               proportional=min_probability > 0)


def library_run_label(spectrum: Spectrum) -> str:
    """How a formula run the libraries added (no formula candidate of its own) is named: its formula, ion type and
    where the formula came from (a spectral identification, or a library structure of the precursor's mass)."""
    return f"{spectrum.formula} {spectrum.adduct} (from {spectrum.metadata.get('formula_source') or 'a library'})"


def no_candidate_reason(table: FormulaTable, supported_adducts: Sequence[str] | None) -> str:
    """Why ``table`` gives Run nothing to elucidate (:meth:`FormulaTable.why_none_runnable`) and what to do."""
    return f"{table.why_none_runnable(supported_adducts or (), current_config().ppm)}: type the formula and adduct"


def formula_note(spectrum: Spectrum) -> tuple[str, str]:
    """(rank, score) of the formula candidate ``spectrum`` was given ('' when its formula was not picked from a
    table)."""
    return spectrum.metadata.get("formula_rank", ""), spectrum.metadata.get("formula_score", "")


def combine_results(results: Sequence[SpectrumResult]) -> SpectrumResult | None:
    """The candidates of several formulas of one spectrum as one result, in the feature's ranking
    (:func:`engine.insight.identification.feature_ranks`, what ``msgpt predict`` writes as ``feature_rank``):
    identifications, then suspects, then every candidate by score and its formula's probability; each candidate's
    ``rank`` is its feature rank. Counts add up; the result holding rank 1 stands for the rest (spectrum,
    parameters, posterior, confidence), so the summary, the spectra list's Confidence and Level and the table's
    rank 1 describe the same candidate."""
    from engine.elucidation.ranking import reference_rank
    from engine.insight.identification import feature_ranks

    results = [r for r in results if r is not None]
    if not results:
        return None
    if len(results) == 1:
        return results[0]
    ranked = sorted(((k, i, c) for i, (r, ks) in enumerate(zip(results, feature_ranks(results), strict=True))
                     for k, c in zip(ks, r.candidates, strict=True)), key=lambda t: t[0])
    candidates = tuple(dataclasses.replace(c, rank=k) for k, _, c in ranked)
    best = results[ranked[0][1]] if ranked else results[0]
    return dataclasses.replace(
        best, candidates=candidates, n_samples=sum(r.n_samples for r in results),
        n_valid=sum(r.n_valid for r in results), n_formula_consistent=sum(r.n_formula_consistent for r in results),
        new_samples=sum(r.new_samples for r in results), seconds=sum(r.seconds for r in results),
        partial=any(r.partial for r in results),
        reference_rank=reference_rank(candidates, best.reference_inchikey14),
    )


def format_probability(p: float) -> str:
    """A formula's probability in two decimals; one under 0.01 as ``<0.01`` (not a ``0.00`` that reads as none; the
    spectra keep it rounded, so a stored 0 is one too small to write)."""
    return f"{p:.2f}" if p >= 0.01 else "<0.01"


def run_label(run, short: bool = False) -> str:
    """How a formula run is named in the formula selector: ``#1 C10H12N3O3PS2 [M+H]+ (P 0.62)`` for a formula
    candidate (rank, formula, ion type, probability), or the library's formula run (:func:`library_run_label`);
    ``short``: without the probability."""
    c = getattr(run, "candidate", None)
    s = run.spectrum
    if c is None:
        return library_run_label(s)
    return f"#{c.rank} {s.formula} {s.adduct}" + ("" if short else f" (P {format_probability(c.probability)})")


def formula_scores(results: Sequence[SpectrumResult]) -> dict[str, tuple[str, str]]:
    """Molecular formula -> (formula rank, formula score) of the results' spectra that were given a candidate."""
    out = {}
    for r in results:
        if r is not None and r.spectrum.formula and any(formula_note(r.spectrum)):
            out.setdefault(r.spectrum.formula, formula_note(r.spectrum))
    return out


def mapped_ion_note(table: FormulaTable | None, runnable: Sequence[str] | None, native: Sequence[str] | None,
                    k: int = DEFAULT_TOP_K) -> str:
    """How the model runs the ion types of the ``k`` formulas Run takes from ``table`` that it does not run natively
    (``native``; ``runnable``: natively or by a mapping, :mod:`engine.model.ion_mapping`), e.g. "[M+NH4]+ runs as
    [M+H]+ after NH3 loss (mapping)"; '' when all are native or no model is loaded."""
    if table is None or runnable is None or native is None:
        return ""
    notes = []
    for ion in dict.fromkeys(c.ion_type for c in table.runnable(k, runnable)):
        m = mapping_for(ion, native)
        if m is not None:
            notes.append(f"{ion} runs as {m.target}{'' if m.what.startswith(',') else ' '}{m.what} (mapping)")
    return "; ".join(notes)


def unsupported_ion_note(table: FormulaTable | None, supported_adducts: Sequence[str] | None,
                         k: int = DEFAULT_TOP_K) -> str:
    """A short note when the best formula candidate of ``table`` is of an ion type the model cannot run, so that Run
    took other ion types (``k``: how many formulas it takes), e.g. "best ion type [M+NH4]+ is not supported by this
    model: ran [M+H]+"; '' when there is nothing to say (the best one runs, or no model is loaded)."""
    if table is None or not table.candidates or supported_adducts is None:
        return ""
    best = min(table.candidates, key=lambda c: c.rank)
    if best.ion_type in supported_adducts:
        return ""
    ran = list(dict.fromkeys(c.ion_type for c in table.runnable(k, supported_adducts)))
    what = f"ran {', '.join(ran)}" if ran else f"it supports {', '.join(supported_adducts)}"
    return f"best ion type {best.ion_type} is not supported by this model: {what}"
