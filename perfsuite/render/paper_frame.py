"""One paper table (``paper_table.PaperTable``) as pandas frames, for pandas' own writers.

Rows are indexed by (β, method) in the table's order, the lower-bound row first
in each β section; columns are a MultiIndex of phase × (mem, time, analytic),
the analytic column named as the table says ("% roofline" or "FLOP/s"). The
text frame holds what a reader sees (units and marks ‡ † ✗ included); the best
frame says which cells are the best of their column, so that each writer bolds
them its own way (``**`` in markdown, ``\\textbf`` in LaTeX, CSS in HTML).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from perfsuite.render.paper_table import LOWER_BOUND, PaperTable, section_label

BETA, METHOD = "β", "method"


@dataclass
class PaperFrame:
    text: pd.DataFrame
    best: pd.DataFrame  # same shape as text, True where the cell is its column's best

    @property
    def bound_rows(self) -> pd.Series:
        """True for each section's lower-bound row."""
        return pd.Series(
            self.text.index.get_level_values(METHOD) == LOWER_BOUND, index=self.text.index
        )


def paper_frame(table: PaperTable) -> PaperFrame:
    """The text and best-cell frames of ``table``."""
    columns = pd.MultiIndex.from_product(
        [table.phases, ["mem", "time", table.analytic]], names=None
    )
    keys, texts, bests = [], [], []
    for section in table.sections:
        for line in section.lines:
            keys.append((section_label(section), line.method))
            texts.append([c.text for c in line.cells])
            bests.append([c.best for c in line.cells])
    index = pd.MultiIndex.from_tuples(keys, names=[BETA, METHOD])
    return PaperFrame(
        pd.DataFrame(texts, index=index, columns=columns),
        pd.DataFrame(bests, index=index, columns=columns, dtype=bool),
    )


def flat_headers(frame: pd.DataFrame) -> list[str]:
    """ "fwd mem", "fwd time", ...: one header per column for single-row headers."""
    return [f"{phase} {what}" for phase, what in frame.columns]
