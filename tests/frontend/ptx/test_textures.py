"""Texture fetches (``tex``) of nvcc's PTX through ``ts.ptx.texture`` objects, against
a scalar float64 reference of the CUDA C++ Programming Guide's "Texture Fetching"
formulas written here; the forms refused by name; and ``ptx.tex`` rendered, assembled by
ptxas and read back."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import ArgumentError, TesseraError
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import NVCC_PTX


@pytest.fixture(scope="module")
def mod():
    return ts.ptx.load(NVCC_PTX)


def _index(i: int, n: int, mode: str) -> int | None:
    """Texel ``i`` of ``n`` under an address mode; None for the border."""
    if mode == "wrap":
        return i % n
    if mode == "mirror":
        p = i % (2 * n)
        return p if p < n else 2 * n - 1 - p
    if mode == "border":
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def _reference_2d(img: np.ndarray, x: float, y: float, mode: str, linear: bool) -> float:
    """tex2D by the guide: point takes texel floor(x); linear weights texels
    floor(x - 0.5) and the next by frac(x - 0.5) in 1.8 fixed point."""
    h, w = img.shape

    def texel(i: int, j: int) -> float:
        a, b = _index(i, w, mode), _index(j, h, mode)
        return 0.0 if a is None or b is None else float(img[b, a])

    if not linear:
        return texel(math.floor(x), math.floor(y))
    xb, yb = x - 0.5, y - 0.5
    i, j = math.floor(xb), math.floor(yb)
    a, b = round((xb - i) * 256) / 256, round((yb - j) * 256) / 256
    return ((1 - a) * (1 - b) * texel(i, j) + a * (1 - b) * texel(i + 1, j)
            + (1 - a) * b * texel(i, j + 1) + a * b * texel(i + 1, j + 1))


@settings(max_examples=25, deadline=None)
@given(st.integers(-96, 96), st.integers(-96, 96), st.sampled_from(["clamp", "border"]),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_2d_fetches_follow_the_guides_formulas(mod, dx64: int, dy64: int, mode: str,
                                                linear: bool, seed: int) -> None:
    """Every thread samples (x + dx, y + dy) of an 8x4 image of small integers; offsets
    in 64ths of a texel, so that the filtered values are exact in float32."""
    img = np.random.default_rng(seed).integers(0, 100, (4, 8)).astype(np.float32)
    out = np.zeros(32, np.float32)
    dx, dy = dx64 / 64, dy64 / 64
    tex = ts.ptx.texture(img, filter="linear" if linear else "point", address=mode)
    mod.kernel("tex_sample2d").run(grid=4, block=8, args=[tex, out, np.int32(8),
                                                          np.float32(dx), np.float32(dy)])
    want = [_reference_2d(img, x + dx, y + dy, mode, linear) for y in range(4)
            for x in range(8)]
    np.testing.assert_array_equal(out, np.array(want, np.float32))


def test_normalized_reads_of_bytes_and_wrapped_channels(mod) -> None:
    """Unsigned bytes read as v / 255; four float channels at normalized coordinates that
    wrap around the texture."""
    shades = (np.arange(32) * 7 % 256).astype(np.uint8).reshape(4, 8)
    out = np.zeros(32, np.float32)
    mod.kernel("tex_sample2d").run(grid=4, block=8, args=[
        ts.ptx.texture(shades, read="normalized"), out, np.int32(8), np.float32(0.5),
        np.float32(0.5)])
    np.testing.assert_array_equal(out, (shades.reshape(-1) / np.float32(255))
                                  .astype(np.float32))
    signed = np.array([-128, -127, 0, 64, 127], np.int8)
    tex = ts.ptx.texture(signed, read="normalized")
    np.testing.assert_array_equal(tex.texture.fetch_index([np.arange(5)])[:, 0],
                                  np.array([-1, -1, 0, 64 / 127, 1], np.float32))
    colours = np.arange(16, dtype=np.float32).reshape(4, 4)
    for mode, texels in (("wrap", [0, 1, 2, 3, 0, 1, 2, 3]), ("mirror", [0, 1, 2, 3, 3, 2, 1, 0])):
        got = np.zeros((8, 4), np.float32)
        # u = 9k/32: past 1, wrap takes frac(u) and mirror 1 - frac(u), away from texel edges
        mod.kernel("tex_channels").run(block=8, args=[
            ts.ptx.texture(colours, channels=4, address=mode, normalized_coords=True), got,
            np.float32(9 / 32)])
        np.testing.assert_array_equal(got, colours[texels])


def test_tex1dfetch_and_trilinear_filtering(mod) -> None:
    ints = np.arange(10, dtype=np.int32) * 3
    got = np.zeros(14, np.int32)
    mod.kernel("tex_fetch_ints").run(block=14, args=[ts.ptx.texture(ints, address="border"),
                                                     got, np.int32(-2)])
    idx = np.arange(14) - 2
    np.testing.assert_array_equal(got, np.where((idx >= 0) & (idx < 10), 3 * idx, 0))
    volume = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = np.zeros(8, np.float32)
    mod.kernel("tex_sample3d").run(block=8, args=[ts.ptx.texture(volume, filter="linear"),
                                                  out, np.float32(1.5), np.float32(0.75)])
    x = np.clip(np.arange(8) * 0.25 - 0.5, 0, 3)  # the taps clamp at the edges
    np.testing.assert_array_equal(out, 0.75 * (4 + x) + 0.25 * (16 + x))


def test_fetch_mistakes_are_faults_and_textures_a_gpu_refuses_are_errors(mod) -> None:
    out = np.zeros(8, np.int32)
    with pytest.raises(TargetFault, match="the handle 0x7 is no texture object") as err:
        mod.kernel("tex_fetch_ints").run(block=8, args=[np.uint64(7), out, np.int32(0)])
    assert err.value.thread == 0
    floats = ts.ptx.texture(np.zeros(8, np.float32))
    with pytest.raises(TargetFault, match="fetches from a texture of floats"):
        mod.kernel("tex_fetch_ints").run(block=8, args=[floats, out, np.int32(0)])
    with pytest.raises(ArgumentError, match="linear filtering needs float results"):
        ts.ptx.texture(np.zeros(8, np.int32), filter="linear")
    with pytest.raises(ArgumentError, match="wrap and mirror addressing need normalized"):
        ts.ptx.texture(np.zeros(8, np.float32), address="wrap")
    with pytest.raises(ArgumentError, match="1, 2 or 4 channels"):
        ts.ptx.texture(np.zeros((8, 3), np.float32), channels=3)


@pytest.mark.parametrize("line, what", [
    ("tex.a2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%r1, %f5, %f6, %f6}];", "layered"),
    ("tex.level.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}], %f5;", "level"),
    ("tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [texref, {%f5, %f6}];", "texture reference"),
    ("tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, %rd2, {%f5, %f6}];", "separate sampler"),
])
def test_texture_forms_outside_the_model_are_refused_by_name(line: str, what: str) -> None:
    text = (".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 t)\n"
            "{\n.reg .f32 %f<8>;\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n"
            f"ld.param.u64 %rd1, [t];\n{line}\nret;\n}}\n")
    with pytest.raises(TesseraError, match=what):
        ts.ptx.load(text)


def test_tex_renders_assembles_and_reads_back(tmp_path: Path) -> None:
    """``ptx.tex`` of each geometry rendered from structured Target IR: ptxas takes it,
    and the text read back fetches what the texture model fetches."""
    from tessera.backend.ptx.render import render
    from tessera.ir.dialects.target import RegType, Return
    from tessera.ir.dialects.target.memory_ops import TexFetch
    from tessera.ir.dialects.target.ops import Binary, Cvt, Special, Store
    from tests.backend.ptx.render.test_render import c, do, kernel, one, ptxas

    u64 = RegType("u64")
    fn, b, (t1, t2, t3, out) = kernel("fetches", [u64, u64, u64, u64], block=8)
    tid = one(b, Special("tid.x"))
    x = one(b, Cvt("f32", "u32", "rn"), tid)
    half = c(b, 0.5, "f32")
    fetched = [one(b, TexFetch("1d", "s32", "s32"), t1, one(b, Cvt("s32", "u32"), tid)),
               one(b, TexFetch("2d", "f32", "f32"), t2, x, half),
               one(b, TexFetch("3d", "f32", "f32"), t3, x, half, half)]
    for k, v in enumerate(fetched):
        index = one(b, Binary("add", "u32"), tid, c(b, 8 * k, "u32"))
        addr = one(b, Binary("add", "u64"), out,
                   one(b, Binary("mul", "u32", "wide"), index, c(b, 16, "u32")))
        do(b, Store("global", v.type.elem, 4), addr, v)
    do(b, Return())
    text = render(fn)
    assert "tex.3d.v4.f32.f32" in text and "tex.1d.v4.s32.s32" in text
    ptxas(text, "sm_80", tmp_path)
    ints = np.arange(8, dtype=np.int32) * 5
    img = np.arange(16, dtype=np.float32).reshape(2, 8)
    vol = np.arange(32, dtype=np.float32).reshape(2, 2, 8)
    got = np.zeros((24, 4), np.float32)
    ts.ptx.load(text).kernel("fetches").run(block=8, args=[
        ts.ptx.texture(ints), ts.ptx.texture(img), ts.ptx.texture(vol), got])
    np.testing.assert_array_equal(got[:8, 0].view(np.int32), ints)
    np.testing.assert_array_equal(got[8:16, 0], img[0])
    np.testing.assert_array_equal(got[16:, 0], vol[0, 0])


def test_surfaces_load_and_store_raw_bytes_in_each_out_of_range_mode(mod) -> None:
    """suld/sust through ts.ptx.surface: x a byte offset; clamp reads the nearest
    element, zero drops a store outside, trap faults at the first thread outside."""
    img = (np.arange(32, dtype=np.float32) / 32).reshape(4, 8)
    out = np.zeros_like(img)
    mod.kernel("surf_invert").run(grid=4, block=8, args=[ts.ptx.surface(img),
                                                         ts.ptx.surface(out)])
    np.testing.assert_array_equal(out, 1 - img)
    pixels = np.arange(32, dtype=np.uint8).reshape(8, 4)
    want = pixels.copy()
    want[:, 0] += 1  # threads 8 and 9 read pixel 7 (clamped) and store nothing (zero)
    mod.kernel("surf_bytes").run(block=10, args=[ts.ptx.surface(pixels, channels=4)])
    np.testing.assert_array_equal(pixels, want)
    vol = np.arange(3 * 3 * 5, dtype=np.int32).reshape(3, 3, 5)
    want3 = vol.copy()
    want3[2, 1] += 1
    mod.kernel("surf_volume").run(block=5, args=[ts.ptx.surface(vol), np.int32(4)])
    np.testing.assert_array_equal(vol, want3)
    with pytest.raises(TargetFault, match=r"\(20, 1, 2\) lies outside the surface of 20 "
                       "bytes by 3 rows by 3 slices") as err:
        mod.kernel("surf_volume").run(block=6, args=[ts.ptx.surface(vol), np.int32(4)])
    assert err.value.thread == 5
    with pytest.raises(TargetFault, match="byte offset x = 2 is not a multiple of the "
                       "4-byte access") as err:
        mod.kernel("surf_volume").run(block=2, args=[ts.ptx.surface(vol), np.int32(2)])
    assert err.value.thread == 1
    with pytest.raises(TargetFault, match="is a texture object, not a surface"):
        mod.kernel("surf_volume").run(block=2, args=[ts.ptx.texture(vol), np.int32(4)])


def test_surface_accesses_render_assemble_and_read_back(tmp_path: Path) -> None:
    from tessera.backend.ptx.render import render
    from tessera.ir.dialects.target import RegType, Return
    from tessera.ir.dialects.target.memory_ops import SurfaceLoad, SurfaceStore
    from tessera.ir.dialects.target.ops import Binary, Cvt, Special
    from tests.backend.ptx.render.test_render import c, do, kernel, one, ptxas

    u64 = RegType("u64")
    fn, b, (src, dst) = kernel("copy_rows", [u64, u64], block=4)
    tid = one(b, Special("tid.x"))
    x = one(b, Binary("mul", "s32", "lo"), one(b, Cvt("s32", "u32"), tid), c(b, 8, "s32"))
    row = c(b, 1, "s32")
    pair = one(b, SurfaceLoad("2d", 2, "b32", "trap"), src, x, row)
    do(b, SurfaceStore("2d", 2, "b32", "zero"), dst, x, row, pair)
    do(b, Return())
    text = render(fn)
    assert "suld.b.2d.v2.b32.trap" in text and "sust.b.2d.v2.b32.zero" in text
    ptxas(text, "sm_80", tmp_path)
    a = np.arange(24, dtype=np.int32).reshape(3, 8)
    got = np.zeros_like(a)
    ts.ptx.load(text).kernel("copy_rows").run(block=4, args=[ts.ptx.surface(a),
                                                             ts.ptx.surface(got)])
    np.testing.assert_array_equal(got[1], a[1])
    assert not got[[0, 2]].any()

