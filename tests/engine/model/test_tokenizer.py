import json

import pytest

from engine.errors import BundleError, ConfigError
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer

# SAFE strings as safe-mol writes them (safe.encode of small molecules from the pretraining corpus)
SAFE = [
    "c15cc2c(c3oc(=O)c4c(c13)CCC4=O)C1C=COC1O2.CO5",
    "CCC(C)C(O)C2CC(C)CCCCCCC(O)CC(O)CN.C1(=O)CC(CC(=O)O)C(=O)O.O12",
    "c1ccccc1.CO1",
    "CC(=O)O",
    "C1CCN1.[nH]1cc2cccc2c1",
    "FC(F)(F)c1ccc2c(c1)Cl.Br2",
    "O=S(=O)(N)c1ccc%10cc1.C%10",
    "[O-][N+](=O)c1ccccc1",
    "N#Cc1ccccc1.[Se]1",
    "C/C=C/C(=O)OC",
    "OC1CC(O)C(O)C1.P(=O)(O)(O)O",
    "[Si](C)(C)C.[As]1.I1",
]


@pytest.fixture
def tok():
    return SafeTokenizer.build(SAFE)


def test_specials_come_first(tok):
    assert tok.vocab[:4] == list(SPECIAL_TOKENS)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.vocab_size == len(tok) == len(tok.vocab)


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("c1ccccc1.CO1", ["c", "1", "c", "c", "c", "c", "c", "1", ".", "C", "O", "1"]),
        ("ClC(Br)[nH]", ["Cl", "C", "(", "Br", ")", "[nH]"]),
        ("O=S(=O)c%10.C%10", ["O", "=", "S", "(", "=", "O", ")", "c", "%10", ".", "C", "%10"]),
        ("[O-][N+]#N", ["[O-]", "[N+]", "#", "N"]),
    ],
)
def test_atom_level_tokens(tok, text, tokens):
    assert tok.tokenize(text) == tokens


def test_round_trip(tok):
    for s in SAFE:
        ids = tok.encode(s)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
        assert tok.unk_id not in ids
        assert tok.decode(ids) == s
        assert tok.encode(s, add_special=False) == ids[1:-1]


def test_unknown_characters_are_not_dropped(tok):
    assert tok.tokenize("C<x>C") == ["C", "<unk>", ">", "C"]
    assert tok.encode("C[Xe]C", add_special=False) == [tok.encode("C", False)[0], tok.unk_id, tok.encode("C", False)[0]]


def test_decode_stops_at_eos_and_skips_specials(tok):
    c, o = tok.encode("CO", add_special=False)
    assert tok.decode([tok.bos_id, c, tok.pad_id, o, tok.eos_id, c, c]) == "CO"


def test_build_min_freq_and_max_size():
    assert SafeTokenizer.build(["CCO", "CC"], min_freq=2).vocab[4:] == ["C"]
    assert SafeTokenizer.build(["CCO", "CC", "N"], max_size=6).vocab[4:] == ["C", "N"]  # ties alphabetical
    with pytest.raises(ConfigError, match="`max_size`"):
        SafeTokenizer.build(["C"], max_size=4)
    with pytest.raises(ConfigError, match="`min_freq`"):
        SafeTokenizer.build(["C"], min_freq=0)


def test_vocab_validation():
    with pytest.raises(ConfigError, match="special tokens"):
        SafeTokenizer(["C", "O"])
    with pytest.raises(ConfigError, match="more than once"):
        SafeTokenizer([*SPECIAL_TOKENS, "C", "C"])


def test_save_load(tok, tmp_path):
    path = tok.save(tmp_path)
    assert path.name == "tokenizer.json"
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["vocab"] == tok.vocab
    back = SafeTokenizer.load(path)
    assert back.vocab == tok.vocab and back.fingerprint() == tok.fingerprint()
    assert [back.encode(s) for s in SAFE] == [tok.encode(s) for s in SAFE]


def test_fingerprint_tracks_vocab(tok):
    assert tok.fingerprint() == SafeTokenizer.build(SAFE).fingerprint()
    assert tok.fingerprint() != SafeTokenizer.build(SAFE[:3]).fingerprint()


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(format="other"), "not an MS-GPT"),
        (lambda d: d["vocab"].append("Xx"), "fingerprint"),
        (lambda d: d.pop("vocab"), "corrupt"),
    ],
)
def test_load_rejects_bad_files(tok, tmp_path, edit, match):
    path = tok.save(tmp_path / "tokenizer.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(BundleError, match=match):
        SafeTokenizer.load(path)


def test_load_missing_or_not_json(tmp_path):
    with pytest.raises(BundleError, match="cannot read"):
        SafeTokenizer.load(tmp_path / "nope.json")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(BundleError, match="cannot read"):
        SafeTokenizer.load(tmp_path)
