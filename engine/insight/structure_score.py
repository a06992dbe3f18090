"""Score a structure the user proposes against one spectrum, with everything the model can say about it.

For each structure (SMILES, InChI or a molfile, e.g. pasted from a sketcher) and spectrum:

* **fingerprint score**: the log-likelihood of its Morgan fingerprint under the spectrum's
  posterior (:class:`engine.model.scoring.FingerprintScorer`, the score the default ranking sorts by),
  and its **rank** by that score among the spectrum's candidates (1 = above every candidate), plus
  its own rank in the candidate list when the model generated it too;
* **decoder likelihood**: the log-probability of its canonical SAFE tokens (as the corpus writes
  them, stereochemistry removed) under the decoder, teacher-forced, for each of the spectrum's M
  band queries with the spectrum's formula, averaged over the M queries (``decoder_logp``, nats), per
  token, and for the query that likes it best. Unconstrained: the formula mask of the sampler is not
  applied. A structure with a token outside the model's vocabulary, or longer than its block size,
  has none;
* **formula check**: its formula against the spectrum's (a different formula is scored all the same,
  and said);
* **fragment explanation**: the peaks and the share of intensity its bond-cleavage fragments explain
  (:mod:`engine.spectra.fragments`), beside what the best structure of the formula could explain (the
  subformula annotation of :mod:`engine.spectra.annotate`);
* **novelty**: training corpus / user list / new (:mod:`engine.insight.novelty`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from engine.chem import molecules as chem
from engine.chem.formula import format_formula, formula_vector, parse_formula
from engine.errors import MsgptError
from engine.insight.novelty import NoveltyMarker
from engine.model.decoder import collate_queries
from engine.model.querying import band_thresholds, build_queries
from engine.model.scoring import FingerprintScorer
from engine.spectra.annotate import annotate_spectrum, explained_intensity_fraction
from engine.spectra.fragments import FragmentSettings, explain_peaks

SCORE_COLUMNS = (
    "spectrum_id",
    "structure",
    "smiles",
    "InChIkey2D",
    "structure_formula",
    "spectrum_formula",
    "formula_match",
    "fingerprint_score",
    "fingerprint_rank",
    "candidate_rank",
    "n_candidates",
    "decoder_logp",
    "decoder_logp_per_token",
    "decoder_logp_best_query",
    "safe_tokens",
    "explained_peaks",
    "n_peaks",
    "explained_intensity",
    "subformula_explained_intensity",
    "novelty",
    "note",
)


def parse_structure(text: str) -> chem.Mol | None:
    """A molecule from SMILES, InChI or an MDL molfile (V2000/V3000, as sketchers copy it); None if unreadable.

    Stereochemistry is removed (the fingerprint and the decoder ignore it)."""
    from rdkit import Chem, rdBase

    if not isinstance(text, str) or not text.strip():
        return None
    body = text.strip("\r\n\t ")
    with rdBase.BlockLogs():
        if "M  END" in body or "V2000" in body or "V3000" in body:
            mol = Chem.MolFromMolBlock(text if "\n" in text[:200] else body)
        elif body.startswith("InChI="):
            mol = Chem.MolFromInchi(body)
        else:
            mol = chem.mol_from_smiles(body.split()[0])
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return chem.remove_stereo(Chem.Mol(mol))


def structure_label(text: str) -> str:
    """What to call the input in a table: the SMILES as given, or the title line of a molfile."""
    body = text.strip()
    if "\n" in body:
        first = text.splitlines()[0].strip()
        return first or "(molfile)"
    return body


@dataclass(frozen=True)
class StructureScore:
    """One structure scored against one spectrum (``nan`` / None where it could not be computed)."""

    spectrum_id: str
    structure: str  # the input as given (a molfile's title line)
    smiles: str = ""  # canonical, stereochemistry removed
    inchikey14: str = ""
    structure_formula: str = ""
    spectrum_formula: str = ""
    formula_match: bool | None = None
    fingerprint_score: float = float("nan")
    fingerprint_rank: int | None = None  # 1 + candidates with a higher fingerprint score (itself excluded)
    candidate_rank: int | None = None  # its rank among the candidates when the model generated it
    n_candidates: int = 0
    decoder_logp: float = float("nan")  # mean over the M queries of log p(SAFE tokens | query, formula)
    decoder_logp_per_token: float = float("nan")
    decoder_logp_best_query: float = float("nan")
    safe_tokens: int = 0
    explained_peaks: int = 0
    n_peaks: int = 0
    explained_intensity: float = float("nan")
    subformula_explained_intensity: float = float("nan")
    novelty: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return bool(self.smiles)

    def row(self) -> dict:
        """The CSV row (:data:`SCORE_COLUMNS`)."""
        d = asdict(self)

        def num(x, digits):
            return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

        return {
            "spectrum_id": self.spectrum_id,
            "structure": self.structure,
            "smiles": self.smiles,
            "InChIkey2D": self.inchikey14,
            "structure_formula": self.structure_formula,
            "spectrum_formula": self.spectrum_formula,
            "formula_match": "" if self.formula_match is None else ("yes" if self.formula_match else "no"),
            "fingerprint_score": num(self.fingerprint_score, 3),
            "fingerprint_rank": "" if self.fingerprint_rank is None else self.fingerprint_rank,
            "candidate_rank": "" if self.candidate_rank is None else self.candidate_rank,
            "n_candidates": self.n_candidates,
            "decoder_logp": num(self.decoder_logp, 3),
            "decoder_logp_per_token": num(self.decoder_logp_per_token, 4),
            "decoder_logp_best_query": num(self.decoder_logp_best_query, 3),
            "safe_tokens": d["safe_tokens"] or "",
            "explained_peaks": d["explained_peaks"] if self.ok else "",
            "n_peaks": self.n_peaks,
            "explained_intensity": num(self.explained_intensity, 4),
            "subformula_explained_intensity": num(self.subformula_explained_intensity, 4),
            "novelty": self.novelty,
            "note": "; ".join(self.notes),
        }


@dataclass(frozen=True)
class RankedStructure:
    """A candidate as far as ranking goes (an :class:`~engine.elucidation.ranking.Candidate` has these too)."""

    rank: int
    inchikey14: str
    fingerprint_score: float


def canonical_safe(smiles: str) -> str | None:
    """The SAFE string the corpus would hold for ``smiles`` (canonical; None if safe-mol cannot cut it)."""
    import safe as sf

    try:
        return sf.encode(smiles, canonical=True, allow_empty=True)
    except Exception:  # safe-mol raises many types for molecules it cannot encode  # noqa: BLE001
        return None


@torch.inference_mode()
def decoder_log_probs(decoder, token_ids: Sequence[int], queries: Sequence[np.ndarray], formula_vec: np.ndarray) -> np.ndarray:
    """log p(tokens[1:] | tokens[:-1], query, formula) summed over the tokens, for each query (float64, nats)."""
    cfg = decoder.config
    device = next(decoder.parameters()).device
    bits, mask, form = collate_queries(list(queries), formula_vec, cfg.max_fp_tokens, cfg.fp_bits)
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=device)[None].expand(len(queries), -1)
    ctx, ctx_mask = decoder.encode_context(bits.to(device), mask.to(device), form.to(device))
    logits, _ = decoder(ids[:, :-1], ctx, ctx_mask)  # (Q, T-1, V)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]  # (Q, T-1)
    return logp.sum(-1).double().cpu().numpy()


def score_structures(
    session,
    structures: Sequence[str],
    params=None,
    *,
    candidates: Sequence | None = None,
    marker: NoveltyMarker | None = None,
    fragments: FragmentSettings = FragmentSettings(),
) -> list[StructureScore]:
    """Score each of ``structures`` against the spectrum of ``session`` (a
    :class:`~engine.elucidation.pipeline.SpectrumSession`: its posterior is computed once and shared).

    ``params`` (:class:`~engine.elucidation.pipeline.QueryParams`) gives the band queries for the decoder
    likelihood (default: the paper's band). ``candidates`` (anything with ``rank``, ``inchikey14`` and
    ``fingerprint_score``, e.g. a result's candidates) gives the ranks.
    """
    from engine.elucidation.pipeline import QueryParams

    params = params or QueryParams()
    bundle, spectrum = session.bundle, session.spectrum
    posterior = session.posterior
    cal = bundle.calibration.for_polarity(spectrum.polarity)
    scorer = FingerprintScorer(posterior, cal.bits)
    thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
    queries = build_queries(posterior, thresholds)
    weights = np.array([len(q.threshold_indices) for q in queries], dtype=np.float64)
    formula_vec = formula_vector(parse_formula(spectrum.formula))
    candidates = list(candidates or [])
    try:
        sub = explained_intensity_fraction(annotate_spectrum(spectrum, tol_ppm=fragments.tol_ppm, tol_da=fragments.tol_da))
    except MsgptError:
        sub = float("nan")
    out = []
    for text in structures:
        out.append(_score_one(text, session, scorer, queries, weights, formula_vec, candidates, marker, fragments, sub))
    return out


def _score_one(text, session, scorer, queries, weights, formula_vec, candidates, marker, fragments, sub) -> StructureScore:
    bundle, spectrum = session.bundle, session.spectrum
    base = dict(spectrum_id=spectrum.id, structure=structure_label(text), spectrum_formula=spectrum.formula or "",
                n_peaks=spectrum.n_peaks, n_candidates=len(candidates), subformula_explained_intensity=sub)
    mol = parse_structure(text)
    if mol is None:
        return StructureScore(**base, notes=("not a structure RDKit can read (give SMILES, InChI or a molfile)",))
    notes: list[str] = []
    smiles = chem.canonical_smiles(mol)
    key = chem.inchikey14(mol) or ""
    formula = chem.mol_formula(mol)
    try:
        match = chem.formula_matches(mol, parse_formula(spectrum.formula))
    except MsgptError:
        match = False
    if not match:
        notes.append(f"formula {formula} differs from the spectrum's {spectrum.formula} "
                     f"({format_formula_difference(formula, spectrum.formula)})")
    if mol.GetNumAtoms() and any(a.GetFormalCharge() for a in mol.GetAtoms()):
        notes.append("charged structure: the formula compares the drawn species")
    bits = chem.morgan_bits(mol, bundle.decoder.config.fp_bits)
    fp_score = scorer.score(bits)
    others = [c for c in candidates if c.inchikey14 != key]
    fp_rank = 1 + sum(1 for c in others if c.fingerprint_score > fp_score) if candidates else None
    cand_rank = next((c.rank for c in candidates if c.inchikey14 == key), None)
    logp = per_token = best = float("nan")
    n_tokens = 0
    safe_str = canonical_safe(smiles)
    if safe_str is None:
        notes.append("SAFE cannot encode it: no decoder likelihood")
    else:
        tok = bundle.tokenizer
        ids = tok.encode(safe_str)
        n_tokens = len(ids) - 1  # the tokens predicted: everything after <bos>, <eos> included
        unknown = [t for t, i in zip(tok.tokenize(safe_str), ids[1:-1]) if i == tok.unk_id]
        if unknown:
            notes.append(f"token {unknown[0]!r} is not in the model's vocabulary: no decoder likelihood")
        elif len(ids) > bundle.decoder.config.block_size:
            notes.append(f"{len(ids)} tokens exceed the decoder's {bundle.decoder.config.block_size}: no decoder likelihood")
        else:
            lp = decoder_log_probs(bundle.decoder, ids, [q.bits for q in queries], formula_vec)
            logp = float(np.average(lp, weights=weights))
            per_token = logp / n_tokens
            best = float(lp.max())
    try:
        expl = explain_peaks(mol, spectrum.mz, spectrum.intensity, spectrum.adduct, fragments)
        explained, explained_int = expl.n_explained, expl.explained_intensity
        if not expl.complete:
            notes.append("large molecule: fragments enumerated in part")
    except MsgptError as e:
        explained, explained_int = 0, float("nan")
        notes.append(f"no fragment explanation ({e})")
    novelty = marker.label(key) if marker is not None else ""
    return StructureScore(
        **base, smiles=smiles or "", inchikey14=key, structure_formula=formula, formula_match=match,
        fingerprint_score=fp_score, fingerprint_rank=fp_rank, candidate_rank=cand_rank, decoder_logp=logp,
        decoder_logp_per_token=per_token, decoder_logp_best_query=best, safe_tokens=n_tokens,
        explained_peaks=explained, explained_intensity=explained_int, novelty=novelty, notes=tuple(notes),
    )


def format_formula_difference(structure_formula: str, spectrum_formula: str) -> str:
    """``+2H`` style difference of two formulas (structure minus spectrum); empty when equal."""
    a, b = parse_formula(structure_formula), parse_formula(spectrum_formula)
    diff = {e: a.get(e, 0) - b.get(e, 0) for e in {*a, *b}}
    plus = format_formula({e: n for e, n in diff.items() if n > 0})
    minus = format_formula({e: -n for e, n in diff.items() if n < 0})
    return " ".join(x for x in (f"+{plus}" if plus else "", f"-{minus}" if minus else "") if x)
