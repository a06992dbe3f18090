"""2D structure depictions with RDKit (no Qt): PNG bytes the GUI turns into pixmaps."""

from __future__ import annotations

from functools import lru_cache

from rdkit import rdBase
from rdkit.Chem.Draw import rdMolDraw2D

from engine.chem import molecules as chem


@lru_cache(maxsize=2048)
def depict_png(smiles: str, width: int, height: int, bond_width: float = 1.5) -> bytes | None:
    """PNG of the molecule ``smiles`` on a white ``width`` × ``height`` canvas; None if it cannot be parsed.

    Coordinates come from RDKit's depictor (``rdDepictor.Compute2DCoords``); cached, since the
    same candidates are drawn again whenever the table scrolls or re-sorts.
    """
    mol = chem.mol_with_2d_coords(smiles)
    if mol is None or width < 8 or height < 8:
        return None
    drawer = rdMolDraw2D.MolDraw2DCairo(int(width), int(height))
    opts = drawer.drawOptions()
    opts.bondLineWidth = bond_width
    opts.padding = 0.06
    opts.additionalAtomLabelPadding = 0.1
    opts.minFontSize = max(7, int(min(width, height) / 18))
    opts.maxFontSize = max(opts.minFontSize + 2, int(min(width, height) / 9))
    with rdBase.BlockLogs():
        rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
