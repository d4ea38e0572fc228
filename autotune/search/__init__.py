"""How a search runs: `autotune search` end to end (`search`: inputs checked before any row is written),
the predicted strategy (`predicted`, `predicted_space`, `calibration`) with its plan (`plan`, `plan_run`),
the measured one (`tuner`, `suggest`, `references`), and the fleet: a key's lease (`leased`) and the
work queue of several models (`work_queue`).

It may import `autotune.study` and `autotune.race`; neither imports it.
"""
