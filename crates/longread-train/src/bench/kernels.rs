//! `longread bench --workload kernels`: the building blocks of one bf16 encoder layer in GPU
//! inference (and training's attention, forward and backward), each timed alone on random data
//! at one batch's size — the products (candle's cuBLAS calls, and cuBLASLt's without and with
//! the bias in the epilogue), the casts and in-place passes, FlashAttention-2 and the residual
//! LayerNorm — with the rate each reaches (TFLOP/s for products and attention, GB/s for memory-bound
//! passes). `scripts/gpu_bench_kernels_torch.py` times PyTorch's counterparts with the same names
//! and shapes, so that one table says which block is slower than PyTorch's and by how much.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use longread_model::layers::cuda;

use crate::error::{Result, TrainError};

/// The shape of the layer whose blocks are timed.
#[derive(Debug, Clone, Copy)]
pub struct KernelShape {
    /// Tokens in the batch (sequences of `seq` tokens).
    pub tokens: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Feed-forward size.
    pub inner: usize,
    /// Attention heads.
    pub heads: usize,
}

impl KernelShape {
    /// `sequences` sequences of `seq` tokens through a layer of the preset encoder `preset`
    /// (`roberta-base`, `roberta-large`, `small`, `tiny`).
    pub fn of_preset(preset: &str, sequences: usize, seq: usize) -> Result<Self> {
        let config = longread_model::presets::preset_config(preset, super::PRESET_VOCAB)?;
        Ok(Self {
            tokens: sequences * seq,
            seq,
            hidden: config.hidden_size,
            inner: config.intermediate_size(),
            heads: config.num_attention_heads,
        })
    }
}

/// One timed block.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelRow {
    /// What ran (the same names as the PyTorch script's).
    pub kernel: String,
    /// The operands, as text.
    pub shape: String,
    /// Median seconds of the timed runs.
    pub seconds: f64,
    /// Achieved TFLOP/s (products and attention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    /// Achieved GB/s of the bytes the pass must read and write at least.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
}

/// Times each block `repeat` times after two untimed runs, the GPU waited for around each run.
pub fn run_kernels(device: &Device, shape: KernelShape, repeat: usize) -> Result<Vec<KernelRow>> {
    if !device.is_cuda() {
        return Err(TrainError::Run(
            "--workload kernels times the GPU's inference kernels: give --device cuda (or cuda:N)".into(),
        ));
    }
    let KernelShape { tokens, seq, hidden, inner, heads } = shape;
    if seq == 0 || tokens == 0 || !tokens.is_multiple_of(seq) || heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(TrainError::Run(format!(
            "--workload kernels: {tokens} tokens in sequences of {seq}, hidden {hidden} over {heads} heads do not divide"
        )));
    }
    let random = |rows: usize, cols: usize, dtype: DType| -> Result<Tensor> {
        Ok((Tensor::randn(0f32, 1.0, (rows, cols), device)? * 0.05)?.to_dtype(dtype)?)
    };
    let time = |f: &mut dyn FnMut() -> candle_core::Result<()>| -> Result<f64> {
        let mut runs = Vec::with_capacity(repeat.max(1));
        for i in 0..repeat.max(1) + 2 {
            device.synchronize()?;
            let started = Instant::now();
            f()?;
            device.synchronize()?;
            if i >= 2 {
                runs.push(started.elapsed().as_secs_f64());
            }
        }
        runs.sort_by(f64::total_cmp);
        Ok(runs[runs.len() / 2])
    };
    let mut rows = Vec::new();
    let mut push = |kernel: String, shape: String, seconds: f64, flops: Option<f64>, bytes: Option<f64>| {
        rows.push(KernelRow {
            kernel,
            shape,
            seconds,
            tflops: flops.map(|f| f / seconds / 1e12),
            gbps: bytes.map(|b| b / seconds / 1e9),
        });
    };
    let t = tokens as f64;

    let stream = random(tokens, hidden, DType::F32)?;
    let seconds = time(&mut || stream.to_dtype(DType::BF16).map(drop))?;
    push("cast f32 to bf16".into(), format!("[{tokens}, {hidden}]"), seconds, None, Some(t * hidden as f64 * 6.0));

    let x = stream.to_dtype(DType::BF16)?;
    let products = [
        ("q/k/v", hidden, 3 * hidden),
        ("attention out", hidden, hidden),
        ("feed-forward in", hidden, inner),
        ("feed-forward out", inner, hidden),
    ];
    for (name, k, n) in products {
        let input = if k == hidden { x.clone() } else { random(tokens, k, DType::BF16)? };
        let weight = random(n, k, DType::BF16)?;
        let seconds = time(&mut || input.matmul(&weight.t()?).map(drop))?;
        let flops = 2.0 * t * k as f64 * n as f64;
        let operands = format!("[{tokens}, {k}] x [{n}, {k}]T");
        push(format!("product {name}"), operands.clone(), seconds, Some(flops), None);
        // The same through cuBLASLt (inference's bf16 products), without and with the bias in its
        // epilogue (PyTorch's F.linear under autocast).
        let seconds = time(&mut || cuda::lt_linear(&input, &weight, None).map(drop))?;
        push(format!("product {name} (cuBLASLt)"), operands.clone(), seconds, Some(flops), None);
        let bias = random(1, n, DType::BF16)?.squeeze(0)?;
        let seconds = time(&mut || cuda::lt_linear(&input, &weight, Some(&bias)).map(drop))?;
        push(format!("linear {name} with bias (cuBLASLt epilogue)"), operands.clone(), seconds, Some(flops), None);
        if n == inner {
            // Bias and GELU in the epilogue (LONGREAD_CUDA_GELU=tanh: tanh-approximated GELU),
            // against the product above plus "bias + GELU in place" below.
            let seconds = time(&mut || cuda::lt_linear_gelu_tanh(&input, &weight, &bias).map(drop))?;
            push(
                format!("linear {name} with bias + GELU (cuBLASLt epilogue, tanh)"),
                operands.clone(),
                seconds,
                Some(flops),
                None,
            );
            // The exact GELU in the epilogue of longread's CUTLASS product (LONGREAD_CUDA_GELU=fused;
            // GPUs of compute capability 9.0 only; its cooperative schedule, named in the row as
            // in earlier benchmarks).
            if cuda::fused_linear_gelu(&input, &weight, &bias)?.is_some() {
                let seconds = time(&mut || cuda::fused_linear_gelu(&input, &weight, &bias).map(drop))?;
                let label = format!("linear {name} with bias + GELU (CUTLASS epilogue, erf, cooperative)");
                push(label, operands.clone(), seconds, Some(flops), None);
            }
        }
    }

    let qkv = random(tokens, 3 * hidden, DType::BF16)?;
    let qkv_bias = random(1, 3 * hidden, DType::F32)?.squeeze(0)?;
    let seconds = time(&mut || cuda::bias_activation(qkv.clone(), &qkv_bias, false).map(drop))?;
    push(
        "bias in place".into(),
        format!("[{tokens}, {}]", 3 * hidden),
        seconds,
        None,
        Some(t * 3.0 * hidden as f64 * 4.0),
    );

    let inner_act = random(tokens, inner, DType::BF16)?;
    let inner_bias = random(1, inner, DType::F32)?.squeeze(0)?;
    let seconds = time(&mut || cuda::bias_activation(inner_act.clone(), &inner_bias, true).map(drop))?;
    push("bias + GELU in place".into(), format!("[{tokens}, {inner}]"), seconds, None, Some(t * inner as f64 * 4.0));

    let sequences = tokens / seq;
    let mask = Tensor::ones((sequences, seq), DType::U32, device)?;
    let lengths = cuda::KeyLengths::right_padded(&mask)?
        .ok_or_else(|| TrainError::Run("a full mask gave no key lengths".into()))?;
    let scale = 1.0 / ((hidden / heads) as f32).sqrt();
    let _ = cuda::fused_attention_ran();
    let seconds = time(&mut || cuda::FlashAttention2::forward(&qkv, &lengths, heads, scale).map(drop))?;
    let flops = 4.0 * t * seq as f64 * hidden as f64;
    // FlashAttention-2 (the default) is the row PyTorch's is set against; cuDNN's
    // (LONGREAD_CUDA_ATTENTION=cudnn) is marked.
    let name = match cuda::fused_attention_ran() {
        Some("cudnn") => "attention [cuDNN]",
        _ => "attention",
    };
    push(name.into(), format!("{sequences} x {seq} tokens, {heads} heads"), seconds, Some(flops), None);

    // Training's attention op (FlashAttention-2 by default; cuDNN's with
    // LONGREAD_CUDA_TRAIN_ATTENTION=cudnn), forward and backward with dropout 0.1 as the encoder
    // runs it (the q/k/v bias added inside; the gradient of the output's sum seeds the backward
    // pass), counted as forward + 2.5 × forward FLOPs (FlashAttention's convention).
    // The forward pass alone (with what it keeps for the backward pass) is timed too, so that
    // the backward pass's share is the difference.
    let trained = candle_core::Var::from_tensor(&qkv)?;
    let train_op = || cuda::FlashAttentionTrain::new(heads, scale, lengths.clone(), Some((0.1, 7)));
    let _ = cuda::fused_attention_ran_in_training();
    let forward_seconds = time(&mut || train_op().forward(trained.as_tensor(), &qkv_bias).map(drop))?;
    let seconds = time(&mut || train_op().forward(trained.as_tensor(), &qkv_bias)?.sum_all()?.backward().map(drop))?;
    // Rows named by the backend that ran; FlashAttention-2's unmarked (PyTorch's SDPA is set
    // against it), an atomic (non-deterministic) backward pass marked.
    let backend = match cuda::fused_attention_ran_in_training() {
        Some("cudnn") => " [cuDNN]",
        Some("fa2") => "",
        _ => " [longread]",
    };
    let atomic = if cuda::attention_backward_deterministic() { "" } else { " [atomic dq]" };
    // cuDNN's gradients in three blocks, interleaved after (LONGREAD_CUDNN_GRADS=dense|heads).
    let dense = match cuda::cudnn_gradient_layout() {
        "dense" if backend == " [cuDNN]" => " [dense grads]",
        "heads" if backend == " [cuDNN]" => " [head-major grads]",
        _ => "",
    };
    let shape = format!("{sequences} x {seq} tokens, {heads} heads");
    let name = format!("attention training, forward only, dropout 0.1{backend}");
    push(name, shape.clone(), forward_seconds, Some(flops), None);
    let name = format!("attention training, forward + backward, dropout 0.1{backend}{atomic}{dense}");
    push(name, shape, seconds, Some(3.5 * flops), None);

    let residual = stream.clone();
    let (bias, gamma, beta) = (random(1, hidden, DType::F32)?.squeeze(0)?, stream.get(0)?, stream.get(1)?);
    let seconds = time(&mut || cuda::residual_layer_norm(x.clone(), &residual, &bias, &gamma, &beta, 1e-5).map(drop))?;
    // With its bf16 copy for the next product (cuda::twin).
    let label = "residual + LayerNorm (bf16 + f32 into f32 and a bf16 copy)";
    push(label.into(), format!("[{tokens}, {hidden}]"), seconds, None, Some(t * hidden as f64 * 12.0));
    Ok(rows)
}
