"""The engine's thread pool: each task runs in a copy of the submitting thread's context.

Object-store settings given for a block of work (``storage.storage_settings``: an Airflow
connection's credentials in the worker) live in a context variable; a plain ThreadPoolExecutor's
threads do not see it and would reach the store as nobody (or as the process's default identity).
Every pool of the engine is this one, so no parallel read, rewrite or delete can lose them.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["ThreadPool"]


class ThreadPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose tasks (``submit``, and ``map`` through it) run in the context of
    the thread that submitted them."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)
