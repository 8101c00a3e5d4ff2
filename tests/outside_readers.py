"""Readers that are not ours, for tests that check what we write from outside: deltalake (delta-rs),
delta-kernel-rs (its Python wrapper, ``delta-kernel-rust-sharing-wrapper``) and DuckDB's ``delta_scan``
(``duckdb`` with ``duckdb-extension-delta``, loaded from the package's own file: no download).

Each returns the latest version's rows as an Arrow table, or raises what the reader raised.
"""

from __future__ import annotations

import functools
import glob
import os

import pyarrow as pa


def _url(root: str) -> str:
    return root if "://" in root else "file://" + os.path.abspath(root)


def kernel_table(root: str, columns: list[str] | None = None) -> pa.Table:
    """The rows delta-kernel-rs reads (deletion vectors applied, V2 checkpoints, column mapping)."""
    import delta_kernel_rust_sharing_wrapper as kernel

    engine = kernel.PythonInterface(_url(root))
    snapshot = kernel.Table(_url(root)).snapshot(engine)
    table = kernel.ScanBuilder(snapshot).build().execute(engine).read_all()
    return table.select(columns) if columns else table


def kernel_changes(root: str, start_version: int, end_version: int | None = None) -> pa.Table:
    """delta-kernel-rs' change data feed of ``start_version``..``end_version`` (latest when None)."""
    import delta_kernel_rust_sharing_wrapper as kernel

    engine = kernel.PythonInterface(_url(root))
    table = kernel.Table(_url(root))
    builder = kernel.TableChangesScanBuilder(table, engine, start_version, end_version)
    return builder.build().execute(engine).read_all()


@functools.cache
def _duckdb_extension() -> str:
    import duckdb_extension_delta

    (path,) = glob.glob(os.path.join(os.path.dirname(duckdb_extension_delta.__file__), "extensions", "*", "*"))
    return path


def duckdb_table(root: str, columns: list[str] | None = None) -> pa.Table:
    """The rows DuckDB's ``delta_scan`` reads."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute(f"LOAD '{_duckdb_extension()}'")
        cols = ", ".join(f'"{c}"' for c in columns) if columns else "*"
        return con.execute(f"SELECT {cols} FROM delta_scan(?)", [os.path.abspath(root)]).fetch_arrow_table()
    finally:
        con.close()


def deltalake_table(root: str, columns: list[str] | None = None) -> pa.Table:
    """The rows deltalake reads (it refuses deletion vectors, V2 checkpoints and type widening)."""
    import deltalake

    return deltalake.DeltaTable(root).to_pyarrow_table(columns=columns)


def deltalake_scan(root: str) -> pa.Table:
    """The rows deltalake reads, deletion vectors applied: its DataFusion scan where the table has
    the feature (``to_pyarrow_table`` refuses it)."""
    import deltalake

    dt = deltalake.DeltaTable(root)
    if "deletionVectors" in (dt.protocol().reader_features or []):
        return pa.table(deltalake.QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all())
    return dt.to_pyarrow_table()


def sorted_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """``columns`` of ``table`` as sorted tuples (order-free comparison; NULLs sort first)."""
    cols = [table.column(c).to_pylist() for c in columns]
    return sorted(zip(*cols), key=lambda r: tuple((v is not None, v) for v in r))
