"""Labelled spectra for encoder training and calibration: read an MGF once, featurize, cache as .npz.

:func:`iter_load_labelled_spectra` streams the file with :func:`engine.spectra.io.iter_spectra`, keeps every
record that can train the encoder (rules below), annotates and featurizes its peaks as
:func:`engine.model.featurize.featurize_spectrum` does, and computes its target, the radius-2 Morgan bits
of the stereo-free reference structure. Everything goes into flat arrays (:class:`LabelledSpectra`) and an
``.npz`` cache (``np.savez``, loaded with ``allow_pickle=False``: text is stored as fixed-width unicode
arrays, the report as a JSON string). The cache file is named after a hash of the file's *content*
and of the settings that change the arrays (:class:`FeatureSettings`), so a renamed copy still hits
and any other setting misses.

The cache holds every usable record of *all* folds and licenses with its ``FOLD``, ``LICENSE`` and
``INSTRUMENT_TYPE``; :meth:`LabelledSpectra.select` picks folds, licenses and instruments afterwards,
so training, validation and calibration share one read of the file.

Rules for a usable record (``report["dropped"]`` counts each reason):

* read with a precursor tolerance of ``max(10 ppm, 0.01 Da)`` (:mod:`engine.spectra.io`'s default). On
  ``massbank_dev.mgf.gz`` 2,075 ``[M+H]+`` / ``[M+Na]+`` records with formula and SMILES miss it
  (1,994 of them have a one-decimal PEPMASS); 2,058 are unit-resolution instruments, which are
  excluded anyway, and the other 17 are 0.01-0.48 Da off (8 of them in licences the shipped model
  may use), so a looser tolerance would mostly let in mis-annotated records;
* an adduct in ``adducts`` (default ``[M+H]+``, ``[M+Na]+``; negative-mode ions such as ``[M-H]-``
  when asked: the record's polarity must agree with it), a formula and a reference SMILES RDKit can
  parse;
* the peaks annotate (:func:`engine.spectra.annotate.annotate_spectrum` with the encoder's ``tol_ppm``,
  ``tol_da``, ``min_rdbe``); a record with no annotated peak is kept (its root token still carries
  the formula; 1.2 % of the selected training spectra) unless ``min_annotated_peaks`` says otherwise.

Unit-resolution instruments (:func:`is_unit_resolution`: ``INSTRUMENT_TYPE`` ending in ``-QQ``,
``-IT``, ``-QIT``, ``-Q``...) are kept in the cache and excluded by :meth:`LabelledSpectra.select`
by default: on a 12 % sample of the file their peaks annotate at the rate of decoy peaks shifted by
10-30 mDa (LC-ESI-QQ 8 % vs 8 %, LC-ESI-IT 30 % vs 27 %; 47 % of the QQ spectra get no annotated
peak), while high-resolution ones are far above it (QTOF 70 % vs 32 %, ITFT 96 % vs 27 %, QFT 98 % vs
36 %). Their tokens would be noise labelled as fragments.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from engine import paths
from engine.chem.formula import ELEMENTS
from engine.chem.molecules import mol_from_smiles, morgan_bits, remove_stereo
from engine.errors import ConfigError, MsgptError
from engine.model.encoder import DEFAULT_MAX_PEAKS, EncoderConfig
from engine.model.featurize import SpectrumFeatures, collate, featurize_annotation
from engine.spectra.annotate import DEFAULT_MIN_RDBE as ANNOTATION_MIN_RDBE
from engine.spectra.annotate import DEFAULT_TOL_DA as ANNOTATION_TOL_DA
from engine.spectra.annotate import DEFAULT_TOL_PPM as ANNOTATION_TOL_PPM
from engine.spectra.annotate import annotate_spectrum
from engine.spectra.io import iter_spectra
from engine.spectra.spectrum import DEFAULT_TOL_DA, DEFAULT_TOL_PPM, SkippedRecord

log = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
#: Licences the shipped model may be trained on (the same list as training.data.corpus.DEFAULT_MGF_LICENSES).
SHIPPABLE_LICENSES: tuple[str, ...] = ("CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0")
#: Mass analysers (last part of MassBank's INSTRUMENT_TYPE) that give unit-resolution spectra.
UNIT_RESOLUTION_ANALYZERS = frozenset({"Q", "QQ", "QQQ", "TQ", "IT", "QIT", "LIT", "QQLIT", "QQIT"})
_PROGRESS_EVERY = 2000  # records between progress events


def is_unit_resolution(instrument_type: str | None) -> bool:
    """True for MassBank ``INSTRUMENT_TYPE`` values whose analyser is unit-resolution (``LC-ESI-QQ``).

    Missing or unknown instrument types count as high resolution (``False``).
    """
    if not instrument_type:
        return False
    return instrument_type.strip().upper().rsplit("-", 1)[-1] in UNIT_RESOLUTION_ANALYZERS


DEFAULT_ADDUCTS = ("[M+H]+", "[M+Na]+")  # what the encoder trains on unless told otherwise


@dataclass(frozen=True)
class FeatureSettings:
    """Everything that changes the cached arrays (and so the cache key)."""

    adducts: tuple[str, ...] = DEFAULT_ADDUCTS
    precursor_tol_ppm: float = DEFAULT_TOL_PPM
    precursor_tol_da: float = DEFAULT_TOL_DA
    tol_ppm: float = ANNOTATION_TOL_PPM  # peak annotation: the encoder config's values
    tol_da: float = ANNOTATION_TOL_DA
    min_rdbe: float | None = ANNOTATION_MIN_RDBE
    max_peaks: int = DEFAULT_MAX_PEAKS
    fp_bits: int = 4096
    radius: int = 2

    def __post_init__(self):
        object.__setattr__(self, "adducts", tuple(self.adducts))
        if not self.adducts:
            raise ConfigError("`adducts` is empty; give at least one, e.g. [M+H]+.")
        if self.precursor_tol_ppm < 0 or self.precursor_tol_da < 0:
            raise ConfigError(
                f"`precursor_tol_ppm` and `precursor_tol_da` must be >= 0, got {self.precursor_tol_ppm} and "
                f"{self.precursor_tol_da}."
            )

    @classmethod
    def for_encoder(cls, config: EncoderConfig, **overrides) -> FeatureSettings:
        """The annotation settings, ``max_peaks`` and ``fp_bits`` of an encoder config (+ overrides)."""
        base = dict(
            tol_ppm=config.tol_ppm,
            tol_da=config.tol_da,
            min_rdbe=config.min_rdbe,
            max_peaks=config.max_peaks,
            fp_bits=config.fp_bits,
        )
        return cls(**{**base, **overrides})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adducts"] = list(self.adducts)
        return d


# ----------------------------------------------------------------------------------------------
# The dataset


_TEXT_FIELDS = ("ids", "inchikey14", "adduct", "fold", "license", "instrument")
_ARRAY_FIELDS = (
    "token_offsets", "formulas", "intensities", "adduct_retained", "polarity",
    "bit_offsets", "bits", "n_peaks", "n_unannotated",
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class LabelledSpectra:
    """Featurized spectra with their fingerprint targets, as flat arrays (spectrum ``i`` owns tokens
    ``token_offsets[i]:token_offsets[i+1]`` and bits ``bit_offsets[i]:bit_offsets[i+1]``)."""

    ids: np.ndarray  # (n,) str, the record's TITLE
    inchikey14: np.ndarray  # (n,) str
    adduct: np.ndarray  # (n,) str
    fold: np.ndarray  # (n,) str, "" when the record has no FOLD
    license: np.ndarray  # (n,) str
    instrument: np.ndarray  # (n,) str, INSTRUMENT_TYPE or ""
    token_offsets: np.ndarray  # (n + 1,) int64
    formulas: np.ndarray  # (T, 14) int16, root first
    intensities: np.ndarray  # (T,) float32
    adduct_retained: np.ndarray  # (T,) uint8
    polarity: np.ndarray  # (n,) int8, +1 / -1
    bit_offsets: np.ndarray  # (n + 1,) int64
    bits: np.ndarray  # (sum of active bits,) uint16, sorted per spectrum
    n_peaks: np.ndarray  # (n,) int32 peaks in the record
    n_unannotated: np.ndarray  # (n,) int32 peaks without a subformula
    settings: FeatureSettings
    report: dict  # counts of read / kept / dropped records, source file and hash

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_tokens(self) -> np.ndarray:
        """Tokens per spectrum, root included (``int64 (n,)``)."""
        return np.diff(self.token_offsets)

    @property
    def n_true_bits(self) -> np.ndarray:
        """Active bits of each target fingerprint (``int64 (n,)``)."""
        return np.diff(self.bit_offsets)

    def target_bits(self, i: int) -> np.ndarray:
        return self.bits[self.bit_offsets[i] : self.bit_offsets[i + 1]].astype(np.int64)

    def features(self, i: int) -> SpectrumFeatures:
        a, b = self.token_offsets[i], self.token_offsets[i + 1]
        return SpectrumFeatures(
            formulas=self.formulas[a:b].astype(np.int64),
            intensities=self.intensities[a:b],
            adduct_retained=self.adduct_retained[a:b].astype(np.float32),
            polarity=int(self.polarity[i]),
            n_peaks=int(self.n_peaks[i]),
            n_unannotated=int(self.n_unannotated[i]),
            n_merged=0,
            n_truncated=0,
        )

    def targets(self, indices: Sequence[int]) -> np.ndarray:
        """Dense 0/1 targets ``float32 (len(indices), fp_bits)``."""
        out = np.zeros((len(indices), self.settings.fp_bits), dtype=np.float32)
        for row, i in enumerate(indices):
            out[row, self.bits[self.bit_offsets[i] : self.bit_offsets[i + 1]]] = 1.0
        return out

    def batch(self, indices: Sequence[int]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """A :func:`engine.model.featurize.collate` batch of these spectra and their targets ``(B, fp_bits)``."""
        batch = collate([self.features(int(i)) for i in indices])
        return batch, torch.from_numpy(self.targets(indices))

    # -- subsets ------------------------------------------------------------------------------

    def subset(self, indices: np.ndarray) -> LabelledSpectra:
        """The spectra at ``indices`` (in that order), as a new dataset."""
        idx = np.asarray(indices, dtype=np.int64)
        tok = _gather_ranges(self.token_offsets, idx)
        bit = _gather_ranges(self.bit_offsets, idx)
        return LabelledSpectra(
            **{name: getattr(self, name)[idx] for name in _TEXT_FIELDS},
            token_offsets=_offsets(np.diff(self.token_offsets)[idx]),
            formulas=self.formulas[tok],
            intensities=self.intensities[tok],
            adduct_retained=self.adduct_retained[tok],
            polarity=self.polarity[idx],
            bit_offsets=_offsets(np.diff(self.bit_offsets)[idx]),
            bits=self.bits[bit],
            n_peaks=self.n_peaks[idx],
            n_unannotated=self.n_unannotated[idx],
            settings=self.settings,
            report=self.report,
        )

    @classmethod
    def concatenate(cls, parts: Sequence[LabelledSpectra], report: dict | None = None) -> LabelledSpectra:
        """The spectra of ``parts`` one after the other; their settings must agree on the fingerprint
        (``fp_bits``, ``radius``) and ``max_peaks``. The first part's settings and ``report`` are kept
        unless ``report`` is given."""
        if not parts:
            raise ConfigError("Nothing to concatenate: give at least one LabelledSpectra.")
        first = parts[0].settings
        for part in parts[1:]:
            s = part.settings
            if (s.fp_bits, s.radius, s.max_peaks) != (first.fp_bits, first.radius, first.max_peaks):
                raise ConfigError(
                    f"Spectra with fingerprints of {s.fp_bits} bits (radius {s.radius}, max_peaks {s.max_peaks}) "
                    f"cannot join spectra with {first.fp_bits} bits (radius {first.radius}, max_peaks "
                    f"{first.max_peaks}); make both with the same encoder settings."
                )
        arrays = {name: np.concatenate([getattr(p, name) for p in parts]) for name in _TEXT_FIELDS}
        for name in _ARRAY_FIELDS:
            if name in ("token_offsets", "bit_offsets"):
                lengths = np.concatenate([np.diff(getattr(p, name)) for p in parts])
                arrays[name] = _offsets(lengths)
            else:
                arrays[name] = np.concatenate([getattr(p, name) for p in parts])
        return cls(**arrays, settings=first, report=parts[0].report if report is None else report)

    def selection_mask(
        self,
        folds: Sequence[str] | None = None,
        licenses: Sequence[str] | None = SHIPPABLE_LICENSES,
        exclude_unit_resolution: bool = True,
    ) -> np.ndarray:
        """Bool mask of the spectra in ``folds`` and ``licenses`` (``None``: any), optionally high-res only."""
        keep = np.ones(len(self), dtype=bool)
        if folds is not None:
            keep &= np.isin(self.fold, list(folds))
        if licenses is not None:
            keep &= np.isin(self.license, list(licenses))
        if exclude_unit_resolution:
            keep &= ~np.array([is_unit_resolution(s) for s in self.instrument], dtype=bool)
        return keep

    def select(self, folds=None, licenses=SHIPPABLE_LICENSES, exclude_unit_resolution=True) -> LabelledSpectra:
        """:meth:`subset` of :meth:`selection_mask`."""
        return self.subset(np.flatnonzero(self.selection_mask(folds, licenses, exclude_unit_resolution)))

    # -- cache --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write an ``.npz`` (atomically: a temporary file renamed into place)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        meta = {"format_version": CACHE_FORMAT_VERSION, "settings": self.settings.to_dict(), "report": self.report}
        arrays = {name: _text_array(getattr(self, name)) for name in _TEXT_FIELDS}
        arrays.update({name: getattr(self, name) for name in _ARRAY_FIELDS})
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> LabelledSpectra:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format_version") != CACHE_FORMAT_VERSION:
                raise ConfigError(f"{path} has cache format {meta.get('format_version')!r}; delete it to rebuild.")
            settings = dict(meta["settings"])
            settings["adducts"] = tuple(settings["adducts"])
            return cls(
                **{name: z[name] for name in _TEXT_FIELDS + _ARRAY_FIELDS},
                settings=FeatureSettings(**settings),
                report=meta["report"],
            )


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def _gather_ranges(offsets: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Flat positions of the ranges ``offsets[i]:offsets[i+1]`` for ``i`` in ``idx``, concatenated."""
    starts, lengths = offsets[idx], offsets[idx + 1] - offsets[idx]
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    within = np.arange(lengths.sum()) - np.repeat(_offsets(lengths)[:-1], lengths)
    return np.repeat(starts, lengths) + within


def _text_array(values) -> np.ndarray:
    arr = np.asarray(values, dtype=str)
    return arr if arr.size else np.zeros(0, dtype="<U1")


# ----------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class ReadProgress:
    """Progress of reading and featurizing a file (``records`` read so far, ``kept`` of them)."""

    records: int
    kept: int
    elapsed_s: float


@dataclass(frozen=True)
class CacheHit:
    path: str


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_path(mgf: str | Path, settings: FeatureSettings, cache_dir: str | Path | None = None) -> Path:
    """Where the cache of ``mgf`` read with ``settings`` lives (the file need not exist yet)."""
    key = json.dumps(
        {"version": CACHE_FORMAT_VERSION, "file": file_sha256(mgf), "settings": settings.to_dict()}, sort_keys=True
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    stem = Path(mgf).name.split(".")[0]
    folder = Path(cache_dir) if cache_dir is not None else paths.cache_dir() / "labelled_spectra"
    return folder / f"{stem}-{digest}.npz"


def target_bits(smiles: str, n_bits: int, radius: int) -> np.ndarray | None:
    """Morgan bits of the stereo-free structure of ``smiles``; ``None`` if RDKit cannot parse it."""
    mol = mol_from_smiles(smiles)
    if mol is None:
        return None
    return morgan_bits(remove_stereo(mol), n_bits=n_bits, radius=radius)


def iter_load_labelled_spectra(
    mgf: str | Path,
    settings: FeatureSettings,
    *,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    min_annotated_peaks: int = 0,
) -> Iterator[ReadProgress | CacheHit]:
    """Yield progress while reading ``mgf`` (or a :class:`CacheHit`); *return* the :class:`LabelledSpectra`.

    Use ``data = yield from iter_load_labelled_spectra(...)`` inside a generator, or
    :func:`load_labelled_spectra`. ``min_annotated_peaks`` drops records with fewer annotated peaks
    (not part of the cache key: it is applied when loading).
    """
    path = cache_path(mgf, settings, cache_dir) if use_cache else None
    if path is not None and path.is_file():
        yield CacheHit(str(path))
        data = LabelledSpectra.load(path)
    else:
        data = yield from _read(mgf, settings)
        if path is not None:
            data.save(path)
            log.info("cached %d labelled spectra in %s", len(data), path)
    if min_annotated_peaks > 0:
        data = data.subset(np.flatnonzero(data.n_tokens - 1 >= min_annotated_peaks))
    return data


def load_labelled_spectra(mgf: str | Path, settings: FeatureSettings, **kwargs) -> LabelledSpectra:
    """:func:`iter_load_labelled_spectra` run to the end."""
    gen = iter_load_labelled_spectra(mgf, settings, **kwargs)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _read(mgf: str | Path, settings: FeatureSettings) -> Iterator[ReadProgress]:
    t0 = time.monotonic()
    enc = EncoderConfig(
        tol_ppm=settings.tol_ppm, tol_da=settings.tol_da, min_rdbe=settings.min_rdbe, max_peaks=settings.max_peaks
    )
    dropped: Counter[str] = Counter()
    text: dict[str, list[str]] = {name: [] for name in _TEXT_FIELDS}
    feats: list[SpectrumFeatures] = []
    bit_lists: list[np.ndarray] = []
    n_read = 0
    for item in iter_spectra(mgf, tol_ppm=settings.precursor_tol_ppm, tol_da=settings.precursor_tol_da):
        n_read += 1
        if n_read % _PROGRESS_EVERY == 0:
            yield ReadProgress(n_read, len(feats), time.monotonic() - t0)
        if isinstance(item, SkippedRecord):
            dropped[_skip_reason(item.reason)] += 1
            continue
        s = item
        if s.adduct not in settings.adducts:
            dropped[f"adduct not in {list(settings.adducts)}"] += 1
            continue
        if not s.formula:
            dropped["no formula"] += 1
            continue
        bits = target_bits(s.smiles, settings.fp_bits, settings.radius) if s.smiles else None
        if bits is None:
            dropped["no parseable SMILES"] += 1
            continue
        try:
            annotation = annotate_spectrum(s, tol_ppm=enc.tol_ppm, tol_da=enc.tol_da, min_rdbe=enc.min_rdbe)
            feat = featurize_annotation(annotation, max_peaks=enc.max_peaks)
        except MsgptError as e:
            dropped[f"annotation failed ({type(e).__name__})"] += 1
            continue
        md = s.metadata
        text["ids"].append(s.id)
        text["inchikey14"].append((s.inchikey or md.get("inchikey", ""))[:14])
        text["adduct"].append(s.adduct)
        text["fold"].append(md.get("fold", ""))
        text["license"].append(md.get("license", ""))
        text["instrument"].append(md.get("instrument_type", ""))
        feats.append(feat)
        bit_lists.append(bits)
    yield ReadProgress(n_read, len(feats), time.monotonic() - t0)

    def flat(name: str, dtype) -> np.ndarray:
        return np.concatenate([getattr(f, name) for f in feats]).astype(dtype) if feats else np.zeros(0, dtype)

    n_tok = np.array([f.n_tokens for f in feats], dtype=np.int64)
    n_bit = np.array([len(b) for b in bit_lists], dtype=np.int64)
    empty_formulas = np.zeros((0, len(ELEMENTS)), dtype=np.int16)
    report = {
        "source": str(mgf),
        "sha256": file_sha256(mgf),
        "records": n_read,
        "kept": len(feats),
        "dropped": dict(sorted(dropped.items())),
        "read_seconds": round(time.monotonic() - t0, 1),
    }
    return LabelledSpectra(
        **{name: _text_array(values) for name, values in text.items()},
        token_offsets=_offsets(n_tok),
        formulas=np.concatenate([f.formulas for f in feats]).astype(np.int16) if feats else empty_formulas,
        intensities=flat("intensities", np.float32),
        adduct_retained=flat("adduct_retained", np.uint8),
        polarity=np.array([f.polarity for f in feats], dtype=np.int8),
        bit_offsets=_offsets(n_bit),
        bits=np.concatenate(bit_lists).astype(np.uint16) if bit_lists else np.zeros(0, np.uint16),
        n_peaks=np.array([f.n_peaks for f in feats], dtype=np.int32),
        n_unannotated=np.array([f.n_unannotated for f in feats], dtype=np.int32),
        settings=settings,
        report=report,
    )


def _skip_reason(reason: str) -> str:
    """A coarse class of an :mod:`engine.spectra.io` skip reason (the full texts name values, too many to count)."""
    if "but PEPMASS is" in reason:
        return "skipped by engine.spectra.io: precursor m/z does not fit formula + adduct"
    if reason.startswith("Cannot parse formula") or "formula" in reason.lower():
        return "skipped by engine.spectra.io: formula"
    if "charge" in reason.lower():
        return "skipped by engine.spectra.io: charge"
    return "skipped by engine.spectra.io: other"


def structure_folds(inchikey14: Sequence[str], n_folds: int, seed: int = 0) -> np.ndarray:
    """Fold index ``int64 (n,)`` of each spectrum: its structure's fold in a ``n_folds``-way split by structure.

    The distinct keys (first InChIKey blocks) are ordered by ``sha256(f"{seed}:{key}")`` (ties, which
    need a hash collision, by the key) and dealt out in turn, so every structure is in exactly one fold,
    the folds differ by at most one structure, all spectra of a structure share its fold, and the result
    depends only on the set of keys and ``seed`` (not on the spectra's order or count).
    """
    if not isinstance(n_folds, (int, np.integer)) or isinstance(n_folds, bool) or n_folds < 2:
        raise ConfigError(f"`n_folds` must be an integer >= 2, got {n_folds!r}.")
    keys = np.asarray(inchikey14, dtype=str)
    if np.any(keys == ""):
        raise ConfigError(
            f"{int(np.count_nonzero(keys == ''))} spectra have no InChIKey, so they cannot be split by structure; "
            "give each record an INCHIKEY (or drop those records)."
        )
    unique, inverse = np.unique(keys, return_inverse=True)
    if len(unique) < n_folds:
        raise ConfigError(f"{len(unique)} distinct structures cannot fill {n_folds} folds; use fewer folds.")
    digests = [hashlib.sha256(f"{seed}:{key}".encode()).hexdigest() for key in unique]
    order = sorted(range(len(unique)), key=lambda i: (digests[i], unique[i]))
    fold_of_key = np.empty(len(unique), dtype=np.int64)
    fold_of_key[order] = np.arange(len(unique)) % n_folds
    return fold_of_key[inverse.reshape(-1)]


def describe_selection(data: LabelledSpectra) -> dict:
    """Counts and token / bit statistics of a (selected) dataset, for logs and metrics.json."""
    n = len(data)
    if n == 0:
        return {"spectra": 0}
    annotated = data.n_peaks - data.n_unannotated
    return {
        "spectra": n,
        "structures": int(len(np.unique(data.inchikey14))),
        "adducts": dict(Counter(data.adduct.tolist())),
        "mean_tokens": round(float(data.n_tokens.mean()), 2),
        "no_annotated_peak": int(np.count_nonzero(data.n_tokens == 1)),
        "explained_peak_fraction": round(float(annotated.sum() / max(1, data.n_peaks.sum())), 4),
        "mean_true_bits": round(float(data.n_true_bits.mean()), 3),
    }
