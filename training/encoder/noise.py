"""A fingerprint noise model for noise-aware decoder pretraining, measured on out-of-fold posteriors.

At inference the decoder never sees a true fingerprint: it sees ``1[π > t_m]``, the encoder's posterior
cut at the M thresholds of the density band. On structures the encoder never saw, those queries miss
many true bits and carry false ones (out-of-fold fidelity at κ=1 is about 0.31). A decoder pretrained
only on true fingerprints has never seen such a query. MSNovelist trains its decoder on fingerprints
simulated from per-bit cross-validation error rates; this module does the same with our own
out-of-fold posteriors (:mod:`training.calibration.oof_posteriors`):

* **Fit** (:meth:`FingerprintNoise.fit`): for each band level ``m`` (the band's M thresholds of the
  fold encoder that scored the spectrum, from its own ``calibration.json``) and each bit ``i``,

  - ``keep[m, i]``     = P(query bit i on | bit i is in the true fingerprint),
  - ``false_on[m, i]`` = P(query bit i on | bit i is not),

  counted over every out-of-fold spectrum and shrunk towards the level's rate over all bits
  (``prior_strength`` pseudo-counts), so that rare bits get the common rate, not 0 or 1.
* **Corrupt** (:meth:`FingerprintNoise.corrupt`): a true fingerprint becomes a simulated query by
  drawing a level uniformly and keeping / switching on each bit independently with these rates.
  The bits' errors are independent here, which the encoder's are not (it confuses similar
  structures); that is the model's known simplification.

    python -m training.encoder.noise fit --oof runs/oof --out runs/noise.npz
    python -m training.encoder.noise fit --bundle resources/default_model --mgf ../shared/data/massbank_dev.mgf.gz \
        --out runs/noise_bundle.npz
    python -m training.encoder.noise show runs/noise.npz

Without an out-of-fold run (hours of CPU), ``fit --bundle`` measures the same rates on the shipped
encoder itself (:func:`fit_from_bundle`): its posteriors on the ``FOLD=train`` spectra whose structure it
never trained on. Those are the structures that only non-redistributable (``NC``) records hold: the
encoder trains on the redistributable licences only, and its simulated spectra are drawn from corpus
molecules outside every record of the MGF file, so neither the measured nor the simulated training data
contain them. No ``FOLD=val`` spectrum is read.

The file is a plain ``.npz`` (no pickled objects; read with ``allow_pickle=False``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.errors import BundleError, ConfigError

from training.data.oof_data import load_oof

FORMAT = "msgpt-fingerprint-noise"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class FingerprintNoise:
    """Per-level, per-bit rates of the band queries of unseen structures (see the module docstring)."""

    keep: np.ndarray  # (M, n_bits) float32
    false_on: np.ndarray  # (M, n_bits) float32
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        keep, false_on = np.asarray(self.keep, np.float32), np.asarray(self.false_on, np.float32)
        if keep.ndim != 2 or keep.shape != false_on.shape or keep.shape[0] < 1:
            raise ConfigError(
                f"noise rates must be two arrays of the same shape (levels, bits), got {keep.shape} and {false_on.shape}."
            )
        for name, a in (("keep", keep), ("false_on", false_on)):
            if not np.all((a >= 0) & (a <= 1)):
                raise ConfigError(f"noise rates `{name}` must lie in [0, 1]; the file is damaged, refit it.")
        object.__setattr__(self, "keep", keep)
        object.__setattr__(self, "false_on", false_on)

    @property
    def levels(self) -> int:
        return self.keep.shape[0]

    @property
    def n_bits(self) -> int:
        return self.keep.shape[1]

    # -- fitting ---------------------------------------------------------------------------------

    @classmethod
    def fit(
        cls,
        posteriors: np.ndarray,
        true_bits: Sequence[np.ndarray],
        thresholds: np.ndarray,
        *,
        prior_strength: float = 20.0,
        chunk: int = 2048,
        meta: dict | None = None,
    ) -> FingerprintNoise:
        """Rates from ``posteriors`` (n, n_bits), the true active bits of each row, and per-row thresholds
        ``thresholds`` (n, M) (or (M,) for all rows): query ``m`` of row ``r`` is ``π_r > thresholds[r, m]``."""
        posteriors = np.asarray(posteriors)
        n, n_bits = posteriors.shape
        if len(true_bits) != n:
            raise ConfigError(f"{len(true_bits)} true fingerprints for {n} posteriors; give one per posterior row.")
        thresholds = np.asarray(thresholds, np.float32)
        if thresholds.ndim == 1:
            thresholds = np.broadcast_to(thresholds, (n, len(thresholds)))
        if thresholds.shape[0] != n:
            raise ConfigError(f"thresholds of shape {thresholds.shape} do not give a row per posterior ({n}).")
        if not prior_strength >= 0:
            raise ConfigError(f"`prior_strength` must be >= 0, got {prior_strength!r}.")
        M = thresholds.shape[1]
        n_on = np.zeros(n_bits, np.int64)
        tp = np.zeros((M, n_bits), np.int64)
        fp = np.zeros((M, n_bits), np.int64)
        for start in range(0, n, chunk):
            post = np.asarray(posteriors[start : start + chunk], np.float32)
            truth = np.zeros(post.shape, bool)
            for r, bits in enumerate(true_bits[start : start + chunk]):
                truth[r, np.asarray(bits, np.int64)] = True
            n_on += truth.sum(0)
            for m in range(M):
                on = post > thresholds[start : start + chunk, m : m + 1]
                tp[m] += (on & truth).sum(0)
                fp[m] += (on & ~truth).sum(0)
        n_off = n - n_on
        keep_all = tp.sum(1) / max(int(n_on.sum()), 1)  # (M,)
        false_all = fp.sum(1) / max(int(n_off.sum()), 1)
        a = float(prior_strength)
        keep, false_on = _shrunk_rate(tp, n_on, keep_all, a), _shrunk_rate(fp, n_off, false_all, a)
        info = {
            "spectra": int(n),
            "prior_strength": a,
            "keep_per_level": [round(float(x), 5) for x in keep_all],
            "false_on_per_level": [round(float(x), 7) for x in false_all],
            "mean_true_bits": float(n_on.sum() / max(n, 1)),
            "mean_query_bits_per_level": [round(float((tp[m].sum() + fp[m].sum()) / max(n, 1)), 3) for m in range(M)],
            **(meta or {}),
        }
        return cls(keep.astype(np.float32), false_on.astype(np.float32), info)

    # -- simulation ------------------------------------------------------------------------------

    def expected_bits(self, true_bits: np.ndarray, level: int) -> float:
        """Mean size of the simulated query of ``true_bits`` at ``level`` (for checks and reports)."""
        truth = np.zeros(self.n_bits, bool)
        truth[np.asarray(true_bits, np.int64)] = True
        return float(self.keep[level][truth].sum() + self.false_on[level][~truth].sum())

    def corrupt(self, true_bits: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
        """One simulated band query (sorted active bits) per true fingerprint, each at a random level."""
        k = len(true_bits)
        if k == 0:
            return []
        truth = np.zeros((k, self.n_bits), bool)
        for r, bits in enumerate(true_bits):
            truth[r, np.asarray(bits, np.int64)] = True
        levels = rng.integers(0, self.levels, size=k)
        p = np.where(truth, self.keep[levels], self.false_on[levels])
        on = rng.random((k, self.n_bits), dtype=np.float32) < p
        return [np.flatnonzero(row) for row in on]

    def corrupt_batch(self, batch: dict[str, torch.Tensor], fraction: float, rng: np.random.Generator) -> dict:
        """A collated pretraining batch (:meth:`training.data.dataset.CorpusDataset.collate`) in which a share
        ``fraction`` of the rows (each row independently) conditions on a simulated query instead of its
        true fingerprint. Tokens, targets and formulas are unchanged."""
        if fraction <= 0:
            return batch
        fp_bits, fp_mask = batch["fp_bits"], batch["fp_mask"]
        rows = np.flatnonzero(rng.random(fp_bits.shape[0]) < fraction)
        if len(rows) == 0:
            return batch
        true = [fp_bits[r][fp_mask[r]].numpy() for r in rows]
        noisy = self.corrupt(true, rng)
        width = fp_bits.shape[1]
        longest = max(width, max(len(q) for q in noisy))
        new_bits = torch.zeros((fp_bits.shape[0], longest), dtype=fp_bits.dtype)
        new_mask = torch.zeros((fp_bits.shape[0], longest), dtype=torch.bool)
        new_bits[:, :width], new_mask[:, :width] = fp_bits, fp_mask
        for r, q in zip(rows, noisy):
            new_bits[r] = 0
            new_mask[r] = False
            new_bits[r, : len(q)] = torch.from_numpy(q)
            new_mask[r, : len(q)] = True
        return {**batch, "fp_bits": new_bits[:, :width], "fp_mask": new_mask[:, :width]}

    # -- files -----------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as fh:
            np.savez(
                fh, keep=self.keep, false_on=self.false_on,
                header=np.array(json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "meta": self.meta})),
            )  # fmt: skip
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> FingerprintNoise:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                header = json.loads(str(z["header"]))
                keep, false_on = z["keep"], z["false_on"]
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            raise BundleError(
                f"{path}: not a readable fingerprint noise model ({e}); fit one with "
                "`python -m training.encoder.noise fit --oof runs/oof --out runs/noise.npz`."
            ) from e
        if header.get("format") != FORMAT or header.get("version") != FORMAT_VERSION:
            raise BundleError(
                f"{path}: not a noise model of format {FORMAT!r} version {FORMAT_VERSION} "
                f"(found {header.get('format')!r} version {header.get('version')!r})."
            )
        return cls(keep, false_on, header.get("meta", {}))


def _shrunk_rate(count: np.ndarray, total: np.ndarray, level_rate: np.ndarray, a: float) -> np.ndarray:
    """(count + a * level rate) / (total + a) per level and bit; the level's rate where nothing was counted."""
    num, den = count + a * level_rate[:, None], total[None, :] + a
    return np.where(den > 0, num / np.maximum(den, 1e-12), level_rate[:, None])


# -----------------------------------------------------------------------------------------------
# Fitting from an out-of-fold run


def fit_from_oof(
    oof_dir: str | Path,
    *,
    kappa_min: float = 0.95,
    kappa_max: float = 1.50,
    groups: int = 20,
    prior_strength: float = 20.0,
) -> FingerprintNoise:
    """The noise model of an out-of-fold run: each spectrum's posterior cut at the band thresholds of
    the fold encoder that scored it (its ``fold_<k>/calibration.json``)."""
    oof = load_oof(oof_dir, kappa_min=kappa_min, kappa_max=kappa_max, groups=groups)
    true_bits = [oof.true_bits(i) for i in range(len(oof))]
    per_fold = oof.band
    thresholds = np.stack([oof.thresholds(i) for i in range(len(oof))])  # each at its ion mode's band
    posteriors = oof.posteriors
    meta = {
        "source": str(oof_dir),
        "band": [kappa_min, kappa_max],
        "groups": groups,
        "fold_thresholds": {str(k): [round(float(t), 5) for t in v] for k, v in per_fold.items()},
    }
    return FingerprintNoise.fit(posteriors, true_bits, thresholds, prior_strength=prior_strength, meta=meta)


def encoder_licenses(bundle_config: dict, where: str) -> list[str]:
    """The MassBank licences a bundle's encoder trained on, as its ``config.json`` records them."""
    recorded = (bundle_config.get("training", {}).get("encoder_summary", {}) or {}).get("train_config", {})
    if not recorded.get("licenses"):
        raise ConfigError(f"{where}: the bundle does not record the licences its encoder trained on (or it trained "
                          "on every licence), so no structure is known to be unseen by it; use an out-of-fold run "
                          "instead (--oof).")
    return list(recorded["licenses"])


def unseen_structures(fold: np.ndarray, license: np.ndarray, inchikey14: np.ndarray,
                      trained_licenses: Sequence[str]) -> np.ndarray:
    """Mask of the ``FOLD=train`` records whose structure no ``FOLD=train`` record of ``trained_licenses``
    holds: the structures an encoder trained on those licences never saw measured."""
    fold, license, inchikey14 = np.asarray(fold), np.asarray(license), np.asarray(inchikey14)
    train = fold == "train"
    seen = set(inchikey14[train & np.isin(license, list(trained_licenses))].tolist())
    return train & (inchikey14 != "") & ~np.isin(inchikey14, list(seen))


def unseen_training_rows(data, trained_licenses: Sequence[str] | None) -> np.ndarray:
    """Rows of high-resolution ``FOLD=train`` spectra of structures unseen by an encoder trained on
    ``trained_licenses`` (:func:`unseen_structures`)."""
    if trained_licenses is None:
        raise ConfigError("the encoder trained on every licence: no FOLD=train structure is unseen by it; "
                          "fit on an out-of-fold run instead (--oof).")
    keep = data.selection_mask(folds=("train",), licenses=None, exclude_unit_resolution=True)
    return np.flatnonzero(keep & unseen_structures(data.fold, data.license, data.inchikey14, trained_licenses))


def fit_from_bundle(
    bundle_dir: str | Path,
    mgf: str | Path,
    *,
    kappa_min: float = 0.95,
    kappa_max: float = 1.50,
    groups: int = 20,
    prior_strength: float = 20.0,
    batch_size: int = 256,
    cache_dir: str | Path | None = None,
) -> FingerprintNoise:
    """The noise model of a bundle's own encoder, measured on the ``FOLD=train`` spectra of structures it
    never trained on (see the module docstring), each cut at the band of its ion mode's calibration."""
    from engine.model.bundle import load_bundle
    from engine.model.querying import band_thresholds

    from training.data.spectra import FeatureSettings, load_labelled_spectra
    from training.encoder.train_encoder import predict_posteriors

    bundle = load_bundle(bundle_dir, device="cpu", precision="fp32")
    encoder = bundle.encoder
    licenses = encoder_licenses(bundle.config, str(bundle_dir))
    recorded = bundle.config["training"]["encoder_summary"]["train_config"]
    settings = FeatureSettings.for_encoder(
        encoder.config, adducts=tuple(recorded.get("adducts") or bundle.supported_adducts),
        precursor_tol_ppm=recorded.get("precursor_tol_ppm", 10.0), precursor_tol_da=recorded.get("precursor_tol_da", 0.01),
    )
    data = load_labelled_spectra(mgf, settings, cache_dir=cache_dir)
    rows = unseen_training_rows(data, licenses)
    if not len(rows):
        raise ConfigError(f"{mgf}: no FOLD=train spectrum of a structure the encoder of {bundle_dir} never saw.")
    unseen = data.subset(rows)
    posteriors = predict_posteriors(encoder, unseen, batch_size)
    bands = {pol: band_thresholds(bundle.calibration.for_polarity("negative" if pol < 0 else "positive"),
                                  kappa_min, kappa_max, groups) for pol in (1, -1)}
    thresholds = np.stack([bands[-1 if p < 0 else 1] for p in unseen.polarity])
    true_bits = [unseen.target_bits(i) for i in range(len(unseen))]
    meta = {
        "source": f"bundle {bundle.name} [{bundle.checksum[:12]}] on {Path(mgf).name}: FOLD=train spectra of "
                  f"structures outside its encoder's training licences {licenses}",
        "structures": int(len(set(unseen.inchikey14.tolist()))),
        "negative_spectra": int((unseen.polarity < 0).sum()),
        "band": [kappa_min, kappa_max],
        "groups": groups,
        "thresholds": {name: [round(float(t), 5) for t in bands[pol]] for name, pol in (("positive", 1), ("negative", -1))},
    }
    return FingerprintNoise.fit(posteriors, true_bits, thresholds, prior_strength=prior_strength, meta=meta)


def describe(noise: FingerprintNoise) -> str:
    m = noise.meta
    lines = [f"{noise.levels} band levels x {noise.n_bits} bits, fitted on {m.get('spectra', '?')} spectra "
             f"(prior strength {m.get('prior_strength', '?')})"]
    if "mean_true_bits" in m:
        lines.append(f"mean true bits {m['mean_true_bits']:.2f}")
    for i, (k, f, q) in enumerate(zip(m.get("keep_per_level", []), m.get("false_on_per_level", []),
                                      m.get("mean_query_bits_per_level", []))):
        lines.append(f"level {i:2d}: keep {k:.3f}  false-on {f:.5f}  mean query bits {q:.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.encoder.noise", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit the noise model of an out-of-fold run")
    src = f.add_mutually_exclusive_group(required=True)
    src.add_argument("--oof", help="directory of `python -m training.calibration.oof_posteriors`")
    src.add_argument("--bundle", help="a model bundle: its encoder on the FOLD=train structures it never saw (with --mgf)")
    f.add_argument("--mgf", help="with --bundle: the labelled MGF (FOLD, LICENSE, SMILES per record)")
    f.add_argument("--out", required=True, help="the .npz to write")
    f.add_argument("--band", nargs=2, type=float, default=(0.95, 1.50), metavar=("KMIN", "KMAX"))
    f.add_argument("--groups", type=int, default=20, help="M, the band's thresholds (levels)")
    f.add_argument("--prior-strength", type=float, default=20.0, help="pseudo-counts towards the level's rate")
    s = sub.add_parser("show", help="print a noise model's summary")
    s.add_argument("path")
    args = p.parse_args(argv)
    try:
        if args.cmd == "fit":
            band = dict(kappa_min=args.band[0], kappa_max=args.band[1], groups=args.groups,
                        prior_strength=args.prior_strength)
            if args.bundle:
                if not args.mgf:
                    raise ConfigError("--bundle needs --mgf: the labelled spectra to measure its encoder on.")
                noise = fit_from_bundle(args.bundle, args.mgf, **band)
            else:
                noise = fit_from_oof(args.oof, **band)
            print(f"wrote {noise.save(args.out)}")
        else:
            noise = FingerprintNoise.load(args.path)
        print(describe(noise))
    except (ConfigError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
