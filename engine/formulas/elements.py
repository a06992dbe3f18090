"""Which elements a precursor holds, as its isotope pattern and its fragments show them: notes of a formula table.

A chemist reading a formula table wants to know what the data say about the heteroatoms before trusting a rank:
a Cl3 pattern, an HCl loss, a PO3- ion. :func:`engine.formulas.candidates.rank_formulas` notes what this module
finds (``FormulaTable.elements`` and ``notes``); the app shows them above the table, where a user can narrow the
element set in the Formulas tab's settings.

* **Isotopes** (:func:`isotope_elements`): the survey scan's M..M+5 pattern (M+4 read where two 37Cl or 81Br put
  it, :func:`engine.spectra.isotopes.isotope_window`; the note gives M+2 and, from 2% of M, M+4) is scored against every formula
  within tolerance at once (:func:`engine.spectra.isotopes.isotope_scores_many`, the same score as the table's
  isotope term, one detector factor on all ratios); Cl or Br is *present* when the best formula holding one
  beats the best without by :data:`ISOTOPE_MARGIN` (a 37Cl / 81Br M+2 nothing else explains), *absent* the
  other way round.
* **Fragments** (:func:`fragment_elements`): diagnostic ions and neutral losses from the precursor that only an
  element explains within the fragment tolerance (an HCl, HBr, HF, H3PO4, SO2 or SO3 loss; Cl-, Br-, I-, PO3-,
  H2PO4- or HSO4- in negative mode), in a peak of at least :data:`MIN_DIAGNOSTIC_SHARE` of the base peak.

The evidence does not change the ranking. Letting it choose which formulas are scored in full (the best holding
a shown element added to the shortlist, or formulas against it removed) was measured on simulated runs of
FOLD=train spectra (``benchmarks/formula_benchmark_runs.py``) and cost 1-2 of 150 spectra at Top-1: the learned
terms already weigh the same isotopes and fragments, and every formula added is one more that can outscore the
truth (docs/evaluation.md).

Imports engine.chem and engine.spectra only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.chem.formula import ELECTRON_MASS, ELEMENT_INDEX, element_mass
from engine.spectra.isotopes import ObservedPattern

#: A diagnostic peak counts from this share of the base peak's intensity.
MIN_DIAGNOSTIC_SHARE = 0.05
#: Log-likelihood margin (e^6: about 400 to 1) by which the best formula with an element must beat the best
#: without it (or the other way round) before the isotope pattern is said to show it.
ISOTOPE_MARGIN = 6.0
HALOGENS = ("Cl", "Br")
#: The note names M+4 from this share of M (Cl2 10%, Cl3 32%, Br2 97%; a CHNO molecule's M+4 is below 0.5%).
MIN_NOTED_M4 = 0.02
MIN_FRAGMENT_MZ = 40.0  # a loss leaving less than this is not looked for (below most scan ranges)


def _mass(counts: Mapping[str, int]) -> float:
    return sum(element_mass(e) * n for e, n in counts.items())


#: (element, polarity or None for both, "loss" from the precursor or "ion", formula, name)
DIAGNOSTICS: tuple[tuple[str, str | None, str, dict[str, int], str], ...] = (
    ("Cl", None, "loss", {"H": 1, "Cl": 1}, "HCl loss"),
    ("Br", None, "loss", {"H": 1, "Br": 1}, "HBr loss"),
    ("Br", None, "loss", {"Br": 1}, "Br loss"),
    ("F", None, "loss", {"H": 1, "F": 1}, "HF loss"),
    ("P", None, "loss", {"H": 3, "P": 1, "O": 4}, "H3PO4 loss"),
    ("S", None, "loss", {"S": 1, "O": 2}, "SO2 loss"),
    ("S", None, "loss", {"S": 1, "O": 3}, "SO3 loss"),
    ("Cl", "negative", "ion", {"Cl": 1}, "Cl- ion"),
    ("Br", "negative", "ion", {"Br": 1}, "Br- ion"),
    ("I", "negative", "ion", {"I": 1}, "I- ion"),
    ("P", "negative", "ion", {"P": 1, "O": 3}, "PO3- ion"),
    ("P", "negative", "ion", {"H": 2, "P": 1, "O": 4}, "H2PO4- ion"),
    ("S", "negative", "ion", {"H": 1, "S": 1, "O": 4}, "HSO4- ion"),
)


@dataclass(frozen=True)
class ElementEvidence:
    """What a precursor's isotope pattern and fragments show about its elements.

    ``present``: element groups shown present (each a tuple: at least one of them, e.g. ``("Cl", "Br")``);
    ``absent``: elements shown absent; ``notes``: the same in words, with the peaks that show it.
    """

    present: tuple[tuple[str, ...], ...] = ()
    absent: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def holds(self, vectors: np.ndarray, group: Sequence[str]) -> np.ndarray:
        """(N,) whether each formula vector holds at least one element of ``group``."""
        cols = [ELEMENT_INDEX[e] for e in group]
        return (np.asarray(vectors)[:, cols] > 0).any(axis=1)


def isotope_elements(vectors: np.ndarray, scores: np.ndarray, observed: ObservedPattern,
                     margin: float = ISOTOPE_MARGIN) -> ElementEvidence:
    """Cl or Br present or absent, when the best formula of one side beats the other's best by ``margin``."""
    vectors = np.asarray(vectors)
    if not len(vectors):
        return ElementEvidence()
    cols = [ELEMENT_INDEX[e] for e in HALOGENS]
    with_h = (vectors[:, cols] > 0).any(axis=1)
    if with_h.all() or not with_h.any():
        return ElementEvidence()
    best_with, best_without = float(scores[with_h].max()), float(scores[~with_h].max())
    m2 = f"M+2 at {observed.ratios[2]:.0%} of M" if len(observed.ratios) > 2 else "no M+2"
    if len(observed.ratios) > 4 and observed.ratios[4] >= MIN_NOTED_M4:  # Cl2, Cl3, Br2: M+4 tells them apart
        m2 = f"M+2 at {observed.ratios[2]:.0%}, M+4 at {observed.ratios[4]:.0%} of M"
    if best_with - best_without >= margin:
        return ElementEvidence(present=(HALOGENS,), notes=(f"isotopes: Cl or Br present ({m2})",))
    if best_without - best_with >= margin:
        return ElementEvidence(absent=HALOGENS, notes=(f"isotopes: no Cl or Br ({m2})",))
    return ElementEvidence()


# --- diagnostic fragments -----------------------------------------------------------------------------------------


def fragment_elements(mz: np.ndarray, intensity: np.ndarray, precursor_mz: float, polarity: str,
                      tol_ppm: float, tol_da: float, min_share: float = MIN_DIAGNOSTIC_SHARE) -> ElementEvidence:
    """Elements shown by diagnostic fragment ions and neutral losses from the precursor (module notes)."""
    mz, intensity = np.asarray(mz, dtype=np.float64), np.asarray(intensity, dtype=np.float64)
    if not mz.size or not intensity.max() > 0:
        return ElementEvidence()
    strong = intensity >= min_share * intensity.max()
    mz, intensity = mz[strong], intensity[strong]
    shown: dict[str, list[str]] = {}
    sign = 1 if polarity == "positive" else -1
    for element, only, kind, counts, name in DIAGNOSTICS:
        if only is not None and only != polarity:
            continue
        if kind == "loss":
            target = precursor_mz - _mass(counts)
            if target < MIN_FRAGMENT_MZ:
                continue
        else:
            target = _mass(counts) - sign * ELECTRON_MASS  # an anion carries an electron
        tol = max(tol_ppm * 1e-6 * target, tol_da)
        hit = np.abs(mz - target) <= tol
        if hit.any():
            j = int(np.flatnonzero(hit)[np.argmax(intensity[hit])])
            shown.setdefault(element, []).append(f"{name} at m/z {mz[j]:.4f}")
    present = tuple((e,) for e in shown)
    notes = tuple(f"fragments: {e} ({'; '.join(why)})" for e, why in shown.items())
    return ElementEvidence(present=present, notes=notes)


def combine(*evidence: ElementEvidence) -> ElementEvidence:
    """One record of several (present groups and absent elements joined, notes in order)."""
    present = tuple(dict.fromkeys(g for e in evidence for g in e.present))
    absent = tuple(dict.fromkeys(a for e in evidence for a in e.absent))
    notes = tuple(n for e in evidence for n in e.notes)
    return ElementEvidence(present=present, absent=absent, notes=notes)
