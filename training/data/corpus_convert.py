"""One molecule of the corpus: SMILES -> RDKit -> stereo-free canonical -> SAFE (round trip checked) -> formula and
Morgan bits, the first failing step naming the drop reason; chunks of them converted in worker processes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import safe
from safe import SAFEDecodeError, SAFEEncodeError, SAFEFragmentationError

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENT_INDEX, formula_vector
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer

_LENGTH_TOKENIZER = SafeTokenizer(list(SPECIAL_TOKENS))  # token counts do not depend on the vocabulary


@dataclass(frozen=True)
class ConvertSettings:
    """What :func:`convert_smiles` needs; sent once to every worker process."""

    max_tokens: int = 256
    n_bits: int = 4096
    radius: int = 2
    exclude: frozenset[str] = frozenset()


class Record(NamedTuple):
    smiles: str  # canonical, stereochemistry removed
    safe: str
    formula: str  # Hill, as engine.chem.molecules.mol_formula writes it
    inchikey14: str
    formula_vec: np.ndarray  # uint16 (14,)
    bits: np.ndarray  # uint16, sorted active Morgan bits


class Dropped(NamedTuple):
    reason: str
    detail: str = ""


def convert_smiles(raw: str, settings: ConvertSettings) -> Record | Dropped:
    """One input SMILES -> a corpus record, or the reason it was dropped (the first check that fails)."""
    raw = raw.strip()
    if not raw:
        return Dropped("empty_smiles")
    mol = chem.mol_from_smiles(raw)
    if mol is None:
        return Dropped("unparseable_smiles")
    bad = unsupported_elements(mol)
    if bad:
        return Dropped("unsupported_element", ",".join(bad))
    smiles = chem.canonical_smiles(mol, remove_stereo=True)
    mol = chem.mol_from_smiles(smiles) if smiles else None
    if mol is None:
        return Dropped("canonicalization_failed")
    key = chem.inchikey14(mol)
    if not key:
        return Dropped("inchikey_failed")
    if key in settings.exclude:
        return Dropped("excluded")
    encoded = encode_safe(smiles)
    if isinstance(encoded, Dropped):
        return encoded
    n_tokens = len(_LENGTH_TOKENIZER.tokenize(encoded)) + 2
    if n_tokens > settings.max_tokens:
        return Dropped("too_long")
    mismatch = check_safe_roundtrip(encoded, smiles)
    if mismatch is not None:
        return mismatch
    formula, vec = formula_of(mol)
    bits = chem.morgan_bits(mol, n_bits=settings.n_bits, radius=settings.radius).astype(np.uint16)
    return Record(smiles, encoded, formula, key, vec, bits)


def unsupported_elements(mol) -> list[str]:
    """Sorted element symbols of ``mol`` outside :data:`engine.chem.formula.ELEMENTS` (``*`` for dummies)."""
    return sorted({a.GetSymbol() for a in mol.GetAtoms()} - ELEMENT_INDEX.keys())


def encode_safe(smiles: str) -> str | Dropped:
    """Canonical SAFE string; a molecule the slicer cannot cut is one block equal to its SMILES."""
    try:
        return safe.encode(smiles, canonical=True, allow_empty=True)
    except (SAFEEncodeError, SAFEFragmentationError) as e:
        return Dropped("safe_encode_failed", type(e).__name__)


def check_safe_roundtrip(encoded: str, smiles: str) -> Dropped | None:
    """None when ``encoded`` decodes to the canonical SMILES ``smiles``."""
    try:
        mol = safe.decode(encoded, as_mol=True)
    except SAFEDecodeError as e:
        return Dropped("safe_decode_failed", type(e).__name__)
    if mol is None:
        return Dropped("safe_decode_failed", "None")
    if chem.canonical_smiles(mol, remove_stereo=True) != smiles:
        return Dropped("safe_roundtrip_mismatch")
    return None


def formula_of(mol) -> tuple[str, np.ndarray]:
    """Hill formula string (no charge sign) and its uint16 14-vector of the atoms as drawn."""
    return chem.mol_formula(mol), formula_vector(chem.mol_formula_counts(mol)).astype(np.uint16)


@dataclass
class DropCounter:
    """Counts of dropped records by reason, with details (e.g. the element, the exception type) and examples."""

    counts: Counter[str] = field(default_factory=Counter)
    details: dict[str, Counter[str]] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = 3

    def add(self, drop: Dropped, example: str) -> None:
        self.counts[drop.reason] += 1
        if drop.detail:
            self.details.setdefault(drop.reason, Counter())[drop.detail] += 1
        shown = self.examples.setdefault(drop.reason, [])
        if len(shown) < self.max_examples:
            shown.append(example)

    def merge(self, other: DropCounter) -> None:
        self.counts.update(other.counts)
        for reason, c in other.details.items():
            self.details.setdefault(reason, Counter()).update(c)
        for reason, ex in other.examples.items():
            shown = self.examples.setdefault(reason, [])
            shown.extend(ex[: max(0, self.max_examples - len(shown))])

    def to_json(self) -> dict:
        return {
            "counts": dict(sorted(self.counts.items())),
            "details": {r: dict(sorted(c.items())) for r, c in sorted(self.details.items())},
            "examples": dict(sorted(self.examples.items())),
        }

    @classmethod
    def from_json(cls, data: dict) -> DropCounter:
        return cls(
            Counter(data["counts"]),
            {r: Counter(c) for r, c in data["details"].items()},
            {r: list(ex) for r, ex in data["examples"].items()},
        )


@dataclass
class ChunkResult:
    records: list[Record]
    drops: DropCounter


def _init_worker(settings: ConvertSettings) -> None:
    global _worker_settings
    _worker_settings = settings


def _convert_chunk(smiles: list[str]) -> ChunkResult:
    assert _worker_settings is not None, "_init_worker was not called"
    records: list[Record] = []
    drops = DropCounter()
    for raw in smiles:
        try:
            out = convert_smiles(raw, _worker_settings)
        except Exception as e:  # one molecule must not stop a corpus build; the type is the reason
            out = Dropped("conversion_error", type(e).__name__)
        if isinstance(out, Dropped):
            drops.add(out, raw.strip())
        else:
            records.append(out)
    return ChunkResult(records, drops)
