"""``msgpt score``: score structures you propose against the spectra of MGF/mzML files (CSV out).

Also reading the candidates of an earlier ``msgpt predict`` CSV (``--candidates``). What it shares with
``msgpt predict`` is in :mod:`engine.cli.common`.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from engine.cli.common import err, novelty_marker, open_model
from engine.errors import ConfigError, InputFileError, MsgptError, OutputError


def add_score_parser(sub) -> None:
    sc = sub.add_parser(
        "score",
        help="score structures you propose against spectra (fingerprint score and rank, decoder likelihood, "
        "formula check, explained peaks)",
        description="Score each given structure against every spectrum of the input files: its fingerprint "
        "score under the spectrum's posterior and its rank among the spectrum's candidates (with --candidates), "
        "its log-probability under the decoder for the spectrum's band queries, its formula against the "
        "spectrum's, the peaks its bond-cleavage fragments explain, and whether it is in the training corpus "
        "or your --known list. One CSV row per spectrum and structure.",
    )
    sc.add_argument("inputs", nargs="+", metavar="INPUT", help="MGF or mzML files (.gz allowed)")
    sc.add_argument("--smiles", nargs="+", action="extend", default=[], metavar="SMILES",
                    help="structures as SMILES or InChI (several allowed; quote them in the shell)")
    sc.add_argument("--smiles-file", metavar="FILE",
                    help="more structures: SMILES/InChI one per line (a 'smiles' column of a CSV/TSV), or an SDF")
    sc.add_argument("-o", "--output", help="output .csv (default: print the table)")
    sc.add_argument("--candidates", metavar="CSV",
                    help="candidates of an earlier `msgpt predict` run (its .csv): ranks each structure among them")
    sc.add_argument("--spectrum", nargs="+", action="extend", default=[], metavar="ID",
                    help="score against these spectrum ids only (default: every spectrum)")
    sc.add_argument("--known", metavar="FILE", help="your list of known structures (SMILES/InChIKeys or SDF) for "
                    "the novelty column")
    sc.add_argument("--model", help="model bundle folder (default: the bundled model)")
    sc.add_argument("--band", nargs=2, type=float, metavar=("KMIN", "KMAX"), default=(0.95, 1.50),
                    help="density-ratio band κ of the decoder's queries (default 0.95 1.50)")
    sc.add_argument("--groups", type=int, default=20, metavar="M", help="queries M across the band (default 20)")
    sc.add_argument("--max-breaks", type=int, default=2, help="bonds cut per fragment (default 2; 0-3)")
    sc.add_argument("--formula", help="force this molecular formula on every input spectrum")
    sc.add_argument("--adduct", help="force this adduct (e.g. [M+H]+) on every input spectrum")
    sc.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="compute device")
    sc.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto", help="decoder precision")
    sc.add_argument("--threads", type=int, metavar="T", help="CPU threads for torch")
    sc.add_argument("--no-adapter", action="store_true", help="switch the bundle's LoRA adapter off")
    sc.set_defaults(func=cmd_score)


def read_candidates_csv(path: str | os.PathLike) -> tuple[dict[str, list[tuple[int, str, str]]], dict[str, str]]:
    """``{spectrum_id: [(rank, smiles, InChIkey2D), ...]}`` and the ``#`` header of a ``msgpt predict`` CSV."""
    path = Path(path)
    header: dict[str, str] = {}
    rows: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            lines = []
            for line in fh:
                if line.startswith("#"):
                    key, _, value = line[1:].partition(":")
                    header[key.strip()] = value.strip()
                else:
                    lines.append(line)
            reader = csv.DictReader(lines)
            need = {"spectrum_id", "rank", "smiles", "InChIkey2D"}
            if not need <= set(reader.fieldnames or ()):
                raise InputFileError(path, f"not a `msgpt predict` CSV: it lacks the columns "
                                     f"{', '.join(sorted(need - set(reader.fieldnames or ())))}.")
            for row in reader:
                rows[row["spectrum_id"]].append((int(row["rank"]), row["smiles"], row["InChIkey2D"]))
    except (OSError, UnicodeDecodeError, ValueError, csv.Error) as e:
        raise InputFileError(path, f"cannot be read as a candidates CSV ({type(e).__name__}: {e}).") from e
    return dict(rows), header


def ranked_candidates(session, rows: list[tuple[int, str, str]]):
    """The candidates of a CSV as :class:`~engine.insight.structure_score.RankedStructure`, scored under this posterior."""
    from engine.chem import molecules as chem
    from engine.insight.structure_score import RankedStructure
    from engine.model.scoring import FingerprintScorer

    bits = session.bundle.calibration.for_polarity(session.spectrum.polarity).bits
    scorer = FingerprintScorer(session.posterior, bits)
    out = []
    for rank, smiles, key in rows:
        mol = chem.mol_from_smiles(smiles)
        if mol is not None:
            bits = chem.morgan_bits(chem.remove_stereo(mol), session.bundle.decoder.config.fp_bits)
            out.append(RankedStructure(rank, key or chem.inchikey14(mol) or "", scorer.score(bits)))
    return out


def read_structures(args) -> list[str]:
    """The structures of ``--smiles`` and ``--smiles-file``, in order."""
    structures = list(args.smiles)
    if args.smiles_file:
        path = Path(args.smiles_file)
        if not path.is_file():
            raise InputFileError(path, "no such file; give SMILES/InChI one per line, or an SDF.")
        if path.name.lower().removesuffix(".gz").endswith((".sdf", ".sd", ".mol")):
            structures += _sdf_molblocks(path)
        else:
            from engine.insight.novelty import table_rows

            rows = table_rows(path)
            first = next(rows, None)
            if first is not None:
                names = [c.strip().lower() for c in first[1]]
                col = names.index("smiles") if "smiles" in names else None
                if col is None:
                    structures.append(first[1][0])
                    col = 0
                structures += [row[col] for _, row in rows if len(row) > col]
    if not structures:
        raise ConfigError("Give the structures to score: --smiles \"...\" (several allowed) or --smiles-file FILE.")
    return structures


def _sdf_molblocks(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    return [block.split("M  END")[0] + "M  END\n" for block in text.split("$$$$") if "M  END" in block]


def score_inputs(paths, formula: str | None, adduct: str | None, file_errors: list[str]):
    """The spectra to score, as ``msgpt predict`` reads them (MGF record by record, an mzML run as its
    precursor features, a tool's feature export feature by feature), with ``--formula``/``--adduct`` applied; a Spectrum or a SkippedRecord each."""
    from engine.elucidation.pipeline import apply_overrides
    from engine.spectra.handoff import iter_input_features
    from engine.spectra.spectrum import SkippedRecord

    for path in paths:
        try:
            for item in iter_input_features(path):
                if isinstance(item, SkippedRecord):
                    yield item
                    continue
                spectrum = item.spectrum
                if formula or adduct:
                    try:
                        spectrum = apply_overrides(spectrum, formula=formula, adduct=adduct)
                    except MsgptError as e:
                        yield SkippedRecord(spectrum.source, spectrum.index, spectrum.id, str(e))
                        continue
                yield spectrum
        except InputFileError as e:
            file_errors.append(str(e))
            err(f"error: {e}")


def cmd_score(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.files.export import provenance
    from engine.insight.structure_score import SCORE_COLUMNS, score_structures
    from engine.spectra.fragments import FragmentSettings
    from engine.spectra.spectrum import SkippedRecord

    structures = read_structures(args)
    fragments = FragmentSettings(max_breaks=args.max_breaks)
    params = QueryParams(kappa_min=args.band[0], kappa_max=args.band[1], groups=args.groups,
                         use_adapter=not args.no_adapter)
    if args.output and Path(args.output).suffix.lower() != ".csv":
        raise ConfigError(f"Cannot write {args.output!r}: msgpt score writes a .csv file.")
    bundle = open_model(args, params.use_adapter)
    if bundle.has_adapter:
        bundle.set_adapter(params.use_adapter)
    err(f"Model: {bundle.describe()}")
    marker = novelty_marker(bundle, args.known)
    candidates, header = read_candidates_csv(args.candidates) if args.candidates else ({}, {})
    if header.get("model_checksum") and header["model_checksum"] != bundle.checksum:
        err(f"note: {args.candidates} was made by another model ({header.get('model', '?')}); its candidates are "
             "re-scored under this model's posterior.")
    wanted = set(args.spectrum)
    info = provenance(bundle, params, {"inputs": " ".join(args.inputs), "novelty": marker.describe(),
                                       "fragments": f"up to {fragments.max_breaks} bonds cut, ±{fragments.h_shift} H"})
    rows, skipped, file_errors = [], [], []
    bar = tqdm(desc="spectra", unit="spectrum", file=sys.stderr, disable=not sys.stderr.isatty())
    for item in score_inputs(args.inputs, args.formula, args.adduct, file_errors):
        if wanted and (item.spectrum_id if isinstance(item, SkippedRecord) else item.id) not in wanted:
            continue
        if isinstance(item, SkippedRecord):
            skipped.append(f"{item.spectrum_id}: {item.reason}")
            continue
        try:
            session = SpectrumSession(bundle, item)
            ranked = ranked_candidates(session, candidates[item.id]) if item.id in candidates else None
            scores = score_structures(session, structures, params, candidates=ranked, marker=marker,
                                      fragments=fragments)
        except MsgptError as e:
            skipped.append(f"{item.id}: {e}")
            continue
        rows += [s.row() for s in scores]
        bar.update(1)
    bar.close()
    if wanted - {r["spectrum_id"] for r in rows} - {s.split(":")[0] for s in skipped}:
        err(f"Not found in the inputs: {', '.join(sorted(wanted - {r['spectrum_id'] for r in rows}))}")
    if rows:
        write_csv_table(args.output, info, SCORE_COLUMNS, rows)
    err(f"Scored {len(structures)} structure(s) against {len({r['spectrum_id'] for r in rows})} spectra"
         f"{f' -> {args.output}' if args.output and rows else ''}.")
    if skipped:
        err(f"Skipped {len(skipped)} spectra:")
        for line in skipped[:20]:
            err(f"  {line}")
    return 0 if rows else 1


def write_csv_table(output: str | None, info: dict, columns, rows: list[dict]) -> None:
    """CSV with ``#`` provenance lines, to ``output`` atomically (or to stdout)."""
    if not output:
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    path = Path(output)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ConfigError(f"Cannot write {path}: folder {directory} does not exist.")
    kept = "An earlier file of that name, if any, is unchanged."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=directory)
        try:
            with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
                for k, v in info.items():
                    fh.write(f"# {k}: {v}\n")
                writer = csv.DictWriter(fh, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)
                fh.flush()
                os.fsync(fh.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # an ordinary new file's permissions, not mkstemp's 0600
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise OutputError.from_os_error(path, e, kept) from e
