# loss_diff.awk - two runs' steps.csv, step by step: prints "STEPS_A
# STEPS_B WORST_ABS WORST_REL", the largest |loss_b - loss_a| and that
# difference over max(|loss_a|, 1), over the steps both ran. The callers
# (tests/gpu/scale_7b_check.sh, tests/strategies/gpu_equivalence_llm.sh)
# each hold the result to their own limit.
#   awk -F, -f loss_diff.awk A/steps.csv B/steps.csv
FNR == 1 { f++; next }
f == 1 { a[FNR] = $3; na++ }
f == 2 {
	nb++
	if (!(FNR in a))
		next
	d = $3 - a[FNR]
	if (d < 0) d = -d
	s = a[FNR] < 0 ? -a[FNR] : a[FNR]
	if (s < 1) s = 1
	if (d > wa) wa = d
	if (d / s > wr) wr = d / s
}
END { printf "%d %d %.6g %.6g\n", na, nb, wa, wr }
