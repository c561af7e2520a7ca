#!/usr/bin/env python3
"""arm-mca-generic-attnq.py: the baseline of docs/PERFORMANCE.md's ARM
quantized-KV figures (docs/perf-log/2026-12-01-arm-llvm-mca-quantized-kv.md): the dynamic
instruction trace of one key x 4 query rows of the generic
attn_qscores or attn_qpv (Q8_0 cache, head size 64) in gcc 12's aarch64 -O2 assembly of
src/kernels/generic/attn.c (its attn_q* ops), for llvm-mca (which models a straight
instruction stream, not control flow): each loop body repeated by its trip count, the calls to block_quants
replaced by the trace of its Q8_0 path. The labels are gcc 12's for this file; the trace is
checked against the work it must hold (256 sign-extending byte loads, 64 vector multiply-adds)
and the script fails when the assembly no longer matches.

Usage: aarch64-linux-gnu-gcc -O2 -DNDEBUG -ffp-contract=off -std=c11 -Isrc -S \\
           src/kernels/generic/attn.c -o /tmp/attn_q.s
       scripts/arm-mca-generic-attnq.py /tmp/attn_q.s scores > /tmp/gen_scores.s   (or pv)
       llvm-mca-22 -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -iterations=20 /tmp/gen_scores.s
(Total Cycles / 20 = cycles per key x 4 rows.)"""
import re
import sys


def parse(path):
    blocks, cur = {}, None
    for line in open(path).read().split("\n"):
        m = re.match(r"^([.A-Za-z_$][^ \t:]*):", line)
        if m:
            cur = m.group(1)
            blocks[cur] = []
        elif cur is not None and not re.match(r"^\s*(\.|#|//|$)", line):
            blocks[cur].append(line)
    return blocks


def main():
    blocks = parse(sys.argv[1])
    kind = sys.argv[2]

    def upto(lab, target, skip=0):
        """block lab's instructions from skip through its first branch to target"""
        out = []
        for ins in blocks[lab][skip:]:
            out.append(ins)
            pat = r"^(b|b\.\w+|bne|blt|beq|cbz|cbnz|bl)\s(.*[\s,])?" + re.escape(target) + "$"
            if re.search(pat, ins.strip()):
                return out
        sys.exit("arm-mca-generic-attnq: no branch to %s in %s (not gcc 12's code?)" % (target, lab))

    def after(lab, target):
        return blocks[lab][len(upto(lab, target)):]

    try:
        # block_quants, Q8_0 path: entry test, 32 x the byte loop, the f16 scale (normal)
        loop = upto(".L25", ".L25")
        bq = blocks["block_quants"][:2] + blocks[".L36"] + loop * 32
        bq += upto(".L25", ".L26", len(loop)) + blocks[".L26"]
        t = []
        for _ in range(4):  # rows
            if kind == "scores":  # the int8 query (since 2026-12-05): gcc vectorizes the dot
                t += blocks[".L80"]
                for _ in range(2):  # blocks of 32: two passes of 16 elements, then the float step
                    t += upto(".L79", "block_quants") + bq + after(".L79", "block_quants")
                    t += blocks[".L78"] + upto(".L78", ".L89") + blocks[".L89"]
                t += blocks[".L77"]
            else:
                t += blocks[".L116"]
                for _ in range(2):
                    t += upto(".L115", "block_quants") + bq + after(".L115", "block_quants")
                    t += upto(".L114", ".L114") * 8 + after(".L114", ".L114")
    except KeyError as e:
        sys.exit("arm-mca-generic-attnq: label %s missing (not gcc 12's code?)" % e)
    ops = [ins.split()[0] for ins in t]
    mla = "mla" if kind == "scores" else "fmla"
    if ops.count("ldrsb") != 256 or ops.count(mla) != 64:
        sys.exit("arm-mca-generic-attnq: the trace holds %d ldrsb and %d %s, want 256 and 64"
                 % (ops.count("ldrsb"), ops.count(mla), mla))
    print("\n".join(t))


main()
