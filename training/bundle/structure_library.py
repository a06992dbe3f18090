"""Build the bundled structure library (``resources/structure_library/``) from the molecule corpus.

::

    python -m training.bundle.structure_library build --molecules ../shared/data/molecules.tsv.gz \\
        --out resources/structure_library/

``molecules.tsv.gz`` (``smiles``, ``inchikey14``, ``source``: ``;``-joined; see ``../shared/data/molecules.md``)
holds structures of many sources under many licences. Only the sources whose licence allows redistribution
are shipped (:data:`SOURCES` says, for each, the licence and the judgement): a structure is kept when at least
one of its sources is allowed, and it keeps only those sources. Sources marked ``optional`` (large, allowed)
are left out, largest last first, while the compressed table exceeds ``--max-mb``.

Writes ``structures.tsv.gz`` (``smiles``, ``inchikey14``, ``formula``, ``source``: each structure as the app
standardises library structures (:func:`engine.library.build.standardize`; the corpus's own canonical SMILES and
RDKit keys where that changes nothing), its neutral formula, in the corpus's order; gzip without a timestamp, so
a rebuild gives the same bytes and users' indexes stay valid) and ``ATTRIBUTION.md`` (sources, licences, counts,
what was left out and why). The app indexes the table on first use
(:func:`engine.library.cache.open_bundled_library`) without running RDKit on it, and computes a structure's
fingerprint when a spectrum first asks for it: fingerprints of 100k+ structures are too large to ship.
"""

from __future__ import annotations

import argparse
import gzip
import io
import logging
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import InputFileError, MsgptError

log = logging.getLogger(__name__)

TABLE = "structures.tsv.gz"
ATTRIBUTION = "ATTRIBUTION.md"
HEADER = ("smiles", "inchikey14", "source")  # molecules.tsv.gz
OUT_HEADER = ("smiles", "inchikey14", "formula", "source")  # structures.tsv.gz
MIT_NOTICE = """MIT License

Copyright (c) 2025 GuptaVishu2002

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE."""  # skinniderlab/spectraverse-analysis LICENSE, reproduced as it asks


@dataclass(frozen=True)
class Source:
    """A source of the molecule corpus and whether its structures may ship with the app."""

    name: str
    what: str
    licence: str
    allowed: bool
    why: str  # the judgement, as written in ATTRIBUTION.md
    credit: str = ""  # attribution the licence asks for
    optional: bool = False  # allowed but large: left out first when the table is over the size limit
    share_alike: bool = False


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("massbank_open", "LC-MS/MS reference standards (MassBank-data 2025.05.1)",
           "per record: CC0, CC BY, CC BY-SA or dl-de/by-2-0", True,
           "only records under these open licences entered the corpus (the NC ones were dropped); all allow "
           "redistribution with attribution", share_alike=True,
           credit="MassBank consortium and the contributing laboratories (MassBank/MassBank-data on GitHub; "
                  "each record names its authors and licence)"),
    Source("repoRT", "LC retention-time standards (michaelwitting/RepoRT)", "CC BY-SA 4.0", True,
           "open licence that allows redistribution; share-alike", share_alike=True,
           credit="RepoRT: Kretschmer et al., Nature Methods 2024; michaelwitting/RepoRT on GitHub"),
    Source("spectraverse_example", "MS/MS library compounds (skinniderlab/spectraverse-analysis, data/example)",
           "MIT", True, "permissive licence; its copyright notice is reproduced below",
           credit="MIT License, Copyright (c) 2025 GuptaVishu2002 (skinniderlab/spectraverse-analysis)"),
    Source("modelseed_metacyc", "metabolites (ModelSEED/ModelSEEDDatabase, Biochemistry/Structures/MetaCyc)",
           "CC BY 4.0; MetaCyc attribution", True, "open licence that allows redistribution with attribution",
           credit="ModelSEED Database (CC BY 4.0); structures from MetaCyc, Caspi et al., SRI International"),
    Source("chemxlstm_chembl31", "ChEMBL 31 drug-like compounds (ml-jku/Chem-xLSTM, data/chemblv31)",
           "ChEMBL: CC BY-SA 3.0 (repository: Apache-2.0)", True,
           "ChEMBL's own licence allows redistribution with attribution, share-alike; large, so shipped only "
           "while the table stays under the size limit", optional=True, share_alike=True,
           credit="ChEMBL 31, EMBL-EBI (Mendez et al., Nucleic Acids Res. 2019), CC BY-SA 3.0; SMILES set of "
                  "Özçelik et al. 2024 as distributed by ml-jku/Chem-xLSTM"),
    Source("npclassifier", "natural products (mwang87/NP-Classifier training data, COCONUT/UNPD derived)",
           "MIT (repository); source databases' terms", False,
           "the repository's licence covers its code; the structures come from COCONUT and UNPD under their "
           "own terms, which are not stated (UNPD has no clear licence)"),
    Source("mibig", "biosynthetic gene cluster products (mibig-secmet/mibig-json)", "MIBiG terms (no license file)",
           False, "no licence file in the repository: no right to redistribute is granted"),
    Source("moleculenet_glambard", "MoleculeNet data sets (GLambard/Molecules_Dataset_Collection)",
           "MIT (repository)", False,
           "the MIT grant is the collector's; the data sets it gathers (Tox21, HIV, BBBP, SIDER, ...) keep "
           "their own terms, and SIDER's is non-commercial (CC BY-NC-SA 4.0); the structures cannot be told "
           "apart by data set here"),
    Source("benchmarking_platform", "ChEMBL actives with ZINC and PubChem decoys (rdkit/benchmarking_platform)",
           "ChEMBL CC BY-SA 3.0 and others (no license file)", False,
           "no licence file, and the ZINC decoys are under ZINC's terms, which do not allow redistributing "
           "large parts"),
    Source("smilestransformer_chembl30", "ChEMBL 30 drug-like (gmattedi/SmilesTransformer)",
           "ChEMBL CC BY-SA 3.0 (no license file)", False,
           "no licence file in the repository; ChEMBL's structures ship through chemxlstm_chembl31 instead"),
    Source("graph2graph_zinc", "ZINC drug-like (wengong-jin/iclr19-graph2graph)", "MIT (repository); ZINC", False,
           "the repository's licence covers its code; ZINC's terms do not allow redistributing large parts"),
)}


@dataclass
class Selection:
    """What :func:`select` kept and counted."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)  # smiles, inchikey14, allowed sources
    n_read: int = 0
    listed: Counter = field(default_factory=Counter)  # source -> structures of the corpus that list it
    kept: Counter = field(default_factory=Counter)  # source -> structures shipped that list it
    dropped: Counter = field(default_factory=Counter)  # source -> structures dropped that list it
    unknown: set[str] = field(default_factory=set)  # sources not in SOURCES (not shipped)
    bad_lines: int = 0


def read_molecules(path: str | Path) -> Iterator[tuple[str, str, list[str]]]:
    """``(smiles, inchikey14, sources)`` of every row of ``molecules.tsv.gz``."""
    path = Path(path)
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            header = fh.readline().rstrip("\n").split("\t")
            if header[:3] != list(HEADER):
                raise InputFileError(path, f"expected the columns {', '.join(HEADER)}, got {header[:3]}; give "
                                     "the molecule corpus (molecules.tsv.gz).")
            for line in fh:
                parts = line.rstrip("\n").split("\t")
                yield parts[0], parts[1] if len(parts) > 1 else "", parts[2].split(";") if len(parts) > 2 else []
    except (OSError, EOFError, UnicodeError) as e:
        raise InputFileError(path, f"cannot be read ({type(e).__name__}: {e}).") from e


def select(rows, allowed: set[str]) -> Selection:
    """Keep the structures with at least one source in ``allowed``, each with only those sources."""
    out = Selection()
    for smiles, key, sources in rows:
        out.n_read += 1
        if not smiles or len(key) != 14:
            out.bad_lines += 1
            continue
        out.listed.update(sources)
        out.unknown.update(s for s in sources if s not in SOURCES)
        keep = [s for s in sources if s in allowed]
        if keep:
            out.rows.append((smiles, key, ";".join(keep)))
            out.kept.update(keep)
        else:
            out.dropped.update(sources)
    return out


class Standardised(dict):
    """``(smiles, inchikey14)`` -> ``(smiles, inchikey14, formula)`` as the app's library build makes them, or
    ``None`` when RDKit cannot read the structure; computed once a structure."""

    def __missing__(self, item: tuple[str, str]):
        from engine.chem import molecules as chem
        from engine.library.build import standardize

        smiles, key = item
        mol = chem.mol_from_smiles(smiles)
        if mol is None:
            self[item] = None
            return None
        mol, changed = standardize(mol)
        if changed:
            smiles, key = chem.canonical_smiles(mol), chem.inchikey14(mol)
        self[item] = None if key is None else (smiles, key, chem.mol_formula(mol))
        return self[item]


def write_table(path: Path, rows: Sequence[tuple[str, str, str]], standardised: Standardised | None = None) -> int:
    """Write the table (gzip level 9, no timestamp or file name: the same rows give the same bytes); its size.
    A row RDKit cannot read is left out (logged)."""
    standardised = Standardised() if standardised is None else standardised
    buffer = io.StringIO()
    buffer.write("\t".join(OUT_HEADER) + "\n")
    for smiles, key, source in rows:
        std = standardised[smiles, key]
        if std is None:
            log.warning("left out %s (%s): RDKit cannot read it", key, smiles)
            continue
        buffer.write("\t".join((*std, source)) + "\n")
    data = gzip.compress(buffer.getvalue().encode("utf-8"), compresslevel=9, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return len(data)


def build(molecules: str | Path, out: str | Path, max_mb: float = 15.0) -> tuple[Selection, set[str], int]:
    """Select, write ``structures.tsv.gz`` within ``max_mb`` and ``ATTRIBUTION.md``; returns the selection, the
    sources shipped and the table's size in bytes."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = list(read_molecules(molecules))
    allowed = {s.name for s in SOURCES.values() if s.allowed}
    optional = sorted((s for s in SOURCES.values() if s.allowed and s.optional), key=lambda s: s.name)
    standardised = Standardised()
    while True:
        selection = select(rows, allowed)
        size = write_table(out / TABLE, selection.rows, standardised)
        log.info("%d of %d structures from %s: %.2f MB", len(selection.rows), len(rows), sorted(allowed), size / 1e6)
        left = [s for s in optional if s.name in allowed]
        if size <= max_mb * 1e6 or not left:
            break
        largest = max(left, key=lambda s: selection.kept[s.name])
        log.info("over %.1f MB: leaving out %s", max_mb, largest.name)
        allowed.discard(largest.name)
    if size > max_mb * 1e6:
        log.warning("the table is %.1f MB, over the limit of %.1f MB, with only the sources that are not optional",
                    size / 1e6, max_mb)
    (out / ATTRIBUTION).write_text(attribution(selection, allowed, size, max_mb), encoding="utf-8")
    return selection, allowed, size


def attribution(sel: Selection, shipped: set[str], size: int, max_mb: float) -> str:
    """The text of ``ATTRIBUTION.md``."""
    share_alike = any(SOURCES[s].share_alike for s in shipped if s in SOURCES)
    lines = [
        "# Bundled structure library: sources and licences", "",
        (f"`{TABLE}` holds {len(sel.rows):,} structures (distinct by the first block of the InChIKey; "
        f"{size / 1e6:.1f} MB compressed), one a row: `smiles` (RDKit canonical, no stereochemistry), "
        "`inchikey14` (first InChIKey block, RDKit) and `source` (every shipped source that holds the "
        "structure, `;`-joined; its licence is in the table below). They were taken from the project's "
        f"molecule corpus ({sel.n_read:,} structures) by `python -m training.bundle.structure_library build`, which "
        "keeps a structure when at least one of its sources allows redistribution, and keeps only those sources. "
        "Processing (RDKit): largest fragment, elements C H N O S P F Cl Br I B Si Se As, isotopes cleared, "
        "stereochemistry removed, 3-70 heavy atoms, neutralised where possible, canonical SMILES."), "",
        "## Licence of the library", "",
        (f"Entries under CC BY-SA ({', '.join(s for s in SOURCES if s in shipped and SOURCES[s].share_alike)}) "
         "make the library as a whole available under **CC BY-SA 4.0** (CC BY-SA 3.0 material may be adapted "
         "under 4.0). Share it under the same licence and keep this file with it." if share_alike else
         "Every shipped source allows redistribution with attribution; keep this file with the library."), "",
        "## Shipped sources", "",
        "| source | what | licence | structures | credit |", "| --- | --- | --- | ---: | --- |",
    ]
    for s in SOURCES.values():
        if s.name in shipped:
            lines.append(f"| {s.name} | {s.what} | {s.licence} | {sel.kept[s.name]:,} | {s.credit} |")
    lines += ["", "A structure listed by several sources counts in each.", "",
              "## Left out, and why", "",
              "| source | licence | structures listing it | of those dropped | judgement |",
              "| --- | --- | ---: | ---: | --- |"]
    for s in SOURCES.values():
        if s.name not in shipped:
            why = s.why if not s.allowed else f"allowed, but left out to keep the table under {max_mb:g} MB"
            lines.append(f"| {s.name} | {s.licence} | {sel.listed[s.name]:,} | {sel.dropped[s.name]:,} | {why} |")
    for name in sorted(sel.unknown):
        lines.append(f"| {name} | unknown | {sel.listed[name]:,} | {sel.dropped[name]:,} | not judged: not shipped |")
    lines += ["", ("A structure of a left-out source is shipped when a shipped source also holds it (then only the "
              "shipped sources are named). Structures of the project's held-out test sets and of the validation "
              "fold of its MassBank spectra are not in the corpus, so they are not here either."), "",
              "## Judgements of the shipped sources", ""]
    lines += [f"- **{s.name}** ({s.licence}): {s.why}." for s in SOURCES.values() if s.name in shipped]
    if "spectraverse_example" in shipped:
        notice = ("    " + line if line else "" for line in MIT_NOTICE.splitlines())
        lines += ["", "## Notices", "", "spectraverse_example:", "", *notice]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bundle.structure_library", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write structures.tsv.gz and ATTRIBUTION.md")
    b.add_argument("--molecules", required=True, help="molecules.tsv.gz (smiles, inchikey14, source)")
    b.add_argument("--out", required=True, help="folder to write (resources/structure_library/)")
    b.add_argument("--max-mb", type=float, default=15.0, help="size limit of the compressed table (default 15)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        selection, shipped, size = build(args.molecules, args.out, args.max_mb)
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in sorted(shipped):
        log.info("%-22s %8d structures", name, selection.kept[name])
    log.info("%s: %d structures, %.2f MB", Path(args.out) / TABLE, len(selection.rows), size / 1e6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
