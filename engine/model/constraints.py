"""Formula-constrained decoding: which SAFE tokens may come next, given the molecular formula.

The sampler asks, before every step, for the tokens each row may draw; everything else is masked
out of the decoder's distribution (then top-k / top-p apply to what is left). A row therefore ends
only on a complete string with exactly the formula's heavy atoms, or, when no legal token is left,
as a counted failure (:data:`DEAD_END`), never with an exception.

Tracked during decoding, per row:

- **heavy atoms**: the remaining budget of each element; an atom token is legal only while its
  element has atoms left. Every token places at most one heavy atom: ``C``, ``Cl``, ``Br``, aromatic
  ``c n o s p b``, bracket atoms ``[nH]``, ``[N+]``, ``[O-]``, ``[Se]``... each count as one atom of
  their element (a bracket's H count goes to the final hydrogen check, not the budget). Tokens of an
  element outside the formula's 14 (``[Na]``) or with an isotope are never legal;
- **grammar**: what may follow what (an atom starts the string and every ``.`` fragment; a bond is
  followed by an atom or a ring digit; ``(`` by a bond or an atom; no ring digit after ``)``; no empty
  branch; ``)`` only inside a branch; ``.`` only outside branches);
- **ring closures and SAFE attachment points**: SAFE writes attachment points as ring-closure digits
  shared across ``.``-separated fragments, so one set of open digits serves both. A digit closes on a
  different atom from the one that opened it, and never duplicates a bond (``C1C1``);
- **connectivity**: fragments joined by a digit form one component. ``.`` is legal only while the
  current component still has an open digit (else it could never be joined to what follows), so at
  ``<eos>`` with no digit open the molecule is one piece;
- **valences**: the bond orders each atom can still take (its highest usual valence with charge and
  bracket hydrogens applied; aromatic bonds count 1; S and P may be hypervalent); a digit reserves one
  bond order on its opener (or the order written before it), and a closure with a higher order
  (``C1...C=1``) takes the rest from the opener too;
- **unsaturation**: rings (closures inside one component), ``=``/``#`` bonds not to S, P, Se, As, and one
  double bond per two aromatic carbons (``c(=O)`` takes its carbon's), against the formula's rings plus
  double bonds (RDBE); the rings the open digits must still form count too;
- **feasibility**: the atoms left must be able to take a bond each plus the open ring bonds (an atom
  starting a ``.`` fragment is attached by the ring bond it closes), have somewhere to attach, reach the
  formula's RDBE (an upper bound from free valences, aromatic carbons allowed for), and neutralise the
  net charge of bracket atoms;
- **completion**: ``<eos>`` only when every heavy atom is placed, no branch or digit is open and the
  net charge is zero;
- **length**: the tokens a row still needs (one per remaining atom, open digit and open branch, plus
  ``<eos>``) must fit in the tokens it has left; a token that would break this is masked;
- **one step ahead**: a bond token, or ``(``, is legal only if the next step's own tests leave a token
  after it (``C(=`` with nothing that could follow); a closure may not seal its component off from
  the rest (no open digit left in it, no free valence, while atoms or other components remain); once
  no atom and no open digit is left, no bond can still form, so the rings + double bonds must already be
  there.

Only checked on the finished molecule (by RDKit, in :mod:`engine.elucidation.ranking`): hydrogens (the unsaturation
count is a lower bound: pyridine-like aromatic N and O/S double bonds are not all known while
decoding), aromaticity (kekulisation) and exotic valences. The feasibility bounds are heuristics that
may, rarely, mask a real molecule: 38 of 2,000 seeded corpus structures (``molecules.tsv.gz``,
``benchmarks/studies/yield_breakdown.py --corpus``) are masked somewhere: 21 permanently charged (an N+ with no
counter-charge), the rest with ring closures the bounds misjudge; ``tests/test_constraints_references.py`` checks every fixture reference.
``benchmarks/studies/yield_breakdown.py`` sorts the shipped model's band samples by outcome: on 25 val spectra,
55% are candidates, 20% are dead ends, 15% fail aromaticity (kekulisation or an aromatic atom outside
a ring), 10% have the wrong hydrogen count. A one-step rule that every aromatic atom ends with two aromatic
bonds was measured and dropped: it turned those aromaticity failures into dead ends (27%) and left the
candidates where they were (54.9%); steering the model needs a global count of the aromatic bonds still
needed against those still possible.

What each token is (atom of which element, bond, ring digit, branch; charge, bond capacity) is
:mod:`engine.model.safe_grammar`; this module tracks the rows and builds their masks.

Speed: rows that drew the same prefix share one mask (:class:`FormulaConstraint` keeps a trie of the
prefixes), and each row's helpers are memoised within one :meth:`_Row.allowed` call; the masks cost
~0.05 s per spectrum at B=100 (``benchmarks/bench_sampling.py --decoding``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from engine.chem.formula import ELEMENT_INDEX, ELEMENTS
from engine.model.safe_grammar import ATOM, BOND, CLOSE, DIGIT, DOT, HYPERVALENT, OPEN, SafeGrammar
from engine.timing import staged

START = -1  # the "previous token" of a row that has drawn nothing yet

DEAD_END = "\x00dead-end"  # suffix of a constrained sample that ran out of legal tokens (counted, never decoded)

_C, _N = ELEMENT_INDEX["C"], ELEMENT_INDEX["N"]


def rdbe(formula_vec) -> int:
    """Rings plus double bonds of a formula (C, Si tetravalent; N, P, As, B trivalent; halogens and H
    monovalent; O, S, Se divalent), rounded down."""
    n = dict(zip(ELEMENTS, (int(x) for x in formula_vec)))
    twice = 2 + 2 * (n["C"] + n["Si"]) + n["N"] + n["P"] + n["As"] + n["B"] - n["H"] - n["F"] - n["Cl"] - n["Br"] - n["I"]
    return twice // 2


class _Row:
    """Decoding state of one sample."""

    __slots__ = ("budget", "available", "atoms_left", "supply", "prev", "pending", "bond_after_atom", "stack",
                 "open", "cur", "parent", "cap", "hyper", "pairs", "frag", "uf", "charge", "unsat", "rdbe", "n_arom",
                 "ncomp", "n_arom_other", "aromatic", "loose", "_memo", "open_orders", "_bonus")

    def __init__(self, budget: list[int], element_capacity: list[int], max_unsat: int):
        self.budget = budget
        self.unsat = 0  # rings + double bonds so far (a lower bound of the molecule's)
        self.loose = 0  # double-bond orders to S, P, Se, As so far: not in ``unsat`` (S=O), but C=S counts in RDBE
        self.rdbe = max_unsat  # the formula's rings + double bonds
        self.n_arom = 0  # aromatic carbons so far
        self.ncomp = 0  # connected components (fragments not yet joined by a digit)
        self.n_arom_other = 0  # aromatic atoms other than carbon so far
        self.aromatic: list[int] = []  # per atom: 0 aliphatic, 1 aromatic, 2 aromatic carbon counted in n_arom
        self.hyper: list[bool] = []  # atom is S, P, Se or As
        self.supply = sum(n * c for n, c in zip(budget, element_capacity))  # bond orders the atoms left can take
        self.available = sum(1 << e for e, n in enumerate(budget) if n > 0)
        self.atoms_left = sum(budget)
        self.prev = START
        self.pending = 0  # order of the bond token just drawn (0: none, the next bond is single or aromatic)
        self.bond_after_atom = False  # that bond follows an atom or digit (so a digit may follow it)
        self.stack: list[int] = []  # branch points of open branches
        self.open: dict[int, tuple[int, int, int]] = {}  # open digit -> (atom that opened it, its fragment, order)
        self.open_orders = 0  # bond orders the open digits reserve (an unspecified order counts 1)
        self.cur = -1  # index of the atom the next bond attaches to
        self.parent: list[int] = []  # chain neighbour of each atom (-1: first atom of a fragment)
        self.cap: list[int] = []  # bond orders each atom can still take
        self.pairs: set[tuple[int, int]] = set()  # atom pairs joined by a ring / attachment bond
        self.frag = -1  # fragment of the current atom
        self.uf: list[int] = []  # union-find over fragments
        self.charge = 0
        self._memo: dict = {}  # results of the helpers within one allowed() call
        self._bonus = 0  # set by allowed(), read by _reachable

    def _root(self, f: int) -> int:
        while self.uf[f] != f:
            self.uf[f] = self.uf[self.uf[f]]
            f = self.uf[f]
        return f

    def _ring_order(self, digit: int) -> int:
        order = self.open[digit][2]
        order = order if order > self.pending else self.pending
        return order if order > 1 else 1

    def closable(self, digit: int) -> bool:
        opener, _, order = self.open[digit]
        cur = self.cur
        if opener == cur or opener == self.parent[cur]:
            return False
        if self.pending and order and self.pending != order:  # C=1...C#1
            return False
        ring_order = self._ring_order(digit)
        if self.cap[cur] < ring_order or self.cap[opener] < ring_order - (order or 1):  # C1...C=1: the opener
            return False  # reserved one bond order, a double closure takes one more from it
        return ((opener, cur) if opener < cur else (cur, opener)) not in self.pairs

    def component_has_open_digit(self) -> bool:
        m = self._memo.get(2)
        if m is None:
            root = self._root(self.frag)
            m = self._memo[2] = any(self._root(f) == root for _, f, _ in self.open.values())
        return m

    def _opened_here(self) -> bool:
        return any(opener == self.cur for opener, _, _ in self.open.values())

    def _count_aromatic_carbon(self, delta: int) -> None:
        """Aromatic carbons bring one Kekulé double bond per two; keep ``unsat`` in step."""
        before = self.n_arom // 2
        self.n_arom += delta
        self.unsat += self.n_arom // 2 - before

    def _unsat_ok(self, unsat: int, n_open: int, ncomp: int, atoms_left: int) -> bool:
        """Rings + double bonds so far, plus the rings the open digits must still make, within the RDBE?
        Closures beyond the joins that merge the components (those there are and one per possible new
        fragment) close rings."""
        forced = n_open - (ncomp - 1) - atoms_left
        return unsat + (forced if forced > 0 else 0) <= self.rdbe

    def _reachable(self, dbe: int, c_exist: int, c_new: int, n_new: int, open_orders: int, ncomp: int) -> bool:
        """Can the molecule still reach the formula's rings + double bonds? The bond orders still to come
        are at most (free valence of the reachable atoms + of the atoms left + open ring bonds) / 2; each
        new atom needs one of them and each join of two components another."""
        dbe += self._bonus  # double bonds that use no valence in this model (see allowed())
        if not n_new and not open_orders:
            return dbe >= self.rdbe  # no atom and no ring bond to come: no bond can still form
        return dbe + (c_exist + c_new + open_orders) // 2 - n_new - (ncomp - 1) >= self.rdbe

    def _stack_cap(self) -> int:
        """Bonds the branch points of open branches can still take (reachable after ``)``)."""
        key = (3, len(self.stack))  # the stack moves only by ``(`` pushed for a look ahead
        m = self._memo.get(key)
        if m is None:
            m = self._memo[key] = sum(self.cap[a] for a in self.stack)
        return m

    def _demand(self, atoms_left: int, open_orders: int, n_open: int) -> int:
        """Bond orders the atoms left must take at least: one to its parent each, plus every open ring bond;
        an atom that starts a ``.`` fragment is attached by the ring bond it closes, so up to one per open
        digit is counted once."""
        return atoms_left + open_orders - (atoms_left if atoms_left < n_open else n_open)

    def _feasible(self, extra_open: int = 0) -> bool:
        """Can the atoms left still take the bond orders they must (:meth:`_demand`)?"""
        n_open = len(self.open) + (1 if extra_open else 0)
        return self.supply >= self._demand(self.atoms_left, self.open_orders + extra_open, n_open)

    def _atoms(self, g: SafeGrammar, bond: int) -> int:
        """Atom tokens that may bond to the current atom with order ``bond`` (0: first atom of a fragment)."""
        key = (0, bond, len(self.stack))  # the state moves only by ``(`` pushed for a look ahead
        m = self._memo.get(key)
        if m is None:
            m = self._memo[key] = self._atoms_uncached(g, bond)
        return m

    def _atoms_uncached(self, g: SafeGrammar, bond: int) -> int:
        if bond and self.cap[self.cur] < bond:
            return 0
        need = max(bond, 1) if bond else 0
        open_orders = self.open_orders
        if self.atoms_left == 1 and self.open:
            # the last atom must close every open digit: not on its own neighbour, with room for the bonds
            if bond and self._opened_here():
                return 0
            need = bond + open_orders
        atoms_after = self.atoms_left - 1
        # free valence of the branch points after this bond (the current atom may be one: ``C(=O``)
        kept = self._stack_cap() - (bond * self.stack.count(self.cur) if bond else 0)
        if bond and not kept and (atoms_after or self.ncomp > 1) and not self.component_has_open_digit():
            need = max(need, bond + 1)  # the rest can only attach to (or join) this component through the new atom
        ncomp_after = self.ncomp + (0 if bond else 1)
        extra = bond - 1 if bond > 1 and not self.hyper[self.cur] else 0
        aromatic_extra = extra  # for an aromatic atom after this bond
        if extra and self.aromatic[self.cur] == 2:
            # c(=O): the aromatic carbon's Kekulé double bond is this one, so it no longer counts in n_arom
            extra += (self.n_arom - 1) // 2 - self.n_arom // 2
        if not self._unsat_ok(self.unsat + extra, len(self.open), ncomp_after, atoms_after):
            if not extra or not self._unsat_ok(self.unsat, len(self.open), ncomp_after, atoms_after):
                return 0
            available = self.available & g.hyper_elements  # only an S=O-like bond fits
        else:
            available = self.available
        # free valence still reachable after this atom: the branch points' (``kept``), its own after its bond
        # (the current atom is left behind unless it is a branch point) and the atoms left's; what the new
        # atom keeps the atoms left lose, so the test is the same whatever the element
        if not self._reachable(self.unsat + extra, kept - bond, self.supply, atoms_after, open_orders, ncomp_after):
            return 0
        n_open, supply = len(self.open), self.supply
        for cap, elements in g.capacity_groups:  # drop elements after which the atoms left could not take
            if available & elements:  # the bonds still needed (elements of one capacity alike)
                left_open = open_orders - (cap - bond if cap > bond else 0)  # the open ring bonds it cannot close
                left_open = left_open if left_open > 0 else 0
                if supply - cap < self._demand(atoms_after, left_open, min(n_open, left_open)):
                    available &= ~elements
        m = g.atoms(available, need, self.charge, atoms_after)
        if aromatic_extra != extra and not self._unsat_ok(self.unsat + aromatic_extra, len(self.open), ncomp_after,
                                                          atoms_after):
            m &= ~g.aromatic_atoms
        exocyclic = bond > 1 and not (self.cur >= 0 and self.aromatic[self.cur])  # O=c: this carbon's own double bond
        if (self.n_arom % 2 == 1 and not exocyclic
                and not self._unsat_ok(self.unsat + aromatic_extra + 1, len(self.open), ncomp_after, atoms_after)):
            m &= ~g.aromatic_carbon
        return m

    def allowed(self, g: SafeGrammar, left: int) -> int:
        """Bit set of the tokens this row may draw with ``left`` tokens left (this one included)."""
        self._memo.clear()
        # double bonds that use no valence in this model, for _reachable: carbons still to place may be
        # aromatic, and aromatic N/P placed may be pyridine-like (their double bonds are not in ``unsat``);
        # double bonds to S, P... may count in the RDBE (C=S) or not (S=O)
        self._bonus = (self.budget[_C] + self.budget[_N] + self.n_arom_other + self.n_arom % 2) // 2 + self.loose
        prev = self.prev
        if prev == START or prev == DOT:
            return self._atoms(g, 0)
        slack = left - 1 - (self.atoms_left + len(self.open) + len(self.stack) + 1)  # spare tokens after this
        cap = self.cap[self.cur]
        last_blocked = self.atoms_left == 1 and self._opened_here()  # the last atom cannot be a neighbour
        if prev == OPEN:
            m = self._atoms(g, 1)
            if slack >= 0 and not last_blocked:
                m |= self._bonds(g, cap, digits=False, slack=slack)
            return m
        if prev == BOND:
            m = self._atoms(g, self.pending)
            if self.bond_after_atom:
                m |= self._digits(g, slack)
            return m
        after_atom = prev == ATOM or prev == DIGIT  # else prev == CLOSE
        m = self._atoms(g, 1)
        if not self.atoms_left and after_atom and self.open and slack >= 0 and cap >= 1:
            m |= self._bonds(g, cap, digits=True, slack=slack)  # a bond a ring closure takes: C=1, c-1
        if self.atoms_left and slack >= 0:
            if not last_blocked and cap >= 1:
                m |= self._bonds(g, cap, digits=after_atom, slack=slack)
                # past the branch point no digit closes on it, and the branch's atoms join this component
                if (slack >= 1 and self._feasible()
                        and self._unsat_ok(self.unsat, len(self.open), self.ncomp, self.atoms_left - 1)
                        and self._branch_can_start(g, cap, slack - 2)):
                    m |= g.open
            if (not self.stack and self.component_has_open_digit() and self._feasible()
                    and self._reachable(self.unsat, 0, self.supply, self.atoms_left, self.open_orders, self.ncomp)):
                m |= g.dot
        if after_atom:
            m |= self._digits(g, slack)
        if self.stack:
            # no digit may follow ``)``: the atoms left must close what is open, and have somewhere to attach
            stack_cap = self._stack_cap()
            if (self._feasible() and (not self.atoms_left or stack_cap + len(self.open))
                    and self._reachable(self.unsat, stack_cap, self.supply, self.atoms_left, self.open_orders,
                                        self.ncomp)):
                m |= g.close
        elif not self.atoms_left and not self.open and not self.charge:
            m |= g.eos
        return m

    def _branch_can_start(self, g: SafeGrammar, cap: int, slack: int) -> bool:
        """Would ``(`` leave a legal token? The next step's own tests, with the branch point pushed;
        ``slack`` is the next step's."""
        if self._atoms(g, 1):  # pushing a branch point only adds reachable valence: an atom stays legal
            return True
        self.stack.append(self.cur)
        try:
            last_blocked = self.atoms_left == 1 and self._opened_here()
            return bool(self._atoms(g, 1)
                        or (slack >= 0 and not last_blocked and self._bonds(g, cap, digits=False, slack=slack)))
        finally:
            self.stack.pop()

    def _bonds(self, g: SafeGrammar, cap: int, digits: bool, slack: int) -> int:
        """Bond tokens after which an atom (or, when ``digits``, a ring digit) can still follow: the same
        tests the next step applies, so a bond is never drawn into a dead end one token later."""
        m = 0
        pending = self.pending
        try:
            for o in range(1, min(cap, 4) + 1):
                if o > 1 and self.unsat + o - 1 > self.rdbe and not self.hyper[self.cur] and not (self.available & g.hyper_elements):
                    break
                self.pending = o
                if self._atoms(g, o) or (digits and self._digits(g, slack - 1)):
                    m |= g.bonds_of[o]
        finally:
            self.pending = pending
        return m

    def _digits(self, g: SafeGrammar, slack: int) -> int:
        key = (1, self.pending, slack >= 1, len(self.stack))  # only ``slack >= 1`` is read
        m = self._memo.get(key)
        if m is None:
            m = self._memo[key] = self._digits_uncached(g, slack)
        return m

    def _digits_uncached(self, g: SafeGrammar, slack: int) -> int:
        m = 0
        n_open = len(self.open)
        cur, pending = self.cur, self.pending
        cap_cur = self.cap[cur]
        if (self.atoms_left and slack >= 1 and cap_cur >= max(pending, 1) and self._feasible(max(pending, 1))
                and self._unsat_ok(self.unsat, n_open + 1, self.ncomp, self.atoms_left)):
            m = g.all_digits & ~sum(g.digit_token.get(d, 0) for d in self.open)  # any digit not open now may open
        if not n_open:
            return m
        root = self._root(self.frag)
        stack_cap = self._stack_cap()
        open_orders = self.open_orders
        open_roots = None
        for d, (opener, frag, _) in self.open.items():
            tokens = g.digit_token.get(d, 0)
            if not tokens or not self.closable(d):
                continue
            order = self._ring_order(d)
            extra = order - 1 if order > 1 and not self.hyper[cur] and not self.hyper[opener] else 0
            other_root = self._root(frag)
            ring = other_root == root
            ncomp_after = self.ncomp - (not ring)
            ok = (self._unsat_ok(self.unsat + extra + ring, n_open - 1, ncomp_after, self.atoms_left)
                  and self._reachable(self.unsat + extra + ring, cap_cur - order + stack_cap, self.supply,
                                      self.atoms_left, open_orders - order, ncomp_after))
            if ok and (self.atoms_left or ncomp_after > 1) and cap_cur - order + stack_cap < 1:
                # what is left must still reach this component: through free valence on this atom or a branch
                # point, or another of its open digits
                if open_roots is None:
                    open_roots = [self._root(f) for _, f, _ in self.open.values()]
                ok = sum(r in (root, other_root) for r in open_roots) - 1 >= 1
            if ok:
                m |= tokens
        return m

    def advance(self, g: SafeGrammar, token: int) -> None:
        info = g.info[token]
        kind = info.kind
        if kind == ATOM:
            e = info.element
            self.budget[e] -= 1
            self.atoms_left -= 1
            if self.budget[e] == 0:
                self.available &= ~(1 << e)
            cap = info.capacity
            self.supply -= g.element_capacity[e]
            if self.prev == START or self.prev == DOT:
                self.ncomp += 1
                self.uf.append(len(self.uf))
                self.frag = len(self.uf) - 1
                self.parent.append(-1)
            exocyclic = False  # a double bond from an aromatic ring atom out to an aliphatic one (c(=O))
            if self.prev != START and self.prev != DOT:
                order = max(self.pending, 1)
                self.parent.append(self.cur)
                self.cap[self.cur] -= order
                cap -= order
                if order > 1 and not self.hyper[self.cur] and ELEMENTS[e] not in HYPERVALENT:
                    self.unsat += order - 1
                elif order > 1:
                    self.loose += order - 1
                exocyclic = order > 1 and bool(self.aromatic[self.cur]) != info.aromatic
                if exocyclic and self.aromatic[self.cur] == 2:  # that carbon's double bond is this one
                    self._count_aromatic_carbon(-1)
                    self.aromatic[self.cur] = 1
            if info.aromatic and e == _C and not exocyclic:
                self._count_aromatic_carbon(+1)
                self.aromatic.append(2)
            else:
                self.aromatic.append(1 if info.aromatic else 0)
                if info.aromatic and e != _C:
                    self.n_arom_other += 1
            self.hyper.append(ELEMENTS[e] in HYPERVALENT)
            self.cap.append(cap)
            self.cur = len(self.parent) - 1
            self.charge += info.charge
            self.pending = 0
        elif kind == BOND:
            self.bond_after_atom = self.prev == ATOM or self.prev == DIGIT
            self.pending = info.order
        elif kind == DIGIT:
            d = info.digit
            if d in self.open:
                order = self._ring_order(d)
                opener, frag, opened_order = self.open.pop(d)
                self.open_orders -= max(opened_order, 1)
                self.cap[opener] -= order - max(opened_order, 1)  # beyond what the opener reserved
                self.pairs.add((min(opener, self.cur), max(opener, self.cur)))
                self.cap[self.cur] -= order
                a, b = self._root(frag), self._root(self.frag)
                if a == b:  # a ring (a bond between fragments not yet joined only joins them)
                    self.unsat += 1
                else:
                    self.ncomp -= 1
                if order > 1 and not self.hyper[self.cur] and not self.hyper[opener]:
                    self.unsat += order - 1
                elif order > 1:
                    self.loose += order - 1
                self.uf[a] = b
            else:
                order = max(self.pending, 1)
                self.open[d] = (self.cur, self.frag, self.pending)
                self.open_orders += order
                self.cap[self.cur] -= order  # reserved for the ring bond
            self.pending = 0
        elif kind == OPEN:
            self.stack.append(self.cur)
        elif kind == CLOSE:
            self.cur = self.stack.pop()
        elif kind == DOT:
            self.cur = -1
        self.prev = kind


class FormulaConstraint:
    """Masks for a batch of rows that must all spell one formula; rows can be dropped (``select``)."""

    def __init__(self, grammar: SafeGrammar, formula_vec: np.ndarray, n_rows: int):
        vec = np.asarray(formula_vec, dtype=np.int64)
        budget = [int(n) for n in vec]
        budget[ELEMENT_INDEX["H"]] = 0  # hydrogens are checked on the finished molecule
        self.grammar = grammar
        max_unsat = rdbe(vec)
        self.rows = [_Row(list(budget), grammar.element_capacity, max_unsat) for _ in range(n_rows)]
        # rows that drew the same tokens are in the same state and get the same mask: each row's prefix is a
        # node of a trie of the prefixes drawn so far (a quarter of the rows share one at B=100)
        self._prefix = [0] * n_rows
        self._trie: dict[tuple[int, int], int] = {}

    @staged("formula masks")
    def allowed(self, left: int) -> torch.Tensor:
        """(rows, vocab) bool: tokens each row may draw, with ``left`` tokens left including this one."""
        g = self.grammar
        masks: dict[int, int] = {}
        out = []
        for r, node in zip(self.rows, self._prefix):
            m = masks.get(node)
            if m is None:
                m = masks[node] = r.allowed(g, left)
            out.append(m)
        return g.to_tensor(out)

    @staged("formula masks")
    def advance(self, tokens: Sequence[int]) -> None:
        g, trie = self.grammar, self._trie
        for i, (r, t) in enumerate(zip(self.rows, tokens, strict=True)):
            r.advance(g, t)
            self._prefix[i] = trie.setdefault((self._prefix[i], t), len(trie) + 1)

    def select(self, keep: Sequence[int]) -> None:
        """Keep rows ``keep`` (indices into the current rows), in that order."""
        self.rows = [self.rows[i] for i in keep]
        self._prefix = [self._prefix[i] for i in keep]


def first_masked(grammar: SafeGrammar, formula_vec: np.ndarray, token_ids: Sequence[int]) -> int | None:
    """Index of the first of ``token_ids`` (what is drawn after ``<bos>``, ``<eos>`` included) that the
    masks forbid for ``formula_vec`` with exactly those tokens left, or None: a string the sampler can draw."""
    constraint = FormulaConstraint(grammar, formula_vec, 1)
    for step, token in enumerate(token_ids):
        if not bool(constraint.allowed(len(token_ids) - step)[0, token]):
            return step
        constraint.advance([token])
    return None
