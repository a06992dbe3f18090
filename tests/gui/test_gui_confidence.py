"""The spectra list's Confidence column and the candidate summary (issue #17, item 4)."""

from __future__ import annotations

import math
import shutil

import pytest
from PySide6.QtCore import Qt

from engine.elucidation.pipeline import QueryParams
from engine.model.confidence import FEATURES, ConfidenceModel
from msgpt_gui.models import SORT_ROLE, SpectraModel

NICOTINE = "MSBNK-NaToxAq-NA003084"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"


# small weights: the probability stays well inside (0, 1) (about 0.4 for the tiny decoder's one-candidate pools),
# so a feature worked out wrong moves it (a saturated model gives 1.0 whatever the features)
WEIGHTS, BIAS = (0.3, 0.2, 0.1, 0.05, -0.2, 0.1), -1.0
MEAN, SCALE = (0.5, 0.5, 0.5, 10.0, 1.0, 0.5), (1.0, 1.0, 1.0, 10.0, 1.0, 1.0)


def expected_confidence(result) -> float:
    """The fixture model's probability, worked out here from the result's pool (the features as the model card
    defines them: top_share, max_share, agreement, score_gap capped at 20, log_candidates, yield)."""
    best = result.candidates[:10]
    counts = [c.count for c in best]
    n = result.n_samples
    gap = min(best[0].fingerprint_score - best[1].fingerprint_score, 20.0) if len(best) > 1 else 20.0
    x = (counts[0] / n, max(counts) / n, float(counts[0] == max(counts)), gap, math.log(len(result.candidates)),
         result.n_formula_consistent / n)
    z = BIAS + sum(w * (v - m) / s for w, v, m, s in zip(WEIGHTS, x, MEAN, SCALE))
    return 1.0 / (1.0 + math.exp(-z))


@pytest.fixture
def confident_bundle(tiny_bundle_dir, tmp_path):
    from training.calibration.confidence import _settings, save_model

    folder = tmp_path / "bundle"
    shutil.copytree(tiny_bundle_dir, folder)
    model = ConfidenceModel(WEIGHTS, BIAS, MEAN, SCALE, FEATURES, {**_settings(QueryParams()), "adapter": False})
    save_model(model, folder)
    return folder


def _run_all(qtbot, window, path):
    with qtbot.waitSignals([window.file_loaded], timeout=20_000):
        window.files.open_files([str(path)])
    window.spectra_view.selectAll()
    with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
        window.run_selected()
    assert blocker.args == ["done"]


def test_confidence_is_listed_sortable_and_summarised(qtbot, make_window, write_mgf, confident_bundle):
    window = make_window(model=confident_bundle)
    _run_all(qtbot, window, write_mgf("two.mgf", titles={NICOTINE, SITAGLIPTIN}))
    model = window.spectra
    for row, entry in enumerate(model.entries):
        p = entry.result.confidence
        assert p is not None and 0.05 < p < 0.95
        assert p == pytest.approx(expected_confidence(entry.result), abs=1e-9)  # this entry's own pool, this model
        cell = model.index(row, SpectraModel.CONFIDENCE)
        assert cell.data() == ("<1%" if p < 0.01 else f"{p:.0%}") and cell.data(SORT_ROLE) == p
    tip = model.headerData(SpectraModel.CONFIDENCE, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert "rank-1 candidate is the right structure" in tip
    window.select_entry(model.entries[0].key)
    qtbot.waitUntil(lambda: "· confidence <b>" in window.candidates.summary.text(), timeout=5_000)


def test_without_a_confidence_model_the_column_stays_empty(qtbot, make_window, write_mgf):
    window = make_window()
    _run_all(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    assert window.spectra.entries[0].result is not None
    assert window.spectra.index(0, SpectraModel.CONFIDENCE).data() == ""
    assert window.spectra.index(0, SpectraModel.CONFIDENCE).data(SORT_ROLE) == -1.0


def test_a_probability_reads_as_a_chemist_reads_it():
    """An identification at 0.9995 reads '>99%', never '100%' (nothing is certain); a low one '<1%', never '0%'."""
    from msgpt_gui.models import format_confidence

    assert [format_confidence(p) for p in (0.0, 0.004, 0.01, 0.42, 0.99, 0.9995, 1.0)] == \
        ["<1%", "<1%", "1%", "42%", "99%", ">99%", ">99%"]
