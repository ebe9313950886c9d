"""Engram-on-disk (patch 0005, and the stager calls 0006 makes) on a real
CUDA GPU.

The patched ``engram.py`` stages rows from tables written by its own
``export_engram_tables()``; the released ``engram.py`` looks the same rows up
from HBM and from pinned host memory. Hashing, dequantizing and the Engram
forward are the release's Triton kernels in both. Everything is compared bit
for bit: warm and with the tables evicted from the page cache, decode,
prefill and speculative-decoding verify steps. ``model_state.py`` (0006)
itself needs vLLM and is tested on a CPU (tests/release/sm12x); here the
calls it makes (stage, disarm) are made directly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.support import needs

torch = needs.module("torch", "GPU", "the Engram modules run on it", how=needs.GPU_HOW)
needs.module("triton", "GPU", "the release's Engram kernels are Triton kernels", how=needs.GPU_HOW)
np = needs.module("numpy", "GPU", "the tables are written with it", how=needs.GPU_HOW)

from torch import nn  # noqa: E402

from tests.gpu.engram_harness import (  # noqa: E402
    TP,
    Batch,
    Shape,
    bits,
    env,
    evict,
    hash_batch,
    layout_config,
    load_engram,
    make_batch,
    make_engram,
    make_hash_state,
    parallel_config,
    read_pages,
    resident_pages,
    spec_verify_steps,
    write_checkpoint,
)

SHAPE = Shape()

# query lengths per request (1 = a decode token), and the CUDA graph bucket
CASES: dict[str, tuple[list[int], int | None]] = {
    "decode-8x1": ([1] * 8, None),
    "decode-13-padded-to-16": ([1] * 13, 16),
    "mixed-545": ([1] * 33 + [512], None),
    "prefill-8192": ([8192], None),
}


class World(SimpleNamespace):
    patched: ModuleType
    release: ModuleType
    config: Any
    layout: Any
    tables: dict[int, tuple[Any, Any]]
    table_dir: Path
    # The modules' own attributes (staged_rows, prepare_embeddings, ...) are
    # loaded at run time: typed Any rather than nn.Module.
    hash_release: Any
    hash_patched: Any
    hbm: list[Any]
    host: list[Any]
    disk: list[Any]
    stager: Any


@pytest.fixture(scope="module")
def world(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> World:
    w = World()
    w.patched = load_engram(sources / "patched" / "engram.py", "engram_patched")
    w.release = load_engram(sources / "release" / "engram.py", "engram_release")
    w.config = layout_config(SHAPE, w.release)
    w.layout = w.release.EngramLayout(w.config)
    root = tmp_path_factory.mktemp("engram")
    (root / "ckpt").mkdir()
    w.tables = write_checkpoint(root / "ckpt" / "model-00001.safetensors", w.config, SHAPE)
    w.table_dir = root / "tables"
    written = w.patched.export_engram_tables(str(root / "ckpt"), str(w.table_dir))
    assert len(written) == 3 * len(SHAPE.layer_ids)  # weight, scale, meta per layer
    w.hash_release = make_hash_state(w.release, w.layout, SHAPE)
    w.hash_patched = make_hash_state(w.patched, w.patched.EngramLayout(w.config), SHAPE)
    w.hbm, w.host, w.disk = [], [], []
    for index in range(len(SHAPE.layer_ids)):
        hbm = make_engram(w.release, w.layout, w.config, index, "hbm", None, w.tables)
        w.hbm.append(hbm)
        w.host.append(make_engram(w.release, w.layout, w.config, index, "host", None, w.tables, reference=hbm))
        w.disk.append(make_engram(w.patched, w.layout, w.config, index, "disk", w.table_dir, w.tables, reference=hbm))
    with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(w.table_dir)):
        w.stager = w.patched.EngramDiskStager.create(nn.ModuleList([w.hash_patched, *w.disk]))
    assert w.stager is not None
    return w


def stage(w: World, batch: Batch) -> None:
    w.stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)


def release_rows(w: World, batch: Batch) -> torch.Tensor:
    """The release's hash ids for `batch`, with its HBM and host layers' rows looked up."""
    hashes = hash_batch(w.hash_release, w.release, batch)
    for index in range(len(SHAPE.layer_ids)):
        w.hbm[index].prepare_embeddings(hashes[:, index])
        w.host[index].prepare_embeddings(hashes[:, index])
    return hashes


@pytest.mark.parametrize("case", list(CASES))
def test_staged_rows_and_forward_equal_the_release_bit_for_bit(world: World, case: str) -> None:
    query_lens, pad_to = CASES[case]
    batch = make_batch(query_lens, seed=len(case), pad_to=pad_to)
    n = batch.num_tokens
    stage(world, batch)
    hashes = release_rows(world, batch)
    torch.cuda.synchronize()
    assert torch.equal(world.stager._host_hashes[:n], hashes.cpu()), "the stager hashes as the forward does"
    generator = torch.Generator(device="cuda").manual_seed(n)
    for index in range(len(SHAPE.layer_ids)):
        disk, hbm, host = world.disk[index], world.hbm[index], world.host[index]
        host._ready_rows(n)  # the host lookup runs on its prefetch stream
        torch.cuda.synchronize()
        staged = disk.staged_rows[:n]
        assert staged.abs().sum().item() > 0, "rows were staged, not left zero"
        assert torch.equal(bits(staged), bits(hbm.staged_rows[:n])), f"layer {index}: disk vs HBM rows"
        assert torch.equal(bits(staged), bits(host.staged_rows[:n])), f"layer {index}: disk vs pinned-host rows"
        hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), generator=generator, device="cuda").to(torch.bfloat16)
        layer_hashes = hashes[:, index]
        disk.prepare_embeddings(layer_hashes)
        out_disk = disk(hidden, layer_hashes)
        out_hbm = hbm(hidden, layer_hashes)
        out_host = host(hidden, layer_hashes)
        assert not torch.equal(bits(out_disk), bits(hidden)), "the Engram forward changed the stream"
        assert torch.equal(bits(out_disk), bits(out_hbm)), f"layer {index}: forward, disk vs HBM"
        assert torch.equal(bits(out_disk), bits(out_host)), f"layer {index}: forward, disk vs pinned host"
    torch.cuda.synchronize()
    assert world.stager.stale.sum().item() == 0, "the forward's check passed its own rows"


def tables(w: World) -> list[Any]:
    return [slot.table for slot in w.stager.slots]


def assert_step_equals_release(w: World, batch: Batch, what: str) -> None:
    """Stage `batch`, then the forward of every layer equals the release's
    HBM and pinned-host paths bit for bit, and its stale check passes."""
    n = batch.num_tokens
    stage(w, batch)
    hashes = release_rows(w, batch)
    generator = torch.Generator(device="cuda").manual_seed(n)
    for index in range(len(SHAPE.layer_ids)):
        disk, hbm, host = w.disk[index], w.hbm[index], w.host[index]
        host._ready_rows(n)
        hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), generator=generator, device="cuda").to(torch.bfloat16)
        layer_hashes = hashes[:, index]
        disk.prepare_embeddings(layer_hashes)
        out_disk = disk(hidden, layer_hashes)
        torch.cuda.synchronize()
        staged = disk.staged_rows[:n]
        assert torch.equal(bits(staged), bits(hbm.staged_rows[:n])), f"{what}, layer {index}: rows, disk vs HBM"
        assert torch.equal(bits(staged), bits(host.staged_rows[:n])), f"{what}, layer {index}: rows, disk vs host"
        assert torch.equal(bits(out_disk), bits(hbm(hidden, layer_hashes))), f"{what}, layer {index}: forward vs HBM"
        assert torch.equal(bits(out_disk), bits(host(hidden, layer_hashes))), f"{what}, layer {index}: forward vs host"
    torch.cuda.synchronize()
    assert w.stager.stale.sum().item() == 0, what


@pytest.mark.parametrize("case", ["decode-8x1", "prefill-8192"])
def test_cold_staging_reads_evicted_tables_and_equals_the_release(world: World, case: str) -> None:
    """Pages really evicted (unmapped, dropped, mincore 0%): the stager asks
    the disk for them (read hints) and stages the same bits as warm."""
    query_lens, pad_to = CASES[case]
    batch = make_batch(query_lens, seed=11, pad_to=pad_to)
    assert evict(tables(world)) == 0.0, "every table page left the page cache"
    assert_step_equals_release(world, batch, f"cold {case}")
    assert all(t.hint_calls > 0 for t in tables(world)), "a cold step asks the disk for its pages"
    # The same step again finds its pages cached: no hints.
    assert_step_equals_release(world, batch, f"warm {case}")
    assert all(t.hint_calls == 0 for t in tables(world)), "a warm step skips the hints"


def test_speculative_verify_steps_equal_the_release(world: World) -> None:
    """DSpark k=5: k+1 positions per request, drafts accepted or rolled back
    between steps; each step staged cold and warm equals the release."""
    for step, batch in enumerate(spec_verify_steps(num_reqs=8, k=5, steps=4, seed=5)):
        assert batch.num_tokens == 8 * 6
        if step % 2 == 0:
            assert evict(tables(world)) == 0.0
        assert_step_equals_release(world, batch, f"verify step {step}")
    # A 48-token verify step padded to a 56-token CUDA graph bucket.
    (batch,) = spec_verify_steps(num_reqs=8, k=5, steps=1, seed=6)
    pad = 8
    padded = Batch(
        torch.cat([batch.input_ids, batch.input_ids[-1:].repeat(pad)]),
        torch.cat([batch.positions, torch.zeros(pad, dtype=torch.int64, device="cuda")]),
        batch.query_start_loc,
        batch.lookback,
    )
    assert_step_equals_release(world, padded, "padded verify step")


@pytest.mark.parametrize("tp_size", [2, 5])
def test_each_tp_rank_stages_exactly_its_shard(world: World, tp_size: int) -> None:
    batch = make_batch([1] * 31 + [300], seed=tp_size)
    n = batch.num_tokens
    hashes = hash_batch(world.hash_release, world.release, batch)
    try:
        TP.size = tp_size
        for rank in range(tp_size):
            TP.rank = rank
            hbm = make_engram(
                world.release, world.layout, world.config, 0, "hbm", None, world.tables, reference=world.hbm[0]
            )
            disk = make_engram(
                world.patched,
                world.layout,
                world.config,
                0,
                "disk",
                world.table_dir,
                world.tables,
                reference=world.hbm[0],
            )
            with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(world.table_dir)):
                stager = world.patched.EngramDiskStager.create(nn.ModuleList([world.hash_patched, disk]))
            assert disk.embed_tokens.disk_table.row_start == hbm.embed_tokens.vocab_start_idx
            stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)
            hbm.prepare_embeddings(hashes[:, 0])
            torch.cuda.synchronize()
            assert torch.equal(bits(disk.staged_rows[:n]), bits(hbm.staged_rows[:n])), f"rank {rank} of {tp_size}"
            assert disk.staged_rows[:n].abs().sum().item() > 0
    finally:
        TP.size, TP.rank = 1, 0


def test_forward_captures_in_a_cuda_graph_and_replays_after_restaging(world: World) -> None:
    n = 64
    disk, hbm = world.disk[0], world.hbm[0]
    first = make_batch([1] * n, seed=100)
    stage(world, first)
    # The graph's hash ids live in a static buffer (in vLLM the hash op runs
    # inside the graph on the runner's input buffers).
    hashes = hash_batch(world.hash_patched, world.patched, first)[:, 0].contiguous()
    hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up compiles the kernels outside the capture
            disk.prepare_embeddings(hashes)
            disk(hidden, hashes)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")  # any host sync in the region raises
    try:
        with torch.cuda.graph(graph):
            disk.prepare_embeddings(hashes)
            out = disk(hidden, hashes)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for seed in (101, 102, 103):
        batch = make_batch([1] * n, seed=seed)
        if seed == 102:
            assert evict(tables(world)) == 0.0  # one restaging from a cold cache
        stage(world, batch)
        step_hashes = release_rows(world, batch)[:, 0]
        hashes.copy_(step_hashes)
        hidden.copy_(torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16))
        graph.replay()
        expected = hbm(hidden, step_hashes)
        torch.cuda.synchronize()
        assert torch.equal(bits(out), bits(expected)), f"replay after restaging batch {seed}"
    assert world.stager.stale.sum().item() == 0

    # A replay whose tokens are not the staged ones: caught on the GPU.
    stage(world, make_batch([1] * n, seed=104))
    graph.replay()  # hash ids still batch 103's
    torch.cuda.synchronize()
    assert world.stager.stale[0].item() == 1
    assert out.isnan().all(), "the replay's output is poisoned"
    with pytest.raises(RuntimeError, match="staged for other tokens"):
        stage(world, make_batch([1] * n, seed=105))
    world.stager.stale.zero_()


def test_a_forward_on_another_steps_rows_is_caught_without_a_host_sync(world: World) -> None:
    """The stager's rows are batch A's, the forward hashes batch B: the
    check (one kernel, no sync) flags the layer and poisons its rows with
    NaN; the next stage() raises. A forward after disarm() (capture) is not
    checked, and the padding after the checked tokens is not compared."""
    a, b = make_batch([1] * 8, seed=21), make_batch([1] * 8, seed=22)
    hashes_b = hash_batch(world.hash_patched, world.patched, b)
    hidden = torch.randn((8, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16)
    disk = world.disk[1]
    try:
        stage(world, a)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            disk.prepare_embeddings(hashes_b[:, 1])
            out = disk(hidden, hashes_b[:, 1])
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        assert world.stager.stale.tolist() == [0, 1], "layer 1's flag, only"
        assert out.isnan().all(), "every token's output is NaN"
        with pytest.raises(RuntimeError, match=r"staged for other tokens \(Engram layers \[1\]\)"):
            stage(world, b)
        world.stager.stale.zero_()

        # Capture inputs: disarmed, so a dummy forward passes.
        stage(world, a)
        world.stager.disarm()
        disk.prepare_embeddings(hashes_b[:, 1])
        torch.cuda.synchronize()
        assert world.stager.stale.sum().item() == 0

        # Only the first num_tokens (the real ones) are compared.
        world.stager.stage(a.input_ids, a.positions, a.query_start_loc, a.lookback, 4)
        hashes_a = hash_batch(world.hash_patched, world.patched, a)[:, 1].clone()
        hashes_a[4:] = hashes_b[4:, 1]  # different padding
        disk.prepare_embeddings(hashes_a)
        torch.cuda.synchronize()
        assert world.stager.stale.sum().item() == 0
        assert not disk.staged_rows[:8].isnan().any()
    finally:
        world.stager.stale.zero_()


def test_eager_forward_after_staging_makes_no_host_sync(world: World) -> None:
    batch = make_batch([1] * 16, seed=7)
    stage(world, batch)
    hashes = hash_batch(world.hash_patched, world.patched, batch)[:, 1]
    hidden = torch.randn((16, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16)
    world.disk[1](hidden, hashes)  # compile first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        world.disk[1].prepare_embeddings(hashes)
        world.disk[1](hidden, hashes)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_buffers_keep_their_addresses_and_steps_allocate_nothing_that_stays(world: World) -> None:
    def addresses() -> list[int]:
        found = [world.stager._host_hashes.data_ptr()]
        for slot in world.stager.slots:
            found += [
                t.data_ptr()
                for t in (
                    slot.host_values,
                    slot.host_scales,
                    slot.host_ids,
                    slot.values,
                    slot.scales,
                    slot.ids,
                    slot.out,
                )
            ]
        return found

    before = addresses()
    stage(world, make_batch([1] * 8, seed=0))
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    for step in range(50):
        lens = [[1] * 8, [1] * 64, [1] * 20 + [200], [1] * 3][step % 4]
        stage(world, make_batch(lens, seed=step))
    torch.cuda.synchronize()
    assert addresses() == before
    assert torch.cuda.memory_allocated() == allocated


def test_stage_never_returns_without_staging(world: World) -> None:
    """stage() has no early return: no input ids, or a KV cache the forward
    would skip Engram for, raise."""
    batch = make_batch([1] * 4, seed=3)
    with pytest.raises(ValueError, match="input ids"):
        world.stager.stage(None, batch.positions, batch.query_start_loc, batch.lookback)
    kv = world.hash_patched.swa_cache_module.kv_cache
    world.hash_patched.swa_cache_module.kv_cache = torch.empty(0, device="cuda")
    try:
        assert not world.stager.forward_uses_engram()
        with pytest.raises(RuntimeError, match="KV cache unbound"):
            stage(world, batch)
    finally:
        world.hash_patched.swa_cache_module.kv_cache = kv
    assert world.stager.forward_uses_engram()


def test_disk_mode_without_a_stager_fails_loudly(world: World) -> None:
    orphan = make_engram(
        world.patched, world.layout, world.config, 0, "disk", world.table_dir, world.tables, reference=world.hbm[0]
    )
    hashes = hash_batch(world.hash_patched, world.patched, make_batch([1] * 4, seed=3))[:, 0]
    with pytest.raises(RuntimeError, match="no EngramDiskStager stages its rows"):
        orphan.prepare_embeddings(hashes)


def test_the_profile_runs_dummy_hashes_pass_the_check_once_disarmed(world: World) -> None:
    """vLLM 0.34.0's forward hands the Engram layers dummy hash ids (DEAD_ID,
    gate shut) whenever it skips hashing, the profile run included, where
    0.33.0 skipped prepare_embeddings. The model state disarms the check for
    such a step (0006); without that, the check counts the dummy ids as
    another step's rows."""
    batch = make_batch([1] * 8, seed=31)
    dummy, keep = world.hash_patched.dummy_hashes(batch.input_ids)
    assert not keep.any()
    disk = world.disk[0]
    try:
        stage(world, batch)
        world.stager.disarm()  # what prepare_inputs does when forward_uses_engram() is False
        disk.prepare_embeddings(dummy[:, 0])
        torch.cuda.synchronize()
        assert world.stager.stale.sum().item() == 0
        stage(world, batch)  # no stale verdict to raise on

        disk.prepare_embeddings(dummy[:, 0])  # not disarmed: caught
        torch.cuda.synchronize()
        assert world.stager.stale[0].item() == 1
        with pytest.raises(RuntimeError, match="staged for other tokens"):
            stage(world, batch)
    finally:
        world.stager.stale.zero_()


def test_tables_that_do_not_match_the_checkpoint_are_refused(world: World, tmp_path: Path) -> None:
    bad = tmp_path / "tables"
    shutil.copytree(world.table_dir, bad)
    layer = SHAPE.layer_ids[0]
    meta = bad / f"layers.{layer}.engram.embed.json"
    meta.write_text(meta.read_text().replace("F8_E4M3", "BF16"))
    with pytest.raises(ValueError, match="BF16"):
        make_engram(world.patched, world.layout, world.config, 0, "disk", bad, world.tables)
    os.remove(meta)
    with pytest.raises(FileNotFoundError, match="re-export"):
        make_engram(world.patched, world.layout, world.config, 0, "disk", bad, world.tables)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        make_engram(world.patched, world.layout, world.config, 0, "disk", tmp_path / "missing", world.tables)


FAILING_STEP = textwrap.dedent(
    """
    import os, sys, tempfile
    from pathlib import Path
    import torch
    from torch import nn
    sys.path.insert(0, sys.argv[1])
    from tests.gpu.engram_harness import *
    shape = Shape(vocab_size=3000, max_tokens=64)
    root = Path(tempfile.mkdtemp())
    patched = load_engram(Path(sys.argv[2]), "engram_patched")
    config = layout_config(shape, patched)
    layout = patched.EngramLayout(config)
    (root / "ckpt").mkdir()
    tables = write_checkpoint(root / "ckpt" / "m.safetensors", config, shape)
    patched.export_engram_tables(str(root / "ckpt"), str(root / "t"))
    disk = make_engram(patched, layout, config, 0, "disk", root / "t", tables)
    with env(DSV41_ENGRAM_DISK="1", DSV41_ENGRAM_DIR=str(root / "t")):
        stager = patched.EngramDiskStager.create(nn.ModuleList([make_hash_state(patched, layout, shape), disk]))
    batch = make_batch([1] * 8, seed=1, vocab=2000)
    stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)
    torch.cuda.synchronize()
    print("first step staged", flush=True)
    weight = patched.engram_table_paths(str(root / "t"), shape.layer_ids[0])[0]
    os.truncate(weight, 4096)
    stager.stage(batch.input_ids, batch.positions, batch.query_start_loc, batch.lookback)
    torch.cuda.synchronize()
    print("the forward would have run on missing rows", flush=True)
    """
)


def test_a_table_that_shrinks_under_a_running_server_stops_staging_with_its_path(sources: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_STEP, str(repo), str(sources / "patched" / "engram.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "first step staged" in proc.stdout, out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    assert "the forward would have run" not in proc.stdout
    assert "OSError" in out and "shrank to 4096" in out, out[-3000:]


def forward_all(w: World, hashes: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """Every disk layer's Engram forward on `hashes` (no sync)."""
    n = hashes.shape[0]
    generator = torch.Generator(device="cuda").manual_seed(seed)
    outs = []
    for index, disk in enumerate(w.disk):
        hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), generator=generator, device="cuda").to(torch.bfloat16)
        disk.prepare_embeddings(hashes[:, index])
        outs.append(disk(hidden, hashes[:, index]))
    return outs


def test_a_bad_step_is_refused_before_its_sample_and_the_next_step_recovers(world: World) -> None:
    """Issue 46 item 4. A forward on rows staged for another step writes its
    verdict into pinned host memory (no sync in the forward); once the step's
    sampled ids are on the host (the runner's own sync), refuse_poisoned()
    refuses that step, naming its layers, before its sample is used. The
    verdict is then cleared: the next correctly staged step runs and equals
    the release. A verdict nobody took is raised once by the next stage(),
    and the step after that runs; in a captured graph the same."""
    stager = world.stager
    a, b = make_batch([1] * 8, seed=41), make_batch([1] * 8, seed=42)
    hashes_b = hash_batch(world.hash_patched, world.patched, b)
    try:
        stage(world, a)
        outs = forward_all(world, hashes_b, seed=1)
        sampled = torch.stack([o.float().flatten(1).sum(dim=1) for o in outs]).argmax(dim=0)  # a stand-in sampler
        sampled_host = sampled.to("cpu", non_blocking=True)
        torch.cuda.current_stream().synchronize()  # the runner's sync on its sampled ids
        assert all(o.isnan().all() for o in outs), "the bad step's outputs are NaN"
        assert sampled_host.shape == (8,)
        with pytest.raises(world.patched.EngramStaleRowsError, match=r"Engram layers \[0, 1\]"):
            stager.refuse_poisoned()
        stager.refuse_poisoned()  # taken: cleared
        assert_step_equals_release(world, b, "the step after a refused one")
        assert stager.poisoned_layers() == []

        # Nobody took the verdict: the next stage() raises once, then runs.
        stage(world, a)
        forward_all(world, hashes_b, seed=2)
        with pytest.raises(RuntimeError, match=r"staged for other tokens \(Engram layers \[0, 1\]\)"):
            stage(world, b)
        assert_step_equals_release(world, b, "the step after a raised stage()")
        assert_step_equals_release(world, make_batch([1] * 20 + [300], seed=43), "a later mixed step")
    finally:
        stager.poisoned_layers()

    # In a captured graph: a bad replay is refused, a restaged one recovers.
    n = 32
    disk, hbm = world.disk[0], world.hbm[0]
    first = make_batch([1] * n, seed=44)
    stage(world, first)
    hashes = hash_batch(world.hash_patched, world.patched, first)[:, 0].contiguous()
    hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), device="cuda").to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            disk.prepare_embeddings(hashes)
            disk(hidden, hashes)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        disk.prepare_embeddings(hashes)
        out = disk(hidden, hashes)
    torch.cuda.synchronize()
    assert stager.poisoned_layers() == []
    stage(world, make_batch([1] * n, seed=45))  # the replay's ids stay batch 44's
    graph.replay()
    torch.cuda.synchronize()
    assert out.isnan().all()
    assert stager.poisoned_layers() == [0], "the replay's verdict, layer 0"
    good = make_batch([1] * n, seed=46)
    stage(world, good)
    step_hashes = release_rows(world, good)[:, 0]
    hashes.copy_(step_hashes)
    graph.replay()
    expected = hbm(hidden, step_hashes)
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(expected)), "the replay after the refused one equals the release"
    assert stager.poisoned_layers() == []


def test_stage_with_a_ready_event_waits_for_it_only_and_leaves_the_forward_before_whole(world: World) -> None:
    """Issue 46 item 3. stage(ready=) hashes on a side stream behind the
    caller's event only: it returns while GPU work queued after that event
    (here 200 ms of it, then the previous step's forward) is still pending,
    and the copies and kernels that refill the layers' rows run behind that
    forward, which reads its own rows (equal to the release) and passes its
    check; the new step's rows then equal the release's."""
    n = 8
    a, b = make_batch([1] * n, seed=51), make_batch([1] * n, seed=52)
    stage(world, b)  # both steps' pages cached
    stage(world, a)
    hashes_a = hash_batch(world.hash_patched, world.patched, a)
    ready = torch.cuda.Event()
    ready.record()  # b's inputs are written
    torch.cuda._sleep(int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 0.2))
    outs_a = forward_all(world, hashes_a, seed=7)
    done = torch.cuda.Event()
    done.record()
    world.stager.stage(b.input_ids, b.positions, b.query_start_loc, b.lookback, ready=ready)
    assert not done.query(), "stage(ready=) waited for the work queued after its event"
    torch.cuda.synchronize()
    assert world.stager.stale.sum().item() == 0, "the forward before it read its own rows"
    hashes = release_rows(world, a)
    generator = torch.Generator(device="cuda").manual_seed(7)
    for index, out in enumerate(outs_a):
        hidden = torch.randn((n, SHAPE.hc_mult, SHAPE.hidden), generator=generator, device="cuda").to(torch.bfloat16)
        expected = world.hbm[index](hidden, hashes[:, index])
        assert torch.equal(bits(out), bits(expected)), f"layer {index}: the forward before, vs HBM"
    release_rows(world, b)
    torch.cuda.synchronize()
    for index, disk in enumerate(world.disk):
        staged = disk.staged_rows[:n]
        assert torch.equal(bits(staged), bits(world.hbm[index].staged_rows[:n])), f"layer {index}: b's rows"
    assert torch.equal(world.stager._host_hashes[:n], hash_batch(world.hash_release, world.release, b).cpu())


@pytest.mark.parametrize(
    ("parallel", "named"),
    [
        (parallel_config(enable_dbo=True, data_parallel_size=2), "dual-batch overlap, enable_dbo=True"),
        (parallel_config(ubatch_size=4), "ubatch_size=4"),
        (parallel_config(data_parallel_size=2), "data_parallel_size=2"),
    ],
)
def test_unsupported_parallel_modes_are_refused_at_load_by_name(world: World, parallel: Any, named: str) -> None:
    """Issue 46 item 5: micro-batching (dual-batch overlap, ubatch_size > 1)
    and DP > 1 stop a disk-backed Engram layer as it is built, naming the
    mode; the release's table (HBM) loads under the same config."""
    with pytest.raises(ValueError, match=rf"DSV41_ENGRAM_DISK=1 does not support.*{re.escape(named)}"):
        make_engram(
            world.patched,
            world.layout,
            world.config,
            0,
            "disk",
            world.table_dir,
            world.tables,
            reference=world.hbm[0],
            parallel=parallel,
        )
    hbm = make_engram(
        world.patched,
        world.layout,
        world.config,
        0,
        "hbm",
        None,
        world.tables,
        reference=world.hbm[0],
        parallel=parallel,
    )
    assert hbm.embed_tokens.disk_table is None


def step_pages(w: World, batch: Batch) -> list[np.ndarray]:
    """The distinct weight-file pages each table reads for `batch` (staging
    it once, warm)."""
    stage(w, batch)
    torch.cuda.synchronize()
    hashes = w.stager._host_hashes_np[: batch.num_tokens].copy()
    return [slot.table._pages(slot.select(hashes[:, slot.layer_hash_index])) for slot in w.stager.slots]


@pytest.mark.parametrize("cached", ["every-third", "first-third"])
@pytest.mark.parametrize("case", ["decode-8x1", "decode-64x1", "prefill-8192"])
def test_a_partly_warm_cache_gets_hints_for_what_is_missing(world: World, case: str, cached: str) -> None:
    """Issue 46 item 6: a third of the step's pages in the page cache
    (mincore-checked; every third page, or the first third in file order,
    where the rows of the first hash heads lie), the rest evicted: the step
    is not taken for warm, asks for what is missing (a large step exactly
    the pages mincore finds missing, a small one all its page runs), stages
    the release's bits, and leaves every page of the step cached."""
    query_lens, pad_to = CASES.get(case, ([1] * 64, None))
    batch = make_batch(query_lens, seed=51, pad_to=pad_to)
    pages = step_pages(world, batch)
    assert evict(tables(world)) == 0.0
    missing = []
    for table, table_pages in zip(tables(world), pages, strict=True):
        warmed = table_pages[::3] if cached == "every-third" else table_pages[: table_pages.size // 3]
        read_pages(table.paths[0], warmed)
        resident = resident_pages(table.mapping, table_pages)
        assert resident[np.isin(table_pages, warmed)].all(), "the warmed pages are cached"
        assert 0.3 < resident.mean() < 0.5, f"a third of the step's pages cached, found {resident.mean():.0%}"
        missing.append(int((~resident).sum()))
    assert_step_equals_release(world, batch, f"partly warm {case}")
    for table, table_pages, gone in zip(tables(world), pages, missing, strict=True):
        assert table.hint_calls > 0, "a partly warm step asks for its pages"
        large = table_pages.size >= world.patched.ENGRAM_ROWS_PER_TASK
        if large:  # what mincore found missing: at most what was evicted, less what the kernel read ahead since
            # (an H100 run found 96,156 of 96,158: two pages came back between the test's count and the step's)
            assert gone - gone // 1000 <= table.missing_pages <= gone, (table.missing_pages, gone)
        else:
            assert table.missing_pages == table_pages.size
        assert resident_pages(table.mapping, table_pages).all()


@pytest.mark.parametrize("mode", ["pool-hint", "read"])
def test_a_cold_prefill_asks_for_its_pages_from_the_pool_and_equals_the_release(world: World, mode: str) -> None:
    """Issue 46 item 1: in the modes that use the pool, a cold 8192-token
    step's page runs go out from the pool's threads, as hints or as preadv
    reads of the merged runs, and the step stages the release's bits (the
    default, hints from the calling thread, is the cold tests above)."""
    batch = make_batch([8192], seed=61)
    saved = world.patched.ENGRAM_PREFETCH_MODE
    world.patched.ENGRAM_PREFETCH_MODE = mode
    try:
        assert evict(tables(world)) == 0.0
        assert_step_equals_release(world, batch, f"cold prefill, {mode}")
    finally:
        world.patched.ENGRAM_PREFETCH_MODE = saved
    runs = [t.hint_calls for t in tables(world)]
    assert all(r > world.patched.ENGRAM_HINTS_PER_TASK for r in runs), f"split over the pool: {runs} runs"
