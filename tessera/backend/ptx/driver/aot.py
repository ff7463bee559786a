"""Ahead-of-time kernel bundles: PTX (and cubins) per target plus a verified manifest.

A bundle directory holds ``<kernel>.<target>.ptx``, ``<kernel>.<target>.cubin`` when it was
assembled, and ``manifest.json`` with the signature, the specialisation constants, the
launch shape if known, and per target the files' SHA-256 and ptxas's statistics.
:func:`load` re-hashes every file, so a bundle edited after it was written is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera.backend.ptx.driver.assemble import assemble as _assemble
from tessera.backend.ptx.driver.params import (
    ParamSpec,
    entry_signature,
    layout,
    param_spec,
    param_specs,
)
from tessera.errors import TesseraError
from tessera.files import write_output

FORMAT = "tessera-aot-bundle"
FORMAT_VERSION = 1
_TARGET = re.compile(r"^sm_(\d+)(\d)([af]?)$")


class BundleError(TesseraError):
    """A bundle that cannot be written, read, verified, or has no image for the device."""

    kind = "AOT bundle error"


def _parse_target(target: str) -> tuple[int, int, str]:
    match = _TARGET.match(target)
    if match is None:
        raise BundleError(f"unknown target {target!r}",
                          hint="name targets like 'sm_80', 'sm_90a' or 'sm_100f'")
    return int(match.group(1)), int(match.group(2)), match.group(3)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _signature_records(ptx: str, entry: str,
                       signature: Sequence[tuple[str, str] | ParamSpec] | None
                       ) -> list[dict[str, Any]]:
    pairs: list[tuple[str, str] | ParamSpec] = (
        list(signature) if signature is not None else list(entry_signature(ptx, entry)))
    types = [p[1] if isinstance(p, tuple) else None for p in pairs]
    specs = param_specs(pairs)
    offsets, _ = layout(specs)
    return [dict(dataclasses.asdict(s), ptx_type=t, offset=o)
            for s, t, o in zip(specs, types, offsets)]


def save(bundle_dir: str | Path, kernel_name: str, ptx_by_target: Mapping[str, str], *,
         signature: Sequence[tuple[str, str] | ParamSpec] | None = None,
         specialization: Mapping[str, Any] | None = None, assemble: bool = True,
         entry: str | None = None, grid: Sequence[int] | None = None,
         block: Sequence[int] | None = None, shared_bytes: int | None = None) -> Path:
    """Write a bundle for ``kernel_name`` and return the manifest's path.

    ``ptx_by_target`` maps targets (``"sm_90a"``) to PTX text; ``entry`` is the ``.entry``
    symbol (the kernel name by default); ``signature`` lists ``(name, ptx type)`` pairs (read
    from the PTX when omitted); ``specialization`` holds JSON-representable constants.
    With ``assemble`` each target is assembled by ptxas and a failure stops the save.
    """
    if not ptx_by_target:
        raise BundleError("no PTX given", hint="pass {target: ptx text} for at least one target")
    entry = entry or kernel_name
    directory = Path(bundle_dir)
    constants = dict(specialization or {})
    try:
        json.dumps(constants, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise BundleError(f"specialisation constants are not JSON-representable: {err}",
                          hint="use ints, finite floats, strings, bools, lists, dicts") from None
    first = next(iter(ptx_by_target.values()))
    targets: dict[str, Any] = {}
    for target, ptx in sorted(ptx_by_target.items()):
        _parse_target(target)
        if not re.search(rf"\.entry\s+{re.escape(entry)}\b", ptx):
            raise BundleError(f"the PTX for {target} has no '.entry {entry}'",
                              hint="pass entry= with the kernel's PTX symbol")
        files = {"ptx": f"{kernel_name}.{target}.ptx"}
        write_output(directory / files["ptx"], ptx, "bundle's PTX")
        stats: dict[str, Any] = {}
        if assemble:
            built = _assemble(ptx, target, kernel=kernel_name)
            files["cubin"] = f"{kernel_name}.{target}.cubin"
            write_output(directory / files["cubin"], built.cubin, "bundle's cubin")
            if entry in built.stats:
                stats = dataclasses.asdict(built.stats[entry])
        targets[target] = {
            "files": {kind: {"name": name, "sha256": _sha256(directory / name)}
                      for kind, name in files.items()},
            "ptxas_stats": stats,
        }
    launch = {"grid": list(grid) if grid else None, "block": list(block) if block else None,
              "shared_bytes": shared_bytes}
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "kernel": kernel_name,
        "entry": entry, "signature": _signature_records(first, entry, signature),
        "specialization": constants, "launch": launch, "targets": targets,
    }
    path = directory / "manifest.json"
    # the manifest last: a save that stops early leaves no bundle to load
    return write_output(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                        "bundle's manifest")


@dataclass(frozen=True, slots=True)
class Selection:
    """The image chosen for a device: its target, ``"cubin"`` or ``"ptx"``, and the file."""

    target: str
    kind: str
    path: Path

    def image(self) -> str | bytes:
        """The PTX text or the cubin bytes."""
        return self.path.read_text() if self.kind == "ptx" else self.path.read_bytes()


@dataclass(frozen=True, slots=True)
class Bundle:
    """A loaded, verified bundle."""

    directory: Path
    manifest: Mapping[str, Any]

    @property
    def kernel(self) -> str:
        """The kernel's name."""
        return str(self.manifest["kernel"])

    @property
    def entry(self) -> str:
        """The ``.entry`` symbol to look up in the loaded module."""
        return str(self.manifest["entry"])

    @property
    def signature(self) -> tuple[ParamSpec, ...]:
        """The kernel's parameter specs."""
        return tuple(param_spec(p["name"], p["ptx_type"]) if p.get("ptx_type")
                     else ParamSpec(p["name"], p["kind"], p["size"], p["align"])
                     for p in self.manifest["signature"])

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets the bundle holds."""
        return tuple(self.manifest["targets"])

    def select(self, cc: tuple[int, int]) -> Selection:
        """Choose the image for compute capability ``cc``.

        A cubin runs only on the architecture it was built for, so it is taken for an exact
        match (``sm_90a`` before ``sm_90``: same device, more features).  Otherwise the PTX
        of the highest target the device can JIT-compile: a plain target at or below ``cc``;
        an ``a`` target only on its exact device and an ``f`` target within its family
        (CUDA Programming Guide, "Feature availability" for arch-specific PTX).
        """
        if not (isinstance(cc, tuple | list) and len(cc) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cc)):
            raise BundleError(f"compute capability {cc!r} should be (major, minor)",
                              hint="e.g. (9, 0) for an H100, (8, 0) for an A100")
        want = cc[0] * 10 + cc[1]
        exact, jit = [], []
        for target, info in self.manifest["targets"].items():
            major, minor, suffix = _parse_target(target)
            version = major * 10 + minor
            rank = (version, {"a": 2, "f": 1, "": 0}[suffix])
            if version == want and "cubin" in info["files"]:
                exact.append((rank, target))
            fits = {"": version <= want, "a": version == want,
                    "f": major == cc[0] and minor <= cc[1]}[suffix]
            if fits:
                jit.append((rank, target))
        if exact:
            target = max(exact)[1]
            return Selection(target, "cubin", self._file(target, "cubin"))
        if jit:
            target = max(jit)[1]
            return Selection(target, "ptx", self._file(target, "ptx"))
        raise BundleError(
            f"bundle {self.kernel!r} has no image for compute capability {cc[0]}.{cc[1]} "
            f"(targets: {', '.join(self.targets)})",
            hint=f"save the kernel for sm_{want} or a lower plain target",
        )

    def _file(self, target: str, kind: str) -> Path:
        return self.directory / self.manifest["targets"][target]["files"][kind]["name"]

    def module(self, cc: tuple[int, int] | None = None) -> Any:
        """Load the best image for this GPU into a
        :class:`tessera.backend.ptx.driver.launch.CudaModule`."""
        from tessera.backend.ptx.driver.launch import CudaModule, device_compute_capability

        chosen = self.select(cc if cc is not None else device_compute_capability())
        return CudaModule(chosen.image())


def load(bundle_dir: str | Path) -> Bundle:
    """Read a bundle's manifest and verify every file's SHA-256."""
    directory = Path(bundle_dir)
    path = directory / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(f"{path} does not exist", hint="write the bundle with save()") from None
    except json.JSONDecodeError as err:
        raise BundleError(f"{path} is not valid JSON: {err}") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"{path} is not a version-{FORMAT_VERSION} {FORMAT} manifest "
            f"(format {manifest.get('format')!r}, version {manifest.get('format_version')!r})",
            hint="re-save the bundle with this version of tessera")
    for target, info in manifest["targets"].items():
        for record in info["files"].values():
            file = directory / record["name"]
            if not file.is_file():
                raise BundleError(f"{file} (target {target}) is missing from the bundle")
            if _sha256(file) != record["sha256"]:
                raise BundleError(
                    f"{file} (target {target}) does not match its SHA-256 in the manifest",
                    hint="the file changed after the bundle was saved; save the bundle again")
    return Bundle(directory, manifest)
