//! Which kernels a tensor's device runs: the CPU route (`layers::fused`, `layers::int8`) or the
//! GPU route (`layers::cuda`). Layers ask here instead of asking the device, so that a test can
//! run the GPU route's training on CPU tensors ([`emulate_gpu`]): the route's ops then run their
//! f32 reference kernels (`layers/cuda/reference.rs`), and its composition — which ops, in which
//! order, with which backward passes — is checked against the CPU route without a GPU. Inference
//! decisions (the in-place GPU kernels of `layers::cuda`) still ask the device.

use std::cell::Cell;

use candle_core::Device;

thread_local! {
    static EMULATED: Cell<bool> = const { Cell::new(false) };
}

/// Whether tensors on `device` take the GPU route: on a GPU, or on the CPU inside [`emulate_gpu`].
pub fn gpu(device: &Device) -> bool {
    device.is_cuda() || (device.is_cpu() && EMULATED.with(Cell::get))
}

/// Whether tensors on `device` take the CPU route (its fused and int8 kernels).
pub fn cpu(device: &Device) -> bool {
    device.is_cpu() && !EMULATED.with(Cell::get)
}

/// Runs `f` with CPU tensors on the GPU route, on this thread (f32 training: what the reference
/// kernels cover). For tests; the route is restored when `f` returns or panics.
pub fn emulate_gpu<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            EMULATED.with(|e| e.set(self.0));
        }
    }
    let _restore = Restore(EMULATED.with(|e| e.replace(true)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulation_is_scoped_to_the_call() {
        let cpu_device = Device::Cpu;
        assert!(cpu(&cpu_device) && !gpu(&cpu_device));
        let inside = emulate_gpu(|| (cpu(&cpu_device), gpu(&cpu_device)));
        assert_eq!(inside, (false, true));
        assert!(cpu(&cpu_device) && !gpu(&cpu_device), "restored after the call");
        let panicked = std::panic::catch_unwind(|| emulate_gpu(|| panic!("inside")));
        assert!(panicked.is_err());
        assert!(cpu(&cpu_device), "restored after a panic");
    }
}
