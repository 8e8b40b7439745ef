//! The workspace's candle-core has an op profiler (vendor/README.md, `candle_core::op_profile`):
//! between `start` and `finish` every op with a gradient and every backward node is timed on
//! its own. These cases pin which rows a small graph gives, that nothing is counted outside
//! the two calls, and that the backward pass's own ops are not rows of their own.

use candle_core::op_profile::{self, OpTime};
use candle_core::{DType, Device, Tensor, Var};

fn row<'a>(rows: &'a [OpTime], phase: &str, op: &str) -> Option<&'a OpTime> {
    rows.iter().find(|r| r.phase == phase && r.op == op)
}

#[test]
fn a_small_graph_gives_one_row_per_kind_of_op_in_each_phase() {
    let device = Device::Cpu;
    let w = Var::new(&[[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]], &device).unwrap();
    let x = Tensor::new(&[[1.0f32, 0.0, -1.0], [2.0, 1.0, 0.0]], &device).unwrap();
    op_profile::start(&device).unwrap();
    // [2, 3] · [3, 2] → [2, 2], twice through the same weight; then exp, a sum, a cast.
    let y = x.matmul(w.as_tensor()).unwrap();
    let z = x.matmul(w.as_tensor()).unwrap();
    let f = (y + z.exp().unwrap()).unwrap().sum_all().unwrap().to_dtype(DType::F64).unwrap();
    let grads = f.backward().unwrap();
    let rows = op_profile::finish();
    assert!(grads.get(w.as_tensor()).is_some());

    let forward_matmul = row(&rows, "forward", "matmul").expect("forward matmul row");
    assert_eq!((forward_matmul.calls, forward_matmul.elements, forward_matmul.dtype), (2, 8, DType::F32));
    assert_eq!(row(&rows, "forward", "exp").map(|r| r.calls), Some(1));
    assert_eq!(row(&rows, "forward", "add").map(|r| r.calls), Some(1));
    assert_eq!(row(&rows, "forward", "sum").map(|r| (r.calls, r.elements)), Some((1, 1)));
    let cast = row(&rows, "forward", "to_dtype from f32").expect("cast row");
    assert_eq!((cast.calls, cast.dtype), (1, DType::F64));
    // Backward: one node per forward op (the cast's node is f64, the rest f32) ...
    for (op, calls) in [("matmul", 2), ("exp", 1), ("add", 1), ("sum", 1), ("to_dtype from f32", 1)] {
        assert_eq!(row(&rows, "backward", op).map(|r| r.calls), Some(calls), "backward {op}: {rows:?}");
    }
    // ... and the ops the backward pass makes itself (products, the exp's multiply, the
    // accumulation of the weight's two gradients, `ones_like`) are no rows of their own.
    assert!(row(&rows, "backward", "untracked").is_none() && row(&rows, "backward", "mul").is_none(), "{rows:?}");
    assert!(rows.iter().all(|r| r.seconds >= 0.0 && r.calls > 0), "{rows:?}");
    assert!(rows.windows(2).all(|p| p[0].seconds >= p[1].seconds), "longest first: {rows:?}");
}

#[test]
fn nothing_is_counted_outside_start_and_finish() {
    let device = Device::Cpu;
    let w = Var::new(&[1.0f32, 2.0], &device).unwrap();
    assert!(op_profile::finish().is_empty(), "never started: no rows");
    let _ = w.as_tensor().exp().unwrap();
    op_profile::start(&device).unwrap();
    let constant = Tensor::new(&[1.0f32, 2.0], &device).unwrap().exp().unwrap();
    let tracked = w.as_tensor().sqr().unwrap();
    let rows = op_profile::finish();
    // The constant's exp has no gradient: an `untracked` row; the weight's sqr is tracked.
    assert_eq!(row(&rows, "forward", "untracked").map(|r| r.calls), Some(2), "{rows:?}");
    assert_eq!(row(&rows, "forward", "sqr").map(|r| r.calls), Some(1), "{rows:?}");
    assert!(row(&rows, "forward", "exp").is_none(), "the exp before start is not counted: {rows:?}");
    let _ = (constant.exp().unwrap(), tracked.sum_all().unwrap().backward().unwrap());
    assert!(op_profile::finish().is_empty(), "finish stops the profile");
}

/// The timeline's arithmetic (`op_profile::start_timeline`): an op's GPU span is the time
/// between the GPU reaching the previous mark and its own; the part after the previous mark
/// but before the host had queued the op is counted as the GPU's possible wait.
#[test]
fn the_timeline_counts_the_gpus_wait_for_an_op_queued_late() {
    // The GPU reached the previous mark at 1.0 s and this one at 3.0 s.
    assert_eq!(op_profile::span_and_wait(1.0, 3.0, 0.5), (2.0, 0.0), "queued ahead: no wait");
    assert_eq!(op_profile::span_and_wait(1.0, 3.0, 2.0), (2.0, 1.0), "queued by 2.0: up to 1.0 waited");
    assert_eq!(op_profile::span_and_wait(1.0, 3.0, 5.0), (2.0, 2.0), "never more than the span");
    assert_eq!(op_profile::span_and_wait(1.0, 0.9, 2.0), (0.0, 0.0), "clock noise: nothing negative");
}

/// A timeline needs a GPU: on the CPU it is an error, nothing is recorded and the normal
/// profiler is unaffected.
#[test]
fn the_cpu_has_no_timeline() {
    assert!(op_profile::start_timeline(&Device::Cpu, std::time::Duration::ZERO).is_err());
    assert!(op_profile::finish_timeline().is_err(), "none started");
    let x = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
    op_profile::start(&Device::Cpu).unwrap();
    let y = x.as_tensor().exp().unwrap();
    let rows = op_profile::finish();
    assert_eq!(row(&rows, "forward", "exp").map(|r| r.calls), Some(1), "{rows:?}");
    drop(y);
}
