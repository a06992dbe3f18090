"""Build the set of structures a model was trained on (``known_structures.npz``) for the novelty flag.

::

    python -m training.bundle.known_structures --out resources/default_model/known_structures.npz \\
        --corpus runs/corpus_full --bundle resources/default_model

Sources (their union): prepared corpora (``--corpus``: the ``inchikey14.txt`` of every shard listed
in ``manifest.json``, i.e. exactly the records pretraining reads), SMILES/InChIKey tables
(``--molecules``: an ``inchikey14``/``inchikey`` column when there is one, else SMILES) and MGF
libraries (``--mgf`` with ``--mgf-fold``/``--mgf-license``: each structure through the corpus's own
conversion, so what ``training.data.corpus prepare --mgf`` drops is left out here too). ``--within``
keeps only the structures also found in these sources (same kinds; a folder is a corpus, ``.mgf`` an
MGF): e.g. the records of a full corpus that a model's seeded subset held. Writes the sorted 64-bit
hashes of the InChIKey first blocks (:class:`engine.model.known.KnownStructures`); ``--bundle`` records
the file's checksum in that bundle's ``config.json``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from engine.errors import ConfigError, MsgptError
from engine.insight.novelty import iter_structure_list
from engine.model.known import KnownStructures

from training.data.corpus_format import corpus_lines

log = logging.getLogger(__name__)
DEFAULT_LICENSES = ("CC0", "CC BY", "CC BY-SA", "dl-de/by-2-0")


def corpus_keys(corpus_dir: str | Path) -> Iterator[str]:
    """InChIKey first blocks of every record of a finished prepared corpus, in manifest order."""
    return corpus_lines(corpus_dir, "inchikey14.txt")


def mgf_keys(path: str | Path, folds: Sequence[str], licenses: Sequence[str]) -> Iterator[str]:
    """Keys of the MGF records whose FOLD and LICENSE are among those given, as ``training.data.corpus prepare
    --mgf`` makes them: each distinct SMILES through the corpus's own conversion, dropped where it drops it."""
    from training.data.corpus_convert import ConvertSettings, Record, convert_smiles
    from training.data.corpus_inputs import select_mgf_structures

    settings = ConvertSettings()
    for smiles in select_mgf_structures([path], folds, licenses).smiles:
        record = convert_smiles(smiles, settings)
        if isinstance(record, Record):
            yield record.inchikey14


def table_keys(path: str | Path) -> Iterator[str]:
    for _, _, key in iter_structure_list(path):
        if key:
            yield key


def source_keys(path: str | Path, folds: Sequence[str], licenses: Sequence[str]) -> Iterator[str]:
    """Keys of one source: a corpus folder, an MGF file or a table (by what the path is)."""
    p = Path(path)
    if p.is_dir():
        return corpus_keys(p)
    if p.name.lower().removesuffix(".gz").endswith(".mgf"):
        return mgf_keys(p, folds, licenses)
    return table_keys(p)


def collect(sources: Sequence[str], folds: Sequence[str], licenses: Sequence[str]) -> set[str]:
    keys: set[str] = set()
    for path in sources:
        these = set(source_keys(path, folds, licenses))
        log.info("%s: %d structures (%d not in the sources before)", path, len(these), len(these - keys))
        keys |= these
    return keys


def _csv_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bundle.known_structures", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", nargs="*", default=[], metavar="DIR", help="prepared corpora (training.data.corpus)")
    p.add_argument("--molecules", nargs="*", default=[], metavar="FILE", help="SMILES / InChIKey tables (.gz allowed)")
    p.add_argument("--mgf", nargs="*", default=[], metavar="FILE", help="MGF libraries (see --mgf-fold, --mgf-license)")
    p.add_argument("--within", nargs="*", default=[], metavar="SOURCE",
                   help="keep only structures also in these sources (corpus folders, MGF files or tables)")
    p.add_argument("--mgf-fold", type=_csv_list, default=("train",), help="FOLD values of MGF records (default train)")
    p.add_argument("--mgf-license", type=_csv_list, default=DEFAULT_LICENSES,
                   help="LICENSE values of MGF records (default: CC0,CC BY,CC BY-SA,dl-de/by-2-0)")
    p.add_argument("--source", help="what the set is, as shown to users (default: the inputs)")
    p.add_argument("--out", required=True, help="known_structures.npz to write")
    p.add_argument("--bundle", help="also record the file's checksum in this bundle's config.json")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sources = [*args.corpus, *args.molecules, *args.mgf]
    if not sources:
        _parser().error("give at least one of --corpus, --molecules, --mgf")
    try:
        keys = collect(sources, args.mgf_fold, args.mgf_license)
        described = " + ".join(Path(s).name for s in sources)
        if args.within:
            within = collect(args.within, args.mgf_fold, args.mgf_license)
            log.info("within %s: %d of %d structures kept", ", ".join(args.within), len(keys & within), len(keys))
            keys &= within
            described += " within " + " + ".join(Path(s).name for s in args.within)
        if not keys:
            raise ConfigError("No structure found in the sources; check the paths and the MGF fold/license filters.")
        source = args.source or f"{len(keys):,} structures of {described}"
        known = KnownStructures.from_keys(sorted(keys), source)
        out = known.save(args.out)
        if args.bundle:
            from engine.model.bundle import add_bundle_file

            add_bundle_file(args.bundle, out)
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info("%s: %d structures, %.1f MB (%s)", out, len(known), out.stat().st_size / 1e6, source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
