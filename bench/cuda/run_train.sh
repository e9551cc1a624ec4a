#!/bin/bash
# On the GPU machine, after bench/cuda/stage.sh (which stages the corpus too):
#   1. `loom train examples/gpt-cuda.yaml` (device: cuda, bf16) end to end;
#   2. `loom run` of a small device: cuda job (coordinator + agent + one worker
#      rank, NCCL as the CUDA backend, world size 1), end to end, saving a
#      checkpoint every 10 steps (at least one must be there at the end);
#   3. checkpoints through `loom train` (f32): 8 steps on cuda saving at 4 and
#      8; the step-4 checkpoint resumed on cuda and, in another folder, on the
#      cpu. Passes when both resume at step 5 and their losses at steps 5..8
#      are within 1e-5 (cuda) and 1e-4 (cpu, the cuda-vs-cpu parity bound)
#      relative of the uninterrupted run's; prints whether the cuda resume's
#      step-8 checkpoint is bitwise the uninterrupted one's (separate
#      processes: the GEMM autotuner may pick other algorithms in each).
#   4. `loom run` of the job of 2. with a parallel layout whose ranks share
#      the GPU (cuda:gloo): dp=2 (--ranks-per-gpu 2) and tp=2 x dp=2
#      (--ranks-per-gpu 4), end to end (worker GPU pick, device mesh, the
#      CUDA trainer, a checkpoint); with part 2 run too, their losses at every
#      logged step within 2e-2 relative of its world-1 run's (bf16: the
#      one-rank CUDA-against-CPU bound of cuda_executor_gpu_check).
#   device tool: run(command="bash bench/cuda/run_train.sh", carry=[".device/gpu"])
# Env: TRAIN_STEPS (the yaml's steps unless set), RUN_STEPS (loom run: 100),
#      PARTS ("train run ckpt parallel": which of the four).
set -u
. "$(dirname "$0")/device_env.sh"
Dabs=$(cd "$D" && pwd)
corpus=$Dabs/data/fortunes
bin=$Dabs/bin/loom
cd /tmp
status=0
parts=" ${PARTS:-train run ckpt parallel} "
if [[ "$parts" == *" train "* ]]; then
  sed "s|/usr/share/games/fortunes|$corpus|" "$OLDPWD/examples/gpt-cuda.yaml" > /tmp/loom_gpt_cuda.yaml
  timeout 400 "$bin" train /tmp/loom_gpt_cuda.yaml ${TRAIN_STEPS:+--steps "$TRAIN_STEPS"} 2>&1 | tee "$O/loom_train_cuda.txt"
  s=${PIPESTATUS[0]}
  echo "run_train (loom train): $([ "$s" = 0 ] && echo PASS || echo "FAILED (exit $s)")"
  [ "$s" = 0 ] || status=1
fi
run_yaml() {  # the small loom run job: name, checkpoint folder
  cat <<YAML
name: $1
model: {family: gpt, n_layer: 2, n_head: 4, d_model: 128, seq_len: 128, vocab: 256}
train: {batch_size: 16, steps: 100, lr: 0.003, eval_every: 100, eval_batches: 2, sample_tokens: 64, precision: bf16}
data: {path: $corpus, format: text}
device: cuda
checkpoint: {every: 10, keep: 2, dir: $2}
YAML
}
if [[ "$parts" == *" run "* ]]; then
  run_yaml gpt-cuda-run /tmp/loom_run_cuda_ck > /tmp/loom_run_cuda.yaml
  rm -rf /tmp/loom_run_cuda_ck
  timeout 300 "$bin" run /tmp/loom_run_cuda.yaml --steps "${RUN_STEPS:-100}" --run-dir /tmp/loom_run_cuda 2>&1 |
    tee "$O/loom_run_cuda.txt" | grep -Ev '^step [0-9]+/' | tail -25
  s=${PIPESTATUS[0]}
  grep -q "CUDA collectives through nccl" "$O/loom_run_cuda.txt" || s=${s/#0/1}
  if [ "${RUN_STEPS:-100}" -ge 10 ] && ! ls -d /tmp/loom_run_cuda_ck/step_* > /dev/null 2>&1; then
    echo "loom run: no checkpoint in /tmp/loom_run_cuda_ck"
    s=${s/#0/1}
  fi
  echo "run_train (loom run, NCCL world 1): $([ "$s" = 0 ] && echo PASS || echo "FAILED (exit $s)")"
  [ "$s" = 0 ] || status=1
fi
if [[ "$parts" == *" ckpt "* ]]; then
  ck=/tmp/loom_ckpt_cuda
  rm -rf "$ck"
  job() {  # name, device
    cat > "$ck/$1.yaml" <<YAML
model: {family: gpt, n_layer: 2, n_head: 2, d_model: 64, seq_len: 32, vocab: 256}
train: {batch_size: 4, steps: 8, lr: 0.003, eval_every: 8, eval_batches: 1, sample_tokens: 0, log_every: 1}
data: {path: $corpus, format: text}
device: $2
checkpoint: {every: 4, keep: 2, dir: $ck/$1/ck}
run_dir: $ck/$1/run
YAML
    timeout 120 "$bin" train "$ck/$1.yaml" > "$O/loom_ckpt_$1.txt" 2>&1
  }
  mkdir -p "$ck/resume/ck" "$ck/cpu/ck"
  job full cuda
  s=$?
  cp -r "$ck/full/ck/step_000000000004" "$ck/resume/ck/" && cp -r "$ck/full/ck/step_000000000004" "$ck/cpu/ck/" || s=1
  job resume cuda || s=1
  job cpu cpu || s=1
  for r in resume cpu; do grep -q "resuming at step 5" "$O/loom_ckpt_$r.txt" || { echo "$r: did not resume at step 5"; s=1; }; done
  "$PY" - "$ck" <<'PY' || s=1
import json, sys
ck = sys.argv[1]
def losses(name):
    out = {}
    for line in open(f"{ck}/{name}/run/metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r: out[r["step"]] = r["loss"]
    return out
full = losses("full")
ok = True
for name, bound in (("resume", 1e-5), ("cpu", 1e-4)):
    got = losses(name)
    gaps = [abs(got[s] - full[s]) / abs(full[s]) for s in range(5, 9)]
    worst = max(gaps)
    print(f"{name}: losses at steps 5..8 {[got[s] for s in range(5, 9)]}, worst relative gap {worst:.3e} (bound {bound:.0e})")
    ok &= worst < bound
sys.exit(0 if ok else 1)
PY
  if cmp -s "$ck/full/ck/step_000000000008/rank00000.safetensors" "$ck/resume/ck/step_000000000008/rank00000.safetensors"; then
    echo "cuda resume: step-8 checkpoint bitwise equal to the uninterrupted run's"
  else
    echo "cuda resume: step-8 checkpoint differs from the uninterrupted run's"
  fi
  echo "run_train (checkpoints, cuda resume and cpu resume): $([ "$s" = 0 ] && echo PASS || echo "FAILED (logs $O/loom_ckpt_*.txt)")"
  [ "$s" = 0 ] || status=1
fi
if [[ "$parts" == *" parallel "* ]]; then
  for layout in "dp2:--dp 2 --ranks-per-gpu 2" "tp2xdp2:--dp 2 --tp 2 --ranks-per-gpu 4"; do
    name=${layout%%:*}
    flags=${layout#*:}
    rm -rf "/tmp/loom_run_cuda_ck_$name" "/tmp/loom_run_cuda_$name"
    run_yaml "gpt-cuda-$name" "/tmp/loom_run_cuda_ck_$name" > "/tmp/loom_run_cuda_$name.yaml"
    # shellcheck disable=SC2086
    timeout 300 "$bin" run "/tmp/loom_run_cuda_$name.yaml" $flags --steps "${RUN_STEPS:-100}" \
      --run-dir "/tmp/loom_run_cuda_$name" 2>&1 | tee "$O/loom_run_cuda_$name.txt" | grep -Ev '^step [0-9]+/' | tail -25
    s=${PIPESTATUS[0]}
    grep -q "CUDA collectives through cuda:gloo" "$O/loom_run_cuda_$name.txt" || s=${s/#0/1}
    if [ "${RUN_STEPS:-100}" -ge 10 ] && ! ls -d "/tmp/loom_run_cuda_ck_$name"/step_* > /dev/null 2>&1; then
      echo "loom run $name: no checkpoint in /tmp/loom_run_cuda_ck_$name"
      s=${s/#0/1}
    fi
    if [ -f /tmp/loom_run_cuda/metrics.jsonl ]; then
      "$PY" - /tmp/loom_run_cuda/metrics.jsonl "/tmp/loom_run_cuda_$name/metrics.jsonl" "$name" <<'PY' || s=${s/#0/1}
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
one, par = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(one) & set(par))
gaps = [abs(par[s] - one[s]) / abs(one[s]) for s in steps]
for s, g in zip(steps, gaps):
    print(f"  step {s}: world 1 {one[s]:.6f}  {sys.argv[3]} {par[s]:.6f}  rel gap {g:.3e}")
worst = max(gaps) if gaps else float("nan")
print(f"{sys.argv[3]}: {len(steps)} logged steps, worst relative gap to the world-1 run {worst:.3e} (bound 2e-2)")
sys.exit(0 if steps and worst <= 2e-2 else 1)
PY
    fi
    echo "run_train (loom run, $name sharing the GPU, cuda:gloo): $([ "$s" = 0 ] && echo PASS || echo "FAILED (exit $s)")"
    [ "$s" = 0 ] || status=1
  done
fi
exit $status
