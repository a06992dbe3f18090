"""A feature's compound group in a project file (:mod:`engine.files.project` describes the format): the
:class:`~engine.spectra.adduct_groups.CompoundGroup` written with its feature (FEATURE's optional ``"group"``) and
read back, and the features' partners linked again once a project's entries are read (each member's ``partners``
are the other entries' features of its run and group). A project without groups reads as before; a reader that
does not know the key ignores it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from engine.files.project_arrays import number as _num
from engine.spectra.adduct_groups import (
    CompoundGroup,
    GroupMember,
    PairEvidence,
    with_partners,
)

MEMBER_KEYS = ("feature_id", "ion_type", "precursor_mz", "apex_rt")
EVIDENCE_KEYS = ("a", "b", "ion_a", "ion_b", "neutral_mass", "delta_rt_s", "mass_error_da", "correlation",
                 "shared_scans")


def group_json(g: CompoundGroup) -> dict:
    """GROUP: ``{"id", "neutral_mass", "members": [{"feature_id", "ion_type", "precursor_mz", "apex_rt"}, ...],
    "evidence": [PairEvidence's fields, ...]}``."""
    return {"id": g.id, "neutral_mass": _num(g.neutral_mass),
            "members": [{"feature_id": m.feature_id, "ion_type": m.ion_type, "precursor_mz": _num(m.precursor_mz),
                         "apex_rt": _num(m.apex_rt)} for m in g.members],
            "evidence": [{k: (_num(v) if isinstance(v, float) else v) for k, v in dataclasses.asdict(e).items()}
                         for e in g.evidence]}


def read_group(d, number: Callable[[object, str], float], where: str) -> CompoundGroup:
    """The group :func:`group_json` wrote (``number(x, where)``: a JSON number, or "nan"/"inf", as a float); raises
    KeyError, TypeError or ValueError for a damaged one."""
    if not isinstance(d, dict) or not isinstance(d.get("members"), list) or not d["members"]:
        raise ValueError(f"{where} must be a compound group with members, got {d!r}")
    members = tuple(GroupMember(str(m["feature_id"]), str(m["ion_type"]),
                                number(m["precursor_mz"], f"{where}.members[{i}].precursor_mz"),
                                number(m["apex_rt"], f"{where}.members[{i}].apex_rt"))
                    for i, m in enumerate(d["members"]))
    evidence = []
    for i, e in enumerate(d.get("evidence") or []):
        at = f"{where}.evidence[{i}]"
        evidence.append(PairEvidence(
            int(e["a"]), int(e["b"]), str(e["ion_a"]), str(e["ion_b"]),
            *(number(e[k], f"{at}.{k}") for k in ("neutral_mass", "delta_rt_s", "mass_error_da", "correlation")),
            int(e["shared_scans"])))
    return CompoundGroup(str(d["id"]), number(d["neutral_mass"], f"{where}.neutral_mass"), members, tuple(evidence))


def link_partners(entries: Sequence) -> None:
    """Give the features of the project entries ``entries`` (top level) their partners: per run (source file) and
    group, the other entries' features (:func:`~engine.spectra.adduct_groups.with_partners`)."""
    runs: dict[str, list] = {}
    for e in entries:
        f = e.feature
        if f is not None and f.group is not None:
            runs.setdefault(f.spectrum.source, []).append(e)
    for members in runs.values():
        for e, f in zip(members, with_partners([e.feature for e in members]), strict=True):
            e.feature = f
