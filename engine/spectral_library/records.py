"""One reference spectrum as a library file gives it, and the rules that turn a record's fields into it.

The readers (:mod:`engine.spectral_library.read`) hand every record over as a :class:`RawReference`: its
``Key: value`` (MSP) or ``KEY=value`` (MGF) fields under normalised keys (lower case, only letters, digits and
``#``: ``Precursor_type``, ``PRECURSORTYPE`` and ``precursor type`` are all ``precursortype``), its precursor
m/z and charge when the format has a parser of its own for them, and its peaks. :func:`to_reference` applies
the rules below and returns a :class:`ReferenceSpectrum`, or a :class:`SkippedReference` naming the reason
(the rest of the file goes on).

Rules:

* **Precursor m/z** (``PrecursorMZ``/``PRECURSORMZ``/``precursor_mz``, MGF ``PEPMASS``) must be a number > 0;
  a record without one is skipped (and counted: a library of GC-EI spectra has none at all).
* **MS level** (``MSLEVEL``, NIST's ``Spectrum_type``): records that say MS1 or MS3+ are skipped.
* **Polarity** from the ion mode (``Ion_mode: P``, ``IONMODE=negative``), the adduct's charge and the sign of
  ``CHARGE``; when they disagree the record is skipped. Unknown polarity is allowed.
* **Adduct** (``Precursor_type``, ``ADDUCT``, ``ION``): normalised (``M+H`` -> ``[M+H]+``) when
  :func:`engine.chem.adducts.parse_adduct` reads it, else kept as written.
* **Structure**: SMILES, InChI and InChIKey as given (MoNA writes them inside ``Comments``; they are read from
  there too). The first InChIKey block (``inchikey14``) comes from the InChIKey, else is computed (RDKit) from
  the SMILES, else from the InChI.
* **Accession**: ``Accession``, ``SPECTRUMID`` (GNPS), ``DB#``, ``NIST#``, ``TITLE``, ``ID``; else
  ``record <n>``. **Contributor**: for MassBank accessions (``MSBNK-<lab>-...``) the lab's code; else
  ``Contributor``/``Authors``/``PI``/``DATACOLLECTOR``/``Institution``.
* **Peaks**: non-finite values, m/z <= 0 and intensity <= 0 are dropped; a record left without peaks is
  skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.chem import molecules
from engine.chem.adducts import MISSING_VALUES, parse_adduct_or_none
from engine.errors import AdductError

POLARITIES = ("positive", "negative")
_POLARITY_WORDS = {
    "positive": "positive", "pos": "positive", "p": "positive", "+": "positive", "1": "positive",
    "negative": "negative", "neg": "negative", "n": "negative", "-": "negative", "-1": "negative",
}  # fmt: skip

#: Normalised keys of each field, in order of preference.
KEYS: Mapping[str, tuple[str, ...]] = {
    "accession": ("accession", "spectrumid", "db#", "dbnumber", "nist#", "title", "id"),
    "name": ("name", "compoundname", "compound"),
    "adduct": ("precursortype", "adduct", "iontype", "ion", "precursoriontype"),
    "ion_mode": ("ionmode", "ionpolarity", "polarity"),
    "collision_energy": ("collisionenergy", "ce", "energy", "fragmentationenergy"),
    "instrument_type": ("instrumenttype", "sourceinstrument", "instrument"),
    "smiles": ("smiles", "computedsmiles"),
    "inchi": ("inchi", "computedinchi"),
    "inchikey": ("inchikey", "computedinchikey", "inchiaux"),
    "formula": ("formula", "molecularformula"),
    "license": ("license", "licence"),
    "contributor": ("contributor", "authors", "author", "pi", "datacollector", "institution"),
    "source": ("source", "librarysource", "library"),
    "precursor_mz": ("precursormz", "pepmass", "precursor", "selectedionmz"),
    "charge": ("charge", "precursorcharge"),
    "ms_level": ("mslevel", "spectrumtype", "mstype"),
}

#: The text fields every reference keeps (the index stores them as columns).
TEXT_FIELDS = ("accession", "name", "adduct", "polarity", "collision_energy", "instrument_type", "smiles",
               "inchi", "inchikey", "inchikey14", "formula", "license", "contributor", "source")

_KEY = re.compile(r"[^a-z0-9#]")
_INCHIKEY = re.compile(r"^[A-Z]{14}-[A-Z]{10}-[A-Z]$")
_INCHIKEY14 = re.compile(r"^[A-Z]{14}$")
_MASSBANK = re.compile(r"^MSBNK-([A-Za-z0-9_]+)-")
_COMMENT_PAIR = re.compile(r'"([^"=]+)=([^"]*)"')


def normalise_key(key: str) -> str:
    """``Precursor_type``, ``PRECURSORTYPE``, ``precursor type`` -> ``precursortype`` (``DB#`` keeps its #)."""
    return _KEY.sub("", key.lower())


@dataclass
class RawReference:
    """What one record of a library file says, before the rules of :func:`to_reference`.

    ``line`` is the record's first line in its file (1-based); ``fields`` maps normalised keys to their text;
    ``precursor_mz``/``charge`` are set by readers that parse them themselves (pyteomics for MGF), with
    ``charge_signed`` saying whether the file wrote a sign (``1+``) or not (``1``)."""

    index: int
    line: int
    fields: dict[str, str]
    mz: list[float]
    intensity: list[float]
    precursor_mz: float | None = None
    charge: int | None = None
    charge_signed: bool = False


@dataclass(frozen=True, eq=False)
class ReferenceSpectrum:
    """A reference spectrum of a library file: metadata (texts of :data:`TEXT_FIELDS`, ``""`` when not given),
    precursor, signed charge (``0``: unknown) and peaks as read (float64, sorted by m/z). ``index`` is the
    0-based record number in its file, ``line`` its first line; ``extra`` keeps the record's other fields
    (normalised keys), e.g. MassBank's ``fold`` or ``fragmentationmode``."""

    index: int
    line: int
    precursor_mz: float
    charge: int
    mz: np.ndarray
    intensity: np.ndarray
    accession: str = ""
    name: str = ""
    adduct: str = ""
    polarity: str = ""
    collision_energy: str = ""
    instrument_type: str = ""
    smiles: str = ""
    inchi: str = ""
    inchikey: str = ""
    inchikey14: str = ""
    formula: str = ""
    license: str = ""
    contributor: str = ""
    source: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def text(self, name: str) -> str:
        """The text field ``name`` (one of :data:`TEXT_FIELDS`)."""
        return str(getattr(self, name))


@dataclass(frozen=True)
class SkippedReference:
    """A record that cannot be used: where it starts, its accession (or ``record <n>``) and why."""

    index: int
    line: int
    accession: str
    reason: str
    no_precursor: bool = False

    def __str__(self) -> str:
        return f"line {self.line} ({self.accession}): {self.reason}"


class RecordProblem(ValueError):
    """Why one record is skipped (readers and :func:`to_reference` raise it; the reader reports it)."""

    def __init__(self, reason: str, no_precursor: bool = False):
        super().__init__(reason)
        self.no_precursor = no_precursor


def first(fields: Mapping[str, str], keys: Iterable[str]) -> str:
    """The first non-missing value among ``keys`` (``""`` when none)."""
    for key in keys:
        value = fields.get(key)
        if value is not None:
            value = value.strip()
            if value and value.lower() not in MISSING_VALUES:
                return value
    return ""


def add_comment_fields(fields: dict[str, str]) -> None:
    """MoNA's MSP writes ``Comments: "SMILES=..." "InChI=..." "license=CC BY" ...``: add those pairs as fields
    (a field the record states on its own line wins)."""
    comments = fields.get("comments")
    if not comments or "=" not in comments:
        return
    for key, value in _COMMENT_PAIR.findall(comments):
        fields.setdefault(normalise_key(key), value.strip())


def contributor_of(accession: str, fields: Mapping[str, str]) -> str:
    """The contributing lab: the code in a MassBank accession (``MSBNK-Eawag-EA008601`` -> ``Eawag``), else the
    record's contributor/author fields."""
    m = _MASSBANK.match(accession)
    return m.group(1) if m else first(fields, KEYS["contributor"])


def polarity_word(text: str) -> str | None:
    """``positive``/``negative`` of an ion mode as libraries write it (``P``, ``POSITIVE``, ``neg``, ...)."""
    return _POLARITY_WORDS.get(text.strip().lower())


def parse_charge(text: str) -> int | None:
    """A signed charge from ``1+``, ``+1``, ``2-``, ``-1``, ``1``; ``None`` when not one."""
    t = text.strip().replace(" ", "")
    m = re.fullmatch(r"([+-]?)(\d+)([+-]?)", t)
    if not m or (m.group(1) and m.group(3)):
        return None
    sign = -1 if "-" in (m.group(1) + m.group(3)) else 1
    return sign * int(m.group(2))


def structure_key(inchikey: str, smiles: str, inchi: str) -> str:
    """The first InChIKey block: from the InChIKey when it is one, else computed from the SMILES, else from the
    InChI (RDKit); ``""`` when none gives one."""
    key = inchikey.strip().upper()
    if _INCHIKEY.match(key) or _INCHIKEY14.match(key):
        return key[:14]
    if smiles:
        found = molecules.inchikey14(smiles)
        if found:
            return found
    if inchi:
        from rdkit import Chem, rdBase

        text = inchi if inchi.startswith("InChI=") else f"InChI={inchi}"
        with rdBase.BlockLogs():
            full = Chem.InchiToInchiKey(text)  # None for malformed InChI
        if full:
            return full[:14]
    return ""


def _precursor(raw: RawReference) -> float:
    value = raw.precursor_mz
    if value is None:
        text = first(raw.fields, KEYS["precursor_mz"])
        if not text:
            raise RecordProblem("no precursor m/z (PrecursorMZ in MSP, PEPMASS in MGF): it cannot be searched "
                                "by precursor; is it an EI (GC-MS) spectrum?", no_precursor=True)
        try:
            value = float(text.split()[0])
        except ValueError:
            raise RecordProblem(f"precursor m/z {text!r} is not a number") from None
    if not (0 < value < math.inf):
        raise RecordProblem(f"precursor m/z {value:g} is not a positive number", no_precursor=True)
    return float(value)


def _check_ms_level(fields: Mapping[str, str]) -> None:
    text = first(fields, KEYS["ms_level"])
    if not text:
        return
    digits = re.sub(r"\D", "", text)
    if digits and digits != "2":
        raise RecordProblem(f"MS level {text!r}: only MS2 spectra are searched")


def _polarity_and_charge(raw: RawReference, adduct_text: str) -> tuple[str, int, str]:
    """(polarity or "", signed charge or 0, normalised adduct or the text as written)."""
    said: list[tuple[str, str]] = []
    mode = first(raw.fields, KEYS["ion_mode"])
    if mode:
        word = polarity_word(mode)
        if word is None:
            raise RecordProblem(f"ion mode {mode!r} is neither positive nor negative")
        said.append((word, f"the ion mode is {mode}"))
    try:
        adduct = parse_adduct_or_none(adduct_text) if adduct_text else None
    except AdductError:
        adduct = None
    if adduct is not None:
        said.append((adduct.polarity, f"the adduct {adduct.name} is {adduct.polarity}"))
    charge, signed = raw.charge, raw.charge_signed
    if charge is None:
        text = first(raw.fields, KEYS["charge"])
        charge = parse_charge(text) if text else None
        signed = "+" in text or "-" in text
    if charge and signed:
        said.append(("positive" if charge > 0 else "negative", f"the charge is {charge:+d}"))
    polarities = {p for p, _ in said}
    if len(polarities) > 1:
        raise RecordProblem("conflicting polarity: " + " but ".join(w for _, w in said) + "; fix the wrong one")
    polarity = polarities.pop() if polarities else ""
    if adduct is not None:
        return polarity, adduct.charge, adduct.name
    charge = abs(charge or 0) * (-1 if polarity == "negative" else 1)
    return polarity, charge, adduct_text


def _peaks(raw: RawReference) -> tuple[np.ndarray, np.ndarray]:
    mz = np.asarray(raw.mz, dtype=np.float64)
    intensity = np.asarray(raw.intensity, dtype=np.float64)
    keep = np.isfinite(mz) & np.isfinite(intensity) & (mz > 0) & (intensity > 0)
    if not keep.any():
        raise RecordProblem("no peaks" if mz.size == 0 else f"none of its {mz.size} peaks has m/z and intensity > 0")
    mz, intensity = mz[keep], intensity[keep]
    order = np.argsort(mz, kind="stable")
    return mz[order], intensity[order]


def accession_of(raw: RawReference) -> str:
    return first(raw.fields, KEYS["accession"]) or f"record {raw.index + 1}"


def to_reference(raw: RawReference) -> ReferenceSpectrum:
    """Apply the rules of this module to one record; :class:`RecordProblem` says why it cannot be used."""
    add_comment_fields(raw.fields)
    f = raw.fields
    _check_ms_level(f)
    precursor = _precursor(raw)
    polarity, charge, adduct = _polarity_and_charge(raw, first(f, KEYS["adduct"]))
    mz, intensity = _peaks(raw)
    accession = accession_of(raw)
    smiles, inchi, inchikey = first(f, KEYS["smiles"]), first(f, KEYS["inchi"]), first(f, KEYS["inchikey"])
    used = {k for keys in KEYS.values() for k in keys} | {"comments", "numpeaks"}
    return ReferenceSpectrum(
        index=raw.index, line=raw.line, precursor_mz=precursor, charge=charge, mz=mz, intensity=intensity,
        accession=accession, name=first(f, KEYS["name"]), adduct=adduct, polarity=polarity,
        collision_energy=first(f, KEYS["collision_energy"]), instrument_type=first(f, KEYS["instrument_type"]),
        smiles=smiles, inchi=inchi, inchikey=inchikey if _INCHIKEY.match(inchikey.upper()) else "",
        inchikey14=structure_key(inchikey, smiles, inchi), formula=first(f, KEYS["formula"]),
        license=first(f, KEYS["license"]), contributor=contributor_of(accession, f), source=first(f, KEYS["source"]),
        extra={k: v for k, v in f.items() if k not in used},
    )
