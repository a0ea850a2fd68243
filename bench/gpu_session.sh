#!/usr/bin/env bash
# One short device session (an H100 lent for a few minutes; ~8 minutes of work): the GPU's measured roofs with
# `dlscope characterize`, and `dlscope profile` captures of a small training step in FP32 and AMP, eager and
# CUDA graphs, DataLoader workers 0 and 4, each with its summary and a roofline against the measured roofs.
#
#   OUT=/some/empty/dir bash bench/gpu_session.sh        (from the repository root; docs/roofline.md)
#
# PYTHON: an interpreter with torch (CUDA build) and dlscope's dependencies (default: python3). Every step has
# its own time limit and its exit status goes to $OUT/session.log, so one failure does not end the session.
set -u
OUT=${OUT:?set OUT to the folder to write into}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
LOG="$OUT/session.log"
: > "$LOG"

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log its status and wall time
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
    local rc=$?
    echo "$name rc=$rc wall_s=$((SECONDS - t0))" | tee -a "$LOG"
    return $rc
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, \
torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'"

# Measured roofs first without the compiled elementwise kernels (GEMMs per precision, L1 / L2 / HBM bandwidth:
# under a minute), so the captures' rooflines have roofs even if the Triton compiles run long; those come last.
step characterize 120 "$PY" -m dlscope characterize --no-elementwise -o "$OUT/h100.json"

for precision in fp32 amp; do
    for mode in eager graphs; do
        for workers in 0 4; do
            name="${precision}_${mode}_w${workers}"
            flags=(--workers "$workers")
            [ "$precision" = amp ] && flags+=(--amp)
            [ "$mode" = graphs ] && flags+=(--cuda-graphs)
            step "profile_$name" 90 "$PY" -m dlscope profile -o "$OUT/$name.sqlite" --force \
                --profile-name "$name" --batch-size 64 --sample-unit images -- \
                "$PY" bench/gpu_train_step.py --steps 16 "${flags[@]}" &&
            step "summary_$name" 30 "$PY" -m dlscope summary --json "$OUT/$name.sqlite" &&
                cp "$OUT/summary_$name.out" "$OUT/$name.summary.json"
            if [ -f "$OUT/h100.json" ] && [ -f "$OUT/$name.sqlite" ]; then
                step "roofline_$name" 30 "$PY" -m dlscope report "$OUT/$name.sqlite" --reports roofline \
                    --gpu-spec "$OUT/h100.json" -o "$OUT/roofline_$name"
            fi
        done
    done
done
# FMA / no-FMA FP32 and FP64, CUDA-core FP16 / BF16: torch.compile'd chains (Triton), a few compiles.
step characterize_elementwise 180 "$PY" -m dlscope characterize -o "$OUT/h100_full.json"
echo "done: $(grep -c 'rc=0' "$LOG") of $(wc -l < "$LOG") steps succeeded" | tee -a "$LOG"
