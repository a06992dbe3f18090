"""Should an isomer edit rank below a drawn candidate of the same fingerprint score? (issue #59, item 3)

Standard effort's edit rounds (:meth:`engine.elucidation.pipeline.SpectrumSession.edits`) add isomers no sample drew,
chosen because the fingerprint score likes them; they then compete with the drawn candidates on that same score.
A drawn candidate carries evidence an edit lacks (the decoder proposed it for this spectrum's queries), so an edit
may deserve a handicap ``δ`` (nats of fingerprint score), as a library structure no sample drew gets
``undrawn_prior``. This study draws each spectrum's standard pool once (edits on, libraries off, one thread) and
ranks it again under ``fingerprint score − δ · [edit]`` for a grid of ``δ``::

    python -m training.studies.edit_prior --mgf ../shared/data/massbank_dev.mgf.gz --out runs/edit_prior/tu \\
        --set train-unseen --max-spectra 120
    python -m training.studies.edit_prior --mgf ../shared/data/massbank_dev.mgf.gz --out runs/edit_prior/val \\
        --set val --max-spectra 100

Spectra: :func:`training.studies.deep_search_eval.select` (the same seeded one-per-structure ``[M+H]+`` selections).
Choose ``δ`` on ``train-unseen``, report on ``val``. Output: ``<out>/pools.jsonl`` (each spectrum's candidates:
InChIKey block, fingerprint score, count, edit or not; the same command again continues) and the table printed.

May import: ``engine``, ``training`` (never Qt).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DELTAS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 1e9)


def rank_of_truth(pool: dict, delta: float) -> int | None:
    """The truth's rank in ``pool`` (a line of ``pools.jsonl``) under fingerprint score − ``delta`` · [edit]; ties keep
    the pipeline's order. None when the truth is not in the pool."""
    rows = sorted(enumerate(pool["candidates"]), key=lambda ic: (-(ic[1]["fp"] - delta * ic[1]["edit"]), ic[0]))
    for rank, (_, c) in enumerate(rows, start=1):
        if c["key"] == pool["truth"]:
            return rank
    return None


def table(pools: list[dict], deltas=DELTAS) -> str:
    """Truth in pool, Top-1 and Top-10 of each ``δ`` (``1e9``: every edit after every drawn candidate)."""
    lines = [f"{len(pools)} spectra", "", "| δ (nats) | truth in pool | Top-1 | Top-10 |", "| ---: | ---: | ---: | ---: |"]
    for d in deltas:
        ranks = [rank_of_truth(p, d) for p in pools]
        label = "edits last" if d >= 1e9 else f"{d:g}"
        lines.append(f"| {label} | {sum(r is not None for r in ranks)} | {sum(r == 1 for r in ranks)} | "
                     f"{sum(r is not None and r <= 10 for r in ranks)} |")
    return "\n".join(lines)


def collect(model, pairs, path: Path) -> list[dict]:
    """Each spectrum's standard pool (edits on), appended to ``path`` as it goes; spectra already there are kept."""
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.progress import run_to_end
    from training.evaluation.evaluate import spectrum_key

    done = {}
    if path.is_file():
        done = {p["spectrum"]: p for p in map(json.loads, path.read_text().splitlines()) if p}
    with path.open("a") as fh:
        for n, (spectrum, ref) in enumerate(pairs):
            key = spectrum_key(spectrum)
            if key in done:
                continue
            result = run_to_end(SpectrumSession(model, spectrum).run(QueryParams()))
            pool = {"spectrum": key, "truth": ref.inchikey14, "candidates": [
                {"key": c.inchikey14, "fp": round(c.fingerprint_score, 4), "count": c.count,
                 "edit": int(bool(c.edited_from) and c.count == 0)} for c in result.candidates]}
            fh.write(json.dumps(pool) + "\n")
            fh.flush()
            done[key] = pool
            print(f"{n + 1}/{len(pairs)} {spectrum.id}: rank {result.reference_rank}", file=sys.stderr, flush=True)
    return [done[spectrum_key(s)] for s, _ in pairs if spectrum_key(s) in done]


def main(argv=None) -> int:
    from training.studies.deep_search_eval import open_selection, selection_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    selection_arguments(p)
    args = p.parse_args(argv)
    model, pairs, out = open_selection(args)
    pools = collect(model, pairs, out / "pools.jsonl")
    text = table(pools)
    (out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
