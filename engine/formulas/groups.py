"""The decision of a compound group (issue #56, item 2): one neutral formula for all members, each member's ion type,
and the member that is elucidated.

A compound group (:mod:`engine.spectra.adduct_groups`) fixes each member's ion type (the m/z pair that joined it).
:func:`decide_group` then

1. ranks each member's formulas with its ion type alone (:func:`engine.formulas.candidates.rank_formulas`, its
   own fragments and MS1 evidence);
2. joins them into one ranking of **neutral formulas**: a formula must explain every member's m/z with that
   member's ion type (its neutral mass within the member's tolerance), and its score is the sum of the members'
   evidence (mass, fragments, isotopes, co-detected adducts and ion type of every member) plus the formula's
   prior once (each member's table holds the same prior; it is not counted again); one member's isotope term
   counts at most down to ``MEMBER_ISOTOPE_FLOOR`` (-20). A formula one member's table
   cut before the fragment stage (``max_scored``) gets that member's weakest evidence in its table. Probabilities
   are a softmax over the joint scores, as for one precursor;
3. chooses the **lead**, the member elucidated: the one whose fragments the group's best formula explains best
   (explained share of the fragment intensity times the peaks explained: a sodium adduct that shows little
   besides its precursor does not lead), among the ion types the model runs (``runnable``); ties go to the
   ion type first in :data:`engine.chem.adducts.COMMON_ION_TYPES` (``[M+H]+`` before ``[M+Na]+``).

:func:`member_table` gives the joint ranking as a member sees it (its ion type, m/z and errors), and
:func:`as_member_result` the lead's result shown as a member's (its id, ion type, precursor; the group's
candidates), so that every member shows the group's answer. ``msgpt predict`` and the app call these.
Imports the formula ranking and the feature classes; nothing of the model, the app or Qt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.chem.adducts import COMMON_ION_TYPES, neutral_mass_from_precursor, precursor_mz_from_neutral
from engine.chem.formula import formula_mass, formula_vector, parse_formula
from engine.errors import ConfigError
from engine.formulas.candidates import FormulaCandidate, FormulaConfig, FormulaTable, rank_formulas
from engine.formulas.decompose import rdbe_of
from engine.timing import staged

_ION_ORDER = {ion: k for k, ion in enumerate(COMMON_ION_TYPES["positive"] + COMMON_ION_TYPES["negative"])}
SUMMED_TERMS = ("mass", "fragments", "ion_type", "isotopes", "adducts")  # each member's evidence; "prior" once
#: The lowest isotope term one member adds to the joint score: the survey pattern of an in-source fragment or of an
#: overlapped ion (an [M-H2O+H]+ read as Cl, an isotope term of -6000 on the QC-pool run) must not veto alone a
#: formula the other members support.
MEMBER_ISOTOPE_FLOOR = -20.0


@dataclass(frozen=True, eq=False)
class GroupDecision:
    """What a compound group decided: the joint formula ranking (as the lead sees it), the lead, each member's own
    table (its ion type alone) and each member's feature."""

    group_id: str
    lead_id: str
    joint: FormulaTable  # the lead's view of the joint ranking
    tables: dict  # feature id -> FormulaTable of that member alone (its ion type)
    features: dict  # feature id -> Feature

    def ion_type(self, feature_id: str) -> str:
        return self.features[feature_id].ion_type_in_group

    def describe(self) -> str:
        """``G0002: C15H27NO4 first (p 0.91), elucidated from F0035 [M+H]+ (F0032 [M+Na]+ shows its answer)``."""
        top = self.joint.candidates[0] if self.joint.candidates else None
        best = f"{top.formula} first (p {top.probability:.2f})" if top else "no formula explains every member"
        others = ", ".join(f"{fid} {self.ion_type(fid)}" for fid in self.features if fid != self.lead_id)
        return (f"{self.group_id}: {best}, elucidated from {self.lead_id} {self.ion_type(self.lead_id)} "
                f"({others} show{'s' if ',' not in others else ''} its answer)")


def member_spectrum(feature):
    """The member's spectrum with the ion type its group gives it (its formula left open)."""
    return feature.spectrum.with_adduct(feature.ion_type_in_group, check=False)


def _explains(formula: str, feature, config: FormulaConfig) -> bool:
    ion = feature.ion_type_in_group
    theo = precursor_mz_from_neutral(formula_mass(parse_formula(formula)), ion)
    return abs(theo - feature.precursor_mz) <= config.tolerance(feature.precursor_mz)


PRIOR_COUNTS = ("once", "each")


PROTONATED = ("[M+H]+", "[M-H]-")


@staged("formula ranking")
def joint_scores(tables: Sequence[FormulaTable], features: Sequence, configs: Sequence[FormulaConfig],
                 prior: str = "once", partner_weight: float = 1.0, mass: str = "sum") -> dict[str, dict[str, float]]:
    """``formula -> summed terms`` over the members (module notes, step 2), for the formulas that explain every
    member's m/z; ``tables``, ``features`` and ``configs`` are the members', in one order. ``prior`` "each" counts
    the formula prior once per member (the plain sum of the members' scores) instead of once; ``partner_weight``
    weighs the evidence of the members other than a group's [M+H]+ / [M-H]- (all members count fully in a group
    without one); ``mass`` "mean" takes the members' mean mass term instead of their sum (their m/z share the run's
    calibration error)."""
    if mass not in ("sum", "mean"):
        raise ConfigError(f"`mass` must be sum or mean, got {mass!r}.")
    if prior not in PRIOR_COUNTS:
        raise ConfigError(f"`prior` must be one of {', '.join(PRIOR_COUNTS)}, got {prior!r}.")
    own = [{c.formula: c for c in t.candidates} for t in tables]
    weakest = []
    for t in tables:
        if t.candidates:
            evidence = [c.score - c.terms["prior"] for c in t.candidates]
            worst = t.candidates[int(np.argmin(evidence))]
            weakest.append({k: v for k, v in worst.terms.items() if k != "prior"})
        else:
            weakest.append(None)
    has_main = any(f.ion_type_in_group in PROTONATED for f in features)
    weights = [1.0 if not has_main or f.ion_type_in_group in PROTONATED else partner_weight for f in features]
    out: dict[str, dict[str, float]] = {}
    for formula in dict.fromkeys(f for t in tables for f in (c.formula for c in t.candidates)):
        terms = {k: 0.0 for k in ("prior", *SUMMED_TERMS)}
        prior_value = None
        for mine, worst, feature, config, w in zip(own, weakest, features, configs, weights, strict=True):
            c = mine.get(formula)
            if c is None:
                if worst is None or not _explains(formula, feature, config):
                    break
                part = worst
            else:
                prior_value = c.terms["prior"]
                part = {k: v for k, v in c.terms.items() if k != "prior"}
            for k, v in part.items():
                terms[k] = terms.get(k, 0.0) + w * (max(v, MEMBER_ISOTOPE_FLOOR) if k == "isotopes" else v)
        else:
            terms["prior"] = prior_value * (len(tables) if prior == "each" else 1)
            if mass == "mean":
                terms["mass"] /= len(tables)
            out[formula] = terms
    return out


def member_table(joint: dict[str, dict[str, float]], table: FormulaTable, feature, lead_table: FormulaTable | None = None
                 ) -> FormulaTable:
    """The joint ranking (``joint_scores``) as ``feature`` sees it: its ion type, theoretical m/z and error; its
    own table's fragment explanation where it has the formula; ranks and probabilities over the group."""
    ion = feature.ion_type_in_group
    own = {c.formula: c for c in table.candidates}
    rows = []
    for formula, terms in joint.items():
        mass = formula_mass(parse_formula(formula))
        theo = precursor_mz_from_neutral(mass, ion)
        c = own.get(formula)
        rows.append(dict(
            formula=formula, ion_type=ion, neutral_mass=mass, theoretical_mz=theo,
            ppm_error=(feature.precursor_mz - theo) / theo * 1e6, rdbe=c.rdbe if c else _rdbe(formula),
            terms=dict(terms), score=float(sum(terms.values())),
            explained_intensity=c.explained_intensity if c else 0.0, n_explained=c.n_explained if c else 0,
            isomers=c.isomers if c else _isomers(formula, lead_table), supported=c.supported if c else None))
    rows.sort(key=lambda r: (-r["score"], abs(r["ppm_error"]), r["formula"]))
    scores = np.array([r["score"] for r in rows])
    probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() if len(rows) else scores
    candidates = tuple(FormulaCandidate(rank=k + 1, probability=float(p), **r) for k, (r, p) in enumerate(zip(rows, probs)))
    notes = tuple(table.notes) + (f"formulas ranked with the members of compound group {feature.group.id}",)
    return dataclasses.replace(table, candidates=candidates, notes=notes)


def _rdbe(formula: str) -> float:
    return float(rdbe_of(formula_vector(parse_formula(formula))[None, :])[0])


def _isomers(formula: str, lead_table: FormulaTable | None) -> int:
    if lead_table is not None:
        for c in lead_table.candidates:
            if c.formula == formula:
                return c.isomers
    return 0


def choose_lead(features: Sequence, tables: dict, formula: str | None, runnable: Sequence[str] | None = None) -> str:
    """The member elucidated (module notes, step 3): its feature id."""
    def fragments(f) -> float:
        if formula is None:
            return 0.0
        c = next((c for c in tables[f.id].candidates if c.formula == formula), None)
        return 0.0 if c is None else c.explained_intensity * c.n_explained

    pool = [f for f in features if runnable is None or f.ion_type_in_group in runnable] or list(features)
    best = max(pool, key=lambda f: (fragments(f), -_ION_ORDER.get(f.ion_type_in_group, len(_ION_ORDER)), -f.index))
    return best.id


def decide_group(features: Sequence, config: FormulaConfig = FormulaConfig(), *,
                 config_of: Callable | None = None, runnable: Sequence[str] | None = None,
                 supported_adducts: Sequence[str] | None = None, scorer=None, prior: str = "once",
                 partner_weight: float = 1.0, mass: str = "sum",
                 cancel: Callable[[], bool] | None = None) -> GroupDecision:
    """The decision of the compound group whose member features are ``features`` (module notes).

    ``config_of(spectrum)`` gives a member's formula config (``msgpt predict``: the run's recalibration scatter,
    :func:`engine.formulas.recalibration.run_formula_config`), else ``config`` for all; ``runnable`` the ion types
    the model can elucidate (the lead is one of them when any member is); ``supported_adducts`` marks the
    candidates as :func:`rank_formulas` does.
    """
    if len(features) < 2 or any(f.group is None for f in features):
        raise ConfigError(f"decide_group needs the member features of one compound group, got "
                          f"{', '.join(f.id for f in features) or 'none'}.")
    if len({f.group.id for f in features}) != 1:
        raise ConfigError(f"the features {', '.join(f.id for f in features)} belong to different compound groups.")
    spectra = [member_spectrum(f) for f in features]
    configs = [config_of(s) if config_of is not None else config for s in spectra]
    tables = {f.id: rank_formulas(s, ms1=f.ms1, config=c, supported_adducts=supported_adducts, scorer=scorer,
                                  cancel=cancel)
              for f, s, c in zip(features, spectra, configs)}
    joint = joint_scores([tables[f.id] for f in features], features, configs, prior, partner_weight, mass)
    best = max(joint, key=lambda k: sum(joint[k].values())) if joint else None
    lead = choose_lead(features, tables, best, runnable)
    by_id = {f.id: f for f in features}
    view = member_table(joint, tables[lead], by_id[lead])
    return GroupDecision(features[0].group.id, lead, view, tables, by_id)


def member_view(decision: GroupDecision, feature_id: str) -> FormulaTable:
    """The joint ranking as the member ``feature_id`` sees it (:func:`member_table`)."""
    joint = {c.formula: dict(c.terms) for c in decision.joint.candidates}
    return member_table(joint, decision.tables[feature_id], decision.features[feature_id],
                        decision.tables[decision.lead_id])


GROUP_ANSWER_KEY = "group_answer"


def as_member_result(result, feature, decision: GroupDecision):
    """The lead's ``result`` (a :class:`~engine.elucidation.pipeline.SpectrumResult`, or anything with a
    ``spectrum``) shown as the member ``feature``'s: its spectrum (id, precursor, ion type) with the formula of the
    lead's run, its metadata saying whose answer it is; the candidates are the group's."""
    lead = result.spectrum
    ion = feature.ion_type_in_group
    metadata = {**feature.spectrum.metadata,
                **{k: lead.metadata[k] for k in ("formula_rank", "formula_score", "formula_source", "formula_evidence")
                   if k in lead.metadata},
                "compound_group": decision.group_id, "group_ion_type": ion, "group_lead": decision.lead_id,
                GROUP_ANSWER_KEY: (f"the answer of compound group {decision.group_id}, elucidated from its "
                                   f"{decision.ion_type(decision.lead_id)} member {decision.lead_id}")}
    spectrum = dataclasses.replace(feature.spectrum, metadata=metadata).with_adduct(ion, check=False)
    if lead.formula:
        spectrum = spectrum.with_formula(lead.formula, check=False)
    return dataclasses.replace(result, spectrum=spectrum)


def lead_metadata(decision: GroupDecision) -> dict[str, str]:
    """What the lead's formula runs note: its group, its ion type in the group, that it is the group's lead."""
    return {"compound_group": decision.group_id, "group_ion_type": decision.ion_type(decision.lead_id),
            "group_lead": decision.lead_id,
            GROUP_ANSWER_KEY: f"elucidated for compound group {decision.group_id} "
                              f"({', '.join(f'{fid} {decision.ion_type(fid)}' for fid in decision.features)})"}


def neutral_of(feature) -> float:
    """The neutral mass the member's m/z and group ion type give."""
    return neutral_mass_from_precursor(feature.precursor_mz, feature.ion_type_in_group)

