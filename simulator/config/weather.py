"""The weather model: the medium between the sensor and the scene.

A survey's (or a dataset group's) ``weather:`` section names the conditions; each is
optional and an empty section is clear air. The physics is in :mod:`simulator.steps.weather`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import Model

__all__ = ["Dust", "Fog", "Precipitation", "Weather"]

#: Meteorological optical range a fog or dust may be given, m.
VisibilityM = Annotated[float, Field(ge=1.0, le=100_000.0, allow_inf_nan=False)]
#: Precipitation rates, mm/h of water (300 mm/h is beyond any recorded minute rate).
RateMmH = Annotated[float, Field(gt=0.0, le=300.0, allow_inf_nan=False)]


class Fog(Model):
    """Fog of a given meteorological optical range (MOR, the distance at which the
    contrast of a black target falls to 5 %): extinction ``ln(20) / MOR`` and
    backscatter ``0.046 / MOR`` per metre and steradian at 550 nm, scaled to the
    scanner's wavelength above 500 m (haze, Kim et al. 2001). Dense fog is 20-50 m,
    light fog 200-1000 m."""

    visibility_m: VisibilityM


class Dust(Model):
    """Dust or haze of a given meteorological optical range: extinction ``ln(20) /
    MOR``, backscatter from a lidar ratio of 45 sr (mineral dust)."""

    visibility_m: VisibilityM


class Precipitation(Model):
    """Rain or snow falling at ``rate_mm_h`` (mm of water an hour: drizzle below 1,
    moderate 2.5-7.6, heavy above 7.6, a cloudburst 50 and more; snow as its melted
    water, 1 mm/h is a moderate snowfall)."""

    rate_mm_h: RateMmH
    #: Extinction efficiency Q of the particles: each removes ``Q`` times its cross-section
    #: from the beam. 2 is the large-particle limit (van de Hulst 1957); a receiver whose
    #: field of view recaptures the forward-diffracted lobe sees less, down to 1.
    extinction_efficiency: Annotated[float, Field(ge=1.0, le=2.0, allow_inf_nan=False)] = 2.0


class Weather(Model):
    """The conditions along every beam; none given is clear air.

    Conditions combine: their extinctions add, and each returns light of its own.
    """

    fog: Fog | None = None
    rain: Precipitation | None = None
    snow: Precipitation | None = None
    dust: Dust | None = None

    @property
    def clear(self) -> bool:
        """No condition given."""
        return self.fog is None and self.rain is None and self.snow is None and self.dust is None

    def describe(self) -> str:
        """One line for logs and reports, e.g. ``fog 50 m, rain 25 mm/h``."""
        parts = []
        if self.fog is not None:
            parts.append(f"fog {self.fog.visibility_m:g} m")
        if self.dust is not None:
            parts.append(f"dust {self.dust.visibility_m:g} m")
        if self.rain is not None:
            parts.append(f"rain {self.rain.rate_mm_h:g} mm/h")
        if self.snow is not None:
            parts.append(f"snow {self.snow.rate_mm_h:g} mm/h")
        return ", ".join(parts) or "clear air"
