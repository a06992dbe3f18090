"""A tiny labelled MGF (exact [M+H]+ ions of subformulas) and a tiny encoder training config, for the tests of
encoder training and of what builds on it (tests/training/encoder, calibration, bundle)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from engine.chem.adducts import precursor_mz_from_neutral
from engine.chem.formula import formula_mass, parse_formula
from engine.chem.molecules import inchikey, mol_formula, mol_from_smiles
from engine.spectra.annotate import enumerate_subformulas
from training.encoder.train_encoder import EncoderTrainConfig

TRAIN_MOLECULES = {
    "mellein": "CC1Cc2cccc(O)c2C(=O)O1",
    "caffeine": "Cn1cnc2c1c(=O)n(C)c(=O)n2C",
    "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
    "phenylalanine": "NC(Cc1ccccc1)C(=O)O",
    "nicotine": "CN1CCCC1c1cccnc1",
    "tyrosine": "N[C@@H](Cc1ccc(O)cc1)C(=O)O",
    "coumarin": "O=c1ccc2ccccc2o1",
    "vanillin": "COc1cc(C=O)ccc1O",
}
VAL_MOLECULES = {"tryptophan": "NC(Cc1c[nH]c2ccccc12)C(=O)O", "serotonin": "NCCc1c[nH]c2ccc(O)cc12"}


def _record(
    title, smiles, adduct="[M+H]+", fold="train", license="CC BY", instrument="LC-ESI-QTOF", seed=0, formula=None
):
    """One MGF block whose peaks are exact [M+H]+ ions of subformulas (the same ones per molecule)."""
    formula = formula or mol_formula(mol_from_smiles(smiles))
    _, masses = enumerate_subformulas(formula)
    masses = masses[masses > 40]
    rng = np.random.default_rng(zlib.crc32(formula.encode()))
    frag = np.sort(rng.choice(masses, size=min(8, len(masses)), replace=False))
    ion = "[M+H]+" if adduct.endswith("+") else "[M-H]-"
    mz = [precursor_mz_from_neutral(m, ion) for m in frag]
    intensity = np.random.default_rng(seed).uniform(10, 100, len(mz))
    precursor = precursor_mz_from_neutral(formula_mass(parse_formula(formula)), adduct)
    lines = [
        "BEGIN IONS", f"TITLE={title}", f"PEPMASS={precursor:.5f}", f"CHARGE=1{adduct[-1]}",
        f"IONMODE={'positive' if adduct.endswith('+') else 'negative'}", f"ADDUCT={adduct}",
        f"FORMULA={formula}", f"SMILES={smiles}", f"INSTRUMENT_TYPE={instrument}", f"LICENSE={license}",
        f"FOLD={fold}",
    ]  # fmt: skip
    lines += [f"{m:.5f} {i:.1f}" for m, i in zip(mz, intensity)]
    return "\n".join(lines + ["END IONS", ""])


def write_labelled_mgf(path: Path, per_molecule: int = 3, inchikeys: bool = False) -> Path:
    """Train: 8 molecules x ``per_molecule``; val: 2 x 2; plus 4 records the default selection drops.
    ``inchikeys``: an INCHIKEY line in every record (the structure key of structure-disjoint splits)."""
    blocks = [
        _record(f"{name}-{k}", smi, seed=k) for name, smi in TRAIN_MOLECULES.items() for k in range(per_molecule)
    ]
    blocks += [_record(f"{name}-{k}", smi, fold="val", seed=k) for name, smi in VAL_MOLECULES.items() for k in range(2)]
    blocks += [
        _record("nc-licence", TRAIN_MOLECULES["mellein"], license="CC BY-NC"),  # cached, not selected
        _record("unit-res", TRAIN_MOLECULES["caffeine"], instrument="LC-ESI-QQ"),  # cached, not selected
        _record("negative", TRAIN_MOLECULES["aspirin"], adduct="[M-H]-"),  # dropped when reading
        _record("bad-smiles", "C1CC", formula="C10H10O3"),  # dropped when reading (unparseable)
    ]
    text = "".join(blocks)
    if inchikeys:
        lines = []
        for line in text.splitlines():
            lines.append(line)
            if line.startswith("SMILES="):
                mol = mol_from_smiles(line[len("SMILES="):])
                lines.append(f"INCHIKEY={inchikey(mol) if mol is not None else ''}")
        text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path


@pytest.fixture
def mgf(tmp_path) -> Path:
    return write_labelled_mgf(tmp_path / "labelled.mgf")


def tiny_config(mgf: Path, out: Path, **overrides) -> EncoderTrainConfig:
    base = dict(
        mgf=str(mgf), out_dir=str(out), preset="tiny", encoder={"dropout": 0.1}, batch_size=8, bucket_batches=2,
        lr=3e-3, warmup_steps=2, epochs=50, eval_batch_size=16, cache_dir=str(out.parent / "cache"),
        checkpoint_minutes=60.0,
    )  # fmt: skip
    return EncoderTrainConfig(**{**base, **overrides})
