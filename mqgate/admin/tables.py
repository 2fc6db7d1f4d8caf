"""The tables `mqgate cmd` prints, in imqcmd's layout (FACTS 1.8): a rule, the column
headers, a rule, then one line a row; every admin command's C{Reply.text} that is a
table is made here, so they all look alike."""

__all__ = ["render_table", "render_pairs", "cell"]


def render_table(headers, rows, *, title=None, figures=False):
    """Rows under headers, each column as wide as its widest cell; C{None} shows as
    C{-} (a figure that does not apply), a float with two decimals (none past 1,000).

    @param title: a line above the table, or None.
    @param figures: right-align every column, for tables of numbers (metrics).
    """
    cells = [[str(h) for h in headers]] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))

    def line(row):
        if figures:
            return "  ".join(v.rjust(w) for v, w in zip(row, widths))
        return "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()

    lines = [rule, line(cells[0]), rule, *map(line, cells[1:])]
    return "\n".join(lines if title is None else [title, *lines])


def cell(value):
    """How a value shows in a table."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if value < 1000 else f"{value:.0f}"
    return str(value)


def render_pairs(pairs):
    """A query's figures: two columns, property and value (imqcmd's query layout)."""
    return render_table(("Property", "Value"), pairs)
