"""What the benchmark scripts print about the machine they ran on."""


def cpu_description():
    """CPU model and the vector extensions that matter here."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"]
    return f"{model} ({', '.join(f for f in wanted if f in flags) or 'no AVX2'})"
