"""Metrics, Markdown report and figures of an evaluation folder (see :mod:`training.evaluation.evaluate`).

Everything is computed from ``run.json`` and ``results.jsonl``, so a report can be rebuilt, or a run
reanalysed, without sampling anything::

    python -m training.evaluation.report runs/eval      # rewrites metrics.json, report.md and figures/*.png

Variants are compared on the spectra every one of them has finished (all of them, unless a run was
interrupted), so the side-by-side numbers always come from the same spectra.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from training.core import metrics as M

LABELS = {
    "oracle": "Oracle fingerprint (decoder alone)",
    "point": "Point query, κ=1.00 (density match)",
    "f1": "Point query, F1-optimal t",
    "cosine": "Point query, cosine-optimal t",
    "outer": "Outer-band querying",
    "band": "Band querying (MS-GPT-Base)",
    "band+adapter": "Band querying + adapter (MS-GPT)",
}
DEFINITIONS = {
    "oracle": "the reference's true Morgan fingerprint as the only query; N = B",
    "point": "one query 1[π > t] at t = t_κ for κ = 1.00; N = B",
    "f1": "one query at the global t with the best mean per-spectrum F1 of 1[π > t] vs the true fingerprint; N = B",
    "cosine": "one query at the global t with the best mean per-spectrum cosine similarity; N = B",
    "outer": "M queries at κ drawn uniformly outside the band (from the outer range), per spectrum; N = B/M",
    "band": "M thresholds interpolated over the density band; N = B/M; adapter off",
    "band+adapter": "the same with the posterior-aligned LoRA adapter on",
}
BOOTSTRAP = 2000


def label(variant: str) -> str:
    if variant.endswith("/free"):
        return label(variant[: -len("/free")]) + ", free decoding"
    if "@B=" in variant:
        base, b = variant.split("@B=")
        return f"{LABELS.get(base, base)}, B={b}"
    return LABELS.get(variant, variant)


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def short(variant: str) -> str:
    return {"band+adapter": "band+\nadapter"}.get(variant, variant)


# -- results.jsonl ------------------------------------------------------------------------------------
def drop_cut_line(path: Path) -> None:
    """Remove a last line that an interrupted write left without its newline (new lines go after it)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_records(path: Path) -> list[dict]:
    """The records of results.jsonl; a last line cut off by an interrupted write is ignored."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


# -- aggregation -------------------------------------------------------------------------------------
def summarize(records: Sequence[dict], ks: Sequence[int] = (1, 10)) -> dict:
    """Mean metrics of the records (one per spectrum) of one variant."""
    n = len(records)
    if n == 0:
        return {"n": 0}
    out: dict = {"n": n}
    for k in ks:
        out[f"top{k}_accuracy"] = float(np.mean([M.topk_exact(r["rank"], k) for r in records]))
        out[f"top{k}_tanimoto"] = float(np.mean([M.topk_best(r["tanimoto"], k) for r in records]))
        out[f"top{k}_close_match"] = float(np.mean([M.topk_close_match(r["topological"], k) for r in records]))
        if all("mces" in r for r in records):
            out[f"top{k}_mces"] = float(np.mean([M.topk_min(r["mces"], k) for r in records]))
    if all("mces" in r for r in records):
        out["mces_failed_pairs"] = int(sum(r.get("mces_failed", 0) for r in records))
    out["valid_yield"], out["formula_consistent_yield"] = M.sample_yield(
        [r["n_samples"] for r in records], [r["n_valid"] for r in records], [r["n_formula_consistent"] for r in records])
    out["no_candidate_share"] = float(np.mean([r["n_candidates"] == 0 for r in records]))
    out["mean_candidates"] = float(np.mean([r["n_candidates"] for r in records]))
    out["mean_samples"] = float(np.mean([r["n_samples"] for r in records]))
    out["seconds_per_spectrum"] = float(np.mean([r["seconds"] for r in records]))
    out["posterior_seconds"] = float(np.mean([r.get("posterior_seconds", 0.0) for r in records]))
    out["sampling_seconds"] = float(np.mean([r.get("sampling_seconds", r["seconds"]) for r in records]))
    out["mean_query_bits"] = float(np.mean([r["mean_query_bits"] for r in records]))
    out["mean_distinct_queries"] = float(np.mean([r.get("n_queries", 1) for r in records]))
    out["mean_query_fidelity"] = float(np.mean([r["query_fidelity"] or 0.0 for r in records]))
    out["any_candidate_share"] = 1.0 - out["no_candidate_share"]
    names = [name for name in records[0].get("rankings", {}) if all(name in r.get("rankings", {}) for r in records)]
    if names:
        out["rankings"] = {name: {f"top{k}_{m}": float(np.mean([
            M.topk_exact(r["rankings"][name]["rank"], k) if m == "accuracy" else M.topk_best(r["rankings"][name]["tanimoto"], k)
            for r in records])) for k in ks for m in ("accuracy", "tanimoto")} for name in names}
    return out


def bootstrap_ci(values: np.ndarray, seed: int = 0, n: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (resampling spectra)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (n, values.size))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def uncertainty(by_variant: dict[str, list[dict]], reference: str | None) -> dict:
    """Bootstrap 95% intervals of Top-1/Top-10 accuracy per variant, and of the paired difference to
    ``reference`` (records of every variant in the same spectrum order)."""
    out = {}
    ref = by_variant.get(reference) if reference else None
    for v, recs in by_variant.items():
        row = {}
        for k in (1, 10):
            hits = np.array([M.topk_exact(r["rank"], k) for r in recs], dtype=float)
            row[f"top{k}_ci"] = bootstrap_ci(hits)
            if ref is not None and v != reference:
                base = np.array([M.topk_exact(r["rank"], k) for r in ref], dtype=float)
                row[f"top{k}_diff"] = float((hits - base).mean())
                row[f"top{k}_diff_ci"] = bootstrap_ci(hits - base)
        out[v] = row
    return out


def build_metrics(run: dict, records: Sequence[dict]) -> dict:
    """metrics.json: per-variant summaries on common spectra, fidelity bins, scaling, uncertainty, sweep."""
    selected = set(run.get("selected", []))
    by_variant: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in records:
        if not selected or r["spectrum"] in selected:
            by_variant[r["variant"]][r["spectrum"]] = r  # a rerun's record of the same pair replaces the old
    main = [v for v in (*run.get("variants", []), *M_ORDER, *(v + "/free" for v in M_ORDER))
            if v in by_variant and "@B=" not in v]
    main = list(dict.fromkeys(main))
    scaling = sorted((v for v in by_variant if "@B=" in v), key=lambda v: int(v.split("@B=")[1]))

    def common(names):
        if not names:
            return [], {}
        keys = set.intersection(*(set(by_variant[v]) for v in names))
        ordered = [k for k in run.get("selected", sorted(keys)) if k in keys] or sorted(keys)
        return ordered, {v: [by_variant[v][k] for k in ordered] for v in names}

    keys, main_records = common(main)
    scale_keys, scale_records = common(scaling)
    variants = {v: summarize(main_records[v]) for v in main}
    variants.update({v: summarize(scale_records[v]) for v in scaling})
    bins = {}
    for v, recs in main_records.items():
        per_bin = {}
        for name, *_ in M.FIDELITY_BINS:
            rs = [r for r in recs if M.fidelity_bin(r["fidelity"]) == name]
            per_bin[name] = {"share": len(rs) / max(len(recs), 1), **summarize(rs)}
        bins[v] = per_bin
    reference = "band" if "band" in main_records else next((v for v in main if v != "oracle"), None)
    sweep = run.get("kappa_sweep", {})
    data = run.get("data", {})
    for fold, rows in sweep.items():  # runs before the rows carried their n
        for r in rows:
            r.setdefault("n", data.get("sweep_only", {}).get(fold, data.get("eligible")))
    return {
        **{k: run[k] for k in ("model", "data", "parameters", "machine", "command", "code_version", "started")
           if k in run},
        "thresholds": run.get("thresholds", {}),
        "n_common_spectra": len(keys),
        "n_scaling_spectra": len(scale_keys),
        "incomplete_spectra": len(set().union(*(set(d) for d in by_variant.values())) - set(keys)) if by_variant else 0,
        "variants": variants,
        "fidelity_bins": bins,
        "uncertainty": {"reference": reference, **uncertainty(main_records, reference)},
        "kappa_sweep": sweep,
        "skipped_variants": run.get("skipped_variants", []),
        "seconds_total_last_run": run.get("seconds_total_last_run"),
    }


M_ORDER = ("oracle", "point", "f1", "cosine", "outer", "band", "band+adapter")


# -- tables ------------------------------------------------------------------------------------------
def main_table(variants: dict) -> str:
    rows = ["| variant | accuracy % (Top-1 / Top-10) | Tanimoto (Top-1 / Top-10) | %CM (Top-1 / Top-10) | valid % | "
            "formula-consistent % | no candidate % | s / spectrum | n |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v, m in variants.items():
        if "@B=" in v or not m.get("n"):
            continue
        rows.append(
            f"| {label(v)} | {pct(m['top1_accuracy'])} / {pct(m['top10_accuracy'])} | "
            f"{m['top1_tanimoto']:.3f} / {m['top10_tanimoto']:.3f} | "
            f"{pct(m['top1_close_match'])} / {pct(m['top10_close_match'])} | {pct(m['valid_yield'])} | "
            f"{pct(m['formula_consistent_yield'])} | {pct(m['no_candidate_share'])} | "
            f"{m['seconds_per_spectrum']:.2f} | {m['n']} |")
    return "\n".join(rows)


def decoding_table(variants: dict) -> str:
    """Yield, coverage and accuracy of each variant under each ranking (from the same pools)."""
    rows = ["| variant | ranking | yield % | spectra with a candidate % | distinct candidates | Top-1 / Top-10 % | "
            "Tanimoto Top-1 / Top-10 | s/spectrum |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v, x in variants.items():
        if "@B=" in v or not x.get("n"):
            continue
        for name, r in x.get("rankings", {}).items():
            rows.append(f"| {v} | {name} | {100 * x['formula_consistent_yield']:.1f} | {100 * x['any_candidate_share']:.1f} | "
                        f"{x['mean_candidates']:.1f} | {pct(r['top1_accuracy'])} / {pct(r['top10_accuracy'])} | "
                        f"{r['top1_tanimoto']:.3f} / {r['top10_tanimoto']:.3f} | {x['seconds_per_spectrum']:.2f} |")
    return "\n".join(rows)


def mces_table(variants: dict) -> str:
    rows = ["| variant | MCES Top-1 | MCES Top-10 | failed pairs |", "| --- | ---: | ---: | ---: |"]
    rows += [f"| {label(v)} | {m['top1_mces']:.2f} | {m['top10_mces']:.2f} | {m.get('mces_failed_pairs', 0)} |"
             for v, m in variants.items() if "top1_mces" in m]
    return "\n".join(rows)


def uncertainty_table(unc: dict) -> str:
    ref = unc.get("reference")
    rows = [f"| variant | Top-1 % [95% CI] | Top-10 % [95% CI] | Δ Top-1 vs {ref} [95% CI] | Δ Top-10 vs {ref} [95% CI] |",
            "| --- | ---: | ---: | ---: | ---: |"]

    def ci(x):
        return f"[{pct(x[0])}, {pct(x[1])}]"

    for v, u in unc.items():
        if v == "reference":
            continue
        diff = [f"{100 * u[f'top{k}_diff']:+.1f} {ci(u[f'top{k}_diff_ci'])}" if f"top{k}_diff" in u else "–"
                for k in (1, 10)]
        rows.append(f"| {label(v)} | {ci(u['top1_ci'])} | {ci(u['top10_ci'])} | {diff[0]} | {diff[1]} |")
    return "\n".join(rows)


def bins_table(bins: dict) -> str:
    names = ("low", "mid", "high")
    head = [f"{n} (T_c {r})" for n, r in zip(names, ("< 0.5", "0.5–0.7", "≥ 0.7"))]
    rows = ["| variant | " + " | ".join(f"{h}: Top-1 / Top-10 %" for h in head) + " |",
            "| --- | " + " | ".join("---:" for _ in names) + " |"]
    first = next(iter(bins.values()), None)
    if first:
        rows.append("| share of spectra | " + " | ".join(f"{pct(first[n]['share'])}% (n={first[n]['n']})" for n in names) + " |")
    for v, per in bins.items():
        cells = [f"{pct(per[n]['top1_accuracy'])} / {pct(per[n]['top10_accuracy'])}" if per[n].get("n") else "–"
                 for n in names]
        rows.append(f"| {label(v)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sweep_table(rows_by_fold: dict) -> str:
    folds = list(rows_by_fold)
    n = {f: f" (n={rows_by_fold[f][0]['n']})" if "n" in rows_by_fold[f][0] else "" for f in folds}
    t_head = "t_κ (positive / negative mode)" if "threshold_negative" in rows_by_fold[folds[0]][0] else "t_κ"
    rows = [f"| κ | {t_head} | " + " | ".join(f"{f}{n[f]}: bits, fidelity, low / mid / high %" for f in folds) + " |",
            "| ---: | ---: | " + " | ".join("---:" for _ in folds) + " |"]
    first = rows_by_fold[folds[0]]
    for j, r in enumerate(first):
        if round(r["kappa"] * 100) % 10:  # the table at steps of 0.1; the figure has every point
            continue
        cells = []
        for f in folds:
            x = rows_by_fold[f][j]
            cells.append(f"{x['mean_active_bits']:.1f}, {x['mean_fidelity']:.3f}, {pct(x['share_low'])} / "
                         f"{pct(x['share_mid'])} / {pct(x['share_high'])}")
        t = f"{r['threshold']:.4f}" + (f" / {r['threshold_negative']:.4f}" if "threshold_negative" in r else "")
        rows.append(f"| {r['kappa']:.2f} | {t} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def scaling_table(variants: dict, groups: int) -> str:
    rows = ["| B | N per group | accuracy % (Top-1 / Top-10) | Tanimoto (Top-1 / Top-10) | formula-consistent % | "
            "s / spectrum (cumulative) | n |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v, m in variants.items():
        if "@B=" in v and m.get("n"):
            b = int(v.split("@B=")[1])
            rows.append(f"| {b} | {b // groups} | {pct(m['top1_accuracy'])} / {pct(m['top10_accuracy'])} | "
                        f"{m['top1_tanimoto']:.3f} / {m['top10_tanimoto']:.3f} | {pct(m['formula_consistent_yield'])} | "
                        f"{m['seconds_per_spectrum']:.2f} | {m['n']} |")
    return "\n".join(rows)


# -- figures -----------------------------------------------------------------------------------------
def figures(out: Path, metrics: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    made = []
    variants = {v: m for v, m in metrics["variants"].items() if "@B=" not in v and m.get("n")}

    if variants:  # the ablation table as bars: accuracy, Tanimoto, %CM, Top-1 dark and Top-10 pale
        names = list(variants)
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
        for ax, (metric, title, scale) in zip(axes, (("accuracy", "exact match (%)", 100),
                                                      ("tanimoto", "Morgan Tanimoto", 1),
                                                      ("close_match", "close match, %CM (%)", 100))):
            x = np.arange(len(names))
            top10 = [scale * variants[v][f"top10_{metric}"] for v in names]
            top1 = [scale * variants[v][f"top1_{metric}"] for v in names]
            ax.bar(x, top10, 0.7, color="#9ecae1", label="Top-10")
            ax.bar(x, top1, 0.7, color="#2171b5", label="Top-1")
            ax.set_xticks(x, [short(v) for v in names], fontsize=8, rotation=30, ha="right")
            ax.set_title(title, fontsize=10)
        axes[0].legend(frameon=False, fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "variants.png", dpi=130)
        plt.close(fig)
        made.append("variants.png")

    bins = {v: b for v, b in metrics["fidelity_bins"].items() if v != "oracle"}
    if bins:  # the paper's figure: per fidelity bin, dark segment Top-1, total bar Top-10
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        width = 0.8 / len(bins)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for j, (v, per) in enumerate(bins.items()):
            xs = [i + (j - (len(bins) - 1) / 2) * width for i in range(3)]
            c = colors[j % len(colors)]
            ax.bar(xs, [100 * per[n].get("top10_accuracy", 0) for n in ("low", "mid", "high")], width * 0.92,
                   color=c, alpha=0.35)
            ax.bar(xs, [100 * per[n].get("top1_accuracy", 0) for n in ("low", "mid", "high")], width * 0.92,
                   color=c, label=short(v).replace("\n", ""))
        first = next(iter(bins.values()))
        ax.set_xticks(range(3), [f"{n} ({pct(first[n]['share'])}%)" for n in ("low", "mid", "high")])
        ax.set_xlabel("posterior fidelity bin (share of spectra); dark: Top-1, whole bar: Top-10")
        ax.set_ylabel("exact match (%)")
        ax.legend(frameon=False, fontsize=7)
        fig.tight_layout()
        fig.savefig(fig_dir / "fidelity_bins.png", dpi=130)
        plt.close(fig)
        made.append("fidelity_bins.png")

    sweep = metrics.get("kappa_sweep") or {}
    if sweep:  # the paper's four panels: low, mid, high shares and mean active bits vs κ
        fig, axes = plt.subplots(1, 4, figsize=(13, 3.1))
        lo, hi = metrics["parameters"]["kappa_band"]
        for (fold, rows), marker in zip(sweep.items(), "os^dv"):
            k = [r["kappa"] for r in rows]
            name_n = f"{fold} (n={rows[0]['n']})" if "n" in rows[0] else fold
            for ax, name in zip(axes, ("low", "mid", "high")):
                ax.plot(k, [100 * r[f"share_{name}"] for r in rows], marker=marker, ms=3, label=name_n)
            axes[3].plot(k, [r["mean_active_bits"] for r in rows], marker=marker, ms=3, label=name_n)
        for ax, title in zip(axes, ("low fidelity (<0.5) %", "mid fidelity %", "high fidelity (≥0.7) %",
                                    "mean active query bits")):
            ax.axvspan(lo, hi, color="0.9")
            ax.axvline(1.0, ls="--", color="0.5", lw=1)
            ax.set_xlabel("density ratio κ")
            ax.set_title(title, fontsize=10)
        axes[0].legend(frameon=False, fontsize=8)
        fig.tight_layout()
        fig.savefig(fig_dir / "kappa_sweep.png", dpi=130)
        plt.close(fig)
        made.append("kappa_sweep.png")

    scaling = [(int(v.split("@B=")[1]), m) for v, m in metrics["variants"].items() if "@B=" in v and m.get("n")]
    if scaling:  # accuracy vs B, and the paper's efficiency view: Top-10 vs seconds per spectrum
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.3))
        bs = [b for b, _ in scaling]
        a1.plot(bs, [100 * m["top10_accuracy"] for _, m in scaling], marker="s", ls="--", label="Top-10")
        a1.plot(bs, [100 * m["top1_accuracy"] for _, m in scaling], marker="o", label="Top-1")
        a1.set_ylim(bottom=0)
        a1.set_xlabel("candidate pool size B (M fixed)")
        a1.set_ylabel("exact match (%)")
        a1.legend(frameon=False)
        secs = [m["seconds_per_spectrum"] for _, m in scaling]
        a2.plot(secs, [100 * m["top10_accuracy"] for _, m in scaling], marker="s")
        for b, x, (_, m) in zip(bs, secs, scaling):
            a2.annotate(f"B={b}", (x, 100 * m["top10_accuracy"]), fontsize=7, xytext=(3, -9), textcoords="offset points")
        a2.set_xscale("log")
        a2.set_ylim(bottom=0)
        a2.set_xlabel("seconds per spectrum (log)")
        a2.set_ylabel("Top-10 exact match (%)")
        fig.tight_layout()
        fig.savefig(fig_dir / "pool_scaling.png", dpi=130)
        plt.close(fig)
        made.append("pool_scaling.png")
    return made


# -- the report ----------------------------------------------------------------------------------------
def render(metrics: dict, figs: list[str]) -> str:
    d, m, p, t = metrics["data"], metrics["model"], metrics["parameters"], metrics["thresholds"]
    n_per = p["pool_size"] // p["groups"]
    subsample = ("one random spectrum per structure, " if d["one_per_structure"] else "") + (
        f"seeded random subsample of at most {d['max_spectra']}" if d["max_spectra"] else "all of them")
    adapter = "has an adapter" if m.get("has_adapter") else "no adapter"
    lines = [
        "# MS-GPT evaluation", "",
        "## Setup", "",
        f"- Model: `{m['name']}`, checksum `{m['checksum'][:16]}`, "
        + (f"decoder {m['precision']} on {m.get('device', '?')}, {adapter}" if m["precision"] != "encoder only"
           else f"encoder training folder (no decoder) on {m.get('device', '?')}") + f"; `{m['path']}`.",
        f"- Data: `{Path(d['mgf']).name}`, folds {', '.join(d['folds']) or 'all'}, licenses "
        f"{', '.join(d['licenses']) if d['licenses'] else 'all'}, adducts "
        f"{', '.join(d['adducts']) if d.get('adducts') else 'all the model supports'}: {d['eligible']} eligible spectra "
        f"of {d.get('eligible_structures', '?')} structures; evaluated {d['selected']} spectra of "
        f"{d.get('selected_structures', '?')} structures ({subsample}; seed {p['seed']}); "
        f"adducts {', '.join(f'{k} {v}' for k, v in d.get('adduct_counts', {}).items())}.",
        f"- Left out: {', '.join(f'{k} {v}' for k, v in d['left_out'].items()) or 'nothing'}.",
        f"- Queries: κ band [{p['kappa_band'][0]}, {p['kappa_band'][1]}] → t ∈ [{min(t['band']):.4f}, "
        f"{max(t['band']):.4f}], M={p['groups']}, N={n_per}, B={p['pool_size']}; sampling temperature "
        f"{p['temperature']}, top-k {p['top_k']}, top-p {p['top_p']}, seed {p['seed']}; outer band drawn from "
        f"κ ∈ [{p['outer_range'][0]}, {p['outer_range'][1]}] outside the band.",
        f"- Point-query thresholds: κ=1.00 → t={t['kappa_1.0']:.4f}; F1-optimal t={t['f1_threshold']:.3f} "
        f"(mean F1 {t['f1_score']:.3f}); cosine-optimal t={t['cosine_threshold']:.3f} (mean cosine "
        f"{t['cosine_score']:.3f}); both chosen on the posteriors of all {d['eligible']} eligible spectra.",
        f"- Machine: {metrics.get('machine', '?')}. Seconds per spectrum: posterior + sampling + ranking, "
        "one spectrum at a time.",
        f"- Code: `{metrics.get('code_version', '?')}`; started {metrics.get('started', '?')}; command: "
        f"`{metrics.get('command') or '(API)'}`.",
    ]
    if metrics.get("skipped_variants"):
        lines.append(f"- Not run: {', '.join(metrics['skipped_variants'])} (the bundle has no adapter).")
    if metrics.get("incomplete_spectra"):
        lines.append(f"- {metrics['incomplete_spectra']} spectra lack some variant (interrupted run) and are "
                     "left out of the comparison.")
    main = {v: x for v, x in metrics["variants"].items() if "@B=" not in v}
    if main:
        lines += ["", "## Variants", "", "| variant | queries |", "| --- | --- |"]
        lines += [f"| {label(v)} (`{v}`) | {DEFINITIONS.get(v, '')} |" for v in main]
        lines += ["", "## Accuracy, similarity, yield and speed", "",
                  f"On the same {metrics['n_common_spectra']} spectra and seeds.", "", main_table(metrics["variants"]), "",
                  "Accuracy: the reference's first InChIKey block among the top k; Tanimoto: the best Morgan (r=2, "
                  "4096 bits) similarity among the top k, 0 without candidates; %CM: a top-k candidate with RDKit "
                  "topological-fingerprint Tanimoto ≥ 0.675; yields: shares of all samples drawn.", ""]
        if any("rankings" in x for x in main.values()):
            lines += ["### Decoding and ranking", "",
                      "Yield: valid, formula-consistent samples / B; `/free`: the paper's unconstrained decoding "
                      "(filtered afterwards), else formula-constrained decoding; every ranking re-ranks the same "
                      "pool. Rankings: `frequency` (generation count, the paper's), `fingerprint` (log-likelihood of "
                      "the candidate's fingerprint under the recalibrated posterior), `combined` (both: "
                      "fingerprint score + log count).", "", decoding_table(main), ""]
        if any("top1_mces" in x for x in main.values()):
            lines += ["MCES (myopic-mces, threshold 100, stereo-free tautomer-canonical SMILES, "
                      f"{p.get('mces_time_limit', '?')} s per pair; a failed pair scores the bond-count sum, a "
                      "spectrum without candidates 100):", "", mces_table(main), ""]
        if "variants.png" in figs:
            lines += ["![variants](figures/variants.png)", ""]
        unc = metrics.get("uncertainty", {})
        if unc.get("reference") and len(unc) > 2:
            lines += ["### Uncertainty", "",
                      f"95% bootstrap intervals over spectra ({BOOTSTRAP} resamples); Δ: paired difference to "
                      f"`{unc['reference']}` on the same spectra.", "", uncertainty_table(unc), ""]
    if metrics.get("fidelity_bins"):
        lines += ["", "## Posterior fidelity", "",
                  "T_c: the largest Morgan Tanimoto between the reference fingerprint and any of the band's "
                  "queries (the same spectrum strata for every variant).", "", bins_table(metrics["fidelity_bins"]), ""]
        if "fidelity_bins.png" in figs:
            lines += ["![fidelity bins](figures/fidelity_bins.png)", ""]
    if metrics.get("kappa_sweep"):
        lines += ["", "## κ diagnostic sweep (encoder only)", "",
                  "The single query 1[π > t_κ] of every eligible spectrum: mean active bits, mean fidelity "
                  "(Tanimoto to the true fingerprint) and fidelity-bin shares.", "",
                  sweep_table(metrics["kappa_sweep"]), ""]
        if "kappa_sweep.png" in figs:
            lines += ["![kappa sweep](figures/kappa_sweep.png)", ""]
    if any("@B=" in v for v in metrics["variants"]):
        base = next(v for v in metrics["variants"] if "@B=" in v).split("@B=")[0]
        lines += ["", "## Candidate-pool scaling", "",
                  f"{label(base)} with M={p['groups']} fixed and N = B/M growing; one pool per spectrum grows, so "
                  "each B reuses the samples of the smaller ones; seconds add up from the smallest B "
                  f"({metrics.get('n_scaling_spectra', '?')} spectra).", "", scaling_table(metrics["variants"], p["groups"]), ""]
        if "pool_scaling.png" in figs:
            lines += ["![pool scaling](figures/pool_scaling.png)", ""]
    return "\n".join(lines)


def write_report(out: str | Path) -> dict:
    """Rebuild metrics.json, report.md and figures/ of an evaluation folder; returns the metrics."""
    out = Path(out)
    run = json.loads((out / "run.json").read_text())
    records = read_records(out / "results.jsonl") if (out / "results.jsonl").exists() else []
    metrics = build_metrics(run, records)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    figs = figures(out, metrics)
    (out / "report.md").write_text(render(metrics, figs), encoding="utf-8")
    return metrics


def compare_runs(base: str | Path, other: str | Path, variant: str = "band", ranking: str | None = None) -> dict:
    """Paired comparison of one variant between two ``msgpt-eval`` runs (e.g. two models) on the spectra
    both scored: Top-1/Top-10 of each, the mean paired difference ``other - base`` and its 95% bootstrap
    interval (resampling spectra). ``ranking`` picks one of the runs' rankings (default: the shipped one).
    ``variant`` "A:B" compares variant A of ``base`` with variant B of ``other`` (e.g. "band:band+adapter":
    the base model's band against an adapted bundle's band+adapter)."""
    base_variant, _, other_variant = variant.partition(":")
    other_variant = other_variant or base_variant

    def ranks(run, name) -> dict[str, int | None]:
        out = {}
        for r in read_records(Path(run) / "results.jsonl"):
            if r["variant"] == name:
                out[r["spectrum"]] = r["rankings"][ranking]["rank"] if ranking else r["rank"]
        return out

    a, b = ranks(base, base_variant), ranks(other, other_variant)
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"the runs {base} and {other} share no spectrum of variant {variant!r}")
    row: dict = {"n": len(common), "variant": variant, "ranking": ranking or "shipped"}
    for k in (1, 10):
        x = np.array([M.topk_exact(a[s], k) for s in common], dtype=float)
        y = np.array([M.topk_exact(b[s], k) for s in common], dtype=float)
        row[f"top{k}"] = (float(x.mean()), float(y.mean()))
        row[f"top{k}_diff"] = float((y - x).mean())
        row[f"top{k}_diff_ci"] = bootstrap_ci(y - x)
    return row


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--compare"] and len(args) in (3, 4, 5):
        row = compare_runs(args[1], args[2], *args[3:])
        print(f"{row['variant']} ({row['ranking']} ranking), {row['n']} spectra in both runs:")
        for k in (1, 10):
            x, y = row[f"top{k}"]
            lo, hi = row[f"top{k}_diff_ci"]
            print(f"  Top-{k}: {pct(x)} -> {pct(y)}, difference {100 * row[f'top{k}_diff']:+.1f} points "
                  f"(paired 95% bootstrap interval [{100 * lo:+.1f}, {100 * hi:+.1f}])")
        return 0
    usage = ("usage: python -m training.evaluation.report EVAL_DIR  (a folder written by msgpt-eval, with run.json)\n"
             "       python -m training.evaluation.report --compare BASE_DIR OTHER_DIR [VARIANT [RANKING]]  (paired, "
             "e.g. two models on the same spectra)")
    if args in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(args) != 1 or not (Path(args[0]) / "run.json").is_file():
        print(usage, file=sys.stderr)
        return 2
    write_report(args[0])
    print(Path(args[0]) / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
