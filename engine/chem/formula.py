"""Molecular formulas: parse, format (Hill order), masses and the 14-element count vector.

Masses come from RDKit's periodic table (most abundant isotope), so they agree with the masses
RDKit computes for candidate structures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from engine.errors import FormulaError

# The 14 elements the decoder's formula encoder knows, in the paper's order.
ELEMENTS: tuple[str, ...] = ("C", "H", "N", "O", "S", "P", "F", "Cl", "Br", "I", "B", "Si", "Se", "As")
ELEMENT_INDEX = {e: i for i, e in enumerate(ELEMENTS)}

ELECTRON_MASS = 0.000548579909065
PROTON_MASS = 1.007276466621

_TOKEN = re.compile(r"([A-Z][a-z]?)(\d*)")
_FORMULA = re.compile(r"(?:[A-Z][a-z]?\d*)+")
_ADDUCT_METALS = ("Li", "Na", "K")
MAX_COUNT = 999_999  # atoms of one element; larger counts are typos (and would overflow a float mass)


@lru_cache(maxsize=1)
def element_symbols() -> frozenset[str]:
    """Every element symbol RDKit knows (H to Og)."""
    from rdkit import Chem

    table = Chem.GetPeriodicTable()
    return frozenset(table.GetElementSymbol(z) for z in range(1, 119))


@lru_cache(maxsize=None)
def element_mass(symbol: str) -> float:
    """Monoisotopic mass of the most abundant isotope of ``symbol`` (RDKit periodic table)."""
    from rdkit import Chem

    if symbol not in element_symbols():
        # RDKit would print a C++ stack trace and raise a bare RuntimeError.
        raise FormulaError(f"Unknown element symbol {symbol!r}; element symbols look like 'C', 'Cl', 'Na'.")
    return float(Chem.GetPeriodicTable().GetMostCommonIsotopeMass(symbol))


def parse_formula(text: str) -> dict[str, int]:
    """Parse a neutral molecular formula such as ``C10H10O3`` into element counts.

    Elements may repeat (``CH3CH2OH``); counts add up. Only the 14 supported elements are accepted.
    Charges, isotopes, brackets and hydrates are rejected with a message that says what to write.
    """
    if not isinstance(text, str):
        raise FormulaError(f"Formula must be a string, got {type(text).__name__} {text!r}.")
    s = text.strip()
    if not s:
        raise FormulaError("Formula is empty; write it like 'C10H10O3'.")
    if not _FORMULA.fullmatch(s):
        bad = next((ch for ch in s if not (ch.isalnum())), None)
        if bad is not None:
            hint = f"character {bad!r} is not allowed"
            if bad in "+-":
                hint += " (give the neutral formula; the charge comes from the adduct)"
            elif bad in "()[].·*":
                hint += " (write the formula without brackets or hydrate dots, e.g. 'C2H6O')"
        elif s[0].isdigit():
            hint = "it must start with an element symbol such as 'C'"
        else:
            hint = "element symbols start with a capital letter followed by an optional lowercase letter"
        raise FormulaError(f"Cannot parse formula {text!r}: {hint}.{_did_you_mean(s)}")
    counts: dict[str, int] = {}
    for symbol, num in _TOKEN.findall(s):
        if symbol not in ELEMENT_INDEX:
            suggestion = ""
            upper = symbol.upper()
            if upper in ELEMENT_INDEX:
                suggestion = f" Did you mean {upper!r}?"
            elif len(symbol) == 2 and symbol[0] in ELEMENT_INDEX and symbol[1].upper() in ELEMENT_INDEX:
                suggestion = f" Did you mean {symbol[0] + symbol[1].upper()!r} (two elements)?"
            elif symbol in _ADDUCT_METALS:
                suggestion = (f" If this is the ion's formula, give the neutral molecule's and put {symbol} in "
                              f"the adduct (e.g. [M+{symbol}]+).")
            raise FormulaError(
                f"Unsupported element {symbol!r} in formula {text!r}; supported elements are "
                f"{', '.join(ELEMENTS)}.{suggestion or _did_you_mean(s)}"
            )
        if len(num) > len(str(MAX_COUNT)) or (num and int(num) > MAX_COUNT):
            raise FormulaError(f"Count {num} of {symbol} in formula {text!r} is too large (at most {MAX_COUNT:,}).")
        n = int(num) if num else 1
        counts[symbol] = counts.get(symbol, 0) + n
    counts = {e: n for e, n in counts.items() if n > 0}
    if not counts:
        raise FormulaError(f"Formula {text!r} has no atoms.")
    return counts


def _case_fixes(s: str, limit: int = 3) -> list[str]:
    """Spellings of ``s`` with only the letters' case changed that consist of supported elements.

    ``c10h10o3`` -> ``C10H10O3``; ``C6H5CL`` -> ``C6H5Cl``; ``sih4`` -> ``SiH4`` or ``SIH4``.
    """
    symbols = {e.lower(): e for e in ELEMENTS}
    found: list[str] = []

    def walk(i: int, out: str) -> None:
        if len(found) >= limit:
            return
        if i == len(s):
            found.append(out)
            return
        if s[i].isdigit():
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            if out and not out[-1].isdigit():
                walk(j, out + s[i:j])
            return
        for n in (2, 1):
            symbol = symbols.get(s[i : i + n].lower()) if i + n <= len(s) else None
            if symbol is not None:
                walk(i + n, out + symbol)

    if len(s) <= 60 and s.isascii() and s.isalnum():
        walk(0, "")
    return [f for f in found if f != s]


def _did_you_mean(s: str) -> str:
    fixes = _case_fixes(s)
    return f" Did you mean {' or '.join(repr(f) for f in fixes)}?" if fixes else ""


def format_formula(counts: Mapping[str, int]) -> str:
    """Hill-order formula string: C first, H second, then the rest alphabetically (no C: all alphabetical)."""
    items = {e: int(n) for e, n in counts.items() if int(n) > 0}
    if "C" in items:
        order = ["C"] + (["H"] if "H" in items else []) + sorted(e for e in items if e not in ("C", "H"))
    else:
        order = sorted(items)
    return "".join(e + (str(items[e]) if items[e] != 1 else "") for e in order)


def normalize_formula(text: str) -> str:
    """Parse then re-format in Hill order (``H2O`` stays ``H2O``, ``OC2H6`` becomes ``C2H6O``)."""
    return format_formula(parse_formula(text))


def formula_mass(counts: Mapping[str, int]) -> float:
    """Monoisotopic neutral mass of a formula given as element counts."""
    return float(sum(element_mass(e) * n for e, n in counts.items()))


def formula_vector(counts: Mapping[str, int]) -> np.ndarray:
    """Element counts as an int array over :data:`ELEMENTS` (length 14)."""
    v = np.zeros(len(ELEMENTS), dtype=np.int64)
    for e, n in counts.items():
        if e not in ELEMENT_INDEX:
            raise FormulaError(f"Unsupported element {e!r}; supported elements are {', '.join(ELEMENTS)}.")
        v[ELEMENT_INDEX[e]] = n
    return v


def vector_to_counts(vec) -> dict[str, int]:
    """Inverse of :func:`formula_vector`."""
    return {ELEMENTS[i]: int(n) for i, n in enumerate(vec) if int(n) > 0}


def element_masses() -> np.ndarray:
    """Masses of :data:`ELEMENTS` as a float64 array (for vectorised mass computation)."""
    return np.array([element_mass(e) for e in ELEMENTS], dtype=np.float64)
