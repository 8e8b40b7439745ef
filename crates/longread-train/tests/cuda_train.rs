//! GPU training tests: on a CUDA device, training computes the CPU's numbers. They
//! run where a GPU is visible to a `cuda` build and otherwise print "skipped: no CUDA device"
//! (scripts/gpu_check.sh sets LONGREAD_REQUIRE_GPU=1, which turns a skip into a failure);
//! one runs everywhere: the GPU route's composition on the CPU, with the ops' reference kernels.
//!
//! f32 on the GPU is compared with TF32 matrix products switched off. Dropout masks are the
//! same on both devices (a hash of the seed and the element's index), so training-mode
//! gradients are compared too.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use longread_model::device::cuda_device_count;
use longread_model::han::HanClassifier;
use longread_model::hierarchical::HierarchicalClassifier;
use longread_model::masked_lm::MaskedLm;
use longread_model::{DeviceChoice, DropoutRng, Mode};
use longread_text::{ChunkedDocument, Chunker, TextTokenizer};
use longread_train::loss::{cross_entropy, TaskLoss};
use longread_train::optim::{AdamW, AdamWConfig, ParamGroup};
use longread_train::prefix::Prefix;
use longread_train::recompute::{batch_gradients, BatchSettings};
#[cfg(feature = "clap")]
use longread_train::run::{train_run, RunHooks};
#[cfg(feature = "clap")]
use longread_train::trainer::{EpochLog, Progress};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

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

fn cuda() -> Device {
    DeviceChoice::Cuda(0).resolve().unwrap()
}

fn tf32(on: bool) {
    #[cfg(feature = "cuda")]
    candle_core::cuda_backend::set_gemm_reduced_precision_f32(on);
    let _ = on;
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Asserts that two steps' losses and gradients (by name, in the same order) agree to 1e-4;
/// returns the largest gradient difference.
fn assert_same_step(what: &str, cpu: (f32, &[(String, Vec<f32>)]), gpu: (f32, &[(String, Vec<f32>)])) -> f32 {
    assert!((cpu.0 - gpu.0).abs() <= 1e-4, "{what}: loss {} vs {}", cpu.0, gpu.0);
    assert_eq!(cpu.1.len(), gpu.1.len(), "{what}: the same parameters get gradients");
    let mut worst = 0f32;
    for ((n, c), (m, g)) in cpu.1.iter().zip(gpu.1) {
        assert_eq!(n, m);
        let d = max_diff(c, g);
        assert!(d <= 1e-4, "{what}: gradient of {n} differs by {d}");
        worst = worst.max(d);
    }
    worst
}

/// The first `n` documents of the synthetic training set, chunked for `model`.
fn documents(model: &HierarchicalClassifier, n: usize) -> Vec<ChunkedDocument> {
    let chunker =
        Chunker::new(TextTokenizer::from_file(model.tokenizer_path()).unwrap(), model.config().longread.chunking())
            .unwrap();
    std::fs::read_to_string(fixture("synthetic/train.jsonl"))
        .unwrap()
        .lines()
        .take(n)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            // Several chunks per document: the text three times.
            chunker.chunk(&v["text"].as_str().unwrap().repeat(3)).unwrap()
        })
        .collect()
}

/// Classifier fixtures of every head and both encoder families.
const MODELS: [&str; 6] = [
    "hier/roberta-attention",
    "hier/bert-attention",
    "hier/bert-mean",
    "hier/trained-multitask",
    "seq/bert",
    "seq/roberta",
];

/// Loss and every gradient of one training batch, by name.
fn one_step(dir: &Path, device: &Device, recompute: bool) -> (f32, Vec<(String, Vec<f32>)>) {
    let model = HierarchicalClassifier::load(dir, true, device).unwrap();
    let docs = documents(&model, 4);
    let refs: Vec<&ChunkedDocument> = docs.iter().collect();
    let labels: Vec<Vec<Option<usize>>> = model
        .config()
        .tasks()
        .iter()
        .enumerate()
        .map(|(t, task)| (0..4).map(|d| Some((d + t) % task.labels.len())).collect())
        .collect();
    let named = model.named_vars();
    let vars: Vec<candle_core::Var> = named.iter().map(|(_, v)| v.clone()).collect();
    let settings = BatchSettings {
        max_batch_tokens: 64,
        recompute,
        loss: TaskLoss { task_weights: &[], class_weights: None, offsets: None, multi_label: None },
        prefix: Prefix::None,
    };
    let out = batch_gradients(&model, &refs, &labels, &vars, &DropoutRng::new(7), settings, device).unwrap();
    let grads =
        named.iter().filter_map(|(n, v)| out.grads.get(&v.as_tensor().id()).map(|g| (n.clone(), flat(g)))).collect();
    (out.loss, grads)
}

#[test]
fn cuda_f32_training_gradients_equal_the_cpus_on_every_fixture_model() {
    if !gpu("cuda_f32_training_gradients_equal_the_cpus_on_every_fixture_model") {
        return;
    }
    let device = cuda();
    for name in MODELS {
        let dir = fixture(name);
        for recompute in [true, false] {
            let (cpu_loss, cpu_grads) = one_step(&dir, &Device::Cpu, recompute);
            tf32(false);
            let (gpu_loss, gpu_grads) = one_step(&dir, &device, recompute);
            tf32(true);
            let what = format!("{name} (recompute {recompute})");
            let worst = assert_same_step(&what, (cpu_loss, &cpu_grads), (gpu_loss, &gpu_grads));
            println!(
                "{name} (recompute {recompute}): loss {cpu_loss:.6} vs {gpu_loss:.6}, {} gradients max abs diff {worst:.2e}",
                cpu_grads.len()
            );
        }
    }
}

/// The GPU route's training (its ops, their order and backward passes: `layers::cuda`), run on
/// the CPU with the ops' f32 reference kernels (`longread_model::route::emulate_gpu`), gives the
/// CPU route's loss and gradients on every fixture model, with and without recomputation. Runs
/// everywhere (no GPU needed): it checks the composition that the GPU test above checks with the
/// real kernels, so a change to the GPU route is tested in CI before it meets a GPU.
#[test]
fn the_gpu_route_emulated_on_the_cpu_gives_the_cpus_gradients_on_every_fixture_model() {
    for name in MODELS {
        let dir = fixture(name);
        let erf_gelu = std::fs::read_to_string(dir.join("config.json")).unwrap().contains("\"hidden_act\": \"gelu\"");
        for recompute in [true, false] {
            let (cpu_loss, cpu_grads) = one_step(&dir, &Device::Cpu, recompute);
            candle_core::op_profile::start(&Device::Cpu).unwrap();
            let (route_loss, route_grads) =
                longread_model::route::emulate_gpu(|| one_step(&dir, &Device::Cpu, recompute));
            // The route's own ops ran (op names as the profile gives custom ops).
            let ops: Vec<String> = candle_core::op_profile::finish().into_iter().map(|r| r.op).collect();
            let expected = [
                ("attention-train", true),
                ("residual-norm-train", true),
                // Only for exact (erf) GELU: the RoBERTa fixtures use gelu_new.
                ("gelu-dense-train", erf_gelu),
                ("cuda-layer-norm-train", true),
                ("embedding-train", true),
            ];
            for (op, _) in expected.iter().filter(|(_, on)| *on) {
                assert!(ops.iter().any(|o| o.contains(op)), "{name}: no {op} among {ops:?}");
            }
            let what = format!("{name} (recompute {recompute}, GPU route on the CPU)");
            let worst = assert_same_step(&what, (cpu_loss, &cpu_grads), (route_loss, &route_grads));
            println!(
                "{what}: loss {cpu_loss:.6} vs {route_loss:.6}, {} gradients, max abs diff {worst:.2e}",
                cpu_grads.len()
            );
        }
    }
}

/// The same for a new hierarchical classifier on the encoder fixture of every other family
/// (DistilBERT, ELECTRA, MPNet with its relative-position bias, DeBERTa-v2/v3's disentangled
/// attention, ModernBERT): the GPU route's own ops where they apply, its compositions elsewhere.
#[test]
fn the_gpu_route_emulated_on_the_cpu_gives_the_cpus_gradients_on_every_family() {
    use longread_model::hierarchical::LongreadSection;
    let families =
        ["tiny-distilbert", "tiny-electra", "tiny-mpnet", "tiny-deberta-v2", "tiny-deberta-v3", "tiny-modernbert"];
    let work = tempfile::tempdir().unwrap();
    for family in families {
        let dir = work.path().join(family);
        let section = LongreadSection { chunk_size: 24, stride: 6, ..LongreadSection::default() };
        let labels = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        HierarchicalClassifier::create(&fixture(family), labels, section, 5, &dir).unwrap();
        for recompute in [true, false] {
            let cpu = one_step(&dir, &Device::Cpu, recompute);
            let route = longread_model::route::emulate_gpu(|| one_step(&dir, &Device::Cpu, recompute));
            let what = format!("{family} (recompute {recompute}, GPU route on the CPU)");
            let worst = assert_same_step(&what, (cpu.0, &cpu.1), (route.0, &route.1));
            // Fresh heads give the encoder small gradients: hold each tensor to its own scale too.
            let mut worst_relative = 0f32;
            for ((name, c), (_, r)) in cpu.1.iter().zip(&route.1) {
                let scale = c.iter().fold(0f32, |m, v| m.max(v.abs()));
                let relative = max_diff(c, r) / scale.max(1e-6);
                assert!(relative <= 1e-3, "{what}: gradient of {name} differs by {relative:e} of its scale {scale:e}");
                worst_relative = worst_relative.max(relative);
            }
            println!(
                "{what}: loss {:.6} vs {:.6}, {} gradients, max abs diff {worst:.2e}, at most {worst_relative:.2e} of \
                 a tensor's largest gradient",
                cpu.0,
                route.0,
                cpu.1.len()
            );
        }
    }
}

/// The GPU's AdamW kernel against the CPU's loop on the same parameters and gradients (the
/// gradients of a training step are compared above; here AdamW alone, because its update
/// m / (sqrt(v) + eps) turns a gradient that is zero up to rounding, such as a key bias's,
/// into a full step of either sign).
#[test]
fn cuda_adamw_steps_equal_the_cpus_on_the_same_gradients() {
    if !gpu("cuda_adamw_steps_equal_the_cpus_on_the_same_gradients") {
        return;
    }
    let device = cuda();
    let n = 100_003;
    let values = |seed: u64, scale: f32| -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            })
            .collect()
    };
    let run = |device: &Device| -> Vec<f32> {
        let p = candle_core::Var::from_tensor(&Tensor::from_vec(values(1, 2.0), n, device).unwrap()).unwrap();
        let group =
            ParamGroup { name: "p".into(), lr: 1e-3, weight_decay: 0.01, params: vec![("p".into(), p.clone())] };
        let mut optimizer = AdamW::new(vec![group], AdamWConfig::default()).unwrap();
        for step in 0..3u64 {
            let g = Tensor::from_vec(values(10 + step, 1e-2), n, device).unwrap();
            optimizer.step_scaled(0.7, |_| Some(g.clone())).unwrap();
        }
        // The moments travel through a checkpoint's tensors and back.
        let (tensors, steps) = optimizer.export_state().unwrap();
        optimizer.import_state(&tensors, &steps).unwrap();
        let g = Tensor::from_vec(values(20, 1e-2), n, device).unwrap();
        optimizer.step_scaled(1.0, |_| Some(g.clone())).unwrap();
        flat(p.as_tensor())
    };
    let (cpu, gpu) = (run(&Device::Cpu), run(&device));
    let d = max_diff(&cpu, &gpu);
    println!("AdamW, 4 steps of {n} parameters (one after a checkpoint round trip): max abs diff {d:.2e}");
    assert!(d <= 1e-6, "AdamW on the GPU differs from the CPU's by {d}");
}

#[test]
fn cuda_mlm_loss_and_gradients_equal_the_cpus_on_the_same_masks() {
    if !gpu("cuda_mlm_loss_and_gradients_equal_the_cpus_on_the_same_masks") {
        return;
    }
    let device = cuda();
    let run = |device: &Device| {
        let model = MaskedLm::load(&fixture("tiny-roberta-mlm"), true, device).unwrap();
        let vocab = model.config().vocab_size as u32;
        let (batch, seq) = (3, 24);
        let ids: Vec<u32> = (0..batch * seq).map(|i| 5 + (i as u32 * 37) % (vocab - 5)).collect();
        // Every fifth position is a masked target (its label the original id).
        let labels: Vec<i64> =
            ids.iter().enumerate().map(|(i, &id)| if i % 5 == 2 { id as i64 } else { -100 }).collect();
        let ids = Tensor::from_vec(ids, (batch, seq), device).unwrap();
        let mask = ids.ones_like().unwrap();
        let rng = DropoutRng::new(3);
        let loss = model.loss(&ids, &mask, &labels, Mode::Train(&rng)).unwrap();
        let grads = loss.backward().unwrap();
        let mut named: Vec<(String, Vec<f32>)> = model
            .named_vars()
            .into_iter()
            .filter_map(|(n, v)| grads.get(v.as_tensor()).map(|g| (n, flat(g))))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        (loss.to_dtype(DType::F32).unwrap().to_scalar::<f32>().unwrap(), named)
    };
    let (cpu_loss, cpu_grads) = run(&Device::Cpu);
    tf32(false);
    let (gpu_loss, gpu_grads) = run(&device);
    tf32(true);
    println!("MLM masked-token loss: cpu {cpu_loss:.6}, cuda {gpu_loss:.6}");
    assert!((cpu_loss - gpu_loss).abs() <= 1e-4, "MLM loss {cpu_loss} vs {gpu_loss}");
    assert!(!cpu_grads.is_empty());
    for ((n, c), (_, g)) in cpu_grads.iter().zip(&gpu_grads) {
        let d = max_diff(c, g);
        assert!(d <= 1e-4, "MLM gradient of {n} differs by {d}");
    }
}

/// Hooks that keep the epochs' logs.
#[cfg(feature = "clap")]
#[derive(Default)]
struct Logs(Vec<EpochLog>);

#[cfg(feature = "clap")]
impl RunHooks for Logs {
    fn progress(&mut self, _: Progress) {}
    fn epoch(&mut self, log: &EpochLog) {
        self.0.push(log.clone());
    }
    fn note(&mut self, line: &str) {
        println!("{line}");
    }
}

/// A new classifier on `encoder` (`init`, chunks of 32 tokens) beside `out`.
#[cfg(feature = "clap")]
fn new_model(out: &Path, encoder: &Path) -> PathBuf {
    let dir = out.with_extension("init");
    if !dir.exists() {
        let flags: Vec<String> = [
            "--encoder",
            encoder.to_str().unwrap(),
            "--labels",
            "prices,rain",
            "--chunk-size",
            "32",
            "--stride",
            "8",
            "--out",
            dir.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let spec = longread_train::run::flags::init_spec_from_flags(&flags).unwrap();
        longread_train::run::init_run(&spec).unwrap();
    }
    dir
}

/// `train` through the library, as the command line runs it, on `device` (its flags need
/// the `clap` feature, which the workspace's and scripts/build_cuda.sh's builds turn on), from
/// a classifier on the tiny RoBERTa fixture.
#[cfg(feature = "clap")]
fn train(out: &Path, device: DeviceChoice, extra: &[&str]) -> Vec<EpochLog> {
    train_on(&fixture("tiny-roberta"), out, device, extra)
}

/// [`train`] from a classifier on `encoder`.
#[cfg(feature = "clap")]
fn train_on(encoder: &Path, out: &Path, device: DeviceChoice, extra: &[&str]) -> Vec<EpochLog> {
    let mut args: Vec<String> = [
        "--train",
        fixture("synthetic/train.jsonl").to_str().unwrap(),
        "--dev",
        fixture("synthetic/test.jsonl").to_str().unwrap(),
        "--model",
        new_model(out, encoder).to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "5",
        "--lr",
        "1e-3",
        "--head-lr",
        "1e-2",
        "--warmup-ratio",
        "0",
        "--batch-size",
        "4",
        "--train-embeddings",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(extra.iter().map(|s| s.to_string()))
    .collect();
    args.retain(|a| !a.is_empty());
    let mut spec = longread_train::run::flags::spec_from_flags(&args).unwrap();
    spec.device = device;
    let mut logs = Logs::default();
    train_run(&mut spec, serde_json::Map::new(), &mut logs).unwrap();
    logs.0
}

/// Asserts that three bf16 epochs follow the three f32 ones within 2% of the training loss and
/// 5% of the dev loss (bf16 runs evaluate on the GPU's bf16 inference path, weights cast once:
/// `gpu_inference_copy`), printing each pair under `label`, with the epochs' peak GPU memory.
#[cfg(feature = "clap")]
fn assert_bf16_follows_f32(label: &str, f32s: &[EpochLog], bf16s: &[EpochLog]) {
    assert_eq!((f32s.len(), bf16s.len()), (3, 3), "{label}: three epochs each");
    for (a, b) in f32s.iter().zip(bf16s) {
        let relative = (a.train_loss - b.train_loss).abs() / a.train_loss;
        println!(
            "{label}, epoch {}: train loss f32 {:.5}, bf16 {:.5} ({:.2}% apart), peak GPU memory {:?} / {:?} bytes",
            a.epoch,
            a.train_loss,
            b.train_loss,
            100.0 * relative,
            a.peak_gpu_bytes,
            b.peak_gpu_bytes
        );
        assert!(relative <= 0.02, "{label}, epoch {}: bf16 loss {} vs f32 {}", a.epoch, b.train_loss, a.train_loss);
        let dev = (a.dev_loss.unwrap() - b.dev_loss.unwrap()).abs() / a.dev_loss.unwrap();
        println!(
            "{label}, epoch {}: dev loss f32 {:.5}, bf16 {:.5} ({:.2}% apart)",
            a.epoch,
            a.dev_loss.unwrap(),
            b.dev_loss.unwrap(),
            100.0 * dev
        );
        assert!(
            dev <= 0.05,
            "{label}, epoch {}: bf16 dev loss {} vs f32 {}",
            a.epoch,
            b.dev_loss.unwrap(),
            a.dev_loss.unwrap()
        );
    }
}

#[cfg(feature = "clap")]
#[test]
fn cuda_bf16_training_follows_the_f32_loss_curve() {
    if !gpu("cuda_bf16_training_follows_the_f32_loss_curve") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f32s = train(&dir.path().join("f32"), DeviceChoice::Cuda(0), &["--epochs", "3"]);
    let bf16s = train(&dir.path().join("bf16"), DeviceChoice::Cuda(0), &["--epochs", "3", "--precision", "bf16"]);
    assert_bf16_follows_f32("bf16 training", &f32s, &bf16s);
    assert!(f32s.iter().all(|a| a.peak_gpu_bytes.is_some_and(|b| b > 0)), "the epoch log reports peak GPU memory");
    assert!(f32s[2].train_loss < f32s[0].train_loss, "the loss falls");
}

/// Gradual unfreezing in bf16 (head, then the top layer over a cached frozen prefix, then all):
/// the caches are filled on the GPU's inference path, and the epochs follow the f32 run's.
/// (A bf16 prefix stream fed to those kernels with f32 products failed on an H200 on 2026-11-27,
/// in scripts/bench_unfreeze.sh.)
#[cfg(feature = "clap")]
#[test]
fn cuda_bf16_gradual_unfreezing_follows_the_f32_loss_curve() {
    if !gpu("cuda_bf16_gradual_unfreezing_follows_the_f32_loss_curve") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schedule = ["--epochs", "3", "--unfreeze", "0:head,1:top1,2:all"];
    let f32s = train(&dir.path().join("f32"), DeviceChoice::Cuda(0), &schedule);
    let bf16_flags: Vec<&str> = schedule.iter().copied().chain(["--precision", "bf16"]).collect();
    let bf16s = train(&dir.path().join("bf16"), DeviceChoice::Cuda(0), &bf16_flags);
    assert_bf16_follows_f32("gradual unfreezing", &f32s, &bf16s);
}

/// A random `tiny`-preset encoder (heads of 64: the fused attention's size) in `dir/encoder`,
/// with its attention dropout set to `attention_dropout` where given.
#[cfg(feature = "clap")]
fn tiny_preset_encoder(dir: &Path, attention_dropout: Option<f64>) -> PathBuf {
    let encoder = dir.join("encoder");
    let spec = longread_train::run::kit::EncoderSpec {
        preset: "tiny".into(),
        tokenizer: fixture("tiny-roberta"),
        out: encoder.clone(),
        seed: 3,
    };
    longread_train::run::kit::new_encoder_run(&spec).unwrap();
    if let Some(p) = attention_dropout {
        let config_path = encoder.join("config.json");
        let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
        config["attention_probs_dropout_prob"] = p.into();
        std::fs::write(&config_path, config.to_string()).unwrap();
    }
    encoder
}

/// The fused attention's backend that training runs, as benchmark rows name it.
fn train_backend() -> &'static str {
    if std::env::var("LONGREAD_CUDA_TRAIN_ATTENTION").is_ok_and(|v| v == "cudnn") {
        "cudnn"
    } else {
        "fa2"
    }
}

/// Training with FlashAttention-2 (the default, or cuDNN's attention with
/// `LONGREAD_CUDA_TRAIN_ATTENTION=cudnn`; skipped where it names another kernel): a `tiny`-preset encoder (heads of 64, the
/// kernels' size; attention dropout off, so that the f32 run's masks and the kernel's Philox
/// draws do not make the two runs differ by more than rounding), three bf16 epochs whose
/// attention runs on FlashAttention-2 follow the f32 epochs (its attention as before) within 2%.
#[cfg(feature = "clap")]
#[test]
fn cuda_bf16_training_with_flash_attention_follows_the_f32_loss_curve() {
    let test = "cuda_bf16_training_with_flash_attention_follows_the_f32_loss_curve";
    if !gpu(test) {
        return;
    }
    if let Ok(kernel) = std::env::var("LONGREAD_CUDA_TRAIN_ATTENTION") {
        if kernel != "fa2" && kernel != "cudnn" {
            println!("{test}: skipped: LONGREAD_CUDA_TRAIN_ATTENTION={kernel} names another kernel");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let encoder = tiny_preset_encoder(dir.path(), Some(0.0));
    let f32s = train_on(&encoder, &dir.path().join("f32"), DeviceChoice::Cuda(0), &["--epochs", "3"]);
    let bf16s =
        train_on(&encoder, &dir.path().join("bf16"), DeviceChoice::Cuda(0), &["--epochs", "3", "--precision", "bf16"]);
    assert_bf16_follows_f32("FlashAttention-2", &f32s, &bf16s);
}

/// Every tensor of a saved model, by name (sorted).
#[cfg(feature = "clap")]
type Weights = Vec<(String, Vec<f32>)>;

/// The [`Weights`] of the model saved in `dir`.
#[cfg(feature = "clap")]
fn weights(dir: &Path) -> Weights {
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let mut all: Weights = tensors.iter().map(|(n, t)| (n.clone(), flat(t))).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// The weights of two runs on the GPU from a classifier on `encoder` with `common` flags and two
/// epochs: one uninterrupted, one stopped after the first epoch and resumed (`--resume auto`).
#[cfg(feature = "clap")]
fn whole_and_resumed(encoder: &Path, dir: &Path, common: &[&str]) -> (Weights, Weights) {
    let common: Vec<&str> = ["--epochs", "2", "--keep", "last"].iter().copied().chain(common.iter().copied()).collect();
    let whole = dir.join("whole");
    train_on(encoder, &whole, DeviceChoice::Cuda(0), &common);
    let split = dir.join("split");
    let first = train_on(encoder, &split, DeviceChoice::Cuda(0), &[&common[..], &["--stop-after-epoch", "1"]].concat());
    assert_eq!(first.len(), 1);
    let rest = train_on(encoder, &split, DeviceChoice::Cuda(0), &[&common[..], &["--resume", "auto"]].concat());
    assert_eq!(rest.len(), 1);
    let (a, b) = (weights(&whole), weights(&split));
    assert_eq!(a.len(), b.len());
    (a, b)
}

/// Asserts that every tensor of `a` has the bits of `b`'s (`what`: the runs, for the message).
#[cfg(feature = "clap")]
fn assert_bit_identical(what: &str, a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) {
    for ((n, x), (_, y)) in a.iter().zip(b) {
        assert!(x == y, "{n} differs after resuming {what} (max {:.2e})", max_diff(x, y));
    }
    println!("resumed {what}: {} tensors bit-identical to the uninterrupted run", a.len());
}

#[cfg(feature = "clap")]
#[test]
fn a_gpu_run_stopped_after_an_epoch_and_resumed_on_the_gpu_ends_bit_identical() {
    if !gpu("a_gpu_run_stopped_after_an_epoch_and_resumed_on_the_gpu_ends_bit_identical") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = whole_and_resumed(&fixture("tiny-roberta"), dir.path(), &[]);
    assert_bit_identical("on the GPU", &a, &b);
}

/// As above in bf16 on an encoder whose attention runs the fused kernels (FlashAttention-2, or
/// cuDNN's with `LONGREAD_CUDA_TRAIN_ATTENTION=cudnn`) with their dropout on: the kernels'
/// Philox draws are seeded from the run's state and their backward pass is deterministic, so the
/// resumed run still ends bit-identical. (With `LONGREAD_CUDA_ATTENTION_BWD=fast` it may not:
/// the test says so and only reports the largest difference.)
#[cfg(feature = "clap")]
#[test]
fn a_bf16_gpu_run_on_the_fused_attention_resumed_on_the_gpu_ends_bit_identical() {
    let test = "a_bf16_gpu_run_on_the_fused_attention_resumed_on_the_gpu_ends_bit_identical";
    if !gpu(test) {
        return;
    }
    use longread_model::layers::cuda::{
        attention_backward_deterministic, cudnn_unavailable, fused_attention_ran_in_training,
    };
    let dir = tempfile::tempdir().unwrap();
    let encoder = tiny_preset_encoder(dir.path(), None);
    let _ = fused_attention_ran_in_training();
    let (a, b) = whole_and_resumed(&encoder, dir.path(), &["--precision", "bf16"]);
    // Training's record: the runs' dev evaluations run inference's backend
    // (LONGREAD_CUDA_ATTENTION), which a record of the last backend of either would report.
    let ran = fused_attention_ran_in_training();
    assert_eq!(ran, Some(train_backend()), "the fused attention ran in training ({:?})", cudnn_unavailable());
    if !attention_backward_deterministic() {
        let largest = a.iter().zip(&b).map(|((_, x), (_, y))| max_diff(x, y)).fold(0.0f32, f32::max);
        println!(
            "{test}: LONGREAD_CUDA_ATTENTION_BWD=fast: not held to bit-identity; largest difference {largest:.2e}"
        );
        return;
    }
    assert_bit_identical(&format!("a bf16 run on {} on the GPU", train_backend()), &a, &b);
}

/// Loss and every gradient of one HAN training step on the HAN fixture (3 documents with padded
/// words and one empty sentence, dropout on), by name.
fn han_step(device: &Device) -> (f32, Vec<(String, Vec<f32>)>) {
    let model = HanClassifier::load(&fixture("han"), device).unwrap();
    let (b, d, w) = (3, model.config().doc_size, model.config().sent_size);
    let ids: Vec<u32> = (0..b * d * w)
        .map(|i| {
            let (doc, sentence, word) = (i / (d * w), (i / w) % d, i % w);
            let padded = (doc == 1 && sentence == d - 1) || word + sentence % 3 >= w;
            if padded {
                0
            } else {
                2 + ((i * 7) % (model.config().vocab_size - 2)) as u32
            }
        })
        .collect();
    let ids = Tensor::from_vec(ids, (b, d, w), device).unwrap();
    let out = model.forward(&ids, Mode::Train(&DropoutRng::new(7))).unwrap();
    let loss = cross_entropy(&out.logits, &[0, 1, 2], None, device).unwrap();
    let grads = loss.backward().unwrap();
    let named = model.named_vars();
    let by_name = named.iter().filter_map(|(n, v)| grads.get(v.as_tensor()).map(|g| (n.clone(), flat(g)))).collect();
    (loss.to_scalar::<f32>().unwrap(), by_name)
}

/// The HAN on a GPU (whether its training should move there: `bench --workload han-step
/// --device cuda` times it): there its GRU time loop is composed of candle ops, on the
/// CPU it is one fused op. In f32 both give the same loss and the same gradient of every
/// parameter, dropout included.
#[test]
fn cuda_han_gradients_equal_the_cpus_fused_time_loop() {
    if !gpu("cuda_han_gradients_equal_the_cpus_fused_time_loop") {
        return;
    }
    let (cpu_loss, cpu_grads) = han_step(&Device::Cpu);
    tf32(false);
    let (gpu_loss, gpu_grads) = han_step(&cuda());
    tf32(true);
    assert_eq!(cpu_grads.len(), 25, "every GRU, attention, embedding and classifier weight");
    let worst = assert_same_step("HAN", (cpu_loss, &cpu_grads), (gpu_loss, &gpu_grads));
    println!("HAN: loss {cpu_loss:.6} vs {gpu_loss:.6}, {} gradients max abs diff {worst:.2e}", cpu_grads.len());
}

/// One op applied to its three inputs.
type ApplyOp<'a> = &'a dyn Fn(&Tensor, &Tensor, &Tensor) -> Tensor;

/// Values and input gradients of one op on `device` (inputs made on the CPU, moved there; the
/// first two inputs in `dtype`, the third f32) under `loss = Σ y ⊙ w`.
fn op_and_gradients(device: &Device, dtype: DType, inputs: &[Tensor; 3], w: &Tensor, apply: ApplyOp) -> Vec<Vec<f32>> {
    let moved: Vec<candle_core::Var> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.to_device(device).unwrap();
            candle_core::Var::from_tensor(&if i < 2 { t.to_dtype(dtype).unwrap() } else { t }).unwrap()
        })
        .collect();
    let y = apply(moved[0].as_tensor(), moved[1].as_tensor(), moved[2].as_tensor());
    let w = w.to_device(device).unwrap().to_dtype(y.dtype()).unwrap();
    let grads = (&y * &w).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
    let mut out = vec![flat(&y)];
    // The attention's third input (the key mask) has no gradient.
    out.extend(moved.iter().filter_map(|v| grads.get(v.as_tensor()).map(flat)));
    out
}

/// The training ops of the GPU route, on the GPU against their CPU reference
/// kernels: `AttentionTrain` (q/k/v split, scores, probabilities with dropout, merged heads),
/// `ResidualNormTrain` (bias, dropout, residual, LayerNorm) and `GeluDenseTrain` (bias, GELU,
/// second product), values and input gradients,
/// f32 (TF32 off) to 1e-4 and bf16 to 3e-2 of each tensor's scale, at 96 and 256 keys (both
/// kernels of the attention probabilities). A failure here names the op
/// that the whole-model gradient tests above would only show as a wrong gradient.
#[test]
fn cuda_training_ops_equal_their_cpu_reference() {
    if !gpu("cuda_training_ops_equal_their_cpu_reference") {
        return;
    }
    use longread_model::layers::cuda::{AttentionTrain, GeluDenseTrain, ResidualNormTrain};
    use longread_model::layers::dropout::SeededDropout;
    tf32(false);
    let cpu = Device::Cpu;
    // 96 keys: the probabilities' row-strided kernels; 256: their register kernels (f32 and bf16).
    for seq in [96usize, 256] {
        let (batch, heads, head_size) = (2usize, 4usize, 16usize);
        let hidden = heads * head_size;
        let randn = |shape: &[usize], std: f32| Tensor::randn(0f32, std, shape, &cpu).unwrap();
        let mut mask = vec![0f32; batch * seq];
        mask[seq - 20..seq].iter_mut().for_each(|m| *m = -1e30);
        let attention_inputs = [
            randn(&[batch * seq, 3 * hidden], 1.0),
            randn(&[3 * hidden], 0.3),
            Tensor::from_vec(mask, (batch, seq), &cpu).unwrap(),
        ];
        let norm_inputs =
            [randn(&[batch * seq, hidden], 1.0), randn(&[batch * seq, hidden], 1.0), randn(&[3, hidden], 0.5)];
        let ffn_inputs =
            [randn(&[batch * seq, 4 * hidden], 1.0), randn(&[hidden, 4 * hidden], 0.2), randn(&[4 * hidden], 0.3)];
        let w = randn(&[batch * seq, hidden], 1.0);
        let dropout = SeededDropout { p: 0.1, seed: 77 };
        let attention =
            AttentionTrain { heads, scale: 0.25, dropout: (dropout.seed, dropout.threshold(), dropout.scale()) };
        let norm = ResidualNormTrain { eps: 1e-5, dropout: Some(dropout) };
        let apply_attention = |a: &Tensor, b: &Tensor, c: &Tensor| {
            a.apply_op3(&b.to_dtype(DType::F32).unwrap(), c, attention).unwrap().reshape((batch * seq, hidden)).unwrap()
        };
        let apply_norm = |a: &Tensor, b: &Tensor, c: &Tensor| a.apply_op3(b, c, norm).unwrap();
        // Inputs in the order (h, w, bias): the first two take the test's dtype.
        let apply_ffn = |h: &Tensor, w: &Tensor, bias: &Tensor| h.apply_op3(bias, w, GeluDenseTrain).unwrap();
        let cases: [(&str, &[Tensor; 3], ApplyOp); 3] = [
            ("attention-train", &attention_inputs, &apply_attention),
            ("residual-norm-train", &norm_inputs, &apply_norm),
            ("gelu-dense-train", &ffn_inputs, &apply_ffn),
        ];
        for (name, inputs, apply) in cases {
            let reference = op_and_gradients(&cpu, DType::F32, inputs, &w, apply);
            for (dtype, limit) in [(DType::F32, 1e-4f32), (DType::BF16, 3e-2)] {
                let got = op_and_gradients(&cuda(), dtype, inputs, &w, apply);
                assert_eq!(got.len(), reference.len(), "{name} {dtype:?}: output and gradients");
                for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
                    let scale = if dtype == DType::F32 { 1.0 } else { r.iter().fold(1e-6f32, |m, v| m.max(v.abs())) };
                    let d = max_diff(g, r) / scale;
                    println!(
                        "seq {seq}, {name} {dtype:?} tensor {i}: max difference {d:.2e} (of the scale {scale:.2e})"
                    );
                    assert!(
                        d < limit,
                        "seq {seq}, {name} {dtype:?} tensor {i} (output, then gradients): {d:e} ≥ {limit:e}"
                    );
                }
            }
        }
    }
}

/// FlashAttention-2 in training (`FlashAttentionTrain`, `LONGREAD_CUDA_TRAIN_ATTENTION=fa2`):
/// on the GPU in bf16, its output and the gradients of its q/k/v product and bias equal its f32 CPU loops
/// on the same bf16-rounded product, to 3e-2 of each tensor's scale, for heads of 64 (12 × 512
/// keys) and 32 (4 × 200 keys: not a multiple of the kernels' blocks), a full, a half-padded and
/// a one-token sequence. With dropout (which only the kernel draws): the same seed gives the
/// same output, another seed another one, and the gradient is the derivative of the loss along
/// a direction (central differences along the gradient's signs, to 3%). FlashAttention-2's
/// backward gives the same bits twice, with its key blocks split over several accumulators and
/// with one per sequence and head. With `LONGREAD_CUDA_TRAIN_ATTENTION=cudnn` the same op on
/// cuDNN, which must then be what ran.
#[test]
fn flash_attention_training_equals_its_cpu_reference() {
    if !gpu("flash_attention_training_equals_its_cpu_reference") {
        return;
    }
    use longread_model::layers::cuda::{cudnn_unavailable, fused_attention_ran, FlashAttentionTrain, KeyLengths};
    let backend = train_backend();
    let cpu = Device::Cpu;
    // Sequences: a full one, a half-padded one, a one-token one, then full ones; 3 × 12 and 3 × 4
    // (sequences × heads) split FlashAttention-2's deterministic backward over the key blocks,
    // 12 × 12 fills the GPU with one block per sequence and head. The last: full sequences only
    // (no padding: the gradient's buffer is not zeroed first, since every row is written).
    for (heads, d, seq, sequences, padded) in [
        (12usize, 64usize, 512usize, 3usize, true),
        (4, 32, 200, 3, true),
        (12, 64, 512, 12, true),
        (12, 64, 512, 4, false),
    ] {
        let hidden = heads * d;
        let first: &[usize] = if padded { &[seq, seq / 2 + 3, 1] } else { &[] };
        let real: Vec<usize> = first.iter().copied().chain(std::iter::repeat(seq)).take(sequences).collect();
        let rows: Vec<u32> = real.iter().flat_map(|&n| (0..seq).map(move |i| u32::from(i < n))).collect();
        let mask = Tensor::from_vec(rows, (real.len(), seq), &cpu).unwrap();
        let n = real.len() * seq;
        let qkv = Tensor::randn(0f32, 1.0, (n, 3 * hidden), &cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let bias = Tensor::randn(0f32, 0.3, 3 * hidden, &cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (n, hidden), &cpu).unwrap();
        let scale = 1.0 / (d as f32).sqrt();
        // Output and gradient of Σ y ⊙ w on `device`, from the bf16 product (f32 on the CPU).
        let run = |device: &Device, dropout: Option<(f32, u64)>| {
            let lengths = KeyLengths::right_padded(&mask.to_device(device).unwrap()).unwrap().unwrap();
            let x = qkv.to_device(device).unwrap();
            let x = if device.is_cpu() { x.to_dtype(DType::F32).unwrap() } else { x };
            let x = candle_core::Var::from_tensor(&x).unwrap();
            let b = candle_core::Var::from_tensor(&bias.to_device(device).unwrap()).unwrap();
            let op = FlashAttentionTrain::new(heads, scale, lengths, dropout);
            let y = op.forward(x.as_tensor(), b.as_tensor()).unwrap();
            let loss = (y.to_dtype(DType::F32).unwrap() * w.to_device(device).unwrap()).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            let (g, g_bias) = (grads.get(x.as_tensor()).unwrap(), grads.get(b.as_tensor()).unwrap());
            (flat(&y), flat(g), flat(g_bias))
        };
        let (y_ref, g_ref, b_ref) = run(&cpu, None);
        let _ = fused_attention_ran();
        let (y, g, b) = run(&cuda(), None);
        assert_eq!(fused_attention_ran(), Some(backend), "the backend that ran ({:?})", cudnn_unavailable());
        for (what, got, reference) in [("output", &y, &y_ref), ("gradient", &g, &g_ref), ("bias gradient", &b, &b_ref)]
        {
            let scale = reference.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
            let diff = max_diff(got, reference) / scale;
            println!("fused attention training ({backend}), {heads} heads of {d}, {seq} keys, {what}: {diff:.2e} of the scale");
            assert!(diff < 3e-2, "{heads} heads of {d}, {seq} keys, {what}: {diff:e} of the scale");
        }
        // The same step twice gives the same bits: the backward pass is deterministic on either
        // backend by default (LONGREAD_CUDA_ATTENTION_BWD=fast is not: FlashAttention-2's blocks
        // add into one accumulator in any order, and so do cuDNN's default engine's).
        let (y_again, g_again, b_again) = run(&cuda(), None);
        let deterministic = longread_model::layers::cuda::attention_backward_deterministic();
        let same = y_again == y && g_again == g && b_again == b;
        println!("fused attention training ({backend}), {sequences} x {heads} heads: the same bits twice: {same}");
        if deterministic {
            assert!(same, "{sequences} sequences x {heads} heads: two runs of the same step differ");
        }
        let (y1, g1, _) = run(&cuda(), Some((0.1, 5)));
        let (y2, _, _) = run(&cuda(), Some((0.1, 5)));
        let (y3, _, _) = run(&cuda(), Some((0.1, 6)));
        assert_eq!(y1, y2, "the same seed must give the same dropout");
        assert!(max_diff(&y1, &y3) > 0.0 && max_diff(&y1, &y) > 0.0, "dropout must change the output");
        // Central differences of the loss along u = sign(gradient) (a direction in which the
        // change adds up coherently, far above the bf16 rounding of the output): steps of 2⁻⁵
        // keep the perturbed product exact in bf16 for elements of magnitude ≥ 2⁻⁵.
        let h = 1.0 / 32.0;
        let u: Vec<f32> = g1
            .iter()
            .map(|&g| {
                if g > 0.0 {
                    1.0
                } else if g < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            })
            .collect();
        let u = Tensor::from_vec(u.clone(), (n, 3 * hidden), &cpu).unwrap();
        let loss_at = |sign: f64| {
            let x = (qkv.to_dtype(DType::F32).unwrap() + (&u * (h * sign)).unwrap()).unwrap();
            let lengths = KeyLengths::right_padded(&mask.to_device(&cuda()).unwrap()).unwrap().unwrap();
            let x = x.to_dtype(DType::BF16).unwrap().to_device(&cuda()).unwrap();
            let b = bias.to_device(&cuda()).unwrap();
            let y = FlashAttentionTrain::new(heads, scale, lengths, Some((0.1, 5))).forward(&x, &b).unwrap();
            (y.to_dtype(DType::F32).unwrap() * w.to_device(&cuda()).unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        let numeric = (loss_at(1.0) - loss_at(-1.0)) / (2.0 * h as f32);
        let analytic: f32 = g1.iter().map(|g| g.abs()).sum();
        let rel = (numeric - analytic).abs() / analytic.max(1e-3);
        println!("fused attention training ({backend}) with dropout: directional derivative {analytic:.4} against {numeric:.4}");
        assert!(
            rel < 0.03,
            "{heads} heads of {d}: gradient along sign(g) {analytic} against central differences {numeric}"
        );
    }
}

/// Training's q/k/v projection with its bias in cuBLASLt's epilogue (`LinearBiasTrain`, then
/// the attention over the biased product: `forward_biased`), the default:
/// on the GPU in bf16, the attention's output and the gradients of the layer input, the weight
/// and the bias equal the route it replaced (the product unbiased, the attention op adding the
/// bias in its own passes) to 2e-2 of each tensor's scale (the epilogue rounds the bias to bf16
/// and the sum once; the old route rounded the product, then the sum); two runs bit-identical;
/// the op alone equals its f32 CPU reference on the same bf16 values to 1e-2 of the scale.
#[test]
fn cuda_qkv_bias_in_the_product_equals_the_attention_adding_it() {
    if !gpu("cuda_qkv_bias_in_the_product_equals_the_attention_adding_it") {
        return;
    }
    use candle_core::Var;
    use longread_model::layers::cuda::{FlashAttentionTrain, KeyLengths, LinearBiasTrain};
    let cpu = Device::Cpu;
    let (heads, d, seq, sequences) = (12usize, 64usize, 512usize, 4usize);
    let (hidden, n) = (heads * d, sequences * seq);
    let real = [seq, seq, seq / 2 + 7, 3];
    let rows: Vec<u32> = real.iter().flat_map(|&r| (0..seq).map(move |i| u32::from(i < r))).collect();
    let mask = Tensor::from_vec(rows, (sequences, seq), &cpu).unwrap();
    let bf16 = |t: Tensor| t.to_dtype(DType::BF16).unwrap();
    let x = bf16(Tensor::randn(0f32, 1.0, (n, hidden), &cpu).unwrap());
    let weight = bf16(Tensor::randn(0f32, 0.04, (3 * hidden, hidden), &cpu).unwrap());
    let bias = Tensor::randn(0f32, 0.3, 3 * hidden, &cpu).unwrap();
    let w_out = Tensor::randn(0f32, 1.0, (n, hidden), &cpu).unwrap();
    let scale = 1.0 / (d as f32).sqrt();
    // Output and the gradients of x, the weight and the bias, with the bias in the product or not.
    let run = |in_product: bool| {
        let device = cuda();
        let lengths = KeyLengths::right_padded(&mask.to_device(&device).unwrap()).unwrap().unwrap();
        let (xv, wv, bv) = (
            Var::from_tensor(&x.to_device(&device).unwrap()).unwrap(),
            Var::from_tensor(&weight.to_device(&device).unwrap()).unwrap(),
            Var::from_tensor(&bias.to_device(&device).unwrap()).unwrap(),
        );
        let op = FlashAttentionTrain::new(heads, scale, lengths, Some((0.1, 11)));
        let y = if in_product {
            let product = xv.as_tensor().apply_op3(wv.as_tensor(), bv.as_tensor(), LinearBiasTrain).unwrap();
            op.forward_biased(&product).unwrap()
        } else {
            let product = xv.as_tensor().matmul(&wv.as_tensor().t().unwrap()).unwrap();
            op.forward(&product, bv.as_tensor()).unwrap()
        };
        let loss = (y.to_dtype(DType::F32).unwrap() * w_out.to_device(&device).unwrap()).unwrap();
        let grads = loss.sum_all().unwrap().backward().unwrap();
        let g = |v: &Var| flat(grads.get(v.as_tensor()).unwrap());
        [flat(&y), g(&xv), g(&wv), g(&bv)]
    };
    let (ours, before, again) = (run(true), run(false), run(true));
    assert!(ours == again, "two runs with the bias in the product differ");
    for (what, got, reference) in ["output", "input gradient", "weight gradient", "bias gradient"]
        .iter()
        .zip(&ours)
        .zip(&before)
        .map(|((w, a), b)| (w, a, b))
    {
        let scale = reference.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let diff = max_diff(got, reference) / scale;
        println!("q/k/v bias in the product, {what}: {diff:.2e} of the scale from the bias in the attention op");
        assert!(diff < 2e-2, "{what}: {diff:e} of the scale");
    }
    // The op alone against its CPU reference (f32 on the same bf16-rounded values).
    let on = |device: &Device, dtype: DType| {
        let t = |t: &Tensor| t.to_device(device).unwrap().to_dtype(dtype).unwrap();
        flat(&t(&x).apply_op3(&t(&weight), &bias.to_device(device).unwrap(), LinearBiasTrain).unwrap())
    };
    let (gpu_out, cpu_out) = (on(&cuda(), DType::BF16), on(&cpu, DType::F32));
    let scale = cpu_out.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    let diff = max_diff(&gpu_out, &cpu_out) / scale;
    println!("linear-bias-train, bf16 on the GPU against f32 on the CPU: {diff:.2e} of the scale");
    assert!(diff < 1e-2, "linear-bias-train: {diff:e} of the scale");
}

/// A cast weight's bf16 gradient added into its f32 total in place (`AddInto`, candle's
/// cast-accumulate hook, the default): on the GPU, over two parts' backward
/// passes through one shared cast of a roberta-base-sized weight, the total has the bits of
/// casting and adding (each part's gradient alone, then summed), and the op alone the CPU's bits.
#[test]
fn cuda_cast_gradients_add_into_their_totals_in_place() {
    if !gpu("cuda_cast_gradients_add_into_their_totals_in_place") {
        return;
    }
    use candle_core::Var;
    use longread_model::layers::cuda::{accumulate_cast, install_cast_accumulate};
    let device = cuda();
    let w =
        Var::from_tensor(&Tensor::randn(0f32, 0.05, (3072, 768), &Device::Cpu).unwrap().to_device(&device).unwrap())
            .unwrap();
    let parts: Vec<Tensor> = (0..2)
        .map(|_| Tensor::randn(0f32, 1.0, (1024, 3072), &Device::Cpu).unwrap().to_device(&device).unwrap())
        .collect();
    let cast = w.as_tensor().to_dtype(DType::BF16).unwrap();
    let loss = |x: &Tensor| {
        let y = x.to_dtype(DType::BF16).unwrap().matmul(&cast).unwrap();
        y.to_dtype(DType::F32).unwrap().sqr().unwrap().sum_all().unwrap()
    };
    let g0 = loss(&parts[0]).backward().unwrap().get(w.as_tensor()).unwrap().clone();
    let g1 = loss(&parts[1]).backward().unwrap().get(w.as_tensor()).unwrap().clone();
    let want = flat(&(&g0 + &g1).unwrap());
    install_cast_accumulate();
    let grads = loss(&parts[0]).backward().unwrap();
    let grads = loss(&parts[1]).backward_into(grads).unwrap();
    let total = flat(grads.get(w.as_tensor()).unwrap());
    println!("cast gradients added in place over two parts: largest difference {:.2e}", max_diff(&total, &want));
    assert!(total == want, "the in-place total differs from cast-then-add");
    // The op alone: GPU and CPU give the same bits.
    let start = Tensor::randn(0f32, 1.0, 100_003, &Device::Cpu).unwrap();
    let grad = Tensor::randn(0f32, 1.0, 100_003, &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
    let added = |device: &Device| {
        let total = start.to_device(device).unwrap().affine(1.0, 0.0).unwrap();
        assert!(accumulate_cast(&total, &grad.to_device(device).unwrap()).unwrap());
        flat(&total)
    };
    assert!(added(&device) == added(&Device::Cpu), "the op's GPU and CPU sums differ");
}

/// The coalesced column sums of the GPU route's backward passes (`ColumnSum`: bias, γ and β
/// gradients) equal the CPU's on the same values, f32 and bf16, for shapes with one split and
/// with many, and widths that are not a multiple of the kernel's 256-column blocks; run twice,
/// bit-identical (the splits are added in order: resumed runs stay bit-identical).
#[test]
fn cuda_column_sums_equal_the_cpus() {
    if !gpu("cuda_column_sums_equal_the_cpus") {
        return;
    }
    use longread_model::layers::cuda::column_sum;
    for (rows, cols) in [(5usize, 3usize), (10240, 768), (10240, 3072), (1000, 2304), (70000, 300)] {
        for dtype in [DType::F32, DType::BF16] {
            let x = Tensor::randn(0f32, 1.0, (rows, cols), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
            let reference = flat(&column_sum(&x).unwrap());
            let on_gpu = x.to_device(&cuda()).unwrap();
            let (a, b) = (flat(&column_sum(&on_gpu).unwrap()), flat(&column_sum(&on_gpu).unwrap()));
            assert_eq!(a, b, "{rows}x{cols} {dtype:?}: two runs differ");
            let scale = (rows as f32).sqrt();
            let diff = max_diff(&a, &reference) / scale;
            println!("column sums {rows}x{cols} {dtype:?}: max difference {diff:.2e} of √rows");
            assert!(diff < 1e-4, "{rows}x{cols} {dtype:?}: {diff:e}");
        }
    }
}

/// The GPU route's embedding lookups (`EmbeddingTrain`): on the GPU the rows and the table's
/// gradient equal the CPU's (the same sums in the same order), for a roberta-base-sized table
/// and 10,240 ids with many repeats, and a token-type table's (one id at 7 of 9 positions:
/// summed in pieces, two launches) (id 1 as the padding id: no gradient), from f32 and bf16
/// gradients; two runs bit-identical, and the same bits with the ids grouped in the forward
/// pass from their host copy (as the encoder passes them) instead of read back.
#[test]
fn cuda_embedding_lookups_equal_the_cpus() {
    if !gpu("cuda_embedding_lookups_equal_the_cpus") {
        return;
    }
    use longread_model::layers::cuda::embedding_lookup;
    let (vocab, cols, n) = (50265usize, 768usize, 10240usize);
    let table = Tensor::randn(0f32, 1.0, (vocab, cols), &Device::Cpu).unwrap();
    // Ids from a small range (~20 repeats each: one piece per id) and a few from the whole
    // table; then a token-type table's ids (one id at nearly every position: summed in pieces,
    // two launches), the padding id among them.
    let spread: Vec<u32> =
        (0..n as u32).map(|i| if i % 97 == 0 { (i * 4_099) % vocab as u32 } else { (i * 31) % 500 }).collect();
    let token_types: Vec<u32> = (0..n as u32).map(|i| [0, 0, 0, 0, 0, 0, 0, 2, 1][i as usize % 9]).collect();
    for (ids, dtype) in
        [(&spread, DType::F32), (&spread, DType::BF16), (&token_types, DType::F32), (&token_types, DType::BF16)]
    {
        let ids = Tensor::from_vec(ids.clone(), (20, n / 20), &Device::Cpu).unwrap();
        let w = Tensor::randn(0f32, 1.0, (20, n / 20, cols), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
        let run_with = |device: &Device, host: Option<&Tensor>| {
            let table = candle_core::Var::from_tensor(&table.to_device(device).unwrap()).unwrap();
            let rows = embedding_lookup(table.as_tensor(), &ids.to_device(device).unwrap(), host, Some(1)).unwrap();
            let loss = (rows.to_dtype(dtype).unwrap() * w.to_device(device).unwrap()).unwrap();
            let loss = loss.to_dtype(DType::F32).unwrap().sum_all().unwrap();
            let grad = loss.backward().unwrap().get(table.as_tensor()).unwrap().clone();
            (flat(&rows), flat(&grad))
        };
        let run = |device: &Device| run_with(device, None);
        let (rows_cpu, grad_cpu) = run(&Device::Cpu);
        let (rows_gpu, grad_gpu) = run(&cuda());
        let (_, again) = run(&cuda());
        let (_, grouped_on_host) = run_with(&cuda(), Some(&ids));
        assert_eq!(rows_gpu, rows_cpu, "{dtype:?}: looked-up rows");
        assert_eq!(grad_gpu, again, "{dtype:?}: two runs differ");
        assert_eq!(grouped_on_host, grad_gpu, "{dtype:?}: ids grouped from the host copy");
        let diff = max_diff(&grad_gpu, &grad_cpu);
        let most = ids.flatten_all().unwrap().to_vec1::<u32>().unwrap().iter().filter(|&&id| id == 0).count();
        println!(
            "embedding lookups, {dtype:?} gradient ({most} of {n} at id 0): table gradient max difference {diff:.2e}"
        );
        assert!(diff <= 1e-4, "{dtype:?}: table gradient differs by {diff}");
    }
}

/// The end of a transformer block in training (`ResidualNormTrain`) at roberta-base's and
/// MiniLM's widths, where the GPU runs its register kernels (the forward pass and the backward
/// pass as one kernel, `residual_norm_train_grad_regs`): values and the gradients of the
/// product, the residual and the parameters equal the CPU op's (f32, with and without dropout,
/// the same mask), and two backward runs are bit-identical (the rows' sums are added in order).
/// bf16 on the GPU follows f32 to bf16's rounding.
#[test]
fn cuda_block_end_gradients_equal_the_cpus() {
    if !gpu("cuda_block_end_gradients_equal_the_cpus") {
        return;
    }
    use candle_core::Var;
    use longread_model::layers::cuda::ResidualNormTrain;
    use longread_model::layers::dropout::SeededDropout;
    for (rows, cols) in [(1000usize, 768usize), (333, 384)] {
        let random = |r: usize, c: usize, std: f32| Tensor::randn(0f32, std, (r, c), &Device::Cpu).unwrap();
        let (x, residual, params) = (random(rows, cols, 1.0), random(rows, cols, 2.0), random(3, cols, 0.5));
        let w = random(rows, cols, 1.0);
        for dropout in [None, Some(SeededDropout { p: 0.1, seed: 77 })] {
            let op = ResidualNormTrain { eps: 1e-5, dropout };
            let run = |device: &Device, dtype: DType| {
                let var =
                    |t: &Tensor| Var::from_tensor(&t.to_device(device).unwrap().to_dtype(dtype).unwrap()).unwrap();
                let (x, residual) = (var(&x), var(&residual));
                let params = Var::from_tensor(&params.to_device(device).unwrap()).unwrap();
                let y = x.as_tensor().apply_op3(residual.as_tensor(), params.as_tensor(), op).unwrap();
                let w = w.to_device(device).unwrap().to_dtype(dtype).unwrap();
                let loss =
                    (y.to_dtype(DType::F32).unwrap() * w.to_dtype(DType::F32).unwrap()).unwrap().sum_all().unwrap();
                let grads = loss.backward().unwrap();
                let grad = |v: &Var| flat(grads.get(v.as_tensor()).unwrap());
                [flat(&y), grad(&x), grad(&residual), grad(&params)]
            };
            let cpu = run(&Device::Cpu, DType::F32);
            let (gpu, again) = (run(&cuda(), DType::F32), run(&cuda(), DType::F32));
            let names = ["output", "d product", "d residual", "d params"];
            for (i, name) in names.iter().enumerate() {
                assert_eq!(gpu[i], again[i], "{rows}x{cols} {dropout:?} {name}: two runs differ");
                // The parameters' gradients sum `rows` terms.
                let scale = if i == 3 { (rows as f32).sqrt() } else { 1.0 };
                let diff = max_diff(&gpu[i], &cpu[i]) / scale;
                println!("block end {rows}x{cols} {dropout:?} {name}: f32 max difference {diff:.2e}");
                assert!(diff < 1e-4, "{rows}x{cols} {dropout:?} {name}: {diff:e}");
            }
            let bf16 = run(&cuda(), DType::BF16);
            for (i, name) in names.iter().enumerate() {
                let largest = cpu[i].iter().fold(0f32, |m, v| m.max(v.abs()));
                let diff = max_diff(&bf16[i], &cpu[i]) / largest;
                println!("block end {rows}x{cols} {dropout:?} {name}: bf16 max difference {diff:.2e} of the largest");
                assert!(diff < 2e-2, "{rows}x{cols} {dropout:?} {name} bf16: {diff:e} of the largest");
            }
        }
    }
}

/// The global gradient norm's sum of squares in one launch (`layers::cuda::sum_of_squares`):
/// over gradients of every size around its 32,768-element spans it equals the CPU's f64 sum to
/// 1e-6 relative, gives the same bits twice, is NaN where a gradient holds a NaN, and leaves a
/// non-contiguous tensor to the caller; `clip::grad_norm` on the GPU equals it on the CPU.
#[test]
fn cuda_gradient_norm_in_one_launch_equals_the_cpus() {
    if !gpu("cuda_gradient_norm_in_one_launch_equals_the_cpus") {
        return;
    }
    use longread_model::layers::cuda::sum_of_squares;
    let device = cuda();
    let sizes = [1usize, 7, 32_768, 32_769, 100_003, 768 * 3072];
    let host: Vec<Tensor> = sizes.iter().map(|&n| Tensor::randn(0f32, 1.0, n, &Device::Cpu).unwrap()).collect();
    let on_gpu: Vec<Tensor> = host.iter().map(|t| t.to_device(&device).unwrap()).collect();
    let refs: Vec<&Tensor> = on_gpu.iter().collect();
    let expected: f64 =
        host.iter().flat_map(|t| t.to_vec1::<f32>().unwrap()).map(|v| f64::from(v) * f64::from(v)).sum();
    let ours = sum_of_squares(&refs).unwrap().expect("f32, contiguous, on one GPU");
    let relative = (ours - expected).abs() / expected;
    println!("sum of squares in one launch: {ours} against the CPU's {expected} (relative {relative:.2e})");
    assert!(relative <= 1e-6, "relative difference {relative}");
    assert_eq!(sum_of_squares(&refs).unwrap().unwrap().to_bits(), ours.to_bits(), "two runs differ");
    let mut with_nan = host[3].to_vec1::<f32>().unwrap();
    with_nan[32_768] = f32::NAN;
    let nan = Tensor::from_vec(with_nan, sizes[3], &device).unwrap();
    assert!(sum_of_squares(&[&on_gpu[0], &nan]).unwrap().unwrap().is_nan());
    let matrix = Tensor::randn(0f32, 1.0, (64, 48), &device).unwrap();
    assert_eq!(sum_of_squares(&[&matrix.t().unwrap()]).unwrap(), None, "not contiguous: the caller's");
    let cpu_norm = longread_train::clip::grad_norm(host.iter()).unwrap();
    let gpu_norm = longread_train::clip::grad_norm(on_gpu.iter()).unwrap();
    assert!((cpu_norm - gpu_norm).abs() <= 1e-6 * cpu_norm, "norm {gpu_norm} against the CPU's {cpu_norm}");
}

/// AdamW over many parameters in one launch (`layers::cuda::adamw_multi`, the optimizer's GPU
/// path) gives the bits of a launch per parameter (`AdamWStep`), for parameters of sizes around
/// its 32,768-element spans with their own constants, over three steps.
#[test]
fn cuda_adamw_in_one_launch_equals_a_launch_per_parameter() {
    if !gpu("cuda_adamw_in_one_launch_equals_a_launch_per_parameter") {
        return;
    }
    use longread_model::layers::cuda::{adamw_multi, AdamWParts};
    use longread_model::layers::AdamWStep;
    let device = cuda();
    let sizes = [1usize, 1000, 32_768, 32_769, 100_003];
    let tensor = |n: usize, scale: f64| (Tensor::randn(0f32, 1.0, n, &device).unwrap() * scale).unwrap();
    let params: Vec<Tensor> = sizes.iter().map(|&n| tensor(n, 1.0)).collect();
    let grads: Vec<Vec<Tensor>> = (0..3).map(|_| sizes.iter().map(|&n| tensor(n, 1e-2)).collect()).collect();
    let copy = |ts: &[Tensor]| -> Vec<Tensor> { ts.iter().map(|t| t.copy().unwrap()).collect() };
    let zeros =
        || -> Vec<Tensor> { sizes.iter().map(|&n| Tensor::zeros((2, n), DType::F32, &device).unwrap()).collect() };
    let step = |i: usize, t: u64| AdamWStep {
        grad_scale: 0.7,
        decay: 1.0 - 1e-5 * i as f32,
        one_minus_beta1: 0.1,
        beta2: 0.999,
        one_minus_beta2: 0.001,
        bias2_sqrt: (1.0 - 0.999f64.powi(t as i32)).sqrt() as f32,
        eps: 1e-8,
        step_size: (1e-3 * (1 + i) as f64 / (1.0 - 0.9f64.powi(t as i32))) as f32,
    };
    let (one_launch, per_param) = (copy(&params), copy(&params));
    let (moments_one, moments_per) = (zeros(), zeros());
    for (t, g) in grads.iter().enumerate() {
        let parts: Vec<AdamWParts> = (0..sizes.len())
            .map(|i| AdamWParts {
                param: &one_launch[i],
                grad: &g[i],
                moments: &moments_one[i],
                step: step(i, t as u64 + 1),
            })
            .collect();
        assert!(adamw_multi(&parts).unwrap(), "applies to f32 contiguous tensors on one GPU");
        for i in 0..sizes.len() {
            per_param[i].inplace_op3(&g[i], &moments_per[i], &step(i, t as u64 + 1)).unwrap();
        }
    }
    for i in 0..sizes.len() {
        assert_eq!(flat(&one_launch[i]), flat(&per_param[i]), "parameter of {} elements", sizes[i]);
        assert_eq!(flat(&moments_one[i]), flat(&moments_per[i]), "moments of {} elements", sizes[i]);
    }
    assert_ne!(flat(&one_launch[4]), flat(&params[4]), "the parameters moved");
}

/// The benchmark's head start: a hold of the GPU lasts what was asked by the GPU's own clock
/// (the marks around it), and the host is not held by queueing it.
#[test]
fn a_gpu_hold_lasts_what_was_asked_on_the_gpus_clock() {
    use longread_model::layers::cuda::{hold_gpu, GpuMark};
    use std::time::{Duration, Instant};
    if !gpu("a_gpu_hold_lasts_what_was_asked_on_the_gpus_clock") {
        return;
    }
    let device = cuda();
    device.synchronize().unwrap();
    let before = GpuMark::now(&device).unwrap();
    let queued = Instant::now();
    hold_gpu(&device, Duration::from_millis(50)).unwrap();
    let queue_time = queued.elapsed();
    let after = GpuMark::now(&device).unwrap();
    let held = before.seconds_until(&after).unwrap();
    assert!((0.05..0.2).contains(&held), "held {held} s for 0.05 s");
    assert!(queue_time < Duration::from_millis(25), "queueing the hold took {queue_time:?}");
    // A mark right after another: (almost) no GPU time between them.
    let (a, b) = (GpuMark::now(&device).unwrap(), GpuMark::now(&device).unwrap());
    assert!(a.seconds_until(&b).unwrap() < 0.01);
}

/// `bench --workload train` on a GPU times the passes behind a hold too: GPU time that is
/// positive and not above the ordinary step's (which adds any wait for the host).
#[test]
fn the_gpu_train_bench_times_the_passes_behind_a_head_start() {
    use longread_train::bench::{run_train_step, TrainStepSettings};
    if !gpu("the_gpu_train_bench_times_the_passes_behind_a_head_start") {
        return;
    }
    let settings =
        TrainStepSettings { docs: 2, chunks: 3, bf16: false, recompute: true, max_batch_tokens: None, repeat: 3 };
    let result = run_train_step(&fixture("hier/roberta-attention"), settings, &cuda()).unwrap();
    let (host, head) = (result.host.expect("host share on a GPU"), result.head_start.expect("head start on a GPU"));
    assert!(head.gpu_s > 0.0 && head.hold_s > 0.0, "{head:?}");
    assert!(head.gpu_s <= 1.5 * host.gradients_s + 1e-3, "{head:?} against {host:?}");
}

/// The op profiler's GPU timeline (`op_profile::start_timeline`): a product's row holds GPU
/// time, every row's wait is within its span, and the rows add up to the whole.
#[test]
fn a_gpu_timeline_gives_each_op_its_gpu_time() {
    use candle_core::op_profile;
    if !gpu("a_gpu_timeline_gives_each_op_its_gpu_time") {
        return;
    }
    let device = cuda();
    let w = candle_core::Var::from_tensor(&Tensor::ones((2048, 2048), DType::F32, &device).unwrap()).unwrap();
    let x = Tensor::ones((2048, 2048), DType::F32, &device).unwrap();
    device.synchronize().unwrap();
    op_profile::start_timeline(&device, std::time::Duration::ZERO).unwrap();
    let y = x.matmul(w.as_tensor()).unwrap().exp().unwrap().sum_all().unwrap();
    let grads = y.backward().unwrap();
    let t = op_profile::finish_timeline().unwrap();
    assert!(grads.get(w.as_tensor()).is_some());
    let matmul = t.rows.iter().find(|r| r.phase == "forward" && r.op == "matmul").expect("a forward matmul row");
    assert!(matmul.gpu_seconds > 0.0 && matmul.calls == 1, "{matmul:?}");
    for r in &t.rows {
        assert!((0.0..=r.gpu_seconds + 1e-9).contains(&r.waited_seconds), "{r:?}");
    }
    let sum: f64 = t.rows.iter().map(|r| r.gpu_seconds).sum();
    assert!((sum - t.gpu_seconds).abs() < 1e-6 + 1e-3 * t.gpu_seconds, "{sum} against {}", t.gpu_seconds);
    assert!(t.rows.iter().any(|r| r.phase == "backward"), "{:?}", t.rows);

    // Queued behind a hold (the host far ahead): the GPU waited for nothing once the hold
    // ended — the clocks are lined up by the hold's length, not taken to start together.
    let hold = std::time::Duration::from_millis(100);
    device.synchronize().unwrap();
    longread_model::layers::cuda::hold_gpu(&device, hold).unwrap();
    op_profile::start_timeline(&device, hold).unwrap();
    let y = x.matmul(w.as_tensor()).unwrap().exp().unwrap().sum_all().unwrap();
    drop(y.backward().unwrap());
    let t = op_profile::finish_timeline().unwrap();
    assert!(t.waited_seconds < 0.2 * t.gpu_seconds, "waited {} of {} s behind a hold", t.waited_seconds, t.gpu_seconds);
}
