"""Precursor features: grouping MS2 scans, the consensus spectrum, MS1 evidence, whole runs."""

import numpy as np
import pytest
from synthetic_run import scan_id, write_mzml

from engine.errors import ConfigError
from engine.spectra.features import (
    FeatureConfig,
    build_features,
    consensus_spectrum,
    group_scans,
    merge_scans,
    ms1_evidence,
)
from engine.spectra.run_features import RunCounts, iter_features
from engine.spectra.spectrum import SkippedRecord, Spectrum, SurveyScan


def groups_of(mz, rt, **config):
    return [sorted(g.tolist()) for g in group_scans(mz, rt, FeatureConfig(**config))]


# ---------------------------------------------------------------------------------------------
# Grouping
# ---------------------------------------------------------------------------------------------


def test_scans_of_one_precursor_form_one_feature():
    #        one precursor (3 ppm apart, 12 s apart)       another m/z        the first m/z, 2 min later
    mz = [313.1798, 313.1807, 313.1790, 462.2675, 313.1800]
    rt = [200.0, 212.0, 224.0, 205.0, 350.0]
    assert groups_of(mz, rt) == [[0, 1, 2], [3], [4]]


def test_tolerance_is_the_larger_of_ppm_and_da():
    mz, rt = [100.000, 100.004], [10.0, 11.0]  # 4 mDa = 40 ppm apart
    assert groups_of(mz, rt, mz_tol_ppm=10, mz_tol_da=0.005) == [[0, 1]]
    assert groups_of(mz, rt, mz_tol_ppm=10, mz_tol_da=0.001) == [[0], [1]]
    assert groups_of(mz, rt, mz_tol_ppm=50, mz_tol_da=0.0) == [[0, 1]]


def test_retention_time_gap_splits_isomers():
    mz, rt = [250.1, 250.1, 250.1, 250.1], [100.0, 120.0, 200.0, 215.0]
    assert groups_of(mz, rt, rt_gap_s=30) == [[0, 1], [2, 3]]
    assert groups_of(mz, rt, rt_gap_s=90) == [[0, 1, 2, 3]]


def test_grouping_does_not_depend_on_scan_order():
    rng = np.random.default_rng(0)
    mz = np.repeat([150.05, 150.0505, 300.2, 300.21], 5) + rng.normal(0, 0.0003, 20)
    rt = np.tile([10.0, 20.0, 30.0, 90.0, 100.0], 4)
    expected = {tuple(sorted(g)) for g in groups_of(mz, rt)}
    perm = rng.permutation(20)
    again = {tuple(sorted(perm[i] for i in g)) for g in groups_of(mz[perm], rt[perm])}
    assert again == expected and len(expected) == 6  # 150.05 and 150.0505 (3 ppm) are one m/z


def test_scans_without_retention_time_stay_alone():
    assert groups_of([200.0, 200.0, 200.0], [None, 5.0, None]) == [[1], [0], [2]]


def test_features_sorted_by_first_retention_time():
    assert groups_of([500.0, 100.0, 300.0], [30.0, 10.0, 20.0]) == [[1], [2], [0]]


# ---------------------------------------------------------------------------------------------
# Merging
# ---------------------------------------------------------------------------------------------


def test_merge_weights_mz_by_intensity_and_averages_scaled_intensities():
    a = (np.array([100.0000, 150.0]), np.array([1000.0, 500.0]))  # base peak 100
    b = (np.array([100.0010, 150.0]), np.array([10.0, 30.0]))  # 100x weaker scan, base peak 150
    mz, intensity, present = merge_scans([a, b])
    # scaled: a -> (1.0, 0.5); b -> (1/3, 1.0); m/z 100 weighted 1.0 : 1/3
    assert mz[0] == pytest.approx((100.0 * 1.0 + 100.001 / 3) / (4 / 3))
    assert intensity == pytest.approx([(1.0 + 1 / 3) / 2, (0.5 + 1.0) / 2])
    assert present.tolist() == [2, 2]


def test_with_three_scans_a_peak_must_be_in_half_of_them():
    common = np.array([80.0, 120.0])
    scans = [
        (np.append(common, 95.5), np.array([1.0, 1.0, 0.9])),  # 95.5: noise, in 1 of 4
        (np.append(common, 140.0), np.array([1.0, 1.0, 0.5])),  # 140.0: in 2 of 4 (kept)
        (np.append(common, 140.0), np.array([1.0, 1.0, 0.5])),
        (common, np.array([1.0, 1.0])),
    ]
    mz, _, present = merge_scans(scans)
    assert mz.tolist() == pytest.approx([80.0, 120.0, 140.0]) and present.tolist() == [4, 4, 2]
    mz_all, _, _ = merge_scans(scans, FeatureConfig(min_scans_for_fraction=5))  # share not applied
    assert 95.5 in mz_all.round(4)


def test_two_scans_keep_every_peak_and_one_scan_is_unchanged():
    a = (np.array([80.0, 90.0]), np.array([2.0, 4.0]))
    b = (np.array([80.0, 110.0]), np.array([3.0, 3.0]))
    assert merge_scans([a, b])[0].tolist() == pytest.approx([80.0, 90.0, 110.0])
    mz, intensity, present = merge_scans([a])
    assert mz.tolist() == [80.0, 90.0] and intensity.tolist() == [2.0, 4.0] and present.tolist() == [1, 1]


def test_peaks_farther_than_the_fragment_tolerance_stay_apart():
    a = (np.array([200.000]), np.array([1.0]))
    b = (np.array([200.003]), np.array([1.0]))  # 3 mDa = 15 ppm
    assert merge_scans([a, b])[0].size == 2
    assert merge_scans([a, b], FeatureConfig(fragment_tol_da=0.005))[0].size == 1


def test_consensus_spectrum_leaves_its_scans_unchanged(make_spectrum):
    scans = [make_spectrum(id=f"s{i}", intensity=[1.0, 2.0, 3.0, 4.0 + i]) for i in range(3)]
    before = [s.intensity.copy() for s in scans]
    merged = consensus_spectrum(scans, id="F1")
    assert merged.id == "F1" and merged.n_peaks == 4 and merged.formula == "C10H10O3"
    assert all(np.array_equal(s.intensity, b) for s, b in zip(scans, before))
    assert consensus_spectrum(scans[:1]) is scans[0]


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("mz_tol_ppm", -1, "`mz_tol_ppm` must be a number >= 0"),
        ("rt_gap_s", float("nan"), "`rt_gap_s` must be a number >= 0"),
        ("min_scan_fraction", 0, "`min_scan_fraction` must be in"),
        ("min_scans_for_fraction", 1, "`min_scans_for_fraction` must be a whole number >= 2"),
        ("grouping", "sometimes", "`grouping` must be one of auto, always, never"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value, message):
    with pytest.raises(ConfigError, match=message):
        FeatureConfig(**{field: value})


def test_config_needs_one_tolerance():
    with pytest.raises(ConfigError, match="both 0"):
        FeatureConfig(mz_tol_ppm=0, mz_tol_da=0)


# ---------------------------------------------------------------------------------------------
# MS1 evidence and whole runs
# ---------------------------------------------------------------------------------------------

PRECURSOR = 195.0877  # caffeine [M+H]+
FRAGMENTS = [110.0713, 138.0662, 163.0502]


def survey(rt: float, scale: float, **extra) -> dict:
    mz = [160.0, PRECURSOR - 0.0004, PRECURSOR + 1.0034, 217.0696, 300.0]
    intensity = [5e4, 1e6 * scale, 1e5 * scale, 2e5 * scale, 3e4]  # 217.0696: [M+Na]+
    return {"ms_level": 1, "rt": rt, "mz": mz, "intensity": intensity, **extra}


def ms2(rt: float, extra_peak: float | None = None, precursor: float = PRECURSOR, ref: str | None = None) -> dict:
    mz = [*FRAGMENTS, precursor] + ([extra_peak] if extra_peak else [])
    return {"ms_level": 2, "rt": rt, "precursor_mz": precursor, "charge": 1, "ref": ref,
            "mz": sorted(mz), "intensity": [1.0] * len(mz)}


@pytest.fixture
def run(tmp_path):
    scans = [
        survey(100.0, 0.2),  # 0
        ms2(100.5, 70.0, ref=scan_id(0)),  # 1
        survey(110.0, 1.0),  # 2: apex
        ms2(110.5, 80.0, ref=scan_id(2)),  # 3
        survey(120.0, 0.5),  # 4
        ms2(120.5, ref=scan_id(4)),  # 5
        ms2(121.0, precursor=300.0),  # 6: another precursor, one scan
        survey(400.0, 0.01),  # 7
        ms2(400.5, precursor=PRECURSOR + 0.0005),  # 8: the same m/z much later: an isomer
    ]
    return write_mzml(tmp_path / "run.mzML", scans)


def test_features_of_a_run(run):
    counts = RunCounts()
    items = list(iter_features(run, counts=counts))
    assert not any(isinstance(i, SkippedRecord) for i in items)
    assert (counts.n_ms2, counts.n_survey, counts.n_features, counts.n_skipped) == (5, 4, 3, 0)
    assert "4 MS1 survey scans" in counts.describe() and "3 precursor features" in counts.describe()
    first, other, isomer = items
    assert first.scan_ids == (scan_id(1), scan_id(3), scan_id(5)) and other.n_scans == 1 and isomer.n_scans == 1
    assert (first.rt_min, first.rt_max) == (100.5, 120.5)
    # the consensus: fragments in all three scans kept, 70 and 80 (one scan each) dropped
    assert first.spectrum.mz.tolist() == pytest.approx([*FRAGMENTS, PRECURSOR])
    assert first.spectrum.metadata["n_scans"] == "3" and "consensus of 3 scans" in first.spectrum.metadata["merged"]
    # MS1: the apex survey scan gives the precursor m/z and the peaks around it
    assert first.ms1.scan_id == scan_id(2) and first.ms1.precursor_intensity == 1e6
    assert first.precursor_mz == first.spectrum.precursor_mz == pytest.approx(PRECURSOR - 0.0004)
    assert 217.0696 in first.ms1.mz and 160.0 in first.ms1.mz and 300.0 not in first.ms1.mz  # +-40 Da window
    assert first.spectrum.retention_time == 110.0 and first.id == "F0001_mz195.0873_rt110.0"
    assert first.spectrum.id == first.id and first.spectrum.charge == 1 and first.spectrum.polarity == "positive"
    assert other.ms1 is not None and other.ms1.precursor_mz == 300.0  # found in a survey scan within 5 s
    assert "m/z 195.0873, RT 100.5–120.5 s, 3 scans" == first.describe()


def test_grouping_never_keeps_one_feature_per_scan(run):
    items = list(iter_features(run, FeatureConfig(grouping="never")))
    assert [f.n_scans for f in items] == [1] * 5
    assert [f.id for f in items] == [scan_id(i) for i in (1, 3, 5, 6, 8)]  # the scans as read
    assert [f.index for f in items] == [1, 3, 5, 6, 8] and items[0].spectrum is items[0].scans[0]
    assert items[0].spectrum.n_peaks == 5  # the scan's own peaks, extra one included
    assert items[0].ms1.scan_id == scan_id(0) and items[1].ms1.scan_id == scan_id(2)  # its own survey scan


def test_ms1_evidence_needs_the_precursor_peak():
    scan = SurveyScan(id="s", index=0, retention_time=10.0, polarity="positive", mz=[100.0, 200.0], intensity=[1.0, 2.0])
    assert ms1_evidence(150.0, (10.0, 12.0), [scan]) is None
    assert ms1_evidence(200.0, (10.0, 12.0), [scan]).precursor_intensity == 2.0
    assert ms1_evidence(200.0, (30.0, 32.0), [scan]) is None  # too far in time
    assert ms1_evidence(200.0, (30.0, 32.0), [scan], referenced=["s"]) is not None  # named by the MS2 scan
    assert ms1_evidence(200.0, (10.0, 12.0), [scan], polarity="negative") is None


def test_mgf_records_are_their_own_features(tmp_path, make_spectrum):
    text = "".join(
        f"BEGIN IONS\nTITLE=r{i}\nPEPMASS=179.0703\nCHARGE=1+\nRTINSECONDS=60\n133.0648 10\n161.0597 100\nEND IONS\n"
        for i in range(3)
    )
    path = tmp_path / "lib.mgf"
    path.write_text(text)
    counts = RunCounts()
    features = list(iter_features(path, counts=counts))
    assert [f.id for f in features] == ["r0", "r1", "r2"]  # same m/z and RT, yet not merged
    assert all(f.spectrum is f.scans[0] and f.ms1 is None for f in features)
    assert (counts.n_ms2, counts.n_features, counts.n_survey) == (3, 3, 0)
    merged = list(iter_features(path, FeatureConfig(grouping="always")))
    assert len(merged) == 1 and merged[0].n_scans == 3


def test_build_features_from_spectra(make_spectrum):
    scans = [make_spectrum(id=f"s{i}", retention_time=10.0 + i, intensity=[1.0, 2.0, 3.0, 4.0]) for i in range(2)]
    (feature,) = build_features(scans)
    assert feature.n_scans == 2 and feature.ms1 is None and isinstance(feature.spectrum, Spectrum)
    assert feature.spectrum.adduct == "[M+H]+" and feature.spectrum.formula == "C10H10O3"  # agreed by all scans
    assert feature.spectrum.metadata["precursor_source"] == "median of the MS2 scans' precursor m/z"


@pytest.mark.parametrize("grouping", ["auto", "never"])
def test_a_run_cut_off_mid_way_keeps_the_features_read_before(run, grouping):
    from engine.errors import InputFileError

    text = run.read_text()
    run.write_text(text[: text.index('<spectrum index="6"') + 200])  # cut inside the 7th scan
    items = []
    with pytest.raises(InputFileError, match="malformed XML"):
        for item in iter_features(run, FeatureConfig(grouping=grouping)):
            items.append(item)
    assert sum(f.n_scans for f in items) == 3  # scans 1, 3 and 5 were read before the cut


def test_feature_indices_are_unique_and_apart_from_skipped_records(tmp_path):
    """The CLI journals (input, index) per item: a feature must not share an index with a skipped scan."""
    scans = [
        ms2(10.0),  # 0
        {**ms2(11.0), "charge": 2},  # 1: skipped (doubly charged)
        ms2(12.0),  # 2: same precursor as 0
        ms2(13.0, precursor=300.0),  # 3
    ]
    items = list(iter_features(write_mzml(tmp_path / "r.mzML", scans)))
    skipped = [i.index for i in items if isinstance(i, SkippedRecord)]
    features = [i for i in items if not isinstance(i, SkippedRecord)]
    assert skipped == [1] and [f.index for f in features] == [0, 3] and [f.n_scans for f in features] == [2, 1]
    assert features[0].id.startswith("F0001_") and features[1].id.startswith("F0002_")


def test_ms1_evidence_averages_the_scans_around_the_apex():
    def scan(i, rt, scale, m1):
        return SurveyScan(id=f"s{i}", index=i, retention_time=rt, polarity="positive",
                          mz=[200.0 + 1e-4 * i, 201.0034], intensity=[scale, scale * m1])

    scans = [scan(0, 9.0, 1e5, 0.10), scan(1, 10.0, 1e6, 0.05), scan(2, 11.0, 5e5, 0.12), scan(3, 12.0, 1e4, 0.5)]
    ms1 = ms1_evidence(200.0, (10.0, 11.0), scans)
    assert ms1.scan_id == "s1" and ms1.n_scans == 2 and ms1.precursor_intensity == 1e6  # s0 and s3 under 30%
    assert ms1.intensity[1] / ms1.intensity[0] == pytest.approx((5e4 + 6e4) / 1.5e6)  # summed ratios
    assert ms1.precursor_mz == pytest.approx((200.0001 * 1e6 + 200.0002 * 5e5) / 1.5e6)
    one = ms1_evidence(200.0, (10.0, 11.0), scans, FeatureConfig(ms1_scans=1))
    assert one.n_scans == 1 and one.intensity.tolist() == [1e6, 5e4]
    with pytest.raises(ConfigError, match="`ms1_apex_fraction` must be in"):
        FeatureConfig(ms1_apex_fraction=0.0)


def test_precursor_jitter_does_not_split_one_ion_that_ms1_shows_once():
    from engine.spectra.features import build_features

    def survey_at(i, rt, peaks):
        return SurveyScan(id=f"m{i}", index=i, retention_time=rt, polarity="positive", mz=[p for p, _ in peaks],
                          intensity=[h for _, h in peaks])

    def scan(i, rt, precursor):
        return Spectrum(id=f"s{i}", index=100 + i, precursor_mz=precursor, retention_time=rt, mz=[100.0, 150.0],
                        intensity=[1.0, 0.5], charge=1)

    scans = [scan(0, 10.0, 304.1157), scan(1, 14.0, 304.1210), scan(2, 18.0, 304.1159)]  # 17 ppm apart
    one_ion = [survey_at(i, t, [(304.1158, 1e6)]) for i, t in enumerate((9.5, 13.5, 17.5))]
    features = build_features(scans, one_ion)
    assert len(features) == 1 and features[0].n_scans == 3
    two_ions = [survey_at(i, t, [(304.1158, 1e6), (304.1212, 5e5)]) for i, t in enumerate((9.5, 13.5, 17.5))]
    assert len(build_features(scans, two_ions)) == 2  # MS1 resolves two ions: they stay apart
    assert len(build_features(scans, one_ion, FeatureConfig(jitter_ppm=0))) == 2
    assert len(build_features(scans)) == 2  # no survey scans: no trace to go by
