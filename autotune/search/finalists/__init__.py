"""The finalists: which predicted configurations race (`finalists`), by their chance of being the fastest under
the prediction's error (`_cover`), each family's error read from its past races (`_error`: `family_error_sds`,
and the band `autotune trials` prints).

It imports nothing of search/'s other rooms; the predicted pipeline imports it.
"""

from autotune.search.finalists._error import BAND_LEVEL, band, family_error_sds, floored
from autotune.search.finalists._seats import FAMILY_MARGIN, finalists

__all__ = ["BAND_LEVEL", "FAMILY_MARGIN", "band", "family_error_sds", "finalists", "floored"]
