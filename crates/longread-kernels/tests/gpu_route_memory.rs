//! What the GPU route's training ops (`AttentionTrain`, `ResidualNormTrain`) keep between the
//! forward and backward passes, measured on the CPU (the ops' reference kernels; the graph is
//! the same on a GPU): the bytes this thread allocated during the forward pass and still holds
//! when it returns, which is what the graph behind the output keeps alive until the backward
//! pass.

#[path = "support/thread_bytes.rs"]
mod thread_bytes;

use candle_core::{DType, Device, Tensor, Var};
use longread_kernels::layers::cuda::{AttentionProbsTrain, AttentionTrain, ResidualNormTrain};
use longread_kernels::layers::dropout::SeededDropout;
use longread_kernels::seeded::Normals;

/// Bytes that `forward` allocated and still holds through its output (the graph), and the output
/// (16 KiB of slack below covers the tensors' own records: Arcs, shapes, graph nodes).
fn held(forward: impl FnOnce() -> Tensor) -> (isize, Tensor) {
    let before = thread_bytes::live();
    let y = forward();
    (thread_bytes::live() - before, y)
}

/// The fused op keeps its output and nothing else it made (its inputs were there before); the
/// composition it replaced on the GPU (split heads, scores, `AttentionProbsTrain`, `p·v`, merged
/// heads, each op keeping its inputs) keeps the `[heads, seq, seq]` scores and probabilities too.
/// Both are differentiable: the backward pass of each runs and reaches `qkv`.
#[test]
fn the_training_attention_keeps_no_seq_by_seq_tensor() {
    let normals = Normals::new(27);
    let device = Device::Cpu;
    let (batch, seq, heads, head_size) = (2usize, 256usize, 4usize, 16usize);
    let hidden = heads * head_size;
    let qkv = Var::from_tensor(&normals.tensor(0f32, 1.0, (batch * seq, 3 * hidden), &device).unwrap()).unwrap();
    let bias = Var::from_tensor(&Tensor::zeros(3 * hidden, DType::F32, &device).unwrap()).unwrap();
    let key_bias = Tensor::zeros((batch, seq), DType::F32, &device).unwrap();
    let dropout = (7, (0.1 * (1u64 << 24) as f64) as u32, 1.0 / 0.9);
    let scale = 0.25;

    let (fused_bytes, fused) = held(|| {
        qkv.as_tensor().apply_op3(bias.as_tensor(), &key_bias, AttentionTrain { heads, scale, dropout }).unwrap()
    });
    let (composed_bytes, composed) = held(|| {
        let biased = qkv.as_tensor().broadcast_add(bias.as_tensor()).unwrap();
        let split = |i: usize| {
            let part = biased.narrow(1, i * hidden, hidden).unwrap();
            part.reshape((batch, seq, heads, head_size)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap()
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let scores = q.matmul(&k.t().unwrap()).unwrap().contiguous().unwrap();
        let probs = scores.apply_op2(&key_bias, AttentionProbsTrain { scale, dropout }).unwrap();
        probs.matmul(&v).unwrap().transpose(1, 2).unwrap().reshape((batch, seq, hidden)).unwrap()
    });

    let output = (batch * seq * hidden * 4) as isize;
    let scores = (batch * heads * seq * seq * 4) as isize;
    println!(
        "held between the passes: fused {fused_bytes} bytes, composed {composed_bytes} bytes \
         (output {output}, one [batch, heads, seq, seq] tensor {scores})"
    );
    assert!(fused_bytes <= output + 16 * 1024, "the fused op holds {fused_bytes} bytes, its output is {output}");
    assert!(
        composed_bytes >= 2 * scores,
        "the composition holds {composed_bytes} bytes, less than scores + probabilities"
    );

    for y in [fused, composed] {
        let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let g = grads.get(qkv.as_tensor()).expect("a gradient for qkv");
        assert!(g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
    }
}

/// The end of a block keeps its output and nothing else it made; the composition it replaced on
/// the GPU (bias, dropout mask and product, residual sum, LayerNorm) keeps at least four
/// `[rows, hidden]` tensors besides its output. Both are differentiable.
#[test]
fn the_block_end_keeps_only_its_output() {
    let normals = Normals::new(75);
    let device = Device::Cpu;
    let (rows, hidden, eps) = (1024usize, 64usize, 1e-5f32);
    let var = |shape: (usize, usize)| Var::from_tensor(&normals.tensor(0f32, 1.0, shape, &device).unwrap()).unwrap();
    let (x, residual, params) = (var((rows, hidden)), var((rows, hidden)), var((3, hidden)));
    let dropout = SeededDropout { p: 0.1, seed: 5 };

    let (fused_bytes, fused) = held(|| {
        x.as_tensor()
            .apply_op3(residual.as_tensor(), params.as_tensor(), ResidualNormTrain { eps, dropout: Some(dropout) })
            .unwrap()
    });
    let (composed_bytes, composed) = held(|| {
        let p = params.as_tensor();
        let biased = x.as_tensor().broadcast_add(&p.get(0).unwrap()).unwrap();
        let s = (dropout.apply(&biased).unwrap() + residual.as_tensor()).unwrap();
        let centered = s.broadcast_sub(&s.mean_keepdim(1).unwrap()).unwrap();
        let var = centered.sqr().unwrap().mean_keepdim(1).unwrap();
        let normed = centered.broadcast_div(&(var + eps as f64).unwrap().sqrt().unwrap()).unwrap();
        normed.broadcast_mul(&p.get(1).unwrap()).unwrap().broadcast_add(&p.get(2).unwrap()).unwrap()
    });

    let tensor = (rows * hidden * 4) as isize;
    println!("held between the passes: fused {fused_bytes} bytes, composed {composed_bytes} bytes (one [rows, hidden] tensor {tensor})");
    assert!(fused_bytes <= tensor + 16 * 1024, "the fused op holds {fused_bytes} bytes, its output is {tensor}");
    assert!(composed_bytes >= 5 * tensor, "the composition holds {composed_bytes} bytes, less than five tensors");

    for y in [fused, composed] {
        let grads = y.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        for v in [&x, &residual, &params] {
            assert!(grads.get(v.as_tensor()).is_some(), "a gradient for every input");
        }
    }
}
