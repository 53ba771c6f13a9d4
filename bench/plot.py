#!/usr/bin/python3
"""Draws bench/compare.sh's output: one PNG per collective, busbw against size (log x), weft
solid and Open MPI dashed, one colour per rank count (and per root, where a collective has one
and the run swept several).

    bench/compare.sh -C all -k logs > compare.md
    bench/plot.py compare.md -o plots          # plots/allreduce.png, plots/broadcast.png, ...
    bench/plot.py compare.md --list            # the series it read, as text, no PNG

It reads the markdown compare.sh prints: a "### Name" line starts each collective's table; the
"<!-- bench/compare.sh: ... -->" line, if there, becomes the figures' subtitle. Rows of size 0
(nccl-tests' AllGather-like sizes below 16 bytes a rank) cannot sit on a log axis and are left
out, as are medians shown as "-". Debian's python3 with python3-matplotlib (install-deps.sh).
"""
import argparse
import os
import re
import sys

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


class InputError(Exception):
    pass


def parse_size(text):
    """'256 KiB' -> 262144, as compare.sh's human() writes sizes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB)", text.strip())
    if not m:
        raise InputError(f"size '{text}' is not compare.sh's (N B, KiB, MiB or GiB)")
    return int(round(float(m.group(1)) * UNITS[m.group(2)]))


def parse_number(text):
    """A median, or None for compare.sh's '-' (no right result to take it from)."""
    text = text.strip()
    return None if text == "-" else float(text)


def read_tables(lines):
    """{collective: {(ranks, root): {"weft": [(size, busbw)], "mpi": [...]}}}, and the note."""
    tables, note, coll, columns = {}, "", None, None
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        m = re.match(r"<!-- bench/compare.sh: (.*) -->$", line)
        if m:
            note = m.group(1)
        elif line.startswith("### "):
            coll, columns = line[4:].strip(), None
            tables.setdefault(coll, {})
        elif line.startswith("|") and coll is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells
                for want in ("ranks", "size", "weft busbw (GB/s)", "MPI busbw (GB/s)"):
                    if want not in columns:
                        raise InputError(f"line {n}: the {coll} table has no '{want}' column")
                continue
            if set("".join(cells)) <= set("-: "):
                continue  # the |---:| line
            if len(cells) != len(columns):
                raise InputError(f"line {n}: {len(cells)} cells, the header has {len(columns)}")
            row = dict(zip(columns, cells))
            size = parse_size(row["size"])
            key = (int(row["ranks"]), int(row["root"]) if "root" in row else None)
            series = tables[coll].setdefault(key, {"weft": [], "mpi": []})
            for side, col in (("weft", "weft busbw (GB/s)"), ("mpi", "MPI busbw (GB/s)")):
                bw = parse_number(row[col])
                if size > 0 and bw is not None:
                    series[side].append((size, bw))
    tables = {c: t for c, t in tables.items() if any(s["weft"] or s["mpi"] for s in t.values())}
    if not tables:
        raise InputError("no compare.sh table with a row to draw (### Name, then | ranks | size | ...)")
    return tables, note


def label(key, several_roots):
    ranks, root = key
    return f"{ranks} ranks" + (f", root {root}" if several_roots else "")


def human(size):
    for unit in ("GiB", "MiB", "KiB"):
        if size >= UNITS[unit] and size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]} {unit}"
    return f"{size} B"


def plot(coll, table, note, path):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=100)
    several_roots = len({root for _, root in table}) > 1
    sizes = set()
    for i, key in enumerate(sorted(table, key=lambda k: (k[0], -1 if k[1] is None else k[1]))):
        colour = f"C{i % 10}"
        for side, style, who in (("weft", "-", "weft"), ("mpi", "--", "Open MPI")):
            points = sorted(table[key][side])
            if not points:
                continue
            sizes.update(s for s, _ in points)
            ax.plot([s for s, _ in points], [b for _, b in points], style, marker="o", markersize=3,
                    color=colour, label=f"{who}, {label(key, several_roots)}")
    ax.set_xscale("log", base=2)
    # Powers of two across the sizes (AllGather-like sizes over 3 ranks are not), at most about
    # 16 labels.
    lo, hi = min(sizes).bit_length() - 1, (max(sizes) - 1).bit_length()
    step = max(1, (hi - lo + 15) // 16)
    ticks = [1 << e for e in range(lo, hi + 1, step)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([human(s) for s in ticks], rotation=45, ha="right")
    ax.set_xlabel("size (bytes, nccl-tests' size column)")
    ax.set_ylabel("busbw (GB/s, median)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{coll}: weft (solid) vs Open MPI (dashed)")
    if note:
        fig.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=6, wrap=True)
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def file_name(coll):
    return re.sub(r"[^a-z0-9]+", "_", coll.lower()) + ".png"


def main():
    ap = argparse.ArgumentParser(description="bench/compare.sh's tables as one PNG per collective")
    ap.add_argument("input", help="compare.sh's output (- for stdin)")
    ap.add_argument("-o", "--outdir", default=".", help="folder for the PNGs (default: .)")
    ap.add_argument("--list", action="store_true", help="print the series read, draw nothing")
    args = ap.parse_args()
    try:
        src = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
        with src:
            tables, note = read_tables(src)
    except (OSError, InputError) as e:
        sys.exit(f"plot.py: {args.input}: {e}")
    for coll, table in tables.items():
        if args.list:
            several_roots = len({root for _, root in table}) > 1
            for key in sorted(table, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
                for side in ("weft", "mpi"):
                    points = " ".join(f"{s}:{b:g}" for s, b in sorted(table[key][side]))
                    print(f"{coll} | {label(key, several_roots)} | {side} | {points}")
            continue
        os.makedirs(args.outdir, exist_ok=True)
        path = os.path.join(args.outdir, file_name(coll))
        plot(coll, table, note, path)
        print(path)


if __name__ == "__main__":
    main()
