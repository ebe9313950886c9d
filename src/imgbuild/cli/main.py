"""The `imgbuild` entry point. Every error, click's usage errors and Ctrl-C included, is printed here,
in `run`, and under --json as the one JSON document on stdout (`imgbuild.error/1`: `errors.ErrorBody` in
`shapes.ErrorReport`, report/documents/deploy.py).
The app is imported inside `run`'s try, so that a Ctrl-C while it loads is answered too; this module imports
nothing but `sys` before that try (a Ctrl-C during `import json` at the top printed a traceback). What Python runs
before this module (`site` and the environment's `.pth` files) is outside it: a Ctrl-C there is Python's own."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import FrameType


def run() -> None:
    """Entry point (the console script and `python -m imgbuild`)."""
    as_json = "--json" in sys.argv
    hook, sys.unraisablehook = sys.unraisablehook, _redeliver
    try:
        code = _run(as_json)
    except KeyboardInterrupt:
        import signal

        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # one answer, however often Ctrl-C is pressed
        from imgbuild.errors import INTERRUPTED, INTERRUPTED_EXIT, ErrorBody
        from imgbuild.jsondoc import document

        if as_json:  # standard library only: a Ctrl-C can leave a module half imported (tests/unit/test_documents.py
            # checks this is the error document as shapes.ErrorReport prints it)
            body = ErrorBody("Interrupted", INTERRUPTED, None, INTERRUPTED_EXIT)
            doc = document("error", {"error": body.flat()})
            import json

            print(json.dumps(doc), flush=True)
        print(INTERRUPTED, file=sys.stderr)
        signal.signal(signal.SIGINT, previous)
        code = INTERRUPTED_EXIT
    finally:
        sys.unraisablehook = hook
    sys.exit(code)


def _redeliver(unraisable: sys.UnraisableHookArgs) -> None:
    """A KeyboardInterrupt that Python could not raise (in a weakref callback or `__del__`, such as the import
    machinery's module-lock callback) is raised again at the next call or return outside this hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.setprofile(_raise_outside_the_hook)
    else:
        sys.__unraisablehook__(unraisable)


def _raise_outside_the_hook(frame: FrameType, _event: str, _arg: object) -> None:
    if frame.f_code is not _redeliver.__code__:
        sys.setprofile(None)
        raise KeyboardInterrupt


def _run(as_json: bool) -> int:
    import typer

    from imgbuild.cli.app import app
    from imgbuild.errors import INTERRUPTED_EXIT, ErrorBody, ExitCode, ImgbuildError, no_space

    def fail(kind: str, message: str, hint: str | None, code: int, details: dict[str, object], *, doc: bool) -> int:
        if doc:
            from imgbuild.report.documents.deploy import ERROR
            from imgbuild.shapes import ErrorReport

            print(ERROR.of(ErrorReport(ErrorBody(kind, message, hint, code, details))).render(), flush=True)
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return code

    try:
        code = app(standalone_mode=False)
    except typer.Abort as exc:  # click's answer to EOF or Ctrl-C at a prompt
        raise KeyboardInterrupt from exc
    except ImgbuildError as exc:  # `reported`: under --json the command's own report is the one document
        return fail(
            type(exc).__name__, exc.message, exc.hint, exc.exit_code, exc.details, doc=as_json and not exc.reported
        )
    except typer.TyperException as exc:  # click's usage errors (typer vendors click): the same two lines as ours
        ctx = getattr(exc, "ctx", None)
        where = f"`{ctx.command_path} --help`" if ctx is not None else "`imgbuild --help`"
        return fail("UsageError", exc.format_message(), f"{where} lists what it takes", exc.exit_code, {}, doc=as_json)
    except OSError as exc:  # a path the OS refused that no command foresaw: still one line, no traceback
        where = f": {exc.filename}" if exc.filename else ""
        hint = (
            "free some space on that disk, then run the command again"
            if no_space(exc)
            else "check the path and the disk"
        )
        return fail("OSError", f"{exc.strerror or exc}{where}", hint, ExitCode.STATE, {}, doc=as_json)
    except Exception as exc:  # a tool (git) that failed for a full disk where no command foresaw it: one line
        if not no_space(exc):
            raise
        hint = (
            "the disk is full: free some space on the project's disk or the cache's (IMGBUILD_CACHE), then run "
            "the command again; one that was under way (a rebase) says how to resume it"
        )
        return fail("StateError", str(exc).strip().splitlines()[0][:400], hint, ExitCode.STATE, {}, doc=as_json)
    if code == INTERRUPTED_EXIT:  # typer's answer to a KeyboardInterrupt in a command (130; no ExitCode is)
        raise KeyboardInterrupt
    return code if isinstance(code, int) else 0
