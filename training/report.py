"""Markdown report and matplotlib figures of an evaluation (see :mod:`training.evaluate`).

Everything is drawn from ``metrics.json``, so a report can be rebuilt without re-running anything::

    python -m training.report eval/          # rewrites eval/report.md and eval/figures/*.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LABELS = {
    "oracle": "Oracle fingerprint (decoder alone)",
    "point": "Point query, κ=1.00",
    "f1": "Point query, F1-optimal t",
    "cosine": "Point query, cosine-optimal t",
    "outer": "Outer-band querying",
    "band": "Band querying (base)",
    "band+adapter": "Band querying + adapter",
}


def label(variant: str) -> str:
    if variant.startswith("band@B="):
        return f"Band, B={variant.split('=')[1]}"
    return LABELS.get(variant, variant)


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def main_table(variants: dict) -> str:
    rows = ["| variant | Top-1 acc. % | Top-10 acc. % | Top-1 / Top-10 Tanimoto | Top-1 / Top-10 %CM | "
            "valid % | formula-consistent % | s / spectrum | n |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v, m in variants.items():
        if v.startswith("band@B="):
            continue
        rows.append(
            f"| {label(v)} | {pct(m['top1_accuracy'])} | {pct(m['top10_accuracy'])} | "
            f"{m['top1_tanimoto']:.3f} / {m['top10_tanimoto']:.3f} | "
            f"{pct(m['top1_close_match'])} / {pct(m['top10_close_match'])} | {pct(m['valid_yield'])} | "
            f"{pct(m['formula_consistent_yield'])} | {m['seconds_per_spectrum']:.2f} | {m['n']} |")
    if any("top1_mces" in m for m in variants.values()):
        rows += ["", "| variant | Top-1 MCES | Top-10 MCES |", "| --- | ---: | ---: |"]
        rows += [f"| {label(v)} | {m['top1_mces']:.2f} | {m['top10_mces']:.2f} |"
                 for v, m in variants.items() if "top1_mces" in m]
    return "\n".join(rows)


def bins_table(bins: dict) -> str:
    names = ("low", "mid", "high")
    rows = ["| variant | " + " | ".join(f"{n} (T_c {r}): share, Top-1 / Top-10 %" for n, r in
                                         zip(names, ("< 0.5", "0.5–0.7", "≥ 0.7"))) + " |",
            "| --- | " + " | ".join("---:" for _ in names) + " |"]
    for v, per in bins.items():
        if v.startswith("band@B="):
            continue
        cells = []
        for n in names:
            b = per[n]
            cells.append(f"{pct(b['share'])}%: {pct(b.get('top1_accuracy', 0))} / {pct(b.get('top10_accuracy', 0))}"
                         if b.get("n") else f"{pct(b['share'])}%: –")
        rows.append(f"| {label(v)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def sweep_table(sweep: list[dict]) -> str:
    rows = ["| κ | t_κ | mean active bits | mean fidelity | low % | mid % | high % |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows += [f"| {r['kappa']:.2f} | {r['threshold']:.4f} | {r['mean_active_bits']:.1f} | {r['mean_fidelity']:.3f} | "
             f"{pct(r['share_low'])} | {pct(r['share_mid'])} | {pct(r['share_high'])} |" for r in sweep]
    return "\n".join(rows)


def scaling_table(variants: dict) -> str:
    rows = ["| B | Top-1 acc. % | Top-10 acc. % | Top-10 Tanimoto | s / spectrum (cumulative) |",
            "| ---: | ---: | ---: | ---: | ---: |"]
    for v, m in variants.items():
        if v.startswith("band@B="):
            rows.append(f"| {v.split('=')[1]} | {pct(m['top1_accuracy'])} | {pct(m['top10_accuracy'])} | "
                        f"{m['top10_tanimoto']:.3f} | {m['seconds_per_spectrum']:.2f} |")
    return "\n".join(rows)


def figures(out: Path, metrics: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    made = []
    variants = {v: m for v, m in metrics["variants"].items() if not v.startswith("band@B=")}

    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(variants)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [100 * variants[v]["top1_accuracy"] for v in names], 0.4, label="Top-1")
    ax.bar([i + 0.2 for i in x], [100 * variants[v]["top10_accuracy"] for v in names], 0.4, label="Top-10")
    ax.set_xticks(list(x), [label(v).replace(" (", "\n(").replace(", ", ",\n") for v in names], fontsize=7)
    ax.set_ylabel("exact match (%)")
    ax.legend(frameon=False)
    ax.set_title("Exact-match accuracy by variant", fontsize=10)
    fig.tight_layout()
    fig.savefig(fig_dir / "accuracy_by_variant.png", dpi=130)
    plt.close(fig)
    made.append("accuracy_by_variant.png")

    bins = {v: b for v, b in metrics["fidelity_bins"].items() if v in ("point", "band", "band+adapter")}
    if bins:  # the paper's figure: dark segment Top-1, total bar Top-10, per fidelity bin
        fig, ax = plt.subplots(figsize=(6, 3.2))
        width = 0.8 / len(bins)
        for j, (v, per) in enumerate(bins.items()):
            xs = [i + (j - (len(bins) - 1) / 2) * width for i in range(3)]
            top10 = [100 * per[n].get("top10_accuracy", 0) for n in ("low", "mid", "high")]
            top1 = [100 * per[n].get("top1_accuracy", 0) for n in ("low", "mid", "high")]
            bars = ax.bar(xs, top10, width * 0.95, alpha=0.45, label=f"{label(v)}: Top-10")
            ax.bar(xs, top1, width * 0.95, color=bars.patches[0].get_facecolor()[:3], label=f"{label(v)}: Top-1")
        first = next(iter(bins.values()))
        ax.set_xticks(range(3), [f"{n} ({pct(first[n]['share'])}%)" for n in ("low", "mid", "high")])
        ax.set_xlabel("posterior fidelity bin (share of spectra)")
        ax.set_ylabel("exact match (%)")
        ax.legend(frameon=False, fontsize=7)
        fig.tight_layout()
        fig.savefig(fig_dir / "fidelity_bins.png", dpi=130)
        plt.close(fig)
        made.append("fidelity_bins.png")

    sweep = metrics.get("kappa_sweep") or []
    if sweep:
        k = [r["kappa"] for r in sweep]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.2))
        for name in ("low", "mid", "high"):
            a1.plot(k, [100 * r[f"share_{name}"] for r in sweep], marker="o", ms=3, label=name)
        a2.plot(k, [r["mean_active_bits"] for r in sweep], marker="o", ms=3, color="k")
        lo, hi = metrics["parameters"]["kappa_band"]
        for a in (a1, a2):
            a.axvspan(lo, hi, color="0.9")
            a.axvline(1.0, ls="--", color="0.5", lw=1)
            a.set_xlabel("density ratio κ")
        a1.set_ylabel("share of spectra (%)")
        a1.legend(title="fidelity", frameon=False, fontsize=8)
        a2.set_ylabel("mean active query bits")
        fig.tight_layout()
        fig.savefig(fig_dir / "kappa_sweep.png", dpi=130)
        plt.close(fig)
        made.append("kappa_sweep.png")

    scaling = [(int(v.split("=")[1]), m) for v, m in metrics["variants"].items() if v.startswith("band@B=")]
    if scaling:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.plot([b for b, _ in scaling], [100 * m["top10_accuracy"] for _, m in scaling], marker="o", label="Top-10")
        ax.plot([b for b, _ in scaling], [100 * m["top1_accuracy"] for _, m in scaling], marker="o", label="Top-1")
        ax.set_xlabel("candidate pool size B (M fixed)")
        ax.set_ylabel("exact match (%)")
        ax.legend(frameon=False)
        fig.tight_layout()
        fig.savefig(fig_dir / "pool_scaling.png", dpi=130)
        plt.close(fig)
        made.append("pool_scaling.png")
    return made


def render(metrics: dict, figs: list[str]) -> str:
    d, m, p, t = metrics["data"], metrics["model"], metrics["parameters"], metrics["point_thresholds"]
    lines = [
        "# MS-GPT evaluation", "",
        f"- Model: `{m['name']}` (checksum `{m['checksum'][:16]}`, decoder {m['precision']}), `{m['path']}`",
        f"- Data: `{Path(d['mgf']).name}`, folds {', '.join(d['folds']) or 'all'}, licenses "
        f"{', '.join(d['licenses']) if d['licenses'] else 'all'}; {d['eligible']} eligible spectra, {d['selected']} "
        f"evaluated ({'one random spectrum per structure, ' if d['one_per_structure'] else ''}"
        "seeded subsample" + (f" of at most {d['max_spectra']}" if d["max_spectra"] else "") + ").",
        f"- Query settings: κ band {p['kappa_band']}, M={p['groups']}, B={p['pool_size']}, temperature "
        f"{p['temperature']}, top-k {p['top_k']}, top-p {p['top_p']}, seed {p['seed']}.",
        f"- Point-query thresholds: κ=1.00 → t={t['kappa_1.0']:.4f}; F1-optimal t={t['f1_threshold']:.4f} "
        f"(mean F1 {t['f1_score']:.3f}); cosine-optimal t={t['cosine_threshold']:.4f} (mean cosine "
        f"{t['cosine_score']:.3f}), both chosen on the posteriors of all eligible spectra.",
        f"- Machine: {metrics['machine']}.",
    ]
    if metrics.get("skipped_variants"):
        lines.append(f"- Not run: {', '.join(metrics['skipped_variants'])} (the bundle has no adapter).")
    lines += ["", "## Accuracy, similarity, yield and speed", "", main_table(metrics["variants"]), "",
              "Top-k accuracy: the reference's first InChIKey block among the top k; Tanimoto: best Morgan "
              "(r=2, 4096 bits) similarity among the top k (0 without candidates); %CM: a top-k candidate with "
              "RDKit topological-fingerprint Tanimoto ≥ 0.675; yields are shares of all B samples.", ""]
    if "accuracy_by_variant.png" in figs:
        lines += ["![accuracy by variant](figures/accuracy_by_variant.png)", ""]
    if metrics.get("fidelity_bins"):
        lines += ["## Posterior fidelity", "",
                  "T_c: the largest Morgan Tanimoto between the reference fingerprint and any of the band's "
                  "queries.", "", bins_table(metrics["fidelity_bins"]), ""]
        if "fidelity_bins.png" in figs:
            lines += ["![fidelity bins](figures/fidelity_bins.png)", ""]
    if metrics.get("kappa_sweep"):
        lines += ["## κ diagnostic sweep (encoder only)", "",
                  "The single query at t_κ for every eligible spectrum: fidelity-bin shares and mean active bits.",
                  "", sweep_table(metrics["kappa_sweep"]), ""]
        if "kappa_sweep.png" in figs:
            lines += ["![kappa sweep](figures/kappa_sweep.png)", ""]
    if any(v.startswith("band@B=") for v in metrics["variants"]):
        lines += ["## Candidate-pool scaling", "", f"Band querying with M={p['groups']} fixed, adapter on where the "
                  "bundle has one; each B reuses the samples of the smaller pools.", "",
                  scaling_table(metrics["variants"]), ""]
        if "pool_scaling.png" in figs:
            lines += ["![pool scaling](figures/pool_scaling.png)", ""]
    return "\n".join(lines)


def write_report(out: Path, metrics: dict) -> Path:
    figs = figures(out, metrics)
    path = out / "report.md"
    path.write_text(render(metrics, figs), encoding="utf-8")
    return path


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m training.report EVAL_DIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    metrics = json.loads((out / "metrics.json").read_text())
    print(write_report(out, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
