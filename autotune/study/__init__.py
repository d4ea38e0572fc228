"""The Optuna study: what it is named and where it is found (`catalog`), what it maximizes
(`objectives`), how it samples and measures trials (`tuner`, `suggest`, `references`), what a trial
stores and how it is read back (`trials`), the re-measurement of its winners (`confirm`), its best
configuration (`best`), and `autotune search` end to end (`search`); each search a run of its own beside
the earlier ones (`runs`), under its key's lease (`leased`), several models a fleet's work queue
(`work_queue`).
"""
