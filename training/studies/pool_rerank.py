"""Ranking that tells isomers apart (issue #59, item 3): which evidence beside the fingerprint score puts a de novo
pool's true structure first?

Standard effort's edit rounds and deep search fill a pool with close isomers of the structures the fingerprint score
likes; the fingerprint score then decides among them alone. This study collects, for each spectrum, the pool as the
app ranks it (:func:`training.studies.deep_search_eval.run_method`: a fresh session, libraries off) and for its first
``--top`` candidates (and the truth, wherever it is) every piece of evidence a re-ranker could use:

* ``fp``: the fingerprint score (today's ranking);
* ``n``: the samples that drew it (0: an isomer edit made it, ``ed`` 1);
* ``sim``: its highest Tanimoto to the band's queries;
* ``fwd``: the bundle's forward-model score of its fragments against the spectrum
  (:class:`engine.model.forward.ForwardScorer`, the bundle's intensity weight; null: not scorable);
* ``an``: its analog score (:class:`engine.elucidation.ranking.AnalogRerank`: highest similarity × Tanimoto to the
  structures of the query's first 30 hybrid-search hits in the bundled spectral library, the truth's own records
  left out, since the question is about a compound with no reference spectrum);
* ``dec``: the decoder's log-likelihood of its canonical SAFE string under the band queries at three places
  (:func:`training.studies.retrieval_data.decoder_scores`; null: SAFE cannot write it), and ``len`` its tokens.

``collect`` writes one JSON line per (spectrum, method) to ``<out>/pools.jsonl`` (resumable; ``--shard i/n`` splits
the spectra between processes). ``choose`` fits a listwise (conditional logit) re-ranker over the first ``--top``
candidates on the choosing pools (train-unseen spectra), cross-validated by spectrum, and compares it, and simpler
linear rules, with today's ranking on the choosing pools and on the report pools (FOLD=val), paired::

    python -m training.studies.pool_rerank collect --mgf ../shared/data/massbank_dev.mgf.gz --out runs/rerank/tu \\
        --set train-unseen --max-spectra 600 --methods standard
    python -m training.studies.pool_rerank collect --mgf ../shared/data/massbank_dev.mgf.gz --out runs/rerank/val \\
        --set val --max-spectra 100 --methods standard deep
    python -m training.studies.pool_rerank choose --choose runs/rerank/tu --report runs/rerank/val

``results FOLDER`` writes a collect folder's ranks as :mod:`training.studies.deep_search_eval`'s ``results.jsonl``, so a
run of the shipped ranking through the engine can be compared with the collected one, paired (``--baseline-run``).

Its table: docs/evidence/pool_rerank.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

TOP = 30  # candidates per pool whose evidence is collected (the truth too, wherever it ranks)
ANALOG_HITS = 30
FEATURES = ("fp", "fwd", "an", "ed", "logn", "dec", "sim")


# -- collecting -------------------------------------------------------------------------------------------------
def pool_record(model, session, spectrum, ref, result, analogs, top: int = TOP) -> dict:
    """One pool's line: the truth's rank and the evidence of its first ``top`` candidates (and the truth's)."""
    from engine.model.forward import ForwardScorer, PeakSettings
    from engine.model.querying import band_thresholds, build_queries
    from training.studies.retrieval_data import decoder_scores, query_indices, safe_ids
    from training.studies.retrieval_pools import QUERY_POSITIONS

    cands = list(result.candidates[:top])
    rank = result.reference_rank
    if rank is not None and rank > top:
        cands.append(result.candidates[rank - 1])
    fw = model.forward
    scorer = ForwardScorer(fw, session.model_spectrum, PeakSettings.of_encoder(model.encoder.config),
                           intensity_weight=fw.ranking.intensity_weight) if fw is not None else None
    cal = model.calibration.for_polarity(spectrum.polarity)
    params = result.params
    thresholds = band_thresholds(cal, params.kappa_min, params.kappa_max, params.groups)
    queries = build_queries(session.posterior, thresholds)
    chosen = query_indices(queries, len(thresholds), QUERY_POSITIONS)
    ids = [safe_ids(model.tokenizer, c.smiles, model.decoder.config.block_size) for c in cands]
    dec = np.stack([decoder_scores(model.decoder, ids, [c.formula for c in cands], queries[q].bits) for q in chosen],
                   axis=1) if cands else np.zeros((0, len(chosen)))
    rows = []
    for c, d, tok in zip(cands, dec, ids):
        f = scorer.score(c.smiles) if scorer is not None else None
        rows.append({"k": c.inchikey14, "s": c.smiles, "rank": c.rank, "fp": round(float(c.fingerprint_score), 4),
                     "n": c.count, "ed": int(bool(c.edited_from)), "sim": round(float(c.posterior_similarity), 4),
                     "fwd": None if f is None or not math.isfinite(f) else round(float(f), 4),
                     "an": round(analogs.best(c.bits)[0], 4) if analogs.references else 0.0,
                     "dec": [None if not math.isfinite(v) else round(float(v), 3) for v in d],
                     "len": None if tok is None else len(tok)})
    return {"rank": rank, "n_candidates": len(result.candidates), "candidates": rows,
            "n_analogs": len(analogs.references)}


def collect(args) -> int:
    import torch

    from engine.elucidation.pipeline import QueryParams, compute_posterior
    from engine.progress import run_to_end
    from engine.spectral_library import load_bundled_spectral_library
    from training.evaluation.evaluate import spectrum_key
    from training.studies.deep_search_eval import analog_term, deep_configs, open_selection, run_method

    model, pairs, out = open_selection(args)
    torch.set_num_threads(args.threads)
    i_shard, n_shard = (int(x) for x in args.shard.split("/"))
    pairs = [p for n, p in enumerate(pairs) if n % n_shard == i_shard]
    configs = deep_configs({}, [])
    spectral = [load_bundled_spectral_library()]
    structures = []
    if "deep" in args.methods:
        from engine.elucidation.analogs import open_analog_index
        from engine.library.cache import open_bundled_library

        structures = [run_to_end(open_analog_index(run_to_end(open_bundled_library())))]
    path = out / f"pools{'' if n_shard == 1 else f'.{i_shard}'}.jsonl"
    done = {(r["spectrum"], r["method"]) for f in out.glob("pools*.jsonl") for r in _lines(f)}  # any shard's
    params = QueryParams()
    with path.open("a") as fh:
        for n, (spectrum, ref) in enumerate(pairs):
            key = spectrum_key(spectrum)
            todo = [m for m in args.methods if (key, m) not in done]
            if not todo:
                continue
            t = time.perf_counter()
            posterior = compute_posterior(model, spectrum)
            analogs = analog_term(spectral, spectrum, ref.inchikey14, ANALOG_HITS)
            for m in todo:
                t0 = time.perf_counter()
                result, seconds, search = run_method(model, spectrum, posterior, m, params, configs.get(m), structures,
                                                     frozenset({ref.inchikey14}))
                session = search.session if search is not None else None
                if session is None:  # the standard method's session: a fresh one with the same posterior
                    from engine.elucidation.pipeline import SpectrumSession

                    session = SpectrumSession(model, spectrum, posterior=posterior)
                rec = {"spectrum": key, "id": spectrum.id, "method": m, "formula": spectrum.formula,
                       "truth": ref.inchikey14, "smiles": ref.smiles, "seconds": round(seconds, 2),
                       **pool_record(model, session, spectrum, ref, result, analogs)}
                rec["collect_seconds"] = round(time.perf_counter() - t0, 2)
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                print(f"{n + 1}/{len(pairs)} {spectrum.id} {m}: rank {result.reference_rank} "
                      f"({time.perf_counter() - t:.1f}s)", file=sys.stderr, flush=True)
    return 0


def _lines(path: Path) -> list[dict]:
    """The complete JSON lines of ``path`` (a line cut short by a stopped process is left out: collected again)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


# -- choosing ---------------------------------------------------------------------------------------------------
def read_pools(folder: str | Path, method: str) -> list[dict]:
    """The lines of every ``pools*.jsonl`` in ``folder`` for ``method``, one per spectrum, in spectrum order."""
    by = {}
    for p in sorted(Path(folder).glob("pools*.jsonl")):
        by.update((r["spectrum"], r) for r in _lines(p) if r["method"] == method)
    return [by[k] for k in sorted(by)]


def feature_matrix(rec: dict) -> tuple[np.ndarray, int | None]:
    """(candidates × :data:`FEATURES`, the truth's row or None) of one pool: a missing forward score takes the pool's
    lowest, a missing decoder score the pool's lowest; ``dec`` is the log-likelihood's mean over the three queries."""
    cands = rec["candidates"]
    X = np.zeros((len(cands), len(FEATURES)))
    fwd = np.array([np.nan if c["fwd"] is None else c["fwd"] for c in cands], dtype=float)
    dec = np.array([np.nan if c["len"] is None or any(v is None for v in c["dec"]) else
                    float(np.mean(c["dec"])) for c in cands], dtype=float)
    for v in (fwd, dec):
        low = np.nanmin(v) if np.isfinite(v).any() else 0.0
        v[~np.isfinite(v)] = low
    X[:, 0] = [c["fp"] for c in cands]
    X[:, 1] = fwd
    X[:, 2] = [c["an"] for c in cands]
    X[:, 3] = [c["ed"] for c in cands]
    X[:, 4] = [math.log1p(c["n"]) for c in cands]
    X[:, 5] = dec
    X[:, 6] = [c["sim"] for c in cands]
    truth = next((i for i, c in enumerate(cands) if c["k"] == rec["truth"]), None)
    return X, truth


def new_rank(rec: dict, X: np.ndarray, truth: int | None, w: np.ndarray, top: int = TOP) -> int | None:
    """The truth's rank when the first ``top`` candidates are re-ordered by ``X @ w`` (the rest keep their places);
    ties go against the truth."""
    if truth is None:
        return None
    if rec["candidates"][truth]["rank"] > top:
        return rec["candidates"][truth]["rank"]
    s = X[:top] @ w
    return int((s >= s[truth]).sum())


def fit_logit(pools: list[tuple[np.ndarray, int]], cols: list[int], l2: float = 1e-2) -> np.ndarray:
    """Conditional-logit weights over ``cols`` of :data:`FEATURES` (the truth's softmax share among its pool's
    first candidates maximised, features standardised over the pools, ``l2`` ridge), returned on the raw scale."""
    import torch

    allx = np.concatenate([X[:, cols] for X, _ in pools])
    mu, sd = allx.mean(0), allx.std(0) + 1e-9
    xs = [torch.tensor((X[:, cols] - mu) / sd, dtype=torch.float64) for X, _ in pools]
    ts = [t for _, t in pools]
    w = torch.zeros(len(cols), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        total = sum(-torch.log_softmax(x @ w, 0)[t] for x, t in zip(xs, ts)) / len(xs) + l2 * (w * w).sum()
        total.backward()
        return total

    opt.step(loss)
    raw = np.zeros(len(FEATURES))
    raw[cols] = w.detach().numpy() / sd
    return raw


def hits(recs: list[dict], w: np.ndarray | None, top: int = TOP) -> np.ndarray:
    """Per pool (Top-1, Top-10, in pool) under weights ``w`` (None: today's ranking)."""
    out = []
    for rec in recs:
        X, t = feature_matrix(rec)
        r = rec["rank"] if w is None else new_rank(rec, X, t, w, top)
        out.append((r == 1, r is not None and r <= 10, r is not None))
    return np.array(out, dtype=float)


def engine_rank(rec: dict, weight: float, shortlist: int, analog: float, top: int = TOP) -> int | None:
    """The truth's rank as :meth:`engine.elucidation.ranking.CandidatePool.rank` orders a de novo pool under
    ``ForwardRanking(others_weight=weight, others_shortlist=shortlist, analog_weight_de_novo=analog)``: fingerprint +
    ``analog`` · analog score, then the first ``shortlist`` by that get ``weight`` · their forward score and the rest
    ``weight`` · the shortlist's lowest; ties by today's order, against the truth. Only the first ``top`` candidates
    are collected, so a candidate beyond them stays beyond them (a truth there keeps its rank)."""
    X, t = feature_matrix(rec)
    if t is None:
        return None
    if rec["candidates"][t]["rank"] > top:
        return rec["candidates"][t]["rank"]
    X = X[:top]
    base = X[:, 0] + analog * X[:, 2]
    order = np.lexsort((np.arange(len(base)), -base))
    fwd = np.array([np.nan if c["fwd"] is None else c["fwd"] for c in rec["candidates"][:top]], dtype=float)
    short = order[:shortlist]
    finite = fwd[short][np.isfinite(fwd[short])]
    score = base.copy()
    if weight > 0 and len(finite):
        low = finite.min()
        term = np.full(len(base), low)
        term[short] = np.where(np.isfinite(fwd[short]), fwd[short], low)
        score = base + weight * term
    return int((score > score[t]).sum() + ((score == score[t]) & (np.arange(len(score)) != t)).sum() + 1)


def engine_hits(recs: list[dict], weight: float, shortlist: int, analog: float) -> np.ndarray:
    """Per pool (Top-1, Top-10, in pool) under :func:`engine_rank`."""
    out = []
    for rec in recs:
        r = engine_rank(rec, weight, shortlist, analog)
        out.append((r == 1, r is not None and r <= 10, r is not None))
    return np.array(out, dtype=float)


GRID = {"weight": (0.0, 0.05, 0.1, 0.2, 0.5, 1.0), "shortlist": (10, 20), "analog": (0.0, 40.0, 80.0, 160.0, 320.0)}


def engine_grid(recs: list[dict]) -> dict[tuple, np.ndarray]:
    """:func:`engine_hits` of every setting of :data:`GRID` (weight 0 once per analog weight)."""
    out = {}
    for a in GRID["analog"]:
        for w in GRID["weight"]:
            for k in GRID["shortlist"] if w > 0 else GRID["shortlist"][:1]:
                out[(w, k, a)] = engine_hits(recs, w, k, a)
    return out


def choose_setting(grid: dict[tuple, np.ndarray]) -> tuple:
    """The setting with the most Top-1 among those whose Top-10 is no lower than today's ((0, ·, 0)), then the most
    Top-10, then the smallest weights."""
    today = grid[(0.0, GRID["shortlist"][0], 0.0)]
    ok = [s for s, h in grid.items() if h[:, 1].sum() >= today[:, 1].sum()]
    return max(ok, key=lambda s: (grid[s][:, 0].sum(), grid[s][:, 1].sum(), -s[2], -s[0], -s[1]))


def folds_of(recs: list[dict], folds: int = 5) -> np.ndarray:
    """Each pool's cross-validation fold (its spectrum key's CRC32 modulo ``folds``)."""
    import zlib

    return np.array([zlib.crc32(r["spectrum"].encode()) % folds for r in recs])


def cross_validated_grid(recs: list[dict], grid: dict[tuple, np.ndarray], folds: int = 5) -> tuple[np.ndarray, list]:
    """Out-of-fold hits of :func:`choose_setting` (chosen on the other folds' pools) and each fold's choice."""
    fold = folds_of(recs, folds)
    out, chosen = np.zeros((len(recs), 3)), []
    for k in range(folds):
        setting = choose_setting({s: h[fold != k] for s, h in grid.items()})
        chosen.append(setting)
        out[fold == k] = grid[setting][fold == k]
    return out, chosen


def paired(a: np.ndarray, b: np.ndarray, reps: int = 10_000) -> str:
    """``a − b`` summed, with the 95% bootstrap interval over pools (seed 0)."""
    d = a - b
    draws = np.random.default_rng(0).integers(0, len(d), size=(reps, len(d)))
    lo, hi = np.percentile(d[draws].sum(1), [2.5, 97.5])
    return f"{int(d.sum()):+d} ({lo:+.0f} to {hi:+.0f})"


def cross_validated(recs: list[dict], cols: list[int], folds: int = 5, top: int = TOP) -> np.ndarray:
    """Out-of-fold hits of the logit over ``cols`` (pools split by spectrum key hash, fitted on the others' pools
    whose truth is among their first ``top``)."""
    fold = folds_of(recs, folds)
    out = np.zeros((len(recs), 3))
    for k in range(folds):
        train = [feature_matrix(r) for r, f in zip(recs, fold) if f != k]
        train = [(X[:top], t) for X, t in train if t is not None and t < top]
        w = fit_logit(train, cols)
        idx = np.flatnonzero(fold == k)
        out[idx] = hits([recs[i] for i in idx], w, top)
    return out


SETS = {"fp+fwd": ["fp", "fwd"], "fp+an": ["fp", "an"], "fp+fwd+an": ["fp", "fwd", "an"],
        "fp+fwd+an+ed": ["fp", "fwd", "an", "ed"], "fp+dec": ["fp", "dec"], "fp+dec+an": ["fp", "dec", "an"],
        "fp+dec+fwd+an": ["fp", "dec", "fwd", "an"], "all": list(FEATURES)}


def install(bundle: str, setting: tuple, command: str) -> str:
    """Write the chosen ``(w, K, a)`` as ``others_weight``, ``others_shortlist`` and ``analog_weight_de_novo`` into
    the forward ranking of ``bundle``'s ``forward.json`` (its weights untouched)."""
    import tempfile
    from dataclasses import replace

    from engine.model.bundle import add_bundle_file
    from engine.model.forward import load_forward

    model = load_forward(bundle, "forward.json")
    training = json.loads((Path(bundle) / "forward.json").read_text(encoding="utf-8")).get("training") or {}
    w, k, a = setting
    model.ranking = replace(model.ranking, others_weight=float(w), others_shortlist=int(k),
                            analog_weight_de_novo=float(a))
    with tempfile.TemporaryDirectory() as tmp:
        model.save(tmp, extra={**training, "de_novo_ranking_chosen_by": command}, config_file="forward.json")
        add_bundle_file(bundle, Path(tmp) / "forward.safetensors")
        add_bundle_file(bundle, Path(tmp) / "forward.json")
    return f"installed into {bundle}: {model.ranking}"


def choose(args) -> int:
    lines = []
    rec_c = read_pools(args.choose, "standard")
    base_c = hits(rec_c, None)
    lines += [f"choosing pools ({args.choose}, standard): {len(rec_c)} spectra; today Top-1 {int(base_c[:, 0].sum())}, "
              f"Top-10 {int(base_c[:, 1].sum())}, in pool {int(base_c[:, 2].sum())}", "",
              "| features | CV Top-1 | CV Top-10 | Top-1 vs today | Top-10 vs today |", "| --- | ---: | ---: | --- | --- |"]
    fitted = {}
    for name, feats in SETS.items():
        cols = [FEATURES.index(f) for f in feats]
        cv = cross_validated(rec_c, cols)
        lines.append(f"| {name} | {int(cv[:, 0].sum())} | {int(cv[:, 1].sum())} | {paired(cv[:, 0], base_c[:, 0])} | "
                     f"{paired(cv[:, 1], base_c[:, 1])} |")
        train = [feature_matrix(r) for r in rec_c]
        fitted[name] = fit_logit([(X[:TOP], t) for X, t in train if t is not None and t < TOP], cols)
    lines += ["", "weights fitted on every choosing pool (raw feature scale, per unit fingerprint score):", ""]
    for name, w in fitted.items():
        lines.append(f"- {name}: " + ", ".join(f"{f} {w[i] / w[0]:.3g}" for i, f in enumerate(FEATURES) if w[i]))
    grid = engine_grid(rec_c)
    chosen = choose_setting(grid)
    today_key = (0.0, GRID["shortlist"][0], 0.0)
    lines += ["", "the engine's form (fingerprint + a · analog, then w · forward on the first K), choosing pools:", "",
              "| w | K | a | Top-1 | Top-10 | Top-1 vs today | Top-10 vs today |", "| ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for (w, k, a), h in sorted(grid.items(), key=lambda item: (-item[1][:, 0].sum(), -item[1][:, 1].sum()))[:12]:
        lines.append(f"| {w:g} | {k} | {a:g} | {int(h[:, 0].sum())} | {int(h[:, 1].sum())} | "
                     f"{paired(h[:, 0], grid[today_key][:, 0])} | {paired(h[:, 1], grid[today_key][:, 1])} |")
    off = grid[(*chosen[:2], 0.0)] if chosen[0] > 0 else grid[today_key]
    cv, per_fold = cross_validated_grid(rec_c, grid)
    lines += ["", f"chosen (most Top-1 with Top-10 no lower, then Top-10, then the smaller weights): w {chosen[0]:g}, "
              f"K {chosen[1]}, a {chosen[2]:g}",
              f"the rule cross-validated (chosen on 4 folds, counted on the fifth): Top-1 {int(cv[:, 0].sum())} "
              f"({paired(cv[:, 0], grid[today_key][:, 0])}), Top-10 {int(cv[:, 1].sum())} "
              f"({paired(cv[:, 1], grid[today_key][:, 1])}); the folds chose "
              + "; ".join(f"w {w:g} K {k} a {a:g}" for w, k, a in per_fold),
              f"the chosen w and K without the analog term (libraries off): Top-1 {int(off[:, 0].sum())} "
              f"({paired(off[:, 0], grid[today_key][:, 0])}), Top-10 {int(off[:, 1].sum())} "
              f"({paired(off[:, 1], grid[today_key][:, 1])})"]
    if args.report:
        for method in ("standard", "deep"):
            rec_r = read_pools(args.report, method)
            if not rec_r:
                continue
            base = hits(rec_r, None)
            lines += ["", f"report pools ({args.report}, {method}): {len(rec_r)} spectra; today Top-1 "
                      f"{int(base[:, 0].sum())}, Top-10 {int(base[:, 1].sum())}, in pool {int(base[:, 2].sum())}", "",
                      "| features | Top-1 | Top-10 | Top-1 vs today | Top-10 vs today |", "| --- | ---: | ---: | --- | --- |"]
            for name, w in fitted.items():
                h = hits(rec_r, w)
                lines.append(f"| {name} | {int(h[:, 0].sum())} | {int(h[:, 1].sum())} | {paired(h[:, 0], base[:, 0])} | "
                             f"{paired(h[:, 1], base[:, 1])} |")
            for label, setting in (("the engine's form, chosen", chosen),
                                   ("the same, libraries off (no analog term)", (*chosen[:2], 0.0))):
                h = engine_hits(rec_r, *setting)
                lines.append(f"| {label} | {int(h[:, 0].sum())} | {int(h[:, 1].sum())} | "
                             f"{paired(h[:, 0], base[:, 0])} | {paired(h[:, 1], base[:, 1])} |")
    if args.install:
        lines += ["", install(args.install, chosen, "python -m training.studies.pool_rerank " + " ".join(sys.argv[1:]))]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def as_results(folder: str | Path) -> Path:
    """Write ``<folder>/results.jsonl``, the collected pools' ranks in :mod:`training.studies.deep_search_eval`'s
    format (``--baseline-run``: a later run of the same spectra compared with today's ranking, paired). Their seconds
    leave out the posterior's, which deep_search_eval adds to every method."""
    out = Path(folder) / "results.jsonl"
    with out.open("w") as fh:
        for method in ("standard", "deep"):
            for r in read_pools(folder, method):
                fh.write(json.dumps({"spectrum": r["spectrum"], "method": method, "inchikey14": r["truth"],
                                     "reference": r["smiles"], "rank": r["rank"], "seconds": r["seconds"],
                                     "n_candidates": r["n_candidates"], "top_smiles": []}) + "\n")
    return out


def main(argv=None) -> int:
    from training.studies.deep_search_eval import selection_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="collect pools and their evidence")
    selection_arguments(c)
    c.add_argument("--methods", nargs="+", default=["standard"], help="standard and/or deep")
    c.add_argument("--shard", default="0/1", help="i/n: this process collects every n-th spectrum from the i-th")
    ch = sub.add_parser("choose", help="fit and compare re-rankers")
    ch.add_argument("--choose", required=True, help="a collect folder of train-unseen pools")
    ch.add_argument("--report", default=None, help="a collect folder of FOLD=val pools")
    ch.add_argument("--out", default=None, help="write the tables here too")
    ch.add_argument("--install", default=None, metavar="BUNDLE",
                    help="write the chosen setting into this bundle's forward.json ranking")
    r = sub.add_parser("results", help="write a collect folder's ranks as deep_search_eval's results.jsonl")
    r.add_argument("folder")
    args = p.parse_args(argv)
    if args.command == "results":
        print(as_results(args.folder))
        return 0
    return collect(args) if args.command == "collect" else choose(args)


if __name__ == "__main__":
    sys.exit(main())
