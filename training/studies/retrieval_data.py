"""The retrieval study's data: each spectrum's library (up to 255 corpus structures of its formula, or within 10 ppm
of its mass), its de novo pool scored under the encoder's posterior (and the decoder's, on a shortlist), the
fragment shares, and the seeded spectra sets, cached as JSON lines so that a rerun scores without sampling."""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.chem import molecules as chem
from engine.errors import MsgptError
from training.studies.retrieval_pools import (
    FORMAT_VERSION,
    LIBRARY_SIZE,
    MASS_PPM,
    QUERY_POSITIONS,
    SHORTLIST,
    Pool,
    track_rows,
)


def open_corpus(path: str | os.PathLike, home: str | os.PathLike | None = None):
    """The corpus (smiles, inchikey14, source) as a structure library, indexed once into ``$MSGPT_HOME``
    (``home`` sets it: the first time takes ~15 minutes for 562k structures on one core)."""
    from engine.library import load_library

    if home:
        os.environ["MSGPT_HOME"] = str(home)
    return load_library(path, trust_keys=True)


def corpus_fingerprint_bits(library) -> int:
    return int(library.info.get("fingerprint", {}).get("n_bits", chem.N_BITS))


# -- scoring candidates ----------------------------------------------------------------------------------
def query_indices(queries, n_thresholds: int, positions: Sequence[float] = QUERY_POSITIONS) -> list[int]:
    """The band query (index into ``queries``, :func:`engine.model.querying.build_queries`) holding the
    threshold at each of ``positions`` (0 = first threshold, 1 = last)."""
    out = []
    for p in positions:
        t = round(float(p) * (n_thresholds - 1))
        out.append(next(i for i, q in enumerate(queries) if t in q.threshold_indices))
    return out


def safe_ids(tokenizer, smiles: str, block_size: int) -> list[int] | None:
    """Token ids of the canonical SAFE string of ``smiles``; None when SAFE cannot cut it, a token is outside
    the vocabulary or it is longer than the decoder's block (no decoder score then)."""
    from engine.insight.structure_score import canonical_safe

    text = canonical_safe(smiles)
    if text is None:
        return None
    ids = tokenizer.encode(text)
    if len(ids) > block_size or any(i == tokenizer.unk_id for i in ids[1:-1]):
        return None
    return ids


def decoder_scores(decoder, token_ids: Sequence[list[int] | None], formulas: Sequence[str],
                   query_bits: np.ndarray, batch_size: int = 128) -> np.ndarray:
    """log p(tokens | query, formula) of each structure (summed over its tokens, nats) under one query, each
    conditioned on its own formula; nan where ``token_ids`` is None. Rows are batched by formula and length."""
    import torch

    from engine.chem.formula import formula_vector, parse_formula
    from engine.model.decoder import PAD_ID, collate_queries

    cfg = decoder.config
    device = next(decoder.parameters()).device
    out = np.full(len(token_ids), np.nan)
    todo = [i for i, ids in enumerate(token_ids) if ids is not None]
    if not todo:
        return out
    names = sorted({formulas[i] for i in todo})
    group = {f: g for g, f in enumerate(names)}
    vecs = np.stack([formula_vector(parse_formula(f)) for f in names])
    with torch.inference_mode():
        bits, mask, form = collate_queries([query_bits] * len(names), vecs, cfg.max_fp_tokens, cfg.fp_bits)
        context = decoder.context_kv(*decoder.encode_context(bits.to(device), mask.to(device), form.to(device)))
        todo.sort(key=lambda i: (group[formulas[i]], len(token_ids[i])))
        for lo in range(0, len(todo), batch_size):
            rows = todo[lo : lo + batch_size]
            width = max(len(token_ids[i]) for i in rows)
            ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, : len(token_ids[i])] = torch.tensor(token_ids[i])
            ids = ids.to(device)
            groups = torch.tensor([group[formulas[i]] for i in rows], device=device)
            logits = decoder.decode(ids[:, :-1], context.for_rows(groups))
            logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
            valid = ids[:, 1:] != PAD_ID
            out[rows] = (logp * valid).sum(-1).double().cpu().numpy()
    return out


def fragment_share(smiles: str, spectrum) -> float | None:
    """Share of the spectrum's intensity the structure's bond-cleavage fragments explain."""
    from engine.spectra.fragments import explain_peaks

    mol = chem.mol_from_smiles(smiles)
    if mol is None:
        return None
    try:
        return float(explain_peaks(mol, spectrum.mz, spectrum.intensity, spectrum.adduct).explained_intensity)
    except MsgptError:
        return None


@dataclass
class _Entry:
    smiles: str
    formula: str
    bits: np.ndarray
    fl: bool = False  # in the formula track's library
    ml: bool = False  # in the mass track's library
    count: int = 0  # de novo samples
    fp: float = float("nan")


def _entries(library, spectrum, ref, result, formula_rows, mass_rows, n_bits: int) -> dict[str, _Entry]:
    """Every candidate of one spectrum by InChIKey first block: the truth, both tracks' rows, the de novo
    candidates (a structure in both keeps the library's SMILES and gets the de novo count)."""
    truth_formula = chem.mol_formula(ref.mol)
    entries = {ref.inchikey14: _Entry(ref.smiles, truth_formula, chem.morgan_bits(ref.mol, n_bits), True, True)}
    for row in sorted(set(formula_rows.tolist()) | set(mass_rows.tolist())):
        key = library.inchikey14(row)
        entries[key] = _Entry(library.smiles(row), library.record(row).formula, library.bits(row))
    for row in formula_rows:
        entries[library.inchikey14(row)].fl = True
    for row in mass_rows:
        entries[library.inchikey14(row)].ml = True
    for c in [] if result is None else result.candidates:
        if c.inchikey14 in entries:
            entries[c.inchikey14].count = c.count
        else:
            entries[c.inchikey14] = _Entry(c.smiles, c.formula, np.asarray(c.bits), count=c.count)
    return entries


def rescore_keys(entries: dict[str, _Entry], truth_key: str, size: int = SHORTLIST) -> list[str]:
    """The candidates any shortlist of ``size`` can hold, for any library prior and count weight, track and
    setting (see :func:`setting_rows`): the truth, the best ``size`` + 1 by fingerprint score of each track's
    library (the truth may leave it) and every de novo candidate."""
    keys = list(entries)
    fp = np.array([entries[k].fp for k in keys])
    chosen = {truth_key} | {k for k, e in entries.items() if e.count > 0}
    for mask in ([e.fl for e in entries.values()], [e.ml for e in entries.values()]):
        idx = np.flatnonzero(mask)
        chosen.update(keys[i] for i in idx[np.lexsort((idx, -fp[idx]))][: size + 1])
    return [k for k in keys if k in chosen]


def score_pool(model, spectrum, ref, library, params, *, seed: int = 0,
               positions: Sequence[float] = QUERY_POSITIONS, library_only: bool = False) -> dict:
    """One spectrum: the de novo search as the app runs it, both library tracks, every candidate's
    fingerprint score and the decoder scores of those a shortlist can hold (:func:`rescore_keys`); a
    JSON-ready record with the seconds each part took. ``library_only``: both tracks alone (the encoder runs,
    no de novo search and no decoder scores), for measures of the library's own order."""
    from engine.elucidation.pipeline import SpectrumSession
    from engine.library.build import neutral_mass
    from engine.model.querying import band_thresholds, build_queries
    from engine.model.scoring import FingerprintScorer
    from engine.progress import run_to_end
    from training.evaluation.evaluate import spectrum_key

    key = spectrum_key(spectrum)
    t0 = time.perf_counter()
    session = SpectrumSession(model, spectrum)
    result = None if library_only else run_to_end(session.run(params))
    seconds = {"denovo": time.perf_counter() - t0}
    cal = model.calibration.for_polarity(spectrum.polarity)
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    mass = neutral_mass(ref.mol)
    formula_rows, mass_rows = track_rows(library, ref.inchikey14, chem.mol_formula(ref.mol), mass, rng)
    entries = _entries(library, spectrum, ref, result, formula_rows, mass_rows, model.decoder.config.fp_bits)
    t = time.perf_counter()
    scorer = FingerprintScorer(session.posterior, cal.bits)
    for e in entries.values():
        e.fp = scorer.score(e.bits)
    seconds["fingerprint"] = time.perf_counter() - t
    rescored = [] if library_only else rescore_keys(entries, ref.inchikey14)
    t = time.perf_counter()
    tok_ids = [safe_ids(model.tokenizer, entries[k].smiles, model.decoder.config.block_size) for k in rescored]
    seconds["safe"] = time.perf_counter() - t
    queries, chosen = [], []  # library-only pools: no decoder scores, so no queries
    if not library_only:
        thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
        queries = build_queries(session.posterior, thresholds)
        chosen = query_indices(queries, len(thresholds), positions)
    dec, seconds["decoder"] = {}, []
    for qi in chosen:
        t = time.perf_counter()
        values = decoder_scores(model.decoder, tok_ids, [entries[k].formula for k in rescored], queries[qi].bits)
        seconds["decoder"].append(time.perf_counter() - t)
        for k, v in zip(rescored, values):
            dec.setdefault(k, []).append(None if not math.isfinite(v) else round(float(v), 4))
    cands = []
    for k, e in entries.items():
        c = {"k": k, "s": e.smiles, "fp": round(float(e.fp), 4)}
        c.update({"fl": int(e.fl), "ml": int(e.ml)} if e.fl or e.ml else {})
        if e.count:
            c["n"] = e.count
        if k in dec:
            c["dec"] = dec[k]
        cands.append(c)
    return {
        "key": key, "id": spectrum.id, "fold": spectrum.metadata.get("fold", ""), "adduct": spectrum.adduct,
        "formula": spectrum.formula, "mass": mass, "truth": {"smiles": ref.smiles, "inchikey14": ref.inchikey14},
        "queries": [{"position": p, "query": qi, "bits": len(queries[qi].bits)} for p, qi in zip(positions, chosen)],
        "n_formula_track": len(formula_rows) + 1, "n_mass_track": len(mass_rows) + 1,
        "n_denovo": 0 if result is None else len(result.candidates),
        "denovo_rank": None if result is None else result.reference_rank, "n_rescored": len(rescored),
        "n_decoder_scorable": sum(i is not None for i in tok_ids), "seconds": seconds, "candidates": cands,
    }


def add_fragments(record: dict, spectrum) -> dict:
    """The fragment share of every rescored candidate of ``record`` (None for the others), and the seconds."""
    t = time.perf_counter()
    shares = [fragment_share(c["s"], spectrum) if "dec" in c else None for c in record["candidates"]]
    return {"key": record["key"], "fr": [None if x is None else round(x, 4) for x in shares],
            "n": sum("dec" in c for c in record["candidates"]), "seconds": time.perf_counter() - t}


# -- the spectra ---------------------------------------------------------------------------------------
def mgf_labels(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FOLD, LICENSE and InChIKey first block of every record of an MGF (a plain text scan, no peaks read;
    the key from SMILES when a record has no INCHIKEY)."""
    folds, licenses, keys = [], [], []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        rec: dict[str, str] = {}
        for line in fh:
            line = line.strip()
            if line == "BEGIN IONS":
                rec = {}
            elif line == "END IONS":
                key = rec.get("INCHIKEY", "")[:14]
                if not key and rec.get("SMILES"):
                    key = chem.inchikey14(rec["SMILES"]) or ""
                folds.append(rec.get("FOLD", ""))
                licenses.append(rec.get("LICENSE", ""))
                keys.append(key)
            elif "=" in line and not line[0].isdigit():
                name, value = line.split("=", 1)
                rec[name.upper()] = value
    return np.array(folds), np.array(licenses), np.array(keys)


@dataclass
class Sets:
    choose: list  # (Spectrum, Reference): FOLD=train, structures the encoder never trained on
    report: list  # FOLD=val
    info: dict


def select_sets(model, mgf: str, n_choose: int, n_report: int, seed: int = 0,
                licenses: Sequence[str] | None = None, exclude: Callable[[str], bool] | None = None) -> Sets:
    """One seeded spectrum per structure (``msgpt-eval --one-per-structure``): the first ``n_report`` of
    FOLD=val, and the first ``n_choose`` of FOLD=train whose structure no FOLD=train record of the encoder's
    training licences holds (``licenses`` overrides the licences the bundle records) and that ``exclude``
    (called with the InChIKey first block) does not exclude."""
    from training.encoder.noise import encoder_licenses, unseen_structures
    from training.evaluation.evaluate import EvalConfig, select_spectra

    trained = list(licenses) if licenses else encoder_licenses(model.config, str(model.path))
    common = {"model": str(model.path), "mgf": str(mgf), "out": "", "one_per_structure": True, "seed": seed,
              "variants": (), "kappa_sweep": False}
    report = select_spectra(model, EvalConfig(folds=("val",), max_spectra=n_report or None, **common))
    train = select_spectra(model, EvalConfig(folds=("train",), **common))
    fold, lic, keys = mgf_labels(mgf)
    unseen = set(keys[unseen_structures(fold, lic, keys, trained)].tolist())
    candidates = [(s, r) for s, r in train.chosen if r.inchikey14 in unseen]
    kept = [(s, r) for s, r in candidates if exclude is None or not exclude(r.inchikey14)]
    info = {"trained_licenses": trained, "report": report.info,
            "choose": {"eligible_structures": train.info["eligible_structures"],
                       "unseen_structures": len(candidates), "not_excluded": len(kept),
                       "selected": min(n_choose, len(kept))}}
    candidates = kept
    return Sets(candidates[:n_choose], report.chosen[: n_report] if n_report else [], info)


def _spectrum_dict(s) -> dict:
    from dataclasses import fields

    d = {f.name: getattr(s, f.name) for f in fields(s)}
    d["mz"], d["intensity"] = s.mz.tolist(), s.intensity.tolist()
    return d


def cached_sets(model, mgf: str, n_choose: int, n_report: int, seed: int, licenses: Sequence[str] | None,
                path: Path, exclude: Callable[[str], bool] | None = None, exclude_name: str = "") -> Sets:
    """:func:`select_sets`, kept in ``path`` (JSON: the selected spectra, peaks included) for reruns with the
    same file, model adducts, counts, seed and licences (reading the MGF twice takes minutes)."""
    from engine.spectra.spectrum import Spectrum
    from training.evaluation.evaluate import Reference

    stat = Path(mgf).stat()
    key = {"mgf": str(Path(mgf).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "seed": seed,
           "choose": n_choose, "report": n_report, "licenses": list(licenses or []),
           "adducts": list(model.supported_adducts), "exclude": exclude_name, "format_version": FORMAT_VERSION}
    n_bits = model.decoder.config.fp_bits
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            def pairs(items):
                return [(s, Reference.of(s, n_bits)) for s in (Spectrum(**d) for d in items)]

            return Sets(pairs(saved["choose"]), pairs(saved["report"]), saved["info"])
    sets = select_sets(model, mgf, n_choose, n_report, seed, licenses, exclude)
    path.write_text(json.dumps({"key": key, "info": sets.info, "choose": [_spectrum_dict(s) for s, _ in sets.choose],
                                "report": [_spectrum_dict(s) for s, _ in sets.report]}), encoding="utf-8")
    return sets


# -- the run -------------------------------------------------------------------------------------------
@dataclass
class RetrievalConfig:
    mgf: str
    corpus: str
    out: str
    model: str = ""
    choose_spectra: int = 150
    report_spectra: int = 200
    fragment_spectra: int = 0
    seed: int = 0
    threads: int | None = 1
    device: str = "cpu"
    precision: str = "auto"
    home: str | None = None
    licenses: tuple[str, ...] | None = None
    tolerance: float = 0.0
    choose_outside_corpus: bool = False  # True: as FOLD=val, the decoder never saw the truth (only the decoys)
    library_only: bool = False  # pools of the library tracks alone, no analysis (see build_parser)
    command: str = ""

    def run_key(self, model, library) -> dict:
        from engine.elucidation.pipeline import QueryParams

        return {"mgf": str(Path(self.mgf).resolve()), "corpus_sha256": library.checksum, "seed": self.seed,
                "model_checksum": model.checksum, "params": QueryParams().describe(), "library_size": LIBRARY_SIZE,
                "mass_ppm": MASS_PPM, "query_positions": list(QUERY_POSITIONS), "shortlist": SHORTLIST,
                "format_version": FORMAT_VERSION,
                "precision": str(model.dtype), **({"library_only": True} if self.library_only else {})}


def read_jsonl(path: Path) -> dict[str, dict]:
    """Records by key; a line cut by an interrupted run is dropped."""
    out = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec["key"]] = rec
    return out


def _append(path: Path, rec: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def compute_pools(cfg: RetrievalConfig, model, library, sets: Sets, out: Path) -> tuple[dict, dict]:
    """Every selected spectrum's pool (``pools.jsonl``) and fragment shares (``fragments.jsonl``, the first
    ``fragment_spectra`` of each set), computing only what the files lack."""
    from tqdm import tqdm

    from engine.elucidation.pipeline import QueryParams
    from training.evaluation.evaluate import spectrum_key

    pools_path, frag_path = out / "pools.jsonl", out / "fragments.jsonl"
    pools, frags = read_jsonl(pools_path), read_jsonl(frag_path)
    params = QueryParams()
    for name, pairs in (("choose", sets.choose), ("report", sets.report)):
        todo = [(s, r) for s, r in pairs if spectrum_key(s) not in pools]
        for s, ref in tqdm(todo, desc=f"pools ({name})", unit="spectrum", file=sys.stderr, dynamic_ncols=True):
            rec = score_pool(model, s, ref, library, params, seed=cfg.seed, library_only=cfg.library_only)
            pools[rec["key"]] = rec
            _append(pools_path, rec)
        todo = [(s, r) for s, r in pairs[: cfg.fragment_spectra] if spectrum_key(s) not in frags]
        for s, _ in tqdm(todo, desc=f"fragments ({name})", unit="spectrum", file=sys.stderr, dynamic_ncols=True):
            rec = add_fragments(pools[spectrum_key(s)], s)
            frags[rec["key"]] = rec
            _append(frag_path, rec)
    return pools, frags


def _pools_of(pairs, pools: dict, frags: dict, fragments_only: bool = False) -> list[Pool]:
    from training.evaluation.evaluate import spectrum_key

    keys = [spectrum_key(s) for s, _ in pairs]
    if fragments_only:
        keys = [k for k in keys if k in frags]
    return [Pool.from_record(pools[k], frags[k]["fr"] if k in frags else None) for k in keys]
