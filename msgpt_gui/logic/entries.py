"""The app's document, without Qt: one entry per record of the opened files, what stops it from running,
the IDs it is listed under, and the filter of the spectra list.

An LC-MS/MS run is listed by precursor feature (:mod:`engine.spectra.features`): one entry per feature, holding its
consensus spectrum, with the feature's scans as child entries when there are several. A spectrum without a
formula runs for its best formula candidates (:mod:`msgpt_gui.logic.formulas`): each becomes a *formula run*, an
entry of its own that is not listed, owned by the listed one, which shows their candidates as one list.

An entry whose record was skipped by the reader still holds the record's peaks when it had any
(:class:`engine.spectra.spectrum.SkippedRecord`), so it is listed and plotted; typing its precursor m/z
(:mod:`msgpt_gui.logic.editing`) makes it a spectrum that can run.

Filter syntax (:class:`SpectraFilter`), terms separated by spaces, all of which must match:

* ``163.1``: a number is a precursor m/z starting with these digits (163.1000 to 163.1999...),
  or text in the ID / name;
* ``mz:163.05-163.15`` (also ``m/z:``) a precursor m/z range; ``mz:163.1`` as above;
* ``rt:4-5`` a retention-time range in minutes (``rt:4.2``: 4.2 to 4.3 min);
* anything else: text in the ID, name, adduct, formula, status, the app's notes or yours (case-insensitive);
  ``"no fragments"`` in quotes is one term.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.elucidation.pipeline import SpectrumResult, SpectrumSession
from engine.spectra.features import Feature
from engine.spectra.handoff import feature_abundance
from engine.spectra.spectrum import NO_FRAGMENTS_NOTE, PRECURSOR_DECIMALS_KEY, SkippedRecord, Spectrum, has_fragments

from .formulas import combine_results, formula_base, readiness, table_key
from .libraries import library_refs

NO_PRECURSOR = "no precursor m/z"  # how the reader's reason for such a record starts


class Status:
    NOT_RUN = "not run"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    PARTIAL = "cancelled (partial)"  # a deep search cancelled: it keeps the candidates it had found
    FAILED = "failed"


@dataclass(eq=False)
class SpectrumEntry:
    """One record of an opened file and what the app knows about it (main thread only)."""

    key: int
    spectrum: Spectrum | None  # None for a record the reader skipped (until its precursor m/z is typed)
    skipped: SkippedRecord | None = None
    original: Spectrum | None = None  # as read, before the user set a formula/adduct/precursor m/z
    status: str = Status.NOT_RUN
    reason: str = ""  # why it was skipped / failed
    result: SpectrumResult | None = None  # the last complete result
    live: SpectrumResult | None = None  # a partial ranking while it runs
    previous: SpectrumResult | None = None  # the complete result before the current one (rank moves)
    session: SpectrumSession | None = None  # its posterior and sample pool, kept across runs
    model_checksum: str | None = None  # the model the session (or the result, read from a project) belongs to
    user_notes: str = ""  # the user's notes on this spectrum (saved in projects, found by the filter)
    drawn_samples: tuple = ()  # samples a project kept for the result: put back into the next session (new_session)
    library_refs: tuple = ()  # LibraryRef of the libraries the session (and so the result) searched
    # LC-MS runs: precursor features and their scans
    feature: Feature | None = None  # the precursor feature this entry lists (its spectrum is the consensus)
    ms1: object | None = None  # MS1Evidence of the precursor (a feature's, also given to its scans)
    parent_key: int | None = None  # a scan listed under its feature
    children: list[SpectrumEntry] = field(default_factory=list)  # the scans of a feature of several scans
    # formula candidates
    formula_table: object | None = None  # the FormulaTable of formula_base(), once ranked
    formula_table_key: tuple | None = None  # table_key() of the spectrum it was ranked for
    formula_runs: list[SpectrumEntry] = field(default_factory=list)  # one entry per formula Run took (not listed)
    owner_key: int | None = None  # a formula run: the key of the listed entry it belongs to
    candidate: object | None = None  # a formula run: its FormulaCandidate
    _combined: tuple | None = field(default=None, repr=False)  # (the runs' results, their ranking): :attr:`shown`
    ion_note: str = ""  # Run took other ion types than the best formula's (logic.formulas.unsupported_ion_note)
    # compound groups (engine.spectra.adduct_groups): what the group decided (engine.formulas.groups.GroupDecision),
    # and, for a member that is not the one elucidated, the entry of the group's lead: it shows the lead's answer
    group_decision: object | None = None
    group_lead: SpectrumEntry | None = None
    _group_view: tuple | None = field(default=None, repr=False)  # (the lead's shown, it as this member's)

    @classmethod
    def from_item(cls, key: int, item: Spectrum | SkippedRecord) -> SpectrumEntry:
        if isinstance(item, SkippedRecord):
            return cls(key, None, skipped=item, status=Status.SKIPPED, reason=item.reason)
        return cls(key, item, original=item)

    @classmethod
    def from_feature(cls, key: int, feature: Feature, new_key: Callable[[], int]) -> SpectrumEntry:
        """The entry of a precursor feature; a feature of several scans lists them as children (keys from
        ``new_key``)."""
        entry = cls(key, feature.spectrum, original=feature.spectrum, feature=feature, ms1=feature.ms1)
        if feature.n_scans > 1:
            entry.children = [cls(new_key(), scan, original=scan, parent_key=key, ms1=feature.ms1)
                              for scan in feature.scans]
        return entry

    @property
    def id(self) -> str:
        return self.spectrum.id if self.spectrum is not None else self.skipped.spectrum_id

    @property
    def display_id(self) -> str:
        """``F0007`` for a feature (``F0007 · scan=621`` when it is one scan; a tool's feature export's ID, ``1``, as
        written, not ``1 · 1``), compact scan IDs otherwise."""
        if self.feature is not None:
            short = self.feature.id.split("_", 1)[0]
            scan = compact_id(self.feature.scans[0].id) if self.feature.n_scans == 1 else short
            return short if scan == short else f"{short} · {scan}"
        return compact_id(self.id)

    @property
    def n_scans(self) -> int | None:
        """MS2 scans merged into this entry's spectrum (a feature's), None for other entries."""
        return self.feature.n_scans if self.feature is not None else None

    @property
    def rt_range(self) -> tuple[float, float] | None:
        """First and last retention time (s) of a feature's scans, None for other entries."""
        f = self.feature
        return (f.rt_min, f.rt_max) if f is not None and f.rt_min is not None else None

    @property
    def source(self) -> str:
        return self.spectrum.source if self.spectrum is not None else self.skipped.source

    @property
    def record_index(self) -> int:
        return self.spectrum.index if self.spectrum is not None else self.skipped.index

    @property
    def name(self) -> str:
        return self.spectrum.metadata.get("name", "") if self.spectrum is not None else ""

    @property
    def precursor_mz(self) -> float | None:
        return self.spectrum.precursor_mz if self.spectrum is not None else None

    @property
    def abundance(self) -> float | None:
        """The largest abundance over the samples (a quant table or the file, engine.spectra.handoff), or None."""
        return feature_abundance(self.spectrum.metadata)[0] if self.spectrum is not None else None

    @property
    def abundance_samples(self) -> dict[str, float]:
        return feature_abundance(self.spectrum.metadata)[1] if self.spectrum is not None else {}

    @property
    def retention_time(self) -> float | None:
        """Seconds, or None."""
        if self.spectrum is not None:
            return self.spectrum.retention_time
        return self.skipped.retention_time if self.skipped is not None else None

    @property
    def n_peaks(self) -> int | None:
        if self.spectrum is not None:
            return self.spectrum.n_peaks
        return int(self.skipped.mz.size) if self.skipped is not None and self.skipped.has_peaks else None

    @property
    def plottable(self) -> bool:
        """Has peaks to show (every spectrum; a skipped record when its peaks could be read)."""
        return self.spectrum is not None or (self.skipped is not None and self.skipped.has_peaks)

    @property
    def shown(self) -> SpectrumResult | None:
        """What the candidate table shows: the live ranking while running, else the last result; after a run of
        several formulas, the feature's ranking of their candidates (:func:`~msgpt_gui.logic.formulas.combine_results`,
        made again only when a run's result changes: the spectra list asks for it on every paint)."""
        if self.group_lead is not None:  # the group's answer, as this member's (its id, ion type and precursor)
            lead = self.group_lead.shown
            cached = self._group_view
            if cached is None or cached[0] is not lead:
                self._group_view = cached = (lead, None if lead is None else self._as_member(lead))
            return cached[1]
        if self.formula_runs:
            parts = tuple(r.shown for r in self.formula_runs)
            cached = self._combined
            if cached is None or len(cached[0]) != len(parts) or any(a is not b for a, b in zip(cached[0], parts)):
                self._combined = cached = (parts, combine_results(parts))
            return cached[1]
        return self.live if self.live is not None else self.result

    def _as_member(self, result: SpectrumResult) -> SpectrumResult:
        from engine.formulas.groups import as_member_result

        return as_member_result(result, self.feature, self.group_decision)

    @property
    def group_label(self) -> str:
        """``G0001 [M+Na]+`` for a member of a compound group, else empty."""
        f = self.feature
        return f"{f.group.id} {f.ion_type_in_group}" if f is not None and f.group is not None else ""

    def group_text(self) -> str:
        """The Group column's tooltip: the group's members, and whose answer this member shows."""
        f = self.feature
        if f is None or f.group is None:
            return ""
        g = f.group
        members = "\n".join(f"  {m.ion_type} {m.feature_id.split('_', 1)[0]} (m/z {m.precursor_mz:.4f})"
                            for m in g.members)
        text = (f"Compound group {g.id}: ions of one compound of neutral mass {g.neutral_mass:.4f} (same apex, m/z of "
                f"two ion types, MS1 traces that rise and fall together):\n{members}")
        d = self.group_decision
        if d is not None:
            lead = d.lead_id.split("_", 1)[0]
            which = "this is it" if self.group_lead is None else "this member shows its answer"
            text += (f"\nRun ranked one formula over all of them and elucidated {lead} ({d.ion_type(d.lead_id)}), "
                     f"the member whose fragments it explains best; {which}.")
        return text

    @property
    def baseline(self) -> SpectrumResult | None:
        """What the Change column compares :attr:`shown` with."""
        if self.group_lead is not None:
            return None
        if self.formula_runs:
            runs = self.formula_runs
            if any(r.live is not None for r in runs):
                return combine_results([r.result for r in runs])
            return combine_results([r.previous for r in runs]) if all(r.previous for r in runs if r.result) else None
        return self.result if self.live is not None else self.previous

    def results(self) -> list[SpectrumResult]:
        """The complete results of this entry: its own, or those of its formula runs (best formula first); a compound
        group's member that was not elucidated: its lead's, as its own."""
        if self.group_lead is not None:
            return [self._as_member(r) for r in self.group_lead.results()]
        if self.formula_runs:
            return [r.result for r in self.formula_runs if r.result is not None]
        return [self.result] if self.result is not None else []

    @property
    def has_results(self) -> bool:
        if self.group_lead is not None:
            return self.group_lead.has_results
        return self.result is not None or any(r.result is not None for r in self.formula_runs)

    @property
    def needs_formulas(self) -> bool:
        """Run ranks formula candidates first: the spectrum lacks a formula or an ion type."""
        s = self.spectrum
        return s is not None and (not s.formula or not s.adduct)

    def formula_base(self) -> Spectrum | None:
        """The spectrum the formula table is for (:func:`msgpt_gui.logic.formulas.formula_base`)."""
        return formula_base(self.spectrum, self.original) if self.spectrum is not None else None

    def cached_formulas(self):
        """The formula table of :meth:`formula_base` when it was ranked already, else None."""
        base = self.formula_base()
        if base is None or self.formula_table is None or self.formula_table_key != table_key(base):
            return None
        return self.formula_table

    def keep_formulas(self, base: Spectrum, table) -> None:
        self.formula_table, self.formula_table_key = table, table_key(base)

    def sync_status(self) -> None:
        """A listed entry with formula runs: its status follows theirs (running while one is, done when one is); a
        compound group's member shows its lead's status."""
        if self.group_lead is not None:
            self.status, self.reason = self.group_lead.status, self.group_lead.reason
            return
        runs = self.formula_runs
        if not runs:
            return
        states = [r.status for r in runs]
        if any(s in (Status.RUNNING, Status.QUEUED) for s in states):
            self.status, self.reason = Status.RUNNING, ""
        elif Status.PARTIAL in states:
            self.status, self.reason = Status.PARTIAL, ""
        elif Status.DONE in states or any(r.result is not None for r in runs):
            self.status, self.reason = Status.DONE, ""
        elif Status.CANCELLED in states:
            self.status, self.reason = Status.CANCELLED, ""
        elif Status.FAILED in states:
            failed = [r for r in runs if r.status == Status.FAILED]
            self.status = Status.FAILED
            self.reason = "; ".join(f"{r.spectrum.formula}: {r.reason}" for r in failed)
        else:
            self.status, self.reason = Status.NOT_RUN, ""

    def take_formula_run(self, spectrum: Spectrum) -> bool:
        """Picking a formula that already ran: the entry takes that run's result and samples (True); the other
        runs are dropped either way."""
        run = next((r for r in self.formula_runs if r.result is not None and r.spectrum.formula == spectrum.formula
                    and r.spectrum.adduct == spectrum.adduct), None)
        self.reset_results()
        if run is None:
            return False
        self.spectrum = run.spectrum
        self.result, self.session, self.model_checksum = run.result, run.session, run.model_checksum
        self.status, self.reason = Status.DONE, ""
        return True

    def formula_run_of(self, inchikey14: str | None) -> SpectrumEntry:
        """The formula run whose candidates hold ``inchikey14`` (else the first that has candidates, else the first
        run); for an entry with formula runs only."""
        for run in self.formula_runs:
            if inchikey14 and run.shown is not None and any(c.inchikey14 == inchikey14 for c in run.shown.candidates):
                return run
        return next((r for r in self.formula_runs if r.shown is not None), self.formula_runs[0])

    @property
    def precursor_typed(self) -> bool:
        """The precursor m/z was typed by the user (the file gave none, or another one)."""
        if self.spectrum is None:
            return False
        if self.original is None:
            return True
        return self.spectrum.precursor_mz != self.original.precursor_mz

    @property
    def overridden(self) -> bool:
        """Formula, adduct or precursor m/z differ from the file's (Reset goes back)."""
        if self.spectrum is None:
            return False
        if self.original is None:
            return True  # a skipped record made runnable
        return self.precursor_typed or (
            self.spectrum.formula != self.original.formula or self.spectrum.adduct != self.original.adduct
        )

    @property
    def untouched(self) -> bool:
        """As read from its file: never queued or run (no result, session or formula runs), nothing set by hand, no
        notes (its scans too)."""
        return (self.status in (Status.NOT_RUN, Status.SKIPPED) and self.session is None and not self.has_results
                and not self.formula_runs and not self.overridden and not self.user_notes.strip()
                and all(c.untouched for c in self.children))

    @property
    def no_fragments(self) -> bool:
        """Holds only the precursor (no peak below precursor m/z - 2 Da): candidates reflect the formula only."""
        return self.spectrum is not None and not has_fragments(self.spectrum)

    def blocker(self, supported_adducts: Sequence[str] | None = None) -> tuple[str, str] | None:
        """Why it cannot run as it is: (a short label for the Status column, the reason and the fix).

        ``supported_adducts``: the ion types of the loaded model (None: no model, not checked).
        """
        s = self.spectrum
        if s is None:
            if self.skipped is not None and self.skipped.has_peaks and self.reason.startswith(NO_PRECURSOR):
                return "needs m/z", (f"{self.reason}. Type the precursor m/z above the plot and press Apply "
                                     "to run it")
            return "skipped", self.reason
        ions = f" (this model supports {', '.join(supported_adducts)})" if supported_adducts else ""
        missing = [w for w, v in (("molecular formula", s.formula), ("ion type (adduct)", s.adduct)) if not v]
        if missing:
            why_not = readiness(s, supported_adducts)  # as for formula_base(): same ion types
            if why_not is None:
                return None  # Run ranks its formula candidates and takes the best (msgpt_gui.logic.formulas)
            label = "needs formula" if not s.formula else "needs adduct"
            return label, (f"no {' and no '.join(missing)}, and no formula candidates: {why_not}. Type "
                           f"{'them' if len(missing) > 1 else 'it'} below the spectrum and press Apply, or select "
                           f"several rows and press Apply to selected{ions}")
        if supported_adducts is not None and s.adduct not in supported_adducts:
            return "ion not supported", (f"adduct {s.adduct} is not supported by this model{ions}; choose one of "
                                         "those below the spectrum")
        return None

    def status_label(self, supported_adducts: Sequence[str] | None = None) -> str:
        """A few words for the Status column (the full reason is :meth:`status_text`)."""
        if self.status in (Status.NOT_RUN, Status.SKIPPED):
            blocked = self.blocker(supported_adducts)
            if blocked is not None:
                return blocked[0]
        return f"{self.status} ⚠" if self.ion_note and self.status == Status.DONE else self.status

    def status_text(self, supported_adducts: Sequence[str] | None = None) -> str:
        """The status with its reason and fix (the Status column's tooltip)."""
        if self.status in (Status.NOT_RUN, Status.SKIPPED):
            blocked = self.blocker(supported_adducts)
            if blocked is not None:
                return f"{blocked[0]}: {blocked[1]}"
        if self.status in (Status.SKIPPED, Status.FAILED) and self.reason:
            return f"{self.status}: {self.reason}"
        if self.status == Status.PARTIAL:
            return f"{self.status}: the deep search was cancelled; its candidates so far are kept"
        return f"{self.status} ({self.ion_note})" if self.ion_note else self.status

    def notes(self) -> list[str]:
        """What the app notes about the spectrum (the user's own notes are :attr:`user_notes`)."""
        return [NO_FRAGMENTS_NOTE] if self.no_fragments else []

    def new_session(self, bundle, libraries: Sequence = ()) -> SpectrumSession:
        """A session of the spectrum on ``bundle`` searching ``libraries`` (raises MsgptError when the model cannot
        run it). The samples drawn for the result are kept, so that re-tuning (or re-ranking with other
        libraries) draws only what they lack: those a project kept for this model, or those of the entry's
        session on this model."""
        libraries = tuple(libraries)
        drawn, self.drawn_samples = self.drawn_samples, ()
        r, old = self.result, self.session
        if not drawn and r is not None and old is not None and old.bundle is bundle and old.spectrum is self.spectrum:
            drawn = old.drawn_samples(r.params)  # the same spectrum, other libraries: what was drawn stays
        if drawn and r is not None and r.spectrum is self.spectrum and self.model_checksum == bundle.checksum:
            session = SpectrumSession(bundle, self.spectrum, posterior=r.posterior, libraries=libraries)
            session.add_drawn_samples(r.params, drawn)
        else:
            session = SpectrumSession(bundle, self.spectrum, libraries=libraries)
        self.library_refs = library_refs(libraries)
        return session

    def reset_results(self) -> None:
        """Forget results, samples and formula runs (new formula/adduct/precursor, another model); the notes and
        the formula table stay."""
        self.result = self.live = self.previous = None
        self.session = None
        self.model_checksum = None
        self.drawn_samples = ()
        self.formula_runs = []
        self.ion_note = ""
        self.group_decision = self.group_lead = self._group_view = None
        if self.spectrum is not None:
            self.status, self.reason = Status.NOT_RUN, ""


def format_mz(spectrum: Spectrum) -> str:
    """Precursor m/z with 4 decimals; a nominal one as written (``PEPMASS=163`` is not ``163.0000``)."""
    decimals = spectrum.metadata.get(PRECURSOR_DECIMALS_KEY, "")
    places = int(decimals) if decimals.isdigit() and int(decimals) <= 1 else 4
    return f"{spectrum.precursor_mz:.{places}f}"


# -- IDs ----------------------------------------------------------------------------------------------
# mzML native IDs name the instrument's counters; these stay the same along a run.
_CONSTANT_ID_KEYS = frozenset({"controllertype", "controllernumber", "sample", "period", "process", "function"})
_NATIVE_ID = re.compile(r"^(?:\s*[A-Za-z_]+=\S+)+\s*$")


def compact_id(native_id: str) -> str:
    """A short ID that tells scans apart: ``controllerType=0 controllerNumber=1 scan=621`` -> ``scan=621``,
    ``sample=1 period=1 cycle=812 experiment=3`` -> ``cycle=812 experiment=3``; other IDs unchanged."""
    if not _NATIVE_ID.match(native_id):
        return native_id
    parts = native_id.split()
    kept = [p for p in parts if p.split("=", 1)[0].lower() not in _CONSTANT_ID_KEYS]
    return " ".join(kept) if kept else native_id


# -- the filter of the spectra list -----------------------------------------------------------------------
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_RANGE = re.compile(rf"^({_NUMBER})?\s*(?:-|–|\.\.)\s*({_NUMBER})?$")
_SINGLE = re.compile(rf"^{_NUMBER}$")
_WORDS = re.compile(r'"([^"]+)"|(\S+)')
FILTER_PLACEHOLDER = "Filter: name, ID, formula · 163.1 (m/z) · mz:163-164 · rt:4-5 (min)…"
FILTER_TIP = (
    "Terms separated by spaces; a spectrum is shown when all of them match.<br>"
    "<b>163.1</b> — precursor m/z starting with these digits (or the number in an ID or name)<br>"
    "<b>mz:163.05-163.15</b> — precursor m/z range (<b>mz:163.1</b>: 163.1 to 163.2)<br>"
    "<b>rt:4-5</b> — retention time range in minutes (<b>rt:4.2</b>: 4.2 to 4.3 min; <b>rt:-2</b>: up to 2)<br>"
    "<b>abundance:100000-</b> — abundance range (a quantification table's largest sample; <b>ab:</b> for short)<br>"
    "anything else — text in the ID, name, adduct, formula, status or notes (e.g. <b>[M+H]+</b>, "
    "<b>\"needs formula\"</b>, <b>\"no fragments\"</b>: quotes keep words together)"
)


def _span(text: str) -> tuple[float, float] | None:
    """``4-5`` -> (4, 5); ``4.2`` -> [4.2, 4.3); ``-5`` -> (-inf, 5); None when it is not a number or range."""
    text = text.strip()
    if _SINGLE.match(text):
        decimals = len(text.split(".", 1)[1]) if "." in text else 0
        lo = float(text)
        return lo, lo + 10.0 ** -decimals
    m = _RANGE.match(text)
    if m is None or (m.group(1) is None and m.group(2) is None):
        return None
    lo = float(m.group(1)) if m.group(1) is not None else -math.inf
    hi = float(m.group(2)) if m.group(2) is not None else math.inf
    return (lo, hi) if lo <= hi else (hi, lo)


def _within(value: float | None, span: tuple[float, float], closed: bool) -> bool:
    if value is None:
        return False
    lo, hi = span
    return lo <= value <= hi if closed else lo <= value < hi


@dataclass(frozen=True)
class _Term:
    kind: str  # "mz", "rt" or "text"
    text: str
    span: tuple[float, float] | None = None
    closed: bool = True  # a range includes its end; a single value means [x, x + one unit of its last digit)


class SpectraFilter:
    """The parsed filter text (see the module notes); :meth:`matches` tests one entry."""

    def __init__(self, text: str = ""):
        self.text = text.strip()
        self.terms: list[_Term] = []
        for phrase, word in _WORDS.findall(self.text):
            if phrase:
                self.terms.append(_Term("text", phrase.lower()))
                continue
            low = word.lower()
            key, _, value = low.partition(":")
            if value and key in ("mz", "m/z", "rt", "abundance", "ab"):
                span = _span(value)
                if span is not None:
                    kind = {"rt": "rt", "abundance": "abundance", "ab": "abundance"}.get(key, "mz")
                    self.terms.append(_Term(kind, low, span, not _SINGLE.match(value) or kind == "abundance"))
                    continue
            if _SINGLE.match(low):
                self.terms.append(_Term("number", low, _span(low), False))
            else:
                self.terms.append(_Term("text", low))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def matches(self, entry: SpectrumEntry, supported_adducts: Sequence[str] | None = None) -> bool:
        if not self.terms:
            return True
        words = None
        for term in self.terms:
            if term.kind == "mz":
                ok = _within(entry.precursor_mz, term.span, term.closed)
            elif term.kind == "rt":
                rt = entry.retention_time
                ok = _within(None if rt is None else rt / 60.0, term.span, term.closed)
            elif term.kind == "abundance":
                ok = _within(entry.abundance, term.span, term.closed)
            else:
                if words is None:
                    words = _searchable(entry, supported_adducts)
                ok = term.text in words or (term.kind == "number" and _within(entry.precursor_mz, term.span, False))
            if not ok:
                return False
        return True


def _searchable(entry: SpectrumEntry, supported_adducts: Sequence[str] | None) -> str:
    s = entry.spectrum
    parts = [entry.id, entry.name, entry.status_label(supported_adducts), *entry.notes(), entry.user_notes]
    if entry.feature is not None:
        parts += [*entry.feature.scan_ids, entry.group_label]
    if s is not None:
        parts += [s.adduct or "", s.formula or ""]
    parts += [r.spectrum.formula or "" for r in entry.formula_runs]
    return "\n".join(parts).lower()
