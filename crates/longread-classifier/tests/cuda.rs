//! GPU tests: on a CUDA device, every encoder model gives the CPU's numbers. They
//! run where a GPU is visible to a `cuda` build, and otherwise print "skipped: no CUDA device"
//! (scripts/gpu_check.sh sets LONGREAD_REQUIRE_GPU=1, which turns a skip into a failure).
//!
//! f32 on the GPU is compared with TF32 matrix products switched off (the default on a GPU is
//! TF32, whose 10-bit mantissa is not meant to meet 1e-4): the kernels then do the CPU's
//! arithmetic up to summation order. `LONGREAD_GPU_MODELS` adds model directories (a
//! random-weight roberta-base-shaped classifier in gpu_check.sh) to the fixtures.

#[path = "../../longread-model/tests/common.rs"]
mod common;

use std::path::PathBuf;

use common::{fixture, hier_documents, max_diff};
use longread_classifier::{Classifier, ClassifierOptions, Prediction};
use longread_model::device::cuda_device_count;
use longread_model::{DeviceChoice, Embedder, EmbedderOptions, Precision};

/// Whether a GPU is there; prints why a test is skipped when not.
fn gpu(test: &str) -> bool {
    if cuda_device_count() > 0 {
        return true;
    }
    let why = if cfg!(feature = "cuda") { "no CUDA device is visible" } else { "built without the `cuda` feature" };
    assert!(std::env::var_os("LONGREAD_REQUIRE_GPU").is_none(), "{test}: LONGREAD_REQUIRE_GPU is set but {why}");
    println!("{test}: skipped: no CUDA device ({why})");
    false
}

/// Every encoder fixture model, and the directories in LONGREAD_GPU_MODELS (colon-separated).
fn models() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "hier/roberta-attention",
        "hier/bert-attention",
        "hier/bert-mean",
        "hier/bert-max",
        "hier/bert-first",
        "hier/bert-multihead",
        "hier/bert-ordinal",
        "hier/trained-multitask",
        "hier/minilm",
        "seq/bert",
        "seq/roberta",
    ]
    .iter()
    .map(|m| fixture(m))
    .filter(|d| d.join("config.json").exists())
    .collect();
    if let Some(extra) = std::env::var_os("LONGREAD_GPU_MODELS") {
        dirs.extend(std::env::split_paths(&extra));
    }
    dirs
}

fn load(dir: &std::path::Path, device: DeviceChoice, precision: Precision, max_batch_tokens: usize) -> Classifier {
    let options = ClassifierOptions {
        precision: Some(precision),
        max_batch_tokens: Some(max_batch_tokens),
        device,
        occlusion: false,
    };
    Classifier::load(dir, options).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

fn predictions(classifier: &Classifier, texts: &[&str]) -> Vec<Prediction> {
    classifier.classify(texts).unwrap().into_iter().map(|r| r.unwrap()).collect()
}

/// Every number a prediction shows: probabilities, logits, chunk attention, other tasks'.
fn numbers(p: &Prediction) -> Vec<f32> {
    let mut all: Vec<f32> = p.probabilities().to_vec();
    all.extend(&p.logits);
    all.extend(p.parts.chunks().unwrap_or_default().iter().map(|c| c.attention));
    for task in p.tasks.iter().flat_map(|t| t.values()) {
        all.extend(&task.scores.probabilities);
        all.extend(&task.logits);
    }
    all
}

fn texts() -> Vec<String> {
    let mut docs = hier_documents();
    // A long document: several full chunks in the fixtures' chunking.
    docs.push(docs.join(" ").repeat(3));
    docs
}

fn tf32(on: bool) {
    #[cfg(feature = "cuda")]
    candle_core::cuda_backend::set_gemm_reduced_precision_f32(on);
    let _ = on;
}

#[test]
fn cuda_f32_equals_cpu_f32_on_every_encoder_model() {
    if !gpu("cuda_f32_equals_cpu_f32_on_every_encoder_model") {
        return;
    }
    let docs = texts();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    for dir in models() {
        let cpu = predictions(&load(&dir, DeviceChoice::Cpu, Precision::F32, 2048), &texts);
        let gpu_classifier = load(&dir, DeviceChoice::Cuda(0), Precision::F32, 65_536);
        assert!(gpu_classifier.device().is_cuda());
        tf32(false);
        let gpu = predictions(&gpu_classifier, &texts);
        tf32(true);
        for (c, g) in cpu.iter().zip(&gpu) {
            let d = max_diff(&numbers(c), &numbers(g));
            println!("{}: cuda f32 vs cpu f32 max abs diff {d:.2e}", dir.display());
            assert!(d <= 1e-4, "{}: max abs diff {d}", dir.display());
            assert_eq!(c.label, g.label, "{}", dir.display());
        }
    }
}

/// Hidden size of a model directory's encoder.
fn hidden_size(dir: &std::path::Path) -> usize {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["hidden_size"].as_u64().unwrap() as usize
}

/// The bf16 acceptance check on full-size encoders (hidden ≥ 256: the roberta-base-shaped model
/// of gpu_check.sh): logits within 1e-2 of f32's relative to their scale, the same labels. The tiny
/// fixtures (hidden 32, two layers), whose bf16 error is larger for PyTorch too, are held to
/// PyTorch's own bf16 error instead (the next test).
#[test]
fn cuda_bf16_agrees_with_f32_to_one_percent_with_the_same_labels() {
    if !gpu("cuda_bf16_agrees_with_f32_to_one_percent_with_the_same_labels") {
        return;
    }
    let docs = texts();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    let full_size: Vec<PathBuf> = models().into_iter().filter(|d| hidden_size(d) >= 256).collect();
    if full_size.is_empty() {
        assert!(std::env::var_os("LONGREAD_REQUIRE_GPU").is_none(), "no full-size model: set LONGREAD_GPU_MODELS");
        println!("cuda_bf16_agrees_with_f32_to_one_percent_with_the_same_labels: skipped: no full-size model");
        return;
    }
    for dir in full_size {
        let f32s = predictions(&load(&dir, DeviceChoice::Cpu, Precision::F32, 2048), &texts);
        let bf16s = predictions(&load(&dir, DeviceChoice::Cuda(0), Precision::Bf16, 65_536), &texts);
        for (a, b) in f32s.iter().zip(&bf16s) {
            // Relative to the logits' scale (a near-zero logit has no meaningful relative error).
            let scale = a.logits.iter().fold(1f32, |m, x| m.max(x.abs()));
            let d = max_diff(&a.logits, &b.logits) / scale;
            println!("{}: cuda bf16 vs f32 logits, max diff / max |logit| {d:.2e}", dir.display());
            assert!(d <= 1e-2, "{}: relative logit diff {d}", dir.display());
            let margin = {
                let mut p = a.probabilities().to_vec();
                p.sort_by(|x, y| y.total_cmp(x));
                p[0] - p.get(1).copied().unwrap_or(0.0)
            };
            // Labels must agree unless f32 itself is within bf16's reach of a tie.
            if margin > 1e-2 {
                assert_eq!(a.label, b.label, "{}", dir.display());
            }
        }
    }
}

/// bf16 on the GPU is as close to f32 as PyTorch's bf16 autocast is, on the same weights and
/// ids: the encoder's last hidden states, max|bf16 − f32| / max|f32|, at most 1.25 times
/// PyTorch's plus 1e-3 (scripts/gpu_bf16_reference.py measures PyTorch's; gpu_check.sh passes
/// its output in LONGREAD_BF16_REFERENCE).
#[test]
fn cuda_bf16_encoder_is_as_close_to_f32_as_pytorch_autocast() {
    let test = "cuda_bf16_encoder_is_as_close_to_f32_as_pytorch_autocast";
    if !gpu(test) {
        return;
    }
    let Some(path) = std::env::var_os("LONGREAD_BF16_REFERENCE") else {
        assert!(std::env::var_os("LONGREAD_REQUIRE_GPU").is_none(), "{test}: LONGREAD_BF16_REFERENCE is not set");
        println!("{test}: skipped: no PyTorch reference (LONGREAD_BF16_REFERENCE)");
        return;
    };
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let device = DeviceChoice::Cuda(0).resolve().unwrap();
    for (dir, entry) in reference["models"].as_object().unwrap() {
        let ids: Vec<Vec<u32>> = serde_json::from_value(entry["ids"].clone()).unwrap();
        let (batch, length) = (ids.len(), ids[0].len());
        let ids = candle_core::Tensor::from_vec(ids.concat(), (batch, length), &device).unwrap();
        let mask = ids.ones_like().unwrap();
        let checkpoint = longread_model::Checkpoint::open(std::path::Path::new(dir)).unwrap();
        let mut encoder = checkpoint.load_encoder(&longread_model::LoadOptions::default(), &device).unwrap();
        encoder.set_inference_dtype(candle_core::DType::F32).unwrap();
        tf32(false);
        let f32s = encoder.forward(&ids, &mask, longread_model::Mode::Eval).unwrap();
        tf32(true);
        encoder.set_inference_dtype(candle_core::DType::BF16).unwrap();
        let bf16s = encoder.forward(&ids, &mask, longread_model::Mode::Eval).unwrap();
        let bf16s = bf16s.to_dtype(candle_core::DType::F32).unwrap();
        let scale = f32s.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        let diff = (&bf16s - &f32s).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        let ours = diff.to_scalar::<f32>().unwrap() / scale;
        let theirs = entry["error"].as_f64().unwrap() as f32;
        println!("{dir}: bf16 error of the last hidden states: longread {ours:.2e}, PyTorch autocast {theirs:.2e}");
        assert!(ours <= 1.25 * theirs + 1e-3, "{dir}: longread's bf16 error {ours} vs PyTorch's {theirs}");
    }
}

/// `predict` hands the encoder its ids and mask on the CPU (checked there, copied over once,
/// nothing read back from the GPU): the same bits as the same inputs given on the GPU, in bf16
/// over right-padded sequences whose heads of 64 run the fused attention (its key lengths then
/// come from the CPU's mask), and in f32.
#[test]
fn on_cuda_inputs_given_on_the_cpu_give_the_encoders_output_for_inputs_on_the_gpu() {
    let test = "on_cuda_inputs_given_on_the_cpu_give_the_encoders_output_for_inputs_on_the_gpu";
    if !gpu(test) {
        return;
    }
    use candle_core::{DType, Device, Tensor};
    use longread_model::layers::cuda::{cudnn_unavailable, flash2_enabled, fused_attention_ran};
    let device = DeviceChoice::Cuda(0).resolve().unwrap();
    let config = longread_model::presets::preset_config("tiny", 1000).unwrap();
    let vb = longread_model::checkpoint::fresh_var_builder(&config.model_type, 7, None, DType::F32, &device);
    let mut encoder = longread_model::Encoder::load(vb, &config).unwrap();
    // Right-padded rows of 64, 40 and 1 real tokens (ids 3.., padding 1).
    let (seq, real) = (64usize, [64usize, 40, 1]);
    let ids: Vec<u32> =
        real.iter().flat_map(|&n| (0..seq).map(move |i| if i < n { 3 + (i * 37 % 990) as u32 } else { 1 })).collect();
    let mask: Vec<u32> = real.iter().flat_map(|&n| (0..seq).map(move |i| u32::from(i < n))).collect();
    let ids = Tensor::from_vec(ids, (real.len(), seq), &Device::Cpu).unwrap();
    let mask = Tensor::from_vec(mask, (real.len(), seq), &Device::Cpu).unwrap();
    for dtype in [DType::BF16, DType::F32] {
        encoder.set_inference_dtype(dtype).unwrap();
        let _ = fused_attention_ran();
        let on_gpu = encoder
            .forward(&ids.to_device(&device).unwrap(), &mask.to_device(&device).unwrap(), longread_model::Mode::Eval)
            .unwrap();
        let from_cpu = encoder.forward(&ids, &mask, longread_model::Mode::Eval).unwrap();
        assert!(from_cpu.device().is_cuda(), "the output stays on the encoder's device");
        if dtype == DType::BF16 && flash2_enabled() {
            assert!(
                fused_attention_ran().is_some(),
                "bf16 heads of 64 run the fused attention ({:?})",
                cudnn_unavailable()
            );
        }
        let (a, b) = (numbers_of(&on_gpu), numbers_of(&from_cpu));
        println!("{test}: {dtype:?}: largest difference {:.2e}", max_diff(&a, &b));
        assert!(a == b, "{dtype:?}: inputs on the CPU change the encoder's output");
    }
}

/// Every value of a tensor, as f32 on the host.
fn numbers_of(t: &candle_core::Tensor) -> Vec<f32> {
    t.to_dtype(candle_core::DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

#[test]
fn on_cuda_a_document_alone_and_in_a_full_batch_gets_the_same_scores() {
    if !gpu("on_cuda_a_document_alone_and_in_a_full_batch_gets_the_same_scores") {
        return;
    }
    let docs = texts();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    for (precision, tolerance) in [(Precision::F32, 1e-5), (Precision::Bf16, 2e-2)] {
        for dir in models() {
            let classifier = load(&dir, DeviceChoice::Cuda(0), precision, 65_536);
            tf32(false);
            let together = predictions(&classifier, &texts);
            for (text, batched) in texts.iter().zip(&together) {
                let alone = predictions(&classifier, &[text]).remove(0);
                let d = max_diff(&numbers(&alone), &numbers(batched));
                assert!(d <= tolerance, "{} {precision:?}: alone vs batched max diff {d}", dir.display());
            }
            tf32(true);
        }
    }
}

#[test]
fn cuda_embeddings_equal_the_cpus() {
    if !gpu("cuda_embeddings_equal_the_cpus") {
        return;
    }
    let dir = fixture("tiny-bert");
    let texts = ["A short sentence.", "Another, somewhat longer sentence about the weather in spring."];
    let options = |device, precision| EmbedderOptions {
        normalize: Some(true),
        device,
        precision: Some(precision),
        ..Default::default()
    };
    let cpu =
        Embedder::open(&dir, options(DeviceChoice::Cpu, Precision::F32)).unwrap().embed(&texts, 8, |_| {}).unwrap();
    tf32(false);
    let gpu =
        Embedder::open(&dir, options(DeviceChoice::Cuda(0), Precision::F32)).unwrap().embed(&texts, 8, |_| {}).unwrap();
    tf32(true);
    for (c, g) in cpu.vectors.iter().zip(&gpu.vectors) {
        let d = max_diff(c, g);
        assert!(d <= 1e-4, "embedding max abs diff {d}");
    }
    let bf16 = Embedder::open(&dir, options(DeviceChoice::Cuda(0), Precision::Bf16))
        .unwrap()
        .embed(&texts, 8, |_| {})
        .unwrap();
    for (c, b) in cpu.vectors.iter().zip(&bf16.vectors) {
        let cosine: f32 = c.iter().zip(b).map(|(x, y)| x * y).sum();
        assert!(cosine > 0.999, "bf16 embedding cosine {cosine}");
    }
}

/// FlashAttention-2 (vendor/flash-attn, `LONGREAD_CUDA_ATTENTION=fa2`) on the GPU equals its
/// f32 CPU loop on the same bf16-rounded product, for heads of 32 and 64, sequences of 512 and
/// of 200 keys (not a multiple of the kernel's 128-key blocks), a full, a half-padded and a
/// one-token sequence, read from a strided product as inference gives it, and batches whose
/// every key is real; with `LONGREAD_CUDA_ATTENTION=cudnn` the same op on cuDNN (vendor/cudnn-attn),
/// which must then be what ran.
#[test]
fn flash_attention_2_equals_its_cpu_reference() {
    if !gpu("flash_attention_2_equals_its_cpu_reference") {
        return;
    }
    use candle_core::{DType, Device, Tensor};
    use longread_model::layers::cuda::{FlashAttention2, KeyLengths};
    let cuda = Device::new_cuda(0).unwrap();
    let backend = if std::env::var("LONGREAD_CUDA_ATTENTION").is_ok_and(|v| v == "cudnn") { "cudnn" } else { "fa2" };
    let full = |seq: usize| vec![seq, seq];
    let cases =
        [(12, 64, 512, false), (12, 32, 512, false), (4, 64, 200, false), (2, 32, 200, false), (12, 64, 512, true)];
    for (heads, d, seq, all_real) in cases {
        let hidden = heads * d;
        let real = if all_real { full(seq) } else { vec![seq, seq / 2 + 3, 1] };
        let rows: Vec<u32> = real.iter().flat_map(|&n| (0..seq).map(move |i| u32::from(i < n))).collect();
        let mask = Tensor::from_vec(rows, (real.len(), seq), &Device::Cpu).unwrap();
        let product = Tensor::randn(0f32, 1.0, (real.len() * seq, 3 * hidden + 8), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let qkv = product.narrow(1, 0, 3 * hidden).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        let cpu_lengths = KeyLengths::right_padded(&mask).unwrap().unwrap();
        let reference =
            FlashAttention2::forward(&qkv.to_dtype(DType::F32).unwrap(), &cpu_lengths, heads, scale).unwrap();
        let gpu_lengths = KeyLengths::right_padded(&mask.to_device(&cuda).unwrap()).unwrap().unwrap();
        let _ = longread_model::layers::cuda::fused_attention_ran();
        let ours = FlashAttention2::forward(&qkv.to_device(&cuda).unwrap(), &gpu_lengths, heads, scale)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_device(&Device::Cpu)
            .unwrap();
        assert_eq!(
            longread_model::layers::cuda::fused_attention_ran(),
            Some(backend),
            "the backend that ran ({:?})",
            longread_model::layers::cuda::cudnn_unavailable()
        );
        let max = |t: &Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let diff = max(&(ours - &reference).unwrap()) / max(&reference);
        println!(
            "fused attention ({backend}), {heads} heads of {d}, {seq} keys (all real: {all_real}): \
             largest difference {diff:.2e} of the scale"
        );
        assert!(diff <= 1e-2, "{backend}: {heads} heads of {d}, {seq} keys: {diff} of the scale");
    }
}

/// cuBLASLt's products (bf16 inference's default) equal the f32 product of the same
/// bf16 operands to bf16's rounding, with and without the bias in the epilogue (and bias + GELU,
/// `LONGREAD_CUDA_GELU=tanh`, against tanh-approximated GELU), at uneven and
/// at roberta-base's sizes, from a row-offset input (runs whatever the environment's choice).
#[test]
fn cublaslt_products_equal_the_f32_product() {
    if !gpu("cublaslt_products_equal_the_f32_product") {
        return;
    }
    use candle_core::{DType, Device, Tensor};
    use longread_model::layers::cuda::{lt_linear, lt_linear_gelu_tanh};
    let cuda = Device::new_cuda(0).unwrap();
    for (rows, k, n) in [(37, 64, 96), (4096, 768, 2304), (1000, 3072, 768)] {
        let random =
            |r: usize, c: usize| Tensor::randn(0f32, 1.0, (r, c), &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let x = random(rows + 1, k).narrow(0, 1, rows).unwrap();
        let (w, bias) = (random(n, k), random(1, n).squeeze(0).unwrap());
        let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let product = f32(&x).matmul(&f32(&w).t().unwrap()).unwrap();
        let with_bias = product.broadcast_add(&f32(&bias)).unwrap();
        let on_gpu = |t: &Tensor| t.to_device(&cuda).unwrap();
        for (reference, bias) in [(&product, None), (&with_bias, Some(&bias))] {
            let ours = lt_linear(&on_gpu(&x), &on_gpu(&w), bias.map(on_gpu).as_ref()).unwrap();
            assert_eq!(ours.dims(), [rows, n]);
            let ours = f32(&ours.to_device(&Device::Cpu).unwrap());
            let max = |t: &Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let diff = max(&(ours - reference).unwrap()) / max(reference);
            println!("cuBLASLt [{rows}, {k}] x [{n}, {k}]T, bias {}: {diff:.2e} of the scale", bias.is_some());
            assert!(diff <= 1e-2, "[{rows}, {k}] x [{n}, {k}]T: {diff} of the scale");
        }
        // Bias and GELU in the epilogue (LONGREAD_CUDA_GELU=tanh): the tanh approximation of
        // GELU (candle's `gelu`), not the exact one (`gelu_erf`), which it follows to 4.7e-4.
        let ours = lt_linear_gelu_tanh(&on_gpu(&x), &on_gpu(&w), &on_gpu(&bias)).unwrap();
        let ours = f32(&ours.to_device(&Device::Cpu).unwrap());
        let max = |t: &Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let tanh = with_bias.gelu().unwrap();
        let diff = max(&(&ours - &tanh).unwrap()) / max(&tanh);
        let to_erf = max(&(&ours - with_bias.gelu_erf().unwrap()).unwrap()) / max(&tanh);
        println!("cuBLASLt [{rows}, {k}] x [{n}, {k}]T, bias + GELU epilogue: {diff:.2e} of the scale from tanh GELU, {to_erf:.2e} from erf GELU");
        assert!(diff <= 1e-2, "[{rows}, {k}] x [{n}, {k}]T with GELU: {diff} of the scale");
    }
}

/// longread's CUTLASS product with bias and exact GELU in its epilogue (`LONGREAD_CUDA_GELU=fused`,
/// GPUs of compute capability 9.0) equals `gelu_erf` of the f32 product of the same bf16
/// operands to bf16's rounding, at uneven and at roberta-base's feed-forward sizes, from a
/// row-offset input; elsewhere it declines (the caller runs the default).
#[test]
fn cutlass_product_with_bias_and_gelu_equals_the_f32_reference() {
    let test = "cutlass_product_with_bias_and_gelu_equals_the_f32_reference";
    if !gpu(test) {
        return;
    }
    use candle_core::{DType, Device, Tensor};
    use longread_model::layers::cuda::fused_linear_gelu;
    let cuda = Device::new_cuda(0).unwrap();
    let mut ran = 0;
    for (rows, k, n) in [(37, 64, 96), (1000, 768, 3072), (4096, 768, 3072), (200, 1024, 4096)] {
        let random =
            |r: usize, c: usize| Tensor::randn(0f32, 1.0, (r, c), &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let x = random(rows + 1, k).narrow(0, 1, rows).unwrap();
        let (w, bias) = (random(n, k), random(1, n).squeeze(0).unwrap());
        let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let scale = 1.0 / (k as f64).sqrt();
        let w = (f32(&w) * scale).unwrap().to_dtype(DType::BF16).unwrap();
        let reference =
            f32(&x).matmul(&f32(&w).t().unwrap()).unwrap().broadcast_add(&f32(&bias)).unwrap().gelu_erf().unwrap();
        let on_gpu = |t: &Tensor| t.to_device(&cuda).unwrap();
        let Some(ours) = fused_linear_gelu(&on_gpu(&x), &on_gpu(&w), &on_gpu(&bias)).unwrap() else {
            println!("{test}: declined on this GPU or build (compute capability 9.0 and CUDA_COMPUTE_CAP=90 only)");
            return;
        };
        ran += 1;
        assert_eq!(ours.dims(), [rows, n]);
        let ours = f32(&ours.to_device(&Device::Cpu).unwrap());
        let max = |t: &Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let diff = max(&(ours - &reference).unwrap()) / max(&reference);
        println!("CUTLASS bias + GELU [{rows}, {k}] x [{n}, {k}]T: {diff:.2e} of the scale from erf GELU");
        assert!(diff <= 1e-2, "[{rows}, {k}] x [{n}, {k}]T: {diff} of the scale");
    }
    println!("{test}: {ran} shapes ran");
}

/// The device's memory pool keeps what tensors free across a synchronisation (as PyTorch's
/// caching allocator does), so that the next batch does not map its memory afresh; with
/// `LONGREAD_CUDA_POOL=release` the driver's default (give it all back) holds instead.
#[test]
fn the_gpu_memory_pool_keeps_freed_memory_across_a_synchronisation() {
    if !gpu("the_gpu_memory_pool_keeps_freed_memory_across_a_synchronisation") {
        return;
    }
    use longread_model::device::reserved_memory_bytes;
    let cuda = DeviceChoice::Cuda(0).resolve().unwrap();
    let bytes = 256u64 << 20;
    let tensor = candle_core::Tensor::zeros((bytes / 4) as usize, candle_core::DType::F32, &cuda).unwrap();
    let held = reserved_memory_bytes(&cuda).unwrap();
    assert!(held >= bytes, "the pool holds {held} bytes with a {bytes}-byte tensor alive");
    drop(tensor);
    cuda.synchronize().unwrap();
    let kept = reserved_memory_bytes(&cuda).unwrap();
    let release = std::env::var("LONGREAD_CUDA_POOL").is_ok_and(|v| v == "release");
    println!("memory pool: {held} bytes with the tensor, {kept} after freeing it and a synchronisation");
    if release {
        assert!(kept < bytes, "LONGREAD_CUDA_POOL=release: the pool still holds {kept} bytes");
    } else {
        assert!(kept >= bytes, "the pool gave memory back at a synchronisation: {kept} of {held} bytes kept");
    }
}

/// Asking for a GPU that is not there names the problem (runs everywhere).
#[test]
fn a_gpu_that_is_not_there_is_a_clear_error() {
    let n = cuda_device_count();
    let options = ClassifierOptions { device: DeviceChoice::Cuda(n), ..ClassifierOptions::default() };
    let err = Classifier::load(&fixture("hier/roberta-attention"), options).unwrap_err().to_string();
    assert!(err.contains("cuda") && (err.contains("visible") || err.contains("`cuda` feature")), "{err}");
}
