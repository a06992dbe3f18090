"""Fit the per-spectrum confidence (:mod:`engine.model.confidence`) on out-of-fold pools; check it on FOLD=val.

Two steps::

    # 1. pools of FOLD=train spectra (one per structure) from out-of-fold posteriors: resumable, ~2 s/spectrum
    python -m training.calibration.confidence collect --bundle resources/default_model --mgf ../shared/data/massbank_dev.mgf.gz \\
        --oof runs/oof --out runs/confidence_train --structures 1000
    # 2. fit; reliability on the FOLD=val records of an msgpt-eval run (band, formula decoding, fingerprint ranking)
    python -m training.calibration.confidence fit --collected runs/confidence_train --val-eval runs/eval_val \\
        --out resources/default_model --figure docs/confidence_reliability.png

Without an out-of-fold run, ``collect --unseen`` draws the pools of the FOLD=train spectra whose structure
the bundle's encoder never trained on (those only non-redistributable records hold; see
:func:`training.encoder.noise.fit_from_bundle`), with the app's own pipeline: the bundle's posterior and band.
``--shard i/n`` splits a collection over n processes of one thread (each writes ``pools.i.jsonl``).

**A rank 1 an isomer edit made** (:mod:`engine.elucidation.edits`; no sample drew it) gets the drawn rank 1's
probability shifted by the model's ``edit_offset`` logits. ``fit`` fits the six weights on the pools whose rank 1 was
drawn and the offset on the others; ``fit-edits`` keeps a bundle's model as it is and fits only the offset, with an
intercept of its own for pools harder or easier than the model's (the train-unseen pools are harder than FOLD=val),
which is reported and not shipped::

    python -m training.calibration.confidence collect --unseen --mgf ../shared/data/massbank_dev.mgf.gz \
        --out runs/confidence_unseen --shard 0/2 &      # and --shard 1/2 beside it: ~75 min on two cores
    python -m training.calibration.confidence fit-edits --bundle resources/default_model --collected runs/confidence_unseen
    python -m training.calibration.confidence check --bundle resources/default_model --val-eval runs/eval_val

**Why out-of-fold**: on its own training spectra the shipped encoder's posteriors are far better than on
a new compound, so its pools there are more often right and a confidence fitted on them would promise
too much. Here each spectrum is queried with the posterior of the fold encoder (:mod:`training.calibration.oof_posteriors`)
that never saw its structure, at that encoder's band thresholds, and the pool is drawn and ranked with
the bundle's decoder and scorer exactly as the app draws it (B = 20 x 5, formula-constrained decoding,
fingerprint ranking). The label is whether the rank-1 candidate's first InChIKey block is the
reference's. One spectrum per structure, so no compound weighs more than another.

**Model**: L2-penalised logistic regression on the six features of :func:`engine.model.confidence.confidence_features`
(Newton's method, :func:`engine.model.confidence.fit_logistic`: six weights do not justify a scikit-learn
dependency). Its probabilities are checked, never tuned, on FOLD=val: a reliability table (predicted
vs observed per bin), the expected calibration error and the Brier score against always predicting the
base rate, written into the model's ``meta`` and drawn as a reliability diagram.

**Recalibration**: a logistic over these features overpredicts at its top end even on pools it did not
see (v9's: 60% predicted where 44% came true, 5-fold cross-validated). The fit therefore maps its
probabilities through an isotonic curve (:func:`engine.model.confidence.isotonic_knots`) fitted on cross-fitted
probabilities of the training pools, and keeps the map only when it lowers the Brier score in a nested
5-fold cross-validation over the pools (``meta["fit"]["cross_validated"]``); ``--no-recalibration``
leaves it out. Nothing of FOLD=val enters the choice.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.errors import ConfigError, MsgptError
from engine.model.confidence import (
    EDIT_FEATURE,
    FEATURES,
    ConfidenceModel,
    confidence_features,
    fit_logistic,
    isotonic_knots,
    made_by_edit,
    reliability,
    result_features,
)

from training.calibration.edit_offset import fit_edit_offset
from training.core.loop import stop_on_signals, torch_threads


@dataclass(frozen=True)
class Collecting:
    done: int
    total: int
    hits: int


def _eligible(bundle, mgf: str, oof_rows: dict[str, int], folds: Sequence[str]) -> list:
    from engine.elucidation.pipeline import require_usable
    from engine.spectra.io import iter_spectra
    from engine.spectra.spectrum import Spectrum

    out = []
    for item in iter_spectra(mgf):
        if not isinstance(item, Spectrum) or not item.smiles or item.id not in oof_rows:
            continue
        if folds and item.metadata.get("fold", "") not in folds:
            continue
        try:
            require_usable(bundle, item, mapped=False)  # the ion types it was trained on (no mapping)
        except MsgptError:
            continue
        out.append(item)
    return out


def _unseen_ids(bundle, mgf: str) -> dict[str, int]:
    """Spectrum ids of FOLD=train records of structures the bundle's encoder never saw
    (:func:`training.encoder.noise.unseen_structures`), as the ``oof_rows`` :func:`_eligible` takes."""
    from engine.spectra.io import iter_spectra
    from engine.spectra.spectrum import Spectrum

    from training.encoder.noise import encoder_licenses, unseen_structures

    licenses = encoder_licenses(bundle.config, str(bundle.path))
    ids, fold, license, keys = [], [], [], []
    for item in iter_spectra(mgf):
        if isinstance(item, Spectrum) and item.smiles:
            ids.append(item.id)
            fold.append(item.metadata.get("fold", ""))
            license.append(item.metadata.get("license", ""))
            keys.append((item.inchikey or "")[:14])
    unseen = unseen_structures(np.array(fold), np.array(license), np.array(keys), licenses)
    return {i: n for n, i in enumerate(ids) if unseen[n]}


def collect(bundle_dir: str, mgf: str, oof_dir: str | None, out: str, structures: int = 1000, seed: int = 0,
            folds: Sequence[str] = ("train",), stop: threading.Event | None = None,
            shard: tuple[int, int] = (0, 1)) -> Iterator[Collecting]:
    """Draw and rank the pools of ``structures`` FOLD=train spectra (one per structure) from their
    out-of-fold posteriors (``oof_dir``), or, with ``oof_dir`` None, of the spectra of structures the
    bundle's encoder never saw, from its own posteriors; append one JSON line per spectrum to
    ``out/pools.jsonl`` (resumes). ``shard`` (i, n): this process draws every n-th chosen spectrum from the i-th,
    into ``out/pools.i.jsonl``, so n processes of one thread share the work; a spectrum any shard drew is done."""
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.model.bundle import load_bundle
    from engine.model.querying import QueryPlan
    from engine.progress import run_to_end

    from training.data.oof_data import load_oof

    i_shard, n_shard = shard
    if not 0 <= i_shard < n_shard:
        raise ConfigError(f"--shard {i_shard}/{n_shard}: give i/n with 0 <= i < n, e.g. 0/2 and 1/2.")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(bundle_dir)
    params = QueryParams()
    settings = {"bundle": bundle.checksum, "mgf": str(mgf), "oof": str(oof_dir) if oof_dir else "unseen structures",
                "structures": structures,
                "seed": seed, "folds": list(folds),
                "params": {**_settings(params), "adapter": bool(bundle.has_adapter and params.use_adapter)}}
    meta_path = out_dir / "collect.json"
    if meta_path.is_file() and json.loads(meta_path.read_text())["settings"] != settings:
        raise ConfigError(f"{out_dir} holds pools collected with other settings; use a new --out.")
    meta_path.write_text(json.dumps({"settings": settings}, indent=1) + "\n")
    oof = load_oof(oof_dir, kappa_min=params.kappa_min, kappa_max=params.kappa_max, groups=params.groups) \
        if oof_dir else None
    rows = oof.row_of() if oof is not None else _unseen_ids(bundle, mgf)
    eligible = _eligible(bundle, mgf, rows, folds)
    by_structure: dict[str, list] = {}
    for s in eligible:
        by_structure.setdefault((s.inchikey or s.smiles)[:14], []).append(s)
    rng = np.random.default_rng(seed)
    keys = sorted(by_structure)
    chosen = [by_structure[keys[i]][rng.integers(len(by_structure[keys[i]]))]
              for i in rng.permutation(len(keys))[:structures]]
    chosen = chosen[i_shard::n_shard]
    path = out_dir / ("pools.jsonl" if n_shard == 1 else f"pools.{i_shard}.jsonl")
    done = {d["id"]: d for d in _collected_rows(out_dir) if d["id"] in {s.id for s in chosen}}
    hits = sum(bool(d.get("hit")) for d in done.values())
    yield Collecting(len(done), len(chosen), hits)
    with open(path, "a", encoding="utf-8") as sink:
        for s in chosen:
            if s.id in done:
                continue
            if stop is not None and stop.is_set():
                return
            if oof is not None:
                row = rows[s.id]
                session = SpectrumSession(bundle, s, posterior=oof.posteriors[row].astype(np.float32))
                plan = QueryPlan("band (out-of-fold encoder)", thresholds=tuple(float(t) for t in oof.thresholds(row)))
                result = run_to_end(session.run(params, plan=plan))
            else:  # the app's own run: the bundle's posterior and band
                result = run_to_end(SpectrumSession(bundle, s).run(params))
            features = result_features(result)
            top = result.candidates[:10]  # as ranked, the isomer edits among them
            d = {"id": s.id, "polarity": s.polarity, "inchikey14": result.reference_inchikey14, "rank": result.reference_rank,
                 "hit": result.reference_rank == 1, "features": features, "n_candidates": len(result.candidates),
                 "rank1_edit": bool(top) and made_by_edit(top[0]), "top_edits": [made_by_edit(c) for c in top],
                 "top_counts": [c.count for c in top], "top_fingerprint_scores": [c.fingerprint_score for c in top],
                 "fidelity": result.fidelity, "seconds": round(result.seconds, 3)}
            sink.write(json.dumps(d) + "\n")
            sink.flush()
            done[s.id] = d
            hits += bool(d["hit"])
            yield Collecting(len(done), len(chosen), hits)


def _settings(params) -> dict:
    """The QueryParams a confidence model's probabilities belong to (see ConfidenceModel.applies_to)."""
    return {"kappa_min": params.kappa_min, "kappa_max": params.kappa_max, "groups": params.groups,
            "samples_per_group": params.samples_per_group, "decoding": params.decoding, "ranking": params.ranking,
            "temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
            "edit_rounds": params.edit_rounds}


def _collected_rows(folder: Path) -> list[dict]:
    """The rows of every ``pools*.jsonl`` in ``folder`` (each shard's), one per spectrum; a line cut short by a stop
    is skipped (its spectrum is drawn again)."""
    rows = {}
    for path in sorted(folder.glob("pools*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                rows[d["id"]] = d
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return list(rows.values())


def read_collected(folder: str | Path) -> tuple[np.ndarray, np.ndarray, list[dict], dict]:
    """(X (n, len(FEATURES)) of the pools with candidates whose rank 1 was drawn, their hits (n,), all rows (their
    ``features`` with ``edited``), collect settings)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "collect.json").read_text())
        rows = _collected_rows(folder)
    except OSError as e:
        raise ConfigError(f"{folder}: no collected pools ({e}); run `python -m training.calibration.confidence collect` first.") from e
    if not rows:
        raise ConfigError(f"{folder}: no collected pools; run `python -m training.calibration.confidence collect` first.")
    for r in rows:  # whether an isomer edit made rank 1 (none in pools collected before the edits)
        if r["features"] is not None:
            r["features"] = {**r["features"], EDIT_FEATURE: float(bool(r.get("rank1_edit")))}
    drawn = [r for r in rows if r["features"] is not None and not r["features"][EDIT_FEATURE]]
    X = np.array([[r["features"][f] for f in FEATURES] for r in drawn], np.float64).reshape(-1, len(FEATURES))
    y = np.array([bool(r["hit"]) for r in drawn])
    return X, y, rows, meta["settings"]


def eval_records(run: str | Path, variant: str = "band", decoding: str = "formula", ranking: str = "fingerprint",
                 edited: bool = True) -> list[dict]:
    """The ``variant`` records of an msgpt-eval run, each with its confidence ``features`` (None: no candidate), ``hit``
    and ``edited``: the features the run recorded (the pool as drawn, :func:`engine.model.confidence.result_features`),
    else those of its top ten (runs before isomer edits), and whether an isomer edit made rank 1. ``edited`` False
    leaves those records out, for a confidence model that gives an edited rank 1 no probability."""
    path = Path(run) / "results.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the evaluation run ({e}).") from e
    out = []
    for line in lines:
        r = json.loads(line)
        if r.get("variant") != variant or r.get("decoding", "formula") != decoding or r.get("ranking") != ranking:
            continue
        made = bool(r.get("rank1_edit"))
        if made and not edited:
            continue
        features = r["confidence_features"] if "confidence_features" in r else confidence_features(
            r["top_counts"], r["top_fingerprint_scores"], r["n_samples"], r["n_formula_consistent"], r["n_candidates"])
        if features is not None:
            features = {**features, EDIT_FEATURE: float(made)}
        out.append({"id": r["id"], "features": features, "hit": r["rank"] == 1, "rank": r["rank"], "edited": made})
    if not out:
        raise ConfigError(f"{path}: no {variant!r} records with {decoding} decoding and {ranking} ranking.")
    return out


CV_FOLDS = 5


def _logistic_probabilities(X: np.ndarray, y: np.ndarray, X_new: np.ndarray, l2: float) -> np.ndarray:
    w, b, mean, scale = fit_logistic(X, y, l2=l2)
    z = np.clip(((X_new - mean) / scale) @ w + b, -40, 40)
    return 1.0 / (1.0 + np.exp(-z))


def _folds(n: int, seed: int, groups: Sequence | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of ``CV_FOLDS`` seeded folds over ``n`` pools; with ``groups`` (one label per row),
    every row of a group in the same fold (rows of one spectrum never train the model that scores another)."""
    if groups is None:
        order = np.random.default_rng(seed).permutation(n)
        for k in range(CV_FOLDS):
            test = order[k::CV_FOLDS]
            yield np.setdiff1d(order, test), test
        return
    labels, index = np.unique(np.asarray(groups), return_inverse=True)
    fold_of = np.empty(len(labels), dtype=np.int64)
    fold_of[np.random.default_rng(seed).permutation(len(labels))] = np.arange(len(labels)) % CV_FOLDS
    rows = np.arange(n)
    for k in range(CV_FOLDS):
        test = rows[fold_of[index] == k]
        yield rows[fold_of[index] != k], test


def _cross_fitted(X: np.ndarray, y: np.ndarray, l2: float, seed: int, groups: Sequence | None = None) -> np.ndarray:
    """Each pool's logistic probability from a fit without its fold (:func:`_folds`)."""
    p = np.empty(len(y))
    for train, test in _folds(len(y), seed, groups):
        p[test] = _logistic_probabilities(X[train], y[train], X[test], l2)
    return p


def recalibration_knots(X: np.ndarray, y: np.ndarray, l2: float, seed: int = 1, groups: Sequence | None = None):
    """Isotonic knots from the logistic's cross-fitted probabilities to the pools' outcomes."""
    return isotonic_knots(_cross_fitted(X, y, l2, seed, groups), y.astype(bool))


def cross_validate(X: np.ndarray, y: np.ndarray, l2: float, seed: int = 0,
                   groups: Sequence | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nested cross-validation over the pools: each pool's probability from the logistic fitted without
    its fold, and the same passed through a recalibration fitted (itself cross-fitted) without its fold;
    ``groups`` as for :func:`_folds`."""
    plain = np.empty(len(y))
    recalibrated = np.empty(len(y))
    g = None if groups is None else np.asarray(groups)
    for k, (train, test) in enumerate(_folds(len(y), seed, g)):
        plain[test] = _logistic_probabilities(X[train], y[train], X[test], l2)
        xs, ys = recalibration_knots(X[train], y[train], l2, seed + 1 + k, None if g is None else g[train])
        recalibrated[test] = np.interp(plain[test], xs, ys)
    return plain, recalibrated


def fit(collected: str | Path, l2: float = 1.0, recalibrate: bool = True) -> ConfidenceModel:
    X, y, rows, settings = read_collected(collected)
    if y.sum() < 5 or (~y).sum() < 5:
        raise ConfigError(f"{collected}: {int(y.sum())} right and {int((~y).sum())} wrong rank-1 candidates; "
                          "collect more structures (--structures) before fitting.")
    w, b, mean, scale = fit_logistic(X, y, l2=l2)
    plain, recalibrated = cross_validate(X, y, l2)
    hits = y.astype(bool)
    cv = {"folds": CV_FOLDS, "pools": int(len(y)), "logistic": reliability(plain, hits),
          "recalibrated": reliability(recalibrated, hits)}
    cv["recalibration_kept"] = bool(recalibrate and cv["recalibrated"]["brier"] < cv["logistic"]["brier"])
    knots = recalibration_knots(X, y, l2) if cv["recalibration_kept"] else ()
    model = ConfidenceModel(tuple(w), b, tuple(mean), tuple(scale), FEATURES, dict(settings["params"]),
                            recalibration=knots)
    edits = None
    if any(r["features"] is not None and r["features"][EDIT_FEATURE] for r in rows):  # the same pools: no intercept
        offset, edits = fit_edit_offset(model, rows, intercept=False)
        model = replace(model, edit_offset=offset)
    train_p = [model.probability(r["features"]) for r in rows]
    meta = {"fit": {"collected": str(collected), "spectra": len(rows), "with_candidates": int(len(y)),
                    "hits": int(y.sum()), "l2": l2, "bundle": settings["bundle"], "oof": settings["oof"],
                    "reliability_in_sample": reliability(train_p, [bool(r["hit"]) for r in rows]),
                    "cross_validated": cv},
            # the ion modes of the fitted pools (engine.model.confidence gives none for another; rows collected
            # before the polarity was recorded came from the positive-mode out-of-fold posteriors)
            "polarities": sorted({r.get("polarity") or "positive" for r in rows})}
    if edits is not None:
        meta["edits"] = edits
    return replace(model, meta=meta)


def fit_edits(args: argparse.Namespace) -> int:
    """``fit-edits``: a bundle's confidence model kept as it is, with the edits' offset fitted on collected pools
    (:func:`fit_edit_offset` with an intercept for those pools' difficulty), written into it unless ``--no-record``."""
    path = Path(args.bundle) / "confidence.json"
    if not path.is_file():
        raise ConfigError(f"{args.bundle} has no confidence.json; fit one with `python -m training.calibration.confidence fit`.")
    model = ConfidenceModel.load(path)
    _, _, rows, settings = read_collected(args.collected)
    differ = {k for k, v in model.settings.items() if k != "adapter" and settings["params"].get(k, v) != v}
    if differ:
        raise ConfigError(f"{args.collected} was collected with other settings than the model's ({sorted(differ)}); "
                          "collect pools with the model's settings.")
    offset, report = fit_edit_offset(model, rows, intercept=True, l2=args.l2)
    model = replace(model, edit_offset=offset, meta={**model.meta, "edits": {"collected": str(args.collected),
                                                                             "bundle": settings["bundle"], **report}})
    print(json.dumps(report, indent=1))
    if not args.no_record:
        print(f"wrote {save_model(model, args.bundle)}")
    return 0


def check_on(model: ConfidenceModel, records: list[dict]) -> dict:
    """The reliability of ``model`` on ``records`` (:func:`eval_records`), and for each origin of rank 1 (drawn,
    edited) when both are there."""
    probs = [model.probability(r["features"]) for r in records]
    report = {"probabilities": probs, **reliability(probs, [r["hit"] for r in records])}
    made = [bool(r.get("edited")) for r in records]
    if any(made) and not all(made):
        report["by_origin"] = {name: reliability([p for p, m in zip(probs, made) if m == want],
                                                 [r["hit"] for r, m in zip(records, made) if m == want])
                               for name, want in (("drawn", False), ("edited", True))}
    return report


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a rate k / n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def draw_reliability(report: dict, title: str, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, hx) = plt.subplots(2, 1, figsize=(4.6, 5.4), height_ratios=(3, 1), sharex=True)
    bins = report["bins"]
    ax.plot([0, 1], [0, 1], ls="--", color="0.6", lw=1, label="perfect calibration")
    low, high = zip(*(wilson_interval(round(b["observed"] * b["n"]), b["n"]) for b in bins))
    obs = np.array([b["observed"] for b in bins])
    ax.errorbar([b["predicted"] for b in bins], obs, yerr=[obs - np.array(low), np.array(high) - obs], fmt="o-",
                color="C0", capsize=3, lw=1.2,
                label=f"FOLD=val: {report['n']} spectra, ECE {report['ece']:.3f}, AUROC {report['auroc'] or 0:.2f}\n"
                      "(bars: 95% Wilson interval; numbers: spectra per bin)")
    for b in bins:
        ax.annotate(str(b["n"]), (b["predicted"], b["observed"]), textcoords="offset points", xytext=(4, -10), fontsize=7)
    top = min(1.0, max(0.3, max(max(b["predicted"], h) for b, h in zip(bins, high)) * 1.1))
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_ylabel("observed: rank 1 is right")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    hx.hist(report["probabilities"], bins=np.linspace(0, top, 25), color="C0", alpha=0.7)
    hx.set_xlabel("predicted confidence")
    hx.set_ylabel("spectra")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def save_model(model: ConfidenceModel, out: str | Path) -> Path:
    """Write ``model`` to a bundle folder (``confidence.json``, its checksum recorded in ``config.json``) or a file."""
    from engine.model.bundle import add_bundle_file

    out = Path(out)
    if out.is_dir():
        if not (out / "config.json").is_file():
            raise ConfigError(f"{out} is a folder but not a model bundle (no config.json); give a bundle or a .json file.")
        model.save(out / "confidence.json")
        return add_bundle_file(out, out / "confidence.json")
    return model.save(out)


FIGURE_TITLE = "Confidence that rank 1 is right (band, B=100)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.calibration.confidence", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="draw and rank out-of-fold pools of FOLD=train spectra (resumable)")
    c.add_argument("--bundle", default="resources/default_model")
    c.add_argument("--mgf", required=True)
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument("--oof", help="out-of-fold run folder (training.calibration.oof_posteriors)")
    src.add_argument("--unseen", action="store_true", help="no out-of-fold run: the FOLD=train spectra of structures "
                     "the bundle's encoder never trained on, with its own posteriors")
    c.add_argument("--out", required=True)
    c.add_argument("--structures", type=int, default=1000, help="structures, one spectrum each (default 1000)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--shard", default="0/1", help="i/n: this process draws every n-th spectrum from the i-th "
                   "(n processes of --threads 1 share a collection; default 0/1)")
    f = sub.add_parser("fit", help="fit the confidence model; check it on an msgpt-eval run of FOLD=val")
    f.add_argument("--collected", required=True, help="a `collect` folder")
    f.add_argument("--val-eval", help="msgpt-eval run on FOLD=val (its band records are the check)")
    f.add_argument("--out", required=True, help="a model bundle folder (writes its confidence.json and records its "
                   "checksum) or a .json file")
    f.add_argument("--figure", help="reliability diagram PNG")
    f.add_argument("--title", default=FIGURE_TITLE, help="of the diagram")
    f.add_argument("--l2", type=float, default=1.0, help="L2 penalty on the standardised weights (default 1)")
    f.add_argument("--no-recalibration", action="store_true",
                   help="leave out the isotonic recalibration even where cross-validation keeps it")
    k = sub.add_parser("check", help="check a bundle's confidence model on an msgpt-eval run of FOLD=val (e.g. "
                       "one carried over to a bundle with the same decoder) and record the check in it")
    k.add_argument("--bundle", required=True, help="model bundle with a confidence.json")
    k.add_argument("--val-eval", required=True, help="msgpt-eval run of this bundle on FOLD=val")
    k.add_argument("--figure", help="reliability diagram PNG")
    k.add_argument("--title", default=FIGURE_TITLE, help="of the diagram")
    k.add_argument("--no-record", action="store_true", help="print the check, leave the bundle as it is")
    e = sub.add_parser("fit-edits", help="keep a bundle's confidence model and fit the offset of a rank 1 an isomer "
                       "edit made on collected pools (with edits); record it in the bundle")
    e.add_argument("--bundle", required=True, help="model bundle with a confidence.json")
    e.add_argument("--collected", required=True, help="a `collect` folder of pools drawn with isomer edits")
    e.add_argument("--l2", type=float, default=1.0, help="L2 penalty on the offset (default 1)")
    e.add_argument("--no-record", action="store_true", help="print the fit, leave the bundle as it is")
    return p


def check_bundle(args: argparse.Namespace) -> int:
    """``check``: the bundle's confidence model against a FOLD=val run of that bundle; the check replaces the
    model's recorded one (``meta["val"]``), so the model card describes the bundle it ships in."""
    path = Path(args.bundle) / "confidence.json"
    if not path.is_file():
        raise ConfigError(f"{args.bundle} has no confidence.json; fit one with `python -m training.calibration.confidence fit`.")
    model = ConfidenceModel.load(path)
    report = check_on(model, eval_records(args.val_eval, edited=model.edit_offset is not None))
    meta = {**model.meta, "val": {"eval": str(args.val_eval), **{k: v for k, v in report.items()
                                                                 if k != "probabilities"}}}
    if args.figure:
        draw_reliability(report, args.title, args.figure)
    print(json.dumps({"previous_val": model.meta.get("val"), "val": meta["val"]}, indent=1))
    if not args.no_record:
        print(f"wrote {save_model(replace(model, meta=meta), args.bundle)}")
    return 0


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: give i/n, e.g. 0/2 and 1/2 for two processes.") from None
    return i, n


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "collect":
            from tqdm import tqdm

            bar = None
            with torch_threads(args.threads), stop_on_signals(threading.Event()) as stop:
                t0 = time.perf_counter()
                for e in collect(args.bundle, args.mgf, args.oof, args.out, args.structures, args.seed, stop=stop,
                                 shard=_shard(args.shard)):
                    if bar is None:
                        bar = tqdm(total=e.total, initial=e.done, unit="spectrum")
                    else:
                        bar.update(1)
                    bar.set_postfix(rank1_right=e.hits, refresh=False)
                if bar is not None:
                    bar.close()
                if stop.is_set():
                    print(f"stopped; run the same command again to continue ({time.perf_counter() - t0:.0f} s)")
                    return 130
            return 0
        if args.command == "check":
            return check_bundle(args)
        if args.command == "fit-edits":
            return fit_edits(args)
        model = fit(args.collected, args.l2, recalibrate=not args.no_recalibration)
        meta = dict(model.meta)
        if args.val_eval:
            records = eval_records(args.val_eval, edited=model.edit_offset is not None)
            report = check_on(model, records)
            meta["val"] = {"eval": str(args.val_eval), **{k: v for k, v in report.items() if k != "probabilities"}}
            if args.figure:
                draw_reliability(report, args.title, args.figure)
        model = replace(model, meta=meta)
        written = save_model(model, args.out)
        cv = meta["fit"]["cross_validated"]
        print(json.dumps({"weights": dict(zip(model.features, np.round(model.weights, 3).tolist())),
                          "fit": {k: v for k, v in meta["fit"].items()
                                  if k not in ("reliability_in_sample", "cross_validated")},
                          "cross_validated": {"recalibration_kept": cv["recalibration_kept"],
                                              **{k: {m: cv[k][m] for m in ("ece", "brier", "auroc", "bins")}
                                                 for k in ("logistic", "recalibrated")}},
                          "in_sample": {k: meta["fit"]["reliability_in_sample"][k] for k in ("ece", "brier", "brier_base_rate")},
                          **({"val": meta["val"]} if "val" in meta else {})}, indent=1))
        print(f"wrote {written}")
        return 0
    except MsgptError as e:  # a bad setting, bundle or input file: its message names it and the fix
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
