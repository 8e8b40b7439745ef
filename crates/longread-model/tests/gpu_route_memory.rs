//! What one transformer layer of roberta-base's shape keeps between the forward and backward
//! passes of training, per 512-token chunk, on the GPU route (emulated on the CPU with its ops'
//! f32 reference kernels: the graph is the GPU's, its tensors f32) and on the CPU route: the
//! bytes this thread allocated during the forward pass and still holds when it returns, at 1 and
//! 2 chunks (the difference is the cost of one more chunk). The GPU route runs its training ops
//! that keep only their inputs (`AttentionTrain`, `ResidualNormTrain`, `GeluDenseTrain`: commits
//! f6250d5, e4ac1f9, 4558611; BENCHMARKS.md "GPU").

#[path = "../../longread-kernels/tests/support/thread_bytes.rs"]
mod thread_bytes;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use longread_kernels::seeded::Normals;
use longread_model::config::EncoderConfig;
use longread_model::encoder::{mask_bias, EncoderLayer};
use longread_model::layers::cuda::KeyLengths;
use longread_model::{DropoutRng, Mode};

/// Bytes held after one training forward of `layer` over `chunks` sequences of 512 tokens
/// (the input made before counting; the output, and the graph behind it, held); with `flash`,
/// FlashAttention-2 as the attention (`FlashAttentionTrain`, given the sequences' lengths).
fn held(layer: &EncoderLayer, chunks: usize, flash: bool) -> isize {
    let normals = Normals::new(22);
    let device = Device::Cpu;
    let xs = Var::from_tensor(&normals.tensor(0f32, 1.0, (chunks, 512, 768), &device).unwrap()).unwrap();
    let ones = Tensor::ones((chunks, 512), DType::U32, &device).unwrap();
    let mask = mask_bias(&ones, DType::F32).unwrap();
    let lengths = KeyLengths::right_padded(&ones).unwrap().unwrap();
    let rng = DropoutRng::new(1);
    let before = thread_bytes::live();
    let y = if flash {
        layer.forward_with_lengths(xs.as_tensor(), &mask, &lengths, Mode::Train(&rng)).unwrap()
    } else {
        layer.forward(xs.as_tensor(), &mask, None, Mode::Train(&rng)).unwrap()
    };
    let bytes = thread_bytes::live() - before;
    drop(y);
    bytes
}

/// One roberta-base-shaped layer with random weights and dropout `probs_dropout` on the
/// attention probabilities (the weights' map returned to keep them alive).
fn roberta_base_layer(probs_dropout: f64) -> (VarMap, EncoderLayer) {
    let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
        "model_type": "roberta", "vocab_size": 100, "hidden_size": 768, "num_hidden_layers": 1,
        "num_attention_heads": 12, "intermediate_size": 3072, "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": probs_dropout, "layer_norm_eps": 1e-5
    }))
    .unwrap();
    let vars = VarMap::new();
    let layer = EncoderLayer::load(VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu), &cfg).unwrap();
    (vars, layer)
}

#[test]
fn a_training_layer_keeps_about_a_dozen_activations_per_chunk_on_the_gpu_route() {
    let (_vars, layer) = roberta_base_layer(0.1);
    let per_chunk = |gpu_route: bool| {
        let measure = |chunks| {
            if gpu_route {
                longread_model::route::emulate_gpu(|| held(&layer, chunks, false))
            } else {
                held(&layer, chunks, false)
            }
        };
        let (one, two) = (measure(1), measure(2));
        (one, two - one)
    };
    let mb = |b: isize| b as f64 / 1e6;
    let (gpu_one, gpu_chunk) = per_chunk(true);
    let (cpu_one, cpu_chunk) = per_chunk(false);
    // One [512, 768] f32 activation.
    let activation = 512 * 768 * 4;
    println!(
        "held between the passes, f32, one roberta-base layer: GPU route {:.2} MB for one chunk, {:.2} MB per \
         further chunk ({:.1} activations of [512, 768]); CPU route {:.2} MB, {:.2} MB per chunk",
        mb(gpu_one),
        mb(gpu_chunk),
        gpu_chunk as f64 / activation as f64,
        mb(cpu_one),
        mb(cpu_chunk)
    );
    // By count: the input, the q/k/v product (3), the merged context, the attention's output
    // product and block output, the feed-forward's first product (4), its output product: 12
    // activations of [512, 768].
    assert!(gpu_chunk <= 13 * activation, "{} MB per chunk", mb(gpu_chunk));
    assert!(cpu_chunk > 0 && gpu_chunk > 0);
}

/// The same layer with FlashAttention-2 as the GPU route's attention (`FlashAttentionTrain`,
/// which adds the q/k/v bias itself and keeps only the product and each row's log-sum-exp):
/// no more than the default route's dozen activations per chunk. Attention dropout is off here:
/// only the CUDA kernel draws it (the CPU loops are the reference without it).
#[test]
fn flash_attention_training_keeps_no_more_than_the_default_gpu_route() {
    let (_vars, layer) = roberta_base_layer(0.0);
    let per_chunk = |flash: bool| {
        let measure = |chunks| longread_model::route::emulate_gpu(|| held(&layer, chunks, flash));
        measure(2) - measure(1)
    };
    let (flash, default) = (per_chunk(true), per_chunk(false));
    let activation = (512 * 768 * 4) as f64;
    println!(
        "held per further 512-token chunk, f32, one roberta-base layer, GPU route: FlashAttention-2 {:.2} MB \
         ({:.1} activations of [512, 768]), the default attention op {:.2} MB ({:.1})",
        flash as f64 / 1e6,
        flash as f64 / activation,
        default as f64 / 1e6,
        default as f64 / activation
    );
    // The log-sum-exp adds 12 heads × 512 f32 per chunk: 24 KB.
    assert!(flash <= default + 64 * 1024, "FlashAttention-2 {flash} bytes per chunk, the default {default}");
}
