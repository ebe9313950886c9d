"""Layer planning (pure): shared files go into shared layers, never a revert layer."""

from __future__ import annotations

from imgbuild.plan.layers import LayerFile, describe, plan_layers


def files(*names: str) -> frozenset[LayerFile]:
    return frozenset(LayerFile(n, f"sha-{n}") for n in names)


SM = ("attention.py", "flashinfer_sparse.py", "sparse_swa.py", "sparse_attn_indexer.py")
ENGRAM = ("engram.py", "model_state.py", "weight_utils.py")


def test_engram_shape_gives_a_shared_bottom_layer_and_one_engram_layer() -> None:
    plan = plan_layers({"latest": files(*SM, *ENGRAM), "engram-mem": files(*SM)})
    assert len(plan.nodes) == 2
    bottom, top = plan.nodes
    assert bottom.parent is None and {f.path for f in bottom.files} == set(SM)
    assert top.parent == 0 and {f.path for f in top.files} == set(ENGRAM)
    assert plan.chain("engram-mem") == (0,)
    assert plan.chain("latest") == (0, 1)
    assert bottom.variants == ("engram-mem", "latest") and top.variants == ("latest",)
    assert plan.notes == ()


def test_no_layer_ever_carries_a_file_its_variant_does_not_want() -> None:
    wanted = {"latest": files(*SM, *ENGRAM), "engram-mem": files(*SM), "bare": files()}
    plan = plan_layers(wanted)
    for variant, want in wanted.items():
        carried = {f for i in plan.chain(variant) for f in plan.nodes[i].files}
        assert carried == want
    assert plan.top("bare") is None


def test_same_path_different_content_is_not_shared() -> None:
    a = frozenset({LayerFile("x.py", "one"), LayerFile("y.py", "y")})
    b = frozenset({LayerFile("x.py", "two"), LayerFile("y.py", "y")})
    plan = plan_layers({"a": a, "b": b})
    assert plan.nodes[0].files == (LayerFile("y.py", "y"),)
    assert plan.chain("a") != plan.chain("b") and plan.chain("a")[0] == plan.chain("b")[0] == 0


def test_disjoint_variants_get_independent_layers() -> None:
    plan = plan_layers({"a": files("a.py"), "b": files("b.py")})
    assert [n.parent for n in plan.nodes] == [None, None]
    assert plan.notes == ()


def test_triangle_forces_a_copy_and_says_so() -> None:
    plan = plan_layers({"a": files("x", "y"), "b": files("y", "z"), "c": files("x", "z")})
    for v, want in (("a", {"x", "y"}), ("b", {"y", "z"}), ("c", {"x", "z"})):
        assert {f.path for i in plan.chain(v) for f in plan.nodes[i].files} == want
    assert plan.notes and all("forces stacking" in n for n in plan.notes)
    assert any(line.startswith("note:") for line in describe(plan))


def test_nested_chain_of_three() -> None:
    plan = plan_layers({"small": files("a"), "mid": files("a", "b"), "big": files("a", "b", "c")})
    assert plan.chain("small") == (0,)
    assert plan.chain("mid") == (0, 1)
    assert plan.chain("big") == (0, 1, 2)


def test_deterministic_regardless_of_input_order() -> None:
    one = plan_layers({"latest": files(*SM, *ENGRAM), "engram-mem": files(*SM), "x": files("q")})
    two = plan_layers({"x": files("q"), "engram-mem": files(*SM), "latest": files(*SM, *ENGRAM)})
    assert one == two
