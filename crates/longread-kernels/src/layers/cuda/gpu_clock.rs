//! The GPU's own time for a piece of work, apart from the host's: a benchmark holds the GPU
//! busy ([`hold_gpu`]) while the host queues the work behind the hold, and times the work on
//! the GPU's clock between two [`GpuMark`]s (CUDA events). Without the hold, a GPU whose work
//! is made of many small kernels may wait for the host to queue the next one, and the wall
//! time of the work is the slower of the two at each moment; with it, the time between the
//! marks is what the GPU takes when it never waits (`bench --workload train`'s `head_start`).

use std::time::Duration;

use candle_core::{Device, Result};

/// Queues on `device`'s stream a kernel of one thread that keeps the GPU busy for `hold` by
/// its clock: what the host queues next starts after it. An error on the CPU.
pub fn hold_gpu(device: &Device, hold: Duration) -> Result<()> {
    imp::hold_gpu(device, hold)
}

/// A point in the work queued on a GPU's stream (a CUDA event with timing): once the GPU has
/// reached two of them, [`GpuMark::seconds_until`] gives the GPU time between them.
pub struct GpuMark(imp::Mark);

impl GpuMark {
    /// A mark after the work queued on `device` so far. An error on the CPU.
    pub fn now(device: &Device) -> Result<Self> {
        imp::Mark::now(device).map(Self)
    }

    /// Seconds of GPU time from this mark to `later`, after waiting for the GPU to reach
    /// `later`.
    pub fn seconds_until(&self, later: &GpuMark) -> Result<f64> {
        self.0.seconds_until(&later.0)
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use std::time::Duration;

    use candle_core::cuda_backend::cudarc::driver::{sys::CUevent_flags, CudaEvent};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{Device, Result};

    pub(super) fn hold_gpu(device: &Device, hold: Duration) -> Result<()> {
        let nanos = u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX);
        super::super::launch::hold(device.as_cuda_device()?, nanos)
    }

    pub(super) struct Mark(CudaEvent);

    impl Mark {
        pub(super) fn now(device: &Device) -> Result<Self> {
            let stream = device.as_cuda_device()?.cuda_stream();
            stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).w().map(Self)
        }

        pub(super) fn seconds_until(&self, later: &Mark) -> Result<f64> {
            later.0.synchronize().w()?;
            Ok(f64::from(self.0.elapsed_ms(&later.0).w()?) / 1e3)
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use std::time::Duration;

    use candle_core::{Device, Result};

    pub(super) fn hold_gpu(_: &Device, _: Duration) -> Result<()> {
        candle_core::bail!("hold_gpu runs on CUDA only")
    }

    pub(super) struct Mark;

    impl Mark {
        pub(super) fn now(_: &Device) -> Result<Self> {
            candle_core::bail!("GPU marks run on CUDA only")
        }

        pub(super) fn seconds_until(&self, _: &Mark) -> Result<f64> {
            candle_core::bail!("GPU marks run on CUDA only")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_has_no_gpu_clock() {
        let hold = hold_gpu(&Device::Cpu, Duration::from_millis(1)).unwrap_err();
        assert!(hold.to_string().contains("CUDA only"), "{hold}");
        let mark = GpuMark::now(&Device::Cpu).err().expect("no mark on the CPU");
        assert!(mark.to_string().contains("CUDA only"), "{mark}");
    }
}
