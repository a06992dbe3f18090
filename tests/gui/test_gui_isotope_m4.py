"""The Formulas tab's isotope plot shows the observed bars to M+4 of a Cl3 precursor (issue #56, item 3): the
37Cl2 M+4 and M+5 peaks of a survey scan read 2 mDa light (a TripleTOF) are bars beside the theoretical ones."""

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from engine.chem.adducts import parse_adduct
from engine.chem.formula import parse_formula
from engine.formulas.candidates import isotope_comparison
from engine.spectra.features import MS1Evidence
from engine.spectra.isotopes import isotope_pattern
from msgpt_gui.logic.plotting import ANNOTATED_COLOR

FLUOPICOLIDE = "C14H8Cl3F3N2O"


def test_the_isotope_plot_shows_the_observed_m4_of_three_chlorines(qtbot):
    from msgpt_gui.formula_plots import IsotopeCanvas

    mz, abundance = isotope_pattern(parse_adduct("[M+H]+").ion_counts(parse_formula(FLUOPICOLIDE)), 6, charge=1)
    mz = mz + np.r_[0.0, 0.0, np.full(4, -0.002)]  # M+2 .. M+5 read 2 mDa light
    ms1 = MS1Evidence(scan_id="s1", retention_time=None, precursor_mz=float(mz[0]), precursor_intensity=1e6,
                      mz=np.r_[mz[0] - 20.0, mz], intensity=np.r_[1e4, abundance * 1e6])
    match = isotope_comparison((FLUOPICOLIDE, "[M+H]+"), ms1, ms1.precursor_mz)
    assert match.observed[4] == pytest.approx(abundance[4], rel=1e-3) and match.observed[5] > 0.04
    canvas = IsotopeCanvas()
    qtbot.addWidget(canvas)
    canvas.show_match(match, survey=(ms1.mz, ms1.intensity), label=f"{FLUOPICOLIDE} [M+H]+")
    observed = sorted((p.get_x() + p.get_width() / 2, p.get_height()) for p in canvas.ax.patches
                      if p.get_facecolor() == to_rgba(ANNOTATED_COLOR))
    assert len(observed) == 6
    heights = [h for _, h in observed]
    assert heights[4] == pytest.approx(100.0 * abundance[4], rel=1e-3)  # the M+4 bar (32 % of M)
    assert heights[5] == pytest.approx(100.0 * abundance[5], rel=1e-3)
    assert "M+4" in [t.get_text() for t in canvas.ax.texts]
