# Sourced by perf/compare_args.sh (and tests/mp/test_perf_flags.c): median_csv.

# median_csv OUT IN...: OUT gets the header of the first IN and, for every size, the row whose
# out-of-place time is the median of the INs' rows of that size. Medians here and in
# compare_p2p.sh and compare_modes.sh are the mean of the two middle values for an even count;
# for a row, that is the lower middle row (by out-of-place time) with each placement's time the
# mean of the two middle rows' times and its algbw/busbw scaled to that time (bandwidth is size
# over time), and #wrong the larger of the two. An odd count gives a real measurement, whole.
median_csv() {
    out=$1
    shift
    awk -F, -v OFS=, 'FNR == 1 { if (!hdr) hdr = $0; next }
        { k = $3 + 0; n[k]++; row[k, n[k]] = $0; t[k, n[k]] = $8 + 0; if (!(k in seen)) { seen[k] = 1; order[++ns] = k } }
        END {
            print hdr
            for (i = 1; i <= ns; i++) {
                k = order[i]; m = n[k]
                for (a = 1; a <= m; a++) idx[a] = a
                for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++)
                    if (t[k, idx[b]] < t[k, idx[a]]) { x = idx[a]; idx[a] = idx[b]; idx[b] = x }
                if (m % 2) { print row[k, idx[(m + 1) / 2]]; continue }
                split(row[k, idx[m / 2]], lo, ","); split(row[k, idx[m / 2 + 1]], hi, ",")
                for (c = 8; c <= 12; c += 4) { # time, algbw, busbw, #wrong of each placement
                    tm = (lo[c] + hi[c]) / 2
                    if (tm > 0) { lo[c + 1] = sprintf("%.6f", lo[c + 1] * lo[c] / tm); lo[c + 2] = sprintf("%.6f", lo[c + 2] * lo[c] / tm) }
                    lo[c] = sprintf("%.3f", tm)
                    if (hi[c + 3] + 0 > lo[c + 3] + 0) lo[c + 3] = hi[c + 3]
                }
                line = lo[1]; for (c = 2; c <= 15; c++) line = line OFS lo[c]
                print line
            }
        }' "$@" >"$out"
}
