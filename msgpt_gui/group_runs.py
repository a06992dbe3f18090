"""Compound groups in a run (adduct partners, engine.spectra.adduct_groups; :class:`GroupRunsMixin` of
:class:`~msgpt_gui.run_controller.RunController`): the members of a group that decide together, their one job (one
formula ranking over all of them, the lead run), the group's decision shown on every member, and the members that
follow their lead's answer as it runs. Imports the Qt-free :mod:`msgpt_gui.logic`; the controller holds the state."""

from __future__ import annotations

from . import qtcompat  # noqa: F401  (first: guards against a PySide6 6.12.0 refcount bug)

from .logic.entries import SpectrumEntry, Status
from .logic.jobs import LIBRARY_RUNS, FormulaJob, GroupDecided, run_items_of


class GroupRunsMixin:
    """The compound-group part of the run controller (its ``spectra`` model, ``entry_updated`` signal, ``libraries``,
    :meth:`new_keys` and ``_followers``: a group's lead key -> the members showing its answer)."""

    def _group_members(self, e: SpectrumEntry) -> list[SpectrumEntry]:
        """The listed entries of ``e``'s compound group (engine.spectra.adduct_groups) when the group can decide
        together: every member listed, none given a formula or ion type by hand; else [] (``e`` runs alone)."""
        f = e.feature
        if f is None or f.group is None:
            return []
        ids = {m.feature_id for m in f.group.members}
        members = [x for x in self.spectra.entries if x.feature is not None and x.feature.id in ids
                   and x.spectrum is not None and x.spectrum.source == e.spectrum.source]
        if len(members) != len(ids) or any(x.spectrum.formula or x.spectrum.adduct for x in members):
            return []
        return members

    def _group_job(self, e: SpectrumEntry, members: list[SpectrumEntry], top_k: int) -> FormulaJob:
        """The job of a compound group: its members queued, one formula ranking over all of them, its lead run
        (:func:`msgpt_gui.logic.jobs._formula_runs`), the others showing the lead's answer (GroupDecided)."""
        for m in members:
            m.reset_results()
            m.status, m.reason = Status.QUEUED, ""
            self.spectra.entry_changed(m.key)
        return FormulaJob(e.key, e.formula_base(), e.ms1, None, tuple(self.new_keys(top_k)), self.libraries,
                          tuple(self.new_keys(LIBRARY_RUNS)) if self.libraries else (),
                          run_items=run_items_of(self.spectra.entries, e),
                          group=tuple((m.key, m.feature, m.formula_base()) for m in members))

    def follow_leads(self, followers: dict[int, tuple[int, ...]]) -> None:
        """Members that show their group lead's answer (a reopened project's groups, lead key -> member keys): their
        rows follow the lead when it runs again."""
        self._followers.update(followers)

    def _sync_followers(self, lead: SpectrumEntry) -> None:
        """The members of ``lead``'s compound group that show its answer: their status and rows follow it."""
        for key in self._followers.get(lead.key, ()):
            m = self.spectra.entry(key)
            if m is not None and m.group_lead is lead:
                m.sync_status()
                self.spectra.entry_changed(key)
                self.entry_updated.emit(key, "result")

    def _group_decided(self, ev: GroupDecided) -> None:
        """A group's decision: every member keeps it, the lead runs and every other member shows its answer."""
        lead = self.spectra.entry(ev.lead_key)
        self._followers[ev.lead_key] = tuple(k for k in ev.member_keys if k != ev.lead_key)
        for key in ev.member_keys:
            m = self.spectra.entry(key)
            if m is None:
                continue
            m.group_decision, m.group_lead, m._group_view = ev.decision, (None if m is lead else lead), None
            if m is not lead:
                m.sync_status()
            self.spectra.entry_changed(key)
            self.entry_updated.emit(key, "result")
