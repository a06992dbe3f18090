"""The pieces of the analog-score study (:mod:`training.studies.retrieval_analogs`): each pool's analog hits in the
spectral libraries, the analog score of its structures, the suspect-list order with the fragment and analog terms
(forward scores completed into a cache), the hits tables and the rule that chooses the weights."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from training.studies.retrieval import TRACKS, ci95

KS = (1, 5, 20)
_BITS: dict[str, np.ndarray | None] = {}


# -- the hits and the analog score ------------------------------------------------------------------------
def pool_hits(libraries: Sequence, records: dict, spectra: dict, n: int, path: Path
              ) -> tuple[dict[str, list[dict]], float]:
    """Per pool, its first ``n`` analog hits without its own true structure (``{"s": similarity, "smiles",
    "accession"}``), and the seconds one search took; cached in ``path`` (recomputed when it holds fewer hits
    than asked, other pools or other libraries)."""
    from engine.chem import molecules as chem
    from engine.elucidation.libraries import search_analogs

    names = [f"{lib.name} {lib.checksum}" for lib in libraries]
    if path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("n", 0) >= n and set(records) <= set(cached["hits"]) and cached.get("libraries") == names:
            return {k: v[:n] for k, v in cached["hits"].items()}, cached["seconds_per_spectrum"]
    out = {}
    t0 = time.perf_counter()
    for i, (key, rec) in enumerate(records.items()):
        truth = rec["truth"]["inchikey14"]
        matches = search_analogs(libraries, spectra[key], n + 10)
        kept = []
        for hit in matches.hits if matches is not None else ():
            ref = hit.reference
            key14 = ref.inchikey14 or (chem.inchikey14(ref.smiles) if ref.smiles else None)
            if key14 == truth:
                continue
            kept.append({"s": float(hit.similarity), "smiles": ref.smiles, "accession": ref.accession})
        out[key] = kept[:n]
        if i % 200 == 0:
            print(f"analog search {i}/{len(records)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    seconds = (time.perf_counter() - t0) / max(len(records), 1)
    path.write_text(json.dumps({"n": n, "libraries": names, "seconds_per_spectrum": seconds, "hits": out}),
                    encoding="utf-8")
    return out, seconds


def analog_scores(rec: dict, hits: list[dict], n: int) -> np.ndarray:
    """Each candidate's analog score under the first ``n`` hits (:class:`AnalogRerank`, the engine's own code)."""
    from engine.elucidation.ranking import AnalogReference, AnalogRerank

    refs = []
    for h in hits[:n]:
        bits = _bits(h["smiles"]) if h["smiles"] else None  # cached: each H, v and the control ask again
        if bits is not None:
            refs.append(AnalogReference(h["s"], bits, h["accession"]))
    rerank = AnalogRerank(tuple(refs), 1.0)
    out = np.zeros(len(rec["candidates"]))
    for j, c in enumerate(rec["candidates"]):
        bits = _bits(c["s"])
        if bits is not None:
            out[j] = rerank.best(bits)[0]
    return out


def _bits(smiles: str) -> np.ndarray | None:
    from engine.chem import molecules as chem

    if smiles not in _BITS:
        _BITS[smiles] = chem.morgan_bits_from_smiles(smiles)
    return _BITS[smiles]


# -- ranking ---------------------------------------------------------------------------------------------
def hit_at(score: np.ndarray, truth: int, mask: np.ndarray, k: int) -> float:
    """Whether the truth is among the first ``k`` of ``mask``'s rows by ``score``, expected over ties."""
    sc = score[mask]
    t = score[truth]
    better = int((sc > t).sum())
    tied = int((sc == t).sum())  # the truth included
    return float(np.clip((k - better) / tied, 0.0, 1.0))


def shortlists(rec: dict, shortlist: int, before: np.ndarray) -> dict[str, np.ndarray]:
    """Per track, the rows of the first ``shortlist`` candidates by the score ``before`` the fragment term."""
    out = {}
    for t in TRACKS:
        idx = np.flatnonzero([bool(c.get(t[0] + "l")) for c in rec["candidates"]])
        out[t] = idx[np.argsort(-before[idx], kind="stable")][:shortlist]
    return out


def fingerprint(rec: dict) -> np.ndarray:
    return np.array([c["fp"] for c in rec["candidates"]], dtype=np.float64)


def missing(rec: dict, fw: dict, shortlist: int, before: np.ndarray) -> set[str]:
    """The structures of ``rec``'s shortlists under ``before`` whose forward score ``fw`` lacks."""
    return {rec["candidates"][i]["k"] for rows in shortlists(rec, shortlist, before).values() for i in rows
            if rec["candidates"][i]["k"] not in fw}


def suspect_scores(rec: dict, fw: dict, weight: float, shortlist: int, analog: np.ndarray, v: float
                   ) -> dict[str, np.ndarray]:
    """Per track, the suspect order's score as :meth:`CandidatePool.rank` computes it: fingerprint + ``v ·``
    analog score; then ``weight ·`` the forward score for the first ``shortlist`` by that, the lowest of theirs
    for the rest and for an unscorable one."""
    before = fingerprint(rec) + v * analog
    out = {}
    for t, order in shortlists(rec, shortlist, before).items():
        vals = np.array([np.nan if fw.get(rec["candidates"][i]["k"]) is None else fw[rec["candidates"][i]["k"]]
                         for i in order])
        finite = np.isfinite(vals)
        score = before.copy()
        if weight > 0 and finite.any():
            low = vals[finite].min()
            score = before + weight * low
            score[order] = before[order] + weight * np.where(finite, vals, low)
        out[t] = score
    return out


def complete_scores(model, records: dict, spectra: dict, need: dict[str, set[str]], path: Path, eps: float,
                    intensity_weight: float) -> None:
    """Compute the forward scores ``need`` names (pool key -> structure keys) and append them to ``path``, in
    ``training.studies.retrieval_forward``'s ``forward_scores.jsonl`` format."""
    import torch

    from training.studies.retrieval_forward import forward_scorer

    need = {k: v for k, v in need.items() if v}
    if not need:
        return
    print(f"forward scores of {sum(map(len, need.values()))} structures of {len(need)} pools", flush=True)
    torch.set_num_threads(1)
    with torch.no_grad():
        for key, todo in need.items():
            scorer = forward_scorer(model, spectra[key], eps, intensity_weight)
            smiles = {c["k"]: c["s"] for c in records[key]["candidates"]}
            t0 = time.perf_counter()
            fw = {}
            for k in sorted(todo):
                s = scorer.score(smiles[k])
                fw[k] = None if s is None else round(s, 4)
            line = {"key": key, "k": 0, "fw": fw, "seconds": time.perf_counter() - t0}
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")


def hits_table(scores: dict, records: dict, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """``{track: (pools, len(KS)) array}`` of library-alone Hit@k under ``scores`` (pool key -> track -> score)."""
    out = {}
    for t in TRACKS:
        rows = []
        for k in keys:
            rec = records[k]
            cands = rec["candidates"]
            truth = [c["k"] for c in cands].index(rec["truth"]["inchikey14"])
            mask = np.array([bool(c.get(t[0] + "l")) for c in cands])
            rows.append([hit_at(scores[k][t], truth, mask, kk) for kk in KS])
        out[t] = np.asarray(rows)
    return out


def mean_hit1(table: dict) -> float:
    return float(np.mean([table[t][:, 0].mean() for t in TRACKS]))


def _best(grid: dict, tiebreak) -> tuple:
    """The key of ``grid`` with the best mean Hit@1 over both tracks, then Hit@5, then the least ``tiebreak(key)``."""
    def key(item):
        setting, table = item
        return (-round(mean_hit1(table), 10), -round(float(np.mean([table[t][:, 1].mean() for t in TRACKS])), 10),
                *tiebreak(setting))
    return min(grid.items(), key=key)[0]


def choose(grid: dict) -> tuple[int, float]:
    """The ``(H, v)`` of the best mean Hit@1 over both tracks, then Hit@5, then the smaller v and H."""
    return _best(grid, lambda g: (g[1], g[0]))


def choose_fragment(grid: dict) -> tuple[float, int, float]:
    """The ``(w, shortlist, v)`` of the best mean Hit@1 over both tracks, then Hit@5, then the smaller v, w and
    shortlist."""
    return _best(grid, lambda g: (g[2], g[0], g[1]))


def fragment_grid(records: dict, fw: dict, analog: dict[str, np.ndarray], keys: dict[str, list[str]],
                  weights: Sequence[float], lengths: Sequence[int], vs: Sequence[float]) -> dict[str, dict]:
    """Per set, ``{(w, shortlist, v): Hit@k table}`` of the suspect order at fragment weight ``w``, fragment
    shortlist and analog weight ``v`` (the analog scores ``analog`` fixed: one H)."""
    out: dict[str, dict] = {label: {} for label in keys}
    for w in weights:
        for n in lengths:
            for v in vs:
                scores = {k: suspect_scores(rec, fw[k], w, n, analog[k], v) for k, rec in records.items()}
                for label, ks in keys.items():
                    out[label][(w, n, v)] = hits_table(scores, records, ks)
    return out


def paired(a: dict, b: dict, col: int = 0) -> dict:
    """Per track and for the mean of both: B − A of Hit@KS[col] with its paired bootstrap 95% interval."""
    out = {}
    for name, diff in [*((t, b[t][:, col] - a[t][:, col]) for t in TRACKS),
                       ("mean", np.mean([b[t][:, col] - a[t][:, col] for t in TRACKS], axis=0))]:
        lo, hi = ci95(diff)
        out[name] = [100 * float(diff.mean()), 100 * lo, 100 * hi]
    return out
