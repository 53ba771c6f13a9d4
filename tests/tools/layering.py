#!/usr/bin/env python3
"""Calls in libweft run one way: from the API down to the leaf services, never back up.

    tests/tools/layering.py [BUILD]          (default build; make check runs it)

Every object of the library (BUILD/X.o for each source X.c of lib/, algorithms/, transports/*/
and devices/*/, and X.cu of devices/*/, as the Makefile builds them) belongs to one layer of
LAYERS below; a runtime folder the build left out (not in BUILD/.devices) is not expected. From the
objects' symbol tables (nm) it finds, for each global symbol an object uses, the object that
defines it, and fails naming every use that runs upward: an object using a function or
variable of a layer above its own. Uses inside one layer are free. An object that no layer
claims fails too, so a new file gets its place when it is added. Indirect calls (ops tables,
hooks a layer above sets, as comm->watchAlgos) are invisible to nm: they are how a lower
layer reaches up, and the only way.
"""
import fnmatch
import glob
import os
import subprocess
import sys

# Top to bottom; patterns are object paths under BUILD without ".o". docs/architecture.md
# ("Layers") says what each holds and why it sits where it does.
LAYERS = [
    # The entry points and the communicator's life: init, destroy, abort, failure, children.
    ("api", ["lib/comm", "lib/commfail", "lib/childcomm", "lib/shrink", "lib/split", "lib/grow",
             "lib/initall", "lib/coll", "lib/collcheck", "lib/collquery", "lib/linkquery", "lib/group", "lib/fuse",
             "lib/redop", "lib/straggler", "lib/straggler_links", "lib/devcoll", "lib/devbuf", "lib/settings", "lib/version",
             "lib/topo_graph", "lib/memalloc"]),
    # The choice of an algorithm per call, and the list it chooses from.
    ("tune", ["lib/tune", "lib/algospec", "lib/algo_registry"]),
    ("algorithms", ["algorithms/*"]),
    # Links: transport selection, rings, point-to-point, and the list of transports.
    ("links", ["lib/connect", "lib/p2p", "lib/p2p_connect", "lib/transport_registry"]),
    # Steps on a link, the one wait loop, and what lasting waits tell each other.
    ("prims", ["lib/prims", "lib/wait", "lib/sigwatch"]),
    ("transports", ["transports/*/*"]),
    # Leaf services that need the bootstrap or shared memory: who is gone, segments.
    ("services", ["lib/liveness", "lib/shmseg", "lib/topo_job"]),
    ("bootstrap", ["lib/bootstrap", "lib/boot_*"]),
    # The accelerator runtime (lib/device.h) and its one folder per runtime.
    ("devices", ["lib/device", "devices/*/*"]),
    # Leaves: logging, parameters, sockets, clocks, errors, reductions, topology, names, handles.
    ("base", ["lib/log", "lib/param", "lib/copy", "lib/socket", "lib/deadline", "lib/errors", "lib/reduce",
              "lib/lowfloat", "lib/topo", "lib/topo_detect", "lib/topo_model",
              "lib/topo_place", "lib/topo_decide", "lib/topo_cuda", "lib/collname", "lib/argcheck"]),
]

DEFINED = set("TDBRVWCGSiu")  # global definitions (weak, common, ifunc, unique included)
UNDEFINED = set("Uwv")          # uses (weak undefined included)


def layer_of(obj):
    for rank, (name, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(obj, p) for p in patterns):
            return rank, name
    return None


# The sources are the Makefile's LIB_SRCS; objects left in BUILD by deleted sources do not count.
SOURCES = ["lib/*.c", "algorithms/*.c", "transports/*/*.c", "devices/*/*.c", "devices/*/*.cu"]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def objects(build):
    found = []
    for pattern in SOURCES:
        for src in glob.glob(os.path.join(ROOT, pattern)):
            obj = os.path.splitext(os.path.relpath(src, ROOT))[0]
            found.append((obj, os.path.join(build, obj + ".o")))
    return sorted(found)


def symbols(path):
    out = subprocess.run(["nm", "-P", path], check=True, capture_output=True, text=True).stdout
    defs, uses = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind in DEFINED:
            defs.add(name)
        elif kind in UNDEFINED:
            uses.add(name)
    return defs, uses


def unbuilt_runtime(build, obj):
    """Whether obj belongs to a runtime folder (devices/NAME/) this build left out on purpose: the
    Makefile lists the folders it compiles in BUILD/.devices (empty in a CPU-only build). Without
    that file nothing is excused: the tree was not built by make."""
    parts = obj.split("/")
    if parts[0] != "devices" or len(parts) < 3:
        return False
    try:
        with open(os.path.join(build, ".devices")) as f:
            built = f.read().split()
    except OSError:
        return False
    return parts[1] not in built


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    objs = objects(build)
    skipped = sorted({o.split("/")[1] for o, _ in objs if unbuilt_runtime(build, o)})
    objs = [(o, p) for o, p in objs if not unbuilt_runtime(build, o)]
    for name in skipped:
        print(f"layering: devices/{name}/ not built here ({build}/.devices): its objects not checked")
    missing = [path for _, path in objs if not os.path.exists(path)]
    if not objs or missing:
        print(f"layering: objects not built (make first): {' '.join(missing) or 'no sources'}")
        return 1
    errors = []
    definer, used = {}, {}
    for obj, path in objs:
        if layer_of(obj) is None:
            errors.append(f"{obj}.o is in no layer: give it one in LAYERS "
                          f"({os.path.relpath(os.path.abspath(__file__), ROOT)})")
        defs, uses = symbols(path)
        used[obj] = uses
        for s in defs:
            definer.setdefault(s, obj)
    for obj, uses in used.items():
        mine = layer_of(obj)
        if mine is None:
            continue
        for s in sorted(uses):
            owner = definer.get(s)
            if owner is None or owner == obj or layer_of(owner) is None:
                continue
            theirs = layer_of(owner)
            if theirs[0] < mine[0]:
                errors.append(f"upward: {obj} ({mine[1]}) uses {s} of {owner} ({theirs[1]})")
    for e in errors:
        print(e)
    edges = sum(len(u) for u in used.values())
    print(f"layering: {len(objs)} objects in {len(LAYERS)} layers, {edges} uses, "
          f"{len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
