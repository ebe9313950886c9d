"""The `imgbuild` entry point. Every error, click's usage errors and Ctrl-C included, is printed here,
in `run`, and under --json as the one JSON document on stdout (`imgbuild.error/1`, jsondoc.py).

Ctrl-C is answered in one place, `run`, from the first import on: this module imports nothing else at
its top, and `run` installs its SIGINT handler, then imports the app, inside its try.

Python runs a signal handler between any two bytecodes, weakref callbacks and `__del__` included (the
import machinery's module-lock callback is the usual one at start-up). An exception raised there cannot
propagate: Python prints "Exception ignored in ... Traceback" and goes on, and the Ctrl-C would be lost.
`run` also installs an unraisable hook that takes such an `Interrupted` silently and raises it again at
the next function call or return outside the hook (a one-shot profile function), so the command stops as
it should.
"""

from __future__ import annotations

import sys


class Interrupted(BaseException):
    """Ctrl-C, raised by the SIGINT handler `run` installs. Not a KeyboardInterrupt, which typer turns
    into a silent exit 130."""


_hooks: list[object] = []  # the unraisable hook `run` replaced, while it runs


def _raise_interrupted(_signum: int, _frame: object) -> None:
    raise Interrupted()


def _redeliver(unraisable: object) -> None:
    """sys.unraisablehook while `run` runs: an `Interrupted` that Python could not raise (see the module's
    docstring) is taken silently and raised again at the next call or return in ordinary code, through a
    profile function that removes itself; anything else goes to the hook it replaced."""
    if isinstance(getattr(unraisable, "exc_value", None), Interrupted):
        sys.setprofile(_raise_outside_the_hook)
        return
    (_hooks[-1] if _hooks else sys.__unraisablehook__)(unraisable)  # type: ignore[operator]


def _raise_outside_the_hook(frame: object, _event: str, _arg: object) -> None:
    if getattr(frame, "f_code", None) is _redeliver.__code__:
        return  # still in the hook: raised here, it would be lost again
    sys.setprofile(None)
    raise Interrupted()


def run() -> None:
    """Entry point (the console script and `python -m imgbuild`)."""
    previous = None
    try:  # first: a Ctrl-C from here on is answered below
        import signal

        try:
            previous = signal.signal(signal.SIGINT, _raise_interrupted)
        except ValueError:  # not the main thread (a test calling run): leave signals alone
            previous = None
        if previous is not None:
            _hooks.append(sys.unraisablehook)
            sys.unraisablehook = _redeliver
        code = _run("--json" in sys.argv)
        _ignore_sigint(previous)  # finished: a Ctrl-C from now on comes too late to stop anything
    except (Interrupted, KeyboardInterrupt):  # KeyboardInterrupt: before the handler was in place
        _ignore_sigint(previous)  # one answer to one Ctrl-C, even if a second one comes while it is printed
        import json

        from imgbuild.errors import INTERRUPTED, error_json
        from imgbuild.jsondoc import document

        if "--json" in sys.argv:
            print(json.dumps(document("error", error_json("Interrupted", INTERRUPTED, None, 130))), flush=True)
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    finally:
        if previous is not None:
            sys.unraisablehook = _hooks.pop()  # type: ignore[assignment]
            signal.signal(signal.SIGINT, previous)
    sys.exit(code)


def _ignore_sigint(previous: object) -> None:
    if previous is not None:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run(as_json: bool) -> int:
    import json

    import typer

    from imgbuild.cli.app import app
    from imgbuild.errors import ExitCode, ImgbuildError, error_json
    from imgbuild.jsondoc import document

    def fail(kind: str, message: str, hint: str | None, code: int, details: dict[str, object], *, doc: bool) -> int:
        if doc:
            print(json.dumps(document("error", error_json(kind, message, hint, code, details)), indent=2), flush=True)
        print(f"error: {message}", file=sys.stderr)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
        return code

    try:
        code = app(standalone_mode=False)
    except typer.Abort as exc:  # click's answer to EOF or Ctrl-C at a prompt
        raise Interrupted from exc
    except ImgbuildError as exc:  # `reported`: under --json the command's own report is the one document
        return fail(
            type(exc).__name__, exc.message, exc.hint, exc.exit_code, exc.details, doc=as_json and not exc.reported
        )
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        exit_code = int(getattr(exc, "exit_code", 2))
        if as_json:
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            print(json.dumps(document("error", error_json("UsageError", message, None, exit_code)), indent=2))
        from typer import rich_utils

        rich_utils.rich_format_error(exc)  # type: ignore[arg-type]
        return exit_code
    except OSError as exc:  # a path the OS refused that no command foresaw: still one line, no traceback
        where = f": {exc.filename}" if exc.filename else ""
        return fail(
            "OSError", f"{exc.strerror or exc}{where}", "check the path and the disk", ExitCode.STATE, {}, doc=as_json
        )
    return code if isinstance(code, int) else 0
