"""Training the fragment-level forward model, and simulated spectra of corpus molecules for encoder training.

The model, its candidates and its score live in :mod:`engine.model.forward` (the app ranks with it); this
module builds its training targets, fits it, measures it and simulates spectra with it.

MIST mixes spectra simulated by a forward model into its encoder's training data (the largest lever
reported for unseen structures, ``../shared/docs/accuracy-notes.md``). This is our own, small one,
trained on the ``FOLD=train`` spectra only, in the encoder's own token space (neutral subformulas):

* **candidates** (:func:`engine.model.forward.candidates`): the bond-cleavage pieces of the structure
  (:func:`engine.spectra.fragments.fragment_pieces`, up to ``max_breaks`` cuts), each with its hydrogens
  shifted by up to ``h_shift`` (rearrangements); one candidate per distinct neutral formula, explained
  by the piece with the smallest hydrogen shift, then the fewest cuts (the rule of
  :func:`training.encoder.substructures.assign_pieces`). Its features: the piece's Morgan fingerprint (as a
  molecule of its own, the substructure task's fingerprint), the shift and the cuts, the formula and
  the neutral loss as element counts, the share of the precursor's heavy atoms, ring-plus-double-bond
  equivalents, how many pieces share the heavy atoms, the ion mode and the precursor's size;
* **targets**: over the structure's training spectra of one ion mode, the share of spectra with a peak
  token of that formula and the mean intensity feature (``sqrt(I / I_max)``) where there is one;
* **model** (:class:`ForwardModel`): an MLP from the features to the logit of that share and to the
  intensity, trained with BCE against the share and squared error on the intensities of observed ones;
* **simulation** (:func:`simulate_tokens`): each candidate of a new molecule becomes a peak with its
  predicted probability, at its predicted intensity with log-normal noise; the tokens are those of
  :func:`engine.model.featurize.featurize_annotation` (root = precursor formula, peaks in mass order, at
  most ``max_peaks``), and each peak keeps its piece's fingerprint as its substructure label.

``python -m training.encoder.forward fit --mgf ../shared/data/massbank_dev.mgf.gz --out runs/forward`` trains it
and scores it on the ``FOLD=val`` structures (AUROC of the peak probabilities, cosine between predicted
and observed spectra, against a baseline that ranks by cuts and shift alone); ``python -m training.encoder.forward
simulate --model runs/forward --molecules ../shared/data/molecules.tsv.gz --n 12000 --out
runs/simulated.npz`` writes simulated spectra of corpus molecules that have no spectrum in the file
(neither fold), which ``train_encoder --simulated`` adds to the training spectra.

``python -m training.encoder.forward ensemble --members runs/forward_k4_0 ... --out runs/forward_k4`` joins fitted
models (for instance one per ``--held-out-fold`` of a ``--held-out-share N`` split) into one
:class:`engine.model.forward.ForwardEnsemble` that averages their peak probabilities.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.chem import molecules as chem
from engine.errors import ConfigError, MsgptError
from engine.model.forward import (
    FEATURE_ELEMENTS,
    MAX_SHIFT,
    CandidateSettings,
    ForwardConfig,
    ForwardEnsemble,
    ForwardModel,
    candidates,
)

from training.core.checkpoint import write_json_atomic
from training.core.loop import TrainingConfig, int_at_least, torch_threads
from training.data.spectra import SHIPPABLE_LICENSES, LabelledSpectra, load_labelled_spectra, structure_folds
from training.encoder.substructures import structures_of
from training.encoder.forward_simulate import SimulateConfig, _require_paths, encoder_features, simulate
from training.encoder.forward_simulate import (  # noqa: F401  (re-exported)
    SimulateProgress,
    SimulatedTokens,
    _assemble,
    _mgf_keys,
    load_simulated,
    read_molecules,
    save_simulated,
    simulate_tokens,
)


# ----------------------------------------------------------------------------------------------
# Targets of the training structures


def observed_peaks(data: LabelledSpectra) -> dict[tuple[str, int], tuple[int, dict[bytes, list[float]]]]:
    """Per (structure, polarity): the number of spectra and each peak formula's intensity features."""
    out: dict[tuple[str, int], tuple[int, dict[bytes, list[float]]]] = {}
    formulas = np.asarray(data.formulas, dtype=np.int64)
    for i in range(len(data)):
        key = (str(data.inchikey14[i]), int(data.polarity[i]))
        n, peaks = out.get(key, (0, {}))
        a, b = int(data.token_offsets[i]) + 1, int(data.token_offsets[i + 1])  # skip the root
        for f, x in zip(formulas[a:b], data.intensities[a:b]):
            peaks.setdefault(f.tobytes(), []).append(float(x))
        out[key] = (n + 1, peaks)
    return out


@dataclass(frozen=True, eq=False)
class CandidateTable:
    """Candidates of many (structure, polarity) groups with their targets, ready for batching."""

    fingerprints: np.ndarray  # (R, n_bits / 8) uint8, packed bits
    scalars: np.ndarray  # (R, N_SCALARS) float32
    share: np.ndarray  # (R,) float32 share of the group's spectra with this peak
    intensity: np.ndarray  # (R,) float32 mean intensity feature where observed (0 elsewhere)
    group: np.ndarray  # (R,) int64 group index
    groups: list[tuple[str, int]]  # (inchikey14, polarity) of each group
    n_spectra: np.ndarray  # (G,) int64 spectra of each group
    observed_unexplained: np.ndarray  # (G,) int64 observed peak formulas no candidate explains
    n_bits: int

    def __len__(self) -> int:
        return len(self.share)

    def features(self, rows: np.ndarray) -> torch.Tensor:
        fp = np.unpackbits(self.fingerprints[rows], axis=1, count=self.n_bits).astype(np.float32)
        return torch.from_numpy(np.hstack([fp, self.scalars[rows]]))


@dataclass(frozen=True)
class TableProgress:
    done: int
    total: int
    elapsed_s: float


def build_table(data: LabelledSpectra, smiles: dict[str, str], settings: CandidateSettings
                ) -> Iterator[TableProgress]:  # fmt: skip
    """Yield progress while building the :class:`CandidateTable` of ``data``'s structures; *return* it.

    Structures without a parseable SMILES, or with an element the fragmenter does not support, are left out.
    """
    t0 = time.monotonic()
    observed = observed_peaks(data)
    fps, scal, share, inten, grp, groups, n_spec, unexplained = [], [], [], [], [], [], [], []
    for n, ((key, polarity), (count, peaks)) in enumerate(sorted(observed.items())):
        mol = chem.mol_from_smiles(smiles.get(key))
        if mol is not None:
            chem.remove_stereo(mol)
            try:
                cand = candidates(mol, polarity, settings)
            except ConfigError:
                cand = None
            if cand is not None and len(cand):
                g = len(groups)
                keys = [f.tobytes() for f in cand.formulas]
                seen = [peaks.get(k, []) for k in keys]
                fps.append(np.packbits(cand.dense_fingerprints(settings.n_bits).astype(bool), axis=1))
                scal.append(cand.scalars)
                share.append(np.array([len(s) / count for s in seen], dtype=np.float32))
                inten.append(np.array([np.mean(s) if s else 0.0 for s in seen], dtype=np.float32))
                grp.append(np.full(len(cand), g, dtype=np.int64))
                groups.append((key, polarity))
                n_spec.append(count)
                unexplained.append(len(set(peaks) - set(keys)))
        if (n + 1) % 200 == 0 or n + 1 == len(observed):
            yield TableProgress(n + 1, len(observed), time.monotonic() - t0)
    if not groups:
        raise ConfigError("No structure of the selection could be fragmented: nothing to train the forward model on.")
    return CandidateTable(
        np.concatenate(fps), np.concatenate(scal), np.concatenate(share), np.concatenate(inten),
        np.concatenate(grp), groups, np.array(n_spec, dtype=np.int64), np.array(unexplained, dtype=np.int64),
        settings.n_bits,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The loss and the model's measures


def forward_loss(model: ForwardModel, table: CandidateTable, rows: np.ndarray,
                 positive_weight: float) -> torch.Tensor:  # fmt: skip
    """BCE of the peak logits against the observed shares (observed rows weighted ``positive_weight``)
    plus the squared error of the intensities of the observed rows."""
    logit, intensity = model(table.features(rows))
    share = torch.from_numpy(table.share[rows])
    weight = 1.0 + (positive_weight - 1.0) * (share > 0).float()
    loss = (F.binary_cross_entropy_with_logits(logit, share, reduction="none") * weight).sum() / weight.sum()
    seen = share > 0
    if bool(seen.any()):
        loss = loss + F.mse_loss(intensity[seen], torch.from_numpy(table.intensity[rows])[seen])
    return loss


# ----------------------------------------------------------------------------------------------
# Scoring


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties count half); NaN without both classes."""
    labels = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = np.asarray(scores)[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def baseline_scores(table: CandidateTable) -> np.ndarray:
    """A rule without learning: fewer cuts first, then smaller hydrogen shifts, then heavier pieces."""
    shift = np.abs(np.argmax(table.scalars[:, : 2 * MAX_SHIFT + 1], axis=1) - MAX_SHIFT)
    breaks = np.argmax(table.scalars[:, 2 * MAX_SHIFT + 1: 2 * MAX_SHIFT + 5], axis=1)
    heavy_share = table.scalars[:, 2 * MAX_SHIFT + 5 + 2 * len(FEATURE_ELEMENTS)]
    return -(breaks * 10.0 + shift) + heavy_share


def score_table(table: CandidateTable, probabilities: np.ndarray, intensities: np.ndarray) -> dict:
    """AUROC of peak presence, mean per-group cosine between predicted (p x intensity) and observed
    (share x intensity) spectra over the candidates, and the share of observed peaks candidates explain."""
    observed = table.share > 0
    predicted = probabilities * intensities
    truth = table.share * table.intensity
    cos = []
    bounds = np.flatnonzero(np.diff(np.concatenate([[-1], table.group, [len(table.groups)]])))
    for a, b in zip(bounds[:-1], bounds[1:]):
        p, t = predicted[a:b], truth[a:b]
        denom = float(np.linalg.norm(p) * np.linalg.norm(t))
        if denom > 0:
            cos.append(float(p @ t) / denom)
    explained = int(observed.sum())
    return {
        "auroc": round(auroc(probabilities, observed), 4),
        "cosine": round(float(np.mean(cos)) if cos else float("nan"), 4),
        "groups": len(table.groups),
        "candidates_per_group": round(len(table) / max(len(table.groups), 1), 1),
        "observed_peaks_explained": round(explained / max(explained + int(table.observed_unexplained.sum()), 1), 4),
        "expected_peaks_per_spectrum": round(float(probabilities.sum()) / max(len(table.groups), 1), 2),
        "observed_peaks_per_spectrum": round(float(table.share.sum()) / max(len(table.groups), 1), 2),
    }


@torch.no_grad()
def predict_table(model: ForwardModel, table: CandidateTable, batch: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    model.eval()
    probs, ints = [], []
    for start in range(0, len(table), batch):
        logit, intensity = model(table.features(np.arange(start, min(start + batch, len(table)))))
        probs.append(torch.sigmoid(logit).numpy())
        ints.append(intensity.numpy())
    return np.concatenate(probs), np.concatenate(ints)


# ----------------------------------------------------------------------------------------------
# Training


@dataclass(kw_only=True)
class FitConfig(ForwardConfig, TrainingConfig):
    """A ``fit`` run: the model's settings (inherited from :class:`ForwardConfig`) and the training's."""

    mgf: str = field(metadata={"help": "Labelled MGF (FOLD, LICENSE, SMILES per record)."})
    out: str = field(metadata={"help": "Output folder: forward.safetensors, config.json, metrics.json."})
    adducts: tuple[str, ...] = field(default=("[M+H]+", "[M-H]-"),
                                     metadata={"help": "Precursor ion types of the spectra learnt from."})
    licenses: tuple[str, ...] | None = field(default=SHIPPABLE_LICENSES,
                                             metadata={"help": "LICENSE values learnt from; None = all."})
    epochs: int = field(default=4, metadata={"help": "Passes over the training candidates."})
    batch_size: int = field(default=2048, metadata={"help": "Candidates per step."})
    lr: float = field(default=1e-3, metadata={"help": "AdamW learning rate (a cosine down to a twentieth of it)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    positive_weight: float = field(default=3.0, metadata={"help": "Loss weight of observed candidates."})
    held_out_share: int = field(default=10, metadata={"help": "1/N of the train structures held out for scoring."})
    held_out_fold: int = field(default=0, metadata={
        "help": "Which fold of that N-way split by structure is held out (0 to N-1): N fits, one per fold, "
                "partition the structures between them."})
    seed: int = field(default=0, metadata={"help": "Seed of initialisation and data order."})
    threads: int = field(default=1, metadata={"help": "torch CPU threads."})
    cache_dir: str | None = field(default=None, metadata={"help": "Labelled-spectra cache folder."})

    def __post_init__(self):
        super().__post_init__()
        _require_paths(self, ("mgf", "out"))
        self.adducts = tuple(self.adducts)
        self.licenses = None if self.licenses is None else tuple(self.licenses)
        self.require(("epochs", "batch_size", "threads", "held_out_share"), int_at_least(1),
                     "a positive integer")
        if not (isinstance(self.held_out_fold, int) and 0 <= self.held_out_fold < max(self.held_out_share, 1)):
            raise ConfigError(f"`held_out_fold` must be an integer from 0 to held_out_share - 1 = "
                              f"{self.held_out_share - 1}, got {self.held_out_fold!r}.")  # fmt: skip
        if not (self.lr > 0 and self.weight_decay >= 0 and self.positive_weight > 0):
            raise ConfigError(f"`lr` and `positive_weight` must be > 0 and `weight_decay` >= 0; got {self.lr}, "
                              f"{self.positive_weight}, {self.weight_decay}.")  # fmt: skip

    def model_config(self) -> ForwardConfig:
        """The part saved beside the weights."""
        return ForwardConfig(**{f.name: getattr(self, f.name) for f in fields(ForwardConfig)})


@dataclass(frozen=True)
class FitStep:
    epoch: int
    step: int
    steps: int
    loss: float


@dataclass(frozen=True)
class FitDone:
    folder: str
    metrics: dict


def fit(config: FitConfig) -> Iterator[TableProgress | FitStep | FitDone]:
    """Train the forward model on ``FOLD=train`` (minus fold ``held_out_fold`` of a ``held_out_share``-way split
    of its structures, scored),
    score it on ``FOLD=val``; yields progress, ends with :class:`FitDone`."""
    with torch_threads(config.threads):
        yield from _fit(config)


def _fit(config: FitConfig) -> Iterator[TableProgress | FitStep | FitDone]:
    t0 = time.monotonic()
    data = load_labelled_spectra(config.mgf, encoder_features(), cache_dir=config.cache_dir)
    data = data.subset(np.flatnonzero(np.isin(data.adduct, list(config.adducts))))
    smiles = structures_of(config.mgf, set(data.inchikey14.astype(str).tolist()))
    settings = config.model_config().candidate_settings()
    train = data.select(("train",), licenses=config.licenses)
    val = data.select(("val",), licenses=config.licenses)
    folds = structure_folds(train.inchikey14, config.held_out_share, config.seed)
    tables = {}
    held = folds == config.held_out_fold
    for name, part in (("train", train.subset(np.flatnonzero(~held))),
                       ("held_out", train.subset(np.flatnonzero(held))), ("val", val)):  # fmt: skip
        if len(part) or name == "train":
            tables[name] = yield from build_table(part, smiles, settings)
    table = tables["train"]
    torch.manual_seed(config.seed)
    model = ForwardModel(config.model_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng = np.random.default_rng(config.seed)
    steps_per_epoch = math.ceil(len(table) / config.batch_size)
    total = steps_per_epoch * config.epochs
    step = 0
    for epoch in range(config.epochs):
        model.train()
        order = rng.permutation(len(table))
        for start in range(0, len(table), config.batch_size):
            lr = config.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / total)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = forward_loss(model, table, order[start:start + config.batch_size], config.positive_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 50 == 0 or step == total:
                yield FitStep(epoch, step, total, loss.item())
    metrics: dict = {"train_minutes": round((time.monotonic() - t0) / 60, 2), "config": config.to_dict(),
                     "candidates": {k: len(t) for k, t in tables.items()}}  # fmt: skip
    for name in ("held_out", "val"):
        if name not in tables:
            continue
        t = tables[name]
        p, i = predict_table(model, t)
        metrics[name] = {"model": score_table(t, p, i),
                         "baseline": score_table(t, _squash(baseline_scores(t)), np.ones(len(t), np.float32))}
    model.save(config.out, {"metrics": metrics})
    write_json_atomic(Path(config.out) / "metrics.json", metrics)
    yield FitDone(config.out, metrics)


def _squash(scores: np.ndarray) -> np.ndarray:
    """Rank scores to (0, 1) so the baseline's cosine compares shapes, not scales."""
    order = np.argsort(np.argsort(scores, kind="mergesort"), kind="mergesort")
    return ((order + 1) / (len(scores) + 1)).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Command line


def ensemble(members: Sequence[str], out: str) -> str:
    """Join the forward models saved in the folders ``members`` into one ensemble saved in ``out``; each
    member's training record is kept (``training.members``). Returns what was written."""
    if len(members) < 2:
        raise ConfigError(f"an ensemble needs at least 2 member folders, got {len(members)}.")
    if len(set(map(str, members))) != len(members):
        raise ConfigError("a member folder is given twice; give each fitted model once.")
    models = [ForwardModel.load(m) for m in members]
    records = [{"folder": str(m), **(json.loads((Path(m) / "config.json").read_text(encoding="utf-8"))
                                     .get("training") or {})} for m in members]  # fmt: skip
    ForwardEnsemble.of(models).save(out, {"members": records})
    return f"wrote an ensemble of {len(models)} forward models to {out}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.encoder.forward", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    FitConfig.add_arguments(sub.add_parser("fit", help="train the forward model and score it"))
    SimulateConfig.add_arguments(sub.add_parser("simulate", help="simulate spectra of corpus molecules"))
    e = sub.add_parser("ensemble", help="join fitted forward models into one that averages them")
    e.add_argument("--members", nargs="+", required=True, help="folders of fitted (or rank-tuned) forward models")
    e.add_argument("--out", required=True, help="output folder: forward.safetensors and config.json")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    args = vars(_parser().parse_args(argv))
    command = args.pop("command")
    try:
        if command == "ensemble":
            print(ensemble(args["members"], args["out"]))
        elif command == "fit":
            config = FitConfig(**args)
            bar = None
            for event in fit(config):
                if isinstance(event, TableProgress):
                    print(f"candidates: {event.done}/{event.total} groups, {event.elapsed_s:.0f} s", file=sys.stderr)
                elif isinstance(event, FitStep):
                    bar = bar or tqdm(total=event.steps, desc="forward model", unit="step")
                    bar.n = event.step
                    bar.set_postfix(loss=f"{event.loss:.4f}", epoch=event.epoch, refresh=True)
                elif isinstance(event, FitDone):
                    if bar is not None:
                        bar.close()
                    shown = ("held_out", "val", "train_minutes")
                    print(json.dumps({k: v for k, v in event.metrics.items() if k in shown}, indent=1))
        else:
            config = SimulateConfig(**args)
            gen = simulate(config)
            with tqdm(total=config.n, desc="simulated spectra", unit="spectrum") as bar:
                while True:
                    try:
                        event = next(gen)
                    except StopIteration as stop:
                        spectra, _ = stop.value
                        break
                    bar.n = event.done
                    bar.refresh()
            print(f"wrote {len(spectra)} simulated spectra to {config.out}")
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
