"""Build the bit legend of a model: the most frequent atom environments behind each Morgan bit.

::

    python -m training.bundle.bit_legend --molecules ../shared/data/molecules.tsv.gz --rows 50000 \\
        --out resources/default_model/bit_legend.json.gz --bundle resources/default_model

Reads a seeded random sample of ``--rows`` molecules from SMILES tables (``--molecules``: a column
named ``smiles``, else the first; .gz allowed) and/or prepared corpora (``--corpus``: the
``smiles.txt`` of every shard in ``manifest.json``), computes the model's Morgan fingerprint with its
bit information (:func:`engine.model.bitlegend.bit_environments`: RDKit, radius 2, 4096 bits, exactly
:func:`engine.chem.molecules.morgan_bits`, stereochemistry removed as the corpus does), counts per bit the
molecules in which each distinct environment sets it, and writes the ``--top`` most frequent per bit
(:class:`engine.model.bitlegend.BitLegend`, gzip-compressed JSON). ``--bundle`` also records the file's checksum in that bundle's
``config.json`` (:func:`engine.model.bundle.add_bundle_file`), so loading checks it.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.chem import molecules as chem
from engine.errors import ConfigError, MsgptError
from engine.model.bitlegend import BitLegend, bit_environment_ids, environment_fragment, legend_from_counts

from training.data.corpus_format import corpus_lines

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LegendProgress:
    done: int  # molecules read so far
    total: int  # molecules in the sample
    unparsed: int  # SMILES RDKit could not read (skipped)


def corpus_smiles(corpus_dir: str | Path) -> Iterator[str]:
    """SMILES of every record of a prepared corpus (training.data.corpus), shard by shard in manifest order."""
    return corpus_lines(corpus_dir, "smiles.txt")


def iter_sources(molecules: Sequence[str] = (), corpora: Sequence[str] = ()) -> Iterator[str]:
    from training.data.corpus import iter_smiles_file

    for path in molecules:
        yield from iter_smiles_file(path)
    for path in corpora:
        yield from corpus_smiles(path)


def reservoir_sample(items: Iterable[str], k: int, seed: int = 0) -> list[str]:
    """A seeded uniform sample of ``k`` items (all when fewer), in their input order."""
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"`rows` must be a positive integer, got {k!r}.")
    rng = random.Random(seed)
    kept: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        if i < k:
            kept.append((i, item))
        else:
            j = rng.randrange(i + 1)
            if j < k:
                kept[j] = (i, item)
    return [item for _, item in sorted(kept)]


def build_legend(smiles: Sequence[str], *, top: int = 3, source: str = "", n_bits: int = chem.N_BITS,
                 radius: int = chem.RADIUS, cancel=None) -> Generator[LegendProgress, None, BitLegend]:
    """Count the environments of every molecule; yields progress, returns the legend."""
    from collections import Counter, defaultdict

    from engine.errors import Cancelled

    n_with_bit: Counter[int] = Counter()
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    examples, fragments = {}, {}
    n = unparsed = 0
    for i, s in enumerate(smiles, 1):
        mol = chem.mol_from_smiles(s)
        if mol is None:
            unparsed += 1
        else:
            chem.remove_stereo(mol)
            n += 1
            for bit, hits in bit_environment_ids(mol, n_bits, radius).items():
                n_with_bit[bit] += 1
                envs = {}
                for env_id, center, r in hits:
                    if env_id not in fragments:  # the fragment of an identifier is written once
                        fragments[env_id] = environment_fragment(mol, center, r)
                    envs.setdefault(fragments[env_id].smiles, fragments[env_id])
                for smiles, env in envs.items():  # a molecule counts once per fragment
                    counts[bit][smiles] += 1
                    examples.setdefault(smiles, env)
        if i % 500 == 0 or i == len(smiles):
            if cancel is not None and cancel():
                raise Cancelled("Cancelled by the user.")
            yield LegendProgress(i, len(smiles), unparsed)
    if n == 0:
        raise ConfigError("No molecule of the sample could be read; check the --molecules / --corpus inputs.")
    return legend_from_counts(n_with_bit, counts, examples, n, top=top, source=source, n_bits=n_bits, radius=radius)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.bundle.bit_legend", description=__doc__.split("\n\n")[0])
    p.add_argument("--molecules", nargs="*", default=[], metavar="FILE", help="SMILES tables (.smi/.tsv/.csv, .gz)")
    p.add_argument("--corpus", nargs="*", default=[], metavar="DIR", help="prepared corpora (training.data.corpus)")
    p.add_argument("--rows", type=int, default=50_000, help="molecules sampled (seeded; default 50000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=3, help="environments kept per bit (default 3)")
    p.add_argument("--out", required=True, help="bit_legend.json.gz to write")
    p.add_argument("--bundle", help="also record the file's checksum in this bundle's config.json "
                   "(--out must lie in the bundle folder)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if not args.molecules and not args.corpus:
        _parser().error("give --molecules and/or --corpus")
    try:
        t0 = time.perf_counter()
        sample = reservoir_sample(iter_sources(args.molecules, args.corpus), args.rows, args.seed)
        inputs = ", ".join(Path(p).name for p in [*args.molecules, *args.corpus])
        source = f"{len(sample):,} molecules sampled (seed {args.seed}) from {inputs}"
        bar = tqdm(total=len(sample), unit="mol", disable=args.quiet, file=sys.stderr)
        gen = build_legend(sample, top=args.top, source=source)
        try:
            while True:
                ev = next(gen)
                bar.update(ev.done - bar.n)
        except StopIteration as stop:
            legend = stop.value
        bar.close()
        out = Path(args.out)
        legend.save(out)
        if args.bundle:
            from engine.model.bundle import add_bundle_file

            add_bundle_file(args.bundle, out)
    except MsgptError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    size = out.stat().st_size
    log.info("%s: %d bits described from %s; %.1f kB; %.0f s", out, len(legend), source, size / 1e3,
             time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
