"""The time written into outputs that carry one (a zip member's stamp, a LAS header's
creation day): fixed, so that the same scan makes the same bytes whenever it is written,
or the reproducible-builds ``SOURCE_DATE_EPOCH`` (seconds since 1970, UTC) when it is set."""

from __future__ import annotations

import os
import time

__all__ = ["ZIP_EPOCH", "archive_time", "source_date_epoch"]

#: The zip's own earliest time, 1980-01-01 00:00:00: what every archive member is stamped
#: with unless ``SOURCE_DATE_EPOCH`` says otherwise.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def source_date_epoch() -> int | None:
    """``SOURCE_DATE_EPOCH`` as whole seconds, or None when it is unset or not a number."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return int(epoch) if epoch.isdigit() else None


def archive_time() -> tuple[int, int, int, int, int, int]:
    """(year, month, day, hour, minute, second) every member of an archive is stamped
    with: ``SOURCE_DATE_EPOCH`` in UTC (no earlier than :data:`ZIP_EPOCH`) when it is set,
    else :data:`ZIP_EPOCH`."""
    epoch = source_date_epoch()
    if epoch is None:
        return ZIP_EPOCH
    t = time.gmtime(epoch)
    return max(ZIP_EPOCH, (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec))
