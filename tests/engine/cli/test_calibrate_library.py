"""``msgpt calibrate-library`` (engine/cli/calibrate_library.py): a tiny labelled library searched in itself (each
spectrum without its own record) recalibrates the shipped confidence of identifications, writes
``LIBRARY.confidence.json`` beside it, and later searches of that library use it (its rule and its confidence)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.cli import main
from engine.errors import ConfigError
from engine.model.confidence import identification_confidence, identity_model
from engine.spectral_library import load_spectral_library, search_peaks
from engine.spectral_library.identity import (
    confidence_path,
    identity_features,
    load_rule,
    user_calibration_path,
)


def key(i: int) -> str:
    return "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[(i * 7 + k) % 26] for k in range(14)) + "-UHFFFAOYSA-N"


def block(title: str, precursor: float, inchikey: str, mz, intensity) -> str:
    peaks = "\n".join(f"{m:.4f} {h:.1f}" for m, h in zip(mz, intensity))
    return (f"BEGIN IONS\nTITLE={title}\nPEPMASS={precursor:.4f}\nCHARGE=1+\nIONMODE=positive\nADDUCT=[M+H]+\n"
            f"INCHIKEY={inchikey}\n{peaks}\nEND IONS\n")


def library_mgf(path, seed=0):
    """12 structures measured twice (each spectrum finds its twin: right) and 4 isomer pairs measured once each
    (each finds the other isomer: wrong), at precursors far apart."""
    rng = np.random.default_rng(seed)
    blocks, truth = [], {}
    for s in range(20):
        precursor = 150.0 + 13.7 * s
        mz = np.sort(rng.choice(np.arange(50.0, precursor - 5.0, 0.7), size=8, replace=False))
        heights = rng.uniform(10, 100, size=8)
        keys = [key(s), key(s)] if s < 12 else [key(s), key(100 + s)]
        for k, inchikey in enumerate(keys):
            title = f"MSBNK-LAB-{s:03d}{k}"
            blocks.append(block(title, precursor, inchikey, mz + rng.uniform(-0.003, 0.003, 8),
                                heights * rng.uniform(0.7, 1.3, 8)))
            truth[title] = keys[1 - k] == inchikey  # the other record is of the same structure
    path.write_text("\n".join(blocks))
    return path, truth


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MSGPT_HOME", str(tmp_path / "home"))
    return tmp_path


def test_calibrate_library_writes_a_calibration_the_library_then_uses(home, capsys):
    lib_path, truth = library_mgf(home / "mine.mgf")
    assert main(["calibrate-library", str(lib_path), "--labelled", str(lib_path), "--min-count", "3"]) == 0
    target = user_calibration_path(lib_path)
    assert target.is_file() and str(target) in capsys.readouterr().out
    d = json.loads(target.read_text())
    summary = d["identification_rule"]["measured"]
    assert summary["searched"] == 40 and summary["right"] == sum(truth.values()) == 24
    shipped = identity_model(confidence_path())
    user = identity_model(target)
    assert user.weights == shipped.weights and user.recalibration != shipped.recalibration  # the map refitted
    assert load_rule(target).min_probability == load_rule(confidence_path()).min_probability

    # a later search of that library uses its calibration: the rule, and the confidence of an identification
    library = load_spectral_library(lib_path)
    text = lib_path.read_text().split("END IONS")[0]
    lines = [ln for ln in text.splitlines() if ln[:1].isdigit()]
    mz = np.array([float(ln.split()[0]) for ln in lines])
    intensity = np.array([float(ln.split()[1]) for ln in lines])
    matches = search_peaks(library, 150.0, mz, intensity, "positive")
    assert matches.calibration_file(library.name) == str(target)
    assert matches.threshold_for(library.name).source == str(target)
    p = identification_confidence(matches)
    assert p == pytest.approx(user.probability(identity_features(matches)))
    assert p != pytest.approx(shipped.probability(identity_features(matches)))


def test_too_few_labelled_spectra_say_so(home, capsys):
    lib_path, _ = library_mgf(home / "mine.mgf")
    few = home / "few.mgf"
    few.write_text("\n".join(lib_path.read_text().split("\n\n")[:3]))
    assert main(["calibrate-library", str(lib_path), "--labelled", str(few)]) == 2
    assert "3 labelled spectra have a hit" in capsys.readouterr().err and not user_calibration_path(lib_path).exists()
    with pytest.raises(ConfigError, match="at least 10"):
        from engine.cli.calibrate_library import calibrate_library
        from engine.progress import run_to_end

        run_to_end(calibrate_library(lib_path, few))
