/*
 * scalar.c - CPU twins of the device scalar ops (core/ops/scalar.c).
 */
#include "cpu_ops.h"

int mg_cpu_reciprocal_scale(const float *x, double s, float *y)
{
	double c = x[0] < 1 ? 1 : x[0];
	y[0] = (float)(s / c);
	return 0;
}
