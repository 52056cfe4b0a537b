"""The layer's recorded solves (``return_aux``, per-call rows): built once per thread,
and each call reads the solves of its own forward alone."""

from __future__ import annotations

import threading
from typing import ClassVar

import torch

import combolayer as cl

BUILDS: list[object] = []


class CountedBlackbox(cl.Blackbox):
    """Blackbox that counts its builds and, while ``GATE`` is set, waits in forward."""

    gate: ClassVar[dict[str, threading.Event]] = {}

    def build(self, solver):
        BUILDS.append(solver)
        return super().build(solver)

    def forward(self, solver, costs, **kwargs):
        if self.gate:
            self.gate["started"].set()
            assert self.gate["release"].wait(30)
        return super().forward(solver, costs, **kwargs)


def mirrored() -> cl.ILP:
    """Two outputs, one chosen, and an auxiliary that equals the first output."""
    return cl.ILP(shape=[2], num_aux=1, constraints=[
        cl.Constraint(coefs=[1, 1, 0], sense="==", rhs=1),
        cl.Constraint(coefs=[1, 0, -1], sense="==", rhs=0)])


def test_the_recorded_solves_are_built_once_per_thread():
    layer = cl.ComboLayer(mirrored(), method=CountedBlackbox(), projection="none",
                          backend="highs")
    BUILDS.clear()
    w = torch.tensor([[0.0, 1.0], [1.0, 0.0]], requires_grad=True)
    for _ in range(3):
        y, aux = layer(w, return_aux=True)
        assert torch.equal(aux[:, 0], y[:, 0])
        y.sum().backward()
    assert len(BUILDS) == 1
    for _ in range(2):
        layer(w, A=torch.zeros(1, 3), b=torch.ones(1))
    assert len(BUILDS) == 2  # rows without aux: the other recording, once
    thread = threading.Thread(target=lambda: layer(w, return_aux=True))
    thread.start()
    thread.join()
    assert len(BUILDS) == 3


def test_a_backward_solve_during_the_next_call_is_not_that_calls_auxiliary():
    layer = cl.ComboLayer(mirrored(), method=CountedBlackbox(), projection="none",
                          backend="highs")
    w = torch.tensor([[0.0, 1.0]], requires_grad=True)
    first: dict[str, torch.Tensor] = {}
    second: dict[str, torch.Tensor] = {}
    gate = {"started": threading.Event(), "release": threading.Event()}

    def calls() -> None:
        first["y"], _ = layer(w, return_aux=True)
        CountedBlackbox.gate.update(gate)
        second["y"], second["aux"] = layer(w, return_aux=True)

    thread = threading.Thread(target=calls)
    try:
        thread.start()
        assert gate["started"].wait(30)
        # while the second call waits in its forward, the first call's backward solves
        # elsewhere (Blackbox's step to c + lam * dL/dy picks the other solution, aux 0)
        (first["y"] * torch.tensor([[5.0, -5.0]])).sum().backward()
    finally:
        CountedBlackbox.gate.clear()
        gate["release"].set()
        thread.join()
    assert first["y"].tolist() == [[1.0, 0.0]] and w.grad is not None
    assert second["y"].tolist() == [[1.0, 0.0]] and second["aux"].tolist() == [[1.0]]
