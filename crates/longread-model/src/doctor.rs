//! What this machine offers longread and what is missing (`longread doctor`): the CPU's
//! instruction sets and the kernels they select, and for NVIDIA GPUs the driver, each card's
//! compute capability and memory, and the CUDA libraries a GPU run opens — each probed by
//! opening the library as the loader would (`dlopen`), whether or not this binary was built
//! with `cuda`, so that a CPU build still says what a GPU build would find.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

use serde::Serialize;

/// The oldest compute capability longread's GPU kernels run on (bf16 tensor cores: Ampere).
pub const MIN_CAPABILITY: (u32, u32) = (8, 0);

/// The NVIDIA driver's library.
const DRIVER: &str = "libcuda.so.1";
/// The CUDA libraries a GPU run opens (built against CUDA 13), and what each is for.
const LIBRARIES: [(&str, &str, bool); 4] = [
    ("libcublas.so.13", "matrix products", true),
    ("libcublasLt.so.13", "matrix products with fused epilogues", true),
    ("libcurand.so.10", "random numbers for dropout", true),
    ("libcudnn.so.9", "cuDNN attention (opt-in: LONGREAD_CUDA_ATTENTION=cudnn)", false),
];

/// Everything `longread doctor` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// longread's version.
    pub version: String,
    /// The CPU.
    pub cpu: CpuReport,
    /// NVIDIA GPUs.
    pub gpu: GpuReport,
}

/// The CPU and the kernels it selects.
#[derive(Debug, Clone, Serialize)]
pub struct CpuReport {
    /// The architecture longread was built for (`x86_64`, `aarch64`).
    pub arch: String,
    /// Cores this process may use.
    pub cores: usize,
    /// The instruction sets longread's kernels look for, with whether the CPU has each.
    pub features: BTreeMap<String, bool>,
    /// The f32 kernels chosen on it.
    pub f32_kernels: String,
    /// The int8 kernels chosen on it (`--precision int8`).
    pub int8_kernels: String,
}

/// NVIDIA GPUs: the driver, the cards, the libraries and whether this binary can use them.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    /// Whether this binary was built with the `cuda` feature.
    pub built_with_cuda: bool,
    /// The compute capability its kernels were compiled for (`CUDA_COMPUTE_CAP` at build time),
    /// when built with `cuda`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub built_for_capability: Option<String>,
    /// The CUDA version the driver supports (`13.0`), when a driver started.
    pub driver: Option<String>,
    /// Why no driver started, when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_problem: Option<String>,
    /// The cards the driver sees.
    pub devices: Vec<GpuDevice>,
    /// Each CUDA library: found on the loader's path or not.
    pub libraries: Vec<Library>,
    /// What stands between this binary and a GPU run; empty when `--device cuda` works.
    pub missing: Vec<String>,
}

/// One card.
#[derive(Debug, Clone, Serialize)]
pub struct GpuDevice {
    /// Its number (`cuda:N`).
    pub index: usize,
    /// Its name as the driver gives it.
    pub name: String,
    /// Compute capability, `major.minor`.
    pub capability: String,
    /// Its memory in bytes.
    pub memory_bytes: u64,
    /// Whether longread's kernels run on it (capability at least [`MIN_CAPABILITY`]).
    pub supported: bool,
}

/// One library.
#[derive(Debug, Clone, Serialize)]
pub struct Library {
    /// Its file name.
    pub name: String,
    /// What longread uses it for.
    pub purpose: String,
    /// Whether a GPU run needs it.
    pub required: bool,
    /// Whether the loader found it.
    pub found: bool,
}

/// Probes this machine.
pub fn examine() -> Report {
    Report { version: env!("CARGO_PKG_VERSION").into(), cpu: cpu(), gpu: gpu() }
}

impl Report {
    /// Whether `--device cuda` would open a GPU here.
    pub fn gpu_ready(&self) -> bool {
        self.gpu.missing.is_empty()
    }

    /// The report for people: one line per finding, then the verdict for each device.
    pub fn to_text(&self) -> String {
        let mut out = format!("longread {}\n", self.version);
        let c = &self.cpu;
        let features: Vec<String> =
            c.features.iter().map(|(name, has)| format!("{name} {}", if *has { "yes" } else { "no" })).collect();
        out += &format!("cpu: {} with {} cores; {}\n", c.arch, c.cores, features.join(", "));
        out += &format!("  kernels: f32 {}, int8 {}\n", c.f32_kernels, c.int8_kernels);
        let g = &self.gpu;
        let built = match (&g.built_with_cuda, &g.built_for_capability) {
            (true, Some(cap)) => format!("built with CUDA, kernels for compute capability {cap}"),
            (true, None) => "built with CUDA".into(),
            (false, _) => "built without CUDA".into(),
        };
        out += &format!("gpu: this binary is {built}\n");
        match (&g.driver, &g.driver_problem) {
            (Some(version), _) => out += &format!("  driver: CUDA {version}, {} GPU(s)\n", g.devices.len()),
            (None, why) => out += &format!("  driver: {}\n", why.as_deref().unwrap_or("none")),
        }
        for d in &g.devices {
            let note = if d.supported { "" } else { " (too old for longread's kernels)" };
            out += &format!(
                "  cuda:{}: {}, compute capability {}{note}, {:.1} GiB\n",
                d.index,
                d.name,
                d.capability,
                d.memory_bytes as f64 / (1u64 << 30) as f64
            );
        }
        for l in &g.libraries {
            let status = match (l.found, l.required) {
                (true, _) => "found",
                (false, true) => "MISSING",
                (false, false) => "not found (optional)",
            };
            out += &format!("  {}: {status} — {}\n", l.name, l.purpose);
        }
        out += "verdict:\n  --device cpu: ready\n";
        match g.missing.is_empty() {
            true => out += "  --device cuda: ready\n",
            false => {
                out += "  --device cuda: not usable\n";
                for m in &g.missing {
                    out += &format!("    - {m}\n");
                }
            }
        }
        out
    }
}

/// The CPU's features and the kernels longread picks on it (as `longread-kernels` picks them).
fn cpu() -> CpuReport {
    let cores = crate::threads::available_cores();
    #[cfg(target_arch = "x86_64")]
    {
        let has = |name: &str| match name {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
            "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
            "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
            "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
            _ => false,
        };
        let names = ["avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512vnni"];
        let features = names.iter().map(|n| (n.to_string(), has(n))).collect();
        let f32_kernels = if has("avx512f") && has("avx512dq") {
            "AVX-512"
        } else if has("avx2") && has("fma") {
            "AVX2 + FMA"
        } else {
            "portable (no AVX2/FMA: several times slower)"
        };
        let int8_kernels = if has("avx512f") && has("avx512vnni") {
            "AVX-512 VNNI"
        } else if has("avx512bw") && has("avx512vl") {
            "AVX-512 BW"
        } else if has("avx2") && has("fma") {
            "AVX2"
        } else {
            "portable"
        };
        CpuReport {
            arch: "x86_64".into(),
            cores,
            features,
            f32_kernels: f32_kernels.into(),
            int8_kernels: int8_kernels.into(),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuReport {
            arch: std::env::consts::ARCH.into(),
            cores,
            features: BTreeMap::new(),
            f32_kernels: "portable".into(),
            int8_kernels: "portable".into(),
        }
    }
}

/// A library opened with `dlopen`, closed when dropped.
struct Opened(*mut c_void);

impl Opened {
    /// Opens `name` as the loader would (`LD_LIBRARY_PATH`, the cache, the system folders).
    fn new(name: &str) -> Option<Self> {
        let name = CString::new(name).ok()?;
        // SAFETY: a NUL-terminated name; RTLD_LAZY resolves nothing until a symbol is used.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        (!handle.is_null()).then(|| Self(handle))
    }

    /// The address of `symbol`, if the library has it.
    fn symbol(&self, symbol: &CStr) -> Option<*mut c_void> {
        // SAFETY: a live handle and a NUL-terminated name.
        let address = unsafe { libc::dlsym(self.0, symbol.as_ptr()) };
        (!address.is_null()).then_some(address)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: a handle dlopen gave and nothing of it kept.
        unsafe { libc::dlclose(self.0) };
    }
}

type CuInit = unsafe extern "C" fn(u32) -> c_int;
type CuIntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` and `_MINOR`.
const CAPABILITY_MAJOR: c_int = 75;
const CAPABILITY_MINOR: c_int = 76;

/// The driver's CUDA version and cards, through its C API.
fn driver() -> std::result::Result<(String, Vec<GpuDevice>), String> {
    let lib = Opened::new(DRIVER)
        .ok_or_else(|| format!("{DRIVER} not found: no NVIDIA driver on this machine (or not on the loader's path)"))?;
    let find = |name: &CStr| lib.symbol(name).ok_or_else(|| format!("{DRIVER} lacks {}", name.to_string_lossy()));
    // SAFETY: each symbol is the driver API's function of that name, cast to its C signature.
    unsafe {
        let init: CuInit = std::mem::transmute(find(c"cuInit")?);
        let version: CuIntOut = std::mem::transmute(find(c"cuDriverGetVersion")?);
        let count: CuIntOut = std::mem::transmute(find(c"cuDeviceGetCount")?);
        let get: CuDeviceGet = std::mem::transmute(find(c"cuDeviceGet")?);
        let name: CuDeviceGetName = std::mem::transmute(find(c"cuDeviceGetName")?);
        let attribute: CuDeviceGetAttribute = std::mem::transmute(find(c"cuDeviceGetAttribute")?);
        let memory: CuDeviceTotalMem = std::mem::transmute(find(c"cuDeviceTotalMem_v2")?);
        let status = init(0);
        if status != 0 {
            return Err(format!(
                "the NVIDIA driver did not start (cuInit error {status}): is a GPU visible to this process?"
            ));
        }
        let mut v = 0;
        let text = match version(&mut v) {
            0 => format!("{}.{}", v / 1000, (v % 1000) / 10),
            status => return Err(format!("cuDriverGetVersion error {status}")),
        };
        let mut n = 0;
        if count(&mut n) != 0 {
            return Err("cuDeviceGetCount failed".into());
        }
        let mut devices = Vec::new();
        for index in 0..n.max(0) {
            let mut device = 0;
            if get(&mut device, index) != 0 {
                continue;
            }
            let mut buffer = [0 as c_char; 256];
            let named = name(buffer.as_mut_ptr(), buffer.len() as c_int, device) == 0;
            let label = if named { CStr::from_ptr(buffer.as_ptr()).to_string_lossy().into_owned() } else { "?".into() };
            let (mut major, mut minor) = (0, 0);
            attribute(&mut major, CAPABILITY_MAJOR, device);
            attribute(&mut minor, CAPABILITY_MINOR, device);
            let mut bytes = 0usize;
            memory(&mut bytes, device);
            let (major, minor) = (major.max(0) as u32, minor.max(0) as u32);
            devices.push(GpuDevice {
                index: index as usize,
                name: label,
                capability: format!("{major}.{minor}"),
                memory_bytes: bytes as u64,
                supported: (major, minor) >= MIN_CAPABILITY,
            });
        }
        Ok((text, devices))
    }
}

/// The compute capability the GPU kernels were compiled for, `9.0` from `CUDA_COMPUTE_CAP=90`.
fn built_for() -> Option<String> {
    let cap = option_env!("CUDA_COMPUTE_CAP")?;
    let digits: u32 = cap.trim().parse().ok()?;
    Some(format!("{}.{}", digits / 10, digits % 10))
}

fn gpu() -> GpuReport {
    let built_with_cuda = cfg!(feature = "cuda");
    let built_for_capability = built_with_cuda.then(built_for).flatten();
    let libraries: Vec<Library> = LIBRARIES
        .iter()
        .map(|&(name, purpose, required)| Library {
            name: name.into(),
            purpose: purpose.into(),
            required,
            found: Opened::new(name).is_some(),
        })
        .collect();
    let found = driver();
    let missing = missing(built_with_cuda, built_for_capability.as_deref(), &found, &libraries);
    let (driver, driver_problem, devices) = match found {
        Ok((version, devices)) => (Some(version), None, devices),
        Err(why) => (None, Some(why), Vec::new()),
    };
    GpuReport { built_with_cuda, built_for_capability, driver, driver_problem, devices, libraries, missing }
}

/// What keeps `--device cuda` from working, each with what to do about it.
fn missing(
    built_with_cuda: bool,
    built_for: Option<&str>,
    driver: &std::result::Result<(String, Vec<GpuDevice>), String>,
    libraries: &[Library],
) -> Vec<String> {
    let devices = driver.as_ref().map_or(&[][..], |(_, devices)| &devices[..]);
    let mut missing = Vec::new();
    if !built_with_cuda {
        missing.push(
            "this binary is built without CUDA: build one with scripts/build_cuda.sh (README \"GPU\")".to_string(),
        );
    }
    match driver {
        Err(why) => missing.push(why.clone()),
        Ok((_, devices)) if devices.is_empty() => missing.push("the driver sees no GPU".into()),
        Ok(_) => {}
    }
    let (major, minor) = MIN_CAPABILITY;
    for d in devices.iter().filter(|d| !d.supported) {
        missing.push(format!(
            "cuda:{} ({}) has compute capability {}; longread's GPU kernels need {major}.{minor} (Ampere) or newer",
            d.index, d.name, d.capability
        ));
    }
    if let Some(built) = built_for {
        for d in devices.iter().filter(|d| d.supported && d.capability != built) {
            missing.push(format!(
                "cuda:{} ({}) has compute capability {}, this binary's kernels are for {built} only: rebuild with \
                 CUDA_COMPUTE_CAP={} scripts/build_cuda.sh",
                d.index,
                d.name,
                d.capability,
                d.capability.replace('.', "")
            ));
        }
    }
    for l in libraries.iter().filter(|l| l.required && !l.found) {
        missing.push(format!(
            "{} ({}) not found: put the CUDA 13 libraries' folder on LD_LIBRARY_PATH (README \"GPU\")",
            l.name, l.purpose
        ));
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(capability: &str, supported: bool) -> GpuDevice {
        GpuDevice { index: 0, name: "Card".into(), capability: capability.into(), memory_bytes: 1 << 34, supported }
    }

    fn libraries(found: bool) -> Vec<Library> {
        LIBRARIES
            .iter()
            .map(|&(name, purpose, required)| Library { name: name.into(), purpose: purpose.into(), required, found })
            .collect()
    }

    #[test]
    fn each_missing_piece_is_named_with_what_to_do() {
        let with = |cards: Vec<GpuDevice>| Ok(("13.0".to_string(), cards));
        assert!(missing(true, Some("9.0"), &with(vec![card("9.0", true)]), &libraries(true)).is_empty());
        let cpu_build = missing(false, None, &with(vec![card("9.0", true)]), &libraries(true));
        assert_eq!(cpu_build.len(), 1);
        assert!(cpu_build[0].contains("scripts/build_cuda.sh"), "{cpu_build:?}");
        let old = missing(true, None, &with(vec![card("7.5", false)]), &libraries(true));
        assert!(old[0].contains("compute capability 7.5") && old[0].contains("8.0 (Ampere)"), "{old:?}");
        let other = missing(true, Some("9.0"), &with(vec![card("8.6", true)]), &libraries(true));
        assert!(other[0].contains("CUDA_COMPUTE_CAP=86"), "{other:?}");
        let no_driver = missing(true, None, &Err("libcuda.so.1 not found".into()), &libraries(true));
        assert_eq!(no_driver, ["libcuda.so.1 not found"]);
        let no_gpu = missing(true, None, &with(Vec::new()), &libraries(true));
        assert_eq!(no_gpu, ["the driver sees no GPU"]);
        let no_libraries = missing(true, None, &with(vec![card("9.0", true)]), &libraries(false));
        // Every required library, not the optional cuDNN.
        assert_eq!(no_libraries.len(), 3, "{no_libraries:?}");
        assert!(no_libraries.iter().all(|m| m.contains("LD_LIBRARY_PATH")) && !no_libraries[2].contains("cudnn"));
    }

    #[test]
    fn this_machine_is_examined_without_failing() {
        let report = examine();
        assert!(report.cpu.cores >= 1);
        let text = report.to_text();
        assert!(text.contains("--device cpu: ready"), "{text}");
        assert_eq!(report.gpu_ready(), report.gpu.missing.is_empty());
        if !cfg!(feature = "cuda") {
            assert!(!report.gpu_ready(), "a CPU build cannot run on a GPU");
        }
    }
}
