//! The workspace builds candle-core with a patched backward pass (vendor/README.md): a node's
//! first gradient is stored as it is, later ones are added (candle adds every one of them to a
//! fresh zero tensor). These cases pin the sums that patch must keep: a tensor used several
//! times in one op and across ops, subtraction (the stored first gradient is negated), a
//! broadcast bias, a transposed use (the stored gradient must be contiguous), a weight shared by
//! two products — against gradients worked out by hand.

use candle_core::{Device, Tensor, Var};

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn assert_close(got: &Tensor, want: &[f32]) {
    let got = values(got);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5, "element {i}: gradient {g}, expected {w}");
    }
}

#[test]
fn a_tensor_used_several_times_gets_the_sum_of_its_gradients() {
    let x = Var::new(&[1.0f32, -2.0, 3.0], &Device::Cpu).unwrap();
    // f = Σ (x·x + x − 2x)  →  ∂f/∂x = 2x + 1 − 2 = 2x − 1
    let y = ((x.as_tensor() * x.as_tensor()).unwrap() + x.as_tensor()).unwrap();
    let f = (y - x.as_tensor().affine(2.0, 0.0).unwrap()).unwrap().sum_all().unwrap();
    let grads = f.backward().unwrap();
    assert_close(grads.get(x.as_tensor()).unwrap(), &[1.0, -5.0, 5.0]);
}

#[test]
fn a_subtracted_tensor_gets_the_negated_gradient() {
    let a = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
    let b = Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
    // f = Σ 3(a − b)  →  ∂f/∂a = 3, ∂f/∂b = −3 (b's first and only gradient comes from a Sub)
    let f = (a.as_tensor() - b.as_tensor()).unwrap().affine(3.0, 0.0).unwrap().sum_all().unwrap();
    let grads = f.backward().unwrap();
    assert_close(grads.get(a.as_tensor()).unwrap(), &[3.0, 3.0]);
    assert_close(grads.get(b.as_tensor()).unwrap(), &[-3.0, -3.0]);
}

#[test]
fn a_broadcast_bias_and_a_shared_weight_sum_over_their_uses() {
    let dev = Device::Cpu;
    let w = Var::new(&[[1.0f32, 2.0], [3.0, 4.0]], &dev).unwrap();
    let bias = Var::new(&[0.5f32, -0.5], &dev).unwrap();
    let a = Tensor::new(&[[1.0f32, 0.0], [2.0, 1.0], [0.0, 3.0]], &dev).unwrap();
    let b = Tensor::new(&[[1.0f32, 1.0]], &dev).unwrap();
    // f = Σ (a·W + bias) + Σ (b·W)  →  ∂f/∂W[i][j] = Σ_rows a[·][i] + Σ_rows b[·][i],
    // ∂f/∂bias[j] = rows of a = 3
    let first = a.matmul(w.as_tensor()).unwrap().broadcast_add(bias.as_tensor()).unwrap();
    let second = b.matmul(w.as_tensor()).unwrap();
    let f = (first.sum_all().unwrap() + second.sum_all().unwrap()).unwrap();
    let grads = f.backward().unwrap();
    assert_close(grads.get(w.as_tensor()).unwrap(), &[4.0, 4.0, 5.0, 5.0]);
    assert_close(grads.get(bias.as_tensor()).unwrap(), &[3.0, 3.0]);
}

#[test]
fn a_transposed_use_leaves_a_contiguous_gradient_in_the_tensors_own_layout() {
    let dev = Device::Cpu;
    let x = Var::new(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]], &dev).unwrap();
    let c = Tensor::new(&[[1.0f32, 10.0], [2.0, 20.0], [3.0, 30.0]], &dev).unwrap();
    // f = Σ (xᵀ ⊙ c)  →  ∂f/∂x = cᵀ
    let f = (x.as_tensor().t().unwrap() * &c).unwrap().sum_all().unwrap();
    let grads = f.backward().unwrap();
    let g = grads.get(x.as_tensor()).unwrap();
    assert_eq!(g.dims(), &[2, 3]);
    assert!(g.is_contiguous(), "gradients are handed to optimizers that read them as contiguous rows");
    assert_close(g, &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
}

/// `backward_into` (the patch's second part): back-propagating into gradients already held adds
/// this graph's gradient to each variable's total, keeps the totals of variables the graph does
/// not reach, and leaves the tensors it was given unchanged (sums are new tensors).
#[test]
fn back_propagating_into_held_gradients_adds_to_them() {
    let dev = Device::Cpu;
    let x = Var::new(&[1.0f32, -2.0, 3.0], &dev).unwrap();
    let unused = Var::new(&[7.0f32], &dev).unwrap();
    let held_x = Tensor::new(&[10.0f32, 20.0, 30.0], &dev).unwrap();
    let held_unused = Tensor::new(&[5.0f32], &dev).unwrap();
    let mut store = candle_core::backprop::GradStore::default();
    store.insert(x.as_tensor(), held_x.clone());
    store.insert(unused.as_tensor(), held_unused.clone());
    // f = Σ (x·x + 3x)  →  ∂f/∂x = 2x + 3, added to the held 10, 20, 30; x reached twice (one
    // Mul with itself, one affine), so the total takes two contributions.
    let f = ((x.as_tensor() * x.as_tensor()).unwrap() + x.as_tensor().affine(3.0, 0.0).unwrap())
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = f.backward_into(store).unwrap();
    assert_close(grads.get(x.as_tensor()).unwrap(), &[15.0, 19.0, 39.0]);
    assert_close(grads.get(unused.as_tensor()).unwrap(), &[5.0]);
    assert_close(&held_x, &[10.0, 20.0, 30.0]);
    // The same as back-propagating alone and adding afterwards.
    let alone = f.backward().unwrap();
    let summed = (alone.get(x.as_tensor()).unwrap() + &held_x).unwrap();
    assert_close(grads.get(x.as_tensor()).unwrap(), &values(&summed));
    assert_close(&held_unused, &[5.0]);
}
