import faulthandler, sys
faulthandler.enable()
import torch, torch_dsmhist
x = torch.zeros(10, dtype=torch.long, device="cuda")
print("plan", torch_dsmhist.plan(100), flush=True)
try:
    torch_dsmhist.histogram(x, 0)
except ValueError as e:
    print("arg error ok:", e, flush=True)
try:
    torch_dsmhist.histogram(x.cpu(), 0)
except ValueError as e:
    print("cpu arg error ok:", e, flush=True)
try:
    with torch_dsmhist.force_tier("shared"):
        torch_dsmhist.histogram(x, 10**6)
except ValueError as e:
    print("plan error ok:", e, flush=True)
