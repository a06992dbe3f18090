"""Reading an out-of-fold run (:mod:`training.calibration.oof_posteriors`): posteriors, true bits and each fold's band.

Every training spectrum's posterior there comes from the fold encoder that never saw its structure, so
its queries miss bits the way the shipped encoder's queries miss them on a new compound. The noise
model (:mod:`training.encoder.noise`) and the adapter (:mod:`training.decoder.adapt`) both read them through
:func:`load_oof`. Each spectrum is queried at the band thresholds of *its* fold encoder (that encoder's
``fold_<k>/calibration.json``), as the app queries the shipped encoder at the shipped calibration's.

No RDKit here: pretraining on an accelerator imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import BundleError
from engine.model.querying import Calibration, band_thresholds

MAKE_OOF = ("`python -m training.calibration.oof_posteriors --mgf ../shared/data/massbank_dev.mgf.gz --out runs/oof "
            "--folds 5`")


@dataclass(frozen=True)
class OOFPosteriors:
    """The arrays of ``oof_posteriors.npz`` plus each fold encoder's band thresholds."""

    folder: Path
    ids: np.ndarray  # (n,) str: the spectra's TITLEs
    fold: np.ndarray  # (n,) int64
    posteriors: np.ndarray  # (n, n_bits) float16
    bit_offsets: np.ndarray  # (n + 1,) CSR offsets of the true bits
    bits: np.ndarray  # true active bits, concatenated
    band: dict[int, np.ndarray]  # fold -> its M band thresholds, dense end first (ascending)
    kappa: tuple[float, float]
    negative: np.ndarray | None = None  # (n,) bool: negative-mode ions (None: a run of one ion mode)
    band_negative: dict[int, np.ndarray] | None = None  # fold -> the band of its negative-mode curve

    def __len__(self) -> int:
        return len(self.ids)

    def true_bits(self, row: int) -> np.ndarray:
        return self.bits[self.bit_offsets[row] : self.bit_offsets[row + 1]]

    def thresholds(self, row: int) -> np.ndarray:
        """The band thresholds of the encoder that scored spectrum ``row`` (at its ion mode's calibration)."""
        k = int(self.fold[row])
        if self.negative is not None and self.negative[row] and self.band_negative and k in self.band_negative:
            return self.band_negative[k]
        return self.band[k]

    def row_of(self) -> dict[str, int]:
        """TITLE -> row (the first row of a TITLE seen twice)."""
        out: dict[str, int] = {}
        for i, title in enumerate(self.ids.tolist()):
            out.setdefault(title, i)
        return out


def load_oof(folder: str | Path, *, kappa_min: float = 0.95, kappa_max: float = 1.50, groups: int = 20) -> OOFPosteriors:
    """Load ``folder/oof_posteriors.npz`` and the band (``kappa_min``..``kappa_max``, ``groups`` thresholds) of every fold."""
    folder = Path(folder)
    npz = folder / "oof_posteriors.npz"
    try:
        z = np.load(npz, allow_pickle=False)
    except OSError as e:
        raise BundleError(f"{npz}: cannot read the out-of-fold posteriors ({e}); make them with {MAKE_OOF}.") from e
    with z:
        ids, fold = z["ids"], z["fold"].astype(np.int64)
        posteriors, offsets, bits = z["posteriors"], z["bit_offsets"], z["bits"]
        adduct = z["adduct"] if "adduct" in z.files else None
    band, band_negative = {}, {}
    for k in np.unique(fold).tolist():
        cal_path = folder / f"fold_{k}" / "calibration.json"
        if not cal_path.is_file():
            raise BundleError(f"{cal_path}: missing; the out-of-fold run {folder} is not complete (rerun it with --resume).")
        cal = Calibration.load(cal_path)
        band[int(k)] = band_thresholds(cal, kappa_min, kappa_max, groups)
        if cal.negative is not None:
            band_negative[int(k)] = band_thresholds(cal.for_polarity("negative"), kappa_min, kappa_max, groups)
    negative = np.char.endswith(adduct.astype(str), "-") if adduct is not None else None
    if negative is not None and not negative.any():
        negative = None
    return OOFPosteriors(folder, ids, fold, posteriors, offsets, bits, band, (kappa_min, kappa_max),
                         negative, band_negative or None)
