#!/usr/bin/env python3
"""Writes the hwloc XML fixtures of tests/unit/test_topo.c (hwloc 2.x format, by hand: no
lstopo on the build machine). Run from anywhere: python3 tests/data/make-topo-fixtures.py

  topo-2s4n-8gpu-4nic.xml  2 packages x 2 NUMA nodes (4 cores each, 2 PUs per core numbered as
                           Linux numbers hyperthreads: core c has PUs c and c + 16), each NUMA
                           node with a host bridge, a PCIe switch under it holding 2 GPUs and a
                           NIC (eth<i> + RDMA mlx5_<i>): 8 GPUs, 4 NICs
  topo-2s4n-cpu.xml        the same CPUs, no PCI device at all
  topo-2s2n-2nic-gpu.xml   2 packages, one NUMA node each, 4 cores each; NIC eth0 on package 0's
                           host bridge, NIC eth1 (+ RDMA mlx5_1) and one GPU behind a PCIe
                           switch on package 1's
  topo-laptop.xml          1 package, 1 NUMA node, 4 cores, a NIC wlan0 and a GPU
  topo-2s-2pu.xml          2 packages of one single-PU core each: PU 0 on package 0, PU 1 on 1,
                           so the 2 CPUs of a small test machine stand for two sockets
  topo-1s2n-2pu.xml        1 package of 2 NUMA nodes, one single-PU core each: PU 0 on node 0,
                           PU 1 on node 1 (the 2 CPUs stand for the NUMA nodes of one socket)
  topo-vm.xml              what a VM shows: one package of 2 cores, a NUMA node without memory
                           information, and a PCI tree without locality (the host bridge hangs
                           off the machine) holding one NIC eth0
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


class Gen:
    def __init__(self):
        self.gp = 0
        self.lines = []

    def gpi(self):
        self.gp += 1
        return self.gp


def mask(bits):
    v = 0
    for b in bits:
        v |= 1 << b
    return "0x%08x" % v if v < (1 << 32) else hex(v)


def cpuattrs(pus, nodes):
    c, n = mask(pus), mask(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def core_xml(g, ind, core, pus, node):
    out = ['%s<object type="L2Cache" os_index="%d" %s gp_index="%d" cache_size="1048576" depth="2" '
           'cache_linesize="64" cache_associativity="16" cache_type="0">' % (ind, core, cpuattrs(pus, [node]), g.gpi())]
    out.append('%s  <object type="Core" os_index="%d" %s gp_index="%d">' % (ind, core, cpuattrs(pus, [node]), g.gpi()))
    for p in pus:
        out.append('%s    <object type="PU" os_index="%d" %s gp_index="%d"/>' % (ind, p, cpuattrs([p], [node]), g.gpi()))
    out.append('%s  </object>' % ind)
    out.append('%s</object>' % ind)
    return out


def pci_xml(g, ind, bus, devices, switch):
    """A host bridge of bus `bus`; devices behind a PCIe switch when switch, else on the bridge.
    devices: (kind, names) with kind gpu or nic."""
    out = ['%s<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
           % (ind, g.gpi(), bus, bus + 1)]
    inner = ind + "  "
    if switch:
        out.append('%s<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" bridge_pci="0000:[%02x-%02x]" '
                   'pci_busid="0000:%02x:00.0" pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846">'
                   % (inner, g.gpi(), bus + 1, bus + 1, bus))
        inner += "  "
    for i, (kind, names) in enumerate(devices):
        busid = "0000:%02x:%02x.0" % (bus + 1 if switch else bus, i + 1)
        cls = "0302 [10de:20b0] [10de:1450] a1" if kind == "gpu" else "0207 [15b3:101b] [15b3:0007] 00"
        if kind == "nic" and names[0].startswith(("eth", "wlan", "en")):
            cls = "0200 [8086:1572] [8086:0000] 01"
        out.append('%s<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" pci_link_speed="15.753846">'
                   % (inner, g.gpi(), busid, cls))
        for name in names:
            ostype = {"gpu": 1, "nic": 3 if name.startswith("mlx") else 2}[kind]
            out.append('%s  <object type="OSDev" gp_index="%d" name="%s" osdev_type="%d"/>' % (inner, g.gpi(), name, ostype))
        out.append('%s</object>' % inner)
    if switch:
        out.append('%s</object>' % (ind + "  "))
    out.append('%s</object>' % ind)
    return out


def machine(g, packages, numa_per_pkg, cores_per_numa, pus_per_core, pci_of_numa, vm_bridge=None,
            interleave=False, numa_memory=True):
    """interleave: core c's PUs are c, c + ncores, ... (Linux's numbering of hyperthreads);
    else consecutive. numa_memory False: NUMA nodes without local_memory (no NUMA information)."""
    body = []
    core = node = 0
    ncores = packages * numa_per_pkg * cores_per_numa
    all_pus = ncores * pus_per_core
    all_nodes = packages * numa_per_pkg

    def pus_of(c):
        return [c + t * ncores for t in range(pus_per_core)] if interleave else list(range(c * pus_per_core, (c + 1) * pus_per_core))

    def pus_of_cores(first, count):
        return sorted(p for c in range(first, first + count) for p in pus_of(c))
    for p in range(packages):
        ppus = pus_of_cores(p * numa_per_pkg * cores_per_numa, numa_per_pkg * cores_per_numa)
        pnodes = list(range(p * numa_per_pkg, (p + 1) * numa_per_pkg))
        body.append('    <object type="Package" os_index="%d" %s gp_index="%d">' % (p, cpuattrs(ppus, pnodes), g.gpi()))
        for _ in range(numa_per_pkg):
            npus = pus_of_cores(core, cores_per_numa)
            ind = "      "
            if numa_per_pkg > 1:
                body.append('      <object type="Group" %s gp_index="%d" kind="1000" subkind="0">' % (cpuattrs(npus, [node]), g.gpi()))
                ind = "        "
            body.append('%s<object type="NUMANode" os_index="%d" %s gp_index="%d"%s/>'
                        % (ind, node, cpuattrs(npus, [node]), g.gpi(), ' local_memory="17179869184"' if numa_memory else ""))
            body.append('%s<object type="L3Cache" os_index="%d" %s gp_index="%d" cache_size="33554432" depth="3" '
                        'cache_linesize="64" cache_associativity="16" cache_type="0">' % (ind, node, cpuattrs(npus, [node]), g.gpi()))
            for _ in range(cores_per_numa):
                body += core_xml(g, ind + "  ", core, pus_of(core), node)
                core += 1
            body.append('%s</object>' % ind)
            if node in pci_of_numa:
                devices, switch = pci_of_numa[node]
                body += pci_xml(g, ind, 0x10 * (node + 1), devices, switch)
            if numa_per_pkg > 1:
                body.append('      </object>')
            node += 1
        body.append('    </object>')
    if vm_bridge is not None:
        body += pci_xml(g, "    ", 0, vm_bridge, False)
    head = ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">', '<topology version="2.0">',
            '  <object type="Machine" os_index="0" %s gp_index="%d">' % (cpuattrs(range(all_pus), range(all_nodes)), g.gpi()),
            '    <info name="Backend" value="weft-fixture"/>']
    return "\n".join(head + body + ['  </object>', '</topology>', ''])


def write(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)


def nic(i):
    return ("nic", ["eth%d" % i, "mlx5_%d" % i])


def gpu(i):
    return ("gpu", ["cuda%d" % i])


write("topo-2s4n-8gpu-4nic.xml", machine(Gen(), 2, 2, 4, 2, {
    n: ([gpu(2 * n), gpu(2 * n + 1), nic(n)], True) for n in range(4)}, interleave=True))
write("topo-2s4n-cpu.xml", machine(Gen(), 2, 2, 4, 2, {}))
write("topo-2s2n-2nic-gpu.xml", machine(Gen(), 2, 1, 4, 1, {
    0: ([("nic", ["eth0"])], False),
    1: ([("nic", ["eth1", "mlx5_1"]), gpu(0)], True)}))
write("topo-laptop.xml", machine(Gen(), 1, 1, 4, 2, {0: ([("nic", ["wlan0"]), gpu(0)], False)}))
write("topo-vm.xml", machine(Gen(), 1, 1, 2, 1, {}, vm_bridge=[("nic", ["eth0"])], numa_memory=False))
write("topo-2s-2pu.xml", machine(Gen(), 2, 1, 1, 1, {0: ([("nic", ["eth0"])], False), 1: ([("nic", ["eth1"])], False)}))
write("topo-1s2n-2pu.xml", machine(Gen(), 1, 2, 1, 1, {}))
