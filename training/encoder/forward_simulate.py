"""Simulated spectra of corpus molecules for encoder training: the forward model's most likely fragments of each
molecule as peak tokens, for molecules outside the measured training and val structures, saved as .npz and read back
by :mod:`training.encoder.train_encoder` (``--simulated``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.chem.formula import ELEMENTS, element_masses, formula_vector
from engine.errors import ConfigError, MsgptError
from engine.model.encoder import EncoderConfig
from engine.model.forward import Candidates, ForwardModel, candidates
from training.core.loop import TrainingConfig, int_at_least, torch_threads
from training.data.corpus_inputs import open_text, read_mgf_headers
from training.data.spectra import FeatureSettings, LabelledSpectra
from training.encoder.substructures import FragmentLabels

_HEAVY = np.array([e != "H" for e in ELEMENTS])
POLARITY_ADDUCT = {1: "[M+H]+", -1: "[M-H]-"}
# The spectra the encoder recipe reads (and the labelled-spectra cache it fills): both ion modes.
RECIPE_ADDUCTS = ("[M+H]+", "[M+Na]+", "[M-H]-")


def encoder_features() -> FeatureSettings:
    """The annotation settings of the small encoder preset, for the recipe's adducts."""
    return FeatureSettings.for_encoder(EncoderConfig.from_preset("small"), adducts=RECIPE_ADDUCTS)


@dataclass(frozen=True, eq=False)
class SimulatedTokens:
    formulas: np.ndarray  # (P, 14) int64, the root (precursor formula) first, then peaks in mass order
    intensities: np.ndarray  # (P,) float32, root 1.0, peaks sqrt(I / I_max) (the largest is 1.0)
    fingerprints: list[np.ndarray]  # P - 1 piece fingerprints of the peaks (substructure labels)


def simulate_tokens(
    cand: Candidates, probabilities: np.ndarray, intensities: np.ndarray, whole: np.ndarray,
    rng: np.random.Generator, *, noise: float = 0.3, max_peaks: int = 60,
) -> SimulatedTokens:  # fmt: skip
    """One simulated spectrum: candidate ``i`` is a peak with probability ``probabilities[i]`` (at least the
    most probable one is), at ``intensities[i]`` times log-normal noise (sigma ``noise``), rescaled so the
    largest is 1; the ``max_peaks`` most intense are kept, in mass order."""
    if len(cand) == 0:
        raise ConfigError("A molecule without candidate peaks cannot be simulated.")
    keep = np.flatnonzero(rng.random(len(cand)) < probabilities)
    if len(keep) == 0:
        keep = np.array([int(np.argmax(probabilities))])
    level = np.clip(intensities[keep] * np.exp(rng.normal(0.0, noise, len(keep))), 1e-3, None)
    if len(keep) > max_peaks:
        top = np.argsort(-level, kind="mergesort")[:max_peaks]
        keep, level = keep[top], level[top]
    level = level / level.max()
    order = np.argsort(cand.formulas[keep] @ element_masses(), kind="mergesort")
    keep, level = keep[order], level[order]
    return SimulatedTokens(
        formulas=np.vstack([whole[None, :], cand.formulas[keep]]).astype(np.int64),
        intensities=np.concatenate([[1.0], level]).astype(np.float32),
        fingerprints=[cand.fingerprints[int(i)] for i in keep],
    )


def read_molecules(path: str | Path) -> Iterator[tuple[str, str, str]]:
    """``(smiles, inchikey14, source)`` rows of the molecule corpus TSV (header ``smiles inchikey14 source``)."""
    with open_text(path) as fh:
        header = fh.readline().rstrip("\n").split("\t")
        if header[:2] != ["smiles", "inchikey14"]:
            raise ConfigError(f"{path}: expected the columns smiles, inchikey14[, source]; got {header}.")
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2:
                yield parts[0], parts[1], parts[2] if len(parts) > 2 else ""


@dataclass(frozen=True)
class SimulateConfig(TrainingConfig):
    model: str = field(metadata={"help": "Forward model folder (python -m training.encoder.forward fit)."})
    molecules: str = field(metadata={"help": "Molecule corpus TSV (smiles, inchikey14, source)."})
    mgf: str = field(metadata={"help": "Labelled MGF: its structures (every fold) are never simulated."})
    out: str = field(metadata={"help": "Output .npz of simulated spectra (train_encoder --simulated)."})
    n: int = field(default=12000, metadata={"help": "Molecules to simulate, drawn at random from the eligible."})
    sources: tuple[str, ...] = field(default=(), metadata={"help": "Draw only from rows of these sources (any)."})
    negative_share: float = field(default=0.35, metadata={"help": "Share of spectra simulated in negative mode."})
    min_heavy: int = field(default=6, metadata={"help": "Smallest molecule (heavy atoms)."})
    max_mass: float = field(default=1000.0, metadata={"help": "Largest molecule (monoisotopic mass)."})
    noise: float = field(default=0.3, metadata={"help": "Sigma of the log-normal intensity noise."})
    control: bool = field(default=False, metadata={
        "help": "A control without the model's choice: every candidate equally likely (as many peaks expected as "
                "the model predicts for the molecule), intensities uniform in (0, 1)."})  # fmt: skip
    seed: int = field(default=0, metadata={"help": "Seed of the draw and of the sampled peaks."})
    threads: int = field(default=1, metadata={"help": "torch CPU threads."})

    def __post_init__(self):
        _require_paths(self, ("model", "molecules", "mgf", "out"))
        self.require(("n", "threads"), int_at_least(1), "a positive integer")
        if not (0 <= self.negative_share <= 1 and self.noise >= 0 and self.max_mass > 0):
            raise ConfigError(f"`negative_share` must be in [0, 1], `noise` >= 0 and `max_mass` > 0; got "
                              f"{self.negative_share}, {self.noise}, {self.max_mass}.")  # fmt: skip


def _require_paths(config: TrainingConfig, names: Sequence[str]) -> None:
    missing = [n for n in names if not getattr(config, n)]
    if missing:
        flags = ", ".join("--" + n.replace("_", "-") for n in missing)
        raise ConfigError(f"{flags} {'is' if len(missing) == 1 else 'are'} required.")


@dataclass(frozen=True)
class SimulateProgress:
    done: int
    total: int
    elapsed_s: float


def simulate(config: SimulateConfig) -> Iterator[SimulateProgress]:
    """Yield progress while simulating; *return* ``(LabelledSpectra, FragmentLabels)`` (also written to
    ``config.out``)."""
    t0 = time.monotonic()
    model = ForwardModel.load(config.model)
    settings = model.config.candidate_settings()
    features = encoder_features()
    known = set(_mgf_keys(config.mgf))
    wanted = set(config.sources)
    pool = [(s, k) for s, k, src in read_molecules(config.molecules)
            if k not in known and (not wanted or wanted & set(src.split(";")))]  # fmt: skip
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(len(pool))
    rows = {name: [] for name in ("ids", "inchikey14", "adduct", "polarity", "n_tokens", "bits")}
    formulas, intensities, labels = [], [], []
    masses = element_masses()
    done = 0
    with torch_threads(config.threads):
        for j in order:
            if done >= config.n:
                break
            smiles, key = pool[int(j)]
            mol = chem.mol_from_smiles(smiles)
            if mol is None:
                continue
            chem.remove_stereo(mol)
            polarity = -1 if rng.random() < config.negative_share else 1
            try:
                cand = candidates(mol, polarity, settings)
            except (ConfigError, MsgptError):
                continue
            whole = formula_vector(chem.mol_formula_counts(mol))  # candidates() refused other elements
            if whole[_HEAVY].sum() < config.min_heavy or float(whole @ masses) > config.max_mass or not len(cand):
                continue
            p, inten = model.predict(cand)
            if config.control:
                p = np.full(len(p), min(float(p.sum()) / len(p), 1.0))
                inten = rng.random(len(p))
            tokens = simulate_tokens(cand, p, inten, whole, rng, noise=config.noise, max_peaks=features.max_peaks)
            rows["ids"].append(f"simulated:{key}")
            rows["inchikey14"].append(key)
            rows["adduct"].append(POLARITY_ADDUCT[polarity])
            rows["polarity"].append(polarity)
            rows["n_tokens"].append(len(tokens.formulas))
            rows["bits"].append(chem.morgan_bits(mol, n_bits=features.fp_bits, radius=features.radius))
            formulas.append(tokens.formulas)
            intensities.append(tokens.intensities)
            labels.append([None] + tokens.fingerprints)
            done += 1
            if done % 500 == 0 or done == config.n:
                yield SimulateProgress(done, config.n, time.monotonic() - t0)
    if not done:
        raise ConfigError(f"No molecule of {config.molecules} could be simulated (sources {sorted(wanted)}).")
    spectra, frag = _assemble(rows, formulas, intensities, labels, features, settings.n_bits,
                              report={"simulated": {**config.to_dict(), "spectra": done, "eligible": len(pool)}})
    save_simulated(config.out, spectra, frag)
    return spectra, frag


def _mgf_keys(mgf: str | Path) -> Iterator[str]:
    """First InChIKey block of every record of ``mgf`` (its INCHIKEY, else computed from its SMILES)."""
    for header in read_mgf_headers(mgf):
        key = header.get("INCHIKEY", "")[:14] or (chem.inchikey14(header["SMILES"]) if header.get("SMILES") else "")
        if key:
            yield key


def _assemble(rows, formulas, intensities, labels, features: FeatureSettings, n_bits: int, report: dict
              ) -> tuple[LabelledSpectra, FragmentLabels]:  # fmt: skip
    n = len(rows["ids"])
    lengths = np.array(rows["n_tokens"], dtype=np.int64)
    token_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    bit_lengths = np.array([len(b) for b in rows["bits"]], dtype=np.int64)
    spectra = LabelledSpectra(
        ids=np.array(rows["ids"], dtype=str), inchikey14=np.array(rows["inchikey14"], dtype=str),
        adduct=np.array(rows["adduct"], dtype=str), fold=np.full(n, "simulated"), license=np.full(n, "simulated"),
        instrument=np.full(n, ""), token_offsets=token_offsets,
        formulas=np.vstack(formulas).astype(np.int16), intensities=np.concatenate(intensities).astype(np.float32),
        adduct_retained=np.zeros(int(token_offsets[-1]), dtype=np.uint8),
        polarity=np.array(rows["polarity"], dtype=np.int8),
        bit_offsets=np.concatenate([[0], np.cumsum(bit_lengths)]).astype(np.int64),
        bits=np.concatenate(rows["bits"]).astype(np.uint16), n_peaks=(lengths - 1).astype(np.int32),
        n_unannotated=np.zeros(n, dtype=np.int32), settings=features, report=report,
    )  # fmt: skip
    token_label = np.full(int(token_offsets[-1]), -1, dtype=np.int64)
    table: dict[bytes, int] = {}
    table_fps: list[np.ndarray] = []
    t = 0
    for per_spectrum in labels:
        for fp in per_spectrum:
            if fp is not None:
                key = np.asarray(fp, dtype=np.uint16).tobytes()
                if key not in table:
                    table[key] = len(table_fps)
                    table_fps.append(np.asarray(fp, dtype=np.uint16))
                token_label[t] = table[key]
            t += 1
    offsets = np.concatenate([[0], np.cumsum([len(f) for f in table_fps])]).astype(np.int64)
    frag = FragmentLabels(token_label, offsets,
                          np.concatenate(table_fps).astype(np.uint16) if table_fps else np.zeros(0, np.uint16),
                          n_bits, {"simulated": True, "distinct_fragments": len(table_fps)})  # fmt: skip
    return spectra, frag


def save_simulated(path: str | Path, spectra: LabelledSpectra, labels: FragmentLabels) -> Path:
    """Write the simulated spectra and their substructure labels as one ``.npz`` (two files' worth of arrays)."""
    path = Path(path)
    spectra.save(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(label_token=labels.token_label, label_offsets=labels.table_offsets, label_bits=labels.table_bits,
                  label_meta=np.array(json.dumps({"n_bits": labels.n_bits, "summary": labels.summary})))  # fmt: skip
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)
    return path


def load_simulated(path: str | Path) -> tuple[LabelledSpectra, FragmentLabels]:
    """The spectra and substructure labels written by :func:`save_simulated`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Simulated spectra {path} do not exist; write them with "
                          f"`python -m training.encoder.forward simulate`.")  # fmt: skip
    spectra = LabelledSpectra.load(path)
    with np.load(path, allow_pickle=False) as z:
        if "label_token" not in z.files:
            raise ConfigError(f"{path} holds spectra but no substructure labels; it was not written by "
                              f"`python -m training.encoder.forward simulate`.")  # fmt: skip
        meta = json.loads(str(z["label_meta"]))
        labels = FragmentLabels(z["label_token"], z["label_offsets"], z["label_bits"], int(meta["n_bits"]),
                                meta["summary"])  # fmt: skip
    return spectra, labels
