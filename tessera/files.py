"""Files Tessera writes for its users (PTX, HTML pages and reports, JUnit XML, traces,
AOT bundles): written whole or not at all, with a clear error where the path cannot
be written; and the text files it reads from them (PTX, IR text), with a clear error
where one is missing or is not text.

A file is written to a temporary name in its folder and renamed over the target
(``os.replace`` is atomic on one file system), so an error or an interrupt never
leaves a half-written file, and a reader never sees one. A folder that does not exist
is created, as ``mkdir -p`` would; a path that cannot be written (a file where a
folder should be, no permission, a full disk) is an :class:`ArgumentError` naming the
path and the operating system's reason, not a traceback. Commands that run long
before they write (the conformance suite) call :func:`check_writable` first, so that
the mistake is reported before the work, not after it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tessera.errors import ArgumentError, Loc

#: permission bits of a written file: ``mkstemp``'s 0600 would hide it from others
_MODE = 0o644


def _refuse(path: Path, what: str, err: OSError) -> ArgumentError:
    reason = err.strerror or type(err).__name__
    in_the_way = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if isinstance(err, FileExistsError | NotADirectoryError) and in_the_way is not None:
        reason = f"'{in_the_way}' is a file, not a folder"
    return ArgumentError(f"cannot write the {what} '{path}': {reason}", loc=Loc(str(path), 0),
                         hint="choose a path in a folder you can write to (a missing "
                              "folder is created)")


def _temporary(path: str | os.PathLike[str], what: str) -> tuple[Path, int, str]:
    """The target ``path``, and a new temporary file (descriptor, name) in its folder,
    created if needed; an :class:`ArgumentError` where there can be none."""
    target = Path(path)
    if target.is_dir():
        raise ArgumentError(f"cannot write the {what} '{target}': it is a folder",
                            loc=Loc(str(target), 0), hint="name a file inside it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as err:
        raise _refuse(target, what, err) from None
    return target, fd, tmp


def check_writable(path: str | os.PathLike[str], what: str = "output") -> Path:
    """``path`` as a :class:`Path` once its folder exists (created if needed) and can
    take a new file; otherwise an :class:`ArgumentError`. Nothing is left behind."""
    target, fd, tmp = _temporary(path, what)
    os.close(fd)
    os.unlink(tmp)
    return target


def write_output(path: str | os.PathLike[str], data: str | bytes,
                 what: str = "output") -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically and return the
    path; ``what`` names the file in the error a path that cannot be written gives."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    target, fd, tmp = _temporary(path, what)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, _MODE)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise _refuse(target, what, err) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_text(path: str | os.PathLike[str], what: str, hint: str) -> str:
    """The UTF-8 text of the user's file ``path`` (a ``what``: "PTX file"); a missing
    file, or one that is not UTF-8 text (a binary), is an :class:`ArgumentError` at
    ``path`` with ``hint``."""
    file = str(path)
    try:
        return Path(file).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ArgumentError(f"no such file: {file} (the {what})", loc=Loc(file, 0),
                            hint=hint) from None
    except UnicodeDecodeError as err:
        raise ArgumentError(f"{file!r} is not text (byte {err.start} is not UTF-8): the {what} "
                            "was expected",
                            loc=Loc(file, 0), hint=hint) from None
    except OSError as err:
        raise ArgumentError(f"cannot read the {what} {file!r}: {err.strerror}",
                            loc=Loc(file, 0), hint=hint) from None


__all__ = ["check_writable", "read_text", "write_output"]
