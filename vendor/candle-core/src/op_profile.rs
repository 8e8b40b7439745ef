//! longread addition (see vendor/README.md): time per kind of op of a forward and a backward
//! pass, for finding where a GPU spends a training step.
//!
//! Between [`start`] and [`finish`] on one thread, every tensor made by an op with a gradient
//! (`forward`) and every node of [`Tensor::backward`] (`backward`: that node's gradient
//! computed and added into its inputs') waits for its device, and the time since the previous
//! mark is added to its (phase, op, dtype) row. Each op thus runs alone on the device: the
//! total is slower than a normal run; the shares are what matters. Ops without a gradient
//! (constants, masks, `apply_op*_no_bwd`) fall in one `untracked` row; ops that only make a
//! view (reshape, transpose, narrow, broadcast) cost nothing in the forward pass and show up
//! in the backward one. Off (the default), the cost is one thread-local read per tensor made.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Instant;

use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::{DType, Device, Tensor};

/// One row of [`finish`]'s table.
#[derive(Debug, Clone, PartialEq)]
pub struct OpTime {
    /// `forward` or `backward`.
    pub phase: &'static str,
    /// The op's kind: `matmul`, `add`, `to_dtype`, `copy`, a custom op's name, ...
    pub op: String,
    /// The dtype of the op's output (backward: of the node whose gradient was computed).
    pub dtype: DType,
    /// Seconds in all.
    pub seconds: f64,
    /// How many times.
    pub calls: usize,
    /// Elements of the outputs (backward: of the nodes), summed.
    pub elements: usize,
}

type Key = (&'static str, String, DType);

struct State {
    mark: Instant,
    rows: HashMap<Key, (f64, usize, usize)>,
}

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    /// Inside `backward`, the ops that make gradients are the node's own cost, not rows.
    static IN_BACKWARD: Cell<bool> = const { Cell::new(false) };
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Starts timing this thread's ops (forgetting any earlier table).
pub fn start(device: &Device) -> crate::Result<()> {
    device.synchronize()?;
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            mark: Instant::now(),
            rows: HashMap::new(),
        })
    });
    ON.with(|on| on.set(true));
    Ok(())
}

/// Stops timing and returns the table, longest rows first (empty when not started).
pub fn finish() -> Vec<OpTime> {
    ON.with(|on| on.set(false));
    let state = STATE.with(|s| s.borrow_mut().take());
    let mut rows: Vec<OpTime> = state
        .map(|s| s.rows)
        .unwrap_or_default()
        .into_iter()
        .map(|((phase, op, dtype), (seconds, calls, elements))| OpTime {
            phase,
            op,
            dtype,
            seconds,
            calls,
            elements,
        })
        .collect();
    rows.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    rows
}

pub(crate) fn active() -> bool {
    ON.with(|on| on.get()) && !IN_BACKWARD.with(|b| b.get())
}

/// Waits for `device` and adds the time since the last mark to the row.
pub(crate) fn record(phase: &'static str, op: Option<&Op>, dtype: DType, elements: usize, device: &Device) {
    // A failed wait leaves the time in the next row; the op's own error surfaces elsewhere.
    let _ = device.synchronize();
    let now = Instant::now();
    STATE.with(|s| {
        if let Some(state) = s.borrow_mut().as_mut() {
            let seconds = now.duration_since(state.mark).as_secs_f64();
            let label = op.map_or_else(|| "untracked".to_string(), label);
            let row = state.rows.entry((phase, label, dtype)).or_insert((0.0, 0, 0));
            row.0 += seconds;
            row.1 += 1;
            row.2 += elements;
            state.mark = Instant::now();
        }
    });
}

/// Records a forward op that made `tensor` (called where tensors are made).
pub(crate) fn forward(op: Option<&Op>, tensor_dtype: DType, elements: usize, device: &Device) {
    if active() {
        record("forward", op, tensor_dtype, elements, device);
    }
}

/// Brackets `Tensor::backward`: the ops it makes are not rows of their own.
pub(crate) struct BackwardScope {
    on: bool,
}

impl BackwardScope {
    pub(crate) fn enter(device: &Device) -> Self {
        let on = active();
        if on {
            // What ran before the backward pass is the forward's (its last op's wait).
            let _ = device.synchronize();
            STATE.with(|s| {
                if let Some(state) = s.borrow_mut().as_mut() {
                    state.mark = Instant::now();
                }
            });
            IN_BACKWARD.with(|b| b.set(true));
        }
        Self { on }
    }

    /// Records one node's gradient step.
    pub(crate) fn node(&self, node: &Tensor, op: &Op) {
        if self.on {
            record("backward", Some(op), node.dtype(), node.elem_count(), node.device());
        }
    }
}

impl Drop for BackwardScope {
    fn drop(&mut self) {
        if self.on {
            IN_BACKWARD.with(|b| b.set(false));
        }
    }
}

/// A short name for an op's kind.
fn label(op: &Op) -> String {
    let name = match op {
        Op::Binary(_, _, b) => match b {
            BinaryOp::Add => "add",
            BinaryOp::Mul => "mul",
            BinaryOp::Sub => "sub",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        },
        Op::Unary(_, u) => match u {
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Abs => "abs",
            UnaryOp::Neg => "neg",
            UnaryOp::Recip => "recip",
            UnaryOp::Sqr => "sqr",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Erf => "erf",
            UnaryOp::Relu => "relu",
            UnaryOp::Silu => "silu",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Sign => "sign",
        },
        Op::Cmp(..) => "cmp",
        Op::Reduce(_, r, _) => match r {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        },
        Op::Matmul(..) => "matmul",
        Op::Gather(..) => "gather",
        Op::Scatter(..) => "scatter",
        Op::ScatterAdd(..) => "scatter_add",
        Op::IndexSelect(..) => "index_select",
        Op::IndexAdd(..) => "index_add",
        Op::WhereCond(..) => "where_cond",
        Op::Conv1D { .. } => "conv1d",
        Op::ConvTranspose1D { .. } => "conv_transpose1d",
        Op::Conv2D { .. } => "conv2d",
        Op::ConvTranspose2D { .. } => "conv_transpose2d",
        Op::AvgPool2D { .. } => "avg_pool2d",
        Op::MaxPool2D { .. } => "max_pool2d",
        Op::UpsampleNearest1D { .. } => "upsample_nearest1d",
        Op::UpsampleNearest2D { .. } => "upsample_nearest2d",
        Op::UpsampleBilinear2D { .. } => "upsample_bilinear2d",
        Op::Cat(..) => "cat",
        Op::Affine { .. } => "affine",
        Op::ToDType(arg) => return format!("to_dtype from {}", arg.dtype().as_str()),
        Op::Copy(..) => "copy",
        Op::Broadcast(..) => "broadcast",
        Op::Narrow(..) => "narrow",
        Op::SliceScatter0(..) => "slice_scatter",
        Op::Reshape(..) => "reshape",
        Op::ToDevice(..) => "to_device",
        Op::Transpose(..) => "transpose",
        Op::Permute(..) => "permute",
        Op::Elu(..) => "elu",
        Op::Powf(..) => "powf",
        Op::CustomOp1(_, c) => return format!("custom {}", c.name()),
        Op::CustomOp2(_, _, c) => return format!("custom {}", c.name()),
        Op::CustomOp3(_, _, _, c) => return format!("custom {}", c.name()),
    };
    name.to_string()
}
