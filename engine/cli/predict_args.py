"""``msgpt predict``'s arguments: its flags by group (their order is the order of ``--help``), and the configs
they make (:mod:`engine.cli.predict` runs them, :mod:`engine.cli.predict_write` writes what they give)."""

from __future__ import annotations

import argparse

from engine.model.suspect_confidence import PRESENT_DEFAULT


def add_predict_arguments(pr: argparse.ArgumentParser) -> None:
    """Every flag of ``msgpt predict``, in the order of its ``--help``."""
    pr.add_argument("inputs", nargs="+", metavar="INPUT", help="MGF or mzML files (.gz allowed)")
    pr.add_argument("-o", "--output", required=True, help="output .csv or .sdf file")
    pr.add_argument("--model", help="model bundle folder (default: the bundled model)")
    _add_sampling_arguments(pr)
    _add_device_arguments(pr)
    _add_formula_arguments(pr)
    _add_feature_arguments(pr)
    _add_handoff_arguments(pr)
    _add_ranking_arguments(pr)
    _add_output_arguments(pr)
    _add_library_arguments(pr)
    _add_cluster_arguments(pr)


def _add_sampling_arguments(pr: argparse.ArgumentParser) -> None:
    """Query groups, pool size, seed, effort and sampling."""
    from engine.elucidation.pipeline import EDIT_ROUNDS, STANDARD_EDIT_MAX_ATOMS

    pr.add_argument("--band", nargs=2, type=float, metavar=("KMIN", "KMAX"), default=(0.95, 1.50),
                    help="density-ratio band κ of the queries (default 0.95 1.50; 1.0 1.0 with --groups 1 "
                    "is the point query)")
    pr.add_argument("--groups", type=int, default=20, metavar="M", help="query groups M (default 20)")
    size = pr.add_mutually_exclusive_group()
    size.add_argument("--samples-per-group", type=int, metavar="N", help="samples per group N (default 5)")
    size.add_argument("--pool-size", type=int, metavar="B", help="candidate pool size B = M × N (default 100)")
    pr.add_argument("--top", type=int, metavar="K",
                    help="write only the K best candidates per spectrum (per formula when several are tried)")
    pr.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same result")
    pr.add_argument("--effort", choices=("standard", "deep"), default="standard",
                    help="standard: the pool of B samples; deep: then refine its best candidates, borrow the "
                    "fragments of the structure libraries' closest analogs (the bundled library's when libraries are "
                    "off; never a structure of the spectrum's formula) and try the isomers one move away from the "
                    "best (about 3.4x the time of standard effort, docs/deep_search.md)")
    pr.add_argument("--edit-rounds", type=int, default=EDIT_ROUNDS, metavar="K",
                    help=f"rounds of isomer edits after sampling (default {EDIT_ROUNDS}; 0: none), for formulas of at "
                    f"most {STANDARD_EDIT_MAX_ATOMS} heavy atoms: the best drawn candidates' isomers one move away (a "
                    "substituent moved, two atoms swapped) that the fingerprint score rates best join the pool "
                    "(docs/evidence/standard_edits.md)")
    pr.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    pr.add_argument("--top-k", type=int, default=50, help="top-k sampling (default 50)")
    pr.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (default 0.95)")


def _add_device_arguments(pr: argparse.ArgumentParser) -> None:
    """Where and how fast the model computes."""
    pr.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="compute device")
    pr.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="decoder precision: auto = bf16 where the hardware computes it natively (about 2x "
                    "faster on CPU), else fp32")
    pr.add_argument("--threads", type=int, metavar="T",
                    help="CPU threads for torch (default: torch's choice, usually one per core)")


def _add_formula_arguments(pr: argparse.ArgumentParser) -> None:
    """Formulas and ion types of spectra that give none, and the run's m/z recalibration."""
    from engine.elucidation.formula_runs import MIN_SAMPLED_PROBABILITY

    pr.add_argument("--formula", help="force this molecular formula on every input spectrum")
    pr.add_argument("--adduct", help="force this adduct (e.g. [M+H]+) on every input spectrum")
    pr.add_argument("--formulas", type=int, default=3, metavar="K",
                    help="spectra without a formula: predict for the K best formula candidates the model can run "
                    "(default 3; 0 skips them)")
    pr.add_argument("--min-formula-p", type=float, default=MIN_SAMPLED_PROBABILITY, metavar="P",
                    help="of those K, sample only the best and those of probability >= P (default "
                    f"{MIN_SAMPLED_PROBABILITY:g}); the others rank their formula's library structures alone, without "
                    "de novo samples (engine/elucidation/formula_runs.py); 0 samples all K")
    pr.add_argument("--full-formula-runs", action="store_true",
                    help="every sampled formula candidate draws the full pool; by default one below the best draws "
                    "N × P/P(best) samples per query group, at least one (engine/elucidation/formula_runs.py)")
    pr.add_argument("--formula-ppm", type=float, default=10.0, metavar="PPM",
                    help="precursor mass tolerance of formula candidates (default 10 ppm, at least 1 mDa)")
    pr.add_argument("--ion-types", nargs="+", metavar="ION",
                    help="ion types tried for a spectrum without an adduct (default [M+H]+ [M+Na]+ [M+NH4]+ [M+K]+, "
                    "in negative mode [M-H]- [M+HCOO]- [M+CH3COO]- [M+Cl]- [M-H2O-H]-; [M-H2O+H]+ and [M]+ when "
                    "asked); candidates of types the model cannot run are ranked but not predicted")
    pr.add_argument("--elements", default="CHNOPSFClBrISi", metavar="ELEMENTS",
                    help="elements formula candidates may hold (default CHNOPSFClBrISi; C and H always)")
    pr.add_argument("--recalibrate", default="auto", metavar="auto|off|PPM[,SLOPE]",
                    help="m/z recalibration of each input before formulas are ranked: auto (default) measures the run's "
                    "error from the formulas it explains confidently, off keeps the m/z as written, PPM[,SLOPE] sets it "
                    "(ppm at m/z 500, ppm per 1000 m/z)")


def _add_feature_arguments(pr: argparse.ArgumentParser) -> None:
    """MzML: how MS2 scans of one precursor make a feature."""
    pr.add_argument("--feature-ppm", type=float, default=10.0, metavar="PPM",
                    help="mzML: precursor m/z agreement of the MS2 scans of one feature (default 10 ppm, at least 5 mDa)")
    pr.add_argument("--feature-rt-gap", type=float, default=30.0, metavar="S",
                    help="mzML: longest gap between consecutive MS2 scans of one feature (default 30 s)")
    pr.add_argument("--no-merge", action="store_true",
                    help="mzML: predict every MS2 scan on its own instead of one consensus per precursor feature")
    pr.add_argument("--no-adduct-groups", action="store_true",
                    help="mzML: solve every feature alone instead of joining the ions of one compound ([M+H]+ and "
                         "[M+Na]+, ...) into a compound group that decides one formula and answer for all of them")


def _add_handoff_arguments(pr: argparse.ArgumentParser) -> None:
    """Hand-offs with MZmine, MS-DIAL, GNPS and SIRIUS: abundances in, results keyed by feature out (docs/cli.md)."""
    pr.add_argument("--quant", metavar="TABLE.csv",
                    help="a quantification table (MZmine/GNPS _quant.csv, an MS-DIAL alignment table, or a CSV/TSV "
                    "with a feature ID column and one numeric column per sample): each feature gets its abundance, "
                    "joined by feature ID, else by m/z and retention time (a <name>_quant.csv beside a feature MGF "
                    "is used without this flag)")
    pr.add_argument("--feature-table", metavar="OUT.tsv",
                    help="also write one row per feature (feature ID as the source tool wrote it, m/z, RT, ion type, "
                    "rank-1 structure, name, level, confidence, formula, abundance) to join back to the source "
                    "tool's table (.tsv or .csv)")
    pr.add_argument("--feature-table-style", choices=("msgpt", "gnps", "mzmine"), default="msgpt",
                    help="column names of --feature-table: msgpt (default); gnps (those of a GNPS library search "
                    "result: #Scan#, CompoundName, Smiles, ...); mzmine (annotated rows only, named as MZmine 3's "
                    "local compound database (CSV) search reads them: mz, rt, name, formula, smiles, ...)")


def _add_ranking_arguments(pr: argparse.ArgumentParser) -> None:
    """The adapter, decoding and ranking."""
    pr.add_argument("--no-adapter", action="store_true", help="switch the bundle's LoRA adapter off")
    pr.add_argument("--decoding", choices=("formula", "free"), default="formula",
                    help="formula (default): draw only strings with exactly the formula's heavy atoms; "
                         "free: the paper's unconstrained sampling, filtered afterwards")
    pr.add_argument("--ranking", choices=("fingerprint", "combined", "frequency"), default="fingerprint",
                    help="fingerprint (default): the candidate's fingerprint score under the posterior; combined: "
                         "that + log generation count; frequency: the paper's generation count")
    pr.add_argument("--no-fragment-score", action="store_true",
                    help="leave the forward model's fragment score out of the ranking (by default it re-ranks "
                    "where its measurement chose: docs/known_compounds.md)")
    pr.add_argument("--no-analog-score", action="store_true",
                    help="rank without the analog score, each candidate's likeness to the compounds of the spectrum's "
                    "analog hits in the spectral libraries (on by default: docs/known_compounds.md)")


def _add_output_arguments(pr: argparse.ArgumentParser) -> None:
    """Resuming, posteriors and the user's known list."""
    pr.add_argument("--resume", action="store_true",
                    help="go on with an interrupted run of the same command: spectra already in OUTPUT.partial "
                    "(listed in OUTPUT.journal) are passed over")
    pr.add_argument("--posteriors", metavar="OUT.npz",
                    help="also write every spectrum's fingerprint posterior, band thresholds and queries to this .npz")
    pr.add_argument("--known", metavar="FILE",
                    help="your list of known structures (SMILES/InChIKeys, one per row, or an SDF): candidates in it "
                    "are marked 'user list' in the novelty column")


def _add_cluster_arguments(pr: argparse.ArgumentParser) -> None:
    """Dask clusters and the progress bar."""
    pr.add_argument("--cluster", metavar="ADDRESS",
                    help="run the features on a Dask cluster: local:N (N worker processes on this machine) or a "
                    "running scheduler's tcp://HOST:PORT; the output is the same as in one process "
                    "(docs/cluster.md; needs pip install -e \".[cluster]\")")
    pr.add_argument("--ship-model", action="store_true",
                    help="with --cluster: send the model bundle to the workers instead of reading --model's path there")
    pr.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _add_library_arguments(pr: argparse.ArgumentParser) -> None:
    """The flags of the libraries of known compounds (docs/known_compounds.md)."""
    pr.add_argument("--structure-library", action="append", default=[], metavar="FILE",
                    help="a suspect list or structure library (CSV/TSV with a SMILES or InChI column, e.g. a "
                    "PubChemLite or NORMAN export; SDF; one SMILES per line): its structures of each spectrum's "
                    "formula, and of its precursor mass when the formula is not given, rank before the predictions "
                    "(origin column); the bundled library's join them by score; repeatable")
    pr.add_argument("--spectral-library", action="append", default=[], metavar="FILE",
                    help="a reference spectral library (MSP: NIST, MoNA, MS-DIAL; MGF: GNPS, MassBank): each "
                    "spectrum is searched in it beside the bundled MassBank subset; an identity match passing the "
                    "calibrated threshold is rank 1 (docs/spectral_library.md); repeatable")
    pr.add_argument("--no-bundled-libraries", action="store_true",
                    help="leave out the bundled structure and spectral libraries (keep only the ones given)")
    pr.add_argument("--no-libraries", action="store_true",
                    help="no structure or spectral library at all: de novo candidates only")
    pr.add_argument("--library-prior", type=float, default=None, metavar="LOGODDS",
                    help="log-odds bonus of a library structure in the fingerprint rankings (default: the "
                    "measured one, 0: docs/known_compounds.md)")
    pr.add_argument("--undrawn-prior", type=float, default=None, metavar="NATS",
                    help="added to that for a library structure the decoder did not draw (not a suspect, not "
                    "identified): how much better it must score than the predictions to rank above them "
                    "(default: the measured one, docs/known_compounds.md; 0: scored like a prediction)")
    pr.add_argument("--suspects-present", type=float, default=PRESENT_DEFAULT, metavar="SHARE",
                    help="of the features your suspect lists match by formula, the share that really are one of "
                    f"their compounds (default {PRESENT_DEFAULT:g}; 0.9 for standards known to be in the sample, 0.1 "
                    "for a broad screening list): the confidence of a suspect rank 1 follows it, the ranking does not "
                    "(docs/known_compounds.md)")


def _feature_config(args: argparse.Namespace):
    from engine.spectra.features import FeatureConfig

    return FeatureConfig(mz_tol_ppm=args.feature_ppm, rt_gap_s=args.feature_rt_gap,
                         grouping="never" if args.no_merge else "auto",
                         adduct_groups=not getattr(args, "no_adduct_groups", False))


def _formula_config(args: argparse.Namespace):
    import re

    from engine.formulas.candidates import FormulaConfig
    from engine.formulas.decompose import DecompositionConfig

    elements = tuple(dict.fromkeys(["C", "H", *re.findall(r"[A-Z][a-z]?", args.elements)]))
    return FormulaConfig(ppm=args.formula_ppm, ion_types=tuple(args.ion_types) if args.ion_types else None,
                         decomposition=DecompositionConfig(elements=elements))
