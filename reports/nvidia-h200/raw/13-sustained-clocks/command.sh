# The device command of this call, verbatim (run(..., timeout_s=100), the same warm machine
# and tree as 12-…, right after it): ours at Gemma2-2B, β 0.1, softcap 30, 30 calls with a
# sync and 0.3 s of idle after each, then 150 back to back; CUDA events around each call;
# nvidia-smi sampled every ~0.1 s throughout (smi.csv: timestamp, SM clock, memory clock,
# power, temperature, active throttle reasons; 0x4 is the software power cap).
export PYTHONPATH=/tmp/pkg; mkdir -p /tmp/pkg; ln -sfn $PWD/perfsuite /tmp/pkg/perfsuite
( while :; do nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader >> $OUT/smi.csv; sleep 0.1; done ) & S=$!
timeout 80 python3 - > $OUT/sustained.jsonl 2> $OUT/sustained.err <<'PY'
import torch, json, time
from perfsuite.kernels import linear_cross_entropy as lce
torch.manual_seed(0)
N,V,D=8192,256000,2304
e=torch.randn(N,D,device='cuda').bfloat16().requires_grad_(); c=(torch.randn(V,D,device='cuda')/D**.5).bfloat16().requires_grad_(); t=torch.randint(0,V,(N,),device='cuda')
def step():
  e.grad=c.grad=None; lce(e,c,t,label_smoothing=0.1,softcap=30.0).backward()
step(); torch.cuda.synchronize(); time.sleep(2)
for mode, n in (('idle-gaps', 30), ('back-to-back', 150)):
  ev=[]
  for i in range(n):
    a=torch.cuda.Event(enable_timing=True); b=torch.cuda.Event(enable_timing=True)
    a.record(); step(); b.record(); ev.append((a,b,time.time()))
    if mode=='idle-gaps': torch.cuda.synchronize(); time.sleep(0.3)
  torch.cuda.synchronize()
  for a,b,w in ev: print(json.dumps(dict(mode=mode, ms=a.elapsed_time(b), wall=w)))
  time.sleep(2)
PY
echo rc=$?; kill $S  # (then a one-line summary of sustained.jsonl; sustained.err came back empty)
