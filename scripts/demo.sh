#!/bin/sh
# demo.sh - the main job: set up, then train MobileNetV2 on Fashion-MNIST
# with conf/fashion_mnist.ini (on the CPU when there is no GPU) and print
# the test accuracy. Extra arguments go to mgrun (e.g. --set run.epochs=1).
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/core/mgrun -c conf/fashion_mnist.ini "$@"
