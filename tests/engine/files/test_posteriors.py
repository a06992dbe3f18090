"""Posterior export: the .npz format (round trip, no pickles, versioned), the writer, msgpt predict --posteriors."""

import json
import zipfile

import numpy as np
import pytest
from tiny_bundle import FIXTURE, fixture_spectra

from engine.cli import main as msgpt
from engine.elucidation.pipeline import compute_posterior
from engine.errors import ConfigError, InputFileError
from engine.files.posteriors import (
    FORMAT,
    PosteriorRecord,
    PosteriorWriter,
    read_posteriors,
    record_for_spectrum,
    write_posteriors,
)
from engine.model.querying import band_thresholds, threshold_query

FAST = ["--groups", "3", "--pool-size", "6", "--threads", "1", "--precision", "fp32", "-q"]


def records(n=4, bits=64, m=5, seed=0):
    rng = np.random.default_rng(seed)
    return [PosteriorRecord(f"s{i}", rng.random(bits, dtype=np.float32) ** 4, np.linspace(0.6, 0.1, m),
                            "C10H10O3", "[M+H]+", 179.07 + i, "x.mgf", i, "KWILGNNWGSNMPA" if i % 2 else "")
            for i in range(n)]


def test_round_trip_keeps_every_array_and_the_queries(tmp_path):
    recs = records()
    assert write_posteriors(tmp_path / "p.npz", recs, {"model": "m", "fingerprint": {"n_bits": 64}}) == 4
    z = read_posteriors(tmp_path / "p.npz")
    assert len(z) == 4 and z.n_thresholds == 5 and z.format_version == 1
    assert z.info["model"] == "m" and "query_rule" in z.info
    assert np.array_equal(z.posteriors, np.stack([r.posterior for r in recs])) and z.posteriors.dtype == np.float32
    assert np.array_equal(z.thresholds, np.stack([r.thresholds for r in recs]))
    assert z.ids.tolist() == ["s0", "s1", "s2", "s3"] and z.inchikey14.tolist() == ["", "KWILGNNWGSNMPA"] * 2
    assert z.record_index.tolist() == [0, 1, 2, 3] and z.precursor_mz[1] == pytest.approx(180.07)
    for s, r in enumerate(recs):
        assert [q.tolist() for q in z.queries(s)] == [threshold_query(r.posterior, t).tolist() for t in r.thresholds]
        back = z.record(s)
        assert np.array_equal(back.posterior, r.posterior) and np.array_equal(back.thresholds, r.thresholds)
        assert (back.spectrum_id, back.formula, back.adduct, back.source, back.record_index, back.inchikey14) == (
            r.spectrum_id, r.formula, r.adduct, r.source, r.record_index, r.inchikey14)


def test_the_file_is_plain_arrays_that_numpy_reads_without_pickles(tmp_path):
    write_posteriors(tmp_path / "p.npz", records(2), {"model": "m"})
    with zipfile.ZipFile(tmp_path / "p.npz") as zf:
        names = sorted(n.removesuffix(".npy") for n in zf.namelist())
    assert names == sorted(["format", "format_version", "info", "ids", "sources", "record_index", "formula", "adduct",
                            "precursor_mz", "inchikey14", "posteriors", "thresholds", "query_indptr",
                            "query_indices"])
    with np.load(tmp_path / "p.npz", allow_pickle=False) as z:  # would raise on an object array
        assert str(z["format"]) == FORMAT and json.loads(str(z["info"]))["model"] == "m"
        ptr, ind = z["query_indptr"], z["query_indices"]
        assert ptr.shape == (2 * 5 + 1,) and ptr[-1] == ind.size and ind.dtype == np.int32


def test_an_empty_file_still_has_the_shapes(tmp_path):
    assert write_posteriors(tmp_path / "e.npz", [], {"fingerprint": {"n_bits": 4096}}) == 0
    z = read_posteriors(tmp_path / "e.npz")
    assert len(z) == 0 and z.posteriors.shape == (0, 4096) and z.query_indptr.tolist() == [0]


def test_one_file_holds_one_band_and_one_fingerprint(tmp_path):
    recs = records(1) + records(1, m=3)
    with pytest.raises(ConfigError, match="one file holds one model's posteriors with one band"):
        write_posteriors(tmp_path / "p.npz", recs)
    assert not list(tmp_path.iterdir())  # no target, no temporary files left behind


def test_bad_names_and_values_are_refused():
    with pytest.raises(ConfigError, match="ending in .npz"):
        PosteriorWriter("p.csv")
    with pytest.raises(ConfigError, match="probabilities in \\[0, 1\\]"):
        PosteriorRecord("x", np.array([0.5, 1.5]), np.array([0.2]))


def test_an_aborted_write_keeps_the_earlier_file(tmp_path):
    write_posteriors(tmp_path / "p.npz", records(2))
    before = (tmp_path / "p.npz").read_bytes()
    with pytest.raises(RuntimeError):
        with PosteriorWriter(tmp_path / "p.npz") as w:
            w.write(records(1)[0])
            raise RuntimeError("cancelled")
    assert (tmp_path / "p.npz").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]


@pytest.mark.parametrize("arrays, match", [
    ({"format": np.array("other")}, "not an msgpt posteriors file"),
    ({"format": np.array(FORMAT), "format_version": np.array(7)}, "newer than this msgpt reads"),
])
def test_reading_refuses_other_files_and_newer_versions(tmp_path, arrays, match):
    np.savez(tmp_path / "x.npz", **arrays)
    with pytest.raises(InputFileError, match=match):
        read_posteriors(tmp_path / "x.npz")


def test_predict_writes_the_posteriors_of_every_processed_spectrum(tmp_path, tiny_bundle_dir, tiny_bundle, capsys):
    out, npz = tmp_path / "c.csv", tmp_path / "p.npz"
    assert msgpt(["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir),
                  "--posteriors", str(npz), *FAST]) == 0
    assert "Posteriors of 10 spectra written to" in capsys.readouterr().err
    z = read_posteriors(npz)
    spectra = fixture_spectra()  # the 10 positive-mode records; the 2 negative ones are skipped, as in the CSV
    assert z.ids.tolist() == [s.id for s in spectra]
    assert z.info["model_checksum"] == tiny_bundle.checksum and z.info["fingerprint"]["n_bits"] == 4096
    expected_t = band_thresholds(tiny_bundle.calibration, 0.95, 1.50, 3)
    for s, spectrum in enumerate(spectra):
        assert np.allclose(z.posteriors[s], compute_posterior(tiny_bundle, spectrum), atol=1e-6)
        assert np.allclose(z.thresholds[s], expected_t)
        assert z.formula[s] == spectrum.formula and z.adduct[s] == spectrum.adduct
    assert z.inchikey14[0] == "OKRNLSUTBJUVKA"  # the reference structure of the first record


def test_a_resumed_run_writes_the_same_posteriors(tmp_path, tiny_bundle_dir, monkeypatch, capsys):
    from engine.files import export

    args = ["predict", str(FIXTURE), "--model", str(tiny_bundle_dir), *FAST]
    assert msgpt([*args, "-o", str(tmp_path / "ref.csv"), "--posteriors", str(tmp_path / "ref.npz")]) == 0
    real, calls = export.CandidateWriter.write, {"n": 0}

    def write(self, result, **kwargs):
        calls["n"] += 1
        if calls["n"] > 4:
            raise KeyboardInterrupt
        return real(self, result, **kwargs)

    monkeypatch.setattr(export.CandidateWriter, "write", write)
    assert msgpt([*args, "-o", str(tmp_path / "c.csv"), "--posteriors", str(tmp_path / "p.npz")]) == 130
    assert not (tmp_path / "p.npz").exists()
    monkeypatch.undo()
    assert msgpt([*args, "-o", str(tmp_path / "c.csv"), "--posteriors", str(tmp_path / "p.npz"), "--resume"]) == 0
    a, b = read_posteriors(tmp_path / "ref.npz"), read_posteriors(tmp_path / "p.npz")
    assert a.ids.tolist() == b.ids.tolist()
    assert np.allclose(a.posteriors, b.posteriors, atol=1e-6) and np.array_equal(a.thresholds, b.thresholds)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_predict_refuses_a_posteriors_name_without_npz(tmp_path, tiny_bundle_dir, capsys):
    assert msgpt(["predict", str(FIXTURE), "-o", str(tmp_path / "c.csv"), "--model", str(tiny_bundle_dir),
                  "--posteriors", str(tmp_path / "p.csv"), *FAST]) == 2
    assert "ending in .npz" in capsys.readouterr().err


def test_record_for_spectrum_is_the_encoder_alone(tiny_bundle):
    from engine.elucidation.pipeline import QueryParams

    spectrum = fixture_spectra()[0]
    rec = record_for_spectrum(tiny_bundle, spectrum, QueryParams(groups=4))
    assert rec.spectrum_id == spectrum.id and rec.thresholds.size == 4 and rec.posterior.size == 4096
    assert rec.inchikey14 == "OKRNLSUTBJUVKA"
