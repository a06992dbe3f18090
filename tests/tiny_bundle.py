"""A tiny but real model bundle for tests, built in seconds.

The decoder is trained (teacher forcing, a few hundred AdamW steps) to generate the reference
structures of the positive-mode spectra in ``tests/data/fixture.mgf`` from their true fingerprint and
formula, so the whole pipeline produces real, formula-consistent candidates. The encoder keeps its
random initialisation; the calibration comes from its posteriors on the same spectra.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import safe as sf
import torch

from engine import chem
from engine.bundle import save_bundle
from engine.decoder import ConditionalDecoder, DecoderConfig, collate_queries
from engine.encoder import EncoderConfig, SpectrumEncoder
from engine.featurize import collate, featurize_spectrum
from engine.formula import formula_vector, parse_formula
from engine.io import read_spectra
from engine.querying import Calibration
from engine.tokenizer import SafeTokenizer

FIXTURE = Path(__file__).parent / "data" / "fixture.mgf"


def fixture_spectra(adducts=("[M+H]+", "[M+Na]+")):
    spectra, _ = read_spectra(FIXTURE)
    return [s for s in spectra if s.adduct in adducts and s.smiles]


def train_tiny_decoder(smiles_list, steps: int = 300, seed: int = 0):
    """A tiny decoder that has memorised ``smiles_list`` given each molecule's formula.

    Each step shows every molecule twice: with its true fingerprint and with a random one, so the
    decoder generates the right structure even from the random encoder's queries. 300 steps leave
    every fixture structure at rank 1 in bf16 and fp32 on the CPUs we ran it on (AMD Zen 5, Intel
    with AMX); at 150 the result depended on the CPU's float kernels (two structures never sampled).
    """
    torch.manual_seed(seed)
    mols = [chem.remove_stereo(chem.mol_from_smiles(s)) for s in smiles_list]
    safes = [sf.encode(chem.canonical_smiles(m), canonical=True, allow_empty=True) for m in mols]
    tokenizer = SafeTokenizer.build(safes)
    cfg = DecoderConfig.preset("tiny", vocab_size=tokenizer.vocab_size, n_embd=64, cross_ffn=128, fp_ffn=128)
    model = ConditionalDecoder(cfg)
    ids = [tokenizer.encode(s) for s in safes]
    T = max(map(len, ids))
    seq = torch.full((len(ids), T), tokenizer.pad_id, dtype=torch.long)
    for r, x in enumerate(ids):
        seq[r, : len(x)] = torch.tensor(x)
    bits = [chem.morgan_bits(m) for m in mols]
    formulas = np.stack([formula_vector(parse_formula(chem.mol_formula(m))) for m in mols])
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        noise = [np.unique(rng.integers(0, cfg.fp_bits, rng.integers(0, cfg.max_fp_tokens))) for _ in mols]
        fp, mask, form = collate_queries(bits + noise, np.concatenate([formulas, formulas]), cfg.max_fp_tokens)
        ctx, ctx_mask = model.encode_context(fp, mask, form)
        _, loss = model(seq.repeat(2, 1)[:, :-1], ctx, ctx_mask, targets=seq.repeat(2, 1)[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model, tokenizer, loss.item()


def build_tiny_bundle(path: Path, steps: int = 300) -> Path:
    spectra = fixture_spectra()
    decoder, tokenizer, _ = train_tiny_decoder([s.smiles for s in spectra], steps=steps)
    torch.manual_seed(1)
    encoder = SpectrumEncoder(EncoderConfig.from_preset("tiny", fp_bits=decoder.config.fp_bits)).eval()
    with torch.no_grad():
        batch = collate([featurize_spectrum(s, encoder.config) for s in spectra])
        post = encoder.predict_proba(batch).numpy()
    true_counts = [len(chem.morgan_bits(chem.mol_from_smiles(s.smiles))) for s in spectra]
    calibration = Calibration.from_posteriors(post, true_counts, source="tests/data/fixture.mgf")
    return save_bundle(
        path, decoder=decoder, encoder=encoder, tokenizer=tokenizer, calibration=calibration,
        name="tiny-test-bundle",
    )
