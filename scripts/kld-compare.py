#!/usr/bin/env python3
"""kld-compare.py: compares two llama-perplexity logits files (--kl-divergence-base, written
by llama-perplexity or `cpulm perplexity`) position by position.

usage: scripts/kld-compare.py BASE.kld OTHER.kld [--every N]

Prints each file's perplexity over the scored positions, the mean and largest KL(base ||
other), how often the top token agrees, and the mean |difference| of the target token's
log-probability by ranges of positions (where two engines part, e.g. past a sliding
window). Both files must hold the same tokens. Pure Python (no numpy): ~1 s per 1M codes.
"""
import array, math, struct, sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"_logits_":
        sys.exit("%s: not a llama-perplexity logits file" % path)
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", data, 8)
    off = 20 + 4 * n_ctx * n_chunk
    tokens = list(struct.unpack_from("<%di" % (n_ctx * n_chunk), data, 20))
    nv = 2 * ((n_vocab + 1) // 2) + 4
    return n_ctx, n_vocab, n_chunk, tokens, data, off, nv


def row(data, off, nv, n_vocab):
    step, lo = struct.unpack_from("<ff", data, off)
    q = array.array("H")
    q.frombytes(data[off + 8:off + 8 + 2 * n_vocab])
    return step, lo, q


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    every = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--every" else 64
    a, b = read(sys.argv[1]), read(sys.argv[2])
    if a[:4] != b[:4]:
        sys.exit("the files hold different chunks, vocabularies or tokens")
    n_ctx, n_vocab, n_chunk, tokens = a[:4]
    first = n_ctx // 2
    nll = [0.0, 0.0]
    kls, agree, buckets = [], 0, {}
    offa, offb = a[5], b[5]
    for c in range(n_chunk):
        for j in range(first, n_ctx - 1):
            sa, la, qa = row(a[4], offa, a[6], n_vocab)
            sb, lb, qb = row(b[4], offb, b[6], n_vocab)
            offa += 2 * a[6]
            offb += 2 * b[6]
            tok = tokens[c * n_ctx + j + 1]
            pa, pb = la + sa * qa[tok], lb + sb * qb[tok]
            nll[0] -= pa
            nll[1] -= pb
            kl = 0.0
            for i in range(n_vocab):
                x = la + sa * qa[i]
                if x > -16.0:
                    kl += math.exp(x) * (x - (lb + sb * qb[i]))
            kls.append((kl, c, j))
            agree += max(range(n_vocab), key=qa.__getitem__) == max(range(n_vocab),
                                                                  key=qb.__getitem__)
            k = (j // every) * every
            s = buckets.setdefault(k, [0.0, 0.0, 0])
            s[0] += abs(pa - pb)
            s[1] += kl
            s[2] += 1
    n = len(kls)
    print("PPL %s %.4f  %s %.4f  (%.3f%% apart)" % (
        sys.argv[1], math.exp(nll[0] / n), sys.argv[2], math.exp(nll[1] / n),
        100 * (math.exp((nll[1] - nll[0]) / n) - 1)))
    kls.sort()
    print("KL mean %.6f  median %.6f  max %.6f (chunk %d pos %d)  same top %.1f%%" % (
        sum(k for k, _, _ in kls) / n, kls[n // 2][0], kls[-1][0], kls[-1][1], kls[-1][2],
        100.0 * agree / n))
    print("  largest: " + ", ".join("pos %d %.4f" % (j, k) for k, _, j in kls[-8:][::-1]))
    for k in sorted(buckets):
        s = buckets[k]
        print("  pos %4d-%4d: mean |dlogp(target)| %.5f  mean KL %.6f" % (
            k, k + every - 1, s[0] / s[2], s[1] / s[2]))


if __name__ == "__main__":
    main()
