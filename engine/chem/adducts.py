"""Adducts (precursor ion types): parse and normalise ``[kM±group±group]z±``, neutral <-> m/z.

Any adduct of the form ``[kM±group...]z±`` is parsed generically: each group is a formula
(``H``, ``Na``, ``NH4``, ``H2O``, ``CH3COO``, any element RDKit knows) or one of the aliases in
:data:`GROUP_ALIASES` (``FA``, ``ACN``, ``HAc``, ``MeOH``, ...), optionally with a multiplier
(``-2H2O``). Brackets, spaces and the way the charge is written are free (``M+H``, ``[M + H]+``,
``[M+H]1+``, ``[M+H]+1`` are all ``[M+H]+``); without a charge, it is inferred from the ionic
groups (``H``, ``Na``, ``K``, ``NH4`` count +1, ``Cl``, ``HCOO``, ``CH3COO`` count -1).

Masses: the ion is ``k*M + added atoms - removed atoms`` with ``charge`` electrons removed (or
added), so ``[M+H]+`` adds a proton, ``[M]+`` removes an electron and ``[M+Cl]-`` adds a chloride.

Names are normalised to the bracketed form with the charge outside (``[M+2H]2+``). Spellings of
the same common ion map to one name (:data:`PREFERRED_NAMES`): ``[M+FA-H]-``, ``[M+HCOOH-H]-``
and ``[M+HCO2]-`` are all ``[M+HCOO]-``; ``[M+H-H2O]+`` is ``[M-H2O+H]+``. A radical mark
(``*``, ``•``, ``.``) is kept as ``*`` (``[M]+*``); it does not change the mass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from engine.chem.formula import ELECTRON_MASS, element_mass, element_symbols
from engine.errors import AdductError

# Named groups chemists write inside adducts (lower-case key -> display spelling, formula).
GROUP_ALIASES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "fa": ("FA", "CH2O2"),  # formic acid
        "acn": ("ACN", "C2H3N"),  # acetonitrile
        "hac": ("HAc", "C2H4O2"),  # acetic acid
        "acoh": ("AcOH", "C2H4O2"),
        "aco": ("AcO", "C2H3O2"),  # acetate
        "oac": ("OAc", "C2H3O2"),
        "meoh": ("MeOH", "CH4O"),
        "etoh": ("EtOH", "C2H6O"),
        "ipa": ("IPA", "C3H8O"),
        "isoprop": ("IsoProp", "C3H8O"),
        "dmso": ("DMSO", "C2H6OS"),
        "tfa": ("TFA", "C2HF3O2"),
    }
)

# Charges of ionic groups, used only when the adduct string gives no charge (``M+H``).
_GROUP_CHARGE = {
    "H": 1, "Li": 1, "Na": 1, "K": 1, "Rb": 1, "Cs": 1, "Ag": 1, "NH4": 1,
    "F": -1, "Cl": -1, "Br": -1, "I": -1,
    "HCOO": -1, "HCO2": -1, "CH3COO": -1, "CH3CO2": -1, "AcO": -1, "OAc": -1,
}  # fmt: skip

EXAMPLES = "[M+H]+, [M+Na]+, [M-H]-, [M+NH4]+, [M-H2O+H]+, [2M+H]+, [M+2H]2+, [M+FA-H]-, [M+Cl]-"
MISSING_VALUES = frozenset({"", "unknown", "n/a", "na", "null", "none", "nan", "?", "-"})

_ADDUCT = re.compile(
    r"(?P<open>\[)?(?P<k>\d*)M(?P<groups>(?:[+-]\d*[A-Za-z][A-Za-z0-9]*)*)(?P<close>\])?"
    r"(?P<rad1>[*•.])?(?P<charge>\d*[+-]+\d*)?(?P<rad2>[*•.])?"
)
_GROUP = re.compile(r"([+-])(\d*)([A-Za-z][A-Za-z0-9]*)")
_CHARGE = re.compile(r"(?P<n1>\d*)(?P<s1>[+-])|(?P<s2>[+-])(?P<n2>\d+)|(?P<ss>\+{2,}|-{2,})")
_ELEMENT_TOKEN = re.compile(r"([A-Z][a-z]?)(\d*)")


@dataclass(frozen=True)
class Adduct:
    """A precursor ion type.

    ``mass_delta`` is what the ion adds to ``n_molecules * M`` before dividing by ``|charge|``
    (electrons included); ``add_counts`` / ``remove_counts`` are the element counts of the
    ``+`` and ``-`` groups as written (``[M-H2O+H]+``: add ``{H: 1}``, remove ``{H: 2, O: 1}``).
    """

    name: str
    charge: int
    n_molecules: int
    mass_delta: float
    add_counts: Mapping[str, int] = field(default_factory=dict, hash=False)
    remove_counts: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        return self.name

    @property
    def polarity(self) -> str:
        """``"positive"`` or ``"negative"``."""
        return "positive" if self.charge > 0 else "negative"

    @property
    def net_counts(self) -> dict[str, int]:
        """Added minus removed element counts (signed; zeros dropped)."""
        net = dict(self.add_counts)
        for e, n in self.remove_counts.items():
            net[e] = net.get(e, 0) - n
        return {e: n for e, n in net.items() if n != 0}

    def ion_counts(self, neutral_counts: Mapping[str, int]) -> dict[str, int]:
        """Element counts of the precursor ion ``k*M + added - removed`` for a neutral formula ``M``.

        Raises :class:`AdductError` when the molecule lacks atoms the adduct removes
        (``[M-H2O+H]+`` of a molecule without oxygen).
        """
        ion = {e: n * self.n_molecules for e, n in neutral_counts.items()}
        for e, n in self.net_counts.items():
            ion[e] = ion.get(e, 0) + n
        short = {e: n for e, n in ion.items() if n < 0}
        if short:
            missing = ", ".join(f"{-n} {e}" for e, n in short.items())
            raise AdductError(
                f"Adduct {self.name} removes more atoms than the molecule has (short of {missing}); "
                f"check the formula or choose another adduct."
            )
        return {e: n for e, n in ion.items() if n > 0}


def _charge_text(charge: int) -> str:
    sign = "+" if charge > 0 else "-"
    return sign if abs(charge) == 1 else f"{abs(charge)}{sign}"


def _parse_charge(text: str, adduct_text: str) -> int:
    m = _CHARGE.fullmatch(text)
    if m is None:
        raise AdductError(
            f"Cannot read the charge {text!r} of adduct {adduct_text!r}; write it after the bracket "
            f"as '+', '-', '2+' or '2-' (examples: {EXAMPLES})."
        )
    if m["ss"]:
        n, sign = len(m["ss"]), m["ss"][0]
    elif m["s1"]:
        n, sign = int(m["n1"] or 1), m["s1"]
    else:
        n, sign = int(m["n2"]), m["s2"]
    if n == 0:
        raise AdductError(f"Adduct {adduct_text!r} has charge 0; an ion needs a charge such as '+' or '-'.")
    return n if sign == "+" else -n


def _group_counts(name: str, adduct_text: str) -> tuple[str, dict[str, int]]:
    """Display spelling and element counts of one group (alias or formula)."""
    alias = GROUP_ALIASES.get(name.lower())
    display, formula = alias if alias else (name, name)
    tokens = _ELEMENT_TOKEN.findall(formula)
    if "".join(sym + num for sym, num in tokens) != formula:
        tokens = []
    counts: dict[str, int] = {}
    for symbol, num in tokens:
        if symbol not in element_symbols():
            tokens = []
            break
        counts[symbol] = counts.get(symbol, 0) + (int(num) if num else 1)
    if not tokens or not any(counts.values()):
        raise AdductError(
            f"Unknown group {name!r} in adduct {adduct_text!r}; write groups as formulas (H, Na, NH4, "
            f"H2O, CH3COO) or one of {', '.join(d for d, _ in GROUP_ALIASES.values())} "
            f"(examples: {EXAMPLES})."
        )
    return display, counts


def _add(target: dict[str, int], counts: Mapping[str, int], times: int) -> None:
    for e, n in counts.items():
        target[e] = target.get(e, 0) + n * times


def _clip(digits: str) -> str:
    return digits if len(digits) <= 12 else f"{digits[:6]}…({len(digits)} digits)"


def _parse(text: str) -> Adduct:
    """Generic parse, without choosing a preferred name."""
    s = "".join(text.split())
    big = re.search(r"\d{4,}", s)
    if big is not None:
        raise AdductError(
            f"Adduct {text!r} holds the number {_clip(big.group())}; numbers in an adduct (molecules, "
            f"multipliers, atom counts, charge) are at most 999 (examples: {EXAMPLES})."
        )
    m = _ADDUCT.fullmatch(s)
    if m is None or bool(m["open"]) != bool(m["close"]):
        raise AdductError(
            f"Cannot parse adduct {text!r}; write it like [M+H]+ ([kM, then +/- groups, then the "
            f"charge); examples: {EXAMPLES}."
        )
    if m["rad1"] and m["rad2"]:
        raise AdductError(f"Adduct {text!r} has two radical marks; write it like [M]+*.")
    k = int(m["k"]) if m["k"] else 1
    if k < 1:
        raise AdductError(f"Adduct {text!r} has 0 molecules; write [M+H]+ or [2M+H]+.")
    add: dict[str, int] = {}
    remove: dict[str, int] = {}
    inferred = 0
    parts = []
    for sign, mult, name in _GROUP.findall(m["groups"]):
        times = int(mult) if mult else 1
        if times < 1:
            raise AdductError(f"Group {sign}{mult}{name} in adduct {text!r} has multiplier 0.")
        display, counts = _group_counts(name, text)
        _add(add if sign == "+" else remove, counts, times)
        inferred += (1 if sign == "+" else -1) * times * _GROUP_CHARGE.get(display, 0)
        parts.append(f"{sign}{times if times > 1 else ''}{display}")
    if m["charge"]:
        charge = _parse_charge(m["charge"], text)
    elif inferred:
        charge = inferred
    else:
        raise AdductError(
            f"Adduct {text!r} gives no charge and none can be inferred; add it after the bracket, "
            f"e.g. [M+H]+ or [M-H]- (examples: {EXAMPLES})."
        )
    radical = "*" if (m["rad1"] or m["rad2"]) else ""
    name = f"[{k if k > 1 else ''}M{''.join(parts)}]{_charge_text(charge)}{radical}"
    mass = sum(element_mass(e) * n for e, n in add.items()) - sum(element_mass(e) * n for e, n in remove.items())
    return Adduct(
        name=name,
        charge=charge,
        n_molecules=k,
        mass_delta=mass - charge * ELECTRON_MASS,
        add_counts=MappingProxyType({e: n for e, n in add.items() if n}),
        remove_counts=MappingProxyType({e: n for e, n in remove.items() if n}),
    )


# Preferred spelling of common ions: any spelling with the same molecules, net atoms, charge and
# radical mark gets this name.
PREFERRED_NAMES: tuple[str, ...] = (
    "[M+H]+", "[M+Na]+", "[M+K]+", "[M+Li]+", "[M+NH4]+", "[M]+", "[M-H2O+H]+", "[M-2H2O+H]+",
    "[M+2H]2+", "[M+H+Na]2+", "[2M+H]+", "[2M+Na]+", "[2M+NH4]+", "[M+ACN+H]+", "[M+CH3OH+H]+",
    "[M-H]-", "[M]-", "[M+Cl]-", "[M+HCOO]-", "[M+CH3COO]-", "[M-H2O-H]-", "[M-2H]2-", "[2M-H]-",
    "[M+Na-2H]-", "[M+K-2H]-", "[M+Br]-",
)  # fmt: skip


#: The ion types of electrospray a chemist meets in LC-MS/MS runs (issue #56), by ion mode: every one is
#: a formula candidate, a structure-library mass track and a spectral-library ion type. Which of them the
#: model runs natively and which through a chemical mapping is the bundle's and
#: :mod:`engine.model.ion_mapping`'s business, not this list's.
COMMON_ION_TYPES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "positive": ("[M+H]+", "[M+Na]+", "[M+NH4]+", "[M+K]+", "[M-H2O+H]+", "[M]+"),
    "negative": ("[M-H]-", "[M+HCOO]-", "[M+CH3COO]-", "[M+Cl]-", "[M-H2O-H]-"),
})


def _identity(a: Adduct) -> tuple:
    return (a.n_molecules, a.charge, a.name.endswith("*"), frozenset(a.net_counts.items()))


@lru_cache(maxsize=1)
def _preferred() -> dict[tuple, str]:
    return {_identity(_parse(name)): name for name in PREFERRED_NAMES}


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Adduct:
    adduct = _parse(text)
    preferred = _preferred().get(_identity(adduct))
    if preferred is not None and preferred != adduct.name:
        return _parse(preferred)  # the preferred spelling, with its own add/remove counts
    return adduct


def parse_adduct(text: str | Adduct) -> Adduct:
    """Parse and normalise an adduct such as ``M+H``, ``[M + H]+`` or ``[M+FA-H]-``.

    Raises :class:`AdductError` naming the bad string and showing valid ones.
    """
    if isinstance(text, Adduct):
        return text
    if not isinstance(text, str):
        raise AdductError(f"Adduct must be a string such as '[M+H]+', got {type(text).__name__} {text!r}.")
    if text.strip().lower() in MISSING_VALUES:
        raise AdductError(f"Adduct is missing ({text!r}); give one such as {EXAMPLES}.")
    return _parse_cached(text.strip())


def parse_adduct_or_none(text: str | Adduct | None) -> Adduct | None:
    """Like :func:`parse_adduct`, but ``None``, empty, ``unknown``, ``N/A``, ``NA``, ``null`` give ``None``."""
    if text is None or (isinstance(text, str) and text.strip().lower() in MISSING_VALUES):
        return None
    return parse_adduct(text)


def neutral_mass_from_precursor(mz: float, adduct: str | Adduct) -> float:
    """Neutral monoisotopic mass ``M`` of the molecule whose ``adduct`` ion has m/z ``mz``."""
    a = parse_adduct(adduct)
    return (float(mz) * abs(a.charge) - a.mass_delta) / a.n_molecules


def precursor_mz_from_neutral(mass: float, adduct: str | Adduct) -> float:
    """m/z of the ``adduct`` ion of a molecule of neutral monoisotopic mass ``mass``."""
    a = parse_adduct(adduct)
    return (a.n_molecules * float(mass) + a.mass_delta) / abs(a.charge)
