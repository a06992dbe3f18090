"""The SAFE token grammar the formula constraints (:mod:`engine.model.constraints`) work with: the kind of each
token (atom, bond, ring digit, branch, ``.``, ``<eos>``), an atom's element, formal charge and bond capacity, a
bond's order, and each tokenizer's token classes as bit sets over token ids (:class:`SafeGrammar`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.chem.formula import ELEMENT_INDEX, ELEMENTS
from engine.model.tokenizer import SafeTokenizer

# Token kinds.
NEVER, ATOM, BOND, DIGIT, OPEN, CLOSE, DOT, EOS = range(8)

_ORGANIC = {"B": "B", "C": "C", "N": "N", "O": "O", "P": "P", "S": "S", "F": "F", "Cl": "Cl", "Br": "Br", "I": "I",
            "b": "B", "c": "C", "n": "N", "o": "O", "p": "P", "s": "S"}
_BRACKET = re.compile(
    r"^\[(?P<iso>\d*)(?P<sym>[A-Z][a-z]?|se|as|te|[bcnops])(?P<chiral>@*)(?P<h>H\d*)?"
    r"(?P<charge>[+-]\d*|\+\++|-+)?(?P<cls>:\d+)?\]$"
)
_BONDS = frozenset("-=#:/\\$")
BOND_ORDER = {"-": 1, "=": 2, "#": 3, ":": 1, "/": 1, "\\": 1, "$": 4}
# Highest usual valence (sum of bond orders, hydrogens included) of the elements a formula may hold.
MAX_VALENCE = {"C": 4, "N": 3, "O": 2, "S": 6, "P": 5, "F": 1, "Cl": 1, "Br": 1, "I": 1, "B": 3, "Si": 4,
               "Se": 6, "As": 5}


HYPERVALENT = frozenset({"S", "P", "Se", "As"})


@dataclass(frozen=True)
class TokenInfo:
    """What one SAFE token is (:func:`classify_token`)."""

    kind: int
    element: int = -1  # index into engine.chem.formula.ELEMENTS (atoms)
    charge: int = 0  # formal charge (bracket atoms)
    digit: int = -1  # ring-closure / attachment digit
    order: int = 0  # bond order (bonds)
    capacity: int = 0  # bond orders the atom can carry (atoms)
    aromatic: bool = False  # lower-case atom (atoms)


_DIGIT = re.compile(r"^(?:\d|%\d\d)$")


def parse_charge(text: str | None) -> int:
    """``+`` → 1, ``++`` → 2, ``+3`` → 3, ``-`` → -1, ``--`` → -2, None → 0."""
    if not text:
        return 0
    sign = 1 if text[0] == "+" else -1
    rest = text[1:]
    if rest.isdigit():
        return sign * int(rest)
    return sign * len(text)


def bond_capacity(symbol: str, charge: int = 0, hydrogens: int = 0, aromatic: bool = False) -> int:
    """Most bond orders an atom may carry (its highest usual valence, charge and explicit H applied).

    Aromatic bonds count 1 each, so an aromatic carbon keeps 4 (two ring bonds and ``c(=O)`` fit);
    aromatic S and Se get 2 (thiophene), not the 6 of a sulfone's S.
    """
    if aromatic and symbol in ("S", "Se"):
        base = 2
    else:
        base = MAX_VALENCE[symbol]
    if symbol in ("C", "Si"):
        base -= abs(charge)
    elif symbol == "B":
        base -= charge
    else:
        base += charge
    return max(base - hydrogens, 0)


def classify_token(token: str) -> TokenInfo:
    """What one SAFE token is (kind, element, charge, ring digit, bond order or bond capacity)."""
    if token == "<eos>":
        return TokenInfo(EOS)
    if token in _ORGANIC:
        sym = _ORGANIC[token]
        return TokenInfo(ATOM, ELEMENT_INDEX[sym], capacity=bond_capacity(sym, aromatic=token.islower()),
                         aromatic=token.islower())
    if token in _BONDS:
        return TokenInfo(BOND, order=BOND_ORDER.get(token, 1))
    if _DIGIT.match(token):
        return TokenInfo(DIGIT, digit=int(token.lstrip("%")))
    if token == "(":
        return TokenInfo(OPEN)
    if token == ")":
        return TokenInfo(CLOSE)
    if token == ".":
        return TokenInfo(DOT)
    m = _BRACKET.match(token)
    if m and not m.group("iso"):
        sym = m.group("sym")
        aromatic = sym[0].islower()
        sym = sym[0].upper() + sym[1:]
        if sym in ELEMENT_INDEX and sym in MAX_VALENCE:
            charge = parse_charge(m.group("charge"))
            h = m.group("h")
            hydrogens = 0 if not h else int(h[1:] or 1)
            return TokenInfo(ATOM, ELEMENT_INDEX[sym], charge, capacity=bond_capacity(sym, charge, hydrogens, aromatic),
                             aromatic=aromatic)
    return TokenInfo(NEVER)  # <pad>, <bos>, <unk>, isotopes, elements the formula encoder lacks


_GRAMMARS: dict[tuple, SafeGrammar] = {}


class SafeGrammar:
    """Token classes of one tokenizer as bit sets (Python ints over token ids), built once."""

    def __init__(self, tokenizer: SafeTokenizer):
        self.vocab_size = tokenizer.vocab_size
        self.nbytes = (self.vocab_size + 7) // 8
        self.info = [classify_token(t) for t in tokenizer.vocab]
        self.kind = [i.kind for i in self.info]
        self.max_capacity = max([i.capacity for i in self.info] + [1])
        self.digit_token: dict[int, int] = {}  # ring digit -> its token bit
        self.bonds_of = [0] * 5  # bond order o -> bond tokens of that order
        self.open = self.close = self.dot = self.eos = 0
        for t, info in enumerate(self.info):
            bit = 1 << t
            if info.kind == DIGIT:
                self.digit_token[info.digit] = self.digit_token.get(info.digit, 0) | bit
            elif info.kind == BOND:
                self.bonds_of[info.order] |= bit
            elif info.kind == OPEN:
                self.open |= bit
            elif info.kind == CLOSE:
                self.close |= bit
            elif info.kind == DOT:
                self.dot |= bit
            elif info.kind == EOS:
                self.eos |= bit
        self.element_capacity = [0] * len(ELEMENTS)  # most bond orders an uncharged atom of each element takes
        for info in self.info:
            if info.kind == ATOM and info.charge == 0:
                self.element_capacity[info.element] = max(self.element_capacity[info.element], info.capacity)
        self.hyper_elements = sum(1 << ELEMENT_INDEX[e] for e in HYPERVALENT)
        self.all_digits = sum(self.digit_token.values())
        groups: dict[int, int] = {}  # capacity -> bit set of the elements with it
        for e, c in enumerate(self.element_capacity):
            groups[c] = groups.get(c, 0) | 1 << e
        self.capacity_groups = sorted(groups.items())
        self.aromatic_atoms = sum(1 << t for t, i in enumerate(self.info) if i.kind == ATOM and i.aromatic)
        self.aromatic_carbon = 0  # aromatic carbon atom tokens (each brings half a Kekulé double bond)
        for t, info in enumerate(self.info):
            if info.kind == ATOM and info.element == ELEMENT_INDEX["C"] and info.aromatic:
                self.aromatic_carbon |= 1 << t
        self._atoms_cache: dict[tuple[int, int, int, int], int] = {}

    @classmethod
    def of(cls, tokenizer: SafeTokenizer) -> SafeGrammar:
        """The grammar of ``tokenizer``, built on first use and kept for its vocabulary."""
        key = (tokenizer.pattern, tuple(tokenizer.vocab))
        grammar = _GRAMMARS.get(key)
        if grammar is None:
            grammar = _GRAMMARS[key] = cls(tokenizer)
        return grammar

    def atoms(self, available: int, min_capacity: int = 0, charge: int = 0, atoms_after: int = 0) -> int:
        """Atom tokens of the elements in ``available`` (a bit set over element indices) that can carry
        at least ``min_capacity`` bond orders, and whose charge added to ``charge`` can still be
        neutralised by ``atoms_after`` more atoms (one unit each)."""
        key = (available, min_capacity, charge, min(atoms_after, 8))
        m = self._atoms_cache.get(key)
        if m is None:
            m = 0
            for t, info in enumerate(self.info):
                if (info.kind == ATOM and available >> info.element & 1 and info.capacity >= min_capacity
                        and abs(charge + info.charge) <= atoms_after):
                    m |= 1 << t
            self._atoms_cache[key] = m
        return m

    def to_tensor(self, masks: Sequence[int]) -> torch.Tensor:
        """Bit sets -> bool tensor (len(masks), vocab_size)."""
        raw = b"".join(m.to_bytes(self.nbytes, "little") for m in masks)
        bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(len(masks), self.nbytes), axis=1,
                             bitorder="little")
        return torch.from_numpy(bits[:, : self.vocab_size].astype(bool))
