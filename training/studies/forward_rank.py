"""Fine-tune the forward model to rank a spectrum's true structure above the other structures of its formula.

:mod:`training.encoder.forward` teaches the forward model which fragments show up as peaks; the app uses it through the
forward score (:func:`engine.model.forward.forward_score`) to order a suspect list's isomers. A better peak
predictor need not rank better (``docs/evidence/suspect_order.md``: trained four times longer, its AUROC rose and its
suspect Hit@1 fell). This module trains the score for the job it does: for each training spectrum, its true
structure and up to ``decoys`` corpus structures of the same formula (another InChIKey first block) are scored
against the spectrum's peak formulas, and a softmax cross-entropy over their forward scores puts the truth first;
the truth's own peak loss (binary cross-entropy, observed peaks weighted ``positive_weight``) stays beside it,
weighted ``peak_weight``, so that the probabilities stay probabilities.

Spectra (``--part``): those :mod:`training.encoder.forward` fit learned from (``train``: ``FOLD=train``, its licences
and ion types, minus its held-out structures, same seed), or the structures it held out (``held_out``, which the
peak model never saw); either way no pool truth of :mod:`training.studies.retrieval_forward` (train-unseen or
``FOLD=val``) is ever a positive. Decoys are drawn from the whole corpus, so a pool truth can be one (a
negative: it can only make the measurement harder). The result is a forward model folder like ``fit``'s;
measure it, and choose its weight, with :mod:`training.studies.retrieval_forward`::

    OMP_NUM_THREADS=1 python -m training.studies.forward_rank --init runs/forward --out runs/forward_rank_ho \\
        --part held_out --decoys 8 --mgf ../shared/data/massbank_dev.mgf.gz \\
        --corpus ../shared/data/molecules.tsv.gz --home runs/retrieval/home

Measured (``docs/evidence/suspect_order.md``, "Training the score for ranking" and "Half the structures for peaks, half
for ranking"): rank-tuned on the shipped fit's own spectra or on its held-out tenth, the model is no better by
the library rule. A fit holding out half its structures (``fit --held-out-share 2``), rank-tuned on that half,
passed the de novo rule with seed 0 and failed it with seed 1, so nothing is installed.

May import: ``engine``, ``training`` (never Qt).

Its table: docs/evidence/suspect_order.md, "Training the score for ranking (measured, not adopted)" in "The fragment
score", with the commands written there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import Pool as Processes
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.chem import molecules as chem
from engine.errors import ConfigError, MsgptError
from engine.model.forward import (
    UNEXPLAINED_EPS,
    CandidateSettings,
    ForwardModel,
    candidates,
)

from training.core.checkpoint import write_json_atomic
from training.encoder.forward import encoder_features
from training.data.spectra import load_labelled_spectra, structure_folds
from training.encoder.substructures import structures_of


@dataclass(frozen=True, eq=False)
class Structure:
    """The candidate peaks of one structure in one ion mode, packed for training."""

    keys: list[bytes]  # the candidate formulas (neutral subformulas as int64 bytes)
    fingerprints: np.ndarray  # (k, n_bits / 8) uint8 packed
    scalars: np.ndarray  # (k, N_SCALARS) float32

    def features(self, n_bits: int) -> torch.Tensor:
        fp = np.unpackbits(self.fingerprints, axis=1, count=n_bits).astype(np.float32)
        return torch.from_numpy(np.hstack([fp, self.scalars]))


def _structure(job: tuple[str, int, CandidateSettings]) -> Structure | None:
    smiles, polarity, settings = job
    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        return None
    try:
        cand = candidates(chem.remove_stereo(mol), polarity, settings)
    except MsgptError:
        return None
    if not len(cand):
        return None
    fps = np.packbits(cand.dense_fingerprints(settings.n_bits).astype(bool), axis=1)
    return Structure([f.tobytes() for f in cand.formulas], fps, cand.scalars)


@dataclass(frozen=True)
class Example:
    """One training spectrum: its peak formulas and the structures ranked for it (the truth first)."""

    observed: frozenset[bytes]
    structures: tuple[int, ...]  # indices into the structure list, truth first


def build(args, fit: dict, settings: CandidateSettings, log=print) -> tuple[list[Structure], list[Example]]:
    """The spectra of ``args.part`` of the fit at ``args.init`` (``fit``: its training config), with their truths
    and decoys (module docstring)."""
    from training.studies.retrieval import open_corpus

    data = load_labelled_spectra(args.mgf, encoder_features(), cache_dir=args.cache_dir)
    data = data.subset(np.flatnonzero(np.isin(data.adduct, list(fit["adducts"]))))
    train = data.select(("train",), licenses=fit["licenses"])
    folds = structure_folds(train.inchikey14, fit["held_out_share"], fit["seed"])
    held = folds == fit.get("held_out_fold", 0)  # fits saved before the option held out fold 0
    train = train.subset(np.flatnonzero(held if args.part == "held_out" else ~held))
    smiles = structures_of(args.mgf, set(train.inchikey14.astype(str).tolist()))
    library = open_corpus(args.corpus, args.home)
    rng = np.random.default_rng(args.seed)
    formulas = np.asarray(train.formulas, dtype=np.int64)
    groups: dict[tuple[str, int], list[frozenset[bytes]]] = {}
    for i in range(len(train)):
        a, b = int(train.token_offsets[i]) + 1, int(train.token_offsets[i + 1])  # the root left out
        key = (str(train.inchikey14[i]), int(train.polarity[i]))
        groups.setdefault(key, []).append(frozenset(f.tobytes() for f in formulas[a:b]))
    jobs, members = [], []
    for (key, polarity), spectra in sorted(groups.items()):
        mol = chem.mol_from_smiles(smiles.get(key))
        if mol is None:
            continue
        rows = library.rows_of_formula(chem.mol_formula(mol))
        rows = [int(r) for r in rows if library.inchikey14(int(r)) != key]
        if not rows:
            continue
        chosen = rng.permutation(rows)[: args.decoys]
        first = len(jobs)
        jobs.append((smiles[key], polarity, settings))
        jobs += [(library.smiles(int(r)), polarity, settings) for r in chosen]
        members.append((first, len(jobs), spectra))
    if not members:
        raise ConfigError(f"No {args.part} structure of {args.mgf} has an isomer in {args.corpus}: nothing to rank.")
    if args.groups:
        members = members[: args.groups]
        jobs = jobs[: members[-1][1]]
    log(f"{len(members)} structures with isomers in the corpus, {len(jobs)} structures to fragment")
    t0 = time.monotonic()
    with Processes(args.processes) as pool:
        structures = []
        for n, s in enumerate(pool.imap(_structure, jobs, chunksize=8)):
            structures.append(s)
            if (n + 1) % 2000 == 0:
                log(f"fragmented {n + 1}/{len(jobs)} structures, {time.monotonic() - t0:.0f} s")
    examples = []
    for first, end, spectra in members:
        if structures[first] is None:
            continue
        idx = (first,) + tuple(j for j in range(first + 1, end) if structures[j] is not None)
        if len(idx) < 2:
            continue
        spectra = [obs for obs in spectra if obs]
        picked = rng.permutation(len(spectra))[: args.spectra_per_structure]
        examples += [Example(spectra[i], idx) for i in sorted(picked)]
    return structures, examples


def forward_scores(model: ForwardModel, parts: Sequence[Structure], observed: frozenset[bytes], n_bits: int,
                   eps: float = UNEXPLAINED_EPS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The differentiable forward scores of ``parts`` against the peak formulas ``observed`` (the same sum as
    :func:`engine.model.forward.forward_score`, probabilities clipped at 1e-4 alike), with the candidates'
    logits and hits (0/1), concatenated over the structures."""
    x = torch.cat([s.features(n_bits) for s in parts])
    logit, _ = model(x)
    hits = torch.tensor([k in observed for s in parts for k in s.keys], dtype=torch.float32)
    floor = math.log(1e-4)
    terms = hits * F.logsigmoid(logit).clamp(min=floor) + (1 - hits) * F.logsigmoid(-logit).clamp(min=floor)
    sizes = [len(s.keys) for s in parts]
    scores = torch.stack([t.sum() for t in torch.split(terms, sizes)])
    explained = torch.stack([h.sum() for h in torch.split(hits, sizes)])
    return scores + (len(observed) - explained) * math.log(eps), logit, hits


def example_loss(model: ForwardModel, structures: list[Structure], ex: Example, n_bits: int,
                 positive_weight: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(ranking loss, the truth's peak loss, whether the truth ranks first) of one example."""
    parts = [structures[j] for j in ex.structures]
    scores, logit, hits = forward_scores(model, parts, ex.observed, n_bits)
    rank_loss = -torch.log_softmax(scores, dim=0)[0]
    n0 = len(parts[0].keys)
    weight = 1.0 + (positive_weight - 1.0) * hits[:n0]
    peak = (F.binary_cross_entropy_with_logits(logit[:n0], hits[:n0], reduction="none") * weight).sum() / weight.sum()
    return rank_loss, peak, bool(scores[0] >= scores[1:].max())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.studies.forward_rank", description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="the fitted forward model folder (python -m training.encoder.forward fit)")
    p.add_argument("--out", required=True, help="output folder: forward.safetensors, config.json, metrics.json")
    p.add_argument("--mgf", required=True, help="labelled MGF the forward model was fitted on")
    p.add_argument("--corpus", required=True, help="structure corpus of the decoys (molecules.tsv.gz)")
    p.add_argument("--home", help="folder of the corpus index (MSGPT_HOME), as training.studies.retrieval's --home")
    p.add_argument("--part", choices=("train", "held_out"), default="train",
                   help="the fit's own training structures, or the structures it held out (never learnt from)")
    p.add_argument("--decoys", type=int, default=4, help="corpus isomers per training structure")
    p.add_argument("--groups", type=int, default=0, help="first N training structures only (0: all)")
    p.add_argument("--spectra-per-structure", type=int, default=3,
                   help="training spectra per structure and ion mode (a random draw of its spectra)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="spectra per step")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--peak-weight", type=float, default=1.0, help="weight of the truth's peak loss")
    p.add_argument("--positive-weight", type=float, default=3.0, help="as training.encoder.forward fit's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--processes", type=int, default=2, help="processes that fragment the structures")
    p.add_argument("--cache-dir", help="labelled-spectra cache folder")
    args = p.parse_args(argv)
    if min(args.decoys, args.epochs, args.batch, args.spectra_per_structure) < 1 or args.lr <= 0 \
            or args.peak_weight < 0:
        p.error("--decoys, --epochs, --batch and --spectra-per-structure must be >= 1, --lr > 0 and "
                "--peak-weight >= 0")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    torch.set_num_threads(1)
    try:
        model = ForwardModel.load(args.init)
    except MsgptError as e:
        log(f"error: {e}")
        return 1
    n_bits = model.config.n_bits
    try:
        fit_metrics = json.loads((Path(args.init) / "config.json").read_text(encoding="utf-8"))["training"]["metrics"]
        structures, examples = build(args, fit_metrics["config"], model.config.candidate_settings(), log)
    except MsgptError as e:
        log(f"error: {e}")
        return 1
    log(f"{len(examples)} training spectra, {time.monotonic() - t0:.0f} s")
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    history = []
    for epoch in range(args.epochs):
        model.train()
        order = rng.permutation(len(examples))
        tot = {"rank": 0.0, "peak": 0.0, "first": 0}
        for start in range(0, len(order), args.batch):
            batch = [examples[i] for i in order[start:start + args.batch]]
            losses = [example_loss(model, structures, ex, n_bits, args.positive_weight) for ex in batch]
            rank = torch.stack([r for r, _, _ in losses]).mean()
            peak = torch.stack([q for _, q, _ in losses]).mean()
            loss = rank + args.peak_weight * peak
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tot["rank"] += rank.item() * len(batch)
            tot["peak"] += peak.item() * len(batch)
            tot["first"] += sum(f for _, _, f in losses)
            if (start // args.batch) % 50 == 0:
                log(f"epoch {epoch} spectra {start}/{len(order)} rank {rank.item():.3f} peak {peak.item():.3f}")
        row = {"epoch": epoch, "rank_loss": tot["rank"] / len(order), "peak_loss": tot["peak"] / len(order),
               "truth_first_while_training": tot["first"] / len(order)}  # fmt: skip
        history.append(row)
        log(json.dumps(row))
    metrics = {"minutes": round((time.monotonic() - t0) / 60, 2), "args": vars(args), "history": history,
               "structures": len(structures), "spectra": len(examples),
               # training.studies.retrieval_forward reads the fit's licences from here to check for overlap
               "metrics": fit_metrics}  # fmt: skip
    model.eval()
    model.save(args.out, metrics)
    write_json_atomic(Path(args.out) / "metrics.json", metrics)
    log(f"saved {args.out} in {metrics['minutes']} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
