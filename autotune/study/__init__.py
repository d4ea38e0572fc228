"""The Optuna study and its records: what a study is named and where it is found (`catalog`), what it
maximizes (`objectives`), the one schema of what a trial stores (`records`) and how trials are read back
(`trials`), each search a run of its own beside the earlier ones (`runs`), the verdict a race stored
(`verdict`) and the answer read back from it (`best`).

It imports neither `autotune.race` nor `autotune.search`: `best`, `presets` and `report` read answers
without pulling in the code that measured them.
"""
