"""The race and its verdict: finalists, references and a control paired prompt by prompt on real servers
(`race`), the rounds that measure them (`rounds`), the entrants and their paired figures (`entrants`),
each measurement's drafting and lossless checks (`checks`), and `autotune confirm`'s re-race of a study's
top trials (`confirm`).

It imports `autotune.study` (the records it stores a verdict in) and never `autotune.search`: a race
judges whatever entrants it is handed, however a search chose them.
"""
