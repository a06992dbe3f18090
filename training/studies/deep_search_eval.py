"""Pool recall, Top-1/Top-10 and time of standard effort, larger pools and deep search (issue #39)::

    python -m training.studies.deep_search_eval --mgf ../shared/data/massbank_dev.mgf.gz --out runs/deep_search/val \\
        --set val --max-spectra 100 --methods standard deep B=500 B=1500

**Spectra.** One seeded spectrum per structure, ``[M+H]+`` only (:func:`training.evaluation.evaluate.select_spectra` with
``--one-per-structure``, seed 0, as ``msgpt-eval``): ``--set val`` is FOLD=val (report), ``--set train-unseen``
the FOLD=train spectra whose structure the bundle's encoder never trained on (tuning,
:func:`training.encoder.noise.unseen_structures`). No library joins the pools (deep search only borrows analogs' fragments).

**Methods**, each from a fresh :class:`~engine.elucidation.pipeline.SpectrumSession` with the posterior computed
once per spectrum (its time is added to every method): ``standard`` (B=100, the app's default), ``edits=K``
(standard effort with K rounds of isomer edits; ``edits=0`` is standard effort before issue #59), ``B=500`` and
``B=1500`` (more blind samples, M=20), ``deep`` (:class:`engine.elucidation.deep.DeepSearch`, default
:class:`~engine.elucidation.deep.DeepConfig`; analogs from the bundled structure library with the spectrum's own
structure left out, ``--analogs none`` for none). All methods of one spectrum run one after the other in the same
process, so their time ratio is measured under the same load.

``deep:NAME`` is a deep search with other settings (``--variant NAME='{"max_new_samples": 300}'``, overrides of
the defaults), run in the same process as the others.

**Output.** ``<out>/results.jsonl``, one line per (spectrum, method), written as it goes (the same command again
continues; a deep search's line adds the seconds of each phase and the phases whose samples drew the truth);
``<out>/summary.md`` the tables: spectra with the truth in the pool, Top-1, Top-10, mean seconds per spectrum and
the ratio to ``--reference`` (default standard) on the spectra every method finished; each deep method's time per
phase and the truths each phase found first; with ``--baseline METHOD`` (``--baseline-run DIR``: a method of another
run of the same spectra), each other method against it, paired: exact McNemar and 95% bootstrap intervals of the differences and
of the time ratio.

Its table: docs/deep_search.md, "Measured", with the command above.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

METHODS = ("standard", "deep", "B=500", "B=1500")


def _spectrum_dict(s) -> dict:
    from dataclasses import fields

    d = {f.name: getattr(s, f.name) for f in fields(s)}
    d["mz"], d["intensity"] = s.mz.tolist(), s.intensity.tolist()
    return d


def select(model, mgf: str, which: str, n: int, cache: Path) -> list:
    """The first ``n`` spectra of the seeded one-per-structure ``[M+H]+`` selection of ``which`` (cached)."""
    from engine.spectra.spectrum import Spectrum
    from training.evaluation.evaluate import EvalConfig, Reference, select_spectra

    key = {"mgf": str(Path(mgf).resolve()), "set": which, "n": n, "model": model.checksum}
    n_bits = model.decoder.config.fp_bits
    if cache.exists():
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved["key"] == key:
            return [(s, Reference.of(s, n_bits)) for s in (Spectrum(**d) for d in saved["spectra"])]
    common = {"model": str(model.path), "mgf": str(mgf), "out": "", "one_per_structure": True, "seed": 0,
              "variants": (), "kappa_sweep": False, "adducts": ("[M+H]+",)}
    if which == "val":
        sel = select_spectra(model, EvalConfig(folds=("val",), **common))
        chosen, info = sel.chosen, sel.info
    else:
        from training.encoder.noise import encoder_licenses, unseen_structures
        from training.studies.retrieval import mgf_labels

        sel = select_spectra(model, EvalConfig(folds=("train",), **common))
        fold, lic, keys = mgf_labels(mgf)
        unseen = set(keys[unseen_structures(fold, lic, keys, encoder_licenses(model.config, str(model.path)))].tolist())
        chosen = [(s, r) for s, r in sel.chosen if r.inchikey14 in unseen]
        info = {**sel.info, "unseen_selected": len(chosen)}
    print(f"{which}: {len(chosen)} spectra ({info['eligible']} eligible)", file=sys.stderr)
    chosen = chosen[:n]
    cache.write_text(json.dumps({"key": key, "info": info, "spectra": [_spectrum_dict(s) for s, _ in chosen]}))
    return chosen


def selection_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of a study over :func:`select`'s spectra (``training.studies.edit_prior``, ``analog_posterior``)."""
    p.add_argument("--mgf", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--set", choices=("val", "train-unseen"), default="val")
    p.add_argument("--max-spectra", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)


def open_selection(args) -> tuple:
    """(bundled model, :func:`select`'s spectra, the output folder) of :func:`selection_arguments`, torch threads set."""
    import torch

    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_bundle(default_model_dir())
    return model, select(model, args.mgf, args.set, args.max_spectra, out / "selection.json"), out


def deep_configs(base: dict, variants: list[str]) -> dict:
    """The :class:`~engine.elucidation.deep.DeepConfig` of each deep method: ``deep`` is ``base`` (overrides of the
    defaults), ``deep:NAME`` each ``NAME=<JSON overrides of the defaults>`` of ``variants``."""
    from engine.elucidation.deep import DeepConfig

    out = {"deep": DeepConfig(**base)}
    for v in variants:
        name, sep, spec = v.partition("=")
        if not sep or not name:
            raise SystemExit(f"--variant {v!r}: write NAME='<JSON overrides of DeepConfig>', e.g. "
                             f"lean='{{\"max_new_samples\": 300}}'")
        out[f"deep:{name}"] = DeepConfig(**json.loads(spec))
    return out


def heavy_atoms(formula: str) -> int:
    """Atoms other than hydrogen in ``formula``."""
    from engine.chem.formula import parse_formula

    return sum(n for element, n in parse_formula(formula).items() if element != "H")


def analog_term(spectral, spectrum, truth14: str, hits: int, weight: float = 1.0, others_weight: float = 1.0,
                de_novo_weight: float = 0.0):
    """The analog score of ``spectrum`` as a ranking term (:class:`engine.elucidation.ranking.AnalogRerank`) from
    its first ``hits`` hybrid-search hits in the spectral libraries ``spectral``, the records of the structure
    ``truth14`` left out (the benchmark asks about a compound with no reference spectrum)."""
    from engine.chem import molecules as chem
    from engine.elucidation.libraries import analog_references, search_analogs
    from engine.elucidation.ranking import AnalogRerank

    matches = search_analogs(spectral, spectrum, hits + 10)
    kept = []
    for hit in matches.hits if matches is not None else ():
        ref = hit.reference
        key14 = ref.inchikey14 or (chem.inchikey14(ref.smiles) if ref.smiles else None)
        if key14 != truth14:
            kept.append(hit)
    return AnalogRerank(analog_references(kept[:hits]), weight, others_weight, de_novo_weight)


def run_method(model, spectrum, posterior, method: str, params, deep_config, analogs=None, exclude=frozenset(),
               analog_evidence=None):
    """(result, seconds, search) of one method on a fresh session (deep: ``deep_config`` with ``analogs`` sources,
    ``exclude`` never analogs; ``search`` the :class:`DeepSearch`, for its phase times and sources; None else).
    ``analog_evidence``: the analog term the rankings use (:func:`analog_term`) in place of a search of the
    session's libraries (it has none)."""
    from engine.elucidation.deep import DeepSearch
    from engine.elucidation.pipeline import SpectrumSession
    from engine.progress import run_to_end

    session = SpectrumSession(model, spectrum, posterior=posterior)
    if analog_evidence is not None:
        session._analogs = analog_evidence  # searched here, the truth's records left out
    t = time.perf_counter()
    search = None
    if method.startswith("deep"):
        search = DeepSearch(session, deep_config, analogs=analogs or [], exclude=exclude)
        result = run_to_end(search.run(params))
    elif method == "standard":
        result = run_to_end(session.run(params))
    elif method.startswith("edits="):
        result = run_to_end(session.run(replace(params, edit_rounds=int(method[6:]))))
    else:
        b = int(method.split("=")[1])
        result = run_to_end(session.run(replace(params, samples_per_group=b // params.groups)))
    return result, time.perf_counter() - t, search


def record(key: str, method: str, ref, result, seconds: float, posterior_seconds: float, search=None) -> dict:
    """One line of ``results.jsonl``; a deep search adds the seconds of each phase (the posterior's in
    ``standard``) and the phases whose samples drew the truth (``edits``: only an edit made it)."""
    top = result.candidates[:10]
    row = {"spectrum": key, "method": method, "inchikey14": ref.inchikey14, "reference": ref.smiles,
           "rank": result.reference_rank, "n_samples": result.n_samples,
           "n_formula_consistent": result.n_formula_consistent, "n_candidates": len(result.candidates),
           "seconds": seconds + posterior_seconds, "top_smiles": [c.smiles for c in top],
           "top_scores": [round(c.fingerprint_score, 3) for c in top]}
    if search is not None:
        phases = dict(search.seconds)
        phases["standard"] = phases.get("standard", 0.0) + posterior_seconds
        row["phase_seconds"] = {k: round(v, 3) for k, v in phases.items()}
        row["truth_sources"] = search.sources_of(ref.inchikey14)
    return row


def _best_tanimoto(row: dict) -> float:
    """Highest Morgan Tanimoto of a record's top 10 to its reference (0 without candidates)."""
    from engine.chem import molecules as chem

    ref = chem.morgan_bits(chem.mol_from_smiles(row["reference"]))
    return max((chem.tanimoto(chem.morgan_bits(chem.mol_from_smiles(s)), ref) for s in row["top_smiles"]), default=0.0)


def _rows_by_spectrum(path: Path) -> dict[str, dict[str, dict]]:
    by: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            by.setdefault(r["spectrum"], {})[r["method"]] = r
    return by


def summarize(path: Path, methods, baseline: str | None = None, baseline_run: Path | None = None,
              overlay: Path | None = None, reference: str = "standard") -> str:
    """The table of ``methods`` on the spectra they all finished (and on those standard and deep finished); the
    time and truth sources of each deep search's phases; with ``baseline`` (a method of ``baseline_run``, a run
    folder; else of this run), each other deep method against it (:func:`paired_table`). ``overlay``: a run
    folder whose spectra replace this run's (all their methods' lines: a ``--heavier-than`` rerun); ``reference``:
    the method the time ratios divide by."""
    by = _rows_by_spectrum(path)
    if overlay:
        by.update(_rows_by_spectrum(Path(overlay) / "results.jsonl"))
    lines = []
    deep_methods = [m for m in methods if m.startswith("deep")]
    for scope, keep in (("every method done", [k for k, v in by.items() if all(m in v for m in methods)]),
                        (f"{reference} and deep done", [k for k, v in by.items() if reference in v and "deep" in v])):
        if not keep:
            continue
        std = sum(by[k][reference]["seconds"] for k in keep) / len(keep)
        lines += [f"{scope}: {len(keep)} spectra", "",
                  "| method | truth in pool | Top-1 | Top-10 | best top-10 Tanimoto (mean) | candidates (mean) | "
                  f"s / spectrum | × {reference} |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for m in methods:
            rs = [by[k][m] for k in keep if m in by[k]]
            if len(rs) < len(keep):
                continue
            ranks = [r["rank"] for r in rs]
            sec = sum(r["seconds"] for r in rs) / len(rs)
            lines.append(f"| {m} | {sum(x is not None for x in ranks)} | {sum(x == 1 for x in ranks)} | "
                         f"{sum(x is not None and x <= 10 for x in ranks)} | "
                         f"{sum(_best_tanimoto(r) for r in rs) / len(rs):.3f} | "
                         f"{sum(r['n_candidates'] for r in rs) / len(rs):.0f} | {sec:.2f} | {sec / std:.2f} |")
        lines.append("")
        if scope == "every method done":
            lines += phase_table([by[k] for k in keep], deep_methods)
    if baseline:
        base_by = _rows_by_spectrum(Path(baseline_run) / "results.jsonl") if baseline_run else by
        label = f"{baseline} of {baseline_run}" if baseline_run else baseline
        for m in methods:
            if m != reference and (m != baseline or baseline_run):
                lines += paired_table(by, m, base_by, baseline, label, reference=reference)
    return "\n".join(lines)


def phase_table(rows: list[dict[str, dict]], methods) -> list[str]:
    """Mean seconds per spectrum of each deep search phase, and the truths each phase put in the pool first (the
    earliest phase, in :data:`~engine.elucidation.deep.PHASES` order, whose samples drew it; ``edits``: no sample
    drew it, an edit made it)."""
    from engine.elucidation.deep import PHASES

    out = []
    for m in methods:
        rs = [r[m] for r in rows if m in r and "phase_seconds" in r[m]]
        if not rs:
            continue
        seen = [p for p in PHASES if any(p in r["phase_seconds"] or p in r["truth_sources"] for r in rs)]
        first = {p: sum(bool(r["truth_sources"]) and r["truth_sources"][0] == p for r in rs) for p in seen}
        out += [f"{m}: time per phase and truths first put in the pool there ({len(rs)} spectra)", "",
                "| phase | s / spectrum | share of time | truths first found there |", "| --- | ---: | ---: | ---: |"]
        total = sum(sum(r["phase_seconds"].values()) for r in rs) / len(rs)
        for p in seen:
            sec = sum(r["phase_seconds"].get(p, 0.0) for r in rs) / len(rs)
            out.append(f"| {p} | {sec:.2f} | {sec / max(total, 1e-9):.0%} | {first[p]} |")
        out += [f"| all | {total:.2f} | 100% | {sum(first.values())} |", ""]
    return out


def mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` discordant pairs one way and ``c`` the other (binomial, p = 1/2)."""
    from math import comb

    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_table(by: dict, method: str, base_by: dict, base_method: str, label: str, reps: int = 10_000,
                 reference: str = "standard") -> list[str]:
    """``method`` of this run against ``base_method`` of ``base_by`` on the spectra both finished: per measure (truth
    in pool, Top-1, Top-10) the counts, the spectra only one of them got (exact McNemar p) and a 95% bootstrap interval
    of the difference (spectra resampled, seed 0); and the time ratio to each run's own ``reference`` method, with a
    95% bootstrap interval of their difference."""
    import numpy as np

    keys = [k for k in by if method in by[k] and reference in by[k] and k in base_by
            and base_method in base_by[k] and reference in base_by[k]]
    if not keys:
        return []
    hit = {"truth in pool": lambda r: r is not None, "Top-1": lambda r: r == 1,
           "Top-10": lambda r: r is not None and r <= 10}
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(keys), size=(reps, len(keys)))
    out = [f"{method} against {label} ({len(keys)} spectra both finished)", "",
           f"| measure | {method} | {label} | only {method} | only {label} | McNemar p | difference (95% CI) |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, ok in hit.items():
        a = np.array([ok(by[k][method]["rank"]) for k in keys], dtype=float)
        z = np.array([ok(base_by[k][base_method]["rank"]) for k in keys], dtype=float)
        d = a - z
        lo, hi = np.percentile(d[draws].sum(axis=1), [2.5, 97.5])
        out.append(f"| {name} | {int(a.sum())} | {int(z.sum())} | {int((d > 0).sum())} | {int((d < 0).sum())} | "
                   f"{mcnemar_p(int((d > 0).sum()), int((d < 0).sum())):.3f} | {int(d.sum()):+d} ({lo:+.0f} to {hi:+.0f}) |")
    sec = {who: (np.array([b[k][m]["seconds"] for k in keys]), np.array([b[k][reference]["seconds"] for k in keys]))
           for who, b, m in (("new", by, method), ("base", base_by, base_method))}
    ratio = {who: s.sum() / st.sum() for who, (s, st) in sec.items()}
    boot = [sec[w][0][draws].sum(axis=1) / sec[w][1][draws].sum(axis=1) for w in ("new", "base")]
    lo, hi = np.percentile(boot[0] - boot[1], [2.5, 97.5])
    lo_new, hi_new = np.percentile(boot[0], [2.5, 97.5])
    out += [(f"| × {reference} (each run's own) | {ratio['new']:.2f} ({lo_new:.2f} to {hi_new:.2f}) | "
             f"{ratio['base']:.2f} | "
             f"| | | {ratio['new'] - ratio['base']:+.2f} ({lo:+.2f} to {hi:+.2f}) |"), ""]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mgf", required=True)
    p.add_argument("--model", default=None, help="model bundle (default: the bundled model)")
    p.add_argument("--out", required=True)
    p.add_argument("--set", choices=("val", "train-unseen"), default="val")
    p.add_argument("--max-spectra", type=int, default=100)
    p.add_argument("--methods", nargs="+", default=list(METHODS),
                   help="standard, edits=K, deep, deep:NAME (a --variant) and/or B=<pool size> (a multiple of 20)")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME='<JSON overrides of DeepConfig's defaults>': the deep search of method deep:NAME")
    p.add_argument("--baseline", default=None,
                   help="a deep method every other deep method is compared with, paired (McNemar, bootstrap intervals)")
    p.add_argument("--baseline-run", default=None,
                   help="the run folder (--out of another run of the same spectra) whose --baseline method that is "
                        "(default: this run)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--deep-config", default="{}", help="JSON overrides of DeepConfig fields")
    p.add_argument("--analogs", choices=("bundled", "none"), default="bundled",
                   help="where deep search looks for analogs: the bundled structure library (each spectrum's true "
                        "structure left out) or nowhere")
    p.add_argument("--analog-evidence", choices=("none", "bundled"), default="none",
                   help="bundled: the rankings weigh each candidate's analog score (the bundle's analog weights) "
                        "from the query's hits in the bundled spectral library, each spectrum's own structure left "
                        "out, as a run with the bundled libraries on would (default none: libraries off)")
    p.add_argument("--heavier-than", type=int, default=None, metavar="N",
                   help="only the selected spectra whose formula has more than N heavy atoms (to rerun those a setting "
                        "such as DeepConfig.edit_max_atoms changes; the others' results are the same)")
    p.add_argument("--overlay", default=None, metavar="DIR",
                   help="with --summary-only: a run folder whose spectra replace this run's lines for them (a "
                        "--heavier-than rerun of those a setting changes)")
    p.add_argument("--reference", default="standard", help="the method the time ratios divide by (default standard)")
    p.add_argument("--summary-only", action="store_true")
    args = p.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    if args.summary_only:
        print(summarize(results, args.methods, args.baseline, args.baseline_run, args.overlay, args.reference))
        return 0

    import torch

    from engine.elucidation.pipeline import QueryParams, compute_posterior
    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir
    from training.evaluation.evaluate import spectrum_key

    torch.set_num_threads(args.threads)
    model = load_bundle(args.model or default_model_dir())
    configs = deep_configs(json.loads(args.deep_config), args.variant)
    for m in args.methods:
        if m.startswith("deep") and m not in configs:
            raise SystemExit(f"method {m!r} has no --variant {m[5:]}='<JSON>'")
    analogs = []
    if args.analogs == "bundled" and any(c.analogs for m, c in configs.items() if m in args.methods):
        from engine.elucidation.analogs import open_analog_index
        from engine.library.cache import open_bundled_library
        from engine.progress import run_to_end

        analogs = [run_to_end(open_analog_index(run_to_end(open_bundled_library())))]
    spectral = []
    if args.analog_evidence == "bundled":
        from engine.spectral_library import load_bundled_spectral_library

        spectral = [load_bundled_spectral_library()]
    params = QueryParams()
    for m in args.methods:
        if m not in ("standard", *configs) and not (m.startswith("B=") and m[2:].isdigit() and int(m[2:]) % 20 == 0) \
                and not (m.startswith("edits=") and m[6:].isdigit()):
            raise SystemExit(f"unknown method {m!r}: use standard, edits=K, deep, deep:NAME or B=<multiple of 20>")
    pairs = select(model, args.mgf, args.set, args.max_spectra, out / "selection.json")
    if args.heavier_than is not None:
        pairs = [(s, r) for s, r in pairs if heavy_atoms(s.formula) > args.heavier_than]
    run_info = {"model": model.name, "checksum": model.checksum, "set": args.set, "methods": args.methods,
                "deep_config": {m: asdict(c) for m, c in configs.items() if m in args.methods},
                "analogs": args.analogs, "analog_evidence": args.analog_evidence, "threads": args.threads, "machine": platform.processor() or
                platform.machine(), "python": platform.python_version(), "torch": torch.__version__}
    (out / "run.json").write_text(json.dumps(run_info, indent=1))
    done = set()
    if results.exists():
        done = {(r["spectrum"], r["method"]) for r in map(json.loads, results.read_text().splitlines()) if r}
    with results.open("a") as fh:
        for n, (spectrum, ref) in enumerate(pairs):
            key = spectrum_key(spectrum)
            todo = [m for m in args.methods if (key, m) not in done]
            if not todo:
                continue
            t = time.perf_counter()
            posterior = compute_posterior(model, spectrum)
            evidence = None
            if spectral:
                ranking = model.forward.ranking
                evidence = analog_term(spectral, spectrum, ref.inchikey14, ranking.analog_hits, ranking.analog_weight,
                                       ranking.analog_weight_others, ranking.analog_weight_de_novo)
            posterior_seconds = time.perf_counter() - t
            for m in todo:
                result, seconds, search = run_method(model, spectrum, posterior, m, params, configs.get(m), analogs,
                                                     frozenset({ref.inchikey14}), evidence)
                fh.write(json.dumps(record(key, m, ref, result, seconds, posterior_seconds, search)) + "\n")
                fh.flush()
                print(f"{n + 1}/{len(pairs)} {spectrum.id} {m}: rank {result.reference_rank} "
                      f"{len(result.candidates)} candidates {seconds:.1f}s", file=sys.stderr, flush=True)
    summary = summarize(results, args.methods, args.baseline, args.baseline_run, reference=args.reference)
    (out / "summary.md").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
