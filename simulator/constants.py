"""Numbers the whole simulator shares: hashing, clamps, physical constants, option tables.

The numpy specification (:mod:`simulator.physics` and the pipeline steps) and the numba
kernels (:mod:`simulator.kernels`) both read them from here, so the two can never drift
apart. This module imports nothing of the package.
"""

from __future__ import annotations

import math

__all__ = [
    "COS_FLOOR",
    "GOLDEN_GAMMA",
    "HALF_PI_BELOW",
    "LARGEST_BELOW_ONE",
    "MIX64_MUL1",
    "MIX64_MUL2",
    "RETURNS_PER_PULSE",
    "RETURN_MODES",
    "RING_COUNTS",
    "ROUGH_COS_FLOOR",
    "SALT_DETECTION",
    "SALT_SPECKLE",
    "SPEED_OF_LIGHT_MPS",
    "STREAM_MICRO_SLOPE",
    "STREAM_RELIEF",
    "STREAM_SENSOR_NOISE",
    "TWO_POW_M53",
    "sequence_seed",
    "stream_seed",
]

SPEED_OF_LIGHT_MPS = 299_792_458.0

# --------------------------------------------------------------------------- hashing

#: The golden-ratio increment of SplitMix64, 2^64 / phi.
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
#: The two multipliers of the SplitMix64 finalizer (Steele, Lea and Flood 2014).
MIX64_MUL1 = 0xBF58476D1CE4E5B9
MIX64_MUL2 = 0x94D049BB133111EB
#: 2^-53: the step of a uniform number made from the top 53 bits of a hash.
TWO_POW_M53 = 2.0**-53
#: The largest float64 below 1 (a hashed uniform is held under it).
LARGEST_BELOW_ONE = 1.0 - 2.0**-53

#: Stream numbers of the survey seed: stream ``s`` is ``mix64(seed + s * GOLDEN_GAMMA)``.
STREAM_MICRO_SLOPE = 1
STREAM_RELIEF = 2
STREAM_SENSOR_NOISE = 3
#: Streams of the weather: the fog's and the dust's range jitter, the rain's and the
#: snow's particles.
STREAM_FOG = 4
STREAM_RAIN = 5
STREAM_SNOW = 6
STREAM_DUST = 7
#: Salts of the receiver's per-echo draws (:mod:`simulator.steps.receiver`): an echo's
#: speckle and detection keys are ``mix64(jitter_key ^ salt)``, its range jitter's key
#: mixed again, so they follow the jitter's keys (the survey seed, the pulse, the echo's
#: rank) without a stream of their own.
SALT_SPECKLE = 0x5BD1E9955BD1E995
SALT_DETECTION = 0x27D4EB2F165667C5

# --------------------------------------------------------------------------- clamps

#: Smallest incidence cosine used by the backscatter and footprint laws.
COS_FLOOR = 1e-4
#: Smallest incidence cosine used by the rough-surface range law.
ROUGH_COS_FLOOR = 0.05
#: The largest float64 below pi / 2: a tilted incidence angle is held under it.
HALF_PI_BELOW = math.nextafter(math.pi / 2.0, 0.0)

# --------------------------------------------------------------------------- surfaces

#: A ray cast on behind a see-through surface starts this far past it (clear of the
#: surface it passed, closer than anything it could meet next).
PASS_THROUGH_M = 1e-4

# --------------------------------------------------------------------------- weather

#: Koschmieder: the extinction of a medium of meteorological optical range MOR is
#: ``-ln(0.05) / MOR`` (the contrast of a black target falls to 5 % at the MOR).
KOSCHMIEDER = math.log(20.0)
#: Fog's backscatter per metre and steradian times the MOR (Rasshofer, Spies and Spies
#: 2011, used by Hahner et al. 2021): ``beta = 0.046 / MOR``.
FOG_BACKSCATTER_MOR = 0.046
#: Lidar ratio (extinction / backscatter) of mineral dust near 900 nm, sr.
DUST_LIDAR_RATIO_SR = 45.0
#: Marshall and Palmer (1948) rain drops: ``N(D) = N0 exp(-Lambda D)``, ``N0`` in
#: m^-3 mm^-1, ``Lambda = 4.1 R^-0.21`` mm^-1 for ``R`` in mm/h.
RAIN_N0 = 8000.0
RAIN_LAMBDA = (4.1, -0.21)
#: Gunn and Marshall (1958) snow, in melted diameter: ``N0 = 3800 R^-0.87`` m^-3 mm^-1,
#: ``Lambda = 2.55 R^-0.48`` mm^-1.
SNOW_N0 = (3800.0, -0.87)
SNOW_LAMBDA = (2.55, -0.48)
#: A flake's diameter over its melted drop's, ``(rho_water / rho_snow)^(1/3)`` for a
#: flake of bulk density 0.1 g/cm^3.
SNOW_FLAKE_PER_MELTED = 10.0 ** (1.0 / 3.0)
#: Extinction efficiency of particles much larger than the wavelength (the extinction
#: paradox): each removes twice its cross-section from the beam.
PARTICLE_EXTINCTION_EFFICIENCY = 2.0
#: Lidar ratio of water drops at 905 nm (O'Connor, Illingworth and Hogan 2004), sr. A
#: drop's backscatter is its extinction cross-section over it: as seen by the receiver, a
#: disc of reflectance ``2 pi / 18.8 = 0.33``.
RAIN_LIDAR_RATIO_SR = 18.8
#: A flake as a Lambertian sphere of snow's albedo near 900 nm (0.9): its backscatter is
#: that of a disc of reflectance ``2/3 * 0.9``.
SNOW_EQUIVALENT_REFLECTANCE = 0.6
#: A drop's backscatter as a biaxial receiver sees it, as the reflectance of a disc of its
#: cross-section (``pi`` times the differential backscatter cross-section per geometric
#: area). Mie theory for water at 905 nm (n = 1.3275 + 4.7e-7 i; miepython 3.3, averaged
#: over +-3 % in size): exactly backwards the glory gives 1.1-2.0 for 0.5-2 mm drops (lidar
#: ratios of 3-6 sr, not the 18.8 sr of cloud droplets), but it is narrower than 2 mrad;
#: 5-20 mrad off the backward direction, where a receiver 25 mm beside the transmitter
#: sees a drop 1-5 m away, it is 0.035-0.093 (mean 0.05). ASSUMPTION: the off-glory mean.
RAIN_BACKSCATTER_REFLECTANCE = 0.05
#: Brandes et al. (2007): the bulk density of snow flakes falls with their size,
#: ``rho = 0.178 D^-0.922`` g/cm^3 with D the flake's diameter in mm (Colorado, fitted
#: for 0.3-10 mm flakes); a flake of melted diameter ``Dm`` is then
#: ``(Dm^3 / 0.178)^(1 / 2.078)`` mm across.
SNOW_DENSITY_G_CM3 = (0.178, -0.922)
#: Kim, McArthur and Korevaar (2001): the extinction of haze of visibility V scales with
#: the wavelength as ``(lambda / 550 nm)^-q``, q = 0 below V = 0.5 km, V - 0.5 to 1 km,
#: 0.16 V + 0.34 to 6 km, 1.3 to 50 km and 1.6 beyond (V in km).
HAZE_REFERENCE_WAVELENGTH_NM = 550.0
#: Extinction efficiency of rain drops and flakes by default: 2, the large-particle limit
#: (van de Hulst 1957, the extinction paradox), for a receiver that sees none of the light
#: the particle diffracts forward; a receiver whose field of view recaptures that lobe
#: (about 1.2 lambda / D, 1 mrad for a 1 mm drop) measures down to 1
#: (``weather.rain.extinction_efficiency``).
DEFAULT_EXTINCTION_EFFICIENCY = 2.0

#: Most particles one pulse may meet (the Poisson tail beyond is below 1e-20 at the
#: rates allowed).
MAX_PARTICLES_PER_PULSE = 16

# --------------------------------------------------------------------------- options

#: Footprint sub-ray counts: a centre plus 0-4 hexagonal rings.
RING_COUNTS = (1, 7, 19, 37, 61)
#: Return modes by number (the echo kernel's ``mode`` argument).
RETURN_MODES = {"strongest": 0, "first": 1, "last": 2, "dual": 3, "multi": 4}
#: Returns a pulse reports in the modes that fix the number (``multi`` takes ``max_returns``).
RETURNS_PER_PULSE = {"strongest": 1, "first": 1, "last": 1, "dual": 2}


def _mix64(x: int) -> int:
    """SplitMix64's finalizer on a Python int (the vectorised one is ``physics.mix64``)."""
    mask = 0xFFFFFFFFFFFFFFFF
    x &= mask
    x = ((x ^ (x >> 30)) * MIX64_MUL1) & mask
    x = ((x ^ (x >> 27)) * MIX64_MUL2) & mask
    return x ^ (x >> 31)


def stream_seed(seed: int, stream: int) -> int:
    """The hash seed of one stream of a seed: the ``stream``-th SplitMix64 output after it,
    ``mix64(seed + stream * GOLDEN_GAMMA)`` (wrapping). Used for the survey's streams
    (``STREAM_*``) and for the seed of each sequence of a dataset."""
    return _mix64(seed + stream * GOLDEN_GAMMA)


def sequence_seed(root: int, index: int) -> int:
    """The seed of sequence ``index`` of a dataset of root seed ``root``: its stream
    ``index + 1``, so that a sample depends only on its index and the root seed."""
    return stream_seed(root, index + 1)


#: Point-cloud file formats, by the lower-case extension that picks the writer.
OUTPUT_SUFFIXES = (".npz", ".pcd", ".ply", ".las", ".laz", ".bin")
