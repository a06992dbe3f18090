"""Adduct groups (engine.spectra.adduct_groups): the features of one compound are joined, others are not.

The run is tests/synthetic_run.py's adduct run: caffeine as [M+H]+ and [M+Na]+ at 60 s; a caffeine isomer seen only
as [M+Na]+ at 150 s; an ion at caffeine's [M+K]+ m/z whose peak is 3 s later; and an [M+H]+ ion 1 s later whose
[M+NH4]+ would be caffeine's [M+Na]+ (a second partner for that feature).
"""

import numpy as np
import pytest
from synthetic_run import CAFFEINE, adduct_run_ions, elution_run, ion_mz, write_adduct_run, write_mzml

from engine.errors import ConfigError
from engine.spectra.adduct_groups import GroupConfig, _fwhm, candidate_pairs, find_groups, ion_pairs, trace_of
from engine.spectra.features import FeatureConfig
from engine.spectra.io import iter_spectra
from engine.spectra.run_features import RunCounts, iter_features
from engine.spectra.spectrum import SkippedRecord, SurveyScan


def read_run(path, config=FeatureConfig()):
    counts = RunCounts()
    features = [f for f in iter_features(path, config, counts=counts) if not isinstance(f, SkippedRecord)]
    survey = [s for s in iter_spectra(path, survey_scans=True) if isinstance(s, SurveyScan)]
    return features, survey, counts


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = write_adduct_run(tmp_path_factory.mktemp("adducts") / "adducts.mzML")
    return read_run(path)


def by_mz(features, mz, rt=None):
    hits = [f for f in features if abs(f.precursor_mz - mz) < 0.002 and (rt is None or abs(f.retention_time - rt) < 5)]
    assert len(hits) == 1, [f.id for f in features]
    return hits[0]


def test_the_adduct_partners_of_one_compound_form_a_group_with_their_ion_types(run):
    features, _, counts = run
    h = by_mz(features, ion_mz(CAFFEINE, "[M+H]+"))
    na = by_mz(features, ion_mz(CAFFEINE, "[M+Na]+"), rt=60)
    assert h.group is not None and na.group is not None and h.group.id == na.group.id
    assert h.group.id == "G0001" and {m.feature_id for m in h.group.members} == {h.id, na.id}
    assert h.ion_type_in_group == "[M+H]+" and na.ion_type_in_group == "[M+Na]+"
    assert abs(h.group.neutral_mass - 194.0804) < 0.002
    assert [p.id for p in na.partners] == [h.id] and [f.id for f in na.group_members] == [h.id, na.id]
    assert na.spectrum.metadata["compound_group"] == "G0001" and na.spectrum.metadata["group_ion_type"] == "[M+Na]+"
    assert counts.n_groups == 1 and counts.n_grouped == 2 and "1 compound groups of 2 features" in counts.describe()


def test_an_isomer_at_another_retention_time_is_not_grouped(run):
    features, _, _ = run
    isomer = by_mz(features, ion_mz(CAFFEINE, "[M+Na]+"), rt=150)
    assert isomer.group is None and isomer.partners == ()


def test_a_coeluting_compound_at_a_partner_mz_is_not_grouped_when_its_trace_differs(run):
    features, survey, _ = run
    k_mz = by_mz(features, ion_mz(CAFFEINE, "[M+K]+"))
    assert k_mz.group is None
    # it is a candidate by m/z and apex (what MS1 correlation alone rules out)
    h = by_mz(features, ion_mz(CAFFEINE, "[M+H]+"))
    result = find_groups(features, survey)
    mz = [f.precursor_mz for f in features]
    apex = [60.0 if f.id in (h.id,) else (63.0 if f.id == k_mz.id else 1e4 + i) for i, f in enumerate(features)]
    pairs = candidate_pairs(mz, apex, ["positive"] * len(mz), result.peak_width_s)
    assert any({features[a].id, features[b].id} == {h.id, k_mz.id} and (ia, ib) == ("[M+H]+", "[M+K]+")
               for a, b, ia, ib, _, _ in pairs)


def test_a_feature_that_fits_two_partners_goes_to_the_stronger_evidence(run):
    features, survey, _ = run
    na = by_mz(features, ion_mz(CAFFEINE, "[M+Na]+"), rt=60)
    other = by_mz(features, ion_mz("C5H5N5O4", "[M+H]+"))
    assert other.group is None and na.ion_type_in_group == "[M+Na]+"
    result = find_groups(features, survey)
    ids = [f.id for f in features]
    lost = [e for e in result.rejected if other.id in (ids[e.a], ids[e.b])]
    assert lost and all(e.correlation < result.groups[0].evidence[0].correlation for e in lost)
    assert any(na.id in (ids[e.a], ids[e.b]) and "[M+NH4]+" in (e.ion_a, e.ion_b) for e in lost)


def test_the_peak_width_is_measured_from_the_run(run):
    features, survey, _ = run
    result = find_groups(features, survey)
    assert result.peak_width_s == pytest.approx(2 * np.sqrt(2 * np.log(2)) * 2.0, abs=0.3)  # FWHM of sigma 2 s
    assert result.peak_width_source.startswith("measured")
    given = find_groups(features, survey, GroupConfig(peak_width_s=0.5))  # narrower than the apexes' scan step
    assert given.peak_width_source == "given" and given.peak_width_s == 0.5


def test_without_survey_scans_or_switched_off_there_are_no_groups(run, tmp_path):
    features, _, _ = run
    assert find_groups(features, []).groups == ()
    path = write_adduct_run(tmp_path / "run.mzML")
    off, _, counts = read_run(path, FeatureConfig(adduct_groups=False))
    assert all(f.group is None for f in off) and counts.n_groups == 0


def test_two_features_of_one_ion_type_are_never_one_compound(tmp_path):
    # caffeine [M+H]+ and [M+Na]+, and a second [M+Na]+ of the same m/z eluting within the peak but split into its
    # own feature (another isomer 2 s later): the group keeps one [M+Na]+
    ions = adduct_run_ions()[:2]
    ions.append({**ions[1], "apex": 61.5, "height": 1e6})
    scans = elution_run(ions, (30.0, 100.0))
    features, survey, _ = read_run(write_mzml(tmp_path / "two.mzML", scans),
                                   FeatureConfig(rt_gap_s=0.5, jitter_ppm=0.0))
    grouped = [f for f in features if f.group is not None]
    assert len(features) == 3 and len(grouped) == 2
    assert sorted(f.ion_type_in_group for f in grouped) == ["[M+H]+", "[M+Na]+"]


def test_ion_pairs_leave_out_permanent_cations_and_keep_water_loss():
    pairs = ion_pairs("positive")
    assert ("[M+H]+", "[M+Na]+") in pairs and ("[M-H2O+H]+", "[M+H]+") in pairs
    assert not any("[M]+" in p for p in pairs)
    assert ("[M-H]-", "[M+HCOO]-") in ion_pairs("negative")


def test_fwhm_of_a_sampled_gaussian():
    t = np.arange(0, 40, 0.5)
    y = np.exp(-0.5 * ((t - 20) / 3.0) ** 2)
    assert _fwhm(t, y, int(np.argmax(y))) == pytest.approx(2.3548 * 3.0, abs=0.1)
    assert _fwhm(t[:5], y[:5], 4) is None  # a peak cut at the trace's end says nothing


@pytest.mark.parametrize("kwargs, message", [
    ({"min_correlation": 2}, "min_correlation"),
    ({"min_shared_scans": 1}, "min_shared_scans"),
    ({"peak_width_s": 0}, "peak_width_s"),
    ({"mz_tol_ppm": 0, "mz_tol_da": 0}, "both 0"),
    ({"min_peak_width_s": 10, "max_peak_width_s": 5}, "swap"),
])
def test_bad_group_settings_name_the_value(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        GroupConfig(**kwargs)


def test_groups_do_not_change_the_features_themselves(tmp_path):
    path = write_adduct_run(tmp_path / "run.mzML")
    on, _, _ = read_run(path)
    off, _, _ = read_run(path, FeatureConfig(adduct_groups=False))
    assert [f.id for f in on] == [f.id for f in off]
    for f, g in zip(on, off):
        assert f.precursor_mz == g.precursor_mz and np.array_equal(f.spectrum.mz, g.spectrum.mz)
        meta = {k: v for k, v in f.spectrum.metadata.items() if k not in ("compound_group", "group_ion_type")}
        assert meta == g.spectrum.metadata


def test_a_features_apex_is_the_peak_near_its_own_scans():
    # the same m/z elutes twice: a small peak at 30 s (where the feature's MS2 scans are) and a large one at 80 s
    t = np.arange(0.0, 120.0, 0.5)
    scans = [SurveyScan(id=f"s{i}", index=i, retention_time=float(x), polarity="positive", mz=np.array([300.0]),
                        intensity=np.array([1e4 * np.exp(-0.5 * ((x - 30) / 2) ** 2)
                                            + 1e6 * np.exp(-0.5 * ((x - 80) / 2) ** 2) + 1.0]))
             for i, x in enumerate(t)]
    anywhere = trace_of(300.0, 0.0, 120.0, scans, t, 0.005)
    near = trace_of(300.0, 0.0, 120.0, scans, t, 0.005, apex_range=(25.0, 40.0))
    assert anywhere.apex_rt == 80.0 and near.apex_rt == 30.0
