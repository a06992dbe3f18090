"""The ion types' log prior of the formula scorer (training.calibration.formula_scorer): counted from the FOLD=train
records' ADDUCT fields by ion mode, spellings normalised, records the reader refuses counted too, and rewritten alone
in a scorer file (--ion-types-only)."""

import json
import math

from engine.chem.adducts import COMMON_ION_TYPES
from training.calibration.formula_scorer import (
    count_ion_types,
    ion_type_log_prior,
    main,
)


def record(adduct, fold="train", mode="positive", formula="C10H10O3"):
    return (f"BEGIN IONS\nTITLE=x\nPEPMASS=100.0\nIONMODE={mode}\nADDUCT={adduct}\nFORMULA={formula}\nFOLD={fold}\n"
            "50.0 1\nEND IONS\n")


def mgf(tmp_path):
    records = (
        [record("[M+H]+")] * 6 + [record("M+H")] + [record("[M+Na]+")] * 2
        + [record("[M]+", formula="C5H14NO+")] * 3  # the reader refuses a charged formula: counted all the same
        + [record("[M+H]+", fold="val")] * 50  # FOLD=val is never counted
        + [record("[M-H]-", mode="negative")] * 4 + [record("[M+FA-H]-", mode="negative")] * 2
        + [record("unknown")] + [record("[M+Xx]+")]  # no ion type
    )
    path = tmp_path / "lib.mgf"
    path.write_text("\n".join(records))
    return path


def test_counts_normalise_spellings_by_ion_mode_and_leave_val_out(tmp_path):
    counts = count_ion_types(mgf(tmp_path), "train")
    assert dict(counts["positive"]) == {"[M+H]+": 7, "[M+Na]+": 2, "[M]+": 3}
    assert dict(counts["negative"]) == {"[M-H]-": 4, "[M+HCOO]-": 2}


def test_the_prior_covers_every_common_ion_type_add_one_smoothed_within_its_mode(tmp_path):
    prior = ion_type_log_prior(count_ion_types(mgf(tmp_path), "train"))
    assert set(prior) == {a for names in COMMON_ION_TYPES.values() for a in names}
    positive = 7 + 2 + 3 + len(COMMON_ION_TYPES["positive"])  # add-one
    assert prior["[M+H]+"] == round(math.log(8 / positive), 4) and prior["[M+K]+"] == round(math.log(1 / positive), 4)
    negative = 4 + 2 + len(COMMON_ION_TYPES["negative"])
    assert prior["[M+HCOO]-"] == round(math.log(3 / negative), 4)
    for names in COMMON_ION_TYPES.values():
        assert math.isclose(sum(math.exp(prior[a]) for a in names), 1.0, abs_tol=1e-3)


def test_ion_types_only_rewrites_that_part_of_the_scorer(tmp_path):
    scorer = tmp_path / "formula_scorer.json"
    before = {"format": "msgpt-formula-scorer/1", "info": {"x": "y"}, "stage1": {"mass_error": -5.0},
              "stage2": {"mass_error": -4.0}, "ion_type_log_prior": {"[M+H]+": 0.0}, "prior": {"kept": [1, 2]}}
    scorer.write_text(json.dumps(before))
    assert main(["--ion-types-only", "--mgf", str(mgf(tmp_path)), "--out", str(tmp_path)]) == 0
    after = json.loads(scorer.read_text())
    assert {k: v for k, v in after.items() if k not in ("ion_type_log_prior", "info")} == \
        {k: v for k, v in before.items() if k not in ("ion_type_log_prior", "info")}
    assert after["info"]["x"] == "y" and "[M]+ 3" in after["info"]["ion_types"]
    assert after["ion_type_log_prior"] == ion_type_log_prior(count_ion_types(mgf(tmp_path), "train"))
