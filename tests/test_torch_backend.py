"""The pure-torch kernels (combolayer.backends.closed_form) under torch.func.vmap and
torch.compile."""

import torch

# -- vmap and compile ----------------------------------------------------------------------


def test_the_pure_torch_solvers_vmap_and_compile():
    from combolayer.backends.closed_form import ranks, topk_indicator

    costs = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(0))
    batched = torch.func.vmap(lambda c: topk_indicator(c, 2))(costs)
    torch.testing.assert_close(batched, topk_indicator(costs, 2))
    compiled = torch.compile(ranks, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(costs), ranks(costs))
