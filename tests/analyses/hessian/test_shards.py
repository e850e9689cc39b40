"""Random vectors drawn in pieces, and the reductions of one rank's part (one process: the part is the whole)."""

import pytest
import torch

from landscape.analyses.hessian.linalg import LOCAL, random_unit
from landscape.analyses.hessian.shards import ShardedInnerProduct, draw_parts
from landscape.errors import LandscapeError


def test_one_piece_is_the_plain_draw_and_the_parts_of_any_split_are_slices_of_one_whole_vector():
    n = 23
    whole = torch.randn(n, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(draw_parts([(0, n)], n, torch.Generator().manual_seed(5)), whole)
    pieces = draw_parts([(0, n)], n, torch.Generator().manual_seed(5), chunk=4)  # the whole vector, drawn by 4s
    for ranges in ([(0, 3), (10, 15)], [(3, 10), (15, 23)], [(22, 23), (0, 1)]):
        part = draw_parts(ranges, n, torch.Generator().manual_seed(5), chunk=4)
        assert torch.equal(part, torch.cat([pieces[a:b] for a, b in ranges]))


def test_every_rank_leaves_the_generator_in_the_same_state():
    a, b = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    draw_parts([(0, 2)], 30, a, chunk=7)
    draw_parts([(25, 30)], 30, b, chunk=7)
    assert torch.equal(a.get_state(), b.get_state())


def test_without_other_ranks_the_reductions_are_the_plain_ones():
    gen = torch.Generator().manual_seed(0)
    basis, r = torch.randn(9, 3, generator=gen, dtype=torch.float64), torch.randn(9, generator=gen, dtype=torch.float64)
    inner = ShardedInnerProduct([(0, 4), (4, 9)], 9)
    assert inner.local_length(9) == 9
    assert torch.allclose(inner.dot(r, r), r @ r, rtol=1e-15)
    assert torch.allclose(inner.project(basis, r), basis.T @ r, rtol=1e-15)
    assert torch.allclose(inner.norm(basis, dim=0), torch.linalg.vector_norm(basis, dim=0), rtol=1e-15)
    unit = inner.random_unit(9, torch.float64, torch.device("cpu"), torch.Generator().manual_seed(3))
    plain = LOCAL.random_unit(9, torch.float64, torch.device("cpu"), torch.Generator().manual_seed(3))
    assert torch.allclose(unit, plain, rtol=1e-15)
    assert torch.equal(plain, random_unit(9, torch.float64, "cpu", torch.Generator().manual_seed(3)))


def test_parts_that_do_not_cover_the_vector_are_refused():
    with pytest.raises(LandscapeError, match="exactly one rank"):
        ShardedInnerProduct([(0, 4)], 9)
    with pytest.raises(LandscapeError, match="must lie in"):
        ShardedInnerProduct([(0, 10)], 9)
