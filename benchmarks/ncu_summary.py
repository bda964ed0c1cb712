"""Summary table of an Nsight Compute details page (ncu --page details --csv), one row per profiled kernel:
grid, cluster, duration, SM clock, SM throughput (for these kernels: the tensor pipe), L2 and DRAM
throughput, issue-slot use. Usage: python3 benchmarks/ncu_summary.py details.csv [label ...]
(labels name the kernels in profile order; benchmarks/ncu_gemm_h200.py calls each implementation twice)."""
import csv
import sys

COLS = [("Grid Size", "grid"), ("Cluster Size", "cluster"), ("Duration", "µs"), ("SM Frequency", "GHz"),
        ("Compute (SM) Throughput", "SM (tensor) %"), ("L2 Cache Throughput", "L2 %"),
        ("DRAM Throughput", "DRAM %"), ("Issue Slots Busy", "issue %")]


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    labels = sys.argv[2:]
    h = rows[0]
    ix = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
    kernels = {}
    for r in rows[1:]:
        k = kernels.setdefault(r[ix["ID"]], {"name": r[ix["Kernel Name"]]})
        name, unit, val = r[ix["Metric Name"]], r[ix["Metric Unit"]], r[ix["Metric Value"]]
        if name == "Duration" and unit == "ms":
            val = f"{float(val) * 1e3:.2f}"
        k.setdefault(name, val)
    print("| # | kernel | " + " | ".join(c[1] for c in COLS) + " |")
    print("|---:|---|" + "---:|" * len(COLS))
    for i, (kid, k) in enumerate(sorted(kernels.items(), key=lambda kv: int(kv[0]))):
        name = k["name"]
        short = name.split("(")[0].replace("void ", "")
        if "Cfg<" in name:
            short = "ours Cfg<" + name.split("Cfg<")[1].split(">")[0] + ">"
        label = labels[i] + ": " if i < len(labels) else ""
        print(f"| {kid} | {label}`{short[:70]}` | " + " | ".join(k.get(c[0], "") for c in COLS) + " |")


if __name__ == "__main__":
    main()
