//! Shared by the fuzz targets.
