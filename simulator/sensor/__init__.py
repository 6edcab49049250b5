"""The sensor: scan patterns (:mod:`.scanner`: pulse id to time, channel and direction)
and poses over time (:mod:`.trajectory`)."""
