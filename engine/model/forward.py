"""The forward model: which fragments of a structure show up as peaks, and how well a structure explains a spectrum.

A small MLP over a structure's bond-cleavage fragments (trained by :mod:`training.encoder.forward` on ``FOLD=train``
spectra only). It reads the encoder's token space (neutral subformulas), so a spectrum annotated for the
encoder is what it is compared with:

* **candidates** (:func:`candidates`): the connected pieces left by cutting up to ``max_breaks`` bonds
  (:func:`engine.spectra.fragments.fragment_pieces`), each with its hydrogens shifted by up to ``h_shift``
  (rearrangements); one candidate per distinct neutral formula, explained by the piece with the smallest
  hydrogen shift, then the fewest cuts. Features: the piece's Morgan fingerprint (the piece as a molecule of
  its own, :func:`engine.spectra.fragments.piece_fingerprint`), the shift and the cuts, the formula and the
  neutral loss as element counts, the share of the precursor's heavy atoms and mass, ring-plus-double-bond
  equivalents, how many pieces share the heavy atoms, the ion mode and the precursor's mass;
* **model** (:class:`ForwardModel`): features -> logit that the candidate is a peak, and the peak's intensity
  feature (``sqrt(I / I_max)``); :class:`ForwardEnsemble` averages the peak probabilities of several models,
  each trained on another part of the structures, and :func:`load_forward` reads either;
* **score** (:func:`forward_score`, :class:`ForwardScorer`): the log-likelihood of a spectrum's observed peak
  formulas under a structure's predicted peaks, ``Σ_f [o_f log q_f + (1 − o_f) log(1 − q_f)]`` over the
  structure's candidate formulas ``f`` (``o_f``: the spectrum has a peak token of that formula), plus
  ``log eps`` per observed peak formula no fragment explains. It reads the spectrum itself, not the encoder's
  fingerprint posterior, so it tells apart isomers that the fingerprint score confuses (MetFrag's and
  CFM-ID's idea, learnt).

The model is a bundle part (``forward.json`` + ``forward.safetensors``), rebuilt from its config; nothing is
unpickled. Loading it needs no RDKit (a bundle loads on machines without it); fragmenting does.

May import: ``engine.spectra``, ``engine.chem`` and below, torch and safetensors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from engine.chem.formula import ELEMENT_INDEX, ELEMENTS, element_masses
from engine.errors import ConfigError, MsgptError
from engine.spectra.annotate import rdbe
from engine.timing import staged

FORMAT_VERSION = 1
WEIGHTS_FILE = "forward.safetensors"
_H = ELEMENT_INDEX["H"]
_HEAVY = np.array([e != "H" for e in ELEMENTS])
# Element columns of the scalar features (the rest of ELEMENTS are rare in MS/MS standards).
FEATURE_ELEMENTS = np.array([ELEMENT_INDEX[e] for e in ("C", "H", "N", "O", "S", "P", "F", "Cl", "Br", "I")])
MAX_SHIFT = 4
N_SCALARS = (2 * MAX_SHIFT + 1) + 4 + 2 * len(FEATURE_ELEMENTS) + 6
UNEXPLAINED_EPS = 0.01  # probability of an observed peak formula that no fragment explains


# -- candidates ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CandidateSettings:
    max_breaks: int = 2
    h_shift: int = 2
    n_bits: int = 512  # bits of the piece fingerprints
    radius: int = 2

    def __post_init__(self):
        if not isinstance(self.max_breaks, int) or not 1 <= self.max_breaks <= 3:
            raise ConfigError(f"`max_breaks` must be 1, 2 or 3 bond cuts, got {self.max_breaks!r}.")
        if not isinstance(self.h_shift, int) or not 0 <= self.h_shift <= MAX_SHIFT:
            raise ConfigError(f"`h_shift` must be an integer in [0, {MAX_SHIFT}], got {self.h_shift!r}.")
        if not isinstance(self.n_bits, int) or self.n_bits < 8:
            raise ConfigError(f"`n_bits` must be an integer >= 8, got {self.n_bits!r}.")


@dataclass(frozen=True, eq=False)
class Candidates:
    """The candidate peaks of one structure in one ion mode (``k`` rows)."""

    formulas: np.ndarray  # (k, 14) int64 neutral subformulas, distinct
    scalars: np.ndarray  # (k, N_SCALARS) float32
    fingerprints: list[np.ndarray]  # k sorted int64 bit arrays of the explaining pieces
    complete: bool  # whether the piece enumeration finished (very large molecules stop at a cap)

    def __len__(self) -> int:
        return len(self.formulas)

    def dense_fingerprints(self, n_bits: int) -> np.ndarray:
        out = np.zeros((len(self), n_bits), dtype=np.float32)
        for i, bits in enumerate(self.fingerprints):
            out[i, bits] = 1.0
        return out


def candidates(mol, polarity: int, settings: CandidateSettings = CandidateSettings()) -> Candidates:
    """Every neutral subformula a piece of the RDKit molecule ``mol`` explains (see the module docstring), with
    its features.

    ``mol`` is used as given (remove its stereo first, as the training targets' fingerprints do).
    Raises ConfigError for an element the fragmenter does not support.
    """
    from engine.spectra.fragments import MAX_STATES, fragment_pieces, piece_fingerprint

    if polarity not in (1, -1):
        raise ConfigError(f"`polarity` must be +1 or -1, got {polarity!r}.")
    pieces, complete = fragment_pieces(mol, settings.max_breaks, MAX_STATES)
    whole = pieces.formulas[0]
    best: dict[bytes, tuple[tuple[int, int, int], int, int]] = {}  # formula -> (rank, piece, shift)
    multiplicity: dict[bytes, int] = {}
    for i, f in enumerate(pieces.formulas):
        heavy_key = f[_HEAVY].tobytes()
        multiplicity[heavy_key] = multiplicity.get(heavy_key, 0) + 1
        for shift in range(-settings.h_shift, settings.h_shift + 1):
            h = int(f[_H]) + shift
            if h < 0:
                continue
            g = f.copy()
            g[_H] = h
            key = g.tobytes()
            rank = (abs(shift), int(pieces.breaks[i]), i)
            if key not in best or rank < best[key][0]:
                best[key] = (rank, i, shift)
    keys = list(best)
    formulas = np.array([np.frombuffer(k, dtype=np.int64) for k in keys]).reshape(-1, len(ELEMENTS))
    piece_idx = np.array([best[k][1] for k in keys], dtype=np.int64)
    shifts = np.array([best[k][2] for k in keys], dtype=np.int64)
    fps: dict[int, np.ndarray] = {}
    for i in np.unique(piece_idx):
        fps[int(i)] = piece_fingerprint(mol, pieces.atom_indices(int(i)), settings.n_bits, settings.radius)
    mult = np.array([multiplicity[f[_HEAVY].tobytes()] for f in formulas], dtype=np.float32)
    scalars = candidate_scalars(formulas, whole, shifts, pieces.breaks[piece_idx], mult, polarity)
    return Candidates(formulas, scalars, [fps[int(i)] for i in piece_idx], complete)


def candidate_scalars(formulas: np.ndarray, whole: np.ndarray, shifts: np.ndarray, breaks: np.ndarray,
                      multiplicity: np.ndarray, polarity: int) -> np.ndarray:  # fmt: skip
    """The ``(k, N_SCALARS)`` scalar features of candidates (pure; see the module docstring)."""
    k = len(formulas)
    shift_1h = np.zeros((k, 2 * MAX_SHIFT + 1), dtype=np.float32)
    shift_1h[np.arange(k), np.clip(shifts, -MAX_SHIFT, MAX_SHIFT) + MAX_SHIFT] = 1.0
    breaks_1h = np.zeros((k, 4), dtype=np.float32)
    breaks_1h[np.arange(k), np.clip(breaks, 0, 3)] = 1.0
    loss = whole[None, :] - formulas
    heavy_whole = max(int(whole[_HEAVY].sum()), 1)
    masses = element_masses()
    mass_whole = float(whole @ masses)
    rest = np.column_stack([
        formulas[:, _HEAVY].sum(1) / heavy_whole,
        (formulas @ masses) / max(mass_whole, 1.0),
        rdbe(formulas) / 10.0,
        np.log1p(multiplicity),
        np.full(k, float(polarity)),
        np.full(k, mass_whole / 1000.0),
    ]).astype(np.float32)  # fmt: skip
    counts = np.hstack([formulas[:, FEATURE_ELEMENTS], np.maximum(loss[:, FEATURE_ELEMENTS], -5)]) / 10.0
    return np.hstack([shift_1h, breaks_1h, counts.astype(np.float32), rest]).astype(np.float32)


# -- the model -----------------------------------------------------------------------------------------
@dataclass
class ForwardConfig:
    """The forward model's architecture and candidate settings (its ``config.json``, beside the weights)."""

    hidden: int = field(default=256, metadata={"help": "Width of the two hidden layers."})
    dropout: float = field(default=0.1, metadata={"help": "Dropout after each hidden layer."})
    max_breaks: int = field(default=2, metadata={"help": "Bond cuts of the candidate pieces (1-3)."})
    h_shift: int = field(default=2, metadata={"help": "Hydrogen shifts of a piece that are candidates too."})
    n_bits: int = field(default=512, metadata={"help": "Bits of the piece fingerprints (and substructure labels)."})

    def __post_init__(self):
        if not isinstance(self.hidden, int) or isinstance(self.hidden, bool) or self.hidden < 1:
            raise ConfigError(f"`hidden` must be a positive integer, got {self.hidden!r}.")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"`dropout` must be in [0, 1), got {self.dropout!r}.")
        self.candidate_settings()

    def candidate_settings(self) -> CandidateSettings:
        return CandidateSettings(max_breaks=self.max_breaks, h_shift=self.h_shift, n_bits=self.n_bits)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def architecture(cls, data: dict[str, Any]) -> ForwardConfig:
        """The architecture fields of a saved config (the training's own keys are left out)."""
        names = {f.name for f in fields(ForwardConfig)}
        return ForwardConfig(**{k: v for k, v in data.items() if k in names})


RANKING_SCOPES = ("suspects", "all")


@dataclass(frozen=True)
class ForwardRanking:
    """How the forward score joins a ranking (the ``ranking`` block of a bundle's ``forward.json``, written by the
    measurement that chose it): ``weight`` · forward score is added to the first ``shortlist`` candidates'
    score; ``scope``: ``suspects`` re-ranks the structures of suspect lists only, ``all`` every candidate;
    ``intensity_weight``: the forward score's observed peak formulas weigh 1 + that · sqrt(I / I_max)
    (:class:`ForwardScorer`; 0, as in files written before it, counts each once). Weight 0 (a model saved
    without a choice) leaves rankings as they are.

    The ranking has a second, chosen term beside it, kept here because the suspects' weight was chosen on top of
    this one (``training.studies.retrieval_analogs``): the **analog score** of a candidate, its highest similarity ×
    Tanimoto to the structures of the query's first ``analog_hits`` analog-search hits in the run's spectral
    libraries (:class:`engine.elucidation.ranking.AnalogRerank`), times ``analog_weight`` for the structures of
    suspect lists and ``analog_weight_others`` for every other candidate (the bundled library's structures, the
    reference hits' and the predictions). 0 (files written before it) leaves a ranking as it was.

    The de novo pools have weights of their own (``training.studies.pool_rerank`` chose them on pools full of
    isomer edits): with scope ``suspects``, ``others_weight`` · forward score joins the first ``others_shortlist``
    of every other candidate (the predictions and the structure libraries' structures that are no suspect), and
    ``analog_weight_de_novo`` · analog score that of every prediction (a candidate a sample drew or an edit made), in
    place of ``analog_weight_others``, so that a library structure no sample proposed gains nothing from it (the
    crowding ``training.studies.retrieval_analogs`` measured). 0 (files written before them) leaves them as they were."""

    weight: float = 0.0
    shortlist: int = 20
    scope: str = "suspects"
    intensity_weight: float = 0.0
    analog_weight: float = 0.0
    analog_hits: int = 20
    analog_weight_others: float = 0.0
    others_weight: float = 0.0
    others_shortlist: int = 20
    analog_weight_de_novo: float = 0.0

    def fragment_weight(self, group: int) -> float:
        """The forward score's weight in a rank group (1: suspects and identifications, 2: every other candidate)."""
        if group == 1 or self.scope == "all":
            return self.weight
        return self.others_weight

    def fragment_shortlist(self, group: int) -> int:
        """How many candidates of a rank group get their forward score (the rest the shortlist's lowest)."""
        return self.shortlist if group == 1 or self.scope == "all" else self.others_shortlist

    @property
    def fragments_on(self) -> bool:
        """Whether the forward score joins any ranking."""
        return self.weight > 0 or self.others_weight > 0

    def __post_init__(self):
        for name in ("weight", "intensity_weight", "analog_weight", "analog_weight_others", "others_weight",
                     "analog_weight_de_novo"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
                    and value >= 0):
                raise ConfigError(f"the forward ranking's `{name}` must be a number >= 0, got {value!r}.")
        for name in ("shortlist", "analog_hits", "others_shortlist"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"the forward ranking's `{name}` must be a positive integer, got {value!r}.")
        if self.scope not in RANKING_SCOPES:
            raise ConfigError(f"the forward ranking's `scope` must be one of {', '.join(RANKING_SCOPES)}, "
                              f"got {self.scope!r}.")  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict | None) -> ForwardRanking:
        data = data or {}
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class ForwardModel(nn.Module):
    """Candidate features -> (logit of appearing as a peak, intensity feature of the peak)."""

    def __init__(self, config: ForwardConfig, ranking: ForwardRanking = ForwardRanking()):
        super().__init__()
        self.config = config
        self.ranking = ranking
        d = config.n_bits + N_SCALARS
        self.net = nn.Sequential(
            nn.Linear(d, config.hidden), nn.GELU(), nn.Dropout(config.dropout),
            nn.Linear(config.hidden, config.hidden), nn.GELU(), nn.Dropout(config.dropout),
            nn.Linear(config.hidden, 2),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        return out[:, 0], torch.sigmoid(out[:, 1])

    @torch.no_grad()
    def predict(self, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """Peak probabilities and intensity features of ``cand``."""
        self.eval()
        x = torch.from_numpy(np.hstack([cand.dense_fingerprints(self.config.n_bits), cand.scalars]))
        logit, intensity = self(x)
        return torch.sigmoid(logit).numpy(), intensity.numpy()

    def save(self, folder: str | Path, extra: dict | None = None, config_file: str = "config.json") -> None:
        """Write ``forward.safetensors`` and ``config_file`` (architecture, ``ranking``, ``training``: ``extra``)."""
        _save(self, folder, {}, extra, config_file)

    @classmethod
    def load(cls, folder: str | Path, config_file: str = "config.json") -> ForwardModel:
        """The single model saved in ``folder`` (:func:`load_forward` also reads an ensemble)."""
        model = load_forward(folder, config_file)
        if not isinstance(model, cls):
            raise ConfigError(f"{Path(folder) / config_file} holds an ensemble of {len(model.members)} forward "
                              f"models, not one; train or fine-tune a single member.")  # fmt: skip
        return model


class ForwardEnsemble(nn.Module):
    """Forward models of one architecture whose peak probabilities are averaged: each member is trained on
    another part of the structures (``training.encoder.forward fit --held-out-fold``), so the average depends less on
    which structures one fit happened to see. Saved like one model (``members`` in its config, the weights
    under ``members.<i>.``); :func:`load_forward` reads either."""

    def __init__(self, config: ForwardConfig, n_members: int, ranking: ForwardRanking = ForwardRanking()):
        super().__init__()
        if not isinstance(n_members, int) or isinstance(n_members, bool) or n_members < 2:
            raise ConfigError(f"an ensemble needs an integer >= 2 of members, got {n_members!r}.")
        self.config = config
        self.ranking = ranking
        self.members = nn.ModuleList(ForwardModel(config) for _ in range(n_members))

    @classmethod
    def of(cls, models: list[ForwardModel], ranking: ForwardRanking = ForwardRanking()) -> ForwardEnsemble:
        """The ensemble of trained ``models`` (same architecture and candidate settings)."""
        configs = {json.dumps(m.config.to_dict(), sort_keys=True) for m in models}
        if len(configs) != 1:
            raise ConfigError(f"ensemble members must share one architecture, got {len(configs)} different ones: "
                              f"{'; '.join(sorted(configs))}.")  # fmt: skip
        out = cls(models[0].config, len(models), ranking)
        for member, model in zip(out.members, models):
            member.load_state_dict(model.state_dict())
        out.eval()
        return out

    @torch.no_grad()
    def predict(self, cand: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """Peak probabilities and intensity features of ``cand``, averaged over the members."""
        self.eval()
        x = torch.from_numpy(np.hstack([cand.dense_fingerprints(self.config.n_bits), cand.scalars]))
        outs = [m(x) for m in self.members]
        q = torch.stack([torch.sigmoid(logit) for logit, _ in outs]).mean(0)
        intensity = torch.stack([i for _, i in outs]).mean(0)
        return q.numpy(), intensity.numpy()

    def save(self, folder: str | Path, extra: dict | None = None, config_file: str = "config.json") -> None:
        """As :meth:`ForwardModel.save`, with ``members`` in the config."""
        _save(self, folder, {"members": len(self.members)}, extra, config_file)


def load_forward(folder: str | Path, config_file: str = "config.json") -> ForwardModel | ForwardEnsemble:
    """The forward model or ensemble saved in ``folder`` (``config_file`` + ``forward.safetensors``; a model
    bundle names its config ``forward.json``)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    path = folder / config_file
    if not path.is_file():
        raise ConfigError(f"{folder} holds no forward model (no {config_file}); train one with "
                          f"`python -m training.encoder.forward fit`.")  # fmt: skip
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} cannot be read as the forward model's config ({e}); copy it again.") from e
    if data.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{path} has format {data.get('format_version')!r}, this program reads "
                          f"{FORMAT_VERSION}; retrain the forward model.")  # fmt: skip
    config, ranking = ForwardConfig.architecture(data), ForwardRanking.from_dict(data.get("ranking"))
    members = data.get("members", 1)
    model = ForwardModel(config, ranking) if members == 1 else ForwardEnsemble(config, members, ranking)
    try:
        model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
    except (OSError, RuntimeError) as e:
        raise ConfigError(f"{folder / WEIGHTS_FILE} does not hold the weights {path.name} describes ({e}); "
                          f"copy the forward model again.") from e  # fmt: skip
    model.eval()
    return model


def _save(model: nn.Module, folder: str | Path, head: dict, extra: dict | None, config_file: str) -> None:
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / WEIGHTS_FILE))
    data = {"format_version": FORMAT_VERSION, **head, **model.config.to_dict(), "ranking": asdict(model.ranking),
            **({"training": extra} if extra else {})}  # fmt: skip
    tmp = folder / (config_file + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(folder / config_file)


# -- scoring a structure against a spectrum ------------------------------------------------------------
def forward_score(q: np.ndarray, observed: np.ndarray, n_observed: int, eps: float = UNEXPLAINED_EPS,
                  weight: np.ndarray | None = None, unexplained_weight: float | None = None) -> float:
    """How well a structure's fragments predict a spectrum's peak formulas: Σ_f [o_f log q_f + (1 − o_f)
    log(1 − q_f)] over its candidate formulas (``q``: the model's peak probabilities; ``observed`` o_f: 0/1),
    plus (peak formulas no fragment explains) · log ``eps``, with ``n_observed`` peak formulas in the
    spectrum. Nats, higher is better. ``weight`` (one per candidate) multiplies the observed terms, and
    ``unexplained_weight`` replaces the count of unexplained peak formulas (both for intensity weights)."""
    q = np.clip(np.asarray(q, dtype=np.float64), 1e-4, 1 - 1e-4)
    o = np.asarray(observed, dtype=np.float64)
    ow = o if weight is None else o * np.asarray(weight, dtype=np.float64)
    missed = n_observed - int(o.sum()) if unexplained_weight is None else unexplained_weight
    return float((ow * np.log(q) + (1 - o) * np.log1p(-q)).sum() + missed * np.log(eps))


@dataclass(frozen=True)
class PeakSettings:
    """How a spectrum is annotated into peak formulas (the encoder's annotation, which trained the model)."""

    tol_ppm: float
    tol_da: float
    min_rdbe: float | None
    max_peaks: int

    @classmethod
    def of_encoder(cls, config) -> PeakSettings:
        """The annotation settings of an :class:`~engine.model.encoder.EncoderConfig`."""
        return cls(config.tol_ppm, config.tol_da, config.min_rdbe, config.max_peaks)


class ForwardScorer:
    """Forward scores of candidate structures against one spectrum.

    The spectrum is annotated once per formula (its peak tokens as neutral subformulas of that formula,
    the root left out); a structure is scored against the annotation under its own formula. Structures the
    fragmenter cannot handle (an unsupported element), and formulas the spectrum cannot be annotated with,
    score None. ``intensity_weight`` a > 0 weighs each observed peak formula's term by 1 + a·sqrt(I / I_max)
    (0, the default, counts every peak formula once; a bundle's ranking says which it was chosen with,
    docs/known_compounds.md).
    """

    def __init__(self, model: ForwardModel | ForwardEnsemble, spectrum, peaks: PeakSettings,
                 eps: float = UNEXPLAINED_EPS, intensity_weight: float = 0.0):  # fmt: skip
        if not (np.isfinite(intensity_weight) and intensity_weight >= 0):
            raise ConfigError(f"`intensity_weight` must be a number >= 0, got {intensity_weight!r}.")
        self.model, self.spectrum, self.peaks, self.eps = model, spectrum, peaks, eps
        self.intensity_weight = float(intensity_weight)
        self.settings = model.config.candidate_settings()
        self.polarity = -1 if getattr(spectrum, "polarity", "positive") == "negative" else 1
        self._observed: dict[str, dict[bytes, float] | None] = {}
        self._scores: dict[str, float | None] = {}

    def observed(self, formula: str) -> dict[bytes, float] | None:
        """The spectrum's peak-token formulas (neutral, root excluded) annotated with ``formula``, each with its
        intensity feature ``sqrt(I / I_max)``."""
        if formula not in self._observed:
            from engine.model.featurize import featurize_annotation
            from engine.spectra.annotate import annotate_peaks

            s, p = self.spectrum, self.peaks
            try:
                ann = annotate_peaks(s.mz, s.intensity, formula, s.adduct, tol_ppm=p.tol_ppm, tol_da=p.tol_da,
                                     min_rdbe=p.min_rdbe, precursor_mz=s.precursor_mz)
                feat = featurize_annotation(ann, max_peaks=p.max_peaks)
                self._observed[formula] = {np.asarray(t, dtype=np.int64).tobytes(): float(r)
                                           for t, r in zip(feat.formulas[1:], feat.intensities[1:])}
            except MsgptError:
                self._observed[formula] = None
        return self._observed[formula]

    @staged("fragment scoring")
    def score(self, smiles: str) -> float | None:
        """The structure's forward score (module docstring); None when it cannot be computed."""
        if smiles in self._scores:
            return self._scores[smiles]
        self._scores[smiles] = value = self._score(smiles)
        return value

    def _score(self, smiles: str) -> float | None:
        from engine.chem import molecules as chem

        mol = chem.mol_from_smiles(smiles)
        if mol is None:
            return None
        observed = self.observed(chem.mol_formula(mol))
        if observed is None:
            return None
        try:
            cand = candidates(chem.remove_stereo(mol), self.polarity, self.settings)
        except MsgptError:
            return None
        a = self.intensity_weight
        if len(cand) == 0:
            missed = len(observed) + a * sum(observed.values())
            return float(missed * np.log(self.eps))
        q, _ = self.model.predict(cand)
        keys = [f.tobytes() for f in cand.formulas]
        hit = np.array([k in observed for k in keys], dtype=np.float64)
        if not a:
            return forward_score(q, hit, len(observed), self.eps)
        explained = {k for k in keys if k in observed}
        weight = 1 + a * np.array([observed.get(k, 0.0) for k in keys])
        missed = sum(1 + a * r for k, r in observed.items() if k not in explained)
        return forward_score(q, hit, len(observed), self.eps, weight, missed)
