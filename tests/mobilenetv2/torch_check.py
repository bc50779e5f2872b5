# torch_check.py - cross-check of mgrun's mobilenetv2 against torchvision.
#
# Not a ctest test (this machine has no PyTorch); scripts/gpu.sh
# torch_check runs it on the GPU machine (also in `all`). On a machine
# with torch and torchvision:
#   build/tests/mobilenetv2/test_mobilenetv2 build/plugins/libmg_mobilenetv2.so \
#       dump step.txt && gzip step.txt
#   python3 tests/mobilenetv2/torch_check.py step.txt.gz
# The dump is one fp64 training step (width 0.25, stride-1 stem, batch 3 of
# 1x32x32, no dropout) with parameters under torchvision's state_dict names;
# this script loads them into torchvision.models.mobilenet_v2 (first conv
# replaced by a 1-channel stride-1 one), runs the same step and prints the
# differences, and asserts them (exit status 1 and a FAIL line): no tensor
# missing or extra, train and eval loss within 1e-12 relative, gradients
# (normwise) and running statistics within 1e-8, the parameter counts the
# C test asserts. Measured 2026-11-22 (torch 2.11, torchvision 0.26): train
# loss rel 9.6e-15, gradients normwise <= 1.7e-10, eval loss rel 2.6e-16.
import gzip, sys

failed = []


def check(ok, what):
    """Record a failed comparison (all are printed, then the exit)."""
    if not ok:
        failed.append(what)
        print("FAIL:", what, flush=True)
import torch, torch.nn as nn, torchvision
torch.set_default_dtype(torch.float64)
T = {}
with (gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt") as f:
    lines = f.read().split("\n")
i = 0
while i < len(lines):
    if not lines[i].startswith("tensor "):
        i += 1; continue
    _, name, n = lines[i].split(); n = int(n)
    T[name] = torch.tensor([float(v) for v in lines[i+1:i+1+n]])
    i += 1 + n
m = torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25, dropout=0.0)
m.features[0][0] = nn.Conv2d(1, m.features[0][0].out_channels, 3, 1, 1, bias=False)
m = m.double()
sd = m.state_dict()
missing = []
for k, v in sd.items():
    if k.endswith("num_batches_tracked"): continue
    if k not in T: missing.append(k); continue
    sd[k] = T[k].reshape(v.shape)
extra = [k for k in T if "/" not in k and k not in sd and k not in ("input", "labels", "grad_scale")]
print("missing in dump:", missing, "extra in dump:", extra)
check(not missing and not extra, f"tensors missing {missing} / extra {extra}")
m.load_state_dict(sd)
x = T["input"].reshape(3, 1, 32, 32)
y = T["labels"].long()
m.train()
logits = m(x)
loss = nn.functional.cross_entropy(logits, y, reduction="sum")
scale = T["grad_scale"].item()
(loss * scale).backward()
rel = abs(loss.item() - T["loss/train"].item()) / loss.item()
print("train loss torch %.15g mgrun %.15g rel %.3g" % (loss.item(), T["loss/train"].item(), rel))
check(rel <= 1e-12, f"train loss relative error {rel:.3g} > 1e-12")
worst = 0; wname = ""
gmax = max(p.grad.abs().max().item() for p in m.parameters())
for k, p in m.named_parameters():
    g = T["grad/" + k].reshape(p.shape)
    e = ((g - p.grad).norm() / (p.grad.norm() + 1e-6 * gmax)).item()
    if e > worst: worst, wname = e, k
print("gradients: worst normwise relative error %.3g (%s) over %d tensors" % (worst, wname, len(list(m.parameters()))))
check(worst <= 1e-8, f"gradient {wname}: normwise relative error {worst:.3g} > 1e-8")
bw = 0; bname = ""
for k, b in m.named_buffers():
    if k.endswith("num_batches_tracked"): continue
    a = T["after/" + k].reshape(b.shape)
    # Floor 1e-6: some batch means are exactly zero in exact arithmetic
    # (BN outputs feed those convs), leaving only rounding noise.
    e = ((a - b).abs().max() / (b.abs().max() + 1e-6)).item()
    if e > bw: bw, bname = e, k
print("running stats after the step: worst relative error %.3g (%s)" % (bw, bname))
check(bw <= 1e-8, f"running statistic {bname}: relative error {bw:.3g} > 1e-8")
m.eval()
with torch.no_grad():
    le = nn.functional.cross_entropy(m(x), y, reduction="sum").item()
rel = abs(le - T["loss/eval"].item()) / le
print("eval loss torch %.15g mgrun %.15g rel %.3g" % (le, T["loss/eval"].item(), rel))
check(rel <= 1e-12, f"eval loss relative error {rel:.3g} > 1e-12")
# Trainable-parameter counts the C test (params) asserts.
tv = torchvision.models.mobilenet_v2(num_classes=10)
tv.features[0][0] = nn.Conv2d(1, 32, 3, 2, 1, bias=False)
n1 = sum(p.numel() for p in tv.parameters())
print("parameters, 1 channel, 10 classes, width 1:", n1)
check(n1 == 2236106, f"torchvision counts {n1} parameters, the C test 2236106")
tv = torchvision.models.mobilenet_v2(width_mult=1.4)
n14 = sum(p.numel() for p in tv.parameters())
print("parameters, 3 channels, 1000 classes, width 1.4:", n14)
check(n14 == 6108776, f"torchvision counts {n14} parameters, the C test 6108776")
print("FAILED: %d checks" % len(failed) if failed else "ok: torch_check")
sys.exit(1 if failed else 0)
