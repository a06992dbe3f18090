"""SAFE tokenizer: regex atom-level tokens over SAFE strings, a JSON vocabulary, no pickle.

SAFE strings (safe-mol's output) are SMILES-like fragments joined by '.', so they split with the
SMILES regex safe-mol itself uses (``safe.SAFESplitter.REGEX_PATTERN``: bracket atoms, two-letter
halogens, bonds, branches, ring closures incl. ``%nn``). The pattern is stored in ``tokenizer.json``
beside the vocabulary, so a later safe-mol release cannot silently change how a bundle tokenizes.

Ids 0-3 are always ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``; an encoded sequence is
``<bos> tokens... <eos>``. Characters the regex does not match become ``<unk>`` instead of being
dropped, so nothing is lost silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from engine.errors import BundleError, ConfigError

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)


@cache
def safe_regex() -> str:
    """The SMILES regex safe-mol splits with (imported on first use: loading a saved tokenizer, as
    pretraining on a machine without RDKit / safe-mol does, never needs it)."""
    from safe import SAFESplitter

    return SAFESplitter.REGEX_PATTERN


def __getattr__(name: str):
    if name == "SAFE_REGEX":  # the module constant of earlier versions
        return safe_regex()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

FORMAT = "msgpt-safe-tokenizer"
FORMAT_VERSION = 1


class SafeTokenizer:
    """Maps SAFE strings to token ids and back. Build it from a corpus or load it from JSON."""

    def __init__(self, vocab: Sequence[str], pattern: str | None = None):
        pattern = safe_regex() if pattern is None else pattern
        vocab = list(vocab)
        if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ConfigError(f"`vocab` must start with the special tokens {list(SPECIAL_TOKENS)}, got {vocab[:4]}.")
        if len(set(vocab)) != len(vocab):
            dup = next(t for t, n in Counter(vocab).items() if n > 1)
            raise ConfigError(f"`vocab` lists token {dup!r} more than once.")
        self.vocab = vocab
        self.pattern = pattern
        self._regex = re.compile(pattern)
        self._index = {t: i for i, t in enumerate(vocab)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = range(len(SPECIAL_TOKENS))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"SafeTokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint()[:12]})"

    def tokenize(self, text: str) -> list[str]:
        """Split a SAFE string into tokens; runs of unmatched characters become one ``<unk>`` each."""
        tokens = self._regex.findall(text)
        if sum(map(len, tokens)) == len(text):  # fast path: the regex covered every character
            return tokens
        out, pos = [], 0
        for m in self._regex.finditer(text):
            if m.start() > pos:
                out.append(UNK)
            out.append(m.group())
            pos = m.end()
        if pos < len(text):
            out.append(UNK)
        return out

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        get, unk = self._index.get, self.unk_id
        ids = [get(t, unk) for t in self.tokenize(text)]
        return [self.bos_id, *ids, self.eos_id] if add_special else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Join the tokens of ``ids`` up to the first ``<eos>``, skipping special tokens."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i >= len(SPECIAL_TOKENS):
                out.append(self.vocab[i])
        return "".join(out)

    @classmethod
    def build(cls, safe_strings: Iterable[str], min_freq: int = 1, max_size: int | None = None) -> SafeTokenizer:
        """Vocabulary of the tokens seen at least ``min_freq`` times, most frequent first (ties: alphabetical).

        ``max_size`` caps the vocabulary size including the 4 special tokens.
        """
        if min_freq < 1:
            raise ConfigError(f"`min_freq` must be >= 1, got {min_freq}.")
        if max_size is not None and max_size <= len(SPECIAL_TOKENS):
            raise ConfigError(f"`max_size` must exceed the {len(SPECIAL_TOKENS)} special tokens, got {max_size}.")
        regex = re.compile(safe_regex())
        counts: Counter[str] = Counter()
        for s in safe_strings:
            counts.update(regex.findall(s))
        for t in SPECIAL_TOKENS:
            counts.pop(t, None)
        tokens = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            tokens = tokens[: max_size - len(SPECIAL_TOKENS)]
        return cls([*SPECIAL_TOKENS, *tokens])

    def fingerprint(self) -> str:
        """sha256 of the regex and the vocabulary in order: equal fingerprints tokenize identically."""
        blob = json.dumps({"pattern": self.pattern, "vocab": self.vocab}, ensure_ascii=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write ``tokenizer.json`` (``path`` may be the file or its folder); returns the file written."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        data = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "pattern": self.pattern,
            "special_tokens": list(SPECIAL_TOKENS),
            "vocab": self.vocab,
            "fingerprint": self.fingerprint(),
        }
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> SafeTokenizer:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"{path}: cannot read the tokenizer ({e}).") from e
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BundleError(f"{path}: not an MS-GPT SAFE tokenizer (expected \"format\": \"{FORMAT}\").")
        if data.get("version") != FORMAT_VERSION:
            raise BundleError(
                f"{path}: tokenizer format version {data.get('version')!r} is not supported (this program reads "
                f"version {FORMAT_VERSION}); use a bundle made for this version of MS-GPT Desktop."
            )
        try:
            tok = cls(data["vocab"], data["pattern"])
        except (KeyError, TypeError, re.error, ConfigError) as e:
            raise BundleError(f"{path}: corrupt tokenizer ({e}).") from e
        if data.get("fingerprint") != tok.fingerprint():
            raise BundleError(f"{path}: the vocabulary does not match its recorded fingerprint; the file is corrupt.")
        return tok
