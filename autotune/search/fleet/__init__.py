"""The fleet: a search key's lease in the shared database (`search_lease`, `free_lease`), so two searches of
one key never measure at once, and the work queue of several models that workers sharing a database drain
(`run_work_queue`).

It may import `autotune.search.inputs`; both strategies import it.
"""

from autotune.search.fleet._lease import announce_takeover, free_lease, lease_key, search_lease
from autotune.search.fleet._work_queue import QueueItem, run_work_queue

__all__ = ["QueueItem", "announce_takeover", "free_lease", "lease_key", "run_work_queue", "search_lease"]
