#!/usr/bin/env bash
# One short device session (an H100/H200 lent for a few minutes): what only a GPU shows, in the order of what it
# is worth if the time runs out. Tensor Core verdicts of today's kernels against Nsight Compute's counters (the
# kernel zoo, bench/gpu_kernel_zoo.py, captured by `dlscope profile` and counted by ncu), the GPU's measured roofs
# (`dlscope characterize`), `dlscope profile` captures of a small training step in FP32 and AMP, eager and CUDA
# graphs, DataLoader workers 0 and 4 (raw traces kept), ncu counters of the training step, and last the
# compiled FMA / no-FMA roofs.
#
#   OUT=/some/empty/dir BUDGET=450 bash bench/gpu_session.sh        (from the repository root; docs/roofline.md)
#
# PYTHON: an interpreter with torch (CUDA build) and dlscope's dependencies (default: python3). BUDGET: seconds the
# whole session may take (0: no limit); a step gets at most what is left, and is skipped with under 15 s left.
# ONLY: a regular expression of the step names to run (default: all), for a second, shorter session.
# Everything is written under $WORK and packed into $OUT after every step, so what ran comes back even
# if the session is cut short. Each step's exit status and wall time go to session.log.
set -u
OUT=${OUT:?set OUT to the folder to write into}
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-0}
ONLY=${ONLY:-}
WORK=${WORK:-$(mktemp -d)}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT" "$WORK"
LOG="$WORK/session.log"
: > "$LOG"

pack() {  # logs and counters in one archive; databases and traces 4 to an archive, each well under the 16 MiB a
    # returned file may have (a 10-iteration LM trace is ~1 MB compressed); one to an archive once a long
    # capture ran (100 LM iterations: ~100 MB of JSON)
    local per_archive=4
    [ -n "$(find "$WORK" -name 'long_*' -print -quit)" ] && per_archive=1
    rm -f "$OUT"/*.tgz "$WORK"/.pack_*
    (shopt -s nullglob; cd "$WORK" && tar czf "$OUT/session.tgz" --exclude='*.sqlite' --exclude='*.pt.trace.json*' . &&
        find . -name '*.sqlite' | sort | split -l "$per_archive" - .pack_databases_ &&
        find . -name '*.pt.trace.json*' | sort | split -l "$per_archive" - .pack_traces_ &&
        for list in .pack_*; do tar czf "$OUT/${list#.pack_}.tgz" -T "$list"; done; rm -f .pack_*)
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit (cut to the budget left), log status and wall
    local name=$1 limit=$2
    shift 2
    if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
    if [ "$BUDGET" -gt 0 ]; then
        local left=$((BUDGET - SECONDS - 10))
        if [ "$left" -lt 15 ]; then echo "$name skipped (budget)" | tee -a "$LOG"; return 124; fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    local t0=$SECONDS
    timeout "$limit" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
    local rc=$?
    echo "$name rc=$rc wall_s=$((SECONDS - t0))" | tee -a "$LOG"
    pack
    return $rc
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch; print(torch.__version__, torch.version.cuda, \
torch.backends.cudnn.version(), torch.cuda.is_available(), \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'; $PY -m pip list 2>/dev/null"

# 1. The kernel zoo: a dlscope capture (the verdicts by kernel name), then ncu's counters of the same program.
step zoo_profile 90 "$PY" -m dlscope profile -o "$WORK/zoo.sqlite" --force --keep-trace --steps 2 \
    --profile-name kernel-zoo -- "$PY" bench/gpu_kernel_zoo.py --iters 5
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
    "$NCU" --query-metrics > "$WORK/ncu_query.txt" 2>&1
    metrics=""
    for base in sm__inst_executed sm__inst_executed_pipe_tensor sm__inst_executed_pipe_tensor_op_hmma \
        sm__inst_executed_pipe_tensor_op_imma sm__inst_executed_pipe_tensor_op_dmma \
        sm__inst_executed_pipe_tensor_op_gmma smsp__inst_executed_pipe_tensor_op_gmma \
        sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_op_hmma_cycles_active gpu__time_duration \
        sm__sass_thread_inst_executed_op_fadd_pred_on sm__sass_thread_inst_executed_op_fmul_pred_on \
        sm__sass_thread_inst_executed_op_ffma_pred_on sm__sass_thread_inst_executed_op_hadd_pred_on \
        sm__sass_thread_inst_executed_op_hmul_pred_on sm__sass_thread_inst_executed_op_hfma_pred_on \
        sm__sass_thread_inst_executed_op_dadd_pred_on sm__sass_thread_inst_executed_op_dmul_pred_on \
        sm__sass_thread_inst_executed_op_dfma_pred_on dram__bytes lts__t_bytes l1tex__t_bytes \
        sm__inst_executed_pipe_tensor_op_hmma_type_hfma2 sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active \
        sm__ops_path_tensor_src_fp16 sm__ops_path_tensor_src_bf16_dst_fp32 sm__ops_path_tensor_src_tf32_dst_fp32 \
        sm__ops_path_tensor_src_fp8 sm__ops_path_tensor_src_fp64 sm__ops_path_tensor_src_int8; do
        grep -q "^$base " "$WORK/ncu_query.txt" && metrics="$metrics${metrics:+,}$base.sum"
    done
    echo "$metrics" > "$WORK/ncu_metrics.txt"
    ncu() {  # ncu NAME LAUNCHES ARGS...: counters of a program, as the long CSV dlscope imports
        local name=$1 launches=$2
        shift 2
        step "ncu_$name" 150 "$NCU" --csv --print-units base --nvtx --clock-control none --metrics "$metrics" \
            --launch-count "$launches" --log-file "$WORK/$name.ncu.csv" "$@"
    }
    ncu zoo 400 "$PY" bench/gpu_kernel_zoo.py --iters 1
fi

# 2. Measured roofs (GEMMs per precision, L1 / L2 / HBM bandwidth), without the compiled elementwise kernels.
step characterize 120 "$PY" -m dlscope characterize --no-elementwise -o "$WORK/gpu.json"

# 3. The training step in 8 variants; summaries and rooflines can be made from the databases anywhere later.
for precision in fp32 amp; do
    for mode in eager graphs; do
        for workers in 0 4; do
            name="${precision}_${mode}_w${workers}"
            flags=(--workers "$workers")
            [ "$precision" = amp ] && flags+=(--amp)
            [ "$mode" = graphs ] && flags+=(--cuda-graphs)
            step "profile_$name" 90 "$PY" -m dlscope profile -o "$WORK/$name.sqlite" --force --keep-trace \
                --profile-name "$name" --batch-size 64 --sample-unit images -- \
                "$PY" bench/gpu_train_step.py --steps 16 "${flags[@]}"
        done
    done
done

# 3b. Long captures (ONLY='long_.*'): a real Hopper trace of a few hundred thousand events, for the import's speed
# and its kernel totals against HTA on a file nobody else recorded (bench/README.md). LONG_STEPS captured steps.
if [ -n "$ONLY" ]; then
    LONG_STEPS=${LONG_STEPS:-150}
    step long_lm_amp_eager 150 "$PY" -m dlscope profile -o "$WORK/long_lm_amp_eager.sqlite" --force --keep-trace \
        --steps "$LONG_STEPS" --profile-name long_lm_amp_eager --batch-size 16 --sample-unit sequences \
        -- "$PY" bench/gpu_train_step.py --model transformer --amp --steps $((LONG_STEPS + 4)) --batch-size 16
    step long_cnn_fp32_w4 150 "$PY" -m dlscope profile -o "$WORK/long_cnn_fp32_w4.sqlite" --force --keep-trace \
        --steps "$LONG_STEPS" --profile-name long_cnn_fp32_w4 --batch-size 64 --sample-unit images \
        -- "$PY" bench/gpu_train_step.py --workers 4 --steps $((LONG_STEPS + 4)) --batch-size 64
fi

# 4. Counters of the training step (eager, FP32 and AMP): the Tensor Core verdicts of cuDNN's and cuBLAS's kernels.
if [ -n "$NCU" ]; then
    ncu train_amp 300 "$PY" bench/gpu_train_step.py --steps 3 --amp
    ncu train_fp32 300 "$PY" bench/gpu_train_step.py --steps 3
fi

# 5. FMA / no-FMA FP32 and FP64, CUDA-core FP16 / BF16: torch.compile'd chains (Triton), a few compiles.
step characterize_elementwise 180 "$PY" -m dlscope characterize -o "$WORK/gpu_full.json"

# 6. What-if pairs on a GPU-bound step (ONLY='^(env|pair_.*)$'): the transformer LM at 64 sequences of 256 tokens,
# 10 captured iterations, each variant run twice so the run-to-run spread is measured beside the prediction error
# (docs/whatif.md, "GPU pairs"). Not in a full session: it is the second session's job.
if [ -n "$ONLY" ]; then
    for run in 1 2; do
        for variant in fp32_eager_w0 amp_eager_w0 fp32_graphs_w0 amp_graphs_w0 fp32_eager_w4 amp_eager_w4; do
            IFS=_ read -r precision mode workers <<< "$variant"
            flags=(--model transformer --workers "${workers#w}")
            [ "$precision" = amp ] && flags+=(--amp)
            [ "$mode" = graphs ] && flags+=(--cuda-graphs)
            step "pair_lm_${variant}_r$run" 60 "$PY" -m dlscope profile -o "$WORK/lm_${variant}_r$run.sqlite" --force \
                --keep-trace --steps 10 --profile-name "lm_${variant}_r$run" --batch-size 64 --sample-unit sequences \
                -- "$PY" bench/gpu_train_step.py --steps 20 --batch-size 64 "${flags[@]}"
        done
    done
fi

# 7. The cuda-graphs what-if on a capture that already graphs forward and backward (ONLY='^(env|wsg_.*)$'): the
# FP32 transformer LM at 16 sequences, eager, --cuda-graphs and --whole-step-graph unprofiled twice each (in turn,
# so drift shows in both), beside 100-iteration captures of the eager and the graphed step and `dlscope whatif
# cuda-graphs` of each (docs/gpu-sessions.md, fourth session). Not in a full session.
if [ -n "$ONLY" ]; then
    WSG=(--model transformer --batch-size 16 --steps 104)
    for run in 1 2; do
        step "wsg_eager_r$run" 60 "$PY" bench/gpu_train_step.py "${WSG[@]}"
        step "wsg_graphs_r$run" 60 "$PY" bench/gpu_train_step.py "${WSG[@]}" --cuda-graphs
        step "wsg_whole_r$run" 60 "$PY" bench/gpu_train_step.py "${WSG[@]}" --whole-step-graph
    done
    for mode in eager graphs; do
        flags=()
        [ "$mode" = graphs ] && flags+=(--cuda-graphs)
        step "wsg_capture_$mode" 120 "$PY" -m dlscope profile -o "$WORK/wsg_$mode.sqlite" --force --steps 100 \
            --profile-name "wsg_$mode" --batch-size 16 --sample-unit sequences -- "$PY" bench/gpu_train_step.py \
            "${WSG[@]}" "${flags[@]}"
        step "wsg_whatif_$mode" 60 "$PY" -m dlscope whatif "$WORK/wsg_$mode.sqlite" cuda-graphs --json
        # 10 iterations with the raw trace kept: small enough for tests/data (the 100-iteration database is not)
        step "wsg_trace_$mode" 60 "$PY" -m dlscope profile -o "$WORK/lm_fp32_${mode}_b16.sqlite" --force --keep-trace \
            --steps 10 --profile-name "lm_fp32_${mode}_b16" --batch-size 16 --sample-unit sequences -- \
            "$PY" bench/gpu_train_step.py --model transformer --batch-size 16 --steps 14 "${flags[@]}"
    done
fi

echo "done: $(grep -c 'rc=0' "$LOG") of $(wc -l < "$LOG") steps succeeded" | tee -a "$LOG"
pack
