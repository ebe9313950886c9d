"""Every error imgbuild reports, with a stable exit code and a hint; cli.main.run prints them, under --json as the
error document: `ErrorBody` is its body (the standard library only, like the rest of this module: `flat()` is the
body as printed, which cli.main.run prints itself at a Ctrl-C, and which shapes.ErrorReport prints otherwise)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


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
    OFFLINE = 11  # offline (`build --offline`), and something to fetch is not in the cache


class ImgbuildError(Exception):
    """The base of every error below; never raised itself (tests/git/test_cli.py checks), so that each
    exit code has one class and exit 1 means exactly "a check found problems" (CheckFailed)."""

    exit_code: int = ExitCode.FAILURE

    def __init__(
        self, message: str, hint: str | None = None, details: dict[str, object] | None = None, *, reported: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}  # more for --json (e.g. the per-patch report of a failed apply)
        # The command already printed its report (under --json: the one JSON document on stdout), so
        # cli.main.run adds only the `error:` line, on stderr.
        self.reported = reported

    def report(self) -> ErrorBody:
        """The body of the `imgbuild.error/1` document a failed `--json` run prints."""
        return ErrorBody(type(self).__name__, self.message, self.hint, self.exit_code, self.details)


@dataclass(frozen=True)
class ErrorBody:
    """What failed. More keys may follow: a refused apply's `patches`, a stopped rebase's `stopped`, an import's
    `outcome`, a failed smoke test's `smoke` (the image's report, as in imgbuild.smoke/1)."""

    type: str  # the error's class (ConfigError, ...), or what cli.main.run met (UsageError, OSError, Interrupted)
    message: str
    hint: str | None
    exit_code: int
    details: Mapping[str, object] = field(default_factory=dict)  # JSON values, printed beside the keys above

    def flat(self) -> dict[str, object]:
        """The body as printed: the four keys, then the details' (the one place it is spelled)."""
        fixed = {"type": self.type, "message": self.message, "hint": self.hint, "exit_code": self.exit_code}
        return {**fixed, **self.details}


# Each class's docstring says when it happens: it is the "when" column of the exit-code table in docs/reference.md
# (report/reference.py renders it).


class CheckFailed(ImgbuildError):
    """A check ran and found problems (`patches check`, the `--onto` matrix, `lock --check`, `bake --check`);
    nothing else exits 1."""

    # The only way to exit 1, usually raised `reported=True`: the command's report is the JSON document.

    exit_code = ExitCode.FAILURE


class UsageError(ImgbuildError):
    """Bad command line (click's own usage errors too), such as an unknown platform."""

    exit_code = ExitCode.USAGE


class ConfigError(ImgbuildError):
    """Malformed or inconsistent config files (each error at `file:line:col`); a variant whose image.base or
    image.repository is not set (nor given as `--base`, `--repository`), in every command; an unusable
    `IMGBUILD_CACHE`."""

    exit_code = ExitCode.CONFIG


class PatchError(ImgbuildError):
    """A patch is refused (missing DEP-3 fields too); `patches import` of a change the pin already has
    (upstreamed)."""

    exit_code = ExitCode.PATCH


class ApplyError(ImgbuildError):
    """A patch does not apply (a stopped rebase, and a `patches bump` stopped at a conflict, too)."""

    exit_code = ExitCode.APPLY


class UpstreamError(ImgbuildError):
    """Upstream or base drift (a pin whose sha256 is not the cached wheel's, a base file that is not the
    pinned release's); a bump whose release requires a version of another pin that the index lacks (no
    override); a URL `patches import` cannot fetch."""

    exit_code = ExitCode.UPSTREAM


class DockerError(ImgbuildError):
    """Docker: the engine (not Docker 26+ with the containerd image store, not answering), a build,
    a base that cannot be pulled, a tag that names an image imgbuild did not build; docker or mmdebstrap
    missing, or a python of the runtime base's version to compile its bytecode with."""

    exit_code = ExitCode.DOCKER


class SmokeError(ImgbuildError):
    """A smoke test failed (`smoke --key`: a signature or an SBOM not verified too); under `build --json`
    the error document's `smoke` is the failing image's report."""

    exit_code = ExitCode.SMOKE


class RegistryError(ImgbuildError):
    """A registry command failed (`docker push`, `imagetools`, cosign), or a pushed digest is not the
    local one; cosign missing, or docker for a registry command."""

    exit_code = ExitCode.REGISTRY


class StateError(ImgbuildError):
    """Dirty tree, rebase in progress, another imgbuild writing the same directory, a path the file
    system refuses (read-only, full, under a file)."""

    exit_code = ExitCode.STATE


class OfflineError(ImgbuildError):
    """Offline (`build --offline`, `$IMGBUILD_OFFLINE`, a sparkrun offline launch), and something the command needs
    is not in the cache: the pinned release, a wheel, a base image, the skeleton's rootfs. Names it and how to fetch
    it while online; nothing was fetched."""

    exit_code = ExitCode.OFFLINE


NO_SPACE = "No space left on device"


def no_space(exc: BaseException | None) -> bool:
    """Whether `exc` (or what caused it) is a full disk: an OSError ENOSPC, or a tool (git) that said so."""
    import errno

    seen = 0
    while exc is not None and seen < 8:
        if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or NO_SPACE in str(exc):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def looks_full(exc: BaseException, where: object) -> bool:
    """`no_space(exc)`, or a failure while the disk under `where` has almost nothing free (some tools, such as
    git writing its config, do not say ENOSPC)."""
    import shutil

    if no_space(exc):
        return True
    try:
        return shutil.disk_usage(str(where)).free < ALMOST_FULL
    except OSError:
        return False


ALMOST_FULL = 256 << 10  # bytes free under which a failed write is taken for a full disk


def disk_full(what: str, where: object) -> StateError:
    """The error for a disk that filled while `what` wrote under `where` (what was there before is kept)."""
    return StateError(
        f"{what}: {NO_SPACE} ({where})",
        hint=f"free some space on the disk of {where}, then run the command again: what was written completely is "
        "kept, and what was half-written is not used",
    )


INTERRUPTED = "interrupted; nothing was changed"  # Ctrl-C (KeyboardInterrupt), exit 130: cli.main.run says it
INTERRUPTED_EXIT = 130  # no error class: cli.main.run answers a KeyboardInterrupt itself


def write_error(path: object, exc: OSError, what: str = "write") -> StateError:
    """A one-line error for a path the OS refused, with the fix for the usual causes."""
    import errno

    fixes = {
        errno.EROFS: "the file system is read-only; choose a path on a writable one",
        errno.ENOSPC: "the disk is full; free some space or choose another place",
        errno.EDQUOT: "the disk quota is exceeded; free some space or choose another place",
        errno.EACCES: "permission denied; choose a path you can write",
        errno.EPERM: "permission denied; choose a path you can write",
        errno.ENOTDIR: "a component of the path is a file, not a directory; choose another path",
        errno.EEXIST: "a component of the path is a file, not a directory; choose another path",
        errno.ENOENT: "a directory on the way does not exist and cannot be made; choose another path",
    }
    reason = "a component of the path is a file" if exc.errno == errno.EEXIST else (exc.strerror or str(exc))
    return StateError(f"cannot {what} {path}: {reason}", hint=fixes.get(exc.errno or 0, "choose another path"))


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(kind: str, word: str, choices: Iterable[str]) -> str:
    known = sorted(set(choices))
    return f"unknown {kind} {word!r}{did_you_mean(word, known)}; known: {', '.join(known) or 'none'}"
