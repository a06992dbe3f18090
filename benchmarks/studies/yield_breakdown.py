"""Where the samples of formula-constrained decoding go: why each one is, or is not, a candidate.

Draws the band pool (or the oracle's, from the reference fingerprint) of the first ``--max-spectra``
spectra of the same seeded one-per-structure selection ``msgpt-eval`` makes, and sorts every sample
into one outcome: a candidate (valid, the spectrum's formula), a dead end (no legal token left, or
cut at the length limit), a string SAFE cannot decode, RDKit's sanitisation failure by kind (kekulisation,
valence, ...), or a valid molecule whose formula differs (by how many hydrogens). It prints a table
of the shares, so a change to :mod:`engine.model.constraints` can be judged by which failure it removes::

    python benchmarks/studies/yield_breakdown.py --mgf ../shared/data/massbank_dev.mgf.gz --max-spectra 40

``--corpus molecules.tsv.gz`` checks the other side, that the masks forbid few real molecules: it writes
a seeded sample of the corpus's structures as canonical SAFE (stereo removed) and counts those with a
token masked somewhere (with the shipped tokenizer; structures it cannot spell are skipped)::

    python benchmarks/studies/yield_breakdown.py --corpus ../shared/data/molecules.tsv.gz --structures 2000

Its table: docs/how_it_works.md, "Formula-constrained decoding" (where the samples go), with the commands above.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def classify(safe_str: str, formula: str) -> str:
    """One sample's outcome (see the module docstring)."""
    from rdkit import Chem, rdBase

    from engine.chem.formula import parse_formula
    from engine.elucidation.ranking import decode_safe
    from engine.model.constraints import DEAD_END

    if safe_str.endswith(DEAD_END):
        return "dead end (no legal token left, or length limit)"
    d = decode_safe(safe_str)
    if d.inchikey14 is not None:
        if d.formula == formula:
            return "candidate"
        got, want = parse_formula(d.formula), parse_formula(formula)
        heavy = {k: v for k, v in got.items() if k != "H"} == {k: v for k, v in want.items() if k != "H"}
        if heavy:
            dh = got.get("H", 0) - want.get("H", 0)
            return f"valid, hydrogens {dh:+d}"
        return "valid, other heavy atoms"
    if d.reason not in ("RDKit cannot parse the molecule", "not a valid SAFE string"):
        return d.reason
    # a SAFE string is SMILES with attachment digits shared across '.': RDKit reads it as one molecule
    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(d.smiles or safe_str, sanitize=False)
        if mol is None:
            return "not readable as SMILES"
        try:
            Chem.SanitizeMol(mol)
        except Chem.AtomKekulizeException:
            return "RDKit: aromatic atom outside a ring"
        except Chem.KekulizeException:
            return "RDKit: aromatic system cannot be kekulised"
        except Chem.AtomValenceException:
            return "RDKit: valence"
        except Exception as e:  # noqa: BLE001
            return f"RDKit: {type(e).__name__}"
    return d.reason + " (RDKit sanitises it)"


def masked_references(model_dir: str, corpus: str, n: int, seed: int = 0) -> int:
    """Count the corpus structures (a seeded sample of ``n``) the masks forbid somewhere; prints them."""
    import csv
    import gzip
    import json
    import random

    from rdkit import RDLogger

    from engine.chem import molecules as chem
    from engine.chem.formula import formula_vector, parse_formula
    from engine.insight.structure_score import canonical_safe
    from engine.model.constraints import first_masked
    from engine.model.safe_grammar import SafeGrammar
    from engine.model.tokenizer import SafeTokenizer

    RDLogger.DisableLog("rdApp.*")
    tok = SafeTokenizer.load(Path(model_dir) / "tokenizer.json")
    block_size = json.loads((Path(model_dir) / "config.json").read_text())["decoder"]["block_size"]
    grammar = SafeGrammar.of(tok)
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        smiles = [row["smiles"] for row in csv.DictReader(fh, delimiter="\t")]
    random.Random(seed).shuffle(smiles)
    checked, masked, skipped = 0, [], 0
    for smi in smiles[:n]:
        mol = chem.mol_from_smiles(smi)
        safe_str = canonical_safe(chem.canonical_smiles(mol, remove_stereo=True)) if mol is not None else None
        ids = tok.encode(safe_str)[1:] if safe_str else []  # after <bos>, <eos> included
        if not ids or tok.unk_id in ids or len(ids) >= block_size:
            skipped += 1
            continue
        checked += 1
        step = first_masked(grammar, formula_vector(parse_formula(chem.mol_formula(mol))), ids)
        if step is not None:
            masked.append((safe_str, step, tok.vocab[ids[step]]))
    print(f"{len(masked)} of {checked} corpus structures masked somewhere ({skipped} skipped: unreadable, "
          f"not SAFE-encodable, a token the tokenizer lacks, or too long)")
    charged = sum("+]" in s and "-]" not in s for s, *_ in masked)
    print(f"{charged} of them carry a positive charge and no negative one (permanently charged)")
    for s, step, t in masked:
        print(f"    {s}  (token {step}, {t!r})")
    return len(masked)


def main(argv=None) -> int:
    from engine.elucidation.pipeline import SpectrumSession
    from engine.progress import run_to_end
    from training.evaluation.evaluate import EvalConfig, load_model, query_for, select_spectra

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "resources" / "default_model"))
    p.add_argument("--mgf", help="labelled MGF to draw the band pools of")
    p.add_argument("--corpus", help="molecule TSV (a `smiles` column): count the structures the masks forbid")
    p.add_argument("--structures", type=int, default=2000, help="with --corpus: how many (seeded sample)")
    p.add_argument("--fold", default="val")
    p.add_argument("--max-spectra", type=int, default=40)
    p.add_argument("--variant", default="band", choices=("band", "oracle"))
    p.add_argument("--decoding", default="formula", choices=("formula", "free"))
    p.add_argument("--examples", type=int, default=0, help="print this many SAFE strings of each failure")
    args = p.parse_args(argv)
    if args.corpus:
        masked_references(args.model, args.corpus, args.structures)
        return 0
    if not args.mgf:
        p.error("give --mgf (band pools) or --corpus (masked structures)")
    model = load_model(args.model)
    cfg = EvalConfig(model=args.model, mgf=args.mgf, out="", folds=(args.fold,), one_per_structure=True,
                     max_spectra=args.max_spectra)
    chosen = select_spectra(model, cfg).chosen
    outcomes: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for spectrum, ref in chosen:
        params, plan = query_for(args.variant, cfg, model, ref, {}, None, spectrum.polarity)
        params = replace(params, decoding=args.decoding)
        session = SpectrumSession(model, spectrum)
        run_to_end(session.run(params, plan=plan))
        for _, s in session.pool.items():
            o = classify(s, spectrum.formula)
            outcomes[o] += 1
            if len(examples.setdefault(o, [])) < args.examples:
                examples[o].append(s)
    total = sum(outcomes.values())
    print(f"{model.name}, {args.variant} queries, {args.decoding} decoding: {len(chosen)} {args.fold} spectra, "
          f"{total:,} samples, {time.perf_counter() - t0:.0f} s")
    print("| outcome | samples | share |")
    print("| --- | ---: | ---: |")
    for o, n in outcomes.most_common():
        print(f"| {o} | {n:,} | {n / total:.1%} |")
    for o, ex in examples.items():
        if o != "candidate":
            print(f"\n{o}:")
            for s in ex:
                print("   ", s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
