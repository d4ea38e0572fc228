"""How a search runs, `autotune search` end to end, in six rooms, lowest first:

- `inputs`: what the user asked for and the inputs checked before any row is written;
- `plan`: what a predicted search will measure, each phase's minutes, the budget it fits;
- `finalists`: which predicted configurations race, by their chance of being the fastest;
- `fleet`: a search key's lease and the work queue of several models;
- `measured`: the Optuna loop of measured trials (`--strategy measure`) and its race;
- `predicted`: the default pipeline, predict every configuration then race the best few; and `--plan`.

A room imports only rooms before it, and another room's modules only through its face (its `__init__`).
search/ may import `autotune.study` and `autotune.race`; neither imports it.
"""
