# The device command of this call, verbatim (run(..., timeout_s=230), no carry; the tree at
# commit 5132092, the commit passed in as commit.txt). The tool returns at most 8 files:
# smi.csv, steps.log and the kernels timer's trace (profile/) did not come back.
echo 51320920395048f441aca06009c4ab29123ada64 > $OUT/commit.txt
set -u; export PYTHONUNBUFFERED=1 COLUMNS=200; P=python3; mkdir -p /tmp/pkg && ln -sfn $PWD/perfsuite /tmp/pkg/perfsuite; export PYTHONPATH=/tmp/pkg; D=${DEV:-cuda}; S=${SHAPE:-gemma2-2b}
( while :; do nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader >> $OUT/smi.csv 2>&1 || break; sleep 0.2; done ) & SMI=$!
t(){ echo "$(date -u +%T) $*" >> $OUT/steps.log; }
t start; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/env.txt 2>&1; $P -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $OUT/env.txt 2>&1
t curve; timeout 70 $P .ci/ours_checks.py curve --device $D --budgets ${BUDGETS:-64,96,128,48} --beta 0.1 --samples 20 --warmup 3 --out $OUT/curve.jsonl > $OUT/curve.log 2>&1; t "curve rc=$?"
t cell; timeout 90 $P -m perfsuite run --device $D --shape $S --softcap --phases fwd+bwd --timeout 80 --beta 0,0.1 --methods ours,torch-compile --out $OUT/cell.json > $OUT/cell.log 2>&1; t "cell rc=$?"
t kernels; timeout 60 $P -m perfsuite run --device $D --shape $S --softcap --phases fwd+bwd --timeout 50 --beta 0.1 --methods ours --timer kernels --profile $OUT/profile --out $OUT/kernels.json > $OUT/kernels.log 2>&1; t "kernels rc=$?"
kill $SMI; t end; tail -n 4 $OUT/steps.log; grep -h "ours\|torch-compile" $OUT/cell.log | tail -4
