"""Chemical mappings: an ion type the model does not run natively, run as the native ion type of the same molecule.

A bundle's encoder was trained on a few ion types (``ModelBundle.supported_adducts``: the shipped one on
``[M+H]+``, ``[M+Na]+``, ``[M-H]-``). A spectrum of another common electrospray ion type
(:data:`engine.chem.adducts.COMMON_ION_TYPES`) is turned here into the spectrum the model runs instead, by what its
chemistry says the ion becomes in the collision cell:

=================  ==============  =========================================================================
ion type           runs as         what changes
=================  ==============  =========================================================================
``[M+NH4]+``       ``[M+H]+``      precursor − NH3 (the ammonium adduct loses NH3 first); peaks above the new
                                   precursor and the NH4+ ion dropped
``[M-H2O+H]+``     ``[M+H]+``      precursor + H2O (the in-source water loss put back); fragments unchanged
``[M+K]+``         ``[M+H]+``      precursor − K + H; peaks above the new precursor and the K+ ion dropped
                                   (``[M+Na]+`` by exchange was measured too: :func:`potassium_as_sodium`)
``[M]+``           ``[M+H]+``      of ``M' = F − H`` (F: the cation's formula): same precursor m/z, same
                                   fragments; structures are still drawn for ``F`` (a cation's drawn formula
                                   drops its charge, :func:`engine.chem.molecules.mol_formula`), so library
                                   structures of the cation (suspects, reference spectra) join the ranking; the
                                   decoder itself rarely draws a cation (measured: docs/ion_types.md). Only an
                                   even-electron cation (``F`` with a half-integer RDBE); a radical cation
                                   ``M+•`` cannot be run
``[M+HCOO]-``      ``[M-H]-``      precursor − HCOOH; peaks above the new precursor and HCOO- dropped
``[M+CH3COO]-``    ``[M-H]-``      precursor − CH3COOH; peaks above the new precursor and CH3COO- dropped
``[M+Cl]-``        ``[M-H]-``      precursor − HCl; peaks above the new precursor and Cl- (both isotopes) dropped
``[M-H2O-H]-``     ``[M-H]-``      precursor + H2O; fragments unchanged
=================  ==============  =========================================================================

Why peaks above the new precursor go: an ``[M+H]+`` / ``[M-H]-`` spectrum has nothing heavier than its precursor,
and the adduct-keeping ions up there (the adduct precursor itself, ``S + NH4``, ``S + HCOO``) are not subformulas of
the mapped ion; the adduct's own small ion (NH4+, K+, HCOO-, CH3COO-, Cl-) says nothing about the molecule.
Peaks at or below the new precursor are kept as they are: they are the fragments of the molecule (the adduct's
fragments are those of the protonated / deprotonated molecule after the neutral loss).

:func:`map_spectrum` gives a :class:`MappedSpectrum`: the spectrum the model runs, the formula whose structures
are drawn, and a note for the user; the original spectrum (ion type, formula, precursor) stays what the user sees
(:class:`engine.elucidation.pipeline.SpectrumSession`). Measured in ``training/studies/ion_mapping.py``
(docs/ion_types.md).

Imports: engine.chem, engine.spectra and engine.errors only (pure functions; no model, no Qt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from engine.chem.adducts import (
    ELECTRON_MASS,
    neutral_mass_from_precursor,
    parse_adduct,
    precursor_mz_from_neutral,
)
from engine.chem.formula import element_mass, format_formula, parse_formula
from engine.errors import SpectrumError
from engine.spectra.spectrum import DEFAULT_TOL_DA, DEFAULT_TOL_PPM, Spectrum

#: peaks within this of a dropped ion's m/z (or above the new precursor by more than it) are matched
PEAK_TOL_PPM = DEFAULT_TOL_PPM
PEAK_TOL_DA = DEFAULT_TOL_DA


def _mass(counts: Mapping[str, int]) -> float:
    return float(sum(element_mass(e) * n for e, n in counts.items()))


def _ion_mz(counts: Mapping[str, int], charge: int) -> float:
    """m/z of a singly charged ion of element ``counts`` (electron added for an anion, removed for a cation)."""
    return _mass(counts) - charge * ELECTRON_MASS


NH4_ION = _ion_mz({"N": 1, "H": 4}, 1)
K_ION = _ion_mz({"K": 1}, 1)
FORMATE_ION = _ion_mz({"C": 1, "H": 1, "O": 2}, -1)
ACETATE_ION = _ion_mz({"C": 2, "H": 3, "O": 2}, -1)
CHLORIDE_IONS = (_ion_mz({"Cl": 1}, -1), _ion_mz({"Cl": 1}, -1) + 1.99704989)  # 35Cl-, 37Cl-


@dataclass(frozen=True)
class MappedSpectrum:
    """What the model runs for a spectrum: ``spectrum`` (a native ion type), the ``formula`` whose structures are
    drawn and ranked, and ``note`` (empty when the spectrum's ion type is native and nothing was mapped)."""

    spectrum: Spectrum
    formula: str | None
    note: str = ""
    source: str | None = None  # the original ion type, when mapped

    @property
    def mapped(self) -> bool:
        return bool(self.note)


def _tolerance(mz: float) -> float:
    return max(PEAK_TOL_PPM * 1e-6 * mz, PEAK_TOL_DA)


def drop_peaks(spectrum: Spectrum, below: float, ions: Iterable[float] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The peaks of ``spectrum`` at most ``below`` (+ tolerance) and not at one of the ``ions``' m/z (± tolerance)."""
    mz, intensity = spectrum.mz, spectrum.intensity
    keep = mz <= below + _tolerance(below)
    for ion in ions:
        keep &= np.abs(mz - ion) > _tolerance(ion)
    return mz[keep], intensity[keep]


def _as(spectrum: Spectrum, target: str, *, neutral_shift: float = 0.0, formula: str | None = None,
        peaks: tuple[np.ndarray, np.ndarray] | None = None) -> Spectrum:
    """``spectrum`` as the ``target`` ion of its molecule (neutral mass + ``neutral_shift``, formula ``formula`` when
    given), with ``peaks`` when given; unchecked against its formula (the mapping is exact)."""
    neutral = neutral_mass_from_precursor(spectrum.precursor_mz, spectrum.adduct) + neutral_shift
    a = parse_adduct(target)
    mz, intensity = peaks if peaks is not None else (spectrum.mz, spectrum.intensity)
    return dataclasses.replace(
        spectrum, precursor_mz=precursor_mz_from_neutral(neutral, a), adduct=a.name, charge=a.charge,
        formula=formula if formula is not None else spectrum.formula, mz=mz, intensity=intensity)


def _adduct_as(spectrum: Spectrum, target: str, ions: Iterable[float]) -> Spectrum:
    """An adduct ion run as ``target`` of the same molecule: peaks above the new precursor and ``ions`` dropped."""
    mapped = _as(spectrum, target)
    return dataclasses.replace(mapped, **dict(zip(("mz", "intensity"), drop_peaks(spectrum, mapped.precursor_mz,
                                                                                    ions))))


def ammonium_as_protonated(spectrum: Spectrum) -> Spectrum:
    """``[M+NH4]+`` → ``[M+H]+``: an ammonium adduct first loses NH3 (17.0265 Da) in the collision cell and then
    fragments as the protonated molecule, so the precursor m/z moves down by NH3 and the fragments stay; peaks above
    the new precursor (the ``[M+NH4]+`` ion, ``S + NH4`` ions) and NH4+ (18.0338) are dropped."""
    return _adduct_as(spectrum, "[M+H]+", (NH4_ION,))


def water_loss_as_protonated(spectrum: Spectrum) -> Spectrum:
    """``[M-H2O+H]+`` → ``[M+H]+``: the precursor is ``[M+H]+`` after an in-source water loss, and its fragments
    are fragments of ``[M+H]+`` too, so the precursor m/z moves up by H2O (18.0106 Da); every peak is kept."""
    return _as(spectrum, "[M+H]+")


def potassium_as_protonated(spectrum: Spectrum) -> Spectrum:
    """``[M+K]+`` → ``[M+H]+``: the precursor m/z moves down by K − H (37.9559 Da); peaks above it (K-keeping
    ions) and K+ (38.9632) are dropped, the protonated fragments kept."""
    return _adduct_as(spectrum, "[M+H]+", (K_ION,))


def potassium_as_sodium(spectrum: Spectrum) -> Spectrum:
    """``[M+K]+`` → ``[M+Na]+``: alkali adducts fragment alike (the metal stays on an oxygen-rich fragment), so the
    precursor and every peak whose subformula + K explains it (:func:`engine.spectra.annotate.annotate_peaks` with
    the spectrum's formula) move down by K − Na (15.9739 Da); K+ is dropped, the rest kept."""
    from engine.spectra.annotate import annotate_peaks

    mz, intensity = drop_peaks(spectrum, spectrum.precursor_mz, (K_ION,))
    shift = element_mass("K") - element_mass("Na")
    if mz.size:
        annotation = annotate_peaks(mz, intensity, spectrum.formula, "[M+K]+")
        mz = np.where(annotation.matched & annotation.adduct_retained.astype(bool), mz - shift, mz)
    return _as(spectrum, "[M+Na]+", peaks=(mz, intensity))


def formate_as_deprotonated(spectrum: Spectrum) -> Spectrum:
    """``[M+HCOO]-`` → ``[M-H]-``: a formate adduct loses formic acid (46.0055 Da) and fragments as the
    deprotonated molecule; peaks above the new precursor and HCOO- (44.9982) are dropped."""
    return _adduct_as(spectrum, "[M-H]-", (FORMATE_ION,))


def acetate_as_deprotonated(spectrum: Spectrum) -> Spectrum:
    """``[M+CH3COO]-`` → ``[M-H]-``: an acetate adduct loses acetic acid (60.0211 Da) and fragments as the
    deprotonated molecule; peaks above the new precursor and CH3COO- (59.0139) are dropped."""
    return _adduct_as(spectrum, "[M-H]-", (ACETATE_ION,))


def chloride_as_deprotonated(spectrum: Spectrum) -> Spectrum:
    """``[M+Cl]-`` → ``[M-H]-``: a chloride adduct loses HCl (35.9767 Da) and fragments as the deprotonated
    molecule; peaks above the new precursor and Cl- (34.9694, 36.9665) are dropped."""
    return _adduct_as(spectrum, "[M-H]-", CHLORIDE_IONS)


def water_loss_as_deprotonated(spectrum: Spectrum) -> Spectrum:
    """``[M-H2O-H]-`` → ``[M-H]-``: the precursor is ``[M-H]-`` after an in-source water loss, so the precursor
    m/z moves up by H2O (18.0106 Da); every peak is kept."""
    return _as(spectrum, "[M-H]-")


def _rdbe(counts: Mapping[str, int]) -> float:
    halogens = sum(counts.get(e, 0) for e in ("F", "Cl", "Br", "I"))
    return (1.0 + counts.get("C", 0) + counts.get("Si", 0) - (counts.get("H", 0) + halogens) / 2.0
            + (counts.get("N", 0) + counts.get("P", 0)) / 2.0)


def is_even_electron_cation(formula: str) -> bool:
    """Whether ``formula`` (the composition of an ``[M]+`` ion) is an even-electron cation: its RDBE as a neutral
    is half-integer (choline C5H14NO: −0.5), as for a quaternary ammonium, phosphonium or flavylium ion. An integer
    RDBE (β-carotene C40H56: 13) is a neutral molecule, whose ``[M]+`` is the radical cation ``M+•``."""
    return _rdbe(parse_formula(formula)) % 1 != 0


def cation_as_protonated(spectrum: Spectrum) -> Spectrum:
    """``[M]+`` of a permanently charged cation of formula ``F`` → ``[M'+H]+`` of ``M' = F − H``: the same ion
    (``F − H + H+``), so the same precursor m/z and fragments. Its peaks are annotated as those of a protonated
    ``M'`` (a fragment ``S`` of the cation is ``(S − H) + H``). Refused for a radical cation (see
    :func:`is_even_electron_cation`)."""
    formula = spectrum.formula
    if not is_even_electron_cation(formula):
        raise SpectrumError(
            f"[M]+ of {formula} is a radical cation (M+•: {formula} is a neutral molecule's formula); this model "
            "runs even-electron ions only. If the ion is a protonated molecule, give the adduct [M+H]+ and the "
            "neutral formula; if it is a permanently charged cation, give its formula as the ion's (choline: C5H14NO)"
        )
    counts = dict(parse_formula(formula))
    if counts.get("H", 0) < 1:
        raise SpectrumError(f"[M]+ of {formula} has no hydrogen to remove; this model cannot run it")
    counts["H"] -= 1
    return _as(spectrum, "[M+H]+", neutral_shift=-element_mass("H"), formula=format_formula(counts))


@dataclass(frozen=True)
class IonMapping:
    """How ``source`` is run: as ``target`` by ``function``; ``draws`` says which formula is drawn (``"source"``:
    the original spectrum's, ``"target"``: the mapped spectrum's)."""

    source: str
    target: str
    function: Callable[[Spectrum], Spectrum]
    what: str  # for the note: "after NH3 loss"
    draws: str = "target"
    caveat: str = ""  # what the measurement says the user should know (docs/ion_types.md)


#: ion type → its mapping; every entry maps to an ion type some bundle runs natively
MAPPINGS: Mapping[str, IonMapping] = MappingProxyType({m.source: m for m in (
    IonMapping("[M+NH4]+", "[M+H]+", ammonium_as_protonated, "after NH3 loss"),
    IonMapping("[M-H2O+H]+", "[M+H]+", water_loss_as_protonated, "with the water loss put back"),
    IonMapping("[M+K]+", "[M+H]+", potassium_as_protonated, "by K/H exchange"),
    IonMapping("[M]+", "[M+H]+", cation_as_protonated, ", the cation's formula minus H", draws="source",
               caveat="the model itself rarely draws a cation: library structures of the cation rank"),
    IonMapping("[M+HCOO]-", "[M-H]-", formate_as_deprotonated, "after HCOOH loss"),
    IonMapping("[M+CH3COO]-", "[M-H]-", acetate_as_deprotonated, "after CH3COOH loss"),
    IonMapping("[M+Cl]-", "[M-H]-", chloride_as_deprotonated, "after HCl loss"),
    IonMapping("[M-H2O-H]-", "[M-H]-", water_loss_as_deprotonated, "with the water loss put back"),
)})

#: the alternatives measured (training/studies/ion_mapping.py), by ion type
ALTERNATIVES: Mapping[str, tuple[IonMapping, ...]] = MappingProxyType({
    "[M+K]+": (IonMapping("[M+K]+", "[M+Na]+", potassium_as_sodium, "by K/Na exchange"),),
    "[M]+": (IonMapping("[M]+", "[M+H]+", cation_as_protonated, ", the cation's formula minus H (structures of F − H)"),),
})


def runnable_ion_types(native: Iterable[str]) -> tuple[str, ...]:
    """The ion types a model running ``native`` can run: those, then the mapped ones whose target is native."""
    native = tuple(parse_adduct(a).name for a in native)
    return native + tuple(s for s, m in MAPPINGS.items() if m.target in native and s not in native)


def mapping_for(adduct: str, native: Iterable[str]) -> IonMapping | None:
    """The mapping that runs ``adduct`` on a model running ``native``; None when native or not mappable."""
    native = set(native)
    if adduct in native:
        return None
    m = MAPPINGS.get(adduct)
    return m if m is not None and m.target in native else None


def apply_mapping(spectrum: Spectrum, mapping: IonMapping) -> MappedSpectrum:
    """``spectrum`` run by ``mapping`` (its formula and adduct set), with the note the user sees."""
    mapped = mapping.function(spectrum)
    formula = spectrum.formula if mapping.draws == "source" else mapped.formula
    shown = "" if mapped.formula == spectrum.formula else f" of {mapped.formula}"
    sep = "" if mapping.what.startswith(",") else " "
    caveat = f"; {mapping.caveat}" if mapping.caveat else ""
    note = f"run as {mapping.target}{shown}{sep}{mapping.what} (mapping{caveat})"
    return MappedSpectrum(mapped, formula, note, spectrum.adduct)


def map_spectrum(spectrum: Spectrum, native: Iterable[str]) -> MappedSpectrum:
    """What a model running ``native`` ion types runs for ``spectrum`` (formula and adduct set): the spectrum itself
    when its ion type is native, else its mapping (:data:`MAPPINGS`). Raises :class:`SpectrumError` naming the ion
    type when there is none, or when the mapping refuses the spectrum (a radical ``[M]+``)."""
    native = tuple(native)
    if spectrum.adduct in native:
        return MappedSpectrum(spectrum, spectrum.formula)
    mapping = mapping_for(spectrum.adduct, native)
    if mapping is None:
        raise SpectrumError(
            f"adduct {spectrum.adduct} cannot be run by this model: it runs {', '.join(native)} natively and "
            f"{', '.join(runnable_ion_types(native)[len(native):]) or 'nothing else'} by mapping; give one of those")
    return apply_mapping(spectrum, mapping)
