#!/bin/sh
# fake_python.sh - stands in for the PyTorch baselines in
# test_like4like.sh: one JSON line as torch_mbv2_l4l.py / torch_lora_l4l.py
# print, windows of 0.02 s per step and the driver's peak measured; its
# arguments kept beside its log (NAME.args) for the test to read. With
# MG_FAKE_TORCH_ERROR set, the error line and exit 1 of a baseline that
# could not run its configuration.
if [ -n "${MG_FAKE_TORCH_ERROR:-}" ]; then
	echo "{\"error\": \"$MG_FAKE_TORCH_ERROR\"}"
	exit 1
fi
echo '{"attention": "flash", "step_s": {"median": 0.02, "min": 0.015, "max": 0.03, "p10": 0.016, "p90": 0.028, "n": 5, "windows": [0.02]}, "torch_memory": {"max_reserved": 4194304, "max_allocated": 2097152}, "device_memory": {"method": "nvml-process", "driver_peak": 6291456, "at_start": 1048576, "samples": 9, "why": ""}}'
