"""Per-kernel digest of an Nsight Compute source page (ncu --page source --print-source sass --csv): executed
warp instructions by opcode, warp-stall reasons over all samples, and the SASS lines with the most stall
samples. Usage: python3 benchmarks/ncu_source_summary.py source.csv [kernel-index ...] [--top N]"""
import collections
import csv
import sys


def split_kernels(path):
    blocks, cur = [], None
    for line in open(path):
        if line.startswith('"Kernel Name"'):
            cur = [line]
            blocks.append(cur)
        elif cur is not None:
            cur.append(line)
    return blocks


def digest(block, top):
    name = next(csv.reader([block[0]]))[1]
    rows = list(csv.reader(block[1:]))
    h = rows[0]
    ix = {k: i for i, k in enumerate(h)}
    rows = [r for r in rows[1:] if len(r) == len(h)]
    stall_cols = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
    by_op, stalls, lines, samples = collections.Counter(), collections.Counter(), [], 0
    for n, r in enumerate(rows):
        src = r[ix["Source"]].strip()
        parts = src.split()
        op = (parts[1] if parts and parts[0].startswith("@") and len(parts) > 1 else (parts[0] if parts else ""))
        by_op[op.split(".")[0]] += int(r[ix["Instructions Executed"]] or 0)
        s = int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
        samples += s
        per = {c[6:]: int(r[ix[c]] or 0) for c in stall_cols}
        stalls.update(per)
        lines.append((s, n, src, {k: v for k, v in per.items() if s and v > 0.15 * s}))
    short = name.split("(")[0].replace("void ", "")
    if "Cfg<" in name:
        short = "ours Cfg<" + name.split("Cfg<")[1].split(">")[0] + ">"
    total = sum(by_op.values())
    print(f"## {short}\n\nwarp instructions executed: {total:,}; stall samples: {samples:,}\n")
    print("- by opcode: " + ", ".join(f"{op} {c / total:.1%}" for op, c in by_op.most_common(12)))
    print("- stall reasons (share of samples): " +
          ", ".join(f"{k} {v / max(samples, 1):.1%}" for k, v in stalls.most_common(10)))
    print(f"- top {top} lines by samples:\n")
    print("| line | samples | SASS | main reasons |\n|---:|---:|---|---|")
    for s, n, src, d in sorted(lines, key=lambda x: -x[0])[:top]:
        print(f"| {n} | {s / max(samples, 1):.1%} | `{src[:70]}` | {', '.join(f'{k} {v}' for k, v in d.items())} |")
    print()


def main():
    args = sys.argv[1:]
    top = 12
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    blocks = split_kernels(args[0])
    for i in ([int(x) for x in args[1:]] or range(len(blocks))):
        digest(blocks[i], top)


if __name__ == "__main__":
    main()
