"""The tables `mqgate cmd` prints, in imqcmd's layout (FACTS 1.8): a rule, the column
headers, a rule, then one line a row; every admin command's C{Reply.text} that is a
table is made here, so they all look alike."""

__all__ = ["render_table", "render_pairs"]


def render_table(headers, rows):
    """Rows under headers, each column as wide as its widest cell; C{None} shows as
    C{-} (a figure that does not apply)."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row]
                                          for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))

    def line(row):
        return "  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()

    return "\n".join([rule, line(cells[0]), rule, *map(line, cells[1:])])


def render_pairs(pairs):
    """A query's figures: two columns, property and value (imqcmd's query layout)."""
    return render_table(("Property", "Value"), pairs)
