"""The `--json` documents' types (src/imgbuild/report/documents/) are the contract: docs/schema/ is generated from
them (no drift), each name of jsondoc.VERSIONS has one, and a document prints as its schema says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imgbuild import jsondoc
from imgbuild.plan.bake import BakeChecked
from imgbuild.registry.lock import LockChecked
from imgbuild.report.documents import all_documents, schema_files
from imgbuild.report.documents.__main__ import main
from imgbuild.report.documents.images import LOCK_CHECK
from imgbuild.report.documents.patches import PATCHES_REBASE_ABORT
from imgbuild.workflows.rebase.state import Aborted
from tests.support.jsonschema_check import SCHEMA_DIR, load_json

# Some domain modules import gitpython, which runs `git version` once: import them at collection, before the
# unit tier's no-process guard is on (the schemas import each document's type when they are made).
SHAPES = [c.shape for c in all_documents()]


def test_the_committed_schemas_are_the_ones_the_types_make() -> None:
    for name, text in schema_files().items():
        path = SCHEMA_DIR / name
        assert path.is_file() and path.read_text(encoding="utf-8") == text, (
            f"docs/schema/{name} differs from its type: run python3 -m imgbuild.report.documents --write docs/schema"
        )


def test_the_generator_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", str(SCHEMA_DIR)]) == 0
    assert main(["--write", str(tmp_path)]) == 0 and main(["--check", str(tmp_path)]) == 0
    (tmp_path / "lock-check.v1.json").write_text("{}\n")
    assert main(["--check", str(tmp_path)]) == 1
    assert "lock-check.v1.json: differs from its type" in capsys.readouterr().err


def test_one_type_per_document_of_the_table() -> None:
    assert [c.name for c in all_documents()] == list(jsondoc.VERSIONS)


def test_a_document_prints_schema_first_and_only_the_keys_of_its_type() -> None:
    doc = load_json(PATCHES_REBASE_ABORT.of(Aborted(True, "aborted")).render(), expect="patches-rebase-abort")
    assert list(doc) == ["schema", "ok", "message"] and doc["ok"] is True
    stale = load_json(LOCK_CHECK.of(LockChecked(ok=True, problems=["stale"])).render(), expect="lock-check")
    assert stale == {"schema": "imgbuild.lock-check/1", "ok": False, "problems": ["stale"]}  # `ok` from `problems`
    assert LOCK_CHECK.of(LockChecked()).body == {"ok": True, "problems": []}
    with pytest.raises(TypeError):
        LockChecked(problems=[], more=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"document lock-check prints a imgbuild\.registry\.lock:LockChecked"):
        LOCK_CHECK.of(BakeChecked(problems=["stale"]))


def test_the_interrupted_document_is_the_error_type() -> None:
    """cli/main.py prints it with the standard library only (a Ctrl-C may leave a module half imported)."""
    from imgbuild.errors import INTERRUPTED, ErrorBody
    from imgbuild.report.documents.deploy import ERROR
    from imgbuild.shapes import ErrorReport

    body = ErrorBody("Interrupted", INTERRUPTED, None, 130)
    printed = ERROR.of(ErrorReport(body)).document()
    assert printed == jsondoc.document("error", {"error": body.flat()})
    assert list(printed["error"]) == ["type", "message", "hint", "exit_code"] and printed["error"]["hint"] is None


def test_an_error_prints_its_details_beside_its_keys() -> None:
    """The body's details are printed flat (a stopped rebase's `stopped`); the schema names the four keys and
    allows more."""
    from imgbuild.errors import ApplyError
    from imgbuild.report.documents.deploy import ERROR
    from imgbuild.shapes import ErrorReport

    body = ApplyError("stopped", "resolve it", {"stopped": {"filename": "0001-a.patch"}}).report()
    doc = load_json(ERROR.of(ErrorReport(body)).render(), expect="error")
    assert doc["error"] == {
        "type": "ApplyError", "message": "stopped", "hint": "resolve it", "exit_code": 5,
        "stopped": {"filename": "0001-a.patch"},
    }  # fmt: skip
    schema = ERROR.json_schema()["$defs"]["ErrorBody"]
    assert "details" not in schema["properties"] and schema["additionalProperties"] is True


def test_a_contract_prints_its_domain_value_as_its_schema_says() -> None:
    """`smoke`'s document is the domain `SmokeRun`: keys in the schema's order, `ok` derived from the checks and
    the supply chain whatever a caller passes, `seconds` to the millisecond, `supply_chain` only when checked."""
    from imgbuild.platforms import Platform
    from imgbuild.report.documents.images import SMOKE
    from imgbuild.smoke.report import Check, FileState, SmokeReport, SmokeRun
    from imgbuild.smoke.supply import SbomVerified, SupplyChain, Verified

    row = FileState("vllm/a.py", "patched", "original", "aa", "bb")
    checks = (Check("config", "platform", "pass", "linux/arm64", 0.12345), Check("files", "vllm/a.py", "fail"))
    plain = SmokeReport("img:1", "sha256:1", "latest", Platform("linux", "arm64"), checks=checks[:1])
    chain = SupplyChain(signature=Verified(True, "signed"), sbom=SbomVerified(True, "spdx", ("a.py differs",)))
    keyed = SmokeReport("reg/img:1", "sha256:2", None, Platform("linux", "amd64"), ok=True, checks=checks, files=(row,))
    keyed = replace(keyed, supply_chain=chain)
    doc = load_json(SMOKE.of(SmokeRun(reports=(plain, keyed))).render(), expect="smoke")
    assert list(doc) == ["schema", "ok", "reports"] and doc["ok"] is False
    first, second = doc["reports"]
    assert list(first) == ["image", "image_id", "variant", "platform", "ok", "checks", "files"]
    assert first["ok"] is True and first["platform"] == "linux/arm64" and first["checks"][0]["seconds"] == 0.123
    assert second["ok"] is False and second["files"] == [
        {"path": "vllm/a.py", "expected": "patched", "actual": "original", "expected_sha256": "aa",
         "actual_sha256": "bb", "ok": False}
    ]  # fmt: skip
    assert second["supply_chain"] == {
        "ok": False,
        "signature": {"verified": True, "detail": "signed"},
        "sbom": {"verified": True, "detail": "spdx", "problems": ["a.py differs"]},
    }
    assert SmokeRun(reports=(plain,)).ok and SMOKE.of(SmokeRun(reports=(plain,))).body["ok"] is True
    with pytest.raises(TypeError, match=r"document smoke prints a imgbuild\.smoke\.report:SmokeRun, not a SmokeReport"):
        SMOKE.of(plain)


def test_the_status_document_prints_each_form_of_the_rebase_and_the_edit_as_before() -> None:
    """An unreadable state prints its message (rebase) or its problem (edit) alone; a readable one every key,
    `stopped` null while running, and no `problem`."""
    from imgbuild.config.models import PinRelease
    from imgbuild.shapes import dump
    from imgbuild.workflows.rebase.state import RebaseInfo
    from imgbuild.workflows.status import EditShown, RebaseShown

    assert dump(RebaseShown.of("interrupted", None)) == {"message": "interrupted"}
    info = RebaseInfo("running", PinRelease("v1", "a"), PinRelease("v2", "b"), 1, None, [], 2, "/w")
    assert dump(RebaseShown.of("running", info)) == {
        "message": "running", "status": "running", "old": {"tag": "v1", "commit": "a"},
        "onto": {"tag": "v2", "commit": "b"}, "next": 1, "stopped": None, "results": [], "patches": 2,
        "work_tree": "/w",
    }  # fmt: skip
    assert dump(EditShown("/t", problem="unreadable")) == {"tree": "/t", "problem": "unreadable"}
    assert dump(EditShown("/t", None, "v1", True, ["0001-a.patch"])) == {
        "tree": "/t", "upstream": None, "tag": "v1", "unrefreshed": True, "changed_since_opened": ["0001-a.patch"]
    }  # fmt: skip


def test_a_bump_prints_its_images_pins_and_error_as_the_schema_says() -> None:
    """What tests/git's bumps do not reach without building: the images (smoke passed, failed, not run; `index`
    null for one platform), the pins at a stop (planned) beside one carried without a tally of its own, and the
    error's details flat in `error`."""
    from pathlib import Path

    from imgbuild.builder.result import ImageBuilt
    from imgbuild.config.models import ShownOverride
    from imgbuild.errors import ApplyError
    from imgbuild.platforms import Platform
    from imgbuild.report.documents.bump import PATCHES_BUMP
    from imgbuild.smoke.report import Check, SmokeReport
    from imgbuild.upstream.requires import PlannedMove
    from imgbuild.workflows.bump import Bump, BumpImage, PinMoved
    from imgbuild.workflows.rebase.state import Pin

    arm = Platform("linux", "arm64")
    passed = SmokeReport("img:1", "sha256:1", "v", arm, checks=(Check("config", "platform", "pass"),))
    failed = replace(passed, checks=(Check("config", "platform", "fail"),))
    built = ImageBuilt("v", arm, "sha256:1", "img:1", ("img:latest",), "d", True, False, ("l",), index="", smoke=passed)
    images = [BumpImage.of(built), BumpImage.of(replace(built, smoke=failed, index="img:i")), BumpImage.of(
        replace(built, smoke=None))]  # fmt: skip
    override = ShownOverride("torch==2.9", "2.8", "why")
    planned = PlannedMove("fi", "0.1", "0.2", "fi>=0.2", "vllm v3", override, False, "fi moves")
    moved = PinMoved("fi", "0.1", "0.2", ["fi>=0.2"], None, True, "fi: 0.1 → 0.2")
    error = ApplyError("stopped", "resolve it", {"stopped": {"filename": "0001-a.patch"}})
    bump = Bump("conflict", "m", Pin("v1", "a"), Pin("v2", "b"), "br", None, False, images,
                [{"filename": "0001-a.patch", "kind": "conflicting", "outcome": "conflict", "reason": "r"}], [],
                Path("/r/bump-v2.md"), error, [planned, moved])  # fmt: skip
    doc = load_json(PATCHES_BUMP.of(bump.shown()).render(), expect="patches-bump")
    assert [(i["smoke"], i["index"], i["platform"]) for i in doc["images"]] == [
        ("passed", None, "linux/arm64"), ("failed", "img:i", "linux/arm64"), ("not run", None, "linux/arm64")
    ]  # fmt: skip
    assert doc["pins"][0]["required_by"] == "vllm v3" and doc["pins"][0]["override"]["version"] == "2.8"
    assert "patches" not in doc["pins"][1] and doc["pins"][1]["override_dropped"] is True
    assert doc["patches"] == [{"patch": "0001-a.patch", "kind": "conflicting", "outcome": "conflict"}]
    assert doc["report"] == {"markdown": "/r/bump-v2.md", "json": "/r/bump-v2.json"}
    assert doc["ok"] is False and doc["error"]["stopped"] == {"filename": "0001-a.patch"}
    assert doc["old"] == {"tag": "v1", "commit": "a"} and doc["error"]["exit_code"] == 5
