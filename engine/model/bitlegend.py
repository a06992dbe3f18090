"""What each Morgan bit of the posterior means: the atom environments behind it, as fragments.

A bit of the 4096-bit radius-2 Morgan fingerprint (:mod:`engine.chem.molecules`) is set by any atom
environment whose identifier hashes to it: an atom (radius 0), or an atom with its neighbours out to
one or two bonds. Several environments share a bit (hash collisions), so the meaning of a bit is
empirical: the environments that set it in real molecules, most frequent first.
:func:`bit_environments` lists them for one molecule; ``python -m training.bundle.bit_legend`` counts them
over a sample of the training corpus and writes ``bit_legend.json.gz``, which a bundle may ship and
:class:`BitLegend` reads.

Each environment is written two ways:

* ``smiles``: the fragment as SMILES, rooted at the centre atom (the first atom written), every
  atom with its hydrogen count in the whole molecule (``[CH2]``, ``[cH]``, ``[O]``);
* ``smarts``: one SMARTS atom per fragment atom with the invariants Morgan hashes (element,
  aromaticity, heavy-atom degree ``D``, hydrogens ``H``, ring membership ``R``/``!R``, charge) and
  explicit bonds; it matches the environment in a molecule with RDKit's substructure search.

File format (``bit_legend.json.gz``: gzip-compressed JSON, :data:`FORMAT` version :data:`FORMAT_VERSION`;
a plain ``.json`` of the same content is read too)::

    {"format": "msgpt-bit-legend", "format_version": 1,
     "fingerprint": {"type": "morgan", "radius": 2, "n_bits": 4096, ...},
     "source": "...", "n_molecules": 50000, "top": 3,
     "columns": ["smiles", "smarts", "radius", "count"],
     "bits": {"<bit>": {"n": <molecules with the bit>, "env": [[smiles, smarts, radius, count], ...]}}}

``count`` is the number of sampled molecules in which the environment sets the bit (a molecule counts
once per environment); ``n`` the number of sampled molecules in which the bit is set at all. A bit no
sampled molecule sets is absent.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

from rdkit import Chem, rdBase
from rdkit.Chem import rdFingerprintGenerator

from engine.chem import molecules as chem
from engine.errors import BundleError, ConfigError

FORMAT = "msgpt-bit-legend"
FORMAT_VERSION = 1
FILE_NAME = "bit_legend.json.gz"
COLUMNS = ("smiles", "smarts", "radius", "count")

_BOND_SMARTS = {
    Chem.BondType.SINGLE: "-",
    Chem.BondType.DOUBLE: "=",
    Chem.BondType.TRIPLE: "#",
    Chem.BondType.AROMATIC: ":",
}


def fingerprint_definition(n_bits: int = chem.N_BITS, radius: int = chem.RADIUS) -> dict:
    """The fingerprint a legend describes (must equal the model's: :func:`engine.chem.molecules.morgan_bits`)."""
    from rdkit import __version__ as rdkit_version

    return {
        "type": "morgan",
        "radius": radius,
        "n_bits": n_bits,
        "generator": f"rdFingerprintGenerator.GetMorganGenerator(radius={radius}, fpSize={n_bits}), no chirality",
        "rdkit": rdkit_version,
    }


@dataclass(frozen=True)
class Environment:
    """One atom environment behind a bit."""

    smiles: str  # fragment SMILES rooted at the centre atom, hydrogen counts of the whole molecule
    smarts: str  # SMARTS with the atom invariants Morgan hashes; matches the environment
    radius: int  # 0: the atom alone; 1, 2: neighbours out to that many bonds
    count: int = 0  # molecules of the sample in which it sets the bit

    def describe(self) -> str:
        return f"{self.smiles} (r={self.radius})"


def morgan_bit_info(mol: chem.Mol, n_bits: int = chem.N_BITS, radius: int = chem.RADIUS) -> dict[int, tuple]:
    """``{bit: ((centre atom, radius), ...)}`` of the model's Morgan fingerprint (:func:`engine.chem.molecules.morgan_bits`)."""
    output = rdFingerprintGenerator.AdditionalOutput()
    output.AllocateBitInfoMap()
    chem.morgan_generator(radius, n_bits).GetFingerprint(mol, additionalOutput=output)
    return dict(output.GetBitInfoMap())


_SMARTS_ALIPHATIC = ("B", "C", "N", "O", "P", "S", "F", "Cl", "Br", "I")
_SMARTS_AROMATIC = ("B", "C", "N", "O", "P", "S")


def _atom_smarts(atom: Chem.Atom) -> str:
    """SMARTS of one atom with the invariants Morgan hashes (element, degree, hydrogens, ring, charge)."""
    symbol, aromatic = atom.GetSymbol(), atom.GetIsAromatic()
    if aromatic and symbol in _SMARTS_AROMATIC:
        symbol = symbol.lower()
    elif not aromatic and symbol in _SMARTS_ALIPHATIC:
        pass
    else:
        symbol = f"#{atom.GetAtomicNum()}&{'a' if aromatic else 'A'}"
    parts = [symbol, f"D{atom.GetDegree()}", f"H{atom.GetTotalNumHs()}", "R" if atom.IsInRing() else "!R"]
    charge = atom.GetFormalCharge()
    if charge:
        parts.append(f"{'+' if charge > 0 else '-'}{abs(charge)}")
    return "[" + "&".join(parts) + "]"


def environment_fragment(mol: chem.Mol, center: int, radius: int) -> Environment:
    """The environment of ``radius`` bonds around atom ``center`` of ``mol``, as SMILES and SMARTS.

    The fragment is cut out as a molecule of its own (each atom keeping its hydrogen count), so the
    same environment gives the same strings in whatever molecule it sits.
    """
    if radius == 0:
        atoms, bonds = [center], []
    else:
        bonds = list(Chem.FindAtomEnvironmentOfRadiusN(mol, radius, center))
        atoms = sorted({center} | {a for b in bonds for a in (mol.GetBondWithIdx(b).GetBeginAtomIdx(),
                                                              mol.GetBondWithIdx(b).GetEndAtomIdx())})
    frag = Chem.RWMol()
    index = {}
    for i in atoms:
        src = mol.GetAtomWithIdx(i)
        atom = Chem.Atom(src.GetAtomicNum())
        atom.SetFormalCharge(src.GetFormalCharge())
        atom.SetIsAromatic(src.GetIsAromatic())
        atom.SetNumExplicitHs(src.GetTotalNumHs())
        atom.SetNoImplicit(True)
        index[i] = frag.AddAtom(atom)
    for k in bonds:
        b = mol.GetBondWithIdx(k)
        frag.AddBond(index[b.GetBeginAtomIdx()], index[b.GetEndAtomIdx()], b.GetBondType())
        if b.GetIsAromatic():
            frag.GetBondBetweenAtoms(index[b.GetBeginAtomIdx()], index[b.GetEndAtomIdx()]).SetIsAromatic(True)
    frag.UpdatePropertyCache(strict=False)
    root = index[center]
    src_atoms = [mol.GetAtomWithIdx(i) for i in atoms]  # invariants of the whole molecule, in fragment order
    with rdBase.BlockLogs():  # a partial aromatic ring cannot be kekulised; RDKit says so, harmlessly
        smiles = Chem.MolToSmiles(frag, rootedAtAtom=root, allHsExplicit=True, isomericSmiles=False)
        if not bonds:
            smarts = _atom_smarts(src_atoms[0])
        else:
            smarts = Chem.MolFragmentToSmiles(
                frag, atomsToUse=list(range(frag.GetNumAtoms())), bondsToUse=list(range(frag.GetNumBonds())),
                rootedAtAtom=root, isomericSmiles=False, allBondsExplicit=True,
                atomSymbols=[_atom_smarts(a) for a in src_atoms],
                bondSymbols=[_BOND_SMARTS.get(b.GetBondType(), "~") for b in frag.GetBonds()],
            )
    return Environment(smiles, smarts, radius)


def bit_environment_ids(mol: chem.Mol, n_bits: int = chem.N_BITS, radius: int = chem.RADIUS) -> dict[int, list[tuple]]:
    """``{bit: [(environment id, centre atom, radius), ...]}``: one entry per distinct environment.

    The id is the Morgan identifier before folding (equal ids: the same environment up to a 32-bit
    hash collision); the bits are those of :func:`engine.chem.molecules.morgan_bits`.
    """
    output = rdFingerprintGenerator.AdditionalOutput()
    output.AllocateBitInfoMap()
    chem.morgan_generator(radius, n_bits).GetSparseFingerprint(mol, additionalOutput=output)
    ids = {hit: env_id for env_id, hits in output.GetBitInfoMap().items() for hit in hits}
    out: dict[int, list[tuple]] = {}
    for bit, hits in morgan_bit_info(mol, n_bits, radius).items():
        seen: dict[int, tuple] = {}
        for center, r in sorted(hits, key=lambda h: (h[1], h[0])):
            env_id = ids[(center, r)]
            seen.setdefault(env_id, (env_id, center, r))
        out[int(bit)] = list(seen.values())
    return out


def bit_environments(mol: chem.Mol, n_bits: int = chem.N_BITS, radius: int = chem.RADIUS) -> dict[int, list[Environment]]:
    """``{bit: [distinct environments that set it in mol]}`` (ordered by radius, then centre atom)."""
    return {bit: [environment_fragment(mol, center, r) for _, center, r in hits]
            for bit, hits in bit_environment_ids(mol, n_bits, radius).items()}


class BitLegend:
    """The environments behind each bit, from ``bit_legend.json.gz`` (see the module docstring)."""

    def __init__(self, bits: dict[int, tuple[int, tuple[Environment, ...]]], *, n_molecules: int, source: str = "",
                 fingerprint: dict | None = None, top: int = 3):
        self.fingerprint = fingerprint or fingerprint_definition()
        n_bits = self.n_bits
        bad = [b for b in bits if not 0 <= b < n_bits]
        if bad:
            raise ConfigError(f"Bit legend: bit {bad[0]} is outside the fingerprint's [0, {n_bits}).")
        if not isinstance(n_molecules, int) or n_molecules < 0:
            raise ConfigError(f"`n_molecules` must be a non-negative integer, got {n_molecules!r}.")
        self._bits = bits
        self.n_molecules = n_molecules
        self.source = source
        self.top = top

    @property
    def n_bits(self) -> int:
        return int(self.fingerprint.get("n_bits", chem.N_BITS))

    @property
    def radius(self) -> int:
        return int(self.fingerprint.get("radius", chem.RADIUS))

    def __len__(self) -> int:
        return len(self._bits)

    def __contains__(self, bit: int) -> bool:
        return int(bit) in self._bits

    def environments(self, bit: int) -> tuple[Environment, ...]:
        """Most frequent environments of ``bit`` first; empty when no sampled molecule sets it."""
        return self._bits.get(int(bit), (0, ()))[1]

    def n_with_bit(self, bit: int) -> int:
        """Sampled molecules in which ``bit`` is set."""
        return self._bits.get(int(bit), (0, ()))[0]

    def frequency(self, bit: int) -> float:
        """Share of the sampled molecules in which ``bit`` is set."""
        return self.n_with_bit(bit) / self.n_molecules if self.n_molecules else 0.0

    def describe(self, bit: int, top: int | None = None) -> str:
        """One line: the environments with their share of the molecules that set the bit."""
        n = self.n_with_bit(bit)
        envs = self.environments(bit)[:top]
        if not envs:
            return "not seen in the corpus sample"
        return "; ".join(f"{e.smiles} ({share_text(e.count, n)})" for e in envs)

    # -- (de)serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "source": self.source,
            "n_molecules": self.n_molecules,
            "top": self.top,
            "columns": list(COLUMNS),
            "bits": {str(b): {"n": n, "env": [[e.smiles, e.smarts, e.radius, e.count] for e in envs]}
                     for b, (n, envs) in sorted(self._bits.items())},
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the legend atomically: compact JSON, gzip-compressed when the name ends in ``.gz``
        (reproducibly: the same legend gives the same bytes)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        data = (json.dumps(self.to_dict(), ensure_ascii=True, separators=(",", ":")) + "\n").encode("utf-8")
        if path.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=9, mtime=0)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: dict, where: str = "bit legend") -> BitLegend:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise BundleError(f"{where} is not an msgpt bit legend (expected \"format\": \"{FORMAT}\").")
        version = d.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise BundleError(f"{where} has format_version {version!r}, newer than this msgpt reads ({FORMAT_VERSION}); "
                              "upgrade msgpt or rebuild the legend with python -m training.bundle.bit_legend.")
        try:
            bits = {}
            for key, entry in d["bits"].items():
                envs = tuple(Environment(str(s), str(sm), int(r), int(c)) for s, sm, r, c in entry["env"])
                bits[int(key)] = (int(entry["n"]), envs)
            return cls(bits, n_molecules=int(d["n_molecules"]), source=str(d.get("source", "")),
                       fingerprint=dict(d["fingerprint"]), top=int(d.get("top", 3)))
        except (KeyError, TypeError, ValueError, ConfigError) as e:
            raise BundleError(f"{where} is malformed ({type(e).__name__}: {e}); rebuild it with "
                              "python -m training.bundle.bit_legend.") from e

    @classmethod
    def load(cls, path: str | os.PathLike) -> BitLegend:
        path = Path(path)
        try:
            raw = path.read_bytes()
            data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BundleError(f"Cannot read the bit legend {path}: {e}. Copy the bundle again or rebuild it "
                              "with python -m training.bundle.bit_legend.") from e
        return cls.from_dict(data, str(path))

    def check_fingerprint(self, n_bits: int, radius: int = chem.RADIUS) -> None:
        """Raise BundleError when the legend describes another fingerprint than the model's."""
        if self.n_bits != n_bits or self.radius != radius:
            raise BundleError(
                f"The bit legend describes a {self.n_bits}-bit radius-{self.radius} Morgan fingerprint but the model "
                f"reads {n_bits} bits of radius {radius}; rebuild it for this model with python -m training.bundle.bit_legend."
            )


def share_text(count: int, total: int) -> str:
    share = count / total if total else 0.0
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"


def legend_from_counts(n_with_bit, counts, examples, n_molecules: int, *, top: int = 3, source: str = "",
                       n_bits: int = chem.N_BITS, radius: int = chem.RADIUS) -> BitLegend:
    """The ``top`` most frequent environments per bit (ties: shorter, then alphabetical SMILES)."""
    if not isinstance(top, int) or top < 1:
        raise ConfigError(f"`top` must be a positive integer, got {top!r}.")
    bits = {}
    for bit, by_smiles in counts.items():
        best = sorted(by_smiles.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[:top]
        envs = tuple(Environment(s, examples[s].smarts, examples[s].radius, c) for s, c in best)
        bits[int(bit)] = (int(n_with_bit[bit]), envs)
    return BitLegend(bits, n_molecules=n_molecules, source=source, fingerprint=fingerprint_definition(n_bits, radius),
                     top=top)


def fragment_mol(smiles: str) -> chem.Mol | None:
    """An RDKit molecule of a legend fragment for drawing (partial rings stay aromatic, not sanitised)."""
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        return None
    mol.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(mol)
    return mol
