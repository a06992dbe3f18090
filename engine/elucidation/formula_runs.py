"""Which formula runs a spectrum of unknown formula gets, and which of them draw de novo samples (issue #58).

A spectrum without a formula is run for its best ``k`` formula candidates (``msgpt predict --formulas``, the app's
Run), and the feature ranks their candidates together with the formula's log-probability as a term
(:func:`engine.insight.identification.feature_ranks`, 16 nats per unit of log P). A structure of a formula of
probability 0.01 next to one of 0.95 starts 73 nats behind: its de novo samples almost never reach the top ten, yet
they cost as much decoder time as the likely formula's. The **run budget** therefore samples a formula candidate only
when it is the best one or its probability reaches ``min_probability``; the others are still *run*, for the library
structures of their formula alone (:meth:`~engine.elucidation.pipeline.SpectrumSession.rank_known`, with their own
probability in the feature ranking), so a suspect or a library structure of an unlikely formula is never lost; a
formula no library holds a structure of is left out. :data:`MIN_SAMPLED_PROBABILITY` was chosen on FOLD=val
(docs/evidence/formula_run_budget.md). A sampled formula below the best draws its share of the samples,
``ceil(N × P / P(best))`` per query group and at least one (:func:`sample_share`, :func:`run_params`; the same Top-1
and Top-10 on FOLD=val with 18% fewer samples). A formula the user asks for by name (the app's Formulas tab,
``--formula``) is always sampled in full.

Imports the formula tables and the library look-ups (where they are used); used by ``msgpt predict`` and the app's
Run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rest is imported where it is used: ``msgpt predict --help`` reads the constant below
    from engine.formulas.candidates import FormulaTable

#: A formula candidate below this probability draws no samples when a likelier one is run (its library structures
#: are still ranked); chosen on FOLD=val by training/studies/feature_formula_weight.py budget
#: (docs/evidence/formula_run_budget.md).
MIN_SAMPLED_PROBABILITY = 0.05

#: ``formula_run_share`` (metadata) of a sampled formula candidate below the best: its probability over the best's.
SHARE_KEY = "formula_run_share"

#: ``formula_run`` of a formula candidate run for the library structures of its formula alone.
LIBRARY_ONLY = "library structures only"


def draws_samples(spectrum) -> bool:
    """False for a run that ranks library structures alone: the mass track, or a formula candidate the budget did
    not sample."""
    from engine.elucidation.libraries import MASS_TRACK

    md = spectrum.metadata
    return md.get("formula_source") != MASS_TRACK and md.get("formula_run") != LIBRARY_ONLY


def sampled(position: int, probability: float, min_probability: float) -> bool:
    """Does the formula candidate at ``position`` (0: the best runnable one) with ``probability`` draw samples?"""
    return position == 0 or probability >= min_probability


def sample_share(position: int, probability: float, best: float) -> float:
    """The share of the samples a sampled formula candidate at ``position`` draws: all (1) for the best, else its
    probability over the best's (at most 1)."""
    if position == 0 or not best > 0:
        return 1.0
    return min(1.0, max(0.0, probability / best))


def run_params(spectrum, params):
    """``params`` for a formula run of ``spectrum``: a sampled run below the best (``formula_run_share`` < 1, standard
    effort) draws ``ceil(N × share)`` samples per query group, at least one; deep search and every other run keep
    ``params``."""
    share = spectrum.metadata.get(SHARE_KEY)
    if share in (None, "") or params.effort != "standard":
        return params
    n = max(1, math.ceil(params.samples_per_group * float(share) - 1e-9))
    return params if n >= params.samples_per_group else dataclasses.replace(params, samples_per_group=n)


def formula_run_spectra(spectrum, table: FormulaTable, k: int, runnable_adducts: Sequence[str],
                        libraries: Sequence = (), min_probability: float = MIN_SAMPLED_PROBABILITY,
                        proportional: bool = True) -> list[tuple]:
    """``(formula candidate, spectrum)`` pairs: copies of ``spectrum`` for its best ``k`` runnable formula candidates
    (``runnable_adducts``: the ion types the model runs, ``ModelBundle.runnable_adducts``), each with its formula, ion
    type, rank and probability noted; one
    below ``min_probability`` (not the best) is marked :data:`LIBRARY_ONLY` (``formula_run``, with a note in its
    warnings) and kept only when ``libraries`` hold a structure of its formula, or a reference spectrum of one
    matched the spectrum. ``min_probability=0`` samples every one. With ``proportional``, a sampled candidate below the
    best notes its :func:`sample_share` (``formula_run_share``, and a warning saying so), which :func:`run_params`
    turns into its samples per query group."""
    from engine.formulas.candidates import with_formula_candidate
    from engine.spectra.spectrum import with_warning

    out = []
    runnable = table.runnable(k, runnable_adducts)
    best = runnable[0].probability if runnable else 0.0
    for position, candidate in enumerate(runnable):
        run = with_formula_candidate(spectrum, candidate, table.elements)
        if sampled(position, candidate.probability, min_probability):
            share = sample_share(position, candidate.probability, best) if proportional else 1.0
            if share < 1.0:
                note = (f"formula {candidate.formula} {candidate.ion_type} (P = {candidate.probability:.3f}, the best "
                        f"{best:.3f}) drew P/P(best) = {share:.0%} of each query group's samples, rounded up (at least "
                        "one): a less likely formula's samples seldom reach the feature's top ten")
                run = with_warning(dataclasses.replace(run, metadata={**run.metadata, SHARE_KEY: round(share, 4)}),
                                   note)
            out.append((candidate, run))
            continue
        if not _libraries_hold(libraries, run):
            continue
        note = (f"formula {candidate.formula} {candidate.ion_type} (P = {candidate.probability:.3f} < "
                f"{min_probability:g}) was not sampled: only the library structures of its formula were ranked")
        out.append((candidate, with_warning(dataclasses.replace(run, metadata={**run.metadata,
                                                                              "formula_run": LIBRARY_ONLY}), note)))
    return out


def _libraries_hold(libraries: Sequence, spectrum) -> bool:
    from engine.chem.formula import normalize_formula
    from engine.elucidation.libraries import identified_formulas, library_structures, search_spectrum

    if not libraries:
        return False
    if library_structures(libraries, spectrum.formula, spectrum.adduct):
        return True
    formula = normalize_formula(spectrum.formula)
    return any(normalize_formula(f) == formula for f, _ in identified_formulas(search_spectrum(libraries, spectrum)))
