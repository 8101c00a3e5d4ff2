"""Spark data plane: the only package of the engine that imports pyspark (public DataFrame API only)."""
