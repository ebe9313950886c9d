"""Every error imgbuild reports, with a stable exit code and a hint.

The CLI catches ImgbuildError in one place (cli.main.run) and prints
`error: <message>` followed by `hint: <hint>`; nothing else prints tracebacks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ExitCode:
    OK = 0
    FAILURE = 1  # a check ran and found problems (e.g. a patch conflicts)
    USAGE = 2  # bad command line
    CONFIG = 3  # malformed or inconsistent config files
    PATCH = 4  # a patch is malformed or refused
    APPLY = 5  # a patch does not apply (conflict, fuzz refused)
    UPSTREAM = 6  # upstream source unavailable or pin mismatch
    DOCKER = 7  # docker daemon / image problems
    SMOKE = 8  # a smoke test failed
    REGISTRY = 9  # registry protocol / auth problems
    STATE = 10  # an operation is in progress or the tree is dirty


class ImgbuildError(Exception):
    exit_code: int = ExitCode.FAILURE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_json(self) -> dict[str, object]:
        return {
            "error": type(self).__name__,
            "message": self.message,
            "hint": self.hint,
            "exit_code": self.exit_code,
        }


class UsageError(ImgbuildError):
    exit_code = ExitCode.USAGE


class ConfigError(ImgbuildError):
    exit_code = ExitCode.CONFIG


class PatchError(ImgbuildError):
    exit_code = ExitCode.PATCH


class ApplyError(ImgbuildError):
    exit_code = ExitCode.APPLY


class UpstreamError(ImgbuildError):
    exit_code = ExitCode.UPSTREAM


class DockerError(ImgbuildError):
    exit_code = ExitCode.DOCKER


class SmokeError(ImgbuildError):
    exit_code = ExitCode.SMOKE


class RegistryError(ImgbuildError):
    exit_code = ExitCode.REGISTRY


class StateError(ImgbuildError):
    exit_code = ExitCode.STATE


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(kind: str, word: str, choices: Iterable[str]) -> str:
    known = sorted(set(choices))
    return f"unknown {kind} {word!r}{did_you_mean(word, known)}; known: {', '.join(known) or 'none'}"
