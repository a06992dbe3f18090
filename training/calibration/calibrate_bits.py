"""Per-bit calibration of the posterior for the fingerprint score (engine.model.scoring), from out-of-fold posteriors.

::

    python -m training.calibration.calibrate_bits --oof runs/oof/oof_posteriors.npz --bundle resources/default_model

Reads the posteriors that encoders trained without each spectrum's structure gave the FOLD=train
spectra (``python -m training.calibration.oof_posteriors``), fits every bit's Platt scaling
(:meth:`engine.model.scoring.BitCalibration.fit`) and writes it into the bundle's ``calibration.json``
(checksum updated). Out-of-fold posteriors look like the ones the shipped encoder gives unseen
structures; in-sample posteriors would teach the score to trust the encoder far too much. The
validation fold is never read. It prints the log-loss per bit of the raw and the recalibrated
posteriors on a held-out fifth of the training structures (fitted on the other four fifths first, as
a check), then fits on everything.

With spectra of both ion modes the check is printed per mode as well. ``--per-polarity`` fits the
negative-mode spectra their own scaling (stored beside the negative-mode ``A(t)`` curve, read by
:meth:`engine.model.querying.Calibration.for_polarity`) and the positive-mode ones theirs; the check then
shows the shared and the per-mode fit side by side, so the choice is made on training structures.

A fit that does not lower the held-out log-loss (the per-mode fit's with ``--per-polarity``) is not
kept: the bundle is written without a per-bit calibration (one left from before is dropped), so the
score reads the encoder's own probabilities. ``--keep-fit`` overrides this.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.model.bundle import save_calibration
from engine.model.querying import Calibration
from engine.model.scoring import EPS, BitCalibration


def load_oof(path: str | Path) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """(posteriors float16 (n, n_bits), true bits per spectrum, InChIKey-14 per spectrum, negative mode?)."""
    with np.load(path, allow_pickle=False) as z:
        post = z["posteriors"]
        offsets, bits = z["bit_offsets"], z["bits"]
        keys = z["inchikey14"].astype(str)
        negative = np.char.endswith(z["adduct"].astype(str), "-")
    targets = [bits[offsets[i]: offsets[i + 1]] for i in range(len(offsets) - 1)]
    return post, targets, keys, negative


def load_finished_folds(
    oof_dir: str | Path, mgf: str | Path
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """The same from the folds of a ``training.calibration.oof_posteriors`` run that have finished (``fold_k/held_out.npz``),
    while the others still train; targets come from the labelled-spectra cache of the same MGF."""
    from training.data.spectra import load_labelled_spectra
    from training.encoder.train_encoder import EncoderTrainConfig

    files = sorted(Path(oof_dir).glob("fold_*/held_out.npz"))
    if not files:
        raise SystemExit(f"{oof_dir}: no finished fold (fold_*/held_out.npz) yet")
    cfg = EncoderTrainConfig.from_dict(json.loads((files[0].parent / "train_config.json").read_text()))
    data = load_labelled_spectra(mgf, cfg.feature_settings(), cache_dir=cfg.cache_dir)
    index = {str(x): i for i, x in enumerate(data.ids)}
    posts, targets, keys, negative = [], [], [], []
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            ids, post = z["ids"].astype(str), z["posteriors"]
        rows = [index[i] for i in ids]
        posts.append(post)
        targets += [data.target_bits(r) for r in rows]
        keys += [str(data.inchikey14[r]) for r in rows]
        negative += [bool(data.polarity[r] < 0) for r in rows]
    print(f"{len(files)} finished folds: {', '.join(f.parent.name for f in files)}")
    return np.concatenate(posts), targets, np.array(keys), np.array(negative, dtype=bool)


def log_loss(q: np.ndarray, targets: list[np.ndarray]) -> float:
    """Mean negative log-likelihood per bit of the true fingerprints under probabilities q (n, n_bits)."""
    q = np.clip(q.astype(np.float64), 1e-6, 1 - 1e-6)
    total = np.log1p(-q).sum()
    for i, t in enumerate(targets):
        total += (np.log(q[i, t]) - np.log1p(-q[i, t])).sum()
    return float(-total / q.size)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--oof", help="oof_posteriors.npz of training.calibration.oof_posteriors (all folds)")
    src.add_argument("--oof-dir", help="a training.calibration.oof_posteriors folder: use the folds that have finished")
    ap.add_argument("--mgf", help="the labelled MGF the folds were trained on (with --oof-dir)")
    ap.add_argument("--bundle", required=True, help="model bundle folder whose calibration.json gets the fit")
    ap.add_argument("--prior-strength", type=float, default=50.0, help="pull of each bit towards the shared scaling")
    ap.add_argument("--per-polarity", action="store_true",
                    help="fit each ion mode its own scaling (spectra of both modes; default: one for both)")
    ap.add_argument("--check-only", action="store_true", help="print the held-out check, write nothing")
    ap.add_argument("--keep-fit", action="store_true",
                    help="write the fit even when it does not lower the held-out log-loss (default: the bundle then "
                         "keeps no per-bit calibration)")
    args = ap.parse_args(argv)

    if args.oof:
        post, targets, keys, negative = load_oof(args.oof)
        source = Path(args.oof).name
    else:
        if not args.mgf:
            ap.error("--oof-dir needs --mgf")
        post, targets, keys, negative = load_finished_folds(args.oof_dir, args.mgf)
        source = f"{Path(args.oof_dir).name} (finished folds)"
    held = np.array([zlib.crc32(k.encode()) % 5 == 0 for k in keys])  # a fifth of the structures
    groups = {"all": np.ones(len(keys), dtype=bool)}
    if negative.any() and (~negative).any():
        groups.update(positive=~negative, negative=negative)
    elif args.per_polarity:
        ap.error("--per-polarity needs spectra of both ion modes")
    report = {"spectra": int(len(post)), "structures": int(len(set(keys))), "prior_strength": args.prior_strength}

    def fit(rows: np.ndarray, source: str = "") -> BitCalibration:
        return BitCalibration.fit(post[rows], [targets[i] for i in rows], prior_strength=args.prior_strength,
                                  source=source)

    shared_check = fit(np.flatnonzero(~held))
    mode_checks = {m: fit(np.flatnonzero(~held & groups[m])) for m in ("positive", "negative")
                   if args.per_polarity}
    for name, rows in groups.items():
        test_idx = np.flatnonzero(held & rows)
        test_post = post[test_idx].astype(np.float64)
        test_targets = [targets[i] for i in test_idx]
        line = {"held_out_spectra": int(len(test_idx)),
                "logloss_per_bit_raw": round(log_loss(np.clip(test_post, EPS, 1 - EPS), test_targets), 6),
                "logloss_per_bit_shared_fit": round(
                    log_loss(np.stack([shared_check.probabilities(p) for p in test_post]), test_targets), 6)}
        if args.per_polarity:  # each spectrum under its own mode's fit
            own = [mode_checks["negative" if negative[i] else "positive"] for i in test_idx]
            line["logloss_per_bit_own_mode_fit"] = round(
                log_loss(np.stack([c.probabilities(p) for c, p in zip(own, test_post)]), test_targets), 6)
        report[f"held_out_{name}"] = line
    checked = report["held_out_all"]
    fitted = checked["logloss_per_bit_own_mode_fit" if args.per_polarity else "logloss_per_bit_shared_fit"]
    report["fit_kept"] = bool(fitted < checked["logloss_per_bit_raw"] or args.keep_fit)
    print(json.dumps(report, indent=1))
    if args.check_only:
        return 0
    what = f"out-of-fold posteriors {source}"
    calibration = Calibration.load(Path(args.bundle) / "calibration.json")
    if not report["fit_kept"]:
        calibration = replace(calibration, bits=None,
                              negative=calibration.negative and replace(calibration.negative, bits=None))
        written = save_calibration(args.bundle, calibration)
        print(f"the fit does not lower the held-out log-loss per bit ({checked['logloss_per_bit_raw']} raw, {fitted} "
              f"fitted), so none is kept: the score reads the encoder's own probabilities ({written}; "
              "--keep-fit writes it all the same)")
        return 0
    if args.per_polarity:
        if calibration.negative is None:
            raise SystemExit(f"{args.bundle}: its calibration has no negative-mode curve to keep a fit beside")
        pos, neg = np.flatnonzero(groups["positive"]), np.flatnonzero(groups["negative"])
        neg_curve = replace(calibration.negative, bits=fit(neg, f"{what}, {len(neg)} negative-mode FOLD=train spectra"))
        calibration = replace(calibration, bits=fit(pos, f"{what}, {len(pos)} positive-mode FOLD=train spectra"),
                              negative=neg_curve)
    else:
        calibration = replace(calibration, bits=fit(np.arange(len(keys)), f"{what}, {len(post)} FOLD=train spectra"),
                              negative=calibration.negative and replace(calibration.negative, bits=None))
    written = save_calibration(args.bundle, calibration)
    print(f"wrote the per-bit calibration into {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
