"""The search's inputs: what the user asked for (`SearchOptions`, the race's `RaceOptions`, the study's
`SearchSettings`), whom a search tells its progress (`SearchReporter`), and the model's space, files and prompts
checked before anything is measured or stored (`check_inputs`, `runnable_space`).

The lowest room of search/: it imports nothing of search/'s other rooms, and every one of them may import it.
"""

from autotune.search.inputs._checks import check_inputs, model_space, runnable_runtime, runnable_space
from autotune.search.inputs._options import RaceOptions, SearchInputs, SearchOptions, SearchReporter, SearchSettings

__all__ = [
    "RaceOptions",
    "SearchInputs",
    "SearchOptions",
    "SearchReporter",
    "SearchSettings",
    "check_inputs",
    "model_space",
    "runnable_runtime",
    "runnable_space",
]
