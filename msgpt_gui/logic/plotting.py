"""Spectrum plots with matplotlib only (no Qt): they work in a script, a notebook and the app alike.

Like spectrum_utils' ``plot`` module, every function draws on the ``ax`` it is given (or on
``plt.gca()`` when ``ax`` is None), never creates a figure of its own, and returns ``ax``::

    from engine.spectra.io import read_spectra
    from engine.spectra.annotate import annotate_spectrum
    from msgpt_gui.logic.plotting import plot_spectrum  # plot_isotopes, plot_mirror, plot_recalibration alike

    spectrum = read_spectra("spectra.mgf")[0][0]
    ax = plot_spectrum(spectrum, annotate_spectrum(spectrum))
    ax.figure.savefig("spectrum.png")
"""

from __future__ import annotations

import numpy as np

# Colours chemists know from spectrum viewers: explained peaks coloured, the rest grey.
ANNOTATED_COLOR = "#1f77b4"
UNANNOTATED_COLOR = "#9a9a9a"
PRECURSOR_COLOR = "#d62728"


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        ax = plt.gca()
    return ax


def plot_spectrum(
    spectrum,
    annotation=None,
    ax=None,
    *,
    max_labels: int = 12,
    min_label_intensity: float = 0.02,
    show_precursor: bool = True,
    title: str | None = None,
    fontsize: float = 8.0,
):
    """Stick plot of ``spectrum`` (intensities relative to the base peak, in %).

    ``annotation`` (an :class:`engine.spectra.annotate.Annotation` of the same peaks) colours explained
    peaks and labels up to ``max_labels`` of the most intense of them (at least
    ``min_label_intensity`` of the base peak) with their ion subformula. The precursor m/z is
    marked with a dashed line and a triangle. ``spectrum`` may be any object with ``mz`` and
    ``intensity``; without a ``precursor_mz`` (or with None: a record that gives none) only the
    peaks are drawn. Returns ``ax``.
    """
    ax = _axes(ax)
    precursor = getattr(spectrum, "precursor_mz", None)
    precursor = None if precursor is None else float(precursor)
    mz = np.asarray(spectrum.mz, dtype=float)
    intensity = np.asarray(spectrum.intensity, dtype=float)
    top = intensity.max(initial=0.0)
    rel = intensity / top * 100.0 if top > 0 else np.zeros_like(intensity)

    matched = np.zeros(mz.size, dtype=bool)
    labels: tuple = (None,) * mz.size
    if annotation is not None and len(annotation.mz) == mz.size:
        matched = np.asarray(annotation.matched, dtype=bool)
        labels = annotation.ion_formula

    if (~matched).any():
        ax.vlines(mz[~matched], 0, rel[~matched], colors=UNANNOTATED_COLOR, linewidth=1.2, zorder=2,
                  label="not explained" if matched.any() else "peaks")
    if matched.any():
        ax.vlines(mz[matched], 0, rel[matched], colors=ANNOTATED_COLOR, linewidth=1.6, zorder=3,
                  label="explained by a subformula")
        span = max(float(mz.max(initial=0.0) - mz.min(initial=0.0)), (precursor or 0.0) * 0.2, 1.0)
        order = _label_order(mz, rel, matched, max_labels, min_label_intensity * 100, min_gap=span * 0.012)
        for i in order:
            ax.annotate(
                _pretty_formula(labels[i]),
                (mz[i], rel[i]),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                rotation=90,
                fontsize=fontsize,
                color=ANNOTATED_COLOR,
                zorder=4,
                annotation_clip=True,
            )

    if show_precursor and precursor is not None:
        near = np.abs(mz - precursor) <= max(0.01, precursor * 10e-6)
        if not near.any():  # no precursor peak left: a dashed line shows where it would be
            ax.vlines(precursor, 0, 100, colors=PRECURSOR_COLOR, linestyles="--", linewidth=1.0, alpha=0.6, zorder=1)
        ax.plot([precursor], [0], marker="^", markersize=8, color=PRECURSOR_COLOR, clip_on=False, zorder=5,
                linestyle="none", label=f"precursor m/z {precursor:.4f}")

    ends = ([precursor] if precursor is not None else []) + ([float(mz.min()), float(mz.max())] if mz.size else [])
    lo, hi = (min(ends), max(ends)) if ends else (0.0, 100.0)
    pad = max((hi - lo) * 0.05, 5.0)
    ax.set_xlim(max(lo - pad, 0.0), hi + pad)
    ax.set_ylim(0, 140 if matched.any() else 105)  # room above the base peak for its label
    ax.set_yticks([0, 20, 40, 60, 80, 100])
    ax.set_xlabel("m/z")
    ax.set_ylabel("Intensity (%)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.6)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=fontsize + 2, loc="left")
    handles, names = ax.get_legend_handles_labels()
    if names:
        ax.legend(handles, names, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(names), fontsize=fontsize,
                  frameon=False, borderaxespad=0.2, handlelength=1.2, columnspacing=1.2)
    return ax


def _label_order(mz, rel, matched, max_labels: int, min_rel: float, min_gap: float) -> list[int]:
    """Most intense explained peaks first, skipping those too close (in m/z) to one already labelled."""
    chosen: list[int] = []
    for i in np.argsort(-rel, kind="stable"):
        if len(chosen) >= max_labels:
            break
        if matched[i] and rel[i] >= min_rel and all(abs(mz[i] - mz[j]) >= min_gap for j in chosen):
            chosen.append(int(i))
    return chosen


def _pretty_formula(formula: str | None) -> str:
    """``C9H9O+`` → mathtext with subscripts (``C$_9$H$_9$O$^+$``) for labels."""
    if not formula:
        return ""
    out = []
    charge = ""
    body = formula
    while body and body[-1] in "+-":
        charge = body[-1] + charge
        body = body[:-1]
    i = 0
    while i < len(body):
        ch = body[i]
        if ch.isdigit():
            j = i
            while j < len(body) and body[j].isdigit():
                j += 1
            out.append(f"$_{{{body[i:j]}}}$")
            i = j
        else:
            out.append(ch)
            i += 1
    if charge:
        out.append(f"$^{{{charge}}}$")
    return "".join(out)


def plot_isotopes(
    match,
    ax=None,
    *,
    survey=None,
    label: str = "theoretical",
    title: str | None = None,
    fontsize: float = 8.0,
    legend: bool = True,
):
    """The precursor's MS1 isotope peaks beside a formula's theoretical pattern (in % of the M peak).

    ``match`` is an :class:`engine.spectra.isotopes.IsotopeMatch` (e.g. from
    :func:`engine.formulas.candidates.isotope_comparison`): at each of M, M+1, M+2, ... a bar of the observed
    intensity (blue, summed over the fine structure: 13C, 37Cl, 81Br and 34S alike) stands beside the
    theoretical abundance (red outline; dashed where the scan could not have shown it). ``survey`` (the
    survey scan's ``(mz, intensity)`` near the precursor, optional) adds its peaks as thin grey sticks.
    ``label`` names the theoretical pattern in the legend (the formula). ``legend`` False: no legend, and the m/z
    ticks slanted (a small plot, whose colours are said beside it). Returns ``ax``.
    """
    ax = _axes(ax)
    theo_mz = np.asarray(match.theoretical_mz, dtype=float)
    theo = np.asarray(match.theoretical, dtype=float) * 100.0
    observed = np.asarray(match.observed, dtype=float) * 100.0
    detectable = np.asarray(match.detectable, dtype=bool)
    width = 0.28
    if survey is not None:
        mz, intensity = (np.asarray(a, dtype=float) for a in survey)
        anchor = _anchor_intensity(mz, intensity, float(theo_mz[0]))
        if anchor > 0:
            near = (mz >= theo_mz[0] - 1.5) & (mz <= theo_mz[-1] + 1.5)
            ax.vlines(mz[near], 0, intensity[near] / anchor * 100.0, colors=UNANNOTATED_COLOR, linewidth=0.8,
                      zorder=1, label="survey scan")
    ax.bar(theo_mz - width / 2, observed, width=width, color=ANNOTATED_COLOR, zorder=3, label="observed")
    for shown, style, name in ((detectable, "-", label), (~detectable, "--", "below the scan's detection limit")):
        if shown.any():
            ax.bar(theo_mz[shown] + width / 2, theo[shown], width=width, facecolor="none", edgecolor=PRECURSOR_COLOR,
                   linewidth=1.3, linestyle=style, zorder=3, label=name)
    top = max(float(np.max(theo, initial=0.0)), float(np.max(observed, initial=0.0)), 1.0)
    for k, x in enumerate(theo_mz):
        name = "M" if k == 0 else f"M+{k}"
        ax.annotate(name, (x, max(theo[k], observed[k])), xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=fontsize, color="#444444")
    ax.set_xlim(theo_mz[0] - 0.8, theo_mz[-1] + 0.8)
    ax.set_ylim(0, top * 1.18)
    ax.set_xticks(theo_mz)
    ax.set_xticklabels([f"{x:.3f}" for x in theo_mz], fontsize=fontsize - 0.5, rotation=0 if legend else 30,
                       ha="center" if legend else "right")
    ax.set_xlabel("m/z")
    ax.set_ylabel("% of M")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.6)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=fontsize + 1, loc="left")
    if legend:
        ax.legend(loc="upper right", fontsize=fontsize, frameon=False, handlelength=1.2)
    return ax


def _anchor_intensity(mz: np.ndarray, intensity: np.ndarray, target: float, tol: float = 0.01) -> float:
    """The most intense peak within ``tol`` of ``target`` (0 when none)."""
    near = np.abs(mz - target) <= tol
    return float(intensity[near].max()) if near.any() else 0.0


MATCHED_QUERY_COLOR = "#1f77b4"
MATCHED_REFERENCE_COLOR = "#2ca02c"


def find_hit(matches, candidate):
    """The hit of ``matches`` (:class:`engine.spectral_library.SpectralMatches`) that stands behind ``candidate``:
    the reference its spectral evidence names (by accession), else the best hit of its structure (first
    InChIKey block); None when no hit is of it."""
    if matches is None or candidate is None:
        return None
    ev = getattr(candidate, "spectral", None)
    if ev is not None and ev.accession:
        for hit in matches.hits:
            if hit.reference.accession == ev.accession and hit.reference.library == ev.library:
                return hit
    return next((h for h in matches.hits if h.reference.inchikey14 and
                 h.reference.inchikey14 == candidate.inchikey14), None)


def plot_mirror(matches, hit, ax=None, *, title: str | None = None, fontsize: float = 8.0):
    """Mirror plot of a spectral library hit: the query's cleaned peaks up, the reference's down (in % of each
    one's base peak); the peak pairs the similarity counted (``hit.fragment_pairs``) coloured, the rest grey, and
    the similarity and matched peaks in the corner. ``matches`` is the
    :class:`engine.spectral_library.SpectralMatches` the hit belongs to (its ``query_mz`` / ``query_intensity``).
    Returns ``ax``."""
    ax = _axes(ax)
    qmz = np.asarray(matches.query_mz, dtype=float)
    qint = np.asarray(matches.query_intensity, dtype=float)
    rmz = np.asarray(hit.reference_mz, dtype=float)
    rint = np.asarray(hit.reference_intensity, dtype=float)
    qrel = qint / qint.max(initial=0.0) * 100.0 if qint.size and qint.max() > 0 else np.zeros_like(qint)
    rrel = rint / rint.max(initial=0.0) * 100.0 if rint.size and rint.max() > 0 else np.zeros_like(rint)
    pairs = np.asarray(hit.fragment_pairs, dtype=int).reshape(-1, 2)
    q_matched = np.zeros(qmz.size, dtype=bool)
    r_matched = np.zeros(rmz.size, dtype=bool)
    q_matched[pairs[:, 0][pairs[:, 0] < qmz.size]] = True
    r_matched[pairs[:, 1][pairs[:, 1] < rmz.size]] = True
    for mz, rel, matched, sign, color, name in (
            (qmz, qrel, q_matched, 1.0, MATCHED_QUERY_COLOR, "query"),
            (rmz, rrel, r_matched, -1.0, MATCHED_REFERENCE_COLOR, "reference")):
        if (~matched).any():
            ax.vlines(mz[~matched], 0, sign * rel[~matched], colors=UNANNOTATED_COLOR, linewidth=1.0, zorder=2)
        if matched.any():
            ax.vlines(mz[matched], 0, sign * rel[matched], colors=color, linewidth=1.6, zorder=3,
                      label=f"{name}: matched peaks")
    ax.axhline(0, color="#444444", linewidth=0.8, zorder=4)
    ends = [float(a.min()) for a in (qmz, rmz) if a.size] + [float(a.max()) for a in (qmz, rmz) if a.size]
    lo, hi = (min(ends), max(ends)) if ends else (0.0, 100.0)
    pad = max((hi - lo) * 0.05, 5.0)
    ax.set_xlim(max(lo - pad, 0.0), hi + pad)
    ax.set_ylim(-115, 115)
    ax.set_yticks([-100, -50, 0, 50, 100])
    ax.set_yticklabels(["100", "50", "0", "50", "100"])
    ax.set_xlabel("m/z")
    ax.set_ylabel("Intensity (%)")
    ax.spines[["top", "right"]].set_visible(False)
    ref = hit.reference
    ax.text(0.01, 0.98, "query", transform=ax.transAxes, ha="left", va="top", fontsize=fontsize,
            color=MATCHED_QUERY_COLOR)
    ax.text(0.01, 0.02, f"reference {ref.accession}" + (f" · {ref.name}" if ref.name else ""),
            transform=ax.transAxes, ha="left", va="bottom", fontsize=fontsize, color=MATCHED_REFERENCE_COLOR)
    ax.text(0.99, 0.98, f"similarity {hit.similarity:.2f}\n{hit.matched_peaks} matched peaks",
            transform=ax.transAxes, ha="right", va="top", fontsize=fontsize)
    if title:
        ax.set_title(title, fontsize=fontsize + 1, loc="left")
    return ax


FRAGMENT_POINT_COLOR = "#8c8c8c"


def recalibration_caption(recal) -> list[str]:
    """What a recalibration plot says in words: its points, the correction taken out, the scatter (one line each)."""
    n_prec = int(np.asarray(recal.points_precursor, dtype=bool).sum())
    n = len(recal.points_mz)
    lines = ([f"{n} points: {n_prec} precursors, {n - n_prec} fragments"] if n
             else [f"no points: {recal.note or recal.source}"])
    if recal.applied:
        lines.append(f"{recal.offset_ppm:+.1f} ppm at m/z 500, {recal.slope_ppm:+.1f} ppm/1000 m/z")
    if recal.scatter_ppm is not None:
        lines.append(f"scatter {recal.scatter_ppm:.1f} ppm")
    return lines


def plot_recalibration(recal, ax=None, *, mz_range: tuple[float, float] = (100.0, 1000.0), title: str | None = None,
                       fontsize: float = 8.0, legend: bool = True, caption: bool = True):
    """A run's m/z error (ppm) against m/z: the points it was measured from (precursors red, fragment peaks grey)
    and the line taken out (``recal.ppm``: flat beyond the m/z the slope was fitted on); the number of points and
    the fit are said under ``title``. ``recal`` is an :class:`engine.formulas.recalibration.Recalibration`; one without
    points (set by the user, turned off, or too few confident precursors) draws the line alone over ``mz_range``
    and says why there are no points. ``legend`` False leaves out the legend of the points and line (a narrow plot
    whose colours are said elsewhere); ``caption`` False leaves out the lines of :func:`recalibration_caption`.
    Returns ``ax``."""
    ax = _axes(ax)
    mz = np.asarray(recal.points_mz, dtype=float)
    ppm = np.asarray(recal.points_ppm, dtype=float)
    is_prec = np.asarray(recal.points_precursor, dtype=bool)
    if mz.size:
        ax.scatter(mz[~is_prec], ppm[~is_prec], s=6, color=FRAGMENT_POINT_COLOR, alpha=0.5, linewidths=0,
                   zorder=2, label="fragments")
        ax.scatter(mz[is_prec], ppm[is_prec], s=14, color=PRECURSOR_COLOR, linewidths=0, zorder=3,
                   label="precursors")
        pad = max((mz.max() - mz.min()) * 0.04, 5.0)
        lo, hi = max(float(mz.min()) - pad, 0.0), float(mz.max()) + pad
    else:
        lo, hi = mz_range
    x = np.linspace(lo, hi, 200)
    label = ("fitted line" if recal.source == "estimated" else recal.source) if recal.applied else "no correction"
    line = recal.ppm(x)
    ax.plot(x, line, color=ANNOTATED_COLOR, linewidth=1.6, zorder=4, label=label)
    ax.axhline(0, color="#444444", linewidth=0.6, zorder=1)
    ax.set_xlim(lo, hi)
    y = np.concatenate([ppm, line, [0.0]])
    span = max(float(y.max() - y.min()), 2.0)
    ax.set_ylim(float(y.min()) - (0.3 if mz.size else 0.15) * span, float(y.max()) + 0.15 * span)  # the legend below
    ax.set_xlabel("m/z")
    ax.set_ylabel("m/z error (ppm)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(color="#e6e6e6", linewidth=0.6)
    ax.set_axisbelow(True)
    lines = recalibration_caption(recal) if caption else []
    # the caption above the axes (under the title), so that it never hides a point; ``caption`` False: the caller
    # says it beside the plot (a small plot keeps its height for the data)
    if title or lines:
        ax.set_title("\n".join([title] * bool(title) + lines), fontsize=fontsize, loc="left", color="#333333")
    if mz.size and legend:  # the line alone needs no legend: the caption says what it is
        ax.legend(loc="lower center", ncol=3, fontsize=fontsize, frameon=False, handlelength=1.0,
                  handletextpad=0.3, columnspacing=0.8, borderaxespad=0.2, markerscale=1.5)
    return ax
