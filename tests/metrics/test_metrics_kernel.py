"""The compiled fused pass (numba, CPU) against the torch path and a slow sorted reference."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from pcmr.metrics._relevance import as_sparse
from pcmr.metrics.scan import Target, scan
from pcmr.ranking import fused_scan as _kernel


def reference(scores: torch.Tensor, relevant: torch.Tensor, width: int) -> tuple[list[list[int]], list[int],
                                                                                 list[int]]:
    """Top-width lists (ties: lower index), and per query 1 + the items scoring above the best positive
    and the items scoring as much as it (0 and 0: no positive), from a sorted list per query."""
    tops, ranks, ties = [], [], []
    for row, positives in zip(scores.double().tolist(), relevant.tolist()):
        order = sorted(range(len(row)), key=lambda g: (-row[g], g))
        tops.append(order[:width])
        best = max((row[g] for g in range(len(row)) if positives[g]), default=None)
        ranks.append(0 if best is None else sum(v > best for v in row) + 1)
        ties.append(0 if best is None else sum(v == best for v in row))
    return tops, ranks, ties


@pytest.fixture(params=[1, 2], ids=["serial", "parallel"])
def torch_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    """Torch's thread count, which picks the one-thread (serial) or the parallel compiled loops."""
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("block_size", [1, 5, None])
def test_fused_scan_matches_torch_path_and_reference(dtype, transposed, block_size, torch_threads):
    generator = torch.Generator().manual_seed(11)
    base = torch.randint(0, 4, (29, 13), generator=generator).to(dtype)  # many ties
    base[3, 5] = float("inf")
    base[7, 2] = float("-inf")
    relevant = torch.rand(29, 13, generator=generator) < 0.2
    relevant[0] = False
    scores = base.T.contiguous().T if transposed else base  # a column-major view walks columns
    rel = as_sparse(relevant, 29, 13)
    targets = [Target(rel), Target(rel, exact_ranks=False, rank_limit=4), Target(rel, precision=False)]
    fused = scan(scores, targets, hubness_ks=(1, 3), block_size=block_size)
    plain = scan(scores, targets, hubness_ks=(1, 3), block_size=block_size, use_kernel=False)
    _, ranks, ties = reference(base, relevant, 1)
    assert fused.per_query[0].ranks.tolist() == ranks
    assert [t if r else 0 for t, r in zip(fused.per_query[0].ties.tolist(), ranks)] == ties
    for ours, theirs in zip(fused.per_query, plain.per_query):
        assert torch.equal(ours.ranks, theirs.ranks)
        assert torch.equal(ours.ties, theirs.ties) and torch.equal(ours.tied_positives, theirs.tied_positives)
        assert torch.allclose(ours.r_precision, theirs.r_precision, equal_nan=True, rtol=0, atol=1e-12)
        assert torch.allclose(ours.map_at_r, theirs.map_at_r, equal_nan=True, rtol=0, atol=1e-12)
    for k in (1, 3):
        assert torch.equal(fused.k_occurrence[k], plain.k_occurrence[k])


@pytest.mark.parametrize("width", [0, 1, 6, 17])
def test_kernel_top_lists_and_counts_follow_tie_rule(width, torch_threads):
    generator = torch.Generator().manual_seed(2)
    scores = torch.randint(0, 3, (7, 17), generator=generator).float()
    relevant = torch.rand(7, 17, generator=generator) < 0.3
    relevant[2] = False
    rel = as_sparse(relevant, 7, 17)
    tops, ranks, ties = reference(scores, relevant, width)
    for matrix, query_ids in ((scores, torch.arange(7)), (scores.T.contiguous().T, torch.tensor([4, 0, 6]))):
        best = torch.full((query_ids.numel(), 1), float("inf"))
        for j, q in enumerate(query_ids.tolist()):
            positives = rel.indices[rel.indptr[q]:rel.indptr[q + 1]]
            if positives.numel():
                best[j, 0] = scores[q, positives].max()
        top, values, above, equal = _kernel.fused_scan(matrix, query_ids, width, best)
        assert top.tolist() == [tops[q] for q in query_ids.tolist()]
        assert torch.equal(values, scores[query_ids[:, None], top])
        has = [bool(relevant[q].any()) for q in query_ids.tolist()]
        assert [a + 1 if h else 0 for a, h in zip(above[:, 0].tolist(), has)] == [ranks[q] for q in query_ids.tolist()]
        assert [e if h else 0 for e, h in zip(equal[:, 0].tolist(), has)] == [ties[q] for q in query_ids.tolist()]
    wanted = torch.randint(0, 17, (7, 5), generator=generator)
    expected = relevant.gather(1, wanted)
    assert torch.equal(_kernel.contains(rel.indptr, rel.indices, torch.arange(7), wanted), expected)


SCAN_THEN_REPORT_POOL = """
import sys
import torch
torch.set_num_threads(int(sys.argv[1]))
from pcmr.metrics._relevance import as_sparse
from pcmr.metrics.scan import Target, scan
import numba
scores = torch.rand(300, 40)
scan(scores, [Target(as_sparse(torch.eye(300, 40, dtype=torch.bool), 300, 40))], hubness_ks=(1,))
scan(scores.T, [Target(as_sparse(torch.eye(40, 300, dtype=torch.bool), 40, 300))], hubness_ks=(1,))
try:
    numba.threading_layer()
except ValueError:
    print("pool not started")
else:
    print("pool started")
"""


def _scan_in_subprocess(threads: int, cache_dir) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "NUMBA_NUM_THREADS": "2"}
    result = subprocess.run([sys.executable, "-c", SCAN_THEN_REPORT_POOL, str(threads)], capture_output=True,
                            text=True, timeout=300, check=True, env=env)
    return result.stdout.strip()


@pytest.mark.parametrize("parallel_first", [False, True], ids=["fresh-cache", "parallel-loops-cached-first"])
def test_one_thread_process_never_starts_numbas_thread_pool(tmp_path, parallel_first):
    """A started OpenMP pool keeps an idle worker spinning, which slowed concurrent one-thread
    processes (study workers, DDP on CPU) up to 13x: a one-thread process must not start it, also
    when another process has already compiled and cached the parallel loops (numba's cache keys a
    function by name and line, not by its flags, so a twin of the same function would load them)."""
    if parallel_first:
        assert _scan_in_subprocess(2, tmp_path) == "pool started"
    assert _scan_in_subprocess(1, tmp_path) == "pool not started"
