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

/// Waits for `device` and adds the time since the last mark to the row (on a timeline: notes
/// a mark on the GPU's stream instead, without waiting).
pub(crate) fn record(phase: &'static str, op: Option<&Op>, dtype: DType, elements: usize, device: &Device) {
    if timeline::mark(phase, op, dtype, elements) {
        return;
    }
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
        if on && !timeline::on() {
            // What ran before the backward pass is the forward's (its last op's wait).
            let _ = device.synchronize();
            STATE.with(|s| {
                if let Some(state) = s.borrow_mut().as_mut() {
                    state.mark = Instant::now();
                }
            });
        }
        if on {
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

pub use timeline::{finish_timeline, span_and_wait, start_timeline, OpSpan, Timeline};

/// The GPU's own time per kind of op, without waiting for each: between [`start_timeline`] and
/// [`finish_timeline`] on one thread, each mark (the same marks as [`start`]'s) records a CUDA
/// event on the device's stream and notes the host's clock. At the end, the GPU time between
/// consecutive marks is the row's (`gpu_seconds`), and the part of it the GPU may have spent
/// waiting for the host to queue the op (`waited_seconds`: from the previous mark's end on the
/// GPU to when the host had queued the op, where that came later; an upper bound) is noted
/// apart. The run goes at its own pace (one event per op added), so the table says both what
/// each kind of op costs on the GPU and where the GPU waited for the host.
mod timeline {
    use std::cell::RefCell;
    use std::time::Instant;

    use super::{label, Key, Op};
    use crate::{DType, Device};

    /// One row of [`finish_timeline`]'s table.
    #[derive(Debug, Clone, PartialEq)]
    pub struct OpSpan {
        /// `forward` or `backward`.
        pub phase: &'static str,
        /// The op's kind, as [`super::OpTime::op`].
        pub op: String,
        /// The dtype of the op's output (backward: of the node).
        pub dtype: DType,
        /// How many times.
        pub calls: usize,
        /// Elements of the outputs (nodes), summed.
        pub elements: usize,
        /// GPU seconds from the previous mark to this op's, in all.
        pub gpu_seconds: f64,
        /// Of those, the seconds the GPU may have waited for the host (an upper bound).
        pub waited_seconds: f64,
    }

    /// [`finish_timeline`]'s result.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Timeline {
        /// Rows by (phase, op, dtype), most GPU time first.
        pub rows: Vec<OpSpan>,
        /// GPU seconds from the start to the last mark.
        pub gpu_seconds: f64,
        /// Seconds the GPU may have waited for the host in that time (an upper bound).
        pub waited_seconds: f64,
        /// Host seconds from the start to the last mark.
        pub host_seconds: f64,
    }

    #[cfg(feature = "cuda")]
    mod gpu {
        use std::sync::Arc;
        use std::time::Instant;

        use crate::cuda_backend::cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
        use crate::cuda_backend::WrapErr;
        use crate::{Device, Result};

        pub(super) struct Clock {
            stream: Arc<CudaStream>,
            start: CudaEvent,
            pub(super) host_start: Instant,
            spare: Vec<CudaEvent>,
        }

        impl Clock {
            /// Events made ahead (making one costs more than recording it).
            const SPARE: usize = 4096;

            pub(super) fn start(device: &Device) -> Result<Self> {
                let Device::Cuda(cuda) = device else {
                    crate::bail!("a GPU timeline needs a CUDA device")
                };
                let stream = cuda.cuda_stream();
                let new = || stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).w();
                let spare = (0..Self::SPARE).map(|_| new()).collect::<Result<Vec<_>>>()?;
                let start = new()?;
                start.record(&stream).w()?;
                Ok(Self { stream, start, host_start: Instant::now(), spare })
            }

            /// An event recorded after the work queued so far (`None` when recording failed).
            pub(super) fn event(&mut self) -> Option<CudaEvent> {
                let event = match self.spare.pop() {
                    Some(e) => e,
                    None => self.stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).ok()?,
                };
                event.record(&self.stream).ok()?;
                Some(event)
            }

            /// GPU seconds from the start to `event` (waits for it).
            pub(super) fn seconds(&self, event: &CudaEvent) -> Result<f64> {
                event.synchronize().w()?;
                Ok(f64::from(self.start.elapsed_ms(event).w()?) / 1e3)
            }
        }

        pub(super) type Event = CudaEvent;
    }

    #[cfg(not(feature = "cuda"))]
    mod gpu {
        use std::time::Instant;

        use crate::{Device, Result};

        pub(super) struct Clock {
            pub(super) host_start: Instant,
        }

        pub(super) enum Event {}

        impl Clock {
            pub(super) fn start(_: &Device) -> Result<Self> {
                crate::bail!("a GPU timeline needs candle's `cuda` feature")
            }

            pub(super) fn event(&mut self) -> Option<Event> {
                None
            }

            pub(super) fn seconds(&self, event: &Event) -> Result<f64> {
                match *event {}
            }
        }
    }

    struct Mark {
        key: Key,
        elements: usize,
        host: Instant,
        event: gpu::Event,
    }

    struct State {
        clock: gpu::Clock,
        /// Seconds the GPU reaches the start after the host does (see [`start_timeline`]).
        lag: f64,
        marks: Vec<Mark>,
    }

    thread_local! {
        static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    }

    /// Starts a timeline of this thread's ops on `device` (a GPU). The two clocks start
    /// together when the GPU is idle (synchronize first) and `gpu_lag` is zero; when work was
    /// queued just before that the GPU will take `gpu_lag` to finish (a hold, so that the host
    /// runs ahead), the GPU's clock starts that much later than the host's.
    pub fn start_timeline(device: &Device, gpu_lag: std::time::Duration) -> crate::Result<()> {
        let clock = gpu::Clock::start(device)?;
        let lag = gpu_lag.as_secs_f64();
        STATE.with(|s| *s.borrow_mut() = Some(State { clock, lag, marks: Vec::new() }));
        super::ON.with(|on| on.set(true));
        Ok(())
    }

    /// Whether a timeline is being recorded on this thread.
    pub(super) fn on() -> bool {
        STATE.with(|s| s.borrow().is_some())
    }

    /// Notes a mark on the timeline; `false` when none is being recorded.
    pub(super) fn mark(phase: &'static str, op: Option<&Op>, dtype: DType, elements: usize) -> bool {
        STATE.with(|s| {
            let mut state = s.borrow_mut();
            let Some(state) = state.as_mut() else { return false };
            if let Some(event) = state.clock.event() {
                let label = op.map_or_else(|| "untracked".to_string(), label);
                state.marks.push(Mark { key: (phase, label, dtype), elements, host: Instant::now(), event });
            }
            true
        })
    }

    /// Stops the timeline, waits for the GPU and returns the table (an error when none was
    /// started or the GPU's clock could not be read).
    pub fn finish_timeline() -> crate::Result<Timeline> {
        super::ON.with(|on| on.set(false));
        let Some(state) = STATE.with(|s| s.borrow_mut().take()) else {
            crate::bail!("no timeline was started on this thread")
        };
        let mut rows: std::collections::HashMap<Key, OpSpan> = std::collections::HashMap::new();
        let (mut gpu_before, mut waited_total, mut host_last) = (0.0f64, 0.0f64, 0.0f64);
        for mark in state.marks {
            let gpu = state.clock.seconds(&mark.event)?;
            let host = mark.host.duration_since(state.clock.host_start).as_secs_f64() - state.lag;
            let (span, waited) = span_and_wait(gpu_before, gpu, host);
            let (phase, op, dtype) = mark.key.clone();
            let row = rows.entry(mark.key).or_insert(OpSpan {
                phase,
                op,
                dtype,
                calls: 0,
                elements: 0,
                gpu_seconds: 0.0,
                waited_seconds: 0.0,
            });
            row.calls += 1;
            row.elements += mark.elements;
            row.gpu_seconds += span;
            row.waited_seconds += waited;
            waited_total += waited;
            gpu_before = gpu.max(gpu_before);
            host_last = host;
        }
        let mut rows: Vec<OpSpan> = rows.into_values().collect();
        rows.sort_by(|a, b| b.gpu_seconds.total_cmp(&a.gpu_seconds));
        Ok(Timeline { rows, gpu_seconds: gpu_before, waited_seconds: waited_total, host_seconds: host_last })
    }

    /// An op's GPU span and the part of it the GPU may have waited for the host, from the GPU
    /// time the previous mark was reached (`before`), this one's (`gpu`) and the host time the
    /// op had been queued by (`host`), both clocks from the start: the GPU cannot have started
    /// the op's last launch before the host queued it, so from `before` to `host` (at most to
    /// `gpu`) it may have been idle.
    pub fn span_and_wait(before: f64, gpu: f64, host: f64) -> (f64, f64) {
        let span = (gpu - before).max(0.0);
        let waited = (host.min(gpu) - before).clamp(0.0, span);
        (span, waited)
    }
}
