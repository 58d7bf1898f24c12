"""Reality: published measurements predicted and scored (validation, the report, the
correction, calibration, band coverage), and this machine measured (measure)."""
