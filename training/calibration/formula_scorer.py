"""Fit the formula scorer (engine.formulas.candidates) on the molecule corpus and FOLD=train spectra.

::

    python -m training.calibration.formula_scorer --molecules ../shared/data/molecules.tsv.gz \\
        --mgf ../shared/data/massbank_dev.mgf.gz --work runs/formula_scorer --out resources

1. **Corpus prior**: the formula of every structure of the molecule corpus (RDKit), their counts
   and statistics (:meth:`engine.formulas.prior.FormulaPrior.fit`). The corpus excludes the
   FOLD=val structures (and the held-out test set).
2. **Examples**: FOLD=train ``[M+H]+`` spectra of high-resolution records (the written precursor
   within 10 ppm of the formula's m/z), one seeded spectrum per structure (first InChIKey block).
   The formula is hidden; the precursor gets a simulated mass error drawn from N(0, ``--noise-ppm``)
   (MassBank writes mostly the theoretical m/z; real runs are off by a few ppm). The corpus count
   of each example's own formula is reduced by one when its structure is in the corpus, so that the
   isomer feature counts other structures only (as it does for an unknown).
3. **Stage 1** (mass + prior): a conditional logit (softmax over each spectrum's candidates, L2
   penalty) on every decomposition, with at most ``--max-negatives`` uniformly sampled wrong ones
   per spectrum (sampling alternatives keeps the estimates consistent).
4. **Stage 2** (+ fragments): the same on the ``--max-scored`` best formulas of stage 1, with their
   fragment features.
5. **Ion types**: the log frequency of each common ion type (:data:`engine.chem.adducts.COMMON_ION_TYPES`) among
   FOLD=train records of its ion mode (add-one smoothing): every record's ADDUCT field normalised with
   :func:`engine.chem.adducts.parse_adduct` (``[M+FA-H]-`` is ``[M+HCOO]-``), read from the MGF text, so records the
   spectrum reader refuses count too (MassBank's ``[M]+`` records write the cation's charged formula, ``C5H14NO+``).
   ``--ion-types-only`` refits this part alone and rewrites only ``ion_type_log_prior`` in ``--out``'s scorer::

       python -m training.calibration.formula_scorer --ion-types-only --mgf ../shared/data/massbank_dev.mgf.gz \
           --out resources

FOLD=val is never read. The scorer (``formula_scorer.json`` + ``formula_isomers.tsv.gz``) goes to
``--out``. Work files (corpus formulas, features) are cached in ``--work``, so a refit is quick.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from engine.chem.adducts import (
    COMMON_ION_TYPES,
    neutral_mass_from_precursor,
    parse_adduct_or_none,
    precursor_mz_from_neutral,
)
from engine.chem.formula import formula_mass, formula_vector, parse_formula
from engine.errors import MsgptError
from engine.formulas.candidates import FormulaConfig
from engine.formulas.decompose import decompose_mass
from engine.formulas.evidence import fragment_features_many, fragment_peaks
from engine.formulas.prior import FormulaPrior
from engine.formulas.scorer import (
    STAGE1_FEATURES,
    STAGE2_FEATURES,
    FormulaScorer,
    fragment_terms,
)


def corpus_formulas(molecules: Path, work: Path) -> tuple[dict[str, int], set[str]]:
    """``{formula: structures}`` and the InChIKey-14 of every corpus structure (cached in ``work``)."""
    cache, keys_cache = work / "corpus_formulas.tsv", work / "corpus_inchikey14.txt.gz"
    if cache.is_file() and keys_cache.is_file():
        counts = {f: int(n) for f, n in (line.rstrip("\n").split("\t") for line in cache.open())}
        with gzip.open(keys_cache, "rt") as fh:
            return counts, {line.strip() for line in fh}
    from rdkit import Chem, RDLogger
    from rdkit.Chem.rdMolDescriptors import CalcMolFormula

    RDLogger.DisableLog("rdApp.*")
    counts: Counter[str] = Counter()
    keys: set[str] = set()
    with gzip.open(molecules, "rt", encoding="utf-8") as fh:
        header = next(fh).rstrip("\n").split("\t")
        key_col = header.index("inchikey14") if "inchikey14" in header else None
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            mol = Chem.MolFromSmiles(parts[0])
            if mol is None:
                continue
            counts[CalcMolFormula(mol)] += 1
            if key_col is not None:
                keys.add(parts[key_col])
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(f"{f}\t{n}\n" for f, n in sorted(counts.items())))
    with gzip.open(keys_cache, "wt") as fh:
        fh.writelines(f"{k}\n" for k in sorted(keys))
    return dict(counts), keys


def select_examples(mgf: Path, fold: str, adduct: str, seed: int, max_structures: int | None):
    """One seeded high-resolution spectrum per structure of ``fold`` with ``adduct``."""
    from engine.spectra.io import iter_spectra
    from engine.spectra.spectrum import SkippedRecord

    by_structure: dict[str, list] = defaultdict(list)
    ion_counts: Counter[str] = Counter()
    for item in iter_spectra(mgf):
        if isinstance(item, SkippedRecord) or item.metadata.get("fold") != fold:
            continue
        if item.adduct:
            ion_counts[item.adduct] += 1
        if item.adduct != adduct or not item.formula or not item.inchikey:
            continue
        theo = precursor_mz_from_neutral(formula_mass(parse_formula(item.formula)), adduct)
        if abs(item.precursor_mz - theo) / theo * 1e6 > 10:
            continue  # low-resolution record (nominal or one-decimal precursor)
        by_structure[item.inchikey[:14]].append(item)
    rng = np.random.default_rng(seed)
    keys = sorted(by_structure)
    rng.shuffle(keys)
    if max_structures:
        keys = keys[:max_structures]
    return [by_structure[k][int(rng.integers(len(by_structure[k])))] for k in keys], ion_counts


def noisy_precursor(spectrum, noise_ppm: float, rng) -> float:
    theo = precursor_mz_from_neutral(formula_mass(parse_formula(spectrum.formula)), spectrum.adduct)
    return theo * (1.0 + rng.normal(0.0, noise_ppm) * 1e-6) if noise_ppm > 0 else spectrum.precursor_mz


def fit_conditional_logit(groups: list[np.ndarray], truth: list[int], l2: float = 1e-3) -> np.ndarray:
    """Weights ``w`` maximising sum_g log softmax(X_g w)[truth_g] - l2 |w|^2 (features standardised)."""
    from scipy.optimize import minimize

    sizes = np.array([len(g) for g in groups])
    X = np.vstack(groups)  # (N, F)
    mu, sd = X.mean(axis=0), X.std(axis=0)
    sd[sd == 0] = 1.0
    Z = (X - mu) / sd
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    true_rows = starts + np.array(truth)
    group_of = np.repeat(np.arange(len(groups)), sizes)
    n = len(groups)

    def loss_grad(w):
        s = Z @ w
        m = np.maximum.reduceat(s, starts)
        e = np.exp(s - m[group_of])
        denom = np.add.reduceat(e, starts)
        lse = m + np.log(denom)
        p = e / denom[group_of]
        loss = -(s[true_rows] - lse).sum() / n + l2 * w @ w
        expected = np.add.reduceat(p[:, None] * Z, starts)  # (G, F)
        grad = -(Z[true_rows] - expected).sum(axis=0) / n + 2 * l2 * w
        return loss, grad

    res = minimize(loss_grad, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B")
    return res.x / sd  # raw units (the mean shifts every candidate of a group alike)


def top_k_accuracy(groups: list[np.ndarray], truth: list[int], w: np.ndarray, ks=(1, 5)) -> dict[int, float]:
    ranks = []
    for X, t in zip(groups, truth):
        s = X @ w
        ranks.append(int((s > s[t]).sum()) + 1)
    ranks = np.array(ranks)
    return {k: float((ranks <= k).mean()) for k in ks}


def build_stage_data(examples, prior: FormulaPrior, corpus_keys: set[str], config: FormulaConfig, noise_ppm: float,
                     max_negatives: int, seed: int):
    """Stage-1 features of every example (truth + sampled negatives) and the full stage-1 candidate sets."""
    rng = np.random.default_rng(seed + 1)
    stage1_groups, stage1_truth, full = [], [], []
    n_missing = 0
    for spectrum in examples:
        precursor = noisy_precursor(spectrum, noise_ppm, rng)
        neutral = neutral_mass_from_precursor(precursor, spectrum.adduct)
        vectors, masses = decompose_mass(neutral, config.tolerance(precursor), config.decomposition)
        target = formula_vector(parse_formula(spectrum.formula))
        hit = np.flatnonzero((vectors == target).all(axis=1))
        if not hit.size:
            n_missing += 1
            continue
        t = int(hit[0])
        theo = precursor_mz_from_neutral(0.0, spectrum.adduct) + masses  # [M+H]+: one molecule, charge 1
        ppm = (precursor - theo) / theo * 1e6
        exclude = np.zeros(len(vectors))
        if spectrum.inchikey[:14] in corpus_keys:
            exclude[t] = 1.0
        feats = prior.features(vectors, masses, exclude_self=exclude)
        feats["mass_error"] = (ppm / 10.0) ** 2
        X = np.stack([feats[f] for f in STAGE1_FEATURES], axis=1)
        full.append((spectrum, precursor, vectors, masses, X, t))
        rows = np.arange(len(vectors))
        if len(rows) > max_negatives + 1:
            negatives = rng.choice(np.delete(rows, t), size=max_negatives, replace=False)
            rows = np.sort(np.append(negatives, t))
        stage1_groups.append(X[rows])
        stage1_truth.append(int(np.flatnonzero(rows == t)[0]))
    return stage1_groups, stage1_truth, full, n_missing


def stage2_data(full, w1: np.ndarray, config: FormulaConfig):
    """Fragment features of the best ``max_scored`` stage-1 formulas of each example (truth among them)."""
    import dataclasses

    groups, truth, n_out = [], [], 0
    for spectrum, precursor, vectors, masses, X, t in full:
        s = X @ w1
        best = np.argsort(-s, kind="stable")[: config.max_scored]
        if t not in best:
            n_out += 1
            continue
        shown = dataclasses.replace(spectrum, precursor_mz=precursor)
        mz, weight = fragment_peaks(shown)
        frag = fragment_features_many(mz, weight, vectors[best], [spectrum.adduct] * len(best),
                                      config.fragment_tol_ppm, config.fragment_tol_da)
        terms = fragment_terms(frag, masses[best])
        groups.append(np.hstack([X[best], np.stack([terms[f] for f in STAGE2_FEATURES[len(STAGE1_FEATURES):]], axis=1)]))
        truth.append(int(np.flatnonzero(best == t)[0]))
    return groups, truth, n_out


def count_ion_types(mgf: Path, fold: str = "train") -> dict[str, Counter]:
    """Records of ``fold`` by ion mode (``positive`` / ``negative``: IONMODE, else the adduct's charge) and ion type
    (ADDUCT normalised with :func:`parse_adduct_or_none`; unreadable or missing ones are left out), read from the MGF
    text so that records the spectrum reader refuses count too."""
    import gzip

    counts: dict[str, Counter] = {"positive": Counter(), "negative": Counter()}
    fields: dict[str, str] = {}
    opener = gzip.open if Path(mgf).suffix == ".gz" else open
    with opener(mgf, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if line == "BEGIN IONS":
                fields = {}
            elif line == "END IONS":
                if fields.get("fold") != fold:
                    continue
                try:
                    adduct = parse_adduct_or_none(fields.get("adduct"))
                except MsgptError:
                    continue
                if adduct is None:
                    continue
                mode = fields.get("ionmode", "").lower()
                mode = mode if mode in counts else adduct.polarity
                counts[mode][adduct.name] += 1
            elif "=" in line and line[:1].isalpha():
                key, value = line.split("=", 1)
                if key.lower() in ("fold", "adduct", "ionmode"):
                    fields[key.lower()] = value.strip()
    return counts


def ion_type_log_prior(counts: dict[str, Counter]) -> dict[str, float]:
    """log P(ion type | ion mode) of each COMMON_ION_TYPES entry, add-one smoothed, from :func:`count_ion_types`."""
    out = {}
    for polarity, names in COMMON_ION_TYPES.items():
        seen = counts.get(polarity, Counter())
        total = sum(seen.get(a, 0) + 1 for a in names)
        for a in names:
            out[a] = round(math.log((seen.get(a, 0) + 1) / total), 4)
    return out


def refit_ion_types(mgf: Path, out: Path) -> dict[str, float]:
    """Rewrite only ``ion_type_log_prior`` (and its ``info`` line) of the scorer in ``out``, from FOLD=train."""
    from engine.formulas.scorer import SCORER_FILE

    path = out / SCORER_FILE if out.is_dir() else out
    d = json.loads(path.read_text(encoding="utf-8"))
    counts = count_ion_types(mgf, "train")
    d["ion_type_log_prior"] = ion_type_log_prior(counts)
    d.setdefault("info", {})["ion_types"] = (
        f"{Path(mgf).name} FOLD=train ADDUCT counts by ion mode (add-one): "
        + "; ".join(f"{a} {counts[p].get(a, 0)}" for p, names in COMMON_ION_TYPES.items() for a in names))
    path.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    return d["ion_type_log_prior"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.calibration.formula_scorer", description=__doc__.split("\n\n")[0])
    p.add_argument("--molecules", help="molecule corpus (smiles<TAB>inchikey14<TAB>source, .tsv.gz)")
    p.add_argument("--mgf", required=True, help="labelled MGF with FOLD=train records")
    p.add_argument("--work", help="folder for cached work files")
    p.add_argument("--out", required=True, help="folder for formula_scorer.json (e.g. resources)")
    p.add_argument("--max-structures", type=int, default=3000, help="training structures (one spectrum each)")
    p.add_argument("--noise-ppm", type=float, default=3.0, help="simulated precursor mass error (sd, ppm)")
    p.add_argument("--max-negatives", type=int, default=2000, help="sampled wrong formulas per spectrum in stage 1")
    p.add_argument("--max-scored", type=int, default=FormulaConfig().max_scored)
    p.add_argument("--l2", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ion-types-only", action="store_true",
                   help="refit the ion types' log prior alone, rewriting only that part of --out's scorer")
    args = p.parse_args(argv)
    if args.ion_types_only:
        prior = refit_ion_types(Path(args.mgf), Path(args.out))
        print("ion_type_log_prior " + json.dumps(prior))
        return 0
    if not args.molecules or not args.work:
        p.error("--molecules and --work are needed to fit the scorer (or give --ion-types-only)")

    work, t0 = Path(args.work), time.time()
    work.mkdir(parents=True, exist_ok=True)
    counts, corpus_keys = corpus_formulas(Path(args.molecules), work)
    prior = FormulaPrior.fit(counts)
    print(f"corpus: {prior.n_structures} structures, {prior.n_formulas} formulas ({time.time() - t0:.0f} s)", flush=True)
    examples, _ = select_examples(Path(args.mgf), "train", "[M+H]+", args.seed, args.max_structures)
    print(f"examples: {len(examples)} FOLD=train [M+H]+ structures ({time.time() - t0:.0f} s)", flush=True)
    config = FormulaConfig(max_scored=args.max_scored)
    g1, t1, full, n_missing = build_stage_data(examples, prior, corpus_keys, config, args.noise_ppm,
                                               args.max_negatives, args.seed)
    print(f"stage 1: {len(g1)} spectra ({n_missing} formulas outside the decomposition rules), "
          f"{sum(len(g) for g in g1)} rows ({time.time() - t0:.0f} s)", flush=True)
    w1 = fit_conditional_logit(g1, t1, args.l2)
    acc1 = top_k_accuracy([x[4] for x in full], [x[5] for x in full], w1)
    print(f"stage 1 weights {dict(zip(STAGE1_FEATURES, np.round(w1, 4)))}; train top-1 {acc1[1]:.3f} "
          f"top-5 {acc1[5]:.3f}", flush=True)
    g2, t2, n_out = stage2_data(full, w1, config)
    print(f"stage 2: {len(g2)} spectra ({n_out} with the truth outside the best {config.max_scored}) "
          f"({time.time() - t0:.0f} s)", flush=True)
    w2 = fit_conditional_logit(g2, t2, args.l2)
    acc2 = top_k_accuracy(g2, t2, w2)
    print(f"stage 2 weights {dict(zip(STAGE2_FEATURES, np.round(w2, 4)))}; train top-1 {acc2[1]:.3f} "
          f"top-5 {acc2[5]:.3f} (of the spectra with the truth in stage 2)", flush=True)
    scorer = FormulaScorer(
        prior=prior,
        stage1={f: round(float(w), 6) for f, w in zip(STAGE1_FEATURES, w1)},
        stage2={f: round(float(w), 6) for f, w in zip(STAGE2_FEATURES, w2)},
        ion_type_log_prior=ion_type_log_prior(count_ion_types(Path(args.mgf), "train")),
        info={
            "trained_by": "python -m training.calibration.formula_scorer",
            "corpus": f"{Path(args.molecules).name}: {prior.n_structures} structures, {prior.n_formulas} formulas",
            "spectra": f"{Path(args.mgf).name} FOLD=train [M+H]+, {len(examples)} structures (one spectrum each), "
                       f"precursor noise N(0, {args.noise_ppm} ppm), seed {args.seed}",
            "stage1_train_top1": f"{acc1[1]:.3f}", "stage2_train_top1": f"{acc2[1]:.3f}",
        },
    )
    path = scorer.save(args.out)
    (work / "fit.json").write_text(json.dumps({"stage1": scorer.stage1, "stage2": scorer.stage2,
                                                "info": scorer.info}, indent=1))
    print(f"wrote {path} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
