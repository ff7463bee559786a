"""AOT bundles: save/load round trip, tamper detection and the target selection rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tessera.backend.ptx.driver.aot import FORMAT_VERSION, BundleError, load, save
from tessera.backend.ptx.driver.assemble import AssemblyError
from tessera.backend.ptx.driver.launch import GpuUnavailable, cuda_available
from tessera.backend.ptx.driver.params import ParamSpec
from tests.backend.ptx.driver.test_assemble import ADD_ONE, wgmma_kernel

SIGNATURE = [("x", ".u64"), ("n", ".u32")]


def retarget(ptx: str, target: str) -> str:
    return ptx.replace(".target sm_80", f".target {target}")


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bundle")
    save(directory, "add_one", {"sm_80": ADD_ONE, "sm_90a": retarget(ADD_ONE, "sm_90a")},
         signature=SIGNATURE, specialization={"BLOCK": 128, "dtype": "f32"}, grid=[4],
         block=[128], shared_bytes=0)
    return directory


def test_round_trip(bundle_dir: Path) -> None:
    names = sorted(p.name for p in bundle_dir.iterdir())
    assert names == ["add_one.sm_80.cubin", "add_one.sm_80.ptx", "add_one.sm_90a.cubin",
                     "add_one.sm_90a.ptx", "manifest.json"]
    bundle = load(bundle_dir)
    assert (bundle.kernel, bundle.entry, bundle.targets) == ("add_one", "add_one",
                                                              ("sm_80", "sm_90a"))
    assert bundle.signature == (ParamSpec("x", "u64", 8, 8), ParamSpec("n", "u32", 4, 4))
    manifest = bundle.manifest
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["specialization"] == {"BLOCK": 128, "dtype": "f32"}
    assert manifest["launch"] == {"grid": [4], "block": [128], "shared_bytes": 0}
    assert [p["offset"] for p in manifest["signature"]] == [0, 8]
    for target in ("sm_80", "sm_90a"):
        info = manifest["targets"][target]
        for record in info["files"].values():
            data = (bundle_dir / record["name"]).read_bytes()
            assert record["sha256"] == hashlib.sha256(data).hexdigest()
        assert info["ptxas_stats"]["registers"] > 0
    assert (bundle_dir / "add_one.sm_80.ptx").read_text() == ADD_ONE
    assert (bundle_dir / "add_one.sm_80.cubin").read_bytes()[:4] == b"\x7fELF"


def test_signature_is_read_from_the_ptx_when_omitted(tmp_path: Path) -> None:
    save(tmp_path, "add_one", {"sm_80": ADD_ONE}, assemble=False)
    assert [p["name"] for p in load(tmp_path).manifest["signature"]] == ["p_x", "p_n"]


@pytest.mark.parametrize("victim", ["add_one.sm_90a.ptx", "add_one.sm_80.cubin"])
def test_tampering_is_detected(bundle_dir: Path, tmp_path: Path, victim: str) -> None:
    copy = tmp_path / "b"
    copy.mkdir()
    for item in bundle_dir.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    path = copy / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=f"{victim} .* does not match its SHA-256"):
        load(copy)
    path.unlink()
    with pytest.raises(BundleError, match=f"{victim} .* is missing"):
        load(copy)


def test_bad_manifests(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(BundleError, match="not valid JSON"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "x", "format_version": 99}))
    with pytest.raises(BundleError, match="version-1"):
        load(tmp_path)


def test_save_refuses_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="unknown target 'hopper'"):
        save(tmp_path, "add_one", {"hopper": ADD_ONE}, assemble=False)
    with pytest.raises(BundleError, match=r"no '\.entry other'"):
        save(tmp_path, "other", {"sm_80": ADD_ONE}, assemble=False)
    with pytest.raises(BundleError, match="not JSON-representable"):
        save(tmp_path, "add_one", {"sm_80": ADD_ONE}, specialization={"f": object()})
    with pytest.raises(BundleError, match="no PTX"):
        save(tmp_path, "add_one", {})
    with pytest.raises(AssemblyError, match=r"\(C7517\)"):  # the build check applies
        save(tmp_path, "wg", {"sm_90a": wgmma_kernel(wait=False)})


def test_entry_symbol_may_differ_from_the_kernel_name(tmp_path: Path) -> None:
    save(tmp_path, "gemm", {"sm_90a": wgmma_kernel()}, entry="wg")
    bundle = load(tmp_path)
    assert bundle.entry == "wg" and bundle.select((9, 0)).kind == "cubin"
    assert bundle.manifest["targets"]["sm_90a"]["ptxas_stats"]["name"] == "wg"


def test_select_prefers_an_exact_cubin(bundle_dir: Path) -> None:
    bundle = load(bundle_dir)
    chosen = bundle.select((9, 0))
    assert (chosen.target, chosen.kind) == ("sm_90a", "cubin")
    assert chosen.image() == (bundle_dir / "add_one.sm_90a.cubin").read_bytes()
    assert (bundle.select((8, 0)).target, bundle.select((8, 0)).kind) == ("sm_80", "cubin")


@pytest.mark.parametrize(("cc", "target"), [
    # A cubin runs only on its own SM version; PTX of a plain target JIT-compiles on any
    # later device; arch-specific sm_90a PTX only on 9.0 (CUDA C++ Programming Guide,
    # "Compute Capabilities": architecture-specific features are not forward compatible).
    ((8, 6), "sm_80"),
    ((8, 9), "sm_80"),
    ((10, 0), "sm_80"),
    ((12, 0), "sm_80"),
])
def test_select_falls_back_to_lower_plain_ptx(bundle_dir: Path, cc: tuple[int, int],
                                              target: str) -> None:
    chosen = load(bundle_dir).select(cc)
    assert (chosen.target, chosen.kind) == (target, "ptx")
    assert chosen.image() == ADD_ONE


def test_select_rules_for_ptx_only_bundles(tmp_path: Path) -> None:
    targets = {t: retarget(ADD_ONE, t) for t in ("sm_75", "sm_86", "sm_90a", "sm_100f")}
    save(tmp_path, "add_one", targets, assemble=False)
    bundle = load(tmp_path)

    def pick(cc: tuple[int, int]) -> tuple[str, str]:
        chosen = bundle.select(cc)
        return chosen.target, chosen.kind

    assert pick((9, 0)) == ("sm_90a", "ptx")  # no cubins: exact match still uses PTX
    assert pick((8, 9)) == ("sm_86", "ptx")
    assert pick((8, 0)) == ("sm_75", "ptx")
    assert pick((10, 3)) == ("sm_100f", "ptx")  # family-specific: same major, minor >= 0
    assert pick((12, 0)) == ("sm_86", "ptx")  # neither 'a' nor 'f' PTX crosses a major
    with pytest.raises(BundleError, match=r"no image for compute capability 7\.0"):
        bundle.select((7, 0))
    for bad in ("9.0", (9,), (9, 0.5), (True, 0)):
        with pytest.raises(BundleError, match=r"should be \(major, minor\)"):
            bundle.select(bad)  # type: ignore[arg-type]


def test_module_needs_a_gpu(bundle_dir: Path) -> None:
    usable, reason = cuda_available()
    if usable:
        module = load(bundle_dir).module()
        module.close()
        return
    with pytest.raises(GpuUnavailable, match=reason.split(":")[0]):
        load(bundle_dir).module()
