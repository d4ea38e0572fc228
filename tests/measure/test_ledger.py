"""The cost ledger: phases time their own blocks and take what is charged inside them, nested phases keep
their own share, a worker's ledger adds up, and the row survives a round trip through storage."""

from __future__ import annotations

import threading
import time

from autotune.measure.ledger import Ledger, charge


def test_a_phase_takes_what_is_charged_inside_it_and_nothing_outside():
    ledger = Ledger()
    charge(tokens=5)  # no phase: charged nowhere
    with ledger.phase("baseline"):
        charge(tokens=40, server_starts=1)
        charge(tokens=8)
    with ledger.phase("race"):
        worker = threading.Thread(target=lambda: charge(tokens=3))  # a concurrent measurement's thread
        worker.start()
        worker.join()
    with ledger.phase("baseline"):  # a phase run again adds to its row
        charge(tokens=2, server_starts=1)
    assert ledger.phases["baseline"].tokens == 50 and ledger.phases["baseline"].server_starts == 2
    assert ledger.phases["race"].tokens == 3
    assert list(ledger.phases) == ["baseline", "race"]
    assert ledger.total.tokens == 53


def test_a_nested_phase_keeps_its_own_seconds_and_charges():
    ledger = Ledger()
    started = time.perf_counter()
    with ledger.phase("calibration"):
        time.sleep(0.05)
        with ledger.phase("blocks"):
            charge(decodes=7)
            time.sleep(0.1)
        charge(tokens=1)
    elapsed = time.perf_counter() - started
    blocks, calibration = ledger.phases["blocks"], ledger.phases["calibration"]
    assert blocks.decodes == 7 and calibration.decodes == 0 and calibration.tokens == 1
    assert blocks.seconds >= 0.1 and calibration.seconds >= 0.05  # each slept at least that long in its own block
    assert blocks.seconds + calibration.seconds <= elapsed  # the inner block's time is not counted twice


def test_a_workers_ledger_adds_up_and_round_trips_through_a_dict():
    ledger, worker = Ledger(), Ledger()
    with ledger.phase("baseline"):
        charge(tokens=10, server_starts=1)
    with worker.phase("blocks"):
        charge(decodes=100)
    ends = []
    ledger.on_phase_end = lambda: ends.append(len(ledger.phases))
    ledger.add(worker)
    ledger.add(worker)
    assert ledger.phases["blocks"].decodes == 200 and ends == [2, 2]
    again = Ledger.from_dict(ledger.as_dict())
    assert again.as_dict() == ledger.as_dict()
    line = again.line()
    assert line.startswith("cost: baseline 10 tokens, 1 server start, ") and "blocks 200 draft decodes, " in line
    assert "(total 10 tokens, 200 draft decodes, 1 server start, " in line
