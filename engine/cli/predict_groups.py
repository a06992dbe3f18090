"""``msgpt predict``'s compound groups (engine.spectra.adduct_groups): which features are decided with their group,
the group's decision and its lead's outcomes kept for the other members (:class:`_GroupCache`), and a member's
outcomes (the lead's, shown as its own). :mod:`engine.cli.predict` calls these and hands in how the lead is
elucidated; this module imports only the engine's formula groups and spectra (no other ``engine.cli`` module)."""

from __future__ import annotations

from collections.abc import Callable


class _GroupCache:
    """The decisions and the lead's outcomes of the compound groups under way (in one process), so that a group's lead
    is elucidated once for all its members; the oldest go first beyond ``size``."""

    def __init__(self, size: int = 64):
        self.size = size
        self.entries: dict = {}

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, value) -> None:
        self.entries[key] = value
        while len(self.entries) > self.size:
            self.entries.pop(next(iter(self.entries)))


def _grouped(item, args) -> bool:
    """Whether a feature is decided with its compound group: a member with all its partners, formulas ranked
    (``--formulas`` > 0) and neither formula nor ion type forced."""
    return (getattr(item, "group", None) is not None and bool(item.group_members) and args.formulas > 0
            and not args.formula and not args.adduct and not item.spectrum.formula)


def _elucidate_group_member(item, bundle, formula_config, run_lead: Callable, cache=None) -> list | None:
    """The outcomes of a compound group's member (engine.formulas.groups): the group ranks one neutral formula over
    all its members, its lead is elucidated with that ranking (``run_lead(lead, table, metadata)``: its outcomes), and
    every other member shows the lead's results as its own (its id, ion type and precursor). None when no formula
    explains every member (each is then run alone)."""
    from engine.formulas.groups import as_member_result, decide_group, lead_metadata
    from engine.formulas.recalibration import run_formula_config
    from engine.spectra.spectrum import SkippedRecord

    key = (item.spectrum.source, item.group.id)
    entry = cache.get(key) if cache is not None else None
    if entry is None:
        runnable = getattr(bundle, "runnable_adducts", bundle.supported_adducts)
        decision = decide_group(item.group_members, formula_config,
                                config_of=lambda s: run_formula_config(s, formula_config),
                                runnable=runnable, supported_adducts=runnable)
        outcomes = None
        if decision.joint.candidates:
            lead = decision.features[decision.lead_id]
            outcomes = run_lead(lead, decision.joint, lead_metadata(decision))
        entry = (decision, outcomes)
        if cache is not None:
            cache.put(key, entry)
    decision, outcomes = entry
    if outcomes is None:
        return None
    if item.id == decision.lead_id:
        return outcomes
    return [SkippedRecord(o.source, item.index, item.id, f"{o.reason} (the lead {decision.lead_id} of compound group "
                                                            f"{decision.group_id})")
            if isinstance(o, SkippedRecord) else as_member_result(o, item, decision) for o in outcomes]
