"""Atomic checkpoint folders and the optimizer state round trip (training.core.checkpoint)."""

from __future__ import annotations

import pytest
import torch

from training.core.checkpoint import atomic_folder, complete_folder, load_optimizer_state, optimizer_tensors


def test_atomic_folder_replaces_the_folder_only_when_complete(tmp_path):
    final = tmp_path / "checkpoint"
    with atomic_folder(final) as tmp:
        assert tmp == tmp_path / "checkpoint.tmp" and not any(tmp.iterdir())
        (tmp / "state.json").write_text("1")
    assert (final / "state.json").read_text() == "1" and not tmp.exists()

    with pytest.raises(RuntimeError):
        with atomic_folder(final) as tmp:
            (tmp / "state.json").write_text("2")
            raise RuntimeError("crash while writing")
    assert (final / "state.json").read_text() == "1"  # the complete folder stays

    with atomic_folder(final, tmp=tmp_path / ".hidden.tmp") as tmp:  # a leftover scratch folder is cleared
        assert not any(tmp.iterdir())
        (tmp / "state.json").write_text("3")
    assert (final / "state.json").read_text() == "3"
    # the crashed write's scratch folder stays until the next write with that scratch name clears it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.tmp"]


def test_complete_folder_finds_the_previous_one_after_a_crash_in_the_swap(tmp_path):
    final = tmp_path / "checkpoint"
    assert complete_folder(final, "state.json") is None
    old = tmp_path / "checkpoint.old"
    old.mkdir()
    (old / "state.json").write_text("{}")
    assert complete_folder(final, "state.json") == old  # renamed away, the new one not yet in place
    final.mkdir()
    assert complete_folder(final, "state.json") == old  # an incomplete folder does not count
    (final / "state.json").write_text("{}")
    assert complete_folder(final, "state.json") == final


def test_optimizer_state_round_trip_by_parameter_name():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    groups = [{"params": [params[n] for n in names[:2]], "weight_decay": 0.1},
              {"params": [params[n] for n in names[2:]], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95))
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    tensors, saved_groups = optimizer_tensors(opt, names)
    again = torch.optim.AdamW([{"params": g["params"]} for g in groups], lr=1.0)
    load_optimizer_state(again, tensors, saved_groups, names)
    a, b = opt.state_dict(), again.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for i in a["state"]:
        for key, value in a["state"][i].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["state"][i][key])), (i, key)
