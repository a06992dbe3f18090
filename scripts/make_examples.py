"""Cut the example spectra shipped in ``resources/examples/`` from the shared MassBank file.

Picks records the bundled model is meant for and that we may redistribute, and copies each one
unchanged (every field, every peak), with an attribution table in ``resources/examples/README.md``::

    python scripts/make_examples.py ../shared/data/massbank_dev.mgf.gz

Selection (deterministic; no model is consulted, so the examples are not cherry-picked):

* ``FOLD=val`` only (never seen in training), ``LICENSE`` CC0, CC BY or CC BY-SA;
* ``[M+H]+`` or ``[M+Na]+`` with a formula that agrees with the precursor m/z (the reader checks);
* at least ``--min-peaks`` peaks, neutral mass 150–600 Da, a parseable reference SMILES;
* one record per structure and per contributing lab (the accession prefix), in the order of the
  SHA-1 of the accession, until ``--protonated`` ``[M+H]+`` and ``--sodiated`` ``[M+Na]+`` are taken;
* then, in a second pass over the same order (so the positive-mode records do not depend on it),
  ``--deprotonated`` ``[M-H]-`` records of labs and structures not yet taken (a bundled model whose
  encoder was trained on negative-mode spectra runs them).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.spectra.io import iter_spectra  # noqa: E402
from engine.spectra.spectrum import Spectrum  # noqa: E402

LICENSES = ("CC0", "CC BY", "CC BY-SA")
OUT_NAME = "massbank_examples.mgf"


def raw_blocks(path: Path) -> list[str]:
    """Every ``BEGIN IONS … END IONS`` block of the file as written, in file order."""
    opener = gzip.open if path.suffix == ".gz" else open
    blocks, current = [], None
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        for line in f:
            if line.strip().upper() == "BEGIN IONS":
                current = [line]
            elif current is not None:
                current.append(line)
                if line.strip().upper() == "END IONS":
                    blocks.append("".join(current))
                    current = None
    return blocks


def eligible(s: Spectrum, min_peaks: int) -> bool:
    from engine.chem.formula import formula_mass, parse_formula

    md = s.metadata
    return (
        md.get("fold") == "val"
        and md.get("license") in LICENSES
        and s.adduct in ("[M+H]+", "[M+Na]+", "[M-H]-")
        and s.formula is not None
        and s.smiles is not None
        and len(s.mz) >= min_peaks
        and 150 <= formula_mass(parse_formula(s.formula)) <= 600
    )


def choose(spectra: list[Spectrum], protonated: int, sodiated: int, min_peaks: int,
           deprotonated: int = 0) -> list[Spectrum]:
    order = sorted(spectra, key=lambda s: hashlib.sha1(s.id.encode()).hexdigest())
    labs, structures, chosen = set(), set(), []
    for want in ({"[M+H]+": protonated, "[M+Na]+": sodiated}, {"[M-H]-": deprotonated}):
        for s in order:
            lab = s.id.rsplit("-", 1)[0]
            key = (s.inchikey or s.smiles or "")[:14]
            if want.get(s.adduct, 0) == 0 or not eligible(s, min_peaks) or lab in labs or key in structures:
                continue
            chosen.append(s)
            want[s.adduct] -= 1
            labs.add(lab)
            structures.add(key)
    return sorted(chosen, key=lambda s: s.index)


def readme(chosen: list[Spectrum], source: Path) -> str:
    rows = "\n".join(
        f"| {s.id} | {s.metadata.get('name', '')} | {s.adduct} | {s.formula} | {len(s.mz)} | "
        f"{s.metadata.get('source', '')} | {s.metadata.get('license', '')} |"
        for s in chosen
    )
    return f"""# Example spectra

`{OUT_NAME}` holds {len(chosen)} MS/MS spectra that MS-GPT Desktop opens on its first start. They are
copied unchanged (all fields, all peaks) from `{source.name}` of the project's development data,
converted from MassBank (MassBank-data release 2025.05.1, <https://github.com/MassBank/MassBank-data>),
by `scripts/make_examples.py` (its docstring states the selection rule; no model was consulted).

All are `FOLD=val` records: none of these structures was used to train the bundled model. Each
record carries its reference structure (SMILES, InChIKey), so the app shows where the true
structure ranks among the candidates and how faithful the spectrum's fingerprint posterior is.

| record (TITLE) | compound | adduct | formula | peaks | SOURCE | LICENSE |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

Each record keeps its own license (field `LICENSE`); the CC BY-SA records are shared under the same
license. Credit: the contributing laboratories named in each accession, and MassBank.
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mgf", type=Path, help="massbank_dev.mgf.gz")
    p.add_argument("--out", type=Path, default=ROOT / "resources" / "examples")
    p.add_argument("--protonated", type=int, default=8, help="[M+H]+ records to take (default 8)")
    p.add_argument("--sodiated", type=int, default=2, help="[M+Na]+ records to take (default 2)")
    p.add_argument("--deprotonated", type=int, default=3, help="[M-H]- records to take (default 3)")
    p.add_argument("--min-peaks", type=int, default=10, help="minimum peak count (default 10)")
    args = p.parse_args(argv)

    spectra = [s for s in iter_spectra(args.mgf) if isinstance(s, Spectrum)]
    chosen = choose(spectra, args.protonated, args.sodiated, args.min_peaks, args.deprotonated)
    blocks = raw_blocks(args.mgf)
    for s in chosen:  # the raw block really is this record
        if f"TITLE={s.id}" not in blocks[s.index]:
            sys.exit(f"record {s.index} of {args.mgf} is not {s.id}: the block splitter disagrees with the reader")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / OUT_NAME).write_text("".join(blocks[s.index] + "\n" for s in chosen), encoding="utf-8")
    (args.out / "README.md").write_text(readme(chosen, args.mgf), encoding="utf-8")
    print(f"wrote {len(chosen)} spectra to {args.out / OUT_NAME}")
    for s in chosen:
        print(f"  {s.id:45s} {s.adduct:8s} {s.formula:14s} {len(s.mz):4d} peaks  {s.metadata.get('name', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
