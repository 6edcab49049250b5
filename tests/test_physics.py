"""Tests of the per-hit radiometry laws in :mod:`simulator.physics`.

Expected values are computed independently of the module: with :mod:`math` on Python
scalars, by the formulas of the RS-Helios reference card, or with pure-Python integer
re-implementations of the hashes. Golden values pin the hashed micro-slope.
"""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.physics import (
    footprint_range_spread_m,
    hash_normal,
    hash_normal_pair,
    hash_uniform,
    in_plane_divergence,
    minnaert_backscatter,
    mix64,
    place_normal,
    place_normal_pair,
    pulse_length_m,
    pulse_peak_factor,
    rough_range_sigma_m,
    tilted_cos,
)

MASK64 = 0xFFFFFFFFFFFFFFFF
GAMMA = 0x9E3779B97F4A7C15
C_MPS = 299_792_458.0


# --------------------------------------------------------------------------------------
# Independent pure-Python references of the hash recipes
# --------------------------------------------------------------------------------------


def py_mix64(x: int) -> int:
    """SplitMix64 finalizer on Python ints with explicit 64-bit masking."""
    x &= MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    x ^= x >> 31
    return x


def py_hash_uniform(h: int) -> float:
    """((h >> 11) + 0.5) / 2^53, held below 1."""
    return min(((h & MASK64) >> 11) + 0.5, 2.0**53 - 1.0) / 2.0**53


def py_hash_normal(h: int) -> float:
    """Box-Muller on two hashed uniforms."""
    u1 = py_hash_uniform(h)
    u2 = py_hash_uniform(py_mix64((h + GAMMA) & MASK64))
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def py_place_normal(x: float, y: float, cell: float, seed: int) -> float:
    """Cell indices by floor, h = mix64(mix64(mix64(seed + G) + i) + j), then hash_normal."""
    i = math.floor(x / cell)
    j = math.floor(y / cell)
    h = py_mix64((py_mix64((py_mix64((seed + GAMMA) & MASK64) + i) & MASK64) + j) & MASK64)
    return py_hash_normal(h)


def normal_cdf(z: float) -> float:
    """Standard normal CDF."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def grid_centres(nx: int, ny: int, cell: float, x0: int = 0, y0: int = 0):
    """Centres of an nx x ny block of cells (one point per cell)."""
    ix, iy = np.meshgrid(np.arange(nx) + x0, np.arange(ny) + y0, indexing="ij")
    return (ix.ravel() + 0.5) * cell, (iy.ravel() + 0.5) * cell


def check_standard_normal(z: np.ndarray) -> None:
    """Mean 0, std 1, tail fraction and a KS distance consistent with N(0, 1)."""
    n = z.size
    assert np.all(np.isfinite(z))
    assert abs(float(z.mean())) < 0.01
    assert abs(float(z.std()) - 1.0) < 0.01
    assert abs(float(np.mean(z < -1.96)) - 0.025) < 0.002
    assert abs(float(np.mean(z > 1.96)) - 0.025) < 0.002
    # Kolmogorov-Smirnov distance against Phi; 1.95 / sqrt(n) is the 0.1 % critical value.
    zs = np.sort(z)
    cdf = np.fromiter((normal_cdf(v) for v in zs.tolist()), dtype=np.float64, count=n)
    ranks = np.arange(1, n + 1) / n
    d = max(float(np.max(ranks - cdf)), float(np.max(cdf - (ranks - 1.0 / n))))
    assert d < 1.95 / math.sqrt(n)


# --------------------------------------------------------------------------------------
# Minnaert backscatter
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rho", "cos", "k"),
    [(0.5, 0.3, 1.0), (0.8, 0.7, 0.5), (0.2, 0.1, 2.0), (1.7, 0.9, 0.3), (0.35, 0.05, 1.2)],
)
def test_minnaert_exact_values(rho, cos, k):
    """rho * |cos|^k for cosines inside the clamp."""
    assert float(minnaert_backscatter(rho, cos, k)) == pytest.approx(rho * cos**k, rel=1e-14)


@given(rho=st.floats(0.0, 2.0), cos=st.floats(1e-4, 1.0))
def test_minnaert_lambertian_and_flat(rho, cos):
    """k = 1 is Lambertian (rho cos); k = 0 does not depend on incidence (rho)."""
    assert float(minnaert_backscatter(rho, cos, 1.0)) == pytest.approx(rho * cos, rel=1e-14)
    assert float(minnaert_backscatter(rho, cos, 0.0)) == rho


@pytest.mark.parametrize("k", [0.0, 0.5, 1.0, 2.0])
def test_minnaert_clamps(k):
    """|cos| is clamped to [1e-4, 1]: 0 -> 1e-4, -0.5 -> 0.5, 2 -> 1."""
    rho = 0.6
    assert float(minnaert_backscatter(rho, 0.0, k)) == pytest.approx(rho * 1e-4**k, rel=1e-14)
    assert float(minnaert_backscatter(rho, -0.5, k)) == float(minnaert_backscatter(rho, 0.5, k))
    assert float(minnaert_backscatter(rho, 2.0, k)) == float(minnaert_backscatter(rho, 1.0, k))
    assert float(minnaert_backscatter(rho, 2.0, k)) == pytest.approx(rho, rel=1e-15)
    assert float(minnaert_backscatter(rho, -1e-9, k)) == pytest.approx(rho * 1e-4**k, rel=1e-14)


def test_minnaert_broadcasting():
    """rho (3, 1), cos (4,) and k (1, 4) broadcast to (3, 4), element-wise rho |cos|^k."""
    rho = np.array([[0.1], [0.5], [0.9]])
    cos = np.array([0.2, -0.4, 0.0, 1.5])
    k = np.array([[0.0, 0.5, 1.0, 2.0]])
    out = minnaert_backscatter(rho, cos, k)
    assert out.shape == (3, 4)
    for a in range(3):
        for b in range(4):
            c = min(max(abs(float(cos[b])), 1e-4), 1.0)
            expected = float(rho[a, 0]) * c ** float(k[0, b])
            assert out[a, b] == pytest.approx(expected, rel=1e-14)


def test_minnaert_scalar_input():
    """Python scalars give a 0-d float64 result."""
    out = minnaert_backscatter(0.5, 0.3, 1)
    assert np.ndim(out) == 0
    assert np.asarray(out).dtype == np.float64
    assert float(out) == pytest.approx(0.15, rel=1e-14)


# --------------------------------------------------------------------------------------
# In-plane divergence of an elliptical beam
# --------------------------------------------------------------------------------------

BH, BV = 0.0030, 0.0069


@pytest.mark.parametrize(
    ("cos_psi", "expected"),
    [
        (1.0, BV),
        (0.0, BH),
        (0.6, math.sqrt((BV * 0.6) ** 2 + (BH * 0.8) ** 2)),
        (1.5, BV),
        (-0.3, BH),
    ],
)
def test_in_plane_divergence_values(cos_psi, expected):
    """beta^2 = (beta_v cos psi)^2 + (beta_h sin psi)^2, cos psi clamped to [0, 1]."""
    assert float(in_plane_divergence(BH, BV, cos_psi)) == pytest.approx(expected, rel=1e-14)


divergences = st.one_of(st.just(0.0), st.floats(1e-6, 0.05))


@given(bh=divergences, bv=divergences, c=st.one_of(st.just(0.0), st.floats(1e-6, 1.0)))
def test_in_plane_divergence_formula_and_bounds(bh, bv, c):
    """Matches the Gaussian-width law and lies between the two axis divergences."""
    out = float(in_plane_divergence(bh, bv, c))
    s = math.sqrt(max(0.0, 1.0 - c * c))
    assert out == pytest.approx(math.hypot(bv * c, bh * s), rel=1e-12, abs=1e-300)
    assert min(bh, bv) * (1 - 1e-12) <= out <= max(bh, bv) * (1 + 1e-12)


def test_in_plane_divergence_broadcasts():
    """Array cos_psi with scalar divergences keeps the array's shape."""
    c = np.linspace(0.0, 1.0, 12).reshape(3, 4)
    out = in_plane_divergence(BH, BV, c)
    assert out.shape == (3, 4)
    assert out[0, 0] == pytest.approx(BH) and out[-1, -1] == pytest.approx(BV)


# --------------------------------------------------------------------------------------
# Footprint range spread
# --------------------------------------------------------------------------------------


def test_footprint_card_example():
    """Card: a 6.9 mrad beam on ground 30 m away at 3.8 deg grazing spreads about 3.1 m."""
    theta = math.radians(90.0 - 3.8)
    out = float(footprint_range_spread_m(30.0, math.cos(theta), 0.0069))
    assert out == pytest.approx(30.0 * math.tan(theta) * 0.0069, rel=1e-12)
    assert 3.0 < out < 3.2


@given(r=st.floats(0.0, 1e3), beta=st.floats(0.0, 0.05), theta=st.floats(1e-3, 1.5))
def test_footprint_law(r, beta, theta):
    """dR = R tan(theta) beta (theta >= 1 mrad, where cos(theta) still resolves theta)."""
    out = float(footprint_range_spread_m(r, math.cos(theta), beta))
    assert out == pytest.approx(r * math.tan(theta) * beta, rel=1e-8)


@pytest.mark.parametrize("cos", [1.0, -1.0, 1.3])
def test_footprint_zero_at_normal_incidence(cos):
    """No spread at normal incidence (|cos| >= 1)."""
    assert float(footprint_range_spread_m(30.0, cos, 0.0069)) == 0.0


@pytest.mark.parametrize("cos", [0.0, 1e-6, -1e-5])
def test_footprint_clamp_at_grazing(cos):
    """|cos| clamped at 1e-4: finite, R beta sqrt(1 - 1e-8) / 1e-4."""
    r, beta = 30.0, 0.0069
    expected = r * beta * math.sqrt(1.0 - 1e-8) / 1e-4
    assert float(footprint_range_spread_m(r, cos, beta)) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------------------
# Pulse length and peak loss of a stretched echo
# --------------------------------------------------------------------------------------


def test_pulse_length_5ns():
    """L = c * FWHM / 2; a 5 ns pulse is 0.749 m."""
    out = float(pulse_length_m(5.0))
    assert out == pytest.approx(C_MPS * 5e-9 / 2.0, rel=1e-15)
    assert round(out, 3) == 0.749


@pytest.mark.parametrize(("length", "spread"), [(0.75, 3.1), (1.0, 1.0), (0.3, 0.01)])
def test_pulse_peak_factor_values(length, spread):
    """L / sqrt(L^2 + dR^2)."""
    expected = length / math.sqrt(length**2 + spread**2)
    assert float(pulse_peak_factor(length, spread)) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("length", [0.0, -0.5, -1e-12])
@pytest.mark.parametrize("spread", [0.0, 2.0, 1e6])
def test_pulse_peak_factor_off_when_length_not_positive(length, spread):
    """L <= 0 turns stretching off: factor exactly 1, no warning or NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(pulse_peak_factor(length, spread)) == 1.0


@given(length=st.floats(1e-6, 1e3))
def test_pulse_peak_factor_no_spread(length):
    """dR = 0 leaves the peak unchanged (factor 1)."""
    assert float(pulse_peak_factor(length, 0.0)) == 1.0


@settings(deadline=None)
@given(length=st.floats(1e-3, 1e2), spread=st.floats(-1e3, 1e3))
def test_pulse_peak_factor_range_and_formula(length, spread):
    """Factor in (0, 1] and equal to L / sqrt(L^2 + dR^2)."""
    out = float(pulse_peak_factor(length, spread))
    assert 0.0 < out <= 1.0
    assert out == pytest.approx(length / math.hypot(length, spread), rel=1e-12)


def test_pulse_peak_factor_arrays():
    """Element-wise over broadcast arrays, with the L <= 0 switch per element."""
    length = np.array([[0.75], [0.0]])
    spread = np.array([0.0, 3.1, 10.0])
    out = pulse_peak_factor(length, spread)
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out[1], 1.0)
    for b, s in enumerate(spread.tolist()):
        assert out[0, b] == pytest.approx(0.75 / math.sqrt(0.75**2 + s**2), rel=1e-14)


# --------------------------------------------------------------------------------------
# Rough-surface range scatter
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cos", "expected_over_r"),
    [
        (1.0, 1.0),
        (0.5, 0.5**-1.5),
        (-0.5, 0.5**-1.5),
        (0.2, 0.2**-1.5),
        (0.05, 0.05**-1.5),
        (0.01, 0.05**-1.5),
        (0.0, 0.05**-1.5),
        (1.4, 1.0),
    ],
)
def test_rough_range_sigma(cos, expected_over_r):
    """sigma = r |cos|^-1.5 with |cos| clamped to [0.05, 1]."""
    r = 0.02
    assert float(rough_range_sigma_m(r, cos)) == pytest.approx(r * expected_over_r, rel=1e-14)


@given(r=st.floats(0.0, 1.0), c=st.floats(0.05, 1.0))
def test_rough_range_sigma_law(r, c):
    """Within the clamp the scatter grows as cos^-(1 + H), H = 0.5."""
    assert float(rough_range_sigma_m(r, c)) == pytest.approx(r * c**-1.5, rel=1e-13)


# --------------------------------------------------------------------------------------
# Tilted incidence cosine
# --------------------------------------------------------------------------------------


@given(c=st.floats(0.0, 1.0), delta=st.floats(-1.5, 1.5))
def test_tilted_cos_law(c, delta):
    """cos(arccos(c) + delta) while theta + delta lies in [0, pi/2)."""
    theta = math.acos(c) + delta
    out = float(tilted_cos(c, delta))
    if 1e-6 < theta < math.pi / 2 - 1e-6:
        assert out == pytest.approx(math.cos(theta), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("c", "delta"), [(0.9, -1.0), (1.0, -1e-9), (0.5, -math.pi / 2)])
def test_tilted_cos_clamps_to_normal(c, delta):
    """theta + delta < 0 clamps to normal incidence: exactly 1.0."""
    assert float(tilted_cos(c, delta)) == 1.0


@pytest.mark.parametrize(
    ("c", "delta"), [(0.1, 2.0), (0.0, 0.0), (0.0, 1e-9), (0.5, math.pi / 2), (0.3, 10.0)]
)
def test_tilted_cos_clamps_below_grazing(c, delta):
    """theta + delta >= pi/2 clamps just below pi/2: a tiny positive cosine."""
    out = float(tilted_cos(c, delta))
    assert 0.0 < out <= 1e-15


@given(c=st.floats(-2.0, 2.0), delta=st.floats(-10.0, 10.0))
def test_tilted_cos_in_unit_interval(c, delta):
    """The tilted cosine is never negative or zero, and at most 1."""
    out = float(tilted_cos(c, delta))
    assert 0.0 < out <= 1.0


def test_tilted_cos_identity_and_sign():
    """delta = 0 returns |c|; negative cosines count as their absolute value."""
    for c in (0.1, 0.5, 0.9):
        assert float(tilted_cos(c, 0.0)) == pytest.approx(c, rel=1e-14)
        assert float(tilted_cos(-c, 0.2)) == float(tilted_cos(c, 0.2))


# --------------------------------------------------------------------------------------
# mix64 (SplitMix64 finalizer)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [(0x9E3779B97F4A7C15, 0xE220A8397B1DCDAF), (1, 0x5692161D100B05E5), (0, 0)],
)
def test_mix64_known_values(key, expected):
    """Published SplitMix64 outputs (first output of seed 0 is mix64(gamma))."""
    out = mix64(key)
    assert np.asarray(out).dtype == np.uint64
    assert int(out) == expected
    assert py_mix64(key) == expected


def _mix64_keys() -> list[int]:
    """1000 keys: random uint64, negatives (int64), and values near 2^63 and 2^64."""
    rng = random.Random(20240601)
    keys = [rng.getrandbits(64) for _ in range(600)]
    keys += [rng.randrange(-(2**63), 0) for _ in range(200)]
    keys += [2**64 - 1 - k for k in range(100)]
    keys += [2**63 - 50 + k for k in range(100)]
    return keys


def test_mix64_matches_pure_python_arrays():
    """Vectorised mix64 equals the masked pure-Python finalizer on 1000 keys."""
    keys = _mix64_keys()
    arr = np.array([k & MASK64 for k in keys], dtype=np.uint64)
    out = mix64(arr)
    assert out.dtype == np.uint64 and out.shape == arr.shape
    assert [int(v) for v in out] == [py_mix64(k) for k in keys]


def test_mix64_negatives_wrap_mod_2_64():
    """Signed keys are taken modulo 2^64 (int64 arrays, Python ints, object arrays)."""
    keys = [k for k in _mix64_keys() if k < 0]
    signed = mix64(np.array(keys, dtype=np.int64))
    unsigned = mix64(np.array([k & MASK64 for k in keys], dtype=np.uint64))
    np.testing.assert_array_equal(signed, unsigned)
    for k in [*keys[:20], -1, -(2**63)]:
        assert int(mix64(k)) == py_mix64(k)
    big = np.array([2**64 - 1, -1, 2**63 + 5, -(2**63)], dtype=object)
    assert [int(v) for v in mix64(big)] == [py_mix64(int(k)) for k in big]


def test_mix64_scalar_paths():
    """Python ints, numpy scalars and 0-d arrays all hash to the same uint64."""
    for k in (1, 12345, 2**64 - 1, 2**63 + 5):
        expected = py_mix64(k)
        assert int(mix64(k)) == expected
        assert int(mix64(np.uint64(k))) == expected
        assert int(mix64(np.array(k, dtype=np.uint64))) == expected
        assert np.ndim(mix64(k)) == 0


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 4), (2, 3, 5), (0,)])
def test_mix64_keeps_shape(shape):
    """Output has the shape of the input."""
    n = math.prod(shape)
    keys = np.arange(n, dtype=np.uint64).reshape(shape) * np.uint64(0x1000003)
    out = mix64(keys)
    assert np.shape(out) == shape
    assert np.asarray(out).dtype == np.uint64
    assert [int(v) for v in np.ravel(out)] == [py_mix64(int(k)) for k in np.ravel(keys)]


def test_mix64_does_not_modify_input():
    """The key array is not mixed in place."""
    keys = np.arange(10, dtype=np.uint64)
    mix64(keys)
    np.testing.assert_array_equal(keys, np.arange(10, dtype=np.uint64))


def test_hashes_emit_no_warnings():
    """Wrapping uint64 arithmetic raises no overflow warning, for scalars or arrays."""
    arr = np.array([k & MASK64 for k in _mix64_keys()], dtype=np.uint64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (0, 1, 2**64 - 1, 2**63 + 5, -1, np.uint64(2**64 - 1), np.int64(-7), arr):
            keys = [int(k) & MASK64 for k in np.ravel(x)]
            assert [int(v) for v in np.ravel(mix64(x))] == [py_mix64(k) for k in keys]
            assert np.ravel(hash_uniform(x)).tolist() == pytest.approx(
                [py_hash_uniform(k) for k in keys], rel=1e-15
            )
            assert np.ravel(hash_normal(x)).tolist() == pytest.approx(
                [py_hash_normal(k) for k in keys], rel=1e-12, abs=1e-12
            )
        signed = mix64(arr.astype(np.int64))  # the same bits, read as int64
        assert [int(v) for v in signed] == [py_mix64(int(k)) for k in arr]
        for args in ((1.2, -3.4, 0.5, 2**64 - 1), (-1234.5, 5e6, 0.1, 2**63 + 5)):
            assert float(place_normal(*args)) == pytest.approx(py_place_normal(*args), rel=1e-12)
        x = np.linspace(-1e6, 1e6, 101)
        got = place_normal(x, 3.0, 0.25, np.uint64(2**64 - 1))
        want = [py_place_normal(float(v), 3.0, 0.25, 2**64 - 1) for v in x]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------
# hash_uniform
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("h", [0, 1, 2047, 2048, 2**63, 2**64 - 2048, 2**64 - 1])
def test_hash_uniform_open_interval_edges(h):
    """Even the extreme hashes map strictly inside (0, 1)."""
    u = float(hash_uniform(np.uint64(h)))
    assert 0.0 < u < 1.0
    assert u == py_hash_uniform(h)


def test_hash_uniform_extremes():
    """Smallest value 2^-54, largest held at 1 - 2^-53 (so log(u) is finite)."""
    assert float(hash_uniform(0)) == 2.0**-54
    assert float(hash_uniform(np.uint64(2**64 - 1))) == 1.0 - 2.0**-53


@given(h=st.integers(0, 2**63 - 1))
def test_hash_uniform_exact_formula(h):
    """u = ((h >> 11) + 0.5) / 2^53 exactly, when h >> 11 is below 2^52."""
    assert float(hash_uniform(np.uint64(h))) == ((h >> 11) + 0.5) / 2.0**53


@given(h=st.integers(0, 2**64 - 1))
def test_hash_uniform_open_interval_random(h):
    """Random uint64 hashes map into (0, 1) and agree with the reference."""
    u = float(hash_uniform(np.uint64(h)))
    assert 0.0 < u < 1.0
    assert u == py_hash_uniform(h)


def test_hash_uniform_53_bit_resolution():
    """Only the top 53 bits count: the low 11 bits are ignored, bit 11 is a step of 2^-53."""
    rng = random.Random(7)
    for _ in range(200):
        top = rng.getrandbits(53) & ~1  # even, so top + 1 is still below 2^53
        h = top << 11
        u = float(hash_uniform(np.uint64(h)))
        assert float(hash_uniform(np.uint64(h | 0x7FF))) == u
        if top < 2**52:
            assert float(hash_uniform(np.uint64(h + 2048))) - u == 2.0**-53
        else:  # spacing of float64 in [0.5, 1) is 2^-53: still distinct values
            assert float(hash_uniform(np.uint64(h + 2048))) > u


def test_hash_uniform_array_statistics():
    """Mixed counters give uniform numbers: mean 1/2, variance 1/12, shape kept."""
    h = mix64(np.arange(200_000, dtype=np.uint64)).reshape(400, 500)
    u = hash_uniform(h)
    assert u.shape == (400, 500) and u.dtype == np.float64
    assert np.all((u > 0.0) & (u < 1.0))
    assert abs(float(u.mean()) - 0.5) < 0.003
    assert abs(float(u.var()) - 1.0 / 12.0) < 0.002
    counts = np.histogram(u, bins=10, range=(0.0, 1.0))[0]
    assert np.all(np.abs(counts - 20_000) < 800)


# --------------------------------------------------------------------------------------
# hash_normal
# --------------------------------------------------------------------------------------


def test_hash_normal_matches_box_muller():
    """hash_normal(h) = sqrt(-2 ln u1) cos(2 pi u2) with the documented uniforms."""
    keys = [k & MASK64 for k in _mix64_keys()[:300]] + [0, 1, 2**64 - 1]
    out = hash_normal(np.array(keys, dtype=np.uint64))
    for value, k in zip(out.tolist(), keys, strict=True):
        assert value == pytest.approx(py_hash_normal(k), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 2, 2)])
def test_hash_normal_shapes(shape):
    """Output has the input's shape, float64."""
    h = mix64(np.arange(math.prod(shape), dtype=np.uint64).reshape(shape))
    out = hash_normal(h)
    assert np.shape(out) == shape
    assert np.asarray(out).dtype == np.float64
    want = [py_hash_normal(int(k)) for k in np.ravel(h)]
    np.testing.assert_allclose(np.ravel(out), want, rtol=1e-12, atol=1e-12)


def test_hash_normal_bounded_and_finite():
    """|z| <= sqrt(-2 ln 2^-54) for every hash, including 0 and 2^64 - 1."""
    bound = math.sqrt(-2.0 * math.log(2.0**-54))
    h = np.array([0, 1, 2**64 - 1, 2**63, 2047], dtype=np.uint64)
    z = hash_normal(h)
    assert np.all(np.isfinite(z))
    assert np.all(np.abs(z) <= bound * (1 + 1e-12))


def test_hash_normal_statistics():
    """Over 200,000 mixed hashes the values are N(0, 1)."""
    z = hash_normal(mix64(np.arange(200_000, dtype=np.uint64)))
    check_standard_normal(z)


def test_hash_normal_pair_is_box_mullers_pair():
    """The first of the pair is hash_normal itself, bit for bit; the second is the same
    radius times the sine, to 1e-12 against math.sin (its magnitude is sqrt(1 - cos^2))."""
    h = mix64(np.arange(50_000, dtype=np.uint64) + np.uint64(7))
    z1, z2 = hash_normal_pair(h)
    np.testing.assert_array_equal(z1, hash_normal(h))
    with np.errstate(over="ignore"):
        u2 = hash_uniform(mix64(h + np.uint64(GAMMA)))
    r = np.sqrt(-2.0 * np.log(hash_uniform(h)))
    np.testing.assert_allclose(z2, r * np.sin(2.0 * np.pi * u2), rtol=0, atol=1e-12 * r.max())


def test_the_relief_normals_keep_their_law_after_the_pair():
    """Issue 48's model change: the relief's place normal is now the sine partner of the
    micro-slope's (one Box-Muller pair a place, not a hash and a pair each). A million
    places: the new relief normals are N(0, 1) (Kolmogorov-Smirnov against the law, p >
    0.01), the same distribution as the old draws (two-sample KS, p > 0.01), and
    uncorrelated with the micro-slope's (|r| < 4 / sqrt(n)); the micro-slope's are the old
    ones, bit for bit. (Deterministic draws: this cannot flake.)"""
    from scipy import stats

    n = 1_000_000
    k = np.arange(n, dtype=np.float64)
    x, y = 0.37 * (k % 1000.0), 0.37 * np.floor(k / 1000.0)
    seed_slope, seed_relief = 11, 12
    slope, relief = place_normal_pair(x, y, 0.37, seed_slope)
    np.testing.assert_array_equal(slope, place_normal(x, y, 0.37, seed_slope))
    old = place_normal(x, y, 0.37, seed_relief)
    assert stats.kstest(relief, "norm").pvalue > 0.01
    assert stats.ks_2samp(relief, old).pvalue > 0.01
    assert abs(np.corrcoef(slope, relief)[0, 1]) < 4.0 / np.sqrt(n)
    assert abs(relief.mean()) < 4.0 / np.sqrt(n) and abs(relief.std() - 1.0) < 0.003


# --------------------------------------------------------------------------------------
# place_normal (place-fixed micro-slope)
# --------------------------------------------------------------------------------------


def test_place_normal_golden_values():
    """Golden values of the hashed micro-slope.

    These pin the exact recipe (floor cells, nested mix64, Box-Muller). They must never
    change silently: a change alters every simulated scan. Update only deliberately.
    """
    assert float(place_normal(1.2, -3.4, 0.5, 7)) == 0.29529209141674007
    assert float(place_normal(0.0, 0.0, 1.0, 0)) == 0.8064524000766476
    assert float(place_normal(-1234.5, 5e6, 0.1, 2**63 + 5)) == -0.214528816906646


@pytest.mark.parametrize(
    ("x", "y", "cell", "seed"),
    [
        (1.2, -3.4, 0.5, 7),
        (0.0, 0.0, 1.0, 0),
        (-1234.5, 5e6, 0.1, 2**63 + 5),
        (-0.05, 0.05, 0.1, 1),
        (3.75, -2.25, 0.25, 2**64 - 1),
        (1e7, -1e7, 0.01, 42),
    ],
)
def test_place_normal_matches_reference(x, y, cell, seed):
    """Equals the pure-Python implementation of the documented recipe."""
    expected = py_place_normal(x, y, cell, seed)
    assert float(place_normal(x, y, cell, seed)) == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_place_normal_matches_reference_arrays():
    """Vectorised over points: each element equals the scalar reference."""
    rng = random.Random(3)
    xs = [rng.uniform(-1e4, 1e4) for _ in range(300)]
    ys = [rng.uniform(-1e4, 1e4) for _ in range(300)]
    out = place_normal(np.array(xs), np.array(ys), 0.3, 11)
    assert out.shape == (300,)
    for value, x, y in zip(out.tolist(), xs, ys, strict=True):
        assert value == pytest.approx(py_place_normal(x, y, 0.3, 11), rel=1e-12, abs=1e-12)


@settings(deadline=None)
@given(
    i=st.integers(-(10**6), 10**6),
    j=st.integers(-(10**6), 10**6),
    fx=st.lists(st.floats(0.01, 0.99), min_size=2, max_size=5),
    fy=st.floats(0.01, 0.99),
    cell=st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0]),
    seed=st.integers(0, 2**64 - 1),
)
def test_place_normal_constant_within_cell(i, j, fx, fy, cell, seed):
    """Every point of a cell has the same value."""
    x = (i + np.array(fx)) * cell
    y = np.full_like(x, (j + fy) * cell)
    out = place_normal(x, y, cell, seed)
    assert np.all(out == out[0])
    assert float(out[0]) == pytest.approx(
        py_place_normal(float(x[0]), float(y[0]), cell, seed), rel=1e-12, abs=1e-12
    )


def test_place_normal_differs_across_cells():
    """Distinct cells carry (almost always) distinct values."""
    x, y = grid_centres(100, 100, 0.5, x0=-50, y0=-50)
    out = place_normal(x, y, 0.5, 9)
    assert np.unique(out).size == out.size


def test_place_normal_floor_not_truncation():
    """Negative coordinates use floor: -0.05 and 0.05 differ, -0.05 and -0.09 agree."""
    for seed in (0, 1, 123, 2**64 - 1):
        a = float(place_normal(-0.05, 0.3, 0.1, seed))
        assert a != float(place_normal(0.05, 0.3, 0.1, seed))
        assert a == float(place_normal(-0.09, 0.3, 0.1, seed))
        b = float(place_normal(0.3, -0.05, 0.1, seed))
        assert b != float(place_normal(0.3, 0.05, 0.1, seed))
        assert b == float(place_normal(0.3, -0.09, 0.1, seed))


def test_place_normal_seed_wraps():
    """A seed is a uint64: -1 and 2^64 - 1 are the same stream."""
    assert float(place_normal(1.0, 2.0, 1.0, -1)) == float(place_normal(1.0, 2.0, 1.0, 2**64 - 1))


def test_place_normal_deterministic_and_order_free():
    """Results do not depend on call order or chunking."""
    x, y = grid_centres(50, 40, 0.2, x0=-25, y0=-20)
    whole = place_normal(x, y, 0.2, 5)
    perm = np.random.default_rng(0).permutation(x.size)
    np.testing.assert_array_equal(place_normal(x[perm], y[perm], 0.2, 5), whole[perm])
    chunks = np.concatenate(
        [place_normal(x[k : k + 77], y[k : k + 77], 0.2, 5) for k in range(0, x.size, 77)]
    )
    np.testing.assert_array_equal(chunks, whole)


def test_place_normal_statistics():
    """Over 200,000 cells (incl. negative indices) the values are N(0, 1)."""
    x, y = grid_centres(500, 400, 0.1, x0=-250, y0=-200)
    check_standard_normal(place_normal(x, y, 0.1, 12345))


def test_place_normal_scipy_kstest():
    """scipy's KS test does not reject normality over 200,000 cells."""
    stats = pytest.importorskip("scipy.stats")
    x, y = grid_centres(500, 400, 0.1, x0=-250, y0=-200)
    assert stats.kstest(place_normal(x, y, 0.1, 12345), "norm").pvalue > 1e-3


def test_place_normal_seeds_and_neighbours_uncorrelated():
    """Different seeds, and neighbouring cells, give uncorrelated values (|r| < 0.01)."""
    nx, ny = 500, 400
    x, y = grid_centres(nx, ny, 1.0, x0=-250, y0=-200)
    a = place_normal(x, y, 1.0, 1)
    for seed in (2, 3, 2**63 + 1):
        b = place_normal(x, y, 1.0, seed)
        assert abs(float(np.corrcoef(a, b)[0, 1])) < 0.01
    grid = a.reshape(nx, ny)
    assert abs(float(np.corrcoef(grid[1:].ravel(), grid[:-1].ravel())[0, 1])) < 0.01
    assert abs(float(np.corrcoef(grid[:, 1:].ravel(), grid[:, :-1].ravel())[0, 1])) < 0.01
    # Swapping the two coordinates must not give the same field.
    assert abs(float(np.corrcoef(grid[:ny, :ny].ravel(), grid[:ny, :ny].T.ravel())[0, 1])) < 0.01


def test_place_normal_broadcasts():
    """x (3, 1) and y (4,) broadcast to (3, 4); array seeds broadcast too."""
    x = np.array([[0.5], [1.5], [-2.5]])
    y = np.array([0.5, 1.5, 2.5, -3.5])
    out = place_normal(x, y, 1.0, 4)
    assert out.shape == (3, 4)
    assert out[2, 3] == pytest.approx(py_place_normal(-2.5, -3.5, 1.0, 4), rel=1e-12)
    seeds = np.array([1, 2, 3], dtype=np.uint64)
    per_seed = place_normal(0.5, 0.5, 1.0, seeds)
    assert per_seed.shape == (3,)
    assert per_seed.tolist() == [float(place_normal(0.5, 0.5, 1.0, s)) for s in (1, 2, 3)]


# --------------------------------------------------------------------------------------
# Extremes of the float range, and NaN
# --------------------------------------------------------------------------------------
def _peak_reference(length: float, spread: float) -> float:
    """L / sqrt(L^2 + dR^2) in 60-digit decimal arithmetic, which neither overflows nor
    underflows anywhere in the float64 range."""
    import decimal

    ctx = decimal.Context(prec=60, Emax=10**6, Emin=-(10**6))
    ll, dd = decimal.Decimal(length), decimal.Decimal(spread)
    return float(ctx.divide(ll, ctx.sqrt(ctx.add(ctx.multiply(ll, ll), ctx.multiply(dd, dd)))))


@pytest.mark.parametrize(
    ("length", "spread", "expected"),
    [
        (1e-170, 0.0, 1.0),  # L^2 underflows to 0: the naive root divides by zero
        (1e-170, 1e-170, 1.0 / math.sqrt(2.0)),
        (1e200, 1e200, 1.0 / math.sqrt(2.0)),  # L^2 overflows: the naive factor is 0
        (0.75, 1e200, 7.5e-201),  # dR^2 overflows: the naive factor is 0
        (5e-324, 0.0, 1.0),  # the smallest subnormal pulse
        (1.7e308, 1.7e308, 1.0 / math.sqrt(2.0)),
    ],
)
def test_pulse_peak_factor_at_the_ends_of_the_float_range(length, spread, expected):
    """Finite, in (0, 1] and right to an ulp where L^2 or dR^2 leave the float range."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = float(pulse_peak_factor(length, spread))
    assert out == pytest.approx(expected, rel=2e-16)
    assert out == pytest.approx(_peak_reference(length, spread), rel=2e-16)
    assert 0.0 < out <= 1.0


@settings(deadline=None)
@given(
    length=st.floats(5e-324, 1.7e308, allow_subnormal=True),
    spread=st.floats(0.0, 1.7e308, allow_subnormal=True),
)
def test_pulse_peak_factor_over_the_whole_float_range(length, spread):
    """In [0, 1] everywhere, within 2 ulp of the exact factor wherever that is a normal
    float, and 0 only where the exact factor is below the smallest subnormal."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = float(pulse_peak_factor(length, spread))
    exact = _peak_reference(length, spread)
    assert 0.0 <= out <= 1.0
    if exact > 2.2250738585072014e-308:
        assert out == pytest.approx(exact, rel=4.5e-16)
    else:
        assert out == pytest.approx(exact, abs=1e-323)


def test_pulse_peak_factor_of_an_infinite_spread_is_zero():
    """An infinitely stretched echo has no peak left."""
    assert float(pulse_peak_factor(0.75, math.inf)) == 0.0


_NAN_CASES = [
    (minnaert_backscatter, (0.5, 0.7, 1.0)),
    (in_plane_divergence, (0.003, 0.007, 0.5)),
    (footprint_range_spread_m, (30.0, 0.2, 0.007)),
    (pulse_peak_factor, (0.75, 3.0)),
    (pulse_length_m, (5.0,)),
    (rough_range_sigma_m, (0.01, 0.5)),
    (tilted_cos, (0.7, 0.01)),
]


@pytest.mark.parametrize(
    ("function", "args", "position"),
    [(f, a, i) for f, a in _NAN_CASES for i in range(len(a))],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_nan_in_any_argument_gives_nan(function, args, position):
    """The module's NaN rule: a NaN argument is never clamped or powered into a number."""
    assert np.isfinite(function(*args))
    bad = list(args)
    bad[position] = math.nan
    assert np.isnan(function(*bad))


@pytest.mark.parametrize(
    ("function", "args", "position"),
    [
        (minnaert_backscatter, (0.5, 0.7, 0.0), 1),  # NaN ** 0 is 1 in IEEE arithmetic
        (minnaert_backscatter, (0.5, 1.0, 0.0), 2),  # 1 ** NaN is 1 too
        (pulse_peak_factor, (0.0, 3.0), 1),  # stretching off, yet the spread is NaN
        (footprint_range_spread_m, (30.0, 1.0, 0.0), 0),  # 0 * NaN
        (in_plane_divergence, (0.0, 0.0, 1.0), 0),
    ],
)
def test_nan_survives_where_ieee_arithmetic_would_drop_it(function, args, position):
    """The cases where the formula alone would turn a NaN into a number."""
    bad = list(args)
    bad[position] = math.nan
    assert np.isnan(function(*bad))


def test_nan_rule_holds_element_by_element():
    """Arrays: NaN only in the elements that had one."""
    cos = np.array([0.5, math.nan, 1.0])
    out = minnaert_backscatter(0.5, cos, 0.0)
    np.testing.assert_array_equal(np.isnan(out), [False, True, False])
    np.testing.assert_array_equal(out[[0, 2]], 0.5)


@pytest.mark.parametrize("cell", [0.0, -0.1, math.nan, math.inf, -math.inf])
def test_place_normal_rejects_a_cell_that_is_not_finite_and_positive(cell):
    with pytest.raises(ValueError, match="cell_m must be finite and > 0"):
        place_normal(1.0, 2.0, cell, 3)
    with pytest.raises(ValueError, match="cell_m must be finite and > 0"):
        place_normal(np.zeros(3), 0.0, np.array([0.1, cell, 0.2]), 3)


@pytest.mark.parametrize(
    ("x", "y"),
    [(math.nan, 0.0), (0.0, math.nan), (math.inf, 0.0), (0.0, -math.inf), (1e300, 0.0)],
)
def test_place_normal_of_a_place_off_the_grid_is_nan(x, y):
    """NaN, infinite or int64-overflowing cell indices give NaN, with no warning; the
    other elements are untouched."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = place_normal(np.array([x, 1.2]), np.array([y, -3.4]), 0.5, 7)
    assert np.isnan(out[0])
    assert out[1] == 0.29529209141674007  # the golden value of (1.2, -3.4, 0.5, 7)


def test_place_normal_at_the_last_cells_that_fit_int64():
    """Index -2^63 is the grid's first cell and 2^63 is past its last one."""
    assert np.isfinite(place_normal(-(2.0**63), 0.0, 1.0, 1))
    assert np.isnan(place_normal(2.0**63, 0.0, 1.0, 1))
    assert float(place_normal(-(2.0**63), 0.0, 1.0, 1)) == py_place_normal(-(2.0**63), 0.0, 1.0, 1)
