"""A search under its key's lease (storage.leases): claimed before the first measurement, renewed by a
heartbeat while the search runs, released once its answer is stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autotune.hardware import hardware_key
from autotune.search.inputs import SearchSettings
from storage import resolve_storage_url
from storage.leases import Holder, Lease, LeaseKey, LeaseStore, held_line


def lease_key(settings: SearchSettings) -> LeaseKey:
    """The lease a search of `settings` on this machine needs."""
    return LeaseKey(settings.model, hardware_key(), settings.objective, settings.concurrency)


@contextmanager
def search_lease(options, note: Callable[[str], None], on_wait: Callable[[], None] = lambda: None) -> Iterator[Lease]:
    """Hold the lease of `options` (SearchOptions): while another process holds it, wait, saying whose it
    is and since when in one line (`on_wait` hears each holder waited for), or, with `options.wait` off
    (--no-wait), raise LeaseHeld with that line."""
    key = lease_key(options.settings)

    def waiting(holder: Holder | None) -> None:
        note(f"waiting: {held_line(key, holder)}")
        on_wait()

    with LeaseStore(resolve_storage_url(options.storage_url)) as leases:
        lease = leases.claim(key, beat_s=options.heartbeat_s, wait=options.wait, on_wait=waiting)
        with lease:
            announce_takeover(lease, note)
            yield lease


@contextmanager
def free_lease(options, note: Callable[[str], None]) -> Iterator[tuple[Lease | None, Holder | None]]:
    """(the lease of `options`, None) if nobody holds it (a measured study's race, a fleet worker's next
    model), else (None, who holds it) at once."""
    key = lease_key(options.settings)
    with LeaseStore(resolve_storage_url(options.storage_url)) as leases:
        lease = leases.try_claim(key, beat_s=options.heartbeat_s)
        if lease is None:
            yield None, leases.holder(key)
            return
        with lease:
            announce_takeover(lease, note)
            yield lease, None


def announce_takeover(lease: Lease, note: Callable[[str], None]) -> None:
    """Say whose expired lease this one took over, where it did."""
    if lease.taken_from is not None:
        note(
            f"took over the lease of {lease.key.describe()} from {lease.taken_from.describe()}: it stopped "
            "beating (its process is gone or silent for 3 heartbeats)"
        )
