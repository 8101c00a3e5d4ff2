"""What ``make bench`` measures: sizes (defaults = issue 3 item 8) and the list of cases.

Defaults (override with CLI flags or ``BENCH_<NAME>`` environment variables, e.g.
``BENCH_FILES=20000``; ``--quick`` is a smoke run with small tables and few repetitions):

* ``files`` = 100 000 files in the JSON-only tables (1 commit x 100k, and 100 commits x 1k);
* "checkpoint + 100 commits": ``ckpt_base_commits`` (100) commits of ``files/ckpt_base_commits``
  adds, a 100k-file checkpoint at v100 (written by delta-rs, and a variant by our writer), then
  ``tail_commits`` (100) commits of ``tail_adds`` (10) adds -> 101 000 live files at v200
  (every 10th tail commit also rewrites 10 checkpointed files, so removes are replayed too);
* "1k commits since a checkpoint": ``many_base_files`` (10 000) files checkpointed at v1, then
  ``many_commits`` (1 000) commits of ``tail_adds`` adds -> 20 000 files at v1001;
* small commits on a ``small_commits`` x 10-file table, and on a copy of the 101k-file table.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from . import generate as g


@dataclass
class Sizes:
    files: int = 100_000
    ckpt_base_commits: int = 100
    tail_commits: int = 100
    tail_adds: int = 10
    many_base_files: int = 10_000
    many_commits: int = 1_000
    small_commits: int = 10
    rounds: int = 3
    warmup: int = 0
    reps: int = 3
    commit_reps: int = 10
    big_commit_reps: int = 2

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            files=5_000,
            ckpt_base_commits=10,
            tail_commits=20,
            many_base_files=1_000,
            many_commits=100,
            small_commits=5,
            rounds=2,
            warmup=0,
            reps=2,
            commit_reps=3,
            big_commit_reps=1,
        )

    def with_env(self) -> Sizes:
        out = dataclasses.replace(self)
        for f in dataclasses.fields(self):
            v = os.environ.get(f"BENCH_{f.name.upper()}")
            if v:
                setattr(out, f.name, int(v))
        return out


@dataclass
class Case:
    id: str
    title: str
    table: g.TableSpec | None
    op: str
    args: dict = field(default_factory=dict)
    reps: int = 3
    warmup: int = 0
    rounds: int = 3
    expect: dict = field(default_factory=dict)  # values both engines must return
    headline: bool = False
    needs_ours_checkpoint: bool = False


def files_at(s: g.TableSpec, version: int) -> int:
    """Live files of a generated table at ``version`` (see generate._build_ckpt_plus)."""
    if s.kind == "json":
        return min(version, s.p("commits")) * s.p("adds")
    base = s.p("base_commits")
    if version <= base:
        return version * s.p("base_adds")
    return base * s.p("base_adds") + (version - base) * s.p("tail_adds")


def tables(z: Sizes) -> dict[str, g.TableSpec]:
    base_adds = max(1, z.files // z.ckpt_base_commits)
    many_base_adds = z.many_base_files
    ckpt = dict(
        base_commits=z.ckpt_base_commits, base_adds=base_adds, tail_commits=z.tail_commits, tail_adds=z.tail_adds
    )
    return {
        "json_1": g.spec("json", commits=1, adds=z.files),
        "json_n": g.spec("json", commits=z.ckpt_base_commits, adds=base_adds),
        "ckpt_rs": g.spec("ckptrs", **ckpt),
        "ckpt_ours": g.spec("ckptours", **ckpt),
        "many": g.spec(
            "ckptrs", base_commits=1, base_adds=many_base_adds, tail_commits=z.many_commits, tail_adds=z.tail_adds
        ),
        "small": g.spec("json", commits=z.small_commits, adds=10),
    }


def _open_case(cid, title, t, version=None, **kw) -> Case:
    v = g.latest_version(t) if version is None else version
    return Case(cid, title, t, "open", {"version": version}, expect={"files": files_at(t, v), "version": v}, **kw)


def build(z: Sizes) -> list[Case]:
    t = tables(z)
    ck = t["ckpt_rs"]
    nfiles = files_at(ck, g.latest_version(ck))
    base_v = z.ckpt_base_commits
    mid_v = base_v + z.tail_commits // 2
    pre_v = max(1, base_v // 2)

    def k(n: int) -> str:
        return f"{n / 1000:g}k" if n >= 1000 else str(n)

    cases = [
        _open_case("open_json_1", f"open: {k(z.files)} files, JSON only (1 commit)", t["json_1"]),
        _open_case(
            "open_json_n",
            f"open: {k(z.files)} files, JSON only ({z.ckpt_base_commits} "
            f"commits x {k(z.files // z.ckpt_base_commits)})",
            t["json_n"],
        ),
        _open_case(
            "open_ckpt_rs",
            f"open: checkpoint (delta-rs) + {z.tail_commits} commits, {k(nfiles)} files",
            ck,
            headline=True,
        ),
        _open_case(
            "open_ckpt_ours",
            f"open: checkpoint (ours) + {z.tail_commits} commits, {k(nfiles)} files",
            t["ckpt_ours"],
            needs_ours_checkpoint=True,
        ),
        _open_case("tt_ckpt_mid", f"time travel v{mid_v}: checkpoint + {mid_v - base_v} commits", ck, version=mid_v),
        _open_case(
            "tt_pre_ckpt",
            f"time travel v{pre_v}: {k(files_at(ck, pre_v))} files, JSON only (before the checkpoint)",
            ck,
            version=pre_v,
        ),
        _open_case(
            "open_many",
            f"open: checkpoint + {k(z.many_commits)} commits, "
            f"{k(files_at(t['many'], g.latest_version(t['many'])))} files",
            t["many"],
        ),
        Case(
            "confine_paths",
            f"path confinement share of open: every path of {k(nfiles)} files + tombstones checked",
            ck,
            "confine_paths",
            expect={"files": nfiles, "version": g.latest_version(ck)},
        ),
        Case(
            "ver_ckpt",
            f"latest_version: checkpoint + {z.tail_commits} commits",
            ck,
            "latest_version",
            expect={"version": g.latest_version(ck)},
        ),
        Case(
            "ver_many",
            f"latest_version: checkpoint + {k(z.many_commits)} commits",
            t["many"],
            "latest_version",
            expect={"version": g.latest_version(t["many"])},
        ),
        Case(
            "commit_log_only",
            "small commit, preloaded snapshot: ours 1 AddFile (log only) vs deltalake write_deltalake (parquet + log)",
            t["small"],
            "commit_log_only",
            reps=z.commit_reps,
            warmup=1,
        ),
        Case(
            "commit_parquet",
            f"small commit, preloaded snapshot: write 1 parquet ({SMALL}) + stats + commit",
            t["small"],
            "commit_parquet",
            reps=z.commit_reps,
            warmup=1,
        ),
        Case(
            "open_commit_small",
            f"small commit incl. open ({z.small_commits * 10}-file table): open + parquet + commit",
            t["small"],
            "open_commit_parquet",
            reps=z.commit_reps,
            warmup=1,
        ),
        Case(
            "open_commit_big",
            f"small commit incl. open ({k(nfiles)}-file table): open + parquet + commit",
            ck,
            "open_commit_parquet",
            reps=z.big_commit_reps,
            warmup=0,
        ),
    ]
    for c in cases:
        c.rounds = z.rounds
        if c.op in ("open", "latest_version", "confine_paths"):
            c.reps, c.warmup = z.reps, z.warmup
    return cases


SMALL = "100 rows"
