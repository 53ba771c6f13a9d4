#!/usr/bin/python3
"""Plots weft-sim's table (docs/scale.md): per collective, one PNG of bus bandwidth against size
(a panel per rank count) and one of time against rank count (a panel per size), a line per
algorithm; the tuner's choice is marked with a ring on each point it picks.

    weft-sim FABRIC > table.txt && weft-sim-plot table.txt OUTDIR
"""
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_bytes(text):
    for unit in ("KiB", "MiB", "GiB", "B"):
        if text.endswith(unit):
            return int(text[: -len(unit)]) * UNITS[unit]
    raise ValueError("not a size: " + text)


def read_table(path):
    """{collective: {"algos": [...], "rows": [(ranks, bytes, {algo: (time, busbw)}, tuner)]}}"""
    tables, current = {}, None
    with open(path) as f:
        for line in f:
            words = line.split()
            if line.startswith("# ") and " on " in line and "time in us" in line:
                current = tables.setdefault(words[1], {"algos": [], "rows": []})
            elif current is not None and words and words[0] == "ranks":
                current["algos"] = [w for w in words[2:] if w not in ("busbw", "tuner", "its", "cost()", "best")]
            elif current is not None and words and words[0].isdigit():
                cells, i = {}, 2
                for algo in current["algos"]:
                    t, b = words[i], words[i + 1]
                    if t != "-":
                        cells[algo] = (float(t), float(b))
                    i += 2
                current["rows"].append((int(words[0]), parse_bytes(words[1]), cells, words[i]))
    if not tables:
        sys.exit("weft-sim-plot: %s holds no weft-sim table" % path)
    return tables


def panels(n):
    cols = min(3, n)
    return int(math.ceil(n / cols)), cols


def plot(coll, table, outdir, by, against, ylabel, value, name):
    keys = sorted({row[by] for row in table["rows"]})
    rows, cols = panels(len(keys))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        sel = [r for r in table["rows"] if r[by] == key]
        for algo in table["algos"]:
            pts = [(r[against], r[2][algo][value]) for r in sel if algo in r[2] and r[2][algo][value] > 0]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=algo)
            chosen = [(r[against], r[2][algo][value]) for r in sel if r[3] == algo and algo in r[2] and r[2][algo][value] > 0]
            if chosen:
                ax.scatter(*zip(*chosen), s=120, facecolors="none", edgecolors="black")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(("%d ranks" % key) if by == 0 else ("%d bytes" % key))
        ax.set_xlabel("bytes" if against == 1 else "ranks")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle("%s (circled: the tuner's choice)" % coll)
    fig.tight_layout()
    out = os.path.join(outdir, "%s-%s.png" % (coll.lower(), name))
    fig.savefig(out, dpi=90)
    plt.close(fig)
    print(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tables = read_table(sys.argv[1])
    os.makedirs(sys.argv[2], exist_ok=True)
    for coll, table in tables.items():
        plot(coll, table, sys.argv[2], 0, 1, "busbw GB/s", 1, "busbw")
        plot(coll, table, sys.argv[2], 1, 0, "time us", 0, "time")


if __name__ == "__main__":
    main()
